"""Worker-side first tier and complete time (build_all with on_first, as the job runs it),
for a new seed ("inputs") and for blocks moved and back ("blocks"), medians of 3; prints
one line per configuration. Not a test. Run from a checkout's root:

    QT_QPA_PLATFORM=offscreen python assets/benchmarks/interactive/numbers/worker_time.py \
        forward:1024:64:64 backward:4096:128:2   # pass:N:d:block
"""

import sys
import time

import numpy as np

from desktop.state.config import Config
from desktop.state.worker import build_all


def cfg(p, n, d, b, seed):
    return Config(n=n, d=d, dv=d, block_q=b, block_k=b, pass_name=p, input="random", seed=seed)


def once(c):
    t = {}
    t0 = time.perf_counter()
    build_all(
        c,
        on_first=lambda *a: t.setdefault("first", time.perf_counter() - t0),
        check=lambda: None,
        row=0,
        key=0,
    )
    t["complete"] = time.perf_counter() - t0
    t.setdefault("first", t["complete"])  # one part: the first tier is the complete one
    return t


out = {}
for spec in sys.argv[1:]:
    p, n, d, b = spec.split(":")
    n, d, b = int(n), int(d), int(b)
    base = 100 + 10 * len(out)
    once(cfg(p, n, d, b, base))
    res = {"inputs": [], "blocks": []}
    for k in range(3):
        res["inputs"].append(once(cfg(p, n, d, b, base + 1 + k)))
    o = b * 2 if b < 64 else b // 2
    last = cfg(p, n, d, b, base + 3)
    for _ in range(3):
        res["blocks"].append(once(last.replace(block_q=o, block_k=o)))
        res["blocks"].append(once(last))
    row = {
        kind: {
            m: round(float(np.median([x[m] for x in v])) * 1e3, 1) for m in ("first", "complete")
        }
        for kind, v in res.items()
    }
    out[spec] = row
    print(spec, row, flush=True)
