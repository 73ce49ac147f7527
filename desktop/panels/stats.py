"""Per-row statistics: m, ℓ, α, every component of a, and a/ℓ converging to the output.

For the selected query row, the tiled lane's state after each timeline step is looked
up in the Trace's row history (the core's numbers, computed for the row's block on
first use, indexed by how many key tiles the block has passed). Curves are rebuilt on
a new trace or row; a step change only moves the step markers and the value read-outs.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QGraphicsItem,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from desktop.panels.backward_stats import BackwardStats
from desktop.panels.fit_label import FitLabel
from desktop.panels.lean_axis import LeanAxis, prepare_axes
from desktop.panels.pending_cover import PendingCover
from desktop.panels.sparse_axis import SparseAxis
from desktop.scene.row_series import (
    FORMULAS,
    MAX_COLOURED,
    SCALAR_COLORS,
    STEP_X,
    StatsCurves,
    dense_output_row,
    fmt,
    fmt_vec,
    stats_curves,
    zoom_window,
)
from desktop.state.app_state import AppState
from desktop.theme import FollowsPalette, settle_plot, style_plot

PLOTS = (
    ("m", "m: running max"),
    ("l", "ℓ: running denominator"),
    ("alpha", "α = exp(m_old − m_new)"),
    ("a", "a: unnormalised numerator"),
    ("out", "a/ℓ → O (dashed: float64 reference)"),
)
# Each stacked plot keeps about 40 px of axis under its title; below that the panel
# scrolls (the window puts it in a scroll area) rather than squeezing the plots flat.
PLOTS_MIN_HEIGHT = 5 * 72
# Read-outs: (grid row, column, span). Scalars two to a line; vectors get a whole line.
READOUTS = {
    "m": (1, 0, 1),
    "l": (1, 2, 1),
    "alpha": (2, 0, 1),
    "a": (3, 0, 3),
    "out": (4, 0, 3),
    "dense": (5, 0, 3),
    "ref": (6, 0, 3),
    "error": (7, 0, 3),
}
READOUT_NAMES = {
    "m": "m",
    "l": "ℓ",
    "alpha": "α",
    "a": "a",
    "out": "a/ℓ",
    "dense": "dense O",
    "ref": "O_ref (float64)",
    "error": "max |O − O_ref|",
}


class StatsPanel(FollowsPalette, QWidget):
    sigTileJump = Signal(int)  # +1 / −1: the row's next / previous key tile

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._series: StatsCurves | None = None  # the row's curves (None: not plotted)
        self._x_window: tuple[int, int] | None = None  # the 0-based steps plotted
        grid = self._build_readouts()
        self._build_plots()
        self._build_bundles()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(grid)
        # Why the selected row's output is zero, when its mask leaves it no key.
        self.mask_note = QLabel()
        self.mask_note.setObjectName("mask_note")
        self.mask_note.setWordWrap(True)
        self.mask_note.hide()
        layout.addWidget(self.mask_note)
        layout.addWidget(self.plots, 1)
        # A streamed trace's curves come with its second tier (worker.PARTS).
        self.plots_cover = PendingCover(self.plots, "computing the row's curves…")
        self.plots_cover.setObjectName("plots_cover")
        # Which colour is which component of a and a/ℓ (the plots draw no legend over
        # the curves).
        self.components_label = QLabel()
        self.components_label.setObjectName("components_legend")
        self.components_label.setWordWrap(True)
        self.components_label.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(self.components_label)
        self.backward = BackwardStats(state)  # shown in the backward and a training step
        self.backward.hide()
        layout.addWidget(self.backward, 1)
        self.restyle()
        state.sigTraceChanged.connect(self._rebuild)
        state.sigRowChanged.connect(self._rebuild)
        state.sigStepChanged.connect(self._on_step)
        state.sigPartsChanged.connect(self._on_parts)

    # ---- construction ----------------------------------------------------------------
    def _build_readouts(self) -> QGridLayout:
        """The row chooser, tile jumps, the whole-run toggle and one read-out per quantity."""
        self.row_spin = QSpinBox()
        self.row_spin.setToolTip(
            "Query row whose online-softmax state is plotted (or click a row in a lane)"
        )
        self.row_spin.valueChanged.connect(self.state.set_row)
        self.labels = {k: FitLabel() for k in READOUTS}
        for lab in self.labels.values():
            lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            # Long vectors must not widen the dock: let the label be clipped instead.
            lab.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        grid = QGridLayout()
        grid.addWidget(QLabel("Query row"), 0, 0)
        grid.addWidget(self.row_spin, 0, 1)

        jumps = QHBoxLayout()
        for text, direction, tip in (
            ("‹ tile", -1, "Previous step that updated this row (Ctrl+Left)"),
            ("tile ›", +1, "Next step that updates this row: its next key tile (Ctrl+Right)"),
        ):
            b = QToolButton()
            b.setText(text)
            b.setToolTip(tip)
            b.clicked.connect(lambda _c=False, d=direction: self.sigTileJump.emit(d))
            jumps.addWidget(b)
            self._jump_buttons = [*getattr(self, "_jump_buttons", []), b]
        self.whole_run = QCheckBox("whole run")
        self.whole_run.setToolTip(
            "Plot every step of the run; unchecked, the plots show the steps that update "
            "this row and follow the current step"
        )
        self.whole_run.toggled.connect(lambda _v: self._set_x_range())
        jumps.addWidget(self.whole_run)
        grid.addLayout(jumps, 0, 2, 1, 2)
        self.names: dict[str, QLabel] = {}
        # The error read-out is a sentence: it wraps rather than lose its end.
        self.labels["error"].setWordWrap(True)
        self._forward_widgets: list[QLabel] = []  # the online softmax's state (not in a backward)
        for key, (row, col, span) in READOUTS.items():
            self.labels[key].setToolTip(FORMULAS[key])
            name = QLabel(self._readout_name(key))
            if key in ("m", "l", "alpha", "a", "out"):
                self._forward_widgets += [name, self.labels[key]]
            name.setToolTip(FORMULAS[key])
            self.names[key] = name
            grid.addWidget(name, row, col)
            grid.addWidget(self.labels[key], row, col + 1, 1, span)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        return grid

    def as_slide(self) -> None:
        """Lay out as an exported picture: the row said in words, no live controls
        (a spin box and "‹ tile" buttons on a slide are things nobody can press)."""
        for w in (self.whole_run, *self._jump_buttons):
            w.hide()
        for spin in (self.row_spin, self.backward.key_spin):
            as_text(spin)

    def _readout_name(self, key: str) -> str:
        dtype = self.state.trace.dtype if self.state.trace is not None else "dtype"
        return {"dense": f"dense O ({dtype})"}.get(key, READOUT_NAMES[key])

    def _build_plots(self) -> None:
        """Five stacked plots sharing one 1-based step axis, each with a step marker."""
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setMinimumHeight(PLOTS_MIN_HEIGHT)
        self._items: dict[str, pg.PlotItem] = {}
        self._markers: list[pg.InfiniteLine] = []
        self._curves: dict[str, list[pg.PlotCurveItem]] = {k: [] for k, _ in PLOTS}
        self._refs: list[pg.PlotCurveItem] = []
        for k, (key, title) in enumerate(PLOTS):
            item = self.plots.addPlot(
                row=k, col=0, axisItems={"left": SparseAxis("left"), "bottom": LeanAxis("bottom")}
            )
            item.setTitle(title, size="9pt")
            # No grid: pyqtgraph's grid lines cost ~10 ms a plot per repaint, too much
            # for 60 fps playback (measured offscreen, desktop.cli.bench_gui).
            item.setMenuEnabled(False)
            item.hideButtons()
            item.setMouseEnabled(x=False, y=False)  # the view follows the step, not the wheel
            for name in ("left", "bottom"):
                # No unit on any axis, so no prefix to choose; choosing it re-typeset
                # each axis's label on every range change (~6 ms a change).
                item.getAxis(name).enableAutoSIPrefix(False)
            if k:
                item.setXLink(self._items["m"])
            if k < len(PLOTS) - 1:
                item.hideAxis("bottom")  # the x axis (steps) is shared; label it once
            else:
                item.setLabel("bottom", "step (1-based, as the playback bar)")
            marker = pg.InfiniteLine(
                angle=90, pen=pg.mkPen((128, 128, 128), width=1.5, style=Qt.PenStyle.DashLine)
            )
            item.addItem(marker, ignoreBounds=True)  # moving it must not re-autorange
            self._markers.append(marker)
            self._items[key] = item

    def _build_bundles(self) -> None:
        """One line item per plot for many components (see _rebuild)."""
        # Opaque pens: alpha-blended lines over 64 components cost ~8 ms a repaint.
        self._bundles = [
            pg.PlotCurveItem(pen=pg.mkPen(120, 150, 210), connect="finite"),
            pg.PlotCurveItem(pen=pg.mkPen(120, 150, 210), connect="finite"),
            pg.PlotCurveItem(
                pen=pg.mkPen(200, 80, 60, style=Qt.PenStyle.DashLine), connect="finite"
            ),
        ]
        for key, item in zip(("a", "out", "out"), self._bundles, strict=True):
            self._items[key].addItem(item)
            _cache_lines(item)

    def restyle(self) -> None:
        style_plot(self.plots, self._items.values(), self.palette())

    def _curves_for(self, key: str, count: int, dashed: bool = False) -> list[pg.PlotCurveItem]:
        pool = self._refs if dashed else self._curves[key]
        item = self._items[key]
        while len(pool) < count:
            k = len(pool)
            pen = pg.mkPen(
                pg.intColor(k, hues=MAX_COLOURED),
                width=1.5,
                style=Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine,
            )
            # PlotCurveItem, not PlotDataItem: its setData costs a sixth as much (25 against
            # ~160 us a short step curve, more on a bundle's points), and a change sets them all.
            curve = pg.PlotCurveItem(pen=pen, connect="finite")
            item.addItem(curve)
            _cache_lines(curve)
            pool.append(curve)
        for curve in pool[count:]:
            curve.setData([], [], stepMode=None)  # (a PlotCurveItem keeps its mode)
        return pool[:count]

    def _rebuild(self, *_args: object) -> None:
        trace, row = self.state.trace, self.state.row
        if trace is None or row < 0:
            return
        with QSignalBlocker(self.row_spin):
            self.row_spin.setRange(0, trace.schedule.n_q - 1)
            self.row_spin.setValue(row)

        forward = trace.pass_name != "backward"  # a backward alone shows no forward state
        for w in (self.plots, self.components_label, *self._forward_widgets):
            w.setVisible(forward)
        self._set_outputs(trace, row)
        self._series = None
        waiting = forward and "plots" in self.state.pending_parts
        self.plots_cover.cover(waiting)
        if not forward or waiting:  # no plots shown, or not yet: the read-outs only
            self._on_step(self.state.step)
            return
        c = self._series = stats_curves(trace, row)  # made on the worker with the trace
        for key, y in c.scalars.items():
            (curve,) = self._curves_for(key, 1)
            curve.setPen(pg.mkPen(SCALAR_COLORS[key], width=2))
            curve.setData(c.x, y, stepMode="center")
        d_v = trace.schedule.d_v
        self.components_label.setText(components_legend(d_v))
        if c.coloured:
            # One coloured curve per component; the same colour for a, a/ℓ and its target.
            for k, curve in enumerate(self._curves_for("a", d_v)):
                curve.setData(c.x, c.a[:, k], stepMode="center")
            for k, curve in enumerate(self._curves_for("out", d_v)):
                curve.setData(c.x, c.out[:, k], stepMode="center")
            for k, curve in enumerate(self._curves_for("out", d_v, dashed=True)):
                curve.setData(c.span, np.full(2, c.ref[k]))
        else:
            # Many components: every one is drawn, but as one bundle item per plot, so a
            # repaint costs one item, not d_v of them.
            for key in ("a", "out"):
                self._curves_for(key, 0)
            self._curves_for("out", 0, dashed=True)
        for (bx, by), item in zip(c.bundles, self._bundles, strict=True):
            item.setData([] if bx is None else bx, [] if by is None else by)
        # Ranges from the series directly: cheaper than pyqtgraph's auto-range, which
        # walks every curve's bounds again on each repaint.
        for key, item in self._items.items():
            item.disableAutoRange()
            item.setYRange(*c.ranges[key], padding=0.06)
        self._active = c.active
        self._x_window = None
        self._on_step(self.state.step)
        self._size_value_axes()

    def _size_value_axes(self) -> None:
        """Give each axis the width of its tick labels now. pyqtgraph widens an axis when
        it first paints labels that do not fit: the change's paint showed narrow axes, the
        next frame every plot narrower, its curves redrawn (10-25 ms, bench-gui's first
        frame of a configuration). The labels stay while the row does (fixed y ranges), so
        the width found here is the one playback keeps (and an export's render shows)."""
        prepare_axes(self.plots, self._items.values(), unseen=True)

    def _on_parts(self, pending: frozenset) -> None:
        """The second tier arrived: the row's curves and the all-rows error."""
        trace = self.state.trace
        if trace is None:
            return
        if self._series is None and "plots" not in pending and trace.pass_name != "backward":
            self._rebuild()
        else:
            self._set_outputs(trace, self.state.row)

    def _set_outputs(self, trace, row: int) -> None:
        """The output read-outs (shown in every pass): dense O, O_ref and the error."""
        ref = trace.reference_rows(row, row + 1)[0]
        tiled = trace.tiled_output_rows(row, row + 1)[0]
        err_row = float(np.max(np.abs(tiled.astype(np.float64) - ref), initial=0.0))
        self.names["dense"].setText(self._readout_name("dense"))
        self.labels["dense"].setText(fmt_vec(dense_output_row(trace, row)))
        self.labels["ref"].setText(fmt_vec(ref))
        s = trace.schedule
        why = s.mask.why_empty(row, s.n_q, s.n_k) if s.mask else None
        self.mask_note.setText(why or "")
        self.mask_note.setVisible(why is not None)
        # All rows' error needs all of S. Until then "computing…" stands in the same words
        # the number will have: the label wraps where it will then, so the plots below are
        # not resized (and repainted) twice a change.
        every = None if "errors" in self.state.pending_parts else trace.max_abs_error
        self.labels["error"].setText(error_text(err_row, every, trace.dtype))

    def _set_x_range(self) -> None:
        """Whole run, or the row's active steps slid to hold the current step (1-based)."""
        trace = self.state.trace
        if trace is None or self._series is None:
            return
        if self.whole_run.isChecked():
            lo, hi = 0, trace.n_steps - 1
        else:
            lo, hi = zoom_window(self._active, self.state.step, trace.n_steps)
        if (lo, hi) != self._x_window:
            self._x_window = (lo, hi)
            # The other plots follow through their x link.
            self._items["m"].setXRange(lo - 0.5 + STEP_X, hi + 0.5 + STEP_X, padding=0.01)

    def _on_step(self, step: int) -> None:
        trace = self.state.trace
        if trace is None or step >= trace.n_steps or trace.pass_name == "backward":
            return
        if self._series is not None:
            for marker in self._markers:
                marker.setPos(step + STEP_X)
            self._set_x_range()
        core = trace.row_state(self.state.row, step)  # the core's numbers, shown as they are
        self.labels["m"].setText(fmt(core.m))
        self.labels["l"].setText(fmt(core.l))
        self.labels["alpha"].setText(fmt(core.alpha))
        self.labels["a"].setText(fmt_vec(core.a))
        out = "— (no keys yet)" if core.l <= 0 else fmt_vec(core.partial_output)
        self.labels["out"].setText(out)
        settle_plot(self.plots)


def as_text(spin: QSpinBox) -> None:
    """A spin box drawn as its number: no frame, no arrows, not editable."""
    spin.setButtonSymbols(QSpinBox.ButtonSymbols.NoButtons)
    spin.setFrame(False)
    spin.setReadOnly(True)
    spin.setStyleSheet("QSpinBox { background: transparent; }")


def _cache_lines(line: pg.PlotCurveItem) -> None:
    """Keep a line's pixels between repaints: the step marker moves every playback frame,
    and redrawing the step curves under it (64 components bundled: ~260 k points at
    N = 4096 with 2×2 blocks) cost ~15 ms a frame. The cache is redrawn when the data, the
    pen or the view range changes; zoom_window moves the range at most four times as
    playback passes the row."""
    line.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)


def components_legend(d_v: int) -> str:
    """Rich text naming the colour of each component of a and a/ℓ (one colour for all
    when there are more than MAX_COLOURED)."""
    if d_v > MAX_COLOURED:
        return (
            f"a, a/ℓ: all {d_v} components in one colour; "
            "<span style='color:#c85040'>╍╍</span> their float64 targets"
        )
    marks = " ".join(
        f"<span style='white-space:nowrap'><span style='color:"
        f"{pg.intColor(k, hues=MAX_COLOURED).name()}; font-weight:bold'>━━</span>&nbsp;{k}</span>"
        for k in range(d_v)
    )
    return f"a, a/ℓ components: {marks} (dashed: targets)"


def error_text(row_error: float, all_error: float | None, dtype: str) -> str:
    """The error read-out: the tiled output against the float64 reference (all rows'
    None while the pass over S is still computing)."""
    every = "computing…" if all_error is None else fmt(all_error)
    return f"this row {fmt(row_error)}, all rows {every} (tiled in {dtype} vs float64)"
