"""The GPU panel's block_q × block_k sweep heatmap: ms per run, fastest starred, sliders outlined."""

from __future__ import annotations

import copy

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QVBoxLayout, QWidget

from desktop.theme import FollowsPalette, style_plot

PREFERRED_HEIGHT = 230  # px the heatmap asks for (the panel fits its dock at 1600x1000)


class CappedPlot(pg.PlotWidget):
    """A plot that asks for a modest height. The GPU panel sits in a scroll area that sizes
    it by its preferred heights (its wrapped labels make it height-for-width), so the plot's
    own 480 px hint made the whole panel scroll at 1600 x 1000; the layout's stretch still
    hands the heatmap any room left over."""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        hint = super().sizeHint()
        return QSize(hint.width(), min(hint.height(), PREFERRED_HEIGHT))


def bar_plot(left_label: str, min_height: int) -> CappedPlot:
    """A CappedPlot for bars read off a labelled y axis: no menu, no mouse, y grid."""
    plot = CappedPlot()
    plot.setMinimumHeight(min_height)
    item = plot.getPlotItem()
    item.setLabel("left", left_label)
    item.setMenuEnabled(False)
    item.setMouseEnabled(False, False)
    item.showGrid(y=True, alpha=0.3)
    return plot


class SweepView(FollowsPalette, QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sweep: dict | None = None
        self._n = 0
        self.plot = CappedPlot()
        self.plot.setMinimumHeight(200)
        item = self.plot.getPlotItem()
        # Short axis labels: a rotated long one is cut on a short plot.
        item.setLabel("bottom", "B_c (block_k)")
        item.setLabel("left", "B_r")
        item.setMenuEnabled(False)
        item.setMouseEnabled(False, False)
        self.image = pg.ImageItem()
        # A copy: colormap.get hands out one cached object, and reverse() works in place, so
        # reversing the shared one flipped the colours of every other panel made after it.
        cmap = copy.deepcopy(pg.colormap.get("viridis"))
        cmap.reverse()  # the fastest cell is the brightest
        self.image.setColorMap(cmap)
        item.addItem(self.image)
        self.current_rect = QGraphicsRectItem(0, 0, 1, 1)  # the sliders' cell, outlined
        pen = pg.mkPen("#e3a008", width=4)
        pen.setCosmetic(True)
        self.current_rect.setPen(pen)
        self.current_rect.setVisible(False)
        self.best_mark = pg.ScatterPlotItem(symbol="star", size=18, brush=pg.mkBrush("#ffffff"))
        item.addItem(self.current_rect)
        item.addItem(self.best_mark)
        self._cell_text: list[pg.TextItem] = []
        style_plot(self.plot, [item], self.palette())
        self.sweep_note = QLabel()
        self.sweep_note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.sweep_note)

    def restyle(self) -> None:
        style_plot(self.plot, [self.plot.getPlotItem()], self.palette())

    def show_sweep(self, sweep: dict | None, n: int, blocks: tuple[int, int]) -> None:
        """Draw a block sweep (ms per run, recorded at N = n) and mark `blocks`."""
        self._n = n
        item = self.plot.getPlotItem()
        for text in self._cell_text:
            item.removeItem(text)
        self._cell_text = []
        self.sweep = sweep
        if not sweep:
            self.image.clear()
            self.current_rect.setVisible(False)
            self.best_mark.setData([], [])
            self.sweep_note.setText("This report holds no block sweep.")
            return
        ms = np.array([[np.nan if v is None else v for v in line] for line in sweep["ms"]])
        finite = ms[np.isfinite(ms)]
        lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
        self.image.setImage(np.nan_to_num(ms.T, nan=hi), levels=(lo, max(hi, lo + 1e-9)))
        for (y, x), v in np.ndenumerate(ms):
            label = "does not fit" if np.isnan(v) else f"{v:.2f} ms"
            text = pg.TextItem(label, color="k", fill=pg.mkBrush(255, 255, 255, 190),
                               anchor=(0.5, 0.5))  # fmt: skip
            text.setPos(x + 0.5, y + 0.5)
            item.addItem(text)
            self._cell_text.append(text)
        ticks = [(i + 0.5, str(b)) for i, b in enumerate(sweep["block_k"])]
        item.getAxis("bottom").setTicks([ticks])
        ticks = [(i + 0.5, str(b)) for i, b in enumerate(sweep["block_q"])]
        item.getAxis("left").setTicks([ticks])
        best = sweep.get("best")
        if best:
            x, y = sweep["block_k"].index(best["block_k"]), sweep["block_q"].index(best["block_q"])
            self.best_mark.setData([x + 0.15], [y + 0.8])  # top-left corner of the cell
        self.mark(blocks)

    def mark(self, blocks: tuple[int, int]) -> None:
        """Outline the sliders' cell (or say it is not in the sweep)."""
        sweep = self.sweep
        if not sweep:
            return
        bq, bk = blocks
        best = sweep.get("best") or {}
        what = sweep.get("pass", "forward")
        note = f"Tiled kernel ({what}), ms per run at N={self._n} ({sweep['order']}); ☆ fastest"
        if best:
            note += f": {best['block_q']}×{best['block_k']} at {best['ms']:.3f} ms"
        if bq in sweep["block_q"] and bk in sweep["block_k"]:
            x, y = sweep["block_k"].index(bk), sweep["block_q"].index(bq)
            self.current_rect.setRect(x + 0.02, y + 0.02, 0.96, 0.96)
            self.current_rect.setVisible(True)
            note += f"; □ sliders: {bq}×{bk}"
        else:
            self.current_rect.setVisible(False)
            note += f"; the sliders' {bq}×{bk} is not in this sweep"
        self.sweep_note.setText(note)
