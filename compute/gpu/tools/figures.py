"""The README's GPU figures in one run: N in {1024, 4096, 16384}, d = 64, batch*heads = 32.

Run on the GPU machine after changing `kernels/tiled_attention.cu` (or the harness), to
re-measure the README's "CUDA kernels on one H200" table and the report the desktop panel
opens on. For each dtype the block sizes are chosen by a sweep at N = 4096 (Q-outer order);
then at each N the tiled kernel (both loop orders, same blocks), the dense path and the
flash kernel are measured, plus one causal pair at N = 4096. Writes one JSON holding
every report:

    python -m compute.gpu.tools.figures --out compute/gpu/reports/tiled_vs_dense_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from ..bench import BenchConfig, GpuUnavailable, run_bench
from ..dtypes import KERNEL_DTYPES
from ..report import FIGURES_FORMAT, VERSION, format_report, result_rows

SIZES = (1024, 4096, 16384)
SWEEP = (32, 64, 128)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def figures(
    sizes=SIZES, dtypes=KERNEL_DTYPES, sweep=SWEEP, batch_heads: int = 32, out: Path | None = None
) -> dict:
    """Run every configuration; returns {"format", "reports": [...], "summary": [...]}.

    With `out`, the JSON is rewritten after every report, so a run cut short keeps its data.
    """
    reports, summary = [], []
    data = {"format": FIGURES_FORMAT, "version": VERSION, "reports": reports, "summary": summary}

    def save() -> None:
        if out is not None:
            out.write_text(json.dumps(data, indent=1))

    for dtype in dtypes:
        base = BenchConfig(d=64, batch_heads=batch_heads, dtype=dtype, count_transfers=False)
        _log(f"== sweep {dtype} N=4096")
        tuned = run_bench(
            replace(base, n=4096, kernels=(), sweep_blocks=True, sweep_q=sweep, sweep_k=sweep)
        )
        reports.append(tuned)
        save()
        best = tuned["sweep"]["best"]
        bq, bk = best["block_q"], best["block_k"]
        runs = [replace(base, n=n, block_q=bq, block_k=bk) for n in sizes]
        runs.append(replace(base, n=4096, block_q=bq, block_k=bk, causal=True))
        for cfg in runs:
            for order, kernels in (
                ("q-outer", ("tiled", "dense", "flash")),
                ("kv-outer", ("tiled",)),
            ):
                if cfg.causal and order == "kv-outer":
                    continue
                _log(f"== {dtype} N={cfg.n} causal={cfg.causal} {order} {bq}x{bk}")
                counted = cfg.n == 4096 and not cfg.causal  # prove counts once per order
                rep = run_bench(replace(cfg, order=order, kernels=kernels, count_transfers=counted))
                reports.append(rep)
                save()
                print(format_report(rep), flush=True)
                for r in rep["results"]:
                    summary.append(
                        [dtype, str(cfg.n), str(cfg.causal), *result_rows({"results": [r]})[0]]
                    )
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--dtypes", nargs="+", default=list(KERNEL_DTYPES))
    args = p.parse_args(argv)
    try:
        data = figures(tuple(args.sizes), tuple(args.dtypes), out=args.out)
    except GpuUnavailable as exc:
        print(f"figures: {exc}", file=sys.stderr)
        return 1
    print("\ndtype  N  causal  " + "  ".join(["kernel", "order", "blocks", "ms", "TFLOP/s",
          "GB/s", "peak MiB", "extra MiB", "max abs", "rel", "x dense"]))  # fmt: skip
    for line in data["summary"]:
        print("  ".join(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
