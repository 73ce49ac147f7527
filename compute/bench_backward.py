"""Benchmark of the NumPy backward pass: FlashAttention-2 tiled against the dense backward.

Run: `python -m compute.bench_backward [--json assets/benchmarks/backward.json]`. Prints a
table and writes JSON; nothing here asserts on time (tests never do). The tiled time
includes its forward (which produces O and L), as the dense time includes forming P.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from . import attention_backward, random_inputs
from .bench_common import machine, timed_runs, write_json


def _time(fn, repeats: int) -> float:
    """Best of `repeats` runs: the figure least disturbed by other work on a shared machine."""
    return min(timed_runs(fn, repeats))


def run(n: int = 2048, d: int = 64, block: int = 64, repeats: int = 5) -> dict:
    r = random_inputs(n, d, d, seed=0)
    do = np.random.default_rng(1).standard_normal((n, d))
    rows = []
    for causal in (False, True):
        for dtype in ("float64", "float32", "float16"):
            times = {}
            for method in ("dense", "tiled"):

                def call(method=method, causal=causal, dtype=dtype):
                    return attention_backward(
                        r.q, r.k, r.v, do, method=method, causal=causal, dtype=dtype,
                        block_q=block, block_k=block,
                    )  # fmt: skip

                times[method] = _time(call, repeats)
            rows.append(
                {
                    "causal": causal,
                    "dtype": dtype,
                    "dense_s": times["dense"],
                    "tiled_s": times["tiled"],
                    "tiled_over_dense": times["tiled"] / times["dense"],
                }
            )
    return {
        "machine": machine(),
        "n": n,
        "d": d,
        "block": block,
        "repeats": repeats,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    result = run(args.n, args.d, args.block)
    print(
        f"attention_backward  N={result['n']} d={result['d']} blocks={result['block']} "
        f"(best of {result['repeats']})"
    )
    print(f"{'causal':>7} {'dtype':>9} {'dense (s)':>10} {'tiled (s)':>10} {'tiled/dense':>12}")
    for row in result["rows"]:
        print(
            f"{'yes' if row['causal'] else 'no':>7} {row['dtype']:>9} {row['dense_s']:>10.3f} "
            f"{row['tiled_s']:>10.3f} {row['tiled_over_dense']:>12.2f}"
        )
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
