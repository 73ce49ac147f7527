"""The two colour scales (values, probabilities) and the legend of highlight colours."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from desktop.scene.render import LUT, MASKED_RGBA
from desktop.state.app_state import AppState
from desktop.theme import READ, WRITE

LINE = 17  # one line of swatches
LABELS = {  # swatch label: drawn as an outline (a highlight) rather than a fill
    "read HBM→SRAM": True,
    "write SRAM→HBM": True,
    "masked −∞": False,
    "not yet written": False,
    "selected row": True,
}
SWATCHES_X = 416  # right of the two colour bars and their tick labels


class Legend(QWidget):
    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setFixedHeight(LINE * 2 + 2)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        state.sigTraceChanged.connect(self.update)

    def _bar(self, p: QPainter, bar: QRectF, first: int, ticks) -> None:
        """A colour bar over LUT entries first..255, with value labels under it."""
        pal = self.palette()
        grad = QLinearGradient(bar.topLeft(), bar.topRight())
        for k in range(first, 256, 16):
            grad.setColorAt((k - first) / (255 - first), QColor(*LUT[k][:3]))
        grad.setColorAt(1.0, QColor(*LUT[255][:3]))
        p.fillRect(bar, grad)
        p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
        p.drawRect(bar)
        p.setPen(pal.color(QPalette.ColorRole.WindowText))
        for frac, value in ticks:
            x = bar.left() + frac * bar.width()
            p.drawText(
                QRectF(x - 40, 16, 80, 16),
                Qt.AlignmentFlag.AlignCenter,
                f"{value:.3g}".replace("-", "−"),
            )

    def _places(self, labels: list[str], width: int) -> list[tuple[float, float, float]]:
        """(x, y, text width) per swatch: right of the colour bars, wrapping onto as
        many lines as the width needs, so no label is ever cut."""
        metrics = self.fontMetrics()
        x, y, out = float(SWATCHES_X), 0.0, []
        for label in labels:
            w = metrics.horizontalAdvance(label) + 8
            start = SWATCHES_X if y < 2 * LINE else 8  # below the bars, the whole width
            if x > start and x + 20 + w > width:
                y += LINE
                x = float(SWATCHES_X if y < 2 * LINE else 8)
            out.append((x, y, w))
            x += 20 + w + 14
        return out

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        lines = int(self._places(list(LABELS), self.width())[-1][1] / LINE) + 1
        self.setFixedHeight(LINE * max(2, lines) + 2)
        super().resizeEvent(event)

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        p = QPainter(self)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        p.setPen(text)
        images = self.state.images
        vmax = images.scale.vmax if images is not None else 1.0
        pmax = images.prob_scale.vmax if images is not None else 1.0
        p.drawText(QRectF(8, 0, 60, 20), Qt.AlignmentFlag.AlignVCenter, "Values")
        self._bar(p, QRectF(60, 4, 180, 12), 0, ((0.0, -vmax), (0.5, 0.0), (1.0, vmax)))
        p.drawText(QRectF(262, 0, 20, 20), Qt.AlignmentFlag.AlignVCenter, "P")
        # P ≥ 0 uses the white-to-red half of the same palette, scaled to its own maximum.
        bar = QRectF(280, 4, 100, 12)
        self._bar(p, bar, 128, ((0.0, 0.0), (1.0, pmax)))
        never = QColor(pal.color(QPalette.ColorRole.Base))
        colors = (
            READ,
            WRITE,
            QColor(*MASKED_RGBA),
            never,
            pal.color(QPalette.ColorRole.WindowText),
        )
        items = [
            (c, label, outline) for c, (label, outline) in zip(colors, LABELS.items(), strict=True)
        ]
        places = self._places([label for _c, label, _o in items], self.width())
        for (color, label, outline), (x, y, width) in zip(items, places, strict=True):
            swatch = QRectF(x, 3 + y, 16, 12)
            fill = QColor(color)
            if outline:
                fill.setAlpha(70)
            p.fillRect(swatch, fill)
            p.setPen(
                QPen(color if outline else pal.color(QPalette.ColorRole.Mid), 2 if outline else 1)
            )
            p.drawRect(swatch)
            p.setPen(text)
            p.drawText(QRectF(x + 20, y, width, 18), Qt.AlignmentFlag.AlignVCenter, label)
        p.end()
