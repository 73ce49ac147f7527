"""pyqtgraph's axis, laid out with less Python, and ready before its paint.

The same axis line, ticks and labels as pyqtgraph's AxisItem (the tests compare them), in
the case this app uses (no grid, no fixed tick strings): pyqtgraph builds a Point per
coordinate and a numpy isclose per tick level, ~1 ms an axis, and the statistics panel
and the ledger lay out seven axes on every change. `prepare_axes` lays a plot's axes out
before its paint and applies the widths their labels need, so the paint plays pictures
instead of finding new widths and painting everything a second time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QPicture

from desktop.theme import in_sight

LABEL_CACHE = 512  # measured labels kept per axis
_A = Qt.AlignmentFlag
TEXT_FLAGS = {  # pyqtgraph's label alignment per orientation
    "left": _A.AlignRight | _A.AlignVCenter | Qt.TextFlag.TextDontClip,
    "right": _A.AlignLeft | _A.AlignVCenter | Qt.TextFlag.TextDontClip,
    "top": _A.AlignHCenter | _A.AlignBottom | Qt.TextFlag.TextDontClip,
    "bottom": _A.AlignHCenter | _A.AlignTop | Qt.TextFlag.TextDontClip,
}


class LeanAxis(pg.AxisItem):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._label_rects: dict[tuple[str, str], QRectF] = {}

    def tickValues(self, minVal: float, maxVal: float, size: float):  # noqa: N802, N803
        """pyqtgraph's tick values in plain floats (its numpy isclose of each level against
        the ones above cost more than the rest of the layout); in log mode, pyqtgraph's
        log ticks made from them."""
        lo, hi = sorted((minVal, maxVal))
        lo, hi = lo * self.scale, hi * self.scale
        ticks, seen = [], []
        for spacing, offset in self.tickSpacing(lo, hi, size):
            start = (math.ceil((lo - offset) / spacing) * spacing) + offset
            count = int((hi - start) / spacing) + 1
            atol = spacing / self.scale * 0.01  # this near a tick of a level above: that tick
            values = [
                v
                for v in ((k * spacing + start) / self.scale for k in range(max(count, 0)))
                if not any(abs(s - v) <= atol for s in seen)
            ]
            seen.extend(values)
            ticks.append((spacing / self.scale, values))
        if self.logMode:
            return self.logTickValues(lo, hi, size, ticks)
        return ticks

    def generateDrawSpecs(self, p: QPainter):  # noqa: N802
        """pyqtgraph's layout of the axis line, ticks and labels, for the case this app
        uses (no grid, no fixed tick strings), without its per-point Point objects."""
        if self.grid is not False or self._tickLevels is not None or not self.style["showValues"]:
            return super().generateDrawSpecs(p)
        if self.style["tickFont"] is not None:
            p.setFont(self.style["tickFont"])
        bounds = self.mapRectFromParent(self.geometry())
        vertical = self.orientation in ("left", "right")
        axis = 0 if vertical else 1
        if self.orientation == "left":
            span = [bounds.topRight() + QPointF(-1, -1), bounds.bottomRight() + QPointF(-1, 1)]
            tick_start = tick_stop = bounds.right()
            tick_dir = -1
        elif self.orientation == "right":
            span = [bounds.topLeft() + QPointF(1, -1), bounds.bottomLeft() + QPointF(1, 1)]
            tick_start = tick_stop = bounds.left()
            tick_dir = 1
        elif self.orientation == "top":
            span = [bounds.bottomLeft() + QPointF(-1, -1), bounds.bottomRight() + QPointF(1, -1)]
            tick_start = tick_stop = bounds.bottom()
            tick_dir = -1
        else:
            span = [bounds.topLeft() + QPointF(-1, 1), bounds.topRight() + QPointF(1, 1)]
            tick_start = tick_stop = bounds.top()
            tick_dir = 1
        a, b = self.mapToDevice(span[0]), self.mapToDevice(span[1])
        if a is None or b is None:
            return None
        length = math.hypot(b.x() - a.x(), b.y() - a.y())
        if length == 0:
            return None
        levels = self.tickValues(self.range[0], self.range[1], length)

        dif = self.range[1] - self.range[0]
        if dif == 0:
            scale, offset = 1, 0
        elif axis == 0:
            scale = -bounds.height() / dif
            offset = self.range[0] * scale - bounds.height()
        else:
            scale = bounds.width() / dif
            offset = self.range[0] * scale
        ends = [x * scale - offset for x in self.range]
        x_min, x_max = min(ends), max(ends)

        positions: list[list[float | None]] = []
        tick_specs = []
        base_pen = self.tickPen()
        for i, (_spacing, values) in enumerate(levels):
            tick_length = self.style["tickLength"] / ((i * 0.5) + 1.0)
            pen = self._level_pen(base_pen, i)
            placed: list[float | None] = []
            for v in values:
                x = (v * scale) - offset
                if x < x_min or x > x_max:
                    placed.append(None)
                    continue
                placed.append(x)
                if vertical:
                    p1, p2 = QPointF(tick_start, x), QPointF(tick_stop + tick_length * tick_dir, x)
                else:
                    p1, p2 = QPointF(x, tick_start), QPointF(x, tick_stop + tick_length * tick_dir)
                tick_specs.append((pen, p1, p2))
            positions.append(placed)

        stop_at = self.style["stopAxisAtTick"]
        if stop_at[0] is True:
            first = min(map(min, positions))
            if axis == 0:
                span[0].setY(max(span[0].y(), first))
            else:
                span[0].setX(max(span[0].x(), first))
        if stop_at[1] is True:
            last = max(map(max, positions))
            if axis == 0:
                span[1].setY(min(span[1].y(), last))
            else:
                span[1].setX(min(span[1].x(), last))
        axis_spec = (self.pen(), span[0], span[1])
        return axis_spec, tick_specs, self._text_specs(p, levels, positions, length, tick_stop)

    def _level_pen(self, base: QPen, level: int) -> QPen:
        """The tick pen of a level: fainter for minor levels, as pyqtgraph draws them."""
        alpha = self.style["tickAlpha"]
        if alpha is None:
            alpha = 255 / (level + 1)
        elif isinstance(alpha, float):
            alpha = min(255, max(0, int(round(alpha * 255))))
        elif not isinstance(alpha, int) or not 0 <= alpha <= 255:
            raise ValueError("tickAlpha must be a float in [0, 1] or an int in [0, 255]")
        if base.brush().style() != Qt.BrushStyle.SolidPattern:
            return base
        pen = QPen(base)
        color = QColor(pen.color())
        color.setAlpha(int(alpha))
        pen.setColor(color)
        return pen

    def _text_specs(self, p, levels, positions, length: float, tick_stop: float) -> list:
        vertical = self.orientation in ("left", "right")
        text_offset = self.style["tickTextOffset"][0 if vertical else 1]
        offset = max(0, self.style["tickLength"]) + text_offset
        outline = self.boundingRect()
        flags = TEXT_FLAGS[self.orientation]
        font = p.font().key()
        specs, rects_so_far = [], []
        size2 = last_size2 = 0
        for i in range(min(len(levels), self.style["maxTextLevel"] + 1)):
            spacing, values = levels[i]
            strings = self.tickStrings(values, self.autoSIPrefixScale * self.scale, spacing)
            if len(strings) == 0:
                continue
            rects = []
            for j, s in enumerate(strings):
                if positions[i][j] is None:
                    rects.append(None)
                    continue
                br = self._label_rect(p, font, s)  # (read, never changed)
                rects.append(br)
                rects_so_far.append(br)
            if rects_so_far:
                along = [r.height() if vertical else r.width() for r in rects_so_far]
                across = [r.width() if vertical else r.height() for r in rects_so_far]
                size, size2 = float(np.sum(along)), float(np.max(across))
            else:
                size = size2 = 0
            if i > 0 and any(
                len(specs) >= n and size / length >= limit
                for n, limit in self.style["textFillLimits"]
            ):
                break
            last_size2 = size2
            for j, s in enumerate(strings):
                x, r = positions[i][j], rects[j]
                if x is None:
                    continue
                h, w = r.height(), r.width()
                if self.orientation == "left":
                    rect = QRectF(tick_stop - offset - w, x - (h / 2), w, h)
                elif self.orientation == "right":
                    rect = QRectF(tick_stop + offset, x - (h / 2), w, h)
                elif self.orientation == "top":
                    rect = QRectF(x - w / 2.0, tick_stop - offset - h, w, h)
                else:
                    rect = QRectF(x - w / 2.0, tick_stop + offset, w, h)
                if outline & rect != rect:  # (pyqtgraph's test: contains() rounds)
                    continue
                specs.append((rect, flags, s))
        self._updateMaxTextSize(last_size2)
        return specs

    def _label_rect(self, p: QPainter, font: str, text: str) -> QRectF:
        """pyqtgraph's measure of a label, kept per font (`font`, the painter's font key):
        the same few strings come back on every change of range."""
        key = (font, text)
        rect = self._label_rects.get(key)
        if rect is None:
            rect = p.boundingRect(QRectF(0, 0, 100, 100), Qt.AlignmentFlag.AlignCenter, text)
            rect.setHeight(rect.height() * 0.8)  # (pyqtgraph's correction, kept)
            if len(self._label_rects) > LABEL_CACHE:
                self._label_rects.clear()
            self._label_rects[key] = rect
        return rect

    def make_picture(self) -> None:
        """Lay the axis out and record its picture now, as its paint would: a later paint
        with the same geometry and range only plays it (a resize or a new range drops it)."""
        picture = QPicture()
        painter = QPainter(picture)
        try:
            if self.style["tickFont"]:
                painter.setFont(self.style["tickFont"])
            specs = self.generateDrawSpecs(painter)
            if specs is not None:
                self.drawPicture(painter, *specs)
        finally:
            painter.end()
        self.picture = picture


def prepare_axes(view: pg.GraphicsView, items: Iterable[pg.PlotItem], unseen: bool = False) -> None:
    """Run `view`'s deferred range updates and lay out the LeanAxis axes of `items` now, as
    their paint would, applying the widths their labels ask for: left to the event loop,
    the plots' layouts ran after the paint, and everything was painted again. Nothing for
    a view out of sight (a plot in a hidden tab is not painted) unless `unseen`: a panel
    that an export renders offscreen needs its widths before that render."""
    if not unseen and not in_sight(view):
        return
    view.scene().prepareForPaint()  # the new ranges reach the axes
    items = list(items)
    axes = [
        axis
        for item in items
        for axis in (item.getAxis(name) for name in ("left", "bottom"))
        if isinstance(axis, LeanAxis) and axis.isVisible()
    ]
    for axis in axes:
        axis.make_picture()
    for item in items:
        item.layout.activate()  # (each axis sits in its plot's own grid)
    view.scene().prepareForPaint()  # what the new widths moved
    for axis in axes:
        if axis.picture is None:  # resized by the layout
            axis.make_picture()
