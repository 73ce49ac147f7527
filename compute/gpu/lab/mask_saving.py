"""The GPU panel's mask-saving figures in one process: `flash-explorer bench` with the mask
flags, the teaching kernel in both loop orders, each mask beside its unmasked run.

Each run is `flash-explorer bench --kernel tiled` with the argv recorded beside its report
(bench_cli.main, so the flags are parsed as the command parses them); running them in one
process pays CuPy's import and the kernels' compile once. The reports land in one figures
file (compute.gpu.report.FIGURES_FORMAT), the one desktop/panels/gpu/mask_saving.py reads:

    python -m compute.gpu.lab.mask_saving --out assets/benchmarks/masks/mask_saving_h200.json

then copy it to compute/gpu/reports/mask_saving_h200.json (the panel's bundled copy; a test
holds the two equal).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from .. import bench_cli
from ..report import FIGURES_FORMAT, VERSION

SHAPE = ("--n", "2048", "--d", "64", "--dtype", "float16", "--batch-heads", "16",
         "--block-q", "64", "--block-k", "64", "--kernel", "tiled")  # fmt: skip
# Each mask, and the unmasked run of the same shape it is measured against (N_k = N unless
# given): causal, a sliding window, packed causal sequences, and N_k = 2N where top-left
# causal leaves half the keys unseen while bottom-right sees them all.
MASKS: tuple[tuple[str, ...], ...] = (
    (),
    ("--mask", "causal"),
    ("--window", "256,0"),
    ("--mask", "causal", "--packed", "256,256,512,1024"),
    ("--n-keys", "4096"),
    ("--n-keys", "4096", "--mask", "causal-top-left"),
    ("--n-keys", "4096", "--mask", "causal"),
)
ORDERS = ("q-outer", "kv-outer")


def record(out: Path) -> int:
    reports, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for mask in MASKS:
            for order in ORDERS:
                argv = [*SHAPE, *mask, "--order", order, "--json", f"{tmp}/r.json"]
                print("flash-explorer bench " + shlex.join(argv[:-2]), flush=True)
                status = bench_cli.main(argv)
                failed |= status != 0
                report = json.loads(Path(f"{tmp}/r.json").read_text(encoding="utf-8"))
                report["command"] = "flash-explorer bench " + shlex.join(argv[:-2])
                reports.append(report)
                _write(out, reports)  # after every run: a run cut short keeps what it measured
    return 1 if failed else 0


def _write(out: Path, reports: list[dict]) -> None:
    figures = {
        "format": FIGURES_FORMAT,
        "version": VERSION,
        "command": f"python -m compute.gpu.lab.mask_saving --out {out}",
        "reports": reports,
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the figures file to write")
    return record(p.parse_args(argv).out)


if __name__ == "__main__":
    sys.exit(main())
