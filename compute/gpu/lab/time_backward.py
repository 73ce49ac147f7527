"""Time the teaching backward kernel against the dense GPU backward; print a table, write JSON.

Each side is timed from what its own forward saved: the tiled backward from O and L
(`tiled_attention_gpu(..., save_lse=True)`), the dense one from the stored P. TFLOP/s
counts the backward's work as 2.5 × the forward's 4·BH·N_q·N_k·d FLOPs, halved under
causal masking. Errors are max |g − ref| / max(|ref|, 1) against the float64 dense
reference (`compute.attention_backward`) on head 0. One call also proves the counting
build equal to the backward ledger at N = 1024. `--smoke` runs a few odd shapes once
(for compute-sanitizer) and times nothing.

    python -m compute.gpu.lab.time_backward --json assets/benchmarks/gpu_backward_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ... import attention_backward, pass_ledger
from ..backward import tiled_attention_backward_gpu
from ..dense_backward import dense_attention_backward_gpu, dense_probabilities_gpu
from ..device import status
from ..dtypes import KERNEL_DTYPES
from ..tiled import tiled_attention_gpu
from ..timing import rotation_count, time_cuda

SIZES = (1024, 2048, 4096)
DTYPES = KERNEL_DTYPES


def _inputs(seed: int, bh: int, n: int, d: int, dtype: str):
    import cupy

    rng = np.random.default_rng(seed)
    return [cupy.asarray(rng.standard_normal((bh, n, d)).astype(dtype)) for _ in range(4)]


def _error(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1.0))


def _head0_reference(q, k, v, do, causal):
    """float64 dense gradients of head 0 (on the dtype-rounded inputs)."""
    host = [x[0].get().astype(np.float64) for x in (q, k, v, do)]
    return attention_backward(*host, causal=causal, method="dense", dtype="float64")


def _worst_error(grads, ref) -> float:
    """Worst error over dQ, dK, dV of head 0."""
    return max(_error(g[0].get(), r) for g, r in zip(grads, ref, strict=True))


def measure(n: int, dtype: str, causal: bool, bh: int, d: int, bq: int, bk: int) -> list[dict]:
    """Both backwards at one configuration: median ms, TFLOP/s, error."""
    import cupy

    set_bytes = 6 * bh * n * d * np.dtype(dtype).itemsize
    sets = []
    for s in range(rotation_count(set_bytes, status().l2_bytes, cap=4)):
        q, k, v, do = _inputs(s, bh, n, d, dtype)
        fwd = tiled_attention_gpu(q, k, v, block_q=bq, block_k=bk, causal=causal, save_lse=True)
        sets.append((q, k, v, do, fwd.out, fwd.lse))
    flops = 2.5 * 4 * bh * n * n * d / (2 if causal else 1)

    def tiled(q, k, v, do, o, lse):
        r = tiled_attention_backward_gpu(
            q, k, v, o, do, lse, block_q=bq, block_k=bk, causal=causal
        )  # fmt: skip
        return r.dq, r.dk, r.dv

    rows = []
    t = time_cuda(tiled, sets, warmup=2, repeats=10)
    ref = _head0_reference(*sets[0][:4], causal)
    err = _worst_error(tiled(*sets[0]), ref)
    rows.append(("tiled", f"{bq}x{bk}", t, err))
    del sets[1:]  # the dense side needs P per set: two sets at most
    q, k, v, do, _, _ = sets[0]
    dense_sets = []
    for s in range(2):
        q, k, v, do = _inputs(s, bh, n, d, dtype) if s else (q, k, v, do)
        dense_sets.append((q, k, v, do, dense_probabilities_gpu(q, k, causal=causal)))

    def dense(q, k, v, do, p):
        return dense_attention_backward_gpu(q, k, v, do, p=p, causal=causal)

    t = time_cuda(dense, dense_sets, warmup=2, repeats=10)
    err = _worst_error(dense(*dense_sets[0]), ref)  # set 0 holds the same q, k, v, dO
    rows.append(("dense", "-", t, err))
    del dense_sets
    cupy.get_default_memory_pool().free_all_blocks()
    return [
        {"n": n, "dtype": dtype, "causal": causal, "batch_heads": bh, "d": d, "kernel": name,
         "blocks": blocks, "median_ms": t.median_ms, "min_ms": t.min_ms, "max_ms": t.max_ms,
         "tflops": flops / (t.median_ms * 1e-3) / 1e12, "max_err": err}
        for name, blocks, t, err in rows
    ]  # fmt: skip


def counts_check(n: int, bh: int, d: int, bq: int, bk: int, causal: bool) -> dict:
    """The counting build's per-head transfers beside the backward ledger's tiled lane."""
    q, k, v, do = _inputs(9, bh, n, d, "float32")
    fwd = tiled_attention_gpu(q, k, v, block_q=bq, block_k=bk, causal=causal, save_lse=True)
    res = tiled_attention_backward_gpu(
        q, k, v, fwd.out, do, fwd.lse, block_q=bq, block_k=bk, causal=causal, count_transfers=True
    )  # fmt: skip
    counted = {t: {k2: c // bh for k2, c in rw.items()} for t, rw in res.counts.items()}
    led = pass_ledger("backward", n, n, d, d, block_q=bq, block_k=bk, causal=causal)
    want = {t: dict(led.lanes["tiled"].counts[t]) for t in led.lanes["tiled"].counts}
    return {"n": n, "causal": causal, "block_q": bq, "block_k": bk, "counts_kernel": counted,
            "counts_ledger": want, "counts_match": counted == want}  # fmt: skip


def smoke() -> int:
    """Odd shapes once each, both dtypes, causal and not (for compute-sanitizer)."""
    import cupy

    # One cudaMalloc per array: inside the pool's big blocks an overrun would go unseen.
    cupy.cuda.set_allocator(None)
    for n_q, n_k, d, bq, bk in ((37, 53, 20, 7, 16), (70, 45, 12, 16, 64), (50, 40, 64, 128, 96)):
        for dtype in DTYPES:
            for causal in (False, True):
                q = _inputs(0, 2, n_q, d, dtype)[0]
                k, v = _inputs(1, 2, n_k, d, dtype)[:2]
                do = _inputs(2, 2, n_q, d, dtype)[0]
                fwd = tiled_attention_gpu(q, k, v, block_q=bq, block_k=bk, causal=causal, save_lse=True)  # fmt: skip
                res = tiled_attention_backward_gpu(
                    q, k, v, fwd.out, do, fwd.lse, block_q=bq, block_k=bk, causal=causal,
                    count_transfers=causal,
                )  # fmt: skip
                grads = [g.get() for g in (res.dq, res.dk, res.dv)]
                ok = all(np.all(np.isfinite(g)) for g in grads)
                print(
                    f"smoke nq={n_q} nk={n_k} d={d} {bq}x{bk} {dtype} causal={causal} finite={ok}"
                )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--batch-heads", type=int, default=32)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--blocks", type=int, nargs=2, default=(64, 64), metavar=("BQ", "BK"))
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    st = status()
    if not st.usable:
        print(f"time_backward: {st.reason}", file=sys.stderr)
        return 1
    if args.smoke:
        return smoke()
    bq, bk = args.blocks
    data = {"format": "flash-explorer-gpu-backward", "version": 1, "device": st.to_dict(),
            "command": "python -m compute.gpu.lab.time_backward " + " ".join(argv or sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "rows": [], "counts": []}  # fmt: skip
    data["counts"].append(counts_check(1024, 4, args.d, bq, bk, causal=True))
    print(f"counting build vs ledger (N=1024, causal): match={data['counts'][0]['counts_match']}")
    for n in args.sizes:
        for dtype in DTYPES:
            for causal in (False, True):
                data["rows"].extend(measure(n, dtype, causal, args.batch_heads, args.d, bq, bk))
                if args.json:
                    args.json.write_text(json.dumps(data, indent=1))
    print(st.describe())
    print(
        f"BH={args.batch_heads} d={args.d}; backward TFLOP/s = 2.5 x forward FLOPs (halved causal)"
    )
    print(f"{'N':>6} {'dtype':>8} {'causal':>6} {'kernel':>6} {'blocks':>6} {'ms':>9} "
          f"{'TFLOP/s':>8} {'max err':>9} {'dense/tiled':>11}")  # fmt: skip
    rows = data["rows"]
    for tiled_row, dense_row in zip(rows[::2], rows[1::2], strict=True):
        ratio = dense_row["median_ms"] / tiled_row["median_ms"]
        for r in (tiled_row, dense_row):
            print(f"{r['n']:>6} {r['dtype']:>8} {r['causal']!s:>6} {r['kernel']:>6} "
                  f"{r['blocks']:>6} {r['median_ms']:>9.3f} {r['tflops']:>8.2f} "
                  f"{r['max_err']:>9.2e} {ratio if r is dense_row else 1.0:>11.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
