"""The upper half of a lane: HBM tensors, what is written so far, the selected row.

A mixin for LaneView. Everything that stays fixed for a trace (frames, heatmaps,
numbers, block grid) is painted once into a cached pixmap; per step only the live
KV-outer state, veils over not-yet-written cells and the row outline are drawn.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPalette, QPen, QPixmap

from compute import Trace
from desktop.lanes.painting import NEUTRAL, draw_grid, draw_image, draw_numbers, veil_image
from desktop.scene import geometry as geo
from desktop.scene.backward import NK_TENSORS
from desktop.scene.render import NUMBERS_CAP, ColorScale, downsample, kv_outer_hbm
from desktop.theme import qimage

NO_SCALE = ColorScale(float("inf"))  # numbers in dark text on a neutral tint


class HbmPainter:
    """Paints HBM; expects LaneView's attributes (state, lane, _images, _live, _static)."""

    def _paint_frame(self, p: QPainter, rect: QRectF, label: str) -> None:
        pal = self.palette()
        p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
        p.setBrush(pal.color(QPalette.ColorRole.Base))
        p.drawRoundedRect(rect, 6, 6)
        p.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
        f = QFont(self.font())
        f.setPointSizeF(f.pointSizeF() * 0.85)
        p.setFont(f)
        p.save()  # the frame's name runs up its left margin, out of the tensors' way
        p.translate(rect.left() + 3, rect.bottom() - 4)
        p.rotate(-90)
        if p.fontMetrics().horizontalAdvance(label) > rect.height() - 8:
            label = label.split(" ")[0]  # a short frame: "SRAM", not "SRAM (on chi…"
        p.drawText(QRectF(0, 0, rect.height() - 8, 14), Qt.AlignmentFlag.AlignLeft, label)
        p.restore()
        p.setFont(self.font())

    def _veil_colors(self) -> tuple[QColor, QColor]:
        base = QColor(self.palette().color(QPalette.ColorRole.Base))
        never, partial = QColor(base), QColor(base)
        never.setAlpha(255)  # hides the numbers painted underneath, too
        partial.setAlpha(150)
        return never, partial

    def _static_layer(
        self, trace: Trace, rects: dict[str, QRectF], hbm: QRectF, sram: QRectF
    ) -> QPixmap:
        """Everything that does not change with the step, painted once per trace and size."""
        if self._static is None or self._static.devicePixelRatio() != self.devicePixelRatioF():
            # (also rebuilt when the window moves to a screen of another pixel ratio)
            dpr = self.devicePixelRatioF()
            pix = QPixmap(int(self.width() * dpr), int(self.height() * dpr))
            pix.setDevicePixelRatio(dpr)
            pix.fill(self.palette().color(QPalette.ColorRole.Window))
            p = QPainter(pix)
            p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            self._paint_frame(p, hbm, "HBM (off chip)")
            self._paint_frame(p, sram, "SRAM (on chip)")
            self._paint_hbm(p, trace, rects)
            p.end()
            self._static = pix
        return self._static

    def _paint_hbm(self, p: QPainter, trace: Trace, rects: dict[str, QRectF]) -> None:
        s = trace.schedule
        images = self.state.images
        lane_imgs = images.lanes[self.lane]
        text = self.palette().color(QPalette.ColorRole.WindowText)
        grid = QColor(self.palette().color(QPalette.ColorRole.Mid))
        grid.setAlpha(160)
        for name, r in rects.items():
            img = lane_imgs.get(name)
            ghost = img is None and self.lane == "tiled"
            if img is None and not ghost:
                continue  # the dense lane has no m, ℓ, L
            p.setPen(text)
            p.setFont(self.font())
            sym = geo.SYMBOL.get(name, name)
            rows, cols = img.shape if img else (s.n_q, s.n_k if name in NK_TENSORS else 1)
            label = f"{sym}  {rows}×{cols}" if r.width() > 56 else sym
            label_rect = QRectF(r.left() - 6, r.top() - 20, r.width() + 12, 18)
            p.drawText(label_rect, Qt.AlignmentFlag.AlignCenter, label)
            if ghost:
                self._paint_ghost(p, r, name)
                continue
            if name in self._live:
                continue  # drawn per step by _paint_live
            draw_image(p, r, self._images[name])
            if img.values is not None:
                draw_numbers(p, r, img.values, images.scale_for(name), self.font())
            block = (
                s.block_q if name in geo.QUERY_TENSORS else s.block_k,
                s.block_k if name in NK_TENSORS else 0,
            )
            draw_grid(p, r, img.shape, block, grid)

    def _paint_live(self, p: QPainter, trace: Trace, step: int, rects: dict[str, QRectF]) -> None:
        """KV-outer's O, m, ℓ as HBM holds them now (they are rewritten on every visit)."""
        if not self._live:
            return
        scale = self.state.images.scale
        for name, values in kv_outer_hbm(trace, step).items():
            r = rects.get(name)
            if r is None:
                continue
            small, _fr, _fc = downsample(values)
            rgba = scale.rgba(small) if name != "l" else None
            if rgba is None:
                p.fillRect(r, NEUTRAL)
            else:
                draw_image(p, r, qimage(rgba))
            if max(values.shape) <= NUMBERS_CAP:
                draw_numbers(p, r, values, scale if name != "l" else NO_SCALE, self.font())

    def _paint_veils(self, p: QPainter, trace: Trace, step: int, rects: dict[str, QRectF]) -> None:
        """Cover what is not in HBM yet: opaque if never written, translucent if not final."""
        never, partial = self._veil_colors()
        for name, img in self.state.images.lanes[self.lane].items():
            if name in self._live:
                continue  # drawn as they are at this step; nothing to veil
            veils = img.veils(step)
            r = rects.get(name)
            if veils is None or r is None:
                continue
            for mask, color in zip(veils, (never, partial), strict=True):
                if mask.any():
                    # 1 px wider: scaled heatmap edges otherwise peek out
                    draw_image(p, r.adjusted(-0.5, -0.5, 1, 1), veil_image(mask, color))

    def _paint_ghost(self, p: QPainter, r: QRectF, name: str) -> None:
        pen = QPen(self.palette().color(QPalette.ColorRole.Mid), 1.5, Qt.PenStyle.DashLine)
        p.setPen(pen)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRect(r)
        p.setPen(self.palette().color(QPalette.ColorRole.PlaceholderText))
        if name in NK_TENSORS:
            msg = f"{name} is never\nwritten to HBM" if r.width() > 90 else "never\nwritten"
        else:
            # Too narrow for words: the dashed outline and the label above say enough.
            msg = "on\nchip\nonly" if r.height() > 50 and r.width() >= 28 else ""
        p.drawText(r, Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, msg)

    def _paint_row(self, p: QPainter, trace: Trace, rects: dict[str, QRectF]) -> None:
        row, n_q = self.state.row, trace.schedule.n_q
        color = self.palette().color(QPalette.ColorRole.WindowText)
        p.setPen(QPen(color, 2.0))
        p.setBrush(Qt.BrushStyle.NoBrush)
        for name, r in rects.items():
            if name not in geo.QUERY_TENSORS or name not in self.state.images.lanes[self.lane]:
                continue
            h = r.height() / n_q
            p.drawRect(QRectF(r.left() - 1, r.top() + row * h - 1, r.width() + 2, max(h, 1.0) + 2))
        q = rects.get("Q")
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
