"""The decode picture: the KV cache streamed by one-pass and by split-KV, and the combine.

Three bands, top to bottom, for one animation step t (one tile per block per step):
- one-pass: one row per K/V head; its single block has read tiles [0, t) and reads tile t;
- split-KV: the same rows cut into S' splits side by side (one block each, its own hue);
  split s has read min(t, its length) of its tiles, so every split finishes by step
  max_s |split s|, T_c / S' of the one-pass's T_c steps: the parallelism split-KV buys;
- combine: the selected query row's split weights exp(L_s − L) as bars merging into O.
Rows past MAX_ROWS, or past what leaves the combine room, are summarised in one line; tiles
narrower than a few pixels are drawn as one bar with the read part filled.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

from desktop.decode.model import DecodeStep

MAX_ROWS = 4  # K/V head rows drawn per band
ROW_H, GAP, BAND_GAP, LABEL_H = 18, 5, 10, 18
MARGIN = 10
COMBINE_MIN = 90  # px the combine band keeps below the two bands (its title and bars)


def split_hue(split: int, count: int) -> QColor:
    """A distinct colour per split (hues spread around the wheel)."""
    return QColor.fromHsvF((split / max(count, 1) * 0.83) % 1.0, 0.55, 0.85)


class DecodeCanvas(QWidget):
    """Paints a DecodeStep at animation step `step`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.step_data: DecodeStep | None = None
        self.step = 0
        self.setMinimumHeight(260)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def show_step(self, data: DecodeStep | None, step: int) -> None:
        self.step_data, self.step = data, step
        self.update()

    # Geometry -------------------------------------------------------------------------

    def _rows(self) -> int:
        """K/V head rows per band: at most MAX_ROWS, and no more than leave the combine
        COMBINE_MIN pixels below the two bands (the rest are summarised in one line)."""
        p = self.step_data.problem
        fixed = 2 * MARGIN + 2 * BAND_GAP + COMBINE_MIN + 2 * (LABEL_H + LABEL_H)
        fit = (self.height() - fixed) // (2 * (ROW_H + GAP))
        return max(1, min(p.h_kv, MAX_ROWS, fit))

    # Painting -------------------------------------------------------------------------

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        painter.fillRect(self.rect(), pal.color(QPalette.ColorRole.Base))
        if self.step_data is None:
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "No decode step yet.")
            return
        x0, width = MARGIN, max(40, self.width() - 2 * MARGIN)
        y = MARGIN
        y = self._band(painter, pal, x0, y, width, split=False) + BAND_GAP
        y = self._band(painter, pal, x0, y, width, split=True) + BAND_GAP
        self._combine(painter, pal, x0, y, width, self.height() - y - MARGIN)

    def _text(self, painter: QPainter, pal: QPalette, x: float, y: float, text: str) -> None:
        painter.setPen(pal.color(QPalette.ColorRole.Text))
        painter.drawText(QPointF(x, y + LABEL_H - 5), text)

    def _band(self, painter, pal, x0, y, width, *, split: bool) -> int:
        d = self.step_data
        p = d.problem
        t_c, s_used = p.t_c, p.splits_used
        if split:
            longest = max(t1 - t0 for t0, t1 in map(p.split_tiles, range(s_used)))
            state = "done: combine" if self.step >= longest else f"step {self.step}/{longest}"
            title = f"Split-KV: {p.h_kv} x {s_used} = {p.h_kv * s_used} blocks ({state})"
        else:
            state = "done" if self.step >= t_c else f"step {min(self.step, t_c)}/{t_c}"
            title = f"One-pass: {p.h_kv} block(s), {t_c} tiles each ({state})"
        self._text(painter, pal, x0, y, title)
        y += LABEL_H
        # The rows' names in a gutter of their own: drawn over the tiles they hid the first.
        gutter = painter.fontMetrics().horizontalAdvance(f"K/V {self._rows() - 1}") + 6
        label_x, x0, width = x0, x0 + gutter, max(20, width - gutter)
        tile_w = width / t_c
        for g in range(self._rows()):
            segments = [p.split_tiles(s) for s in range(s_used)] if split else [(0, t_c)]
            for s, (a, b) in enumerate(segments):
                left = x0 + a * tile_w + (1 if split else 0)
                seg_w = max(1.0, (b - a) * tile_w - (2 if split else 0))
                base = split_hue(s, s_used) if split else pal.color(QPalette.ColorRole.Highlight)
                done = min(self.step, b - a)
                faint = QColor(base)
                faint.setAlphaF(0.25)
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(faint)
                painter.drawRect(QRectF(left, y, seg_w, ROW_H))
                painter.setBrush(base)
                painter.drawRect(QRectF(left, y, done * tile_w, ROW_H))
                if done < b - a:  # the tile being read now
                    now = QColor(base).darker(150)
                    painter.setBrush(now)
                    painter.drawRect(QRectF(left + done * tile_w, y, max(2.0, tile_w), ROW_H))
            if tile_w >= 5:  # tile boundaries where they are visible
                painter.setPen(QPen(pal.color(QPalette.ColorRole.Base), 1))
                for j in range(1, t_c):
                    x = x0 + j * tile_w
                    painter.drawLine(QPointF(x, y), QPointF(x, y + ROW_H))
            painter.setPen(pal.color(QPalette.ColorRole.Text))
            painter.drawText(QRectF(label_x, y, gutter, ROW_H), Qt.AlignmentFlag.AlignVCenter,
                             f"K/V {g}")  # fmt: skip
            y += ROW_H + GAP
        if p.h_kv > self._rows():
            more = p.h_kv - self._rows()
            self._text(painter, pal, label_x, y, f"... and {more} more K/V heads alike")
            y += LABEL_H
        return int(y)

    def _combine(self, painter, pal, x0, y, width, height) -> None:
        d = self.step_data
        p, table = d.problem, d.table
        longest = max(t1 - t0 for t0, t1 in map(p.split_tiles, range(p.splits_used)))
        ready = self.step >= longest
        self._text(
            painter, pal, x0, y,
            f"Combine (head {table.head}, token {table.row}): O = Σ_s exp(L_s − L) O_s"
            + ("" if ready else "  (after the splits)"),
        )  # fmt: skip
        y += LABEL_H
        height -= LABEL_H
        if height < 30:
            return
        rows = table.splits  # every split, one bar each (at least a pixel wide)
        box_w = min(150.0, width * 0.3)
        bars_w = width - box_w - 30
        bar_w = bars_w / max(len(rows), 1)
        top = max((r.weight for r in rows), default=1.0) or 1.0
        # Names under every k-th bar, k as small as lets the widest name keep clear of the next.
        name_w = painter.fontMetrics().horizontalAdvance(f"s{len(rows) - 1}") + 6
        every = max(1, -(-name_w // max(int(bar_w), 1)))
        for r in rows:
            h = (height - 16) * (r.weight / top)
            colour = split_hue(r.split, p.splits_used)
            if not ready:
                colour.setAlphaF(0.3)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(colour)
            left = x0 + r.split * bar_w
            painter.drawRect(QRectF(left + 1, y + height - 16 - h, max(1.0, bar_w - 2), h))
            if r.split % every == 0 and name_w <= bars_w:
                painter.setPen(pal.color(QPalette.ColorRole.Text))
                centre = left + bar_w / 2
                painter.drawText(QRectF(centre - name_w / 2, y + height - 14, name_w, 14),
                                 Qt.AlignmentFlag.AlignCenter, f"s{r.split}")  # fmt: skip
        # The arrow into the merged output.
        ax = x0 + bars_w + 4
        mid = y + height / 2
        painter.setPen(QPen(pal.color(QPalette.ColorRole.Text), 1.5))
        painter.drawLine(QPointF(ax, mid), QPointF(ax + 18, mid))
        painter.setBrush(pal.color(QPalette.ColorRole.Text))
        painter.drawPolygon(QPolygonF([QPointF(ax + 22, mid), QPointF(ax + 14, mid - 5),
                                       QPointF(ax + 14, mid + 5)]))  # fmt: skip
        box = QRectF(ax + 26, y + 4, box_w, height - 8)
        highlight = pal.color(QPalette.ColorRole.Highlight)
        if not ready:
            highlight.setAlphaF(0.3)
        painter.setPen(QPen(highlight, 2))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(box)
        painter.setPen(pal.color(QPalette.ColorRole.Text))
        painter.drawText(box, Qt.AlignmentFlag.AlignCenter,
                         f"O, L = {table.lse:.4g}\nm* = {table.m:.4g}\nℓ = {table.l:.4g}")  # fmt: skip
