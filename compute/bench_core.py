"""Benchmark of the NumPy core: build_trace and first-view time and peak memory, tiled vs
dense attention.

build_trace makes the timeline only (arrays of O(T_r + T_c) numbers); "first view" adds
what a window needs before it can draw: the one chunked pass over S (Trace.summary)
and one query block's history.

Run: `python -m compute.bench_core [--json assets/benchmarks/core.json]`. Prints a table
and writes JSON; nothing here asserts on time (tests never do).
"""

from __future__ import annotations

import argparse
import statistics
import tracemalloc
from pathlib import Path

from . import build_trace, dense_attention, random_inputs, tiled_attention
from .bench_common import machine, timed_runs, write_json


def _time(fn, repeats: int) -> float:
    return statistics.median(timed_runs(fn, repeats))


def _peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


CASES = ((64, 64), (256, 64), (1024, 64), (4096, 64), (1024, 2), (4096, 2))


def run(cases=CASES, d: int = 64, block: int = 64) -> dict:
    rows = []
    for n, b in cases:
        r = random_inputs(n, d, d, seed=0)

        def trace(r=r, b=b):
            return build_trace(r.q, r.k, r.v, block_q=b, block_k=b)

        def first_view(trace=trace):
            t = trace()
            t.summary()
            t.block_history(0)
            return t

        repeats = 5 if n <= 1024 else 1
        rows.append(
            {
                "n": n,
                "d": d,
                "block": b,
                "steps": trace().n_steps,
                "build_trace_s": _time(trace, repeats),
                "first_view_s": _time(first_view, repeats),
                "peak_mib": _peak_mib(first_view),
            }
        )
    r = random_inputs(4096, d, d, seed=0)
    dense_s = _time(lambda: dense_attention(r.q, r.k, r.v), 3)
    tiled_s = _time(lambda: tiled_attention(r.q, r.k, r.v, block_q=block, block_k=block), 3)
    return {
        "machine": machine(),
        "build_trace": rows,
        "attention_n4096_d64": {
            "dense_s": dense_s,
            "tiled_s": tiled_s,
            "block": block,
            "tiled_over_dense": tiled_s / dense_s,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    result = run()
    print(
        f"{'N':>6} {'blocks':>6} {'steps':>10} {'build_trace (s)':>16} {'first view (s)':>15}"
        f" {'peak (MiB)':>11}"
    )
    for row in result["build_trace"]:
        print(
            f"{row['n']:>6} {row['block']:>6} {row['steps']:>10,} {row['build_trace_s']:>16.3f}"
            f" {row['first_view_s']:>15.3f} {row['peak_mib']:>11.1f}"
        )
    a = result["attention_n4096_d64"]
    print(
        f"N=4096 d=64: dense_attention {a['dense_s']:.3f} s, tiled_attention (blocks {a['block']}) "
        f"{a['tiled_s']:.3f} s, ratio {a['tiled_over_dense']:.2f}"
    )
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
