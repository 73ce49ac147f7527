"""The two colour scales (values, probabilities) and the legend of highlight colours."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from desktop.scene.render import LUT, MASKED_RGBA
from desktop.state.app_state import AppState
from desktop.theme import READ, WRITE


class Legend(QWidget):
    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setFixedHeight(36)
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
        x, y = bar.right() + 36, 0.0
        never = QColor(pal.color(QPalette.ColorRole.Base))
        items = (
            (READ, "read HBM→SRAM", True),
            (WRITE, "write SRAM→HBM", True),
            (QColor(*MASKED_RGBA), "masked −∞", False),
            (never, "not yet written", False),
            (pal.color(QPalette.ColorRole.WindowText), "selected row", True),
        )
        for color, label, outline in items:
            width = p.fontMetrics().horizontalAdvance(label) + 8
            if x + 20 + width > self.width() and y == 0.0:  # wrap onto a second line
                x, y = bar.right() + 36, 17.0
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
            x += 20 + width + 14
        p.end()
