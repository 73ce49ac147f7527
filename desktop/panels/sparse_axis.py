"""A value axis that never prints its tick numbers over each other in a short plot.

pyqtgraph always labels its major ticks, and picks at least about three of them however
short the axis is; five plots stacked in a small dock leave an axis 15-30 px tall, where
"0.20 0.15 0.10" print on top of each other. This axis widens the major spacing (×2, ×5,
×10, …) until the labels fit the axis length.
"""

from __future__ import annotations

import math

from PySide6.QtGui import QFontMetricsF

from desktop.panels.lean_axis import LeanAxis

LABEL_PITCH = 1.15  # a label needs this many text heights of axis


class SparseAxis(LeanAxis):
    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802, N803
        levels = super().tickSpacing(minVal, maxVal, size)
        span = abs(maxVal - minVal)
        if not levels or span == 0 or not math.isfinite(span):
            return levels
        font = self.style.get("tickFont") or self.font()
        text_h = max(8.0, QFontMetricsF(font).height())
        fit = int(size / (LABEL_PITCH * text_h))  # gaps between labels the axis holds
        spacing = levels[0][0]
        lo, hi = min(minVal, maxVal), max(minVal, maxVal)
        for factor in (1, 2, 5, 10, 20, 50, 100):
            step = spacing * factor
            labels = math.floor(hi / step) - math.ceil(lo / step) + 1  # ticks inside the range
            if labels <= fit + 1:
                break
        if factor == 1:
            return levels
        # one wider major level; the minor ticks (unlabelled) keep the old spacing
        return [(spacing * factor, 0), (spacing, 0)]
