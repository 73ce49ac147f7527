"""The upper half of a lane: HBM tensors, what is written so far, the selected row.

Functions of a LaneContext. Everything that stays fixed for a trace (frames, heatmaps,
numbers, block grid) is painted once into a pixmap the view caches; per step only the
live KV-outer state, veils over not-yet-written cells and the row outline are drawn.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontInfo,
    QFontMetricsF,
    QImage,
    QPainter,
    QPalette,
    QPen,
    QPixmap,
)

from compute import Trace
from desktop.lanes.context import LaneContext
from desktop.lanes.masks import paint_mask
from desktop.lanes.painting import NEUTRAL, draw_grid, draw_image, draw_numbers, veil_image
from desktop.scene import geometry as geo
from desktop.scene.backward import NK_TENSORS
from desktop.scene.render import NUMBERS_CAP, ColorScale, downsample, kv_outer_hbm
from desktop.theme import qimage

NO_SCALE = ColorScale(float("inf"))  # numbers in dark text on a neutral tint
# A label may reach this far past its tensor's edge: less than half the gap between
# neighbouring tensors, so two labels always keep a few pixels between them.
LABEL_SPILL = geo.GAP / 2 - 2
LABEL_MIN_PX = 7  # the smallest label font: below it a label is not read, only seen
MARK_MIN = 6.0  # px: the written rows' mark is never thinner (N = 4096: 64 rows ≈ 2 px)


def tensor_label(sym: str, rows: int, cols: int, room: float, font: QFont) -> tuple[str, QFont]:
    """The label over a tensor that fits `room` px: the name and shape, else the name,
    at the lane's font or, for a narrow column, smaller down to LABEL_MIN_PX."""
    fm = QFontMetricsF(font)
    for text in (f"{sym}  {rows}×{cols}", f"{sym} {rows}×{cols}", sym):
        if fm.horizontalAdvance(text) <= room:
            return text, font
    small = QFont(font)
    px = QFontInfo(font).pixelSize()
    while px > LABEL_MIN_PX:
        px -= 1
        small.setPixelSize(px)
        if QFontMetricsF(small).horizontalAdvance(sym) <= room:
            break
    return sym, small


def paint_frame(p: QPainter, ctx: LaneContext, rect: QRectF, label: str) -> None:
    pal = ctx.palette
    p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
    p.setBrush(pal.color(QPalette.ColorRole.Base))
    p.drawRoundedRect(rect, 6, 6)
    p.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
    f = QFont(ctx.font)
    f.setPointSizeF(f.pointSizeF() * 0.85)
    p.setFont(f)
    p.save()  # the frame's name runs up its left margin, out of the tensors' way
    p.translate(rect.left() + 3, rect.bottom() - 4)
    p.rotate(-90)
    if p.fontMetrics().horizontalAdvance(label) > rect.height() - 8:
        label = label.split(" ")[0]  # a short frame: "SRAM", not "SRAM (on chi…"
    p.drawText(QRectF(0, 0, rect.height() - 8, 14), Qt.AlignmentFlag.AlignLeft, label)
    p.restore()
    p.setFont(ctx.font)


def veil_colors(ctx: LaneContext) -> tuple[QColor, QColor]:
    base = QColor(ctx.palette.color(QPalette.ColorRole.Base))
    never, partial = QColor(base), QColor(base)
    never.setAlpha(255)  # hides the numbers painted underneath, too
    partial.setAlpha(150)
    return never, partial


def static_layer(
    ctx: LaneContext, trace: Trace, hbm: QRectF, sram: QRectF, size: tuple[int, int], dpr: float
) -> QPixmap:
    """Everything that does not change with the step, painted once per trace and size."""
    pix = QPixmap(int(size[0] * dpr), int(size[1] * dpr))
    pix.setDevicePixelRatio(dpr)
    pix.fill(ctx.palette.color(QPalette.ColorRole.Window))
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    paint_frame(p, ctx, hbm, "HBM (off chip)")
    paint_frame(p, ctx, sram, "SRAM (on chip)")
    paint_hbm(p, ctx, trace)
    p.end()
    return pix


def paint_hbm(p: QPainter, ctx: LaneContext, trace: Trace, step: int | None = None) -> None:
    """Tensors, numbers and block grid. With `step` (a vector export, painted per step),
    numbers not yet written at `step` are left out, since a veil over text on a vector
    page would hide it from the eye but not from the page's text layer."""
    s = trace.schedule
    images = ctx.state.images
    lane_imgs = images.lanes[ctx.lane]
    text = ctx.palette.color(QPalette.ColorRole.WindowText)
    grid = QColor(ctx.palette.color(QPalette.ColorRole.Mid))
    grid.setAlpha(160)
    for name, r in ctx.rects.items():
        img = lane_imgs.get(name)
        ghost = img is None and ctx.lane == "tiled"
        if img is None and not ghost:
            continue  # the dense lane has no m, ℓ, L
        p.setPen(text)
        p.setFont(ctx.font)
        sym = geo.SYMBOL.get(name, name)
        rows, cols = img.shape if img else (s.n_q, s.n_k if name in NK_TENSORS else 1)
        label_rect = QRectF(r.left() - LABEL_SPILL, r.top() - 20, r.width() + 2 * LABEL_SPILL, 18)
        label, font = tensor_label(sym, rows, cols, label_rect.width(), ctx.font)
        p.setFont(font)
        p.drawText(label_rect, Qt.AlignmentFlag.AlignCenter, label)
        p.setFont(ctx.font)
        if ghost:
            paint_ghost(p, ctx, r, name)
            if name in NK_TENSORS:
                paint_mask(p, ctx.palette, s, r)
            continue
        if name in ctx.live:
            continue  # drawn per step by paint_live
        draw_image(p, r, ctx.images[name])
        if img.pending:  # the second tier is still computing it
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, "computing…")
        if img.values is not None:
            hidden = _unwritten(img, step)
            draw_numbers(
                p, r, img.values, images.scale_for(name), ctx.font, hidden, ctx.number_min_px
            )
        block = (
            s.block_q if name in geo.QUERY_TENSORS else s.block_k,
            s.block_k if name in NK_TENSORS else 0,
        )
        draw_grid(p, r, img.shape, block, grid)
        if name in NK_TENSORS:
            paint_mask(p, ctx.palette, s, r)


def _unwritten(img, step: int | None):
    """Cells never written by `step` (None: painted for every step, veils cover them)."""
    veils = img.veils(step) if step is not None else None
    if veils is None or veils[0].shape != img.values.shape:
        return None
    return veils[0]


def paint_live(p: QPainter, ctx: LaneContext, trace: Trace, step: int) -> None:
    """KV-outer's O, m, ℓ as HBM holds them now (they are rewritten on every visit)."""
    if not ctx.live:
        return
    images = ctx.state.images
    for name, values in kv_outer_hbm(trace, step).items():
        scale = images.scale_for(name)
        r = ctx.rects.get(name)
        if r is None:
            continue
        small, _fr, _fc = downsample(values)
        rgba = scale.rgba(small) if name != "l" else None
        if rgba is None:
            p.fillRect(r, NEUTRAL)
        else:
            draw_image(p, r, qimage(rgba))
        if max(values.shape) <= NUMBERS_CAP:
            scale = scale if name != "l" else NO_SCALE
            draw_numbers(p, r, values, scale, ctx.font, least=ctx.number_min_px)


class VeilLayer(NamedTuple):
    """One tensor's veils at a step: the image over it (None: nothing to cover) and the
    display rows holding a written cell (None: no bar, nothing is unwritten)."""

    image: QImage | None
    written_rows: np.ndarray | None


class VeilCache:
    """A view's veils of the tensors that are not being written at the step: before a
    tensor's first write it is wholly veiled, after its last final write bare, and both
    are the same at every such step. A playback frame then makes only the veils of the
    tensors its phase writes (a training step's forward leaves the backward's six
    tensors untouched). Made afresh for each trace's images and palette."""

    def __init__(self) -> None:
        self._bounds: dict[str, tuple[int, int]] = {}
        self._untouched: dict[tuple, VeilLayer] = {}

    def _bounds_of(self, img) -> tuple[int, int]:
        """(first write, last final write) of any cell of `img`."""
        bounds = self._bounds.get(img.name)
        if bounds is None:
            bounds = self._bounds[img.name] = (
                int(img.first_write.min()),
                int(img.last_write.max()),
            )
        return bounds

    def state(self, images: dict, step: int) -> tuple:
        """What every tensor's veils at `step` depend on: per tensor, how many of its
        cells' first and last writes are done (the cells written by a step only grow
        with it, so equal counts are equal masks); a tensor outside its writes, which
        side. Two steps of equal state have the same veils (the frame's veil layer is
        kept by it). Only the tensors being written are counted: a change's first
        paint never sorts every tensor's write steps."""
        out = []
        for name, img in images.items():
            if img.first_write is None:
                continue
            lo, hi = self._bounds_of(img)
            if step < lo:
                out.append((name, -1))
            elif step >= hi:
                out.append((name, -2))
            else:
                done = np.count_nonzero(img.first_write <= step)
                final = np.count_nonzero(img.last_write <= step)
                out.append((name, done, final))
        return tuple(out)

    def layer(self, img, step: int, colors: tuple[QColor, QColor]) -> VeilLayer | None:
        if img.first_write is None:
            return None
        lo, hi = self._bounds_of(img)
        if step >= hi:
            return VeilLayer(None, None)  # every cell written and final
        if step < lo:
            key = (img.name, *(c.rgba() for c in colors))
            if key not in self._untouched:
                self._untouched[key] = veil_layer(img, step, colors)
            return self._untouched[key]
        return veil_layer(img, step, colors)


def veil_layer(img, step: int, colors: tuple[QColor, QColor]) -> VeilLayer | None:
    """`img`'s veils at `step` (None if it is never written)."""
    veils = img.veils(step)
    if veils is None:
        return None
    never, partial = veils
    any_never = bool(never.any())
    image = veil_image(veils, colors) if any_never or partial.any() else None
    return VeilLayer(image, (~never).any(axis=1) if any_never else None)


def paint_veils(p: QPainter, ctx: LaneContext, step: int) -> None:
    """Cover what is not in HBM yet: opaque if never written, translucent if not final.

    Every tensor keeps its outline at its full extent (an N × N matrix is that size in
    HBM from the first step, written or not), and a bar beside a tensor being written
    marks the rows written so far, at least MARK_MIN px tall however large N is."""
    colors = veil_colors(ctx)
    outline = QPen(ctx.palette.color(QPalette.ColorRole.Mid), 1)
    mark = ctx.palette.color(QPalette.ColorRole.Highlight)
    for name, img in ctx.state.images.lanes[ctx.lane].items():
        r = ctx.rects.get(name)
        if r is None:
            continue
        if name in ctx.live:  # drawn as they are
            layer = None
        elif ctx.veils is not None:
            layer = ctx.veils.layer(img, step, colors)
        else:
            layer = veil_layer(img, step, colors)
        if layer is not None and layer.image is not None:
            # 1 px wider: scaled heatmap edges otherwise peek out
            draw_image(p, r.adjusted(-0.5, -0.5, 1, 1), layer.image)
        p.setPen(outline)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRect(r.adjusted(-0.5, -0.5, 0.5, 0.5))
        if layer is not None and layer.written_rows is not None:
            paint_written_rows(p, r, layer.written_rows, mark)


def paint_written_rows(p: QPainter, r: QRectF, rows: np.ndarray, color: QColor) -> None:
    """A bar right of `r` over each run of display rows holding any written cell (`rows`:
    one bool per display row)."""
    if not rows.any():
        return
    h = r.height() / len(rows)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], rows.astype(np.int8), [0]])))
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        top, height = r.top() + start * h, (stop - start) * h
        if height < MARK_MIN:
            top, height = min(top, r.bottom() - MARK_MIN), MARK_MIN
        p.fillRect(QRectF(r.right() + 1.5, top, 3.5, height), color)


def paint_ghost(p: QPainter, ctx: LaneContext, r: QRectF, name: str) -> None:
    pen = QPen(ctx.palette.color(QPalette.ColorRole.Mid), 1.5, Qt.PenStyle.DashLine)
    p.setPen(pen)
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawRect(r)
    p.setPen(ctx.palette.color(QPalette.ColorRole.PlaceholderText))
    if name in NK_TENSORS:
        forms = (f"{name} is never\nwritten to HBM", "never\nwritten", "never")
    else:
        forms = ("on\nchip\nonly",)
    # The first form whose lines fit the outline; too small for any, the dashed outline
    # and the label above say enough.
    fm = p.fontMetrics()

    def lines_fit(t: str) -> bool:
        lines = t.split("\n")
        wide = max(fm.horizontalAdvance(x) for x in lines)
        return wide <= r.width() - 4 and fm.lineSpacing() * len(lines) <= r.height() - 4

    msg = next((t for t in forms if lines_fit(t)), "")
    p.drawText(r, Qt.AlignmentFlag.AlignCenter, msg)


def paint_row(p: QPainter, ctx: LaneContext, trace: Trace) -> None:
    row, n_q = ctx.state.row, trace.schedule.n_q
    color = ctx.palette.color(QPalette.ColorRole.WindowText)
    p.setPen(QPen(color, 2.0))
    p.setBrush(Qt.BrushStyle.NoBrush)
    for name, r in ctx.rects.items():
        if name not in geo.QUERY_TENSORS or name not in ctx.state.images.lanes[ctx.lane]:
            continue
        h = r.height() / n_q
        p.drawRect(QRectF(r.left() - 1, r.top() + row * h - 1, r.width() + 2, max(h, 1.0) + 2))
    q = ctx.rects.get("Q")
    if q is not None:
        y = q.top() + (row + 0.5) * q.height() / n_q
        p.setBrush(color)
        p.drawPolygon(
            [
                QPointF(q.left() - 3, y),
                QPointF(q.left() - 10, y - 5),
                QPointF(q.left() - 10, y + 5),
            ]
        )
