"""Where one backward's GPU time goes, through autograd: main kernel, pre / post kernels,
memsets, other kernels, and the time the GPU waits inside the call (ours and FA4).

Run on the GPU machine (torch; FA4 where ``flash_attn.cute`` imports):

    python -m compute.gpu.lab.backward_parts --n 4096 --d 64 128 [--paths ours] [--json F]

The inputs and paths are ``backward_vs_fa4``'s (B*N = 16384 tokens, H*d = 2048; "ours"
through ``torch_attention``'s autograd, FA4 through ``flash_attn_func``'s). Per path and
case: the median wall time of one backward between CUDA events (`--reps` runs after a
warm-up), then `--reps` runs under torch.profiler, whose GPU items are summed by kind and
divided by the runs; "gap" is the wall time less all GPU items (launch latency and host time
the GPU waits for).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

# Kernel-name pieces that give a GPU item's kind, per path (first match wins).
KINDS = {
    "ours": (("flash_bwd_pre", "pre"), ("flash_bwd_ws", "main"), ("post_frag", "post")),
    "fa4": (("Preprocess", "pre"), ("BackwardSm90", "main"), ("Postprocess", "post")),
}


def _kind(path: str, name: str) -> str:
    if "memset" in name.lower():
        return "memset"
    for piece, kind in KINDS[path]:
        if piece in name:
            return kind
    return "other"


def measure(torch: Any, path: str, run: Any, reps: int) -> dict:
    """Median wall ms of `run` and its GPU items in us per run, by kind."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    walls = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        walls.append(a.elapsed_time(b))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            run()
        torch.cuda.synchronize()
    us: dict[str, float] = {}
    names: dict[str, float] = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        t = (e.time_range.end - e.time_range.start) / reps
        kind = _kind(path, e.name)
        us[kind] = us.get(kind, 0.0) + t
        names[e.name[:60]] = names.get(e.name[:60], 0.0) + t
    wall_us = statistics.median(walls) * 1e3
    us["gap"] = wall_us - sum(us.values())
    return {"wall_us": wall_us, "us": us, "kernels": names}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[4096])
    p.add_argument("--d", type=int, nargs="+", default=[64, 128])
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--causal", type=int, nargs="+", default=[1, 0])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--paths", nargs="+", choices=sorted(KINDS), default=sorted(KINDS))
    p.add_argument("--json")
    args = p.parse_args(argv)

    import cupy as cp
    import torch

    from .backward_vs_fa4 import _fa4, _fa4_prepare, _ours_prepare
    from .flash_bwd_vs_sdpa import _inputs
    from .flash_vs_sdpa import MODEL_DIM, TOKENS

    fa4 = _fa4()
    rows = []
    kinds = ("main", "pre", "post", "memset", "other", "gap")
    print("path  d  N  causal  wall_us  " + "  ".join(kinds))
    for n in args.n:
        for d in args.d:
            for causal in (bool(c) for c in args.causal):
                bh = (TOKENS // n) * (MODEL_DIM // d)
                q, k, v, _, do, _ = _inputs(cp, bh, n, d, args.dtype, causal, 1, n + d)[0]
                paths = {"ours": _ours_prepare(q, k, v, do, causal)}
                if fa4 is not None and "fa4" in args.paths:
                    paths["fa4"] = _fa4_prepare(fa4, q, k, v, do, causal)
                for path, run in paths.items():
                    m = measure(torch, path, run, args.reps)
                    rows.append({"path": path, "n": n, "d": d, "causal": causal, **m})
                    cells = "  ".join(f"{m['us'].get(x, 0.0):7.1f}" for x in kinds)
                    print(f"{path}  {d}  {n}  {int(causal)}  {m['wall_us']:8.1f}  {cells}")
                    sys.stdout.flush()
                del paths, q, k, v, do
                cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
