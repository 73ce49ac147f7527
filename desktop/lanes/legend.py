"""The lanes' colour scales (one per quantity) and the legend of highlight colours."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from desktop.lanes.masks import LEGEND as MASK_LEGEND
from desktop.scene.render import LUT, MASKED_RGBA, P_TILDE
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


BAR_W = {True: 90.0, False: 90.0}  # a diverging bar (−v..v), a one-sided one (0..v)


def scale_bars(images) -> list[tuple[str, float, bool]]:
    """(what, vmax, diverging) for every colour scale the lanes use, scales of equal
    range merged under one label."""
    if images is None:
        return [("Values", 1.0, True), ("P", 1.0, False)]
    bars: list[tuple[str, float, bool]] = []
    for what, scale, diverging in (
        ("Q K", images.scale_for("Q"), True),
        ("V O", images.scale_for("V"), True),
        ("S", images.scale_for("S"), True),
        ("dO, grads", images.grad_scale, True),
        ("P", images.prob_scale, False),
        ("P̃", P_TILDE, False),
    ):
        if scale is None:
            continue
        same = next(
            (k for k, b in enumerate(bars) if b[2] == diverging and b[1] == scale.vmax), None
        )
        if same is None:
            bars.append((what, scale.vmax, diverging))
        else:
            bars[same] = (f"{bars[same][0]} {what}", scale.vmax, diverging)
    return bars


class Legend(QWidget):
    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setFixedHeight(LINE * 2 + 2)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        state.sigTraceChanged.connect(self._on_trace)

    def _on_trace(self, trace) -> None:
        self.setToolTip(MASK_LEGEND if trace is not None and trace.schedule.mask else "")
        self._fit_height()
        self.update()

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
        # Each tick's text keeps to its share of the bar, so two never run together.
        share = bar.width() / (len(ticks) - 1)
        for frac, value in ticks:
            x = bar.left() + frac * bar.width()
            if frac == 0.0:
                box, align = (
                    QRectF(bar.left() - share / 2, 0, share, 15),
                    Qt.AlignmentFlag.AlignHCenter,
                )
                if len(ticks) == 2:
                    box, align = QRectF(bar.left(), 0, share / 2, 15), Qt.AlignmentFlag.AlignLeft
            elif frac == 1.0 and len(ticks) == 2:
                box, align = QRectF(bar.right() - share, 0, share, 15), Qt.AlignmentFlag.AlignRight
            else:
                box, align = QRectF(x - share / 2, 0, share, 15), Qt.AlignmentFlag.AlignHCenter
            box.moveTop(bar.bottom() + 1)
            p.drawText(box, align | Qt.AlignmentFlag.AlignVCenter, f"{value:.3g}".replace("-", "−"))

    def _layout(self, width: int):
        """Where each colour bar and each swatch goes: bars first (a bar and its ticks
        take two lines), then the swatches, each wrapping onto as many lines as the width
        needs, so no label is ever cut. Returns (bars, swatches, lines)."""
        metrics = self.fontMetrics()
        bars, x, y = [], 8.0, 0.0
        for what, vmax, diverging in scale_bars(self.state.images):
            w = metrics.horizontalAdvance(what) + 6 + BAR_W[diverging]
            if x > 8 and x + w > width - 8:
                x, y = 8.0, y + 2 * LINE
            bars.append((x, y, what, vmax, diverging))
            x += w + 30
        # Swatches two to a column, beside the bars (a row of bars is two lines tall).
        labels, swatches = list(LABELS), []
        for k in range(0, len(labels), 2):
            pair = labels[k : k + 2]
            col_w = max(metrics.horizontalAdvance(t) for t in pair) + 8
            if x > 8 and x + 20 + col_w > width - 4:
                x, y = 8.0, y + 2 * LINE
            for sub, _label in enumerate(pair):
                widths = metrics.horizontalAdvance(_label) + 8
                swatches.append((x, y + sub * LINE, widths))
            x += 20 + col_w + 14
        lines = int(y / LINE) + 2
        return bars, swatches, lines

    def _fit_height(self) -> None:
        self.setFixedHeight(LINE * self._layout(self.width())[2] + 2)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._fit_height()
        super().resizeEvent(event)

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        p = QPainter(self)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        bars, places, _lines = self._layout(self.width())
        for x, y, what, vmax, diverging in bars:
            p.setPen(text)
            label_w = self.fontMetrics().horizontalAdvance(what)
            p.drawText(QRectF(x, y, label_w + 2, 20), Qt.AlignmentFlag.AlignVCenter, what)
            bar = QRectF(x + label_w + 6, y + 4, BAR_W[diverging], 12)
            if diverging:  # the blue–white–red palette, symmetric about 0
                self._bar(p, bar, 0, ((0.0, -vmax), (0.5, 0.0), (1.0, vmax)))
            else:  # ≥ 0: the white-to-red half of the same palette, to its own maximum
                self._bar(p, bar, 128, ((0.0, 0.0), (1.0, vmax)))
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
