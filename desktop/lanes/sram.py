"""The lower half of a lane: SRAM tiles, the capacity bar, and the transfers' arrows.

A mixin for LaneView (it uses the view's state, palette, layout and frames), kept apart
so each module has one job: lane_view paints HBM and handles input; this paints what
is on chip at the current step and how it got there.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPalette, QPen

from compute import Trace
from desktop.lanes.painting import draw_arrow, draw_matrix, highlight, transfer_path
from desktop.scene import geometry as geo
from desktop.scene.equations import step_equation
from desktop.theme import READ, WRITE, qimage


class SramPainter:
    """Paints SRAM and transfers; expects LaneView's attributes (state, lane, _sram, ...)."""

    def _paint_sram(self, p: QPainter, trace: Trace, step: int, area: QRectF) -> None:
        tiles = geo.tiled_sram(trace, step) if self.lane == "tiled" else geo.dense_sram(trace, step)
        inner = area.adjusted(0, 4, 0, -22)
        slots = geo.layout_sram(tiles, self._layout(), inner)
        pal = self.palette()
        images = self.state.images
        self._sram = []
        for tile, slot in zip(tiles, slots, strict=True):
            rect = self._tile_rect(tile, slot.adjusted(0, 18, 0, 0))
            self._sram.append((tile, slot, rect))
            p.setPen(pal.color(QPalette.ColorRole.WindowText))
            p.setFont(self.font())
            label_rect = QRectF(slot.left() - 6, slot.top(), slot.width() + 12, 16)
            label = tile.label
            if p.fontMetrics().horizontalAdvance(label) > label_rect.width():
                label = label.split(" ")[0]  # "a = Σ P̃V" → "a" over a narrow column
            p.drawText(label_rect, Qt.AlignmentFlag.AlignCenter, label)
            if tile.values is None:
                p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1, Qt.PenStyle.DashLine))
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.drawRect(rect)
                if tile.note:
                    p.drawText(
                        rect, Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, tile.note
                    )
                continue
            scale = images.prob_scale if tile.probabilities else images.scale_for(tile.tensor)
            draw_matrix(
                p,
                rect,
                tile.values,
                scale,
                self.font(),
                image=self._tile_image(tile.values, scale) if tile.cached else None,
                neutral=tile.tensor == "l",
            )
        self._paint_capacity(p, trace, area)
        self._paint_equation(p, trace, step, area)

    def _tile_image(self, values, scale) -> QImage:
        """A tile's heatmap, cached: tiles are read-only arrays of the trace (views, or
        regions the trace keeps while they are asked for). The entry holds the array, so
        its address cannot be reused by another while the key stands for it."""
        key = (values.__array_interface__["data"][0], values.shape, values.strides, scale.vmax)
        entry = self._tile_cache.get(key)
        if entry is None:
            if len(self._tile_cache) > 64:
                self._tile_cache.clear()
            entry = self._tile_cache[key] = (values, qimage(scale.rgba(values)))
        return entry[1]

    def _tile_rect(self, tile: geo.SramTile, box: QRectF) -> QRectF:
        """A tile's cells: as large as the HBM cells allow, centred under its column."""
        if tile.values is not None:
            rows, cols = tile.values.shape
        else:
            rows, cols = 2, 2
        cw = min(geo.MAX_CELL_W, box.width() / cols)
        ch = min(geo.MAX_CELL_H, box.height() / rows)
        w, h = max(cols * cw, 6.0), max(rows * ch, 6.0)
        return QRectF(box.center().x() - w / 2, box.top(), w, h)

    def _paint_equation(self, p: QPainter, trace: Trace, step: int, area: QRectF) -> None:
        """The step's recurrence in words and numbers, left of the capacity read-out."""
        line = QRectF(area.left() + 22, area.bottom() - 19, area.width() - 380, 16)
        if line.width() < 80:
            return
        text = step_equation(trace, self.lane, step, self.state.row)
        p.setPen(self.palette().color(QPalette.ColorRole.Highlight))
        text = p.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, int(line.width()))
        p.drawText(line, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, text)

    def _paint_capacity(self, p: QPainter, trace: Trace, area: QRectF) -> None:
        need = trace.sram_need(self.lane)  # of this pass (the backward holds more)
        cap = trace.sram_capacity
        bar = QRectF(area.right() - 330, area.bottom() - 18, 320, 14)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        p.setPen(text)
        align = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight
        if cap is None:
            p.drawText(bar, align, f"peak working set {need:,} elements (M not set)")
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
        p.drawText(
            bar, Qt.AlignmentFlag.AlignCenter, f"working set {need:,} of M = {cap:,}: {verdict}"
        )

    def _paint_transfers(
        self, p: QPainter, trace: Trace, step: int, rects: dict[str, QRectF], hbm: QRectF
    ) -> None:
        action = geo.action_of(trace, self.lane, step)
        if action is None:
            return
        lane_imgs = self.state.images.lanes[self.lane]
        neutral = QColor(self.palette().color(QPalette.ColorRole.WindowText))
        neutral.setAlpha(150)
        for region in action.resident:  # the blocks being worked on, even without a transfer
            r = rects.get(region.tensor)
            if r is not None and region.tensor in lane_imgs:
                p.setPen(QPen(neutral, 1.2, Qt.PenStyle.DashLine))
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.drawRect(geo.region_rect(r, lane_imgs[region.tensor].shape, region))
        tiles = {tile.tensor: rect for tile, _slot, rect in self._sram}
        for tr in action.transfers:
            r = rects.get(tr.tensor)
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
            draw_arrow(p, path, color, tr.direction == "read", self.state.progress)
            highlight(p, target, color, fill_alpha=0)
