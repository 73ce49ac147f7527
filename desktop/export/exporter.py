"""Export views of a MainWindow: still frames (PNG, SVG) and animations (GIF, MP4).

Shared by the GUI's File menu and the headless `flash-explorer export`; both write
atomically and restore the window's step when done, whatever happens.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor, QImage, QPainter

from desktop.export.animation_writer import (
    ANIMATION_SUFFIXES,
    check_fps,
    frame_bytes,
    write_animation,
)
from desktop.export.atomic import ExportError, write_bytes_atomic
from desktop.export.frames import (
    FOOTER_HEIGHT,
    FramePlan,
    grab,
    png_bytes,
    render_frames,
    render_svg,
    show_frame,
    target_widget,
)

STILL_SUFFIXES = (".png", ".svg")
VIEW_SUFFIXES = STILL_SUFFIXES + ANIMATION_SUFFIXES


def check_suffix(path: str | Path, allowed: tuple[str, ...]) -> Path:
    path = Path(path)
    if path.suffix.lower() not in allowed:
        raise ExportError(f"{path.name} has an unknown extension; use {', '.join(allowed)}.")
    return path


def check_frame_memory(window, target: str, size: tuple[int, int] | None) -> None:
    """Refuse, before rendering, frames that with the trace would pass the memory budget.

    Frames are streamed (one in flight), so the need is the trace's arrays plus one frame.
    """
    from compute.inputs import DEFAULT_MEMORY_BUDGET_BYTES
    from desktop.state.config import config_memory

    widget = target_widget(window, target)
    w, h = size or (widget.width(), widget.height() + FOOTER_HEIGHT)
    c = window.state.config
    held = config_memory(c) if c else 0
    need = frame_bytes(w, h)
    if held + need > DEFAULT_MEMORY_BUDGET_BYTES:
        raise ExportError(
            f"Frames of {w}x{h} need about {need / 2**20:,.0f} MiB each on top of "
            f"{held / 2**20:,.0f} MiB for the trace, over the "
            f"{DEFAULT_MEMORY_BUDGET_BYTES / 2**20:,.0f} MiB memory budget; choose a smaller size."
        )


@contextmanager
def kept_step(window):
    """Put the window back on the step (and arrived transfers) it showed before."""
    step = window.state.step
    try:
        yield
    finally:
        show_frame(window, min(step, max(0, window.state.n_steps - 1)))


def scaled_image(window, target: str, step: int, scale: float) -> QImage:
    """A view rendered at `scale` × its size (e.g. 2 for print), not upsampled pixels."""
    widget = target_widget(window, target)
    show_frame(window, step)
    if scale == 1:
        return grab(widget)
    size = widget.size()
    image = QImage(
        round(size.width() * scale), round(size.height() * scale), QImage.Format.Format_RGB888
    )
    image.setDevicePixelRatio(scale)
    image.fill(QColor(widget.palette().window().color()))
    painter = QPainter(image)
    widget.render(painter, QPoint())
    painter.end()
    return image


def export_still(
    window,
    path: str | Path,
    *,
    target: str = "window",
    step: int,
    scale: float = 1.0,
    size: tuple[int, int] | None = None,
) -> Path:
    """One view at `step` to PNG (at `scale` or fitted to `size`) or SVG."""
    path = check_suffix(path, STILL_SUFFIXES)
    if not 0.25 <= scale <= 8:
        raise ExportError(f"Scale {scale} is outside 0.25 to 8; choose e.g. 1 or 2.")
    with kept_step(window):
        if path.suffix.lower() == ".svg":
            return write_bytes_atomic(path, render_svg(window, target, step))
        if size is not None:
            show_frame(window, step)
            image = grab(target_widget(window, target), size)
        else:
            image = scaled_image(window, target, step, scale)
        return write_bytes_atomic(path, png_bytes(image))


def export_animation(
    window,
    path: str | Path,
    *,
    plan: FramePlan,
    fps: float,
    target: str = "both",
    size: tuple[int, int] | None = None,
    progress: Callable[[int, int], bool] | None = None,
) -> Path:
    """A step range as a looping GIF or an MP4, each step held `plan.hold` frames."""
    path = check_suffix(path, ANIMATION_SUFFIXES)
    check_fps(fps)
    check_frame_memory(window, target, size)
    with kept_step(window):
        frames = render_frames(window, plan, target, size)
        return write_animation(path, frames, total=len(plan), fps=fps, progress=progress)
