"""Time source variants of kernels/tiled_attention.cu against the committed kernel.

Run on the GPU machine before changing the tiled kernel's inner loops: it tells whether a
source edit is worth making (TILED_NOTES.md records the variants tried so far). Each variant is a list of text substitutions applied to the kernel source (so the
experiment needs no switch in the kernel itself); every variant's output is checked
against the committed kernel's before it is timed. Prints one table:

    python -m compute.gpu.lab.tune_tiled [--n 4096] [--dtype float32]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from ..tiled import KERNEL_PATH, LOG2E, TileShape
from ..timing import rotation_count, time_cuda

# Variant name -> (substitutions, threads for block_q >= 128).
VARIANTS = {
    "committed": ([], None),
    # 16 rows of threads for block_q = 128: 8 rows per thread, 128 threads (more ILP, fewer warps)
    "rm8": ([("BQ >= 128 ? 32 : 16", "BQ >= 256 ? 32 : 16")], 128),
    # fully unrolled d loop of S and k loop of P~V
    "unroll": ([("#pragma unroll 4\n    for (int c", "#pragma unroll\n    for (int c"),
                ("#pragma unroll 2\n    for (int k", "#pragma unroll\n    for (int k")], None),
}  # fmt: skip
VARIANTS["rm8+unroll"] = (VARIANTS["rm8"][0] + VARIANTS["unroll"][0], 128)
BLOCKS = ((128, 64), (128, 32), (64, 64))


def _kernel(source: str, bq: int, bk: int, d: int, ctype: str):
    import cupy

    name = f"tiled_q_outer<{bq},{bk},{d},{d},{ctype}>"
    module = cupy.RawModule(code=source, options=("-std=c++17",), name_expressions=[name])
    return module.get_function(name)


def main(argv: list[str] | None = None) -> int:
    import cupy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--bh", type=int, default=32)
    p.add_argument("--dtype", default="float32")
    args = p.parse_args(argv)
    n, d, bh = args.n, args.d, args.bh
    ctype = {"float32": "float", "float16": "unsigned short"}[args.dtype]
    base = KERNEL_PATH.read_text()
    rng = cupy.random.default_rng(1)
    shape = (bh, n, d)
    n_sets = rotation_count(3 * math.prod(shape) * np.dtype(args.dtype).itemsize, 60 << 20)
    sets = [tuple(rng.standard_normal(shape, dtype=cupy.float32).astype(args.dtype)
                  for _ in range(3)) for _ in range(n_sets)]  # fmt: skip
    flops = 4.0 * bh * n * n * d
    print(f"N={n} d={d} bh={bh} {args.dtype}, median of 20 runs, {n_sets} rotated sets")
    print("variant      blocks   threads  regs  ms      TFLOP/s  max|diff| vs committed")
    reference = {}
    for name, (subs, big_threads) in VARIANTS.items():
        source = base
        for old, new in subs:
            if old not in source:
                raise SystemExit(f"variant {name}: pattern not found: {old!r}")
            source = source.replace(old, new)
        for bq, bk in BLOCKS:
            tile = TileShape(bq, bk, d, d)
            threads = big_threads if (big_threads and bq >= 128) else tile.threads
            fn = _kernel(source, bq, bk, d, ctype)
            fn.max_dynamic_shared_size_bytes = tile.smem_bytes

            def run(q, k, v, fn=fn, threads=threads, bq=bq, tile=tile):
                out = cupy.empty_like(q)
                lse = cupy.empty(1, cupy.float32)
                cnt = cupy.zeros(16, cupy.uint64)
                args_ = (q, k, v, out, lse, np.int32(n), np.int32(n),
                         np.float32(LOG2E / math.sqrt(d)), np.int32(0), np.int32(0), cnt)  # fmt: skip
                fn((math.ceil(n / bq), bh), (threads,), args_, shared_mem=tile.smem_bytes)
                return out

            out = run(*sets[0]).astype(cupy.float32)
            diff = 0.0
            if (bq, bk) in reference:
                diff = float(cupy.max(cupy.abs(out - reference[(bq, bk)])))
            else:
                reference[(bq, bk)] = out
            ms = time_cuda(run, sets, warmup=3, repeats=20, l2_bytes=60 << 20).median_ms
            print(f"{name:12s} {bq}x{bk:<5d} {threads:<8d} {fn.num_regs:<5d} {ms:<7.3f} "
                  f"{flops / ms / 1e9:<8.2f} {diff:.2e}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
