"""The lower half of a lane: SRAM tiles, the capacity bar, and the transfers' arrows.

Functions of a LaneContext, kept apart from the HBM half so each module has one job:
this paints what is on chip at the current step and how it got there.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPalette, QPen

from compute import Trace
from desktop.lanes.context import LaneContext
from desktop.lanes.painting import (
    draw_arrow,
    draw_fitted_text,
    draw_matrix,
    draw_outline,
    highlight,
    paint_ready,
    transfer_path,
)
from desktop.lanes.sampling import SampledPicks, draw_sampled
from desktop.scene import geometry as geo
from desktop.scene.equations import step_equation
from desktop.scene.render import DISPLAY_CAP, P_TILDE, downsample
from desktop.scene.sampled_region import SampledRegion
from desktop.theme import READ, WRITE, accent, qimage

CAPTION_H = 30.0  # two lines of the step's recurrence at the wrapped size, under the tiles
# Where each SRAM tile was drawn: (tile, its column slot, its cells); views hit-test on it.
PlacedTiles = list[tuple[geo.SramTile, QRectF, QRectF]]


class TileImages:
    """SRAM tiles' heatmaps, cached per view: tiles are read-only arrays of the trace (views,
    or regions the trace keeps while they are asked for). An entry holds its array, so the
    array's address cannot be reused by another while the key stands for it. The least
    recently drawn go first: clearing all at once made the large ones that stay on chip
    (a backward's whole dO and V, 1024 × 64) again every dozen frames. A tile larger than
    DISPLAY_CAP a side is drawn from its block means, as the HBM heatmaps are (render.
    downsample): made at full size, the dense backward's whole Q, K, V or dO at N = 4096
    was most of the playback frame it first appeared in."""

    LIMIT = 64

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple, tuple[object, QImage]] = OrderedDict()
        self.picks = SampledPicks()  # the cells raster paints read of sampled regions

    def get(self, values, scale) -> QImage:
        key = (values.__array_interface__["data"][0], values.shape, values.strides, scale.vmax)
        entry = self._cache.get(key)
        if entry is None:
            small = values if max(values.shape) <= DISPLAY_CAP else downsample(values)[0]
            entry = self._cache[key] = (values, paint_ready(qimage(scale.rgba(small))))
            if len(self._cache) > self.LIMIT:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return entry[1]


def _shorter(label: str) -> list[str]:
    """A label and its shorter forms: its first word ("a = Σ P̃V" → "a"), then without
    its block subscript ("dK_j" → "dK")."""
    word = label.split(" ")[0]
    return list(dict.fromkeys((label, word, word.split("_")[0])))


def fit_labels(fm, labels: list[str], slots: list[QRectF]) -> list[str]:
    """The tiles' labels as drawn centred over their columns: each as long as fits in
    its column and 6 px each side, shortened (_shorter) where two neighbours would
    touch, the wider of the two first (a backward's dQ_i, dK_j, dV_j over narrow
    columns at 1366 px). `fm` is the painter's QFontMetrics."""
    forms = [_shorter(label) for label in labels]
    pick = [0] * len(labels)

    def width(k: int) -> float:
        return fm.horizontalAdvance(forms[k][pick[k]])

    for k, slot in enumerate(slots):
        while pick[k] + 1 < len(forms[k]) and width(k) > slot.width() + 12:
            pick[k] += 1
    order = sorted(range(len(slots)), key=lambda k: slots[k].center().x())  # (not list order)
    for a, b in zip(order, order[1:], strict=False):
        gap = slots[b].center().x() - slots[a].center().x()
        while (width(a) + width(b)) / 2 + 3 > gap:
            wider, other = (a, b) if width(a) >= width(b) else (b, a)
            if pick[wider] + 1 < len(forms[wider]):
                pick[wider] += 1
            elif pick[other] + 1 < len(forms[other]):
                pick[other] += 1
            else:
                break
    return [f[i] for f, i in zip(forms, pick, strict=True)]


def fitted_note(p: QPainter, note: str, rect: QRectF) -> str:
    """An empty tile's note ("computing…") as it fits: wrapped at its words, or "…" when
    its longest word is wider than the tile (a clipped "ut" says nothing)."""
    widest = max(p.fontMetrics().horizontalAdvance(w) for w in note.split())
    return note if widest <= rect.width() else "…"


def paint_sram(
    p: QPainter, ctx: LaneContext, trace: Trace, step: int, area: QRectF, tiles_cache: TileImages
) -> PlacedTiles:
    """Paint the tiles on chip at `step`, the capacity bar and the step's equation."""
    tiles = geo.tiled_sram(trace, step) if ctx.lane == "tiled" else geo.dense_sram(trace, step)
    inner = area.adjusted(0, 4, 0, -CAPTION_H)  # the tiles end where the caption begins
    slots = geo.layout_sram(tiles, ctx.rects, inner)
    pal = ctx.palette
    images = ctx.state.images
    placed: PlacedTiles = []
    p.setFont(ctx.font)
    labels = fit_labels(p.fontMetrics(), [t.label for t in tiles], slots)
    for tile, slot, label in zip(tiles, slots, labels, strict=True):
        rect = tile_rect(tile, slot.adjusted(0, 18, 0, 0))
        placed.append((tile, slot, rect))
        p.setPen(pal.color(QPalette.ColorRole.WindowText))
        p.setFont(ctx.font)
        label_rect = QRectF(slot.center().x() - 100, slot.top(), 200, 16)  # never clipped
        p.drawText(label_rect, Qt.AlignmentFlag.AlignCenter, label)
        if tile.values is None:
            p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1, Qt.PenStyle.DashLine))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(rect)
            if tile.note:
                p.drawText(rect, Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
                           fitted_note(p, tile.note, rect))  # fmt: skip
            continue
        scale = tile_scale(images, tile)
        values = tile.values
        if isinstance(values, SampledRegion):  # too many cells to make them all
            if draw_sampled(p, rect, values, scale, tiles_cache.picks):
                continue  # (no numbers: draw_numbers writes none in so many cells)
            values = np.asarray(values)
        draw_matrix(
            p,
            rect,
            values,
            scale,
            ctx.font,
            image=tiles_cache.get(values, scale) if tile.cached else None,
            neutral=tile.tensor == "l",
            least=ctx.number_min_px,
        )
    p.setFont(ctx.font)  # draw_matrix leaves its small number font set
    paint_capacity(p, ctx, trace, area)
    paint_equation(p, ctx, trace, step, area)
    return placed


def tile_scale(images, tile: geo.SramTile):
    """The colour scale a tile is drawn on: P̃ (values up to 1) has its own, P its own."""
    if "P̃" in tile.label:
        return P_TILDE
    return images.prob_scale if tile.probabilities else images.scale_for(tile.tensor)


def tile_rect(tile: geo.SramTile, box: QRectF) -> QRectF:
    """A tile's cells: as large as the HBM cells allow, centred under its column."""
    if tile.values is not None:
        rows, cols = tile.values.shape
    else:
        rows, cols = 2, 2
    cw = min(geo.MAX_CELL_W, box.width() / cols)
    ch = min(geo.MAX_CELL_H, box.height() / rows)
    w, h = max(cols * cw, 6.0), max(rows * ch, 6.0)
    return QRectF(box.center().x() - w / 2, box.top(), w, h)


def paint_equation(p: QPainter, ctx: LaneContext, trace: Trace, step: int, area: QRectF) -> None:
    """The step's recurrence in words and numbers, left of the capacity read-out."""
    # Left of the capacity read-out: its bar when M is set, else its sentence.
    if trace.sram_capacity is not None:
        reserve = 345.0
    else:
        reserve = p.fontMetrics().horizontalAdvance(capacity_text(ctx, trace)) + 24.0
    line = QRectF(
        area.left() + 22, area.bottom() - CAPTION_H + 1, area.width() - 22 - reserve, CAPTION_H - 2
    )
    if line.width() < 80:
        return
    text = step_equation(trace, ctx.lane, step, ctx.state.row)
    p.setPen(accent(ctx.palette))
    draw_fitted_text(p, line, text, Qt.AlignmentFlag.AlignLeft)  # whole, wrapped if need be


def capacity_text(ctx: LaneContext, trace: Trace) -> str:
    """The working-set sentence shown when M is not set (of this pass, as the bar's)."""
    return f"peak working set {trace.sram_need(ctx.lane):,} (M not set)"


def paint_capacity(p: QPainter, ctx: LaneContext, trace: Trace, area: QRectF) -> None:
    need = trace.sram_need(ctx.lane)  # of this pass (the backward holds more)
    cap = trace.sram_capacity
    bar = QRectF(area.right() - 330, area.bottom() - 18, 320, 14)
    pal = ctx.palette
    text = pal.color(QPalette.ColorRole.WindowText)
    p.setPen(text)
    align = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight
    if cap is None:
        p.drawText(bar, align, capacity_text(ctx, trace))
        return
    fits = need <= cap
    color = QColor("#2e8b57") if fits else QColor("#c0392b")
    color.setAlpha(150)
    p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawRect(bar)
    p.fillRect(
        QRectF(bar.left(), bar.top(), bar.width() * min(1.0, need / cap), bar.height()), color
    )
    p.setPen(text)
    verdict = "fits" if fits else "does not fit"
    p.drawText(bar, Qt.AlignmentFlag.AlignCenter, f"working set {need:,} of M = {cap:,}: {verdict}")


def paint_transfers(
    p: QPainter, ctx: LaneContext, trace: Trace, step: int, placed: PlacedTiles
) -> None:
    """Highlight the step's HBM regions and draw each transfer's arrow to or from its tile."""
    action = geo.action_of(trace, ctx.lane, step)
    if action is None:
        return
    lane_imgs = ctx.state.images.lanes[ctx.lane]
    neutral = QColor(ctx.palette.color(QPalette.ColorRole.WindowText))
    neutral.setAlpha(150)
    for region in action.resident:  # the blocks being worked on, even without a transfer
        r = ctx.rects.get(region.tensor)
        if r is not None and region.tensor in lane_imgs:
            rect = geo.region_rect(r, lane_imgs[region.tensor].shape, region)
            draw_outline(p, rect, QPen(neutral, 1.2, Qt.PenStyle.DashLine), ctx.sprites)
    tiles = {tile.tensor: rect for tile, _slot, rect in placed}
    for tr in action.transfers:
        r = ctx.rects.get(tr.tensor)
        if r is None or tr.tensor not in lane_imgs:
            continue
        rr = geo.region_rect(r, lane_imgs[tr.tensor].shape, tr.region)
        color = READ if tr.direction == "read" else WRITE
        highlight(p, rr, color)
        target = tiles.get(tr.tensor) or tiles.get("m" if tr.tensor == "L" else "O")
        if target is None:
            continue
        start = QPointF(rr.center().x(), r.bottom() + 2)
        end = QPointF(target.center().x(), target.top() - 18)
        path = transfer_path(start, end)
        toward = tr.direction == "read"
        key = (start.x(), start.y(), end.x(), end.y(), toward)
        draw_arrow(p, path, color, toward, ctx.state.progress, ctx.sprites, key)
        highlight(p, target, color, fill_alpha=0)
