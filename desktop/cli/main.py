"""The `flash-explorer` command line: the GUI by default, plus headless subcommands.

`ledger` and `bench` import neither Qt nor CuPy at start, so they run on a GPU server;
the GUI and exports import Qt only when asked for.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence

from compute import DIRECTIONS, InputError, Ledger
from desktop import version
from desktop.cli.args import (
    OneLineParser,
    add_config_arguments,
    add_pass_argument,
    config_from_args,
    fail,
)
from desktop.export.ledger_export import TENSOR_LABELS, ledger_rows
from desktop.state.config import ledger_for


def format_ledger(result: Ledger) -> str:
    """The ledger as a plain-text table: per tensor and direction, both lanes, then totals."""
    c = result.config()
    dense, tiled = result.lanes["dense"], result.lanes["tiled"]
    rows = [  # the forward's tensors; a backward's adds dO, dQ, dK, dV, ...
        (
            TENSOR_LABELS.get(t, t),
            [dense.counts[t][d] for d in DIRECTIONS] + [tiled.counts[t][d] for d in DIRECTIONS],
        )
        for t in ledger_rows(result)
    ]
    totals = (dense.total_elements, tiled.total_elements, dense.total_bytes, tiled.total_bytes)
    # Columns as wide as the widest number plus two spaces: 13+ digit counts never touch.
    w = max(14, 2 + max(len(f"{x:,}") for x in [*totals, *(x for _, r in rows for x in r)]))
    lines = [
        f"HBM transfer ledger  N_q={c['n_q']} N_k={c['n_k']} d={c['d']} d_v={c['d_v']} "
        f"B_r={c['block_q']} B_c={c['block_k']} order={c['order']} "
        f"causal={'yes' if c['causal'] else 'no'} L={'saved' if c['save_lse'] else 'not saved'} "
        f"dtype={c['dtype']}"
        + (f" pass={c['pass']}" if "pass" in c else "")
        + (
            f" mask={c['mask']['label']}"
            if c.get("mask", {}).get("window")
            or c.get("mask", {}).get("packed")
            or c.get("mask", {}).get("kind") == "causal-top-left"
            else ""
        ),
        "",
        f"{'tensor':<8}"
        + "".join(f"{h:>{w}}" for h in ("dense read", "dense write", "tiled read", "tiled write")),
    ]
    for label, row in rows:
        lines.append(f"{label:<8}" + "".join(f"{x:>{w},}" for x in row))
    lines += [
        "",
        f"{'total elements':<22}{'dense':>6} {dense.total_elements:>{w},}   "
        f"tiled {tiled.total_elements:>{w},}",
        f"{'total bytes':<22}{'dense':>6} {dense.total_bytes:>{w},}   "
        f"tiled {tiled.total_bytes:>{w},}",
        f"dense / tiled transfers: {result.ratio:.2f}x",
    ]
    sram = (
        f"SRAM working set (elements): dense {dense.sram_elements:,}, tiled {tiled.sram_elements:,}"
    )
    if result.sram_capacity is not None:
        verdict = {True: "fits", False: "does not fit"}
        sram += (
            f"; against M = {result.sram_capacity:,}: dense {verdict[dense.fits]}, "
            f"tiled {verdict[tiled.fits]}"
        )
    lines.append(sram)
    return "\n".join(lines)


def run_ledger(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="flash-explorer ledger", description="Print the HBM transfer ledger of both lanes."
    )
    add_config_arguments(parser, inputs=False)
    add_pass_argument(
        parser, "which pass: forward (default), backward, or training (forward + backward)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    try:
        result = ledger_for(config_from_args(args))
    except (InputError, ValueError) as exc:
        return fail(str(exc), parser.prog)
    print(json.dumps(result.to_dict()) if args.json else format_ledger(result))
    return 0


def run_bench(argv: Sequence[str]) -> int:
    try:
        from compute.gpu.bench_cli import main as bench_main
    except ImportError as exc:
        return fail(f"the GPU benchmark is unavailable ({exc}).", "flash-explorer bench")
    return bench_main(list(argv))


def run_decode(argv: Sequence[str]) -> int:
    from desktop.cli.decode import main as decode_main

    return decode_main(list(argv))


def run_export(argv: Sequence[str]) -> int:
    from desktop.cli.export import main as export_main

    return export_main(list(argv))


def run_export_ledger(argv: Sequence[str]) -> int:
    from desktop.cli.export import main_ledger

    return main_ledger(list(argv))


def run_paper_check(argv: Sequence[str]) -> int:
    from desktop.cli.paper_check import run_paper_check as paper_check_main

    return paper_check_main(argv)


def run_bench_gui(argv: Sequence[str]) -> int:
    try:
        from desktop.cli.bench_gui import main as bench_gui_main
    except ImportError as exc:
        return fail(f"the GUI benchmark needs Qt ({exc}).", "flash-explorer bench-gui")
    return bench_gui_main(list(argv))


def run_bench_memory(argv: Sequence[str]) -> int:
    try:
        from desktop.cli.bench_memory import main as bench_memory_main
    except ImportError as exc:
        return fail(f"the memory benchmark needs Qt ({exc}).", "flash-explorer bench-memory")
    return bench_memory_main(list(argv))


def run_gui(argv: Sequence[str]) -> int:
    try:
        from desktop.cli.gui import main as app_main
    except ImportError as exc:
        return fail(
            f"the desktop app cannot start because Qt is unavailable ({exc}); "
            "install the project with `pip install -e .`.",
        )
    return app_main(list(argv))


SUBCOMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "ledger": run_ledger,
    "bench": run_bench,
    "decode": run_decode,
    "export": run_export,
    "export-ledger": run_export_ledger,
    "bench-gui": run_bench_gui,
    "paper-check": run_paper_check,
    "bench-memory": run_bench_memory,
}

USAGE = """usage: flash-explorer [GUI flags]            open the explorer (default: the reference example)
       flash-explorer ledger [flags] [--pass P] [--json]
                                           print both lanes' HBM transfer ledger
       flash-explorer decode [--n-q N --n-k N --h-q H --h-kv H --splits S] [--json]
                                           a decode step's bytes and roofline, every schedule
       flash-explorer export --out FILE ...     frames, PDFs, storyboards, animations headless
                                           (--decode: the decode view as PNG or SVG)
       flash-explorer export-ledger --out FILE  write the ledger as PNG, SVG, PDF, CSV or JSON
       flash-explorer bench [flags]             time the CuPy kernels on an NVIDIA GPU
       flash-explorer bench-gui [flags]         time the window offscreen: change, frame
       flash-explorer paper-check [--json]      FlashAttention's Figure 2 beside our ledgers
       flash-explorer bench-memory [flags]      the window's peak memory against its estimate
Run `flash-explorer gui --help` for the GUI flags, any other command with --help for its
flags, and `flash-explorer --version` for the version."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Overflow in the float64 lanes is reported by the app in one sentence (the overflow
    # notice); NumPy's own RuntimeWarnings, one per array operation, would bury it.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"(compute|desktop)\.")
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv and argv[0] in ("-V", "--version"):
        print(f"flash-explorer {version()}")
        return 0
    if argv and argv[0] == "gui":  # `flash-explorer gui [flags]`: the GUI by its name
        return run_gui(argv[1:])
    command = SUBCOMMANDS.get(argv[0], run_gui) if argv else run_gui
    try:
        status = command(argv[1:] if command is not run_gui else argv)
        sys.stdout.flush()  # a full disk shows here, not as a traceback at exit
        return status
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; that is not an error of ours.
        sys.stderr.close()
        return 0
    except OSError as exc:
        if exc.filename is not None:
            raise
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (what was buffered is lost anyway)
        except OSError:
            pass
        return fail(
            f"the output could not be written ({exc.strerror}); "
            "free some space or send it elsewhere."
        )


if __name__ == "__main__":
    raise SystemExit(main())
