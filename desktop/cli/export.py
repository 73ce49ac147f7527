"""Headless exports: `flash-explorer export` (frames, GIF, MP4; with --decode a PNG or SVG
of the decode view) and `export-ledger`.

No display needed: without one, Qt's offscreen platform is used. The window is built
synchronously from the same flags as the GUI, rendered by the GUI's own views, and
every file is written atomically. Bad arguments or failures: one line on stderr and
a non-zero exit.
"""

from __future__ import annotations

import argparse
import sys

from compute import InputError
from desktop.cli.args import (
    OneLineParser,
    add_config_arguments,
    fail,
    notice,
    ranged_float,
    ranged_int,
    requested_config,
)
from desktop.cli.session import SCREEN_SIZE, ensure_app, headless_window
from desktop.export.animation_writer import FPS_RANGE
from desktop.export.atomic import ExportError

HOLD_MAX = 120
SCALE = ranged_float(0.25, 8.0)
OUT_OF_MEMORY = "This configuration needs more memory than is free; lower N, d or the frame size."


def _common_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=prog, description=description)
    add_config_arguments(parser)
    parser.add_argument("--open", metavar="FILE", help="open Q, K, V from a .npy or .npz file")
    parser.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="the file to write; its extension picks the format (.png, .svg, .pdf, .gif, .mp4)",
    )
    return parser


def export_parser() -> argparse.ArgumentParser:
    from desktop.export.frames import TARGETS

    p = _common_parser(
        "flash-explorer export",
        "Render the explorer's views headless: a PNG, SVG or PDF frame (a PDF of a step "
        "range has a page per step), a storyboard, a GIF or MP4 animation.",
    )
    g = p.add_argument_group("output")
    g.add_argument(
        "--steps",
        help="1-based step range A:B (default: all); a PNG or SVG shows B, a PDF every step",
    )
    g.add_argument(
        "--storyboard",
        metavar="STEPS",
        help="a grid of these steps, each captioned, e.g. 1,5,9,27 (PNG, SVG or PDF)",
    )
    g.add_argument(
        "--fps", type=ranged_float(*FPS_RANGE), default=6.0, help="frames per second (default 6)"
    )
    g.add_argument("--hold", type=ranged_int(1, HOLD_MAX), default=2, help="frames per step")
    g.add_argument(
        "--size",
        help="output size WxH; lanes are laid out for it (default 1280x720; a storyboard "
        "960x540 per panel)",
    )
    g.add_argument("--scale", type=SCALE, default=1.0, help="PNG scale, e.g. 2 for print")
    g.add_argument(
        "--lane",
        choices=TARGETS,
        default="both",
        help="what to draw: both lanes (default), one lane, the window, stats or ledger",
    )
    g.add_argument(
        "--theme", choices=("light", "dark"), default="light", help="colour theme (default light)"
    )
    g.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.add_argument(
        "--decode",
        action="store_true",
        help="export the decode view (Pass -> Decode) instead, with the decode step's own "
        "flags: see flash-explorer export --decode --help",
    )
    return p


def decode_export_parser() -> argparse.ArgumentParser:
    from desktop.cli.decode import add_problem_arguments

    p = OneLineParser(
        prog="flash-explorer export --decode",
        description="Render the decode view (Pass -> Decode) headless: one animation step of "
        "the cache streamed by one-pass and by split-KV, the combine, the followed row's "
        "split statistics and every schedule's ledger, as PNG or SVG.",
    )
    add_problem_arguments(p)
    p.add_argument("--out", required=True, metavar="FILE", help="the .png or .svg to write")
    p.add_argument("--head", type=ranged_int(0, 4095), default=0, help="query head to follow")
    p.add_argument("--token", type=ranged_int(0, 4095), default=0, help="new token to follow")
    p.add_argument(
        "--step",
        type=ranged_int(0, 1 << 30),
        default=None,
        help="animation step, one tile per block, 0 to T_c (default: the finished step)",
    )
    p.add_argument("--size", help="the view's size WxH (default 1280x720)")
    p.add_argument("--scale", type=SCALE, default=1.0, help="PNG scale, e.g. 2 for print")
    p.add_argument(
        "--theme", choices=("light", "dark"), default="light", help="colour theme (default light)"
    )
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def _decode_view(args, size: tuple[int, int]):
    """A DecodeView on the flags' step, computed and laid out at `size`, never on screen;
    ExportError (one sentence) where the view cannot show it."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    from desktop.cli.decode import problem_from_args
    from desktop.decode.view import DecodeView
    from desktop.theme import apply_theme

    problem = problem_from_args(args)  # ValueError: one sentence
    if problem.d != problem.d_v:
        raise ExportError("The decode view draws d = d_v; drop --d-v or make it equal to --d.")
    apply_theme(ensure_app(), args.theme)
    view = DecodeView()
    wanted = (
        (view.nq, problem.n_q, "N_q"), (view.nk, problem.n_k, "N_k"),
        (view.hq, problem.h_q, "H_q"), (view.hkv, problem.h_kv, "H_kv"),
        (view.splits, args.splits or 0, "splits"), (view.bk, problem.block_k, "B_c"),
        (view.d, problem.d, "d"), (view.head, args.head, "the followed head"),
        (view.row, args.token, "the followed token"),
    )  # fmt: skip
    for box, value, name in wanted:
        if not box.minimum() <= value <= box.maximum():
            raise ExportError(
                f"The decode view takes {name} from {box.minimum()} to {box.maximum()}, not "
                f"{value}; use `flash-explorer decode` for the ledger of a larger step."
            )
        box.setValue(value)
    view.dtype.setCurrentIndex(view.dtype.findData(problem.dtype))
    view.pending.stop()  # computed here, synchronously, not after the window's pause
    view.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    view.resize(*size)
    view.recompute()
    if view.message.text():
        raise ExportError(view.message.text())
    if args.step is not None:
        if args.step > view.slider.maximum():
            raise ExportError(
                f"Step {args.step} is past the end; choose 0 to {view.slider.maximum()} "
                "(T_c, when the one-pass block has read every tile)."
            )
        view.slider.setValue(args.step)
    view.show()
    QApplication.processEvents()
    return view


def _export_decode(argv: list[str]) -> int:
    """`flash-explorer export --decode`."""
    parser = decode_export_parser()
    args = parser.parse_args(argv)
    try:
        from desktop.export.decode_frame import write_decode_frame
        from desktop.export.exporter import check_suffix
        from desktop.export.frames import parse_size

        path = check_suffix(args.out, (".png", ".svg"))
        size = parse_size(args.size) if args.size else (1280, 720)
        view = _decode_view(args, size)
        step = write_decode_frame(view, path, args.scale)
        view.close()
    except (ExportError, InputError, ValueError) as exc:
        return fail(str(exc), parser.prog)
    except MemoryError:
        return fail(OUT_OF_MEMORY, parser.prog)
    if not args.quiet:
        notice(f"wrote {path} (decode view, step {step} of {view.slider.maximum()})")
    return 0


def _checked_config(args):
    """The config the flags ask for, checked and fitted to its inputs (one sentence if not).
    Block sizes are drawn as given, at every N; the whole memory budget is checked here,
    before any window (whose build error would be a dialog)."""
    from desktop.state.config import check_config_memory, conform, make_inputs

    asked = requested_config(args).validated()
    config = conform(asked, make_inputs(asked))
    check_config_memory(config)
    return config


def _one_frame(args, path) -> bool:
    """Whether the export draws one step (a PNG or SVG still): its caches hold one query
    block's history, not the window's 16; a storyboard, PDF pages or an animation visit
    many blocks and are budgeted as the window."""
    return args.storyboard is None and path.suffix.lower() in (".png", ".svg")


def main(argv: list[str]) -> int:
    """`flash-explorer export`."""
    from desktop.export.atomic import clean_interrupts
    from desktop.state.config import set_memory_context

    try:
        with clean_interrupts():  # Ctrl+C: temp file removed, one line, exit 130
            return _export(argv)
    finally:  # a caller in the same process (a test, bench-gui) gets the window's again
        set_memory_context("window")


def _export(argv: list[str]) -> int:
    if "--decode" in argv:  # the decode pass: its own step flags and its own view
        return _export_decode([a for a in argv if a != "--decode"])
    parser = export_parser()
    args = parser.parse_args(argv)
    try:
        from desktop.export.canvas import LANE_TARGETS
        from desktop.export.exporter import (
            STILL_SUFFIXES,
            VIEW_SUFFIXES,
            check_suffix,
            export_animation,
            export_still,
            export_storyboard,
            parse_storyboard,
        )
        from desktop.export.frames import FramePlan, parse_size, parse_steps

        path = check_suffix(args.out, VIEW_SUFFIXES)
        size = parse_size(args.size) if args.size else None
        if _one_frame(args, path):  # its budget counts what one frame holds, not a window's
            from desktop.state.config import set_memory_context

            set_memory_context("export")
        config = _checked_config(args)
        window = headless_window(config, row=args.row, theme=args.theme, size=size or SCREEN_SIZE)
        if not 0 <= args.row < window.state.trace.schedule.n_q:
            raise ExportError(
                f"Row {args.row} does not exist; choose a query row from 0 to "
                f"{window.state.trace.schedule.n_q - 1}."
            )
        overflow = window.overflow_text()
        if overflow:
            print(f"warning: {overflow}", file=sys.stderr)
        steps = parse_steps(args.steps, window.state.n_steps)
        target = args.lane
        if args.storyboard is not None:
            if path.suffix.lower() not in STILL_SUFFIXES:
                raise ExportError(f"A storyboard is a PNG, SVG or PDF, not {path.suffix}.")
            chosen = parse_storyboard(args.storyboard, window.state.n_steps)
            export_storyboard(
                window, path, steps=chosen, target=target, size=size, theme=args.theme
            )
            what = "storyboard of steps " + ",".join(str(s + 1) for s in chosen)
        elif path.suffix.lower() in STILL_SUFFIXES:
            export_still(
                window,
                path,
                target=target,
                step=steps[-1],
                scale=args.scale,
                size=size if target != "window" else None,
                theme=args.theme,
                steps=steps,
            )
            pdf_pages = path.suffix.lower() == ".pdf" and target in LANE_TARGETS
            if pdf_pages and len(steps) > 1:
                what = f"{len(steps)} pages, steps {steps[0] + 1}-{steps[-1] + 1}"
            else:
                what = f"step {steps[-1] + 1} of {window.state.n_steps}"
        else:
            plan = FramePlan(steps, args.hold)
            export_animation(
                window, path, plan=plan, fps=args.fps, target=target, size=size, theme=args.theme
            )
            what = f"{len(plan)} frames, steps {steps[0] + 1}-{steps[-1] + 1}"
        window.close()
    except (ExportError, InputError) as exc:
        return fail(str(exc), parser.prog)
    except MemoryError:
        return fail(OUT_OF_MEMORY, parser.prog)
    if not args.quiet:
        notice(f"wrote {path} ({what})")
    return 0


def main_ledger(argv: list[str]) -> int:
    """`flash-explorer export-ledger`."""
    from desktop.export.atomic import clean_interrupts

    with clean_interrupts():
        return _export_ledger(argv)


def _export_ledger(argv: list[str]) -> int:
    parser = _common_parser(
        "flash-explorer export-ledger",
        "Write the ledger of a configuration as PNG, SVG, PDF, CSV or JSON.",
    )
    parser.add_argument("--scale", type=SCALE, default=1.0, help="PNG scale (default 1)")
    args = parser.parse_args(argv)
    try:
        from desktop.export.exporter import STILL_SUFFIXES, check_suffix
        from desktop.export.ledger_export import LEDGER_SUFFIXES, export_ledger
        from desktop.state.config import ledger_for

        path = check_suffix(args.out, LEDGER_SUFFIXES)
        result = ledger_for(requested_config(args).validated())
        if path.suffix.lower() in STILL_SUFFIXES:
            ensure_app()
        export_ledger(result, path, scale=args.scale)
    except (ExportError, InputError, ValueError) as exc:
        return fail(str(exc), parser.prog)
    except MemoryError:
        return fail(OUT_OF_MEMORY, parser.prog)
    notice(f"wrote {path}")
    return 0
