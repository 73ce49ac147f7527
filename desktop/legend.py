"""The shared colour scale and the legend of highlight colours, under the lanes."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from .render import LUT, MASKED_RGBA
from .state import AppState
from .theme import READ, WRITE


class Legend(QWidget):
    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setFixedHeight(36)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        state.sigTraceChanged.connect(self.update)

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        p = QPainter(self)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        p.setPen(text)
        images = self.state.images
        vmax = images.scale.vmax if images is not None else 1.0
        bar = QRectF(190, 4, 220, 12)
        p.drawText(
            QRectF(8, 0, 180, 20), Qt.AlignmentFlag.AlignVCenter, "Shared colour scale (values)"
        )
        grad = QLinearGradient(bar.topLeft(), bar.topRight())
        for k in range(0, 256, 32):
            grad.setColorAt(k / 255, QColor(*LUT[k][:3]))
        grad.setColorAt(1.0, QColor(*LUT[255][:3]))
        p.fillRect(bar, grad)
        p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
        p.drawRect(bar)
        p.setPen(text)
        for frac, value in ((0.0, -vmax), (0.5, 0.0), (1.0, vmax)):
            x = bar.left() + frac * bar.width()
            p.drawText(
                QRectF(x - 40, 16, 80, 16),
                Qt.AlignmentFlag.AlignCenter,
                f"{value:.3g}".replace("-", "−"),
            )
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
