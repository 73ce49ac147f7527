"""`flash-explorer paper-check`: FlashAttention's Figure 2 (left) beside our declared ledgers.

Prints the paper's figures, this project's closed-form ledgers for the same workload
(compute.paper_check) and the check of the paper's FLOP column; `--json` prints one object.
No Qt, no GPU: it runs anywhere the ledger does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from compute import paper_check as pc
from compute.gpu.report import bundled_report, split_reports
from desktop.cli.args import OneLineParser


def _measured() -> tuple[dict | None, list[pc.MeasuredRow]]:
    """The bundled H200 report's measurement of the workload, if it holds one."""
    return pc.measured_rows(split_reports(bundled_report()))


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), *(line(r) for r in rows)]


def paper_check_dict(w: pc.Workload = pc.PAPER) -> dict:
    """The check as one JSON-ready object."""
    flops = pc.flop_check(w)
    report, measured = _measured()
    device = "" if report is None else report["device"].get("name") or "GPU"
    return {
        "workload": {
            "batch": w.batch,
            "heads": w.heads,
            "n": w.n,
            "d": w.d,
            "dtype": w.dtype,
            "pass": "training",
            "device": w.device,
            "sram_bytes": w.sram_bytes,
            "algorithm1_tiles": list(pc.algorithm1_tiles(w)),
        },  # fmt: skip
        "paper": [vars(f) for f in pc.PAPER_FIGURES],
        "sources": pc.sources(),
        "declared": [{**vars(r), "gb": r.gb} for r in pc.declared_rows(w)],
        "flops": {**vars(flops), "sentence": pc.flop_reading(w)},
        "reading": pc.reading(w),
        "measured": {
            "device": None if report is None else report["device"].get("name"),
            "paths": [{**vars(m), "gb": m.gb} for m in measured],
            "reading": pc.measured_reading(measured, device),
        },
    }


def format_paper_check(w: pc.Workload = pc.PAPER) -> str:
    """The check as plain text: paper figures, declared ledgers, FLOP check, reading."""
    br, bc = pc.algorithm1_tiles(w)
    lines = [
        f"Paper check: FlashAttention Figure 2 (left), GPT-2 medium attention, "
        f"B={w.batch} H={w.heads} N={w.n} d={w.d} {w.dtype}, forward + backward, "
        f"{w.device} ({w.sram_bytes // 1024} KB SRAM per SM: Algorithm 1 tiles "
        f"B_r={br} B_c={bc})",
        "",
    ]
    paper = [
        [f.label, f"{f.standard_gb:.1f}", f"{f.flash_gb:.1f}",
         f"{f.standard_gflops} / {f.flash_gflops}", f"{f.standard_ms} / {f.flash_ms}"]
        for f in pc.PAPER_FIGURES
    ]  # fmt: skip
    lines += _table(
        ["HBM reads + writes", "standard GB", "FlashAttention GB", "GFLOPs", "ms"],
        paper,
        {1, 2},
    )
    lines.append("")
    declared = [
        [r.label, r.tiles, r.order, f"{r.gb:.3f}", f"{r.total_bytes:,}"]
        for r in pc.declared_rows(w)
    ]
    lines += _table(["declared ledger (closed form)", "tiles", "order", "GB", "bytes"],
                    declared, {3, 4})  # fmt: skip
    report, measured = _measured()
    if measured:
        device = report["device"].get("name") or "GPU"
        rows = [[m.label, f"{m.read_bytes / pc.GB:.3f}", f"{m.write_bytes / pc.GB:.3f}",
                 f"{m.gb:.3f}", "-" if m.declared_bytes is None else f"{m.declared_bytes / pc.GB:.3f}"]
                for m in measured]  # fmt: skip
        lines += ["", *_table([f"measured DRAM on {device} (ncu)", "read GB", "write GB", "GB",
                               "declared GB"], rows, {1, 2, 3, 4})]  # fmt: skip
    lines += ["", pc.sources(), pc.flop_reading(w), pc.reading(w)]
    if measured:
        lines.append(pc.measured_reading(measured, device))
    return "\n".join(lines)


def run_paper_check(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="flash-explorer paper-check",
        description="FlashAttention's Figure 2 (left) beside this project's declared ledgers.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(list(argv))
    print(json.dumps(paper_check_dict()) if args.json else format_paper_check())
    return 0
