"""Frame plans, size and step parsing, and frames grabbed from the window's own widgets.

The window, stats and ledger targets are the window's widgets, grabbed at each
(step, progress) of a FramePlan (the lanes are laid out per size by canvas.py). A step can be held for several frames,
during which its transfer arrows travel from 0 to 1, so moves read clearly. Animation
frames add a footer with the step in words (the status bar's text) and a clip-position
bar, so a looping GIF on a slide explains itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPoint, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QApplication, QWidget

from desktop.export.atomic import ExportError

# What a frame can show: the whole window, both lanes, one lane, the stats or the ledger.
TARGETS: tuple[str, ...] = ("window", "both", "dense", "tiled", "stats", "ledger")


def parse_size(text: str) -> tuple[int, int]:
    """'1280x720' -> (1280, 720); one sentence on anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not match or not (16 <= int(match[1]) <= 8192 and 16 <= int(match[2]) <= 8192):
        raise ExportError(f"Size {text!r} is not WIDTHxHEIGHT between 16 and 8192, e.g. 1280x720.")
    return int(match[1]), int(match[2])


def parse_steps(text: str | None, n_steps: int) -> range:
    """1-based inclusive 'A:B' (either side may be empty) or 'K' -> a 0-based range."""
    if text is None or text.strip() in ("", ":"):
        return range(n_steps)
    match = re.fullmatch(r"\s*(\d*)\s*(:?)\s*(\d*)\s*", text)
    if not match or (not match[2] and not match[1]):
        raise ExportError(f"Steps {text!r} are not A:B or K (1-based, e.g. 1:{n_steps}).")
    first = int(match[1]) if match[1] else 1
    last = (int(match[3]) if match[3] else n_steps) if match[2] else first
    if not 1 <= first <= last <= n_steps:
        raise ExportError(
            f"Steps {text!r} fall outside 1:{n_steps} or run backwards; choose A:B with "
            f"1 ≤ A ≤ B ≤ {n_steps}."
        )
    return range(first - 1, last)


@dataclass(frozen=True)
class FramePlan:
    """Which (step, transfer progress) pairs become frames: each step held `hold` frames."""

    steps: range
    hold: int = 1

    def __post_init__(self) -> None:
        if self.hold < 1:
            raise ExportError(f"Hold must be at least 1 frame per step, not {self.hold}.")

    def frames(self) -> Iterator[tuple[int, float]]:
        """Each frame's (step, progress), generated as asked for: a plan of millions of
        frames is never held as a list."""
        return ((s, (h + 1) / self.hold) for s in self.steps for h in range(self.hold))

    def __len__(self) -> int:
        return len(self.steps) * self.hold


def target_widget(window, target: str) -> QWidget:
    """The widget that a target names in a MainWindow."""
    if target not in TARGETS:
        raise ExportError(f"Unknown view {target!r}; choose one of {', '.join(TARGETS)}.")
    if target == "window":
        return window
    if target == "both":
        return window.lanes["dense"].parentWidget()
    if target in ("stats", "ledger"):
        return window.stats_panel if target == "stats" else window.ledger_panel
    return window.lanes[target]


# Panels an export lays out afresh for the output size: a 16:9 slide of the statistics
# or the ledger, not the narrow dock the user happens to have.
PANEL_TARGETS = ("stats", "ledger")
PANEL_REFERENCE = (1280.0, 720.0)  # logical size of a panel on a 720p slide (zoom 1)
PANEL_ZOOM_MIN = 0.75  # smaller outputs keep readable text and lay out on more room


@contextmanager
def view_widget(
    window, target: str, size: tuple[int, int] | None
) -> Iterator[tuple[QWidget, object]]:
    """(widget, state): the widget an export of `target` draws and the AppState to step.

    For the stats and the ledger at a given `size`, a fresh panel of the window's own
    kind, laid out at the output's aspect ratio and never shown, on its own copy of the
    window's state (AppState.adopt, as the offscreen twin window does): the export steps
    that copy, so the window never moves and a build landing in it changes nothing.
    Otherwise the window's widget and the window's state."""
    widget = target_widget(window, target)
    if size is None or target not in PANEL_TARGETS:
        yield widget, window.state
        return
    zoom = max(PANEL_ZOOM_MIN, min(size[0] / PANEL_REFERENCE[0], size[1] / PANEL_REFERENCE[1]))
    state = type(window.state)()
    panel = type(widget)(state)
    panel.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    panel.setPalette(widget.palette())
    if hasattr(panel, "as_slide"):
        panel.as_slide()  # a picture: no spin boxes or buttons on it
    panel.resize(max(1, round(size[0] / zoom)), max(1, round(size[1] / zoom)))
    panel.show()
    state.adopt(window.state)  # its signals fill the panel
    QApplication.processEvents()
    try:
        yield panel, state
    finally:
        panel.close()
        panel.deleteLater()
        state.deleteLater()


def show_frame(window, step: int, progress: float = 1.0) -> None:
    """Put the window at `step` with transfers `progress` of the way along, painted."""
    step_state(window.state, step, progress)


def step_state(state, step: int, progress: float = 1.0) -> None:
    """Put an AppState (and the views that follow it) at `step`, painted."""
    state.set_step(step)
    state.set_progress(progress)
    QApplication.processEvents()


def grab(widget: QWidget, size: tuple[int, int] | None = None) -> QImage:
    """The widget as an RGB image; with `size`, drawn by its own paint code at the scale
    that fits `size` (crisp text at any output size, never upsampled pixels) and centred
    on its background."""
    if size is None:
        image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
        image.setDevicePixelRatio(1.0)
        return image
    image = render_scaled(widget, fit_scale(widget, size))
    canvas = QImage(size[0], size[1], QImage.Format.Format_RGB888)
    canvas.fill(widget.palette().window().color())
    painter = QPainter(canvas)
    _draw_fitted(painter, image, QRectF(0, 0, size[0], size[1]))
    painter.end()
    return canvas


def fit_scale(widget: QWidget, size: tuple[int, int]) -> float:
    """The scale at which `widget` fills `size` without cropping."""
    return min(size[0] / max(1, widget.width()), size[1] / max(1, widget.height()))


def render_scaled(widget: QWidget, scale: float) -> QImage:
    """The widget painted at `scale` × its size (its fonts and lines drawn at that size,
    not its pixels stretched); device pixel ratio 1, so it draws 1:1 on a canvas."""
    if scale == 1:
        return grab(widget)
    size = widget.size()
    image = QImage(
        max(1, round(size.width() * scale)),
        max(1, round(size.height() * scale)),
        QImage.Format.Format_RGB888,
    )
    image.setDevicePixelRatio(scale)
    image.fill(widget.palette().window().color())
    painter = QPainter(image)
    widget.render(painter, QPoint())
    painter.end()
    image.setDevicePixelRatio(1.0)
    return image


def _draw_fitted(painter: QPainter, image: QImage, rect: QRectF) -> None:
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
    s = min(rect.width() / image.width(), rect.height() / image.height())
    w, h = image.width() * s, image.height() * s
    painter.drawImage(
        QRectF(rect.x() + (rect.width() - w) / 2, rect.y() + (rect.height() - h) / 2, w, h), image
    )


FOOTER_HEIGHT = 30


def animation_frame(
    view: QImage, caption: str, fraction: float, size: tuple[int, int] | None
) -> QImage:
    """A view with a footer: the step in words and a bar showing the position in the clip.

    The bar advances every frame, so held frames differ and GIF writers keep each one
    (Pillow merges identical neighbours), and a viewer of a looping GIF sees where it is.
    """
    w = size[0] if size else view.width()
    h = size[1] if size else view.height() + FOOTER_HEIGHT
    background = QColor(view.pixel(0, 0))
    dark = background.lightness() < 128
    canvas = QImage(w, h, QImage.Format.Format_RGB888)
    canvas.fill(background)
    painter = QPainter(canvas)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    _draw_fitted(painter, view, QRectF(0, 0, w, h - FOOTER_HEIGHT))
    text = QColor("#e6e6e6" if dark else "#303030")
    painter.setPen(text)
    font = painter.font()
    font.setPixelSize(13)
    painter.setFont(font)
    painter.drawText(
        QRectF(8, h - FOOTER_HEIGHT, w - 16, FOOTER_HEIGHT - 5),
        Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
        painter.fontMetrics().elidedText(caption, Qt.TextElideMode.ElideRight, w - 16),
    )
    track = QColor(text)
    track.setAlpha(40)
    painter.fillRect(QRectF(0, h - 4, w, 4), track)
    painter.fillRect(QRectF(0, h - 4, w * fraction, 4), QColor("#4393c3"))
    painter.end()
    return canvas


def to_rgb_array(image: QImage) -> np.ndarray:
    """An RGB888 QImage as an (H, W, 3) uint8 array (copy; rows may be padded in Qt)."""
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = image.width(), image.height(), image.bytesPerLine()
    buf = np.frombuffer(image.constBits(), dtype=np.uint8, count=stride * h)
    return buf.reshape(h, stride)[:, : w * 3].reshape(h, w, 3).copy()


def render_frames(
    window, plan: FramePlan, target: str, size: tuple[int, int] | None = None
) -> Iterator[np.ndarray]:
    """Yield RGB arrays for every frame of `plan`, drawn by the window's own views."""
    total = len(plan)
    with view_widget(window, target, size) as (widget, state):
        for index, (step, progress) in enumerate(plan.frames()):
            step_state(state, step, progress)
            caption = state.trace.steps[step].describe()
            if size is None:
                view = grab(widget)
            else:  # drawn at the scale of the frame's view area, above the footer
                area = (size[0], max(1, size[1] - FOOTER_HEIGHT))
                view = render_scaled(widget, fit_scale(widget, area))
            yield to_rgb_array(animation_frame(view, caption, (index + 1) / total, size))


def png_bytes(image: QImage) -> bytes:
    """`image` encoded as PNG in memory (the caller writes it, checking every write)."""
    from PySide6.QtCore import QBuffer, QIODevice

    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise ExportError("Qt could not encode the image as PNG; try a smaller size.")
    return bytes(buffer.data())
