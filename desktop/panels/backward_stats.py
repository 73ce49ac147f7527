"""The statistics panel's backward part: the selected query row's L, D, recomputed P̃ and
dQ_row accumulating tile by tile; the selected key row's dK, dV across query blocks.

Every number is the compute core's (Trace.backward_row, Trace.key_row, and the step →
tiles / blocks look-ups); this widget only formats them. Hidden in the forward pass.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGridLayout,
    QGroupBox,
    QLabel,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
)

from desktop.panels.fit_label import FitLabel
from desktop.panels.lean_axis import LeanAxis, prepare_axes
from desktop.panels.pending_cover import PendingCover
from desktop.scene.row_series import MAX_COLOURED, STEP_X, fmt, fmt_vec
from desktop.state.app_state import AppState
from desktop.theme import FollowsPalette, settle_plot, style_plot

FORMULAS = {
    "L": "L = m + log ℓ of the row, saved by the forward: all the backward keeps of softmax",
    "D": "D = rowsum(dO ∘ O), the tiled lane's preprocessing pass (= rowsum(P ∘ dP))",
    "p_diff": "max |P̃ − P| over the row: P̃ = exp(S − L) recomputed by the backward, P the forward's",
    "dq": "dQ_row after the key tiles the tiled lane has visited so far: Σ_j dS_rj K_j · scale",
    "dq_ref": "dQ_row of the float64 dense backward (the reference)",
    "dq_err": "max |dQ_row (tiled, at the end) − reference|",
    "dk": "dK of the selected key after the query blocks so far: Σ_i dS_icᵀ Q_i · scale",
    "dv": "dV of the selected key after the query blocks so far: Σ_i P̃_icᵀ dO_i",
}
NAMES = {
    "L": "L",
    "D": "D",
    "p_diff": "|P̃ − P|",
    "dq": "dQ_row",
    "dq_ref": "dense dQ",
    "dq_err": "error",
    "dk": "dK_key",
    "dv": "dV_key",
}


class BackwardStats(FollowsPalette, QGroupBox):
    """Labels and a dQ_row plot for the backward pass; follows AppState's row and key."""

    def __init__(self, state: AppState, parent=None) -> None:
        super().__init__("Backward: the selected row's gradient", parent)
        self.state = state
        self.key_spin = QSpinBox()
        self.key_spin.setObjectName("key_spin")
        self.key_spin.setToolTip("Key row whose dK, dV are followed (or click a K/V row)")
        self.key_spin.valueChanged.connect(state.set_key)
        self.labels = {k: FitLabel() for k in FORMULAS}
        grid = QGridLayout()
        places = {"L": (0, 0), "D": (0, 2), "p_diff": (1, 0), "dq": (2, 0), "dq_ref": (3, 0)}
        places |= {"dq_err": (4, 0), "dk": (6, 0), "dv": (7, 0)}
        for key, (row, col) in places.items():
            lab = self.labels[key]
            lab.setToolTip(FORMULAS[key])
            lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            lab.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            name = QLabel(NAMES[key])
            name.setToolTip(FORMULAS[key])
            grid.addWidget(name, row, col)
            grid.addWidget(lab, row, col + 1, 1, 1 if key in ("L", "D") else 3)
        grid.addWidget(QLabel("Key row"), 5, 0)
        grid.addWidget(self.key_spin, 5, 1)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        self.plot = pg.PlotWidget(
            axisItems={"left": LeanAxis("left"), "bottom": LeanAxis("bottom")}
        )
        self.plot.setMinimumHeight(110)
        item = self.plot.getPlotItem()
        item.setTitle("dQ_row → dense dQ (dashed), tile by tile", size="9pt")
        item.setLabel("bottom", "step (1-based, as the playback bar)")
        for name in ("left", "bottom"):  # as the statistics plots: no unit, so no prefix,
            item.getAxis(name).enableAutoSIPrefix(False)  # and no label re-typeset a change
        item.setMenuEnabled(False)
        item.hideButtons()
        item.setMouseEnabled(x=False, y=False)  # the view follows the data, not the wheel
        self._marker = pg.InfiniteLine(
            angle=90, pen=pg.mkPen((128, 128, 128), width=1.5, style=Qt.PenStyle.DashLine)
        )
        item.addItem(self._marker, ignoreBounds=True)
        self._curves: list[pg.PlotCurveItem] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(grid)
        layout.addWidget(self.plot, 1)
        self.plot_cover = PendingCover(self.plot, "computing the row's curves…")
        self._drawn = None  # (trace, row) whose curves the plot shows
        self.restyle()
        state.sigTraceChanged.connect(self._rebuild)
        state.sigRowChanged.connect(self._rebuild)
        state.sigKeyChanged.connect(self._on_key)
        state.sigStepChanged.connect(self._on_step)
        state.sigPartsChanged.connect(self._on_parts)

    def restyle(self) -> None:
        style_plot(self.plot, [self.plot.getPlotItem()], self.palette())

    def _rebuild(self, *_args: object) -> None:
        trace = self.state.trace
        if trace is None or trace.pass_name == "forward":
            self.hide()
            return
        self.show()
        with QSignalBlocker(self.key_spin):
            self.key_spin.setRange(0, trace.schedule.n_k - 1)
            self.key_spin.setValue(self.state.key)
        row = self.state.row
        b = trace.backward_row(row)
        p_row = trace.probs_region(row, row + 1, 0, trace.schedule.n_k)[0]
        self.labels["L"].setText(fmt(b.L))
        self.labels["D"].setText(fmt(b.D))
        self.labels["p_diff"].setText(
            f"{fmt(float(np.max(np.abs(b.p_tilde - p_row), initial=0.0)))} (0 to rounding)"
        )
        self.labels["dq_ref"].setText(fmt_vec(b.dq_reference))
        err = float(np.max(np.abs(b.dq[-1] - b.dq_reference), initial=0.0))
        self.labels["dq_err"].setText(f"{fmt(err)} (vs float64, {trace.dtype})")
        self._drawn = None
        waiting = "plots" in self.state.pending_parts  # (worker.PARTS)
        self.plot_cover.cover(waiting)
        if not waiting:
            self._draw_curves(trace, row, b)
        self._on_step(self.state.step)

    def _on_parts(self, pending: frozenset) -> None:
        trace, row = self.state.trace, self.state.row
        if trace is None or trace.pass_name == "forward":
            return
        if "plots" not in pending and self._drawn is None:  # the curves' part arrived
            self.plot_cover.cover(False)
            self._draw_curves(trace, row, trace.backward_row(row))
        self._on_step(self.state.step)

    def _draw_curves(self, trace, row: int, b) -> None:
        """dQ_row as a step function: it changes at the tiled lane's update steps of the row."""
        self._drawn = (trace, row)
        steps, tiles = trace.lanes["tiled"].steps_of("bwd_update", row // trace.schedule.block_q)
        edges = np.concatenate([[-0.5], steps - 0.5, [trace.n_steps - 0.5]]) + STEP_X
        values = b.dq[np.concatenate([[0], tiles + 1])]
        comps = min(values.shape[1], MAX_COLOURED)
        item = self.plot.getPlotItem()
        while len(self._curves) < 2 * comps:
            k = len(self._curves) // 2
            color = pg.intColor(k, hues=MAX_COLOURED)
            for pen in (
                pg.mkPen(color, width=1.5),
                pg.mkPen(color, width=1, style=Qt.PenStyle.DashLine),
            ):
                curve = pg.PlotCurveItem(pen=pen)  # (as the stats panel's: a cheap setData)
                item.addItem(curve)
                # The step marker moves every playback frame: the curves keep their pixels
                # instead of drawing T_c steps each again (16 curves of 2,048 steps at
                # N = 4096, 2 × 2 blocks); redrawn when the data or the view changes.
                curve.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
                self._curves.append(curve)
        span = np.array([-0.5, trace.n_steps - 0.5]) + STEP_X
        for k, curve in enumerate(self._curves):
            c = k // 2
            if c >= comps:
                curve.setData([], [], stepMode=None)  # (a PlotCurveItem keeps its mode)
            elif k % 2 == 0:
                curve.setData(edges, values[:, c], stepMode="center")
            else:
                curve.setData(span, [b.dq_reference[c]] * 2)
        # The curves' bounds, set once (padding as auto-range pads): auto-range walked all
        # of them again on every playback frame (~1.5 ms with 64 components).
        ys = np.concatenate([np.ravel(values[:, :comps]), b.dq_reference[:comps]])
        ys = ys[np.isfinite(ys)]
        lo, hi = (float(ys.min()), float(ys.max())) if ys.size else (0.0, 1.0)
        if hi == lo:  # a flat line: a unit span around it, as auto-range gives
            lo, hi = lo - 0.5, hi + 0.5
        item.disableAutoRange()
        item.setXRange(*span)
        item.setYRange(lo, hi)
        prepare_axes(self.plot, [item])

    def _on_key(self, key: int) -> None:
        # Only the dK / dV read-outs follow the key row; the dQ curves are the row's.
        with QSignalBlocker(self.key_spin):
            self.key_spin.setValue(key)
        self._on_step(self.state.step)

    def _on_step(self, step: int) -> None:
        trace = self.state.trace
        if trace is None or trace.pass_name == "forward" or step >= trace.n_steps:
            return
        self._marker.setPos(step + STEP_X)
        row, key = self.state.row, self.state.key
        b = trace.backward_row(row)
        done = trace.backward_tiles_done(row, step)
        self.labels["dq"].setText(
            f"{fmt_vec(b.dq[done])} after {done} of {trace.schedule.t_c} tiles"
        )
        if not trace.key_tile_ready(key // trace.schedule.block_k):
            # dK_j needs every row's L and D: it comes with the second tier
            self.labels["dk"].setText("computing…")
            self.labels["dv"].setText("computing…")
        else:
            k = trace.key_row(key)
            n = trace.backward_blocks_done(key, step)
            self.labels["dk"].setText(
                f"{fmt_vec(k.dk[n])} after {n} of {trace.schedule.t_r} blocks"
            )
            self.labels["dv"].setText(fmt_vec(k.dv[n]))
        settle_plot(self.plot)
