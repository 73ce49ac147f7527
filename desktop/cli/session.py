"""The Qt application behind every command: display detection, the offscreen app, headless windows.

Imports no Qt at import time, so `flash-explorer ledger` stays light; each function imports
PySide6 when it is called.
"""

from __future__ import annotations

import os
import sys

SCREEN_SIZE = (1600, 1000)  # windows the CLI opens: as main_window.DESIGN_SIZE (not imported: Qt)


def has_display() -> bool:
    """Whether a window can be shown: always off Linux; on Linux, an X11 or Wayland display."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def ensure_app():
    """A QApplication; offscreen when there is no display, so exports run on servers."""
    if not has_display():
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    quiet_platform_notes()
    return QApplication.instance() or QApplication([sys.argv[0]])


def quiet_platform_notes() -> None:
    """Drop the offscreen platform's per-window note from stderr (everything else stays)."""
    from PySide6.QtCore import qInstallMessageHandler

    qInstallMessageHandler(_quiet_platform_notes)


def _quiet_platform_notes(_mode, _context, message: str) -> None:
    # The offscreen platform reports unsupported window hints on every window; that is
    # noise for a headless export. Everything else still reaches stderr.
    if "propagateSizeHints" not in message:
        print(message, file=sys.stderr)


def headless_window(config, *, row: int = 0, theme: str = "light", size=SCREEN_SIZE):
    """A MainWindow on `config`, built synchronously and laid out but never shown on screen."""
    from PySide6.QtCore import Qt

    from desktop.export.atomic import ExportError
    from desktop.window.main_window import MainWindow

    ensure_app()
    errors: list[str] = []

    class HeadlessWindow(MainWindow):
        def show_error(self, message: str) -> None:
            errors.append(message)  # a modal dialog would wait forever with no one to click

    window = HeadlessWindow(config, persist=False, build_inline=True)
    if errors:
        window.close()
        raise ExportError(errors[0])
    window.set_theme(theme)
    window.state.set_row(row)
    window.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    window.resize(*size)
    window.show()
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    return window
