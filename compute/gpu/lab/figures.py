"""The README's GPU figures in one run: N in {1024, 4096, 16384}, d = 64, batch*heads = 32.

Run on the GPU machine after changing `kernels/tiled_attention.cu` (or the harness), to
re-measure the README's "CUDA kernels on one H200" table and the report the desktop panel
opens on. For each dtype the block sizes are chosen by a sweep at N = 4096 (Q-outer order);
then at each N the tiled kernel (both loop orders, same blocks), the dense path and the
flash kernel are measured, plus one causal pair at N = 4096. Writes one JSON holding
every report:

    python -m compute.gpu.lab.figures --out compute/gpu/reports/tiled_vs_dense_h200.json

With `--passes backward training` it measures those passes instead, at N = 4096 (full and
causal): per dtype a sweep of the teaching kernel's backward picks its blocks, then the
teaching kernel, dense, the tensor-core kernel and (in float16) SDPA's FLASH and CUDNN
backends are timed in each pass. `--keep FILE` starts from FILE's reports of the other
passes, so the bundled report gains the backward rows without re-measuring the forward:

    python -m compute.gpu.lab.figures --passes backward training \\
        --keep compute/gpu/reports/tiled_vs_dense_h200.json --out tiled_vs_dense_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from ... import PASSES
from ..bench import BenchConfig, GpuUnavailable, run_bench
from ..dtypes import FLASH_DTYPES, KERNEL_DTYPES
from ..peers import PEERS
from ..report import (
    FIGURES_FORMAT,
    VERSION,
    format_report,
    pass_of,
    result_rows,
    split_reports,
)

SIZES = (1024, 4096, 16384)
SWEEP = (32, 64, 128)
SUMMARY_HEADER = ["dtype", "N", "causal", "pass", "kernel", "order", "blocks", "ms", "TFLOP/s",
                  "GB/s", "peak MiB", "extra MiB", "max abs", "rel", "x dense"]  # fmt: skip


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def summarize(reports: list[dict]) -> list[list[str]]:
    """One line of cells per result of every report (SUMMARY_HEADER's columns)."""
    return [
        [c["dtype"], str(c["n"]), str(c["causal"]), pass_of(rep), *result_rows({"results": [r]})[0]]
        for rep in reports
        for c in (rep["config"],)
        for r in rep["results"]
    ]


def _forward(base: BenchConfig, sizes, sweep, run) -> None:
    """The forward figures of one dtype (see the module docstring)."""
    _log(f"== sweep {base.dtype} N=4096")
    tuned = run(replace(base, n=4096, kernels=(), sweep_blocks=True, sweep_q=sweep, sweep_k=sweep))
    best = tuned["sweep"]["best"]
    bq, bk = best["block_q"], best["block_k"]
    runs = [replace(base, n=n, block_q=bq, block_k=bk) for n in sizes]
    runs.append(replace(base, n=4096, block_q=bq, block_k=bk, causal=True))
    for cfg in runs:
        for order, kernels in (("q-outer", ("tiled", "dense", "flash")), ("kv-outer", ("tiled",))):
            if cfg.causal and order == "kv-outer":
                continue
            _log(f"== {base.dtype} N={cfg.n} causal={cfg.causal} {order} {bq}x{bk}")
            counted = cfg.n == 4096 and not cfg.causal  # prove counts once per order
            run(replace(cfg, order=order, kernels=kernels, count_transfers=counted))


def _backward(base: BenchConfig, passes, sweep, run) -> None:
    """The backward and training figures of one dtype at N = 4096 (module docstring)."""
    peers = tuple(PEERS) if base.dtype in FLASH_DTYPES else ()
    kernels = ("tiled", "dense", "flash", *peers)
    base = replace(base, n=4096)
    _log(f"== backward sweep {base.dtype} N=4096")
    tuned = run(replace(base, pass_name="backward", kernels=(), sweep_blocks=True,
                        sweep_q=sweep, sweep_k=sweep))  # fmt: skip
    best = tuned["sweep"]["best"] or {"block_q": 64, "block_k": 64}
    base = replace(base, block_q=best["block_q"], block_k=best["block_k"], kernels=kernels)
    for pass_name in passes:
        for causal in (False, True):
            _log(f"== {pass_name} {base.dtype} N=4096 causal={causal}")
            counted = pass_name == "backward" and not causal
            run(replace(base, pass_name=pass_name, causal=causal, count_transfers=counted))


def figures(
    sizes=SIZES, dtypes=KERNEL_DTYPES, sweep=SWEEP, batch_heads: int = 32, out: Path | None = None,
    passes=("forward",), keep: list[dict] | None = None,
) -> dict:  # fmt: skip
    """Run every configuration; returns {"format", "reports": [...], "summary": [...]}.

    `keep`: reports recorded earlier, of passes not run now, placed first. With `out`, the
    JSON is rewritten after every report, so a run cut short keeps its data.
    """
    reports = [r for r in keep or [] if pass_of(r) not in passes]
    data = {
        "format": FIGURES_FORMAT,
        "version": VERSION,
        "command": "python -m compute.gpu.lab.figures " + " ".join(sys.argv[1:]),
        "reports": reports,
        "summary": [],
    }

    def run(cfg: BenchConfig) -> dict:
        rep = run_bench(cfg)
        reports.append(rep)
        data["summary"] = summarize(reports)
        if out is not None:
            out.write_text(json.dumps(data, indent=1))
        if rep["results"]:
            print(format_report(rep), flush=True)
        return rep

    for dtype in dtypes:
        base = BenchConfig(d=64, batch_heads=batch_heads, dtype=dtype, count_transfers=False)
        if "forward" in passes:
            _forward(base, sizes, sweep, run)
        later = tuple(p for p in passes if p != "forward")
        if later:
            _backward(base, later, sweep, run)
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--dtypes", nargs="+", default=list(KERNEL_DTYPES))
    p.add_argument("--passes", nargs="+", choices=PASSES, default=["forward"])
    p.add_argument("--keep", type=Path, help="a figures file whose other passes to keep")
    args = p.parse_args(argv)
    keep = None if args.keep is None else split_reports(json.loads(args.keep.read_text()))
    try:
        data = figures(tuple(args.sizes), tuple(args.dtypes), out=args.out,
                       passes=tuple(args.passes), keep=keep)  # fmt: skip
    except GpuUnavailable as exc:
        print(f"figures: {exc}", file=sys.stderr)
        return 1
    print("\n" + "  ".join(SUMMARY_HEADER))
    for line in data["summary"]:
        print("  ".join(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
