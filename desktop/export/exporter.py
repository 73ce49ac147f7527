"""Export views of a MainWindow: stills (PNG, SVG, PDF), storyboards and animations (GIF, MP4).

Shared by the GUI's File menu and the headless `flash-explorer export`; both write
atomically. The lanes ('both', 'dense', 'tiled') are laid out afresh for the output size
by desktop.export.canvas, from an ExportSource frozen when the export starts (trace,
images, row, config; a window or the source itself may be passed): same options, same
pixels, whichever front end asked, the user's view never moves and a build landing
mid-export changes nothing. The stats and the ledger at a given size are fresh panels
of the window's kind on their own copy of its state, laid out for that size
(frames.view_widget); the window, and those two without a size, are the window's own
widgets, grabbed (and restored to their step).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPoint, QRectF
from PySide6.QtGui import QColor, QPainter, QPalette

from desktop.export.animation_writer import (
    ANIMATION_SUFFIXES,
    check_fps,
    frame_bytes,
    write_animation,
)
from desktop.export.atomic import ExportError, write_bytes_atomic
from desktop.export.canvas import LANE_TARGETS, Frame, LaneCanvas, grid_shape
from desktop.export.devices import image_of, pdf_bytes, still_bytes, svg_bytes
from desktop.export.frames import (
    FOOTER_HEIGHT,
    FramePlan,
    grab,
    png_bytes,
    render_frames,
    render_scaled,
    show_frame,
    step_state,
    target_widget,
    to_rgb_array,
    view_widget,
)
from desktop.export.source import ExportSource, source_of

STILL_SUFFIXES = (".png", ".svg", ".pdf")
VIEW_SUFFIXES = STILL_SUFFIXES + ANIMATION_SUFFIXES
DEFAULT_SIZE = (1280, 720)  # lanes with no --size: a 720p slide
STORY_PANEL = (960, 540)  # a storyboard panel with no --size: 2x2 panels make 1920x1080
STORY_MAX = 36
STORY_NUMBER_PX = 11  # a storyboard panel is shrunk onto its page: smaller numbers go


def check_suffix(path: str | Path, allowed: tuple[str, ...]) -> Path:
    path = Path(path)
    if path.suffix.lower() not in allowed:
        raise ExportError(f"{path.name} has an unknown extension; use {', '.join(allowed)}.")
    return path


def check_frame_memory(window, target: str, size: tuple[int, int] | None) -> None:
    """Refuse, before rendering, frames that with the trace would pass the memory budget.

    Frames are streamed (one in flight), so the need is the trace's arrays plus one frame.
    `window` is the window, or for the lanes an ExportSource.
    """
    from compute.inputs import DEFAULT_MEMORY_BUDGET_BYTES
    from desktop.state.config import config_memory

    if target in LANE_TARGETS:
        w, h = size or DEFAULT_SIZE
    else:
        widget = target_widget(window, target)
        w, h = size or (widget.width(), widget.height() + FOOTER_HEIGHT)
    c = window.config if isinstance(window, ExportSource) else window.state.config
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


def frame_of(window, step: int, progress: float = 1.0) -> Frame:
    """The window's (or a source's) trace, images and row at `step`, frozen (the window
    is not moved)."""
    return source_of(window).frame(step, progress)


def output_size(size: tuple[int, int] | None, scale: float) -> tuple[int, int]:
    w, h = size or DEFAULT_SIZE
    return max(16, round(w * scale)), max(16, round(h * scale))


def _widget_still(window, suffix: str, target: str, step: int, scale: float, size) -> bytes:
    """The window, stats or ledger at `step`: its own paint code on any device (the stats
    and the ledger laid out afresh for `size` when one is given)."""
    with view_widget(window, target, size) as (widget, state):
        step_state(state, step)
        if suffix == ".png":
            image = grab(widget, size) if size is not None else render_scaled(widget, scale)
            return png_bytes(image)
        wsize = (widget.width(), widget.height())

        def paint(p: QPainter) -> None:
            widget.render(p, QPoint())

        caption = state.trace.steps[step].describe()
        if suffix == ".svg":
            return svg_bytes(wsize, paint, description=caption)
        return pdf_bytes(wsize, [paint], title=caption)


def lane_still_bytes(
    source, suffix: str, target: str, steps: Sequence[int], size: tuple[int, int], theme: str
) -> bytes:
    """Lanes at each of `steps` (one page each; PNG and SVG take the last), captioned."""
    source = source_of(source)
    canvas = LaneCanvas(source.trace, target, size, theme, lines=2)
    vector = suffix != ".png"

    def page(step: int) -> Callable[[QPainter], None]:
        return lambda p: canvas.paint(p, source.frame(step), vector=vector)

    if suffix == ".pdf":
        return pdf_bytes(size, [page(s) for s in steps], title="FlashAttention Explorer")
    fill = canvas.palette.color(QPalette.ColorRole.Window)
    caption = source.caption(steps[-1])
    return still_bytes(suffix, size, page(steps[-1]), fill, description=caption)


def export_still(
    window,
    path: str | Path,
    *,
    target: str = "window",
    step: int,
    scale: float = 1.0,
    size: tuple[int, int] | None = None,
    theme: str = "light",
    steps: Sequence[int] | None = None,
) -> Path:
    """One view at `step` to PNG, SVG or PDF; a PDF of lanes takes every one of `steps`.

    Lanes are laid out for `size` (default 1280x720) times `scale`, in `theme`; the
    stats and the ledger are laid out for `size` when one is given; the window (and those
    two without a size) is the window's widget at its size, rendered at `scale` or at the
    scale that fits `size`."""
    path = check_suffix(path, STILL_SUFFIXES)
    suffix = path.suffix.lower()
    if not 0.25 <= scale <= 8:
        raise ExportError(f"Scale {scale} is outside 0.25 to 8; choose e.g. 1 or 2.")
    if target in LANE_TARGETS:
        source = source_of(window)
        out = output_size(size, scale)
        check_frame_memory(source, target, out)
        pages = list(steps) if steps and suffix == ".pdf" else [step]
        return write_bytes_atomic(path, lane_still_bytes(source, suffix, target, pages, out, theme))
    with kept_step(window):
        return write_bytes_atomic(path, _widget_still(window, suffix, target, step, scale, size))


def parse_storyboard(text: str, n_steps: int) -> list[int]:
    """'1,5,9,27' (1-based; ranges A:B allowed) -> 0-based steps, in the order given."""
    steps: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition(":")
        try:
            a = int(first) if first else 1
            b = (int(last) if last else n_steps) if sep else a
        except ValueError:
            raise ExportError(
                f"Storyboard {text!r} is not a list of steps like 1,5,9,{n_steps}."
            ) from None
        if not 1 <= a <= b <= n_steps:
            raise ExportError(
                f"Storyboard step {part!r} falls outside 1:{n_steps}; choose steps from 1 "
                f"to {n_steps}."
            )
        steps.extend(range(a - 1, b))
    if not 1 <= len(steps) <= STORY_MAX:
        raise ExportError(
            f"A storyboard takes 1 to {STORY_MAX} steps, not {len(steps)}; e.g. 1,5,9,{n_steps}."
        )
    return steps


def storyboard_size(n: int, size: tuple[int, int] | None) -> tuple[int, int]:
    """The page: `size` if given, else panels of STORY_PANEL in an as-square grid."""
    if size is not None:
        return size
    cols, rows = grid_shape(n)
    return cols * STORY_PANEL[0], rows * STORY_PANEL[1]


def storyboard_pages(
    source, steps: Sequence[int], target: str, size: tuple[int, int], theme: str, vector: bool
) -> Callable[[QPainter], None]:
    """A painter of the grid: each step a panel of the lanes, captioned with it in words."""
    source = source_of(source)
    cols, rows = grid_shape(len(steps))
    pw, ph = size[0] // cols, size[1] // rows
    canvas = LaneCanvas(
        source.trace, target, (pw, ph), theme, lines=2, number_min_px=STORY_NUMBER_PX
    )
    fill = canvas.palette.color(QPalette.ColorRole.Window)
    rule = canvas.palette.color(QPalette.ColorRole.Mid)

    def paint(p: QPainter) -> None:
        p.fillRect(QRectF(0, 0, size[0], size[1]), fill)
        for k, step in enumerate(steps):
            row, col = divmod(k, cols)
            p.save()
            p.translate(col * pw, row * ph)
            p.setClipRect(QRectF(0, 0, pw, ph))
            canvas.paint(p, source.frame(step), vector=vector)
            p.setClipping(False)
            p.setPen(rule)
            p.drawRect(QRectF(0.5, 0.5, pw - 1, ph - 1))  # panels read apart when pasted
            p.restore()

    return paint


def export_storyboard(
    window,
    path: str | Path,
    *,
    steps: Sequence[int],
    target: str = "both",
    size: tuple[int, int] | None = None,
    theme: str = "light",
) -> Path:
    """A grid of the lanes at chosen steps, each captioned in words, as PNG, SVG or PDF."""
    path = check_suffix(path, STILL_SUFFIXES)
    if target not in LANE_TARGETS:
        raise ExportError(
            f"A storyboard draws lanes; choose --lane {', '.join(LANE_TARGETS)}, not {target}."
        )
    suffix = path.suffix.lower()
    source = source_of(window)
    page_size = storyboard_size(len(steps), size)
    check_frame_memory(source, target, page_size)
    paint = storyboard_pages(source, steps, target, page_size, theme, suffix != ".png")
    fill = QColor(255, 255, 255)
    words = "Storyboard of steps " + ", ".join(str(s + 1) for s in steps)
    return write_bytes_atomic(path, still_bytes(suffix, page_size, paint, fill, description=words))


def lane_frames(
    source,
    plan: FramePlan,
    target: str,
    size: tuple[int, int] | None,
    theme: str,
) -> Iterator[np.ndarray]:
    """RGB arrays of the lanes for every frame of `plan`, laid out for `size`, one at a
    time (a plan of millions of frames is never held)."""
    source = source_of(source)
    out = size or DEFAULT_SIZE
    canvas = LaneCanvas(source.trace, target, out, theme, lines=1)
    fill = canvas.palette.color(QPalette.ColorRole.Window)
    total = len(plan)
    for index, (step, progress) in enumerate(plan.frames()):
        frame, fraction = source.frame(step, progress), (index + 1) / total
        paint = partial(canvas.paint, frame=frame, fraction=fraction)
        yield to_rgb_array(image_of(out, paint, fill))


def export_animation(
    window,
    path: str | Path,
    *,
    plan: FramePlan,
    fps: float,
    target: str = "both",
    size: tuple[int, int] | None = None,
    progress: Callable[[int, int], bool] | None = None,
    theme: str = "light",
) -> Path:
    """A step range as a looping GIF or an MP4, each step held `plan.hold` frames.

    The lanes are drawn from `window` frozen at the call (an ExportSource may be passed
    instead); an animation past MAX_FRAMES or MAX_SECONDS is refused before its file is
    made, with its frame count, duration and estimated size and time."""
    path = check_suffix(path, ANIMATION_SUFFIXES)
    check_fps(fps)
    if target in LANE_TARGETS:
        source = source_of(window)
        check_frame_memory(source, target, size)
        frames = lane_frames(source, plan, target, size, theme)
        check_animation_length(path, plan, fps, frames)
        return write_animation(path, frames, total=len(plan), fps=fps, progress=progress)
    check_frame_memory(window, target, size)
    with kept_step(window):
        frames = render_frames(window, plan, target, size)
        check_animation_length(path, plan, fps, frames)
        return write_animation(path, frames, total=len(plan), fps=fps, progress=progress)


# Past these an animation is not a teaching clip: a 10,000-frame GIF at 1280x720 is
# gigabytes and an hour of rendering on a laptop, so it is refused with the estimate.
MAX_FRAMES = 10_000
MAX_SECONDS = 30 * 60


def check_animation_length(path: Path, plan: FramePlan, fps: float, frames) -> None:
    """Refuse a plan past MAX_FRAMES or MAX_SECONDS, saying what it would take.

    The estimate renders and encodes one frame (the first of `frames`)."""
    count, seconds = len(plan), len(plan) / fps
    if count <= MAX_FRAMES and seconds <= MAX_SECONDS:
        return
    cost = measure_frame(frames, path.suffix.lower())
    if cost is None:
        return
    raise ExportError(
        f"{count:,} frames ({_duration(seconds)} at {fps:g} fps) would take "
        f"{estimate_words(count, cost)}; "
        f"choose at most {MAX_FRAMES:,} frames and {MAX_SECONDS // 60} minutes (fewer steps, "
        "a smaller hold or a higher fps)."
    )


@dataclass(frozen=True)
class FrameCost:
    """What one measured frame took: seconds to render and encode, bytes it adds to the
    file, and its pixels (other sizes scale by pixel count)."""

    seconds: float
    bytes: int
    pixels: int

    def at(self, size: tuple[int, int]) -> FrameCost:
        ratio = size[0] * size[1] / max(1, self.pixels)
        return FrameCost(self.seconds * ratio, round(self.bytes * ratio), size[0] * size[1])


def measure_frame(frames, suffix: str) -> FrameCost | None:
    """Render the first of `frames` and encode it as `suffix` would, timed (None if empty)."""
    start = time.perf_counter()
    first = next(iter(frames), None)
    if first is None:
        return None
    size = frame_file_bytes(first, suffix)
    took = time.perf_counter() - start
    return FrameCost(took, size, first.shape[0] * first.shape[1])


def lane_frame_cost(
    source, target: str, size: tuple[int, int], theme: str, step: int, suffix: str = ".gif"
) -> FrameCost | None:
    """One lane frame at `step` and `size`, measured: the basis of an animation estimate.

    The second of two is timed: the first also paints the fixed layer, which the frames
    after it reuse (timing it doubled the estimate of a 60-frame clip)."""
    frames = lane_frames(source, FramePlan(range(step, step + 1), 2), target, size, theme)
    next(frames, None)
    return measure_frame(frames, suffix)


def estimate_words(count: int, cost: FrameCost) -> str:
    """'about 3 min to render and about 41 MiB' for `count` frames of `cost` each."""
    total = cost.bytes * count
    size = f"{total / 2**30:,.1f} GiB" if total >= 2**30 else f"{max(1, total / 2**20):,.0f} MiB"
    return f"about {_duration(count * cost.seconds)} to render and about {size}"


def frame_file_bytes(frame: np.ndarray, suffix: str) -> int:
    """Bytes one frame adds to a GIF (its palette image) or an MP4 (about a tenth of that)."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(frame).quantize(method=Image.Quantize.FASTOCTREE).save(out, "GIF")
    return out.tell() if suffix == ".gif" else max(1, out.tell() // 10)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"
