"""The GUI entry point: `main(argv)` parses the window's flags and runs the window.

`--screenshot PATH [config flags] [--step K]` renders the window at step K (default:
the last) to a PNG and exits; it builds synchronously, reads no saved settings and
works with QT_QPA_PLATFORM=offscreen.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from desktop.cli.args import OneLineParser, add_config_arguments, requested_config
from desktop.cli.session import SCREEN_SIZE, has_display, quiet_platform_notes
from desktop.cli.x11_check import x11_problem
from desktop.state.config import Config

CONFIG_FLAGS = (
    "--n",
    "--n-keys",
    "--d",
    "--dv",
    "--block-q",
    "--block-k",
    "--order",
    "--causal",
    "--mask",
    "--window",
    "--packed",
    "--save-lse",
    "--dtype",
    "--sram",
    "--pass",
    "--input",
    "--seed",
    "--input-scale",
    "--open",
)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="flash-explorer",
        description="Watch dense and FlashAttention-style tiled attention move data, step by step.",
    )
    add_config_arguments(p)  # the ledger command's flags, including --row
    p.add_argument("--open", metavar="FILE", help="open Q, K, V from a .npy or .npz file")
    p.add_argument("--screenshot", metavar="PATH", help="render the window to a PNG and exit")
    p.add_argument("--step", type=int, help="step shown by --screenshot (1-based; default: last)")
    p.add_argument("--theme", choices=("system", "light", "dark"), help="colour theme")
    return p


def flags_given(argv: list[str]) -> bool:
    """Whether any configuration flag was typed (then flags, not saved settings, decide)."""
    return any(a.split("=")[0] in CONFIG_FLAGS for a in argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    if not has_display() and not os.environ.get("QT_QPA_PLATFORM"):
        if not args.screenshot:
            print(
                "flash-explorer: error: no display was found; run it on a desktop, or use "
                "--screenshot or `flash-explorer export` for headless output.",
                file=sys.stderr,
            )
            return 2
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a screenshot needs no screen
    if problem := x11_problem():  # before Qt, whose xcb plugin would abort the process
        if not args.screenshot:
            print(f"flash-explorer: error: {problem}", file=sys.stderr)
            return 2
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a screenshot needs no screen
    if args.screenshot:
        quiet_platform_notes()
    from PySide6.QtWidgets import QApplication

    from desktop.window.main_window import APPLICATION, ORGANISATION, MainWindow, saved_config

    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setOrganizationName(ORGANISATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("FlashAttention Explorer")
    from desktop.window.saved_settings import widget_range_problem

    try:  # a contradicting or unfitting mask (compute.mask) is one sentence too
        problem = widget_range_problem(requested_config(args).validated())
    except ValueError as exc:
        problem = str(exc)
    if problem:
        print(f"flash-explorer: error: {problem}", file=sys.stderr)
        return 2
    if args.screenshot:
        return _screenshot(args, MainWindow)
    config = requested_config(args) if flags_given(argv) else saved_config() or Config()
    window = MainWindow(config)
    if "--row" in argv or any(a.startswith("--row=") for a in argv):
        window.state.set_row(args.row)
    if args.theme:
        window.set_theme(args.theme)
    window.show()
    window.raise_()
    quit_on_signals(app, window)
    return app.exec()


def quit_on_signals(app, window) -> None:
    """SIGINT (Ctrl+C) and SIGTERM close the window as its Quit does (settings saved) and
    exit 130 or 143. Python runs signal handlers only between bytecodes, so a timer
    hands it control while Qt's loop waits; the handler itself only queues the close."""
    import signal

    from PySide6.QtCore import QTimer

    def close(signum: int) -> None:
        window.close()
        app.exit(128 + signum)

    def handler(signum: int, _frame) -> None:
        QTimer.singleShot(0, lambda: close(signum))

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    ticker = QTimer(window, interval=200)
    ticker.timeout.connect(lambda: None)
    ticker.start()


def _screenshot(args: argparse.Namespace, window_class) -> int:
    from desktop.export.atomic import clean_interrupts

    with clean_interrupts():  # Ctrl+C or SIGTERM: no partial file, one line, exit 130/143
        return _write_screenshot(args, window_class)


def _write_screenshot(args: argparse.Namespace, window_class) -> int:
    """The same rules as `export`: .png only, steps and rows checked, written atomically."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    from compute import InputError
    from desktop.export.atomic import ExportError, describe_os_error
    from desktop.export.exporter import check_suffix, export_still
    from desktop.state.config import build

    prog = "flash-explorer"
    path = Path(args.screenshot)
    try:
        check_suffix(path, (".png",))
        build(requested_config(args))  # one sentence before any window (and dialog) exists
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ExportError(describe_os_error(exc, path)) from None
        window = window_class(requested_config(args), persist=False, build_inline=True)
        window.set_theme(args.theme or "light")
        n, n_q = window.state.n_steps, window.state.trace.schedule.n_q
        if not 0 <= args.row < n_q:
            raise ExportError(
                f"Row {args.row} does not exist; choose a query row from 0 to {n_q - 1}."
            )
        if args.step is not None and not 1 <= args.step <= n:
            raise ExportError(f"Step {args.step} does not exist; choose a step from 1 to {n}.")
        if window.overflow_text():
            print(f"warning: {window.overflow_text()}", file=sys.stderr)
        window.state.set_row(args.row)
        window.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
        window.resize(*SCREEN_SIZE)
        window.show()
        QApplication.processEvents()
        step = n - 1 if args.step is None else args.step - 1
        export_still(window, path, target="window", step=step)
        window.close()
    except (ExportError, InputError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"{prog}: error: this configuration needs more memory than is free.", file=sys.stderr)
        return 2
    print(f"wrote {path} (step {step + 1} of {n})")
    return 0
