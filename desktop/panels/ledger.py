"""The HBM ledger: running transfer counts for both lanes, and transfers against N.

The table and totals show the Trace's running counts up to the current step (the very
transfers the lanes animate). The plot sweeps N with the compute core's closed-form
ledger at the current block sizes, d, d_v, mask and dtype, for the dense lane and both
tiled loop orders, beside Theorem 2's order N²d²/M; the current N is marked. With a
sliding window it sweeps the window's left size at the current N instead. A second tab
sets declared bytes against a GPU's measured DRAM bytes (desktop.panels.ledger_measured).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QBoxLayout,
    QGridLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

import compute
from compute import Trace, element_bytes
from compute.mask import Mask
from desktop.panels.backward_memory import BackwardMemory
from desktop.panels.lean_axis import LeanAxis, prepare_axes
from desktop.panels.ledger_measured import LedgerMeasured
from desktop.panels.pending_cover import PendingCover
from desktop.state.app_state import AppState
from desktop.state.config import Config
from desktop.theme import FollowsPalette, style_plot

COLUMNS = (("dense", "read"), ("dense", "write"), ("tiled", "read"), ("tiled", "write"))
SYMBOLS = {"l": "ℓ"}
TENSOR_TIPS = {
    "Q": "Queries, N × d: read once per query block",
    "K": "Keys, N_keys × d: read once per query block (T_r times) in Q-outer and dense",
    "V": "Values, N_keys × d_v",
    "O": "Output, N × d_v (KV-outer also reads and rewrites it on every visit)",
    "S": "Scores S = Q Kᵀ / √d, N × N_keys: only the dense lane stores them (4N² with P)",
    "P": "Probabilities P = softmax(S), N × N_keys: only the dense lane stores them",
    "m": "Running max per row (KV-outer keeps it in HBM between visits)",
    "l": "Running denominator ℓ per row (KV-outer keeps it in HBM between visits)",
    "L": "Log-sum-exp L = m + log ℓ per row, saved for the backward pass",
}


QWIDGETSIZE_MAX = (1 << 24) - 1  # Qt's "no maximum"
NARROW = 620  # below this width the counts and the sweep stack
SWEEP_N = np.unique(np.geomspace(4, 4096, 28).astype(int))


N_AXIS = "N (query and key positions)"
WINDOW_AXIS = "window left size (keys before the diagonal)"


def sweep(config: Config, sram: int) -> dict[str, np.ndarray]:
    """Total transfers of the config's pass (forward, backward or training) against N, for
    dense, q-outer and kv-outer at the config's shapes; with a sliding window (a bounded
    left side, not packed), against the window's left size at the config's N instead."""
    fn, args = sweep_key(config, sram)
    return fn(*args)  # (cached: one object per key)


def _sweep_sram(trace: Trace) -> int:
    """The SRAM capacity the sweep's bound is drawn for: the trace's M, else its working set."""
    return trace.sram_capacity or trace.schedule.sram_elements("tiled")


def _mark_x(trace: Trace, by_n: bool) -> int:
    """Where the trace sits on its sweep's x axis: N, or the window's left size."""
    return trace.schedule.n_q if by_n else max(1, trace.schedule.mask.left)


def sweep_key(config: Config, sram: int) -> tuple[Callable[..., dict], tuple]:
    """(function, arguments) that `sweep` computes for a config: equal keys, equal sweeps,
    so a panel can tell that its sweep changes without computing the new one."""
    m = config.mask
    if m.left >= 0 and not m.lengths:
        shape = (config.n, config.n_k, config.d, config.dv, config.block_q, config.block_k)
        return _window_sweep, (*shape, m, config.save_lse, sram, config.pass_name)
    key = (config.n_k / config.n, config.d, config.dv, config.block_q, config.block_k)
    mask = dataclasses.replace(m, lengths=())  # packed lengths sum to one N: kept out
    return _sweep, (*key, mask, config.save_lse, sram, config.pass_name)


@functools.lru_cache(maxsize=64)  # (new inputs of the same sizes: the same object)
def _window_sweep(
    n: int, n_k: int, d: int, dv: int, block_q: int, block_k: int, mask: Mask, lse: bool,
    sram: int, pass_name: str,
) -> dict:  # fmt: skip
    sizes = np.unique(np.geomspace(1, max(2, n_k), 24).astype(int))
    sizes = np.unique(np.append(sizes, max(1, mask.left)))  # log axis: sizes from 1
    out = {"n": sizes, "dense": [], "q-outer": [], "kv-outer": [], "bound": []}
    kw = dict(block_q=block_q, block_k=block_k, save_lse=lse)
    for left in sizes.tolist():
        window = dataclasses.replace(mask, left=left)
        for order in ("q-outer", "kv-outer"):
            led = compute.pass_ledger(pass_name, n, n_k, d, dv, order=order, causal=window, **kw)
            out[order].append(led.lanes["tiled"].total_elements)
        out["dense"].append(led.lanes["dense"].total_elements)
        out["bound"].append(compute.theorem2_bound(n, d, sram))
    return {**{k: np.asarray(v, dtype=float) for k, v in out.items()}, "axis": WINDOW_AXIS}


@functools.lru_cache(maxsize=64)  # dragging N leaves every other argument unchanged
def _sweep(
    ratio: float, d: int, dv: int, block_q: int, block_k: int, causal: Mask, lse: bool, sram: int,
    pass_name: str,
) -> dict[str, np.ndarray]:  # fmt: skip
    out = {"n": SWEEP_N, "dense": [], "q-outer": [], "kv-outer": [], "bound": []}
    kw = dict(block_q=block_q, block_k=block_k, causal=causal, save_lse=lse)
    for n in SWEEP_N.tolist():
        n_k = max(1, round(n * ratio))
        for order in ("q-outer", "kv-outer"):
            # `order` is the forward's loop order; the backward alone always runs K/V outer
            led = compute.pass_ledger(pass_name, n, n_k, d, dv, order=order, **kw)
            out[order].append(led.lanes["tiled"].total_elements)
        out["dense"].append(led.lanes["dense"].total_elements)
        out["bound"].append(compute.theorem2_bound(n, d, sram))
    return {**{k: np.asarray(v, dtype=float) for k, v in out.items()}, "axis": N_AXIS}


PENS = {  # key: (colour, width, style, legend name)
    "dense": ("#c0392b", 2, Qt.PenStyle.SolidLine, "dense"),
    "q-outer": ("#2471a3", 2, Qt.PenStyle.SolidLine, "tiled, Q-outer"),
    "kv-outer": ("#9b59b6", 2, Qt.PenStyle.DashLine, "tiled, KV-outer"),
    "bound": ("#d68910", 2, Qt.PenStyle.DotLine, "Theorem 2: N²d²/M"),
}
LEGEND_MARKS = {Qt.PenStyle.SolidLine: "━━", Qt.PenStyle.DashLine: "╍╍", Qt.PenStyle.DotLine: "┅┅"}


def unbreakable(text: str) -> str:
    """Rich text that Qt never breaks: non-breaking spaces, a word joiner after '/'."""
    return text.replace(" ", "&nbsp;").replace("/", "/\u2060")


def pens_for(pass_name: str) -> dict:
    """The sweep's curves for a pass: the backward alone has one tiled order (K/V outer),
    so its q-outer curve is named for that and the kv-outer one (the same numbers) is dropped."""
    if pass_name != "backward":
        return PENS
    colour, width, style, _name = PENS["q-outer"]
    pens = {k: v for k, v in PENS.items() if k != "kv-outer"}
    pens["q-outer"] = (colour, width, style, "tiled (K/V outer)")
    return pens


def legend_html(pens: dict = PENS) -> str:
    """The sweep's legend as rich text below the plot: it never covers a curve, and its
    words take the palette's text colour (readable light and dark); only the marks are coloured."""
    items = [
        f"<span style='white-space:nowrap'><span style='color:{colour}; font-weight:bold'>"
        f"{LEGEND_MARKS[style]}</span>&nbsp;{unbreakable(name)}</span>"
        for colour, _w, style, name in pens.values()
    ]
    items.append(
        "<span style='white-space:nowrap'><span style='color:#f0b400'>●</span>"
        "&nbsp;this&nbsp;configuration</span>"
    )
    return " &nbsp; ".join(items)


class LedgerPanel(FollowsPalette, QWidget):
    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._tensors: list[str] = []
        # (dense timeline, tiled timeline, dtype, step) the table and totals show: new inputs
        # of the same sizes keep the trace's timelines (compute.timeline.lane_timelines), so
        # their counts too.
        self._shown: tuple | None = None
        left = QVBoxLayout()
        left.addLayout(self._build_totals())
        self.backward_memory = BackwardMemory(state)  # backward and training only
        left.addWidget(self.backward_memory)
        left.addWidget(self._build_table(), 1)
        left.addWidget(self.totals_table)
        self._left, self._slide = left, False
        sweep = QWidget()
        right = QVBoxLayout(sweep)
        right.setContentsMargins(0, 0, 0, 0)
        right.addWidget(self._build_plot(), 1)
        right.addWidget(self.legend_label)
        right.addWidget(self.plot_note)
        # Beside the sweep: the declared bytes against a GPU's measured DRAM bytes.
        self.measured = LedgerMeasured(state)
        self.views = QTabWidget()
        self.views.addTab(sweep, "Transfers against N")
        self.views.addTab(self.measured, "Declared vs measured (GPU)")
        # A wide strip (counts beside the sweep over N) below the lanes; stacked when the
        # panel is narrow (tabbed beside the statistics on a small screen).
        self._box = layout = QBoxLayout(QBoxLayout.Direction.LeftToRight, self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(left, 1)
        layout.addWidget(self.views, 1)
        self.restyle()
        state.sigTraceChanged.connect(self._on_trace)
        state.sigStepChanged.connect(self._on_step)
        state.sigPartsChanged.connect(self._on_parts)

    # ---- construction ----------------------------------------------------------------
    def _build_totals(self) -> QGridLayout:
        """Big running totals per lane, each with its bytes and the whole run's count."""
        big = QFont(self.font())
        big.setPointSizeF(big.pointSizeF() * 1.4)
        big.setBold(True)
        self.dense_total_label, self.tiled_total_label, self.ratio_label = (
            QLabel(),
            QLabel(),
            QLabel(),
        )
        self.dense_bytes_label, self.tiled_bytes_label = QLabel(), QLabel()
        self.dense_run_label, self.tiled_run_label = QLabel(), QLabel()
        totals = QGridLayout()
        totals.setVerticalSpacing(0)
        for col, (title, value, sub, run) in enumerate(
            (
                (
                    "Dense (elements)",
                    self.dense_total_label,
                    self.dense_bytes_label,
                    self.dense_run_label,
                ),
                (
                    "Tiled (elements)",
                    self.tiled_total_label,
                    self.tiled_bytes_label,
                    self.tiled_run_label,
                ),
                ("Dense / tiled", self.ratio_label, QLabel("so far"), QLabel("")),
            )
        ):
            value.setFont(big)
            centre = Qt.AlignmentFlag.AlignCenter
            totals.addWidget(QLabel(title), 0, col, centre)
            totals.addWidget(value, 1, col, centre)
            totals.addWidget(sub, 2, col, centre)
            totals.addWidget(run, 3, col, centre)
        for lane, label in (("dense", self.dense_total_label), ("tiled", self.tiled_total_label)):
            label.setToolTip(f"Elements moved between HBM and SRAM by the {lane} lane so far")
        for label in (self.dense_bytes_label, self.tiled_bytes_label):
            label.setToolTip(
                "The same transfers in bytes: elements × the size of each tensor's type"
            )
        for label in (self.dense_run_label, self.tiled_run_label):
            label.setToolTip("Elements the lane moves over the whole run")
        self.ratio_label.setToolTip("Dense elements ÷ tiled elements, so far")
        return totals

    def _build_table(self) -> QTableWidget:
        """Per-tensor counts (scrolls) over a one-row totals table that stays in view."""
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([f"{lane}\n{d}" for lane, d in COLUMNS])
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setMinimumHeight(64)
        # The totals row is its own table below, so scrolling never hides it (KV-outer
        # has nine tensors and the dock is short).
        self.totals_table = QTableWidget(1, len(COLUMNS))
        self.totals_table.setObjectName("ledger_totals")
        self.totals_table.horizontalHeader().hide()
        self.totals_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.totals_table.setVerticalHeaderLabels(["total"])
        self.totals_table.verticalHeader().setDefaultSectionSize(20)
        self.totals_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.totals_table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.totals_table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.totals_table.setFixedHeight(24)
        bold = QFont(self.font())
        bold.setBold(True)
        self.totals_table.setFont(bold)
        # Both tables' row headers share a width, so the columns line up.
        self.table.verticalHeader().setFixedWidth(44)
        self.totals_table.verticalHeader().setFixedWidth(44)
        return self.table

    def _build_plot(self) -> pg.PlotWidget:
        """Total transfers against N, log-log, with the legend below, off the curves."""
        self.plot = pg.PlotWidget(
            axisItems={"left": LeanAxis("left"), "bottom": LeanAxis("bottom")}
        )
        self._lines_key: tuple | None = None  # _plot_key of what the lines hold
        self.plot.setMinimumHeight(110)
        item = self.plot.getPlotItem()
        item.setLogMode(x=True, y=True)
        item.setLabel("bottom", N_AXIS)
        item.setLabel("left", "HBM transfers")  # elements: the totals and the note say so
        # Log axes already read 10³…10⁹; an SI factor on top ("×1e+09", ticks 10⁻⁹…0.1) is
        # what pyqtgraph adds once a curve passes 10⁹ (a training step at large N).
        item.getAxis("left").enableAutoSIPrefix(False)
        item.getAxis("bottom").enableAutoSIPrefix(False)  # N < 10⁹: none would be chosen
        item.setMenuEnabled(False)
        # A figure, not a canvas: the wheel zoomed it to 10⁻²⁶², and only a tiny "A"
        # button brought it back. The view follows the data; the wheel scrolls the panel.
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        self._lines = {
            k: item.plot([], [], pen=pg.mkPen(colour, width=w, style=style))
            for k, (colour, w, style, _name) in PENS.items()
        }
        self._marks = pg.ScatterPlotItem(size=10, brush=pg.mkBrush(240, 180, 0), pen=pg.mkPen("k"))
        item.addItem(self._marks)
        self.legend_label = QLabel(legend_html())
        self.legend_label.setObjectName("sweep_legend")
        self.legend_label.setWordWrap(True)
        self.plot_note = QLabel()
        self.plot_note.setWordWrap(True)
        self.plot_cover = PendingCover(self.plot, "computing the sweep…")
        self.plot_cover.setObjectName("sweep_cover")
        return self.plot

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        narrow = event.size().width() < NARROW
        self._box.setDirection(
            QBoxLayout.Direction.TopToBottom if narrow else QBoxLayout.Direction.LeftToRight
        )
        # Stacked, the sweep (whose size hint is large) leaves the table room for its rows.
        cap = max(160, int(event.size().height() * 0.45)) if narrow else QWIDGETSIZE_MAX
        self.plot.setMaximumHeight(cap)
        super().resizeEvent(event)

    def restyle(self) -> None:
        style_plot(self.plot, [self.plot.getPlotItem()], self.palette())

    def as_slide(self) -> None:
        """Lay out as an exported picture: the table as tall as its rows, with the totals
        right under it (stretched to the slide, it was mostly an empty grid)."""
        self._slide = True
        self._left.setStretchFactor(self.table, 0)
        self._left.addStretch(1)
        self._fit_table()

    def _fit_table(self) -> None:
        rows = self.table.rowCount() * self.table.verticalHeader().defaultSectionSize()
        self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height() + rows + 4)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def _same_rows(self, trace: Trace) -> bool:
        """Whether the table shows this trace's counts at some step: the same timelines (a
        kept pair is the same objects) and dtype (the bytes)."""
        s = self._shown
        return (
            s is not None
            and s[0] is trace.lanes["dense"]
            and s[1] is trace.lanes["tiled"]
            and s[2] == trace.dtype
        )

    def _on_trace(self, trace: Trace) -> None:
        self._set_texts(trace)
        if "plots" not in self.state.pending_parts:
            self._update_plot(trace)
        elif self._lines_key is not None and self._plot_key(trace) != self._lines_key:
            # The new sweep comes with the plots' part (worker.PARTS): until then its lines
            # and mark are another configuration's, covered (opaque: nothing beneath it is
            # painted, and the lines keep their bounds, so no range moves). Setting the new
            # ones here cost a blocks change's first tier a quarter of its GUI time.
            self.plot_cover.cover(True)
        if self._same_rows(trace):
            self._on_step(self.state.step)  # the same rows: only a step may differ
            return
        full = trace.counts_at(trace.n_steps - 1)
        self._final = trace.totals_at(trace.n_steps - 1)  # the whole run, for "of N"
        self._tensors = [t for t in trace.tensors if any(full[lane][t][d] for lane, d in COLUMNS)]
        self.table.setRowCount(len(self._tensors))
        self.table.setVerticalHeaderLabels([SYMBOLS.get(t, t) for t in self._tensors])
        for r, t in enumerate(self._tensors):
            self.table.verticalHeaderItem(r).setToolTip(TENSOR_TIPS.get(t, t))
        if self._slide:
            self._fit_table()
        self._shown = None
        self._on_step(self.state.step)

    def _on_parts(self, pending: frozenset) -> None:
        if self.state.trace is not None and "plots" not in pending:
            self._update_plot(self.state.trace)

    def _plot_key(self, trace: Trace) -> tuple:
        """What the sweep plot shows for a trace, without computing its sweep: the sweep's
        key, the pass (its pens), N, the window and the run's totals (the mark, the note)."""
        s = trace.schedule
        totals = trace.totals_at(trace.n_steps - 1)
        shape = (s.n_q, s.mask.left, s.block_q, s.block_k, trace.sram_capacity)
        key = sweep_key(self.state.config, _sweep_sram(trace))
        return (key, self.state.config.pass_name, shape, totals["dense"], totals["tiled"])

    def _update_plot(self, trace: Trace) -> None:
        """The lines and mark of the trace's sweep, set only when what they show changes:
        new inputs of the same sizes (a seed, a file) keep them (setting them again
        repainted the plot twice per change, its axes re-measuring their labels)."""
        key = self._plot_key(trace)
        if key != self._lines_key:
            self._lines_key = key
            (fn, args), pass_name, _shape, dense, tiled = key
            data = fn(*args)  # sweep(config, sram): the key holds its call
            pens = pens_for(pass_name)
            for name, line in self._lines.items():
                line.setData(data["n"], data[name])
                line.setVisible(name in pens)
            x = _mark_x(trace, fn is _sweep)
            self._marks.setData([np.log10(x)] * 2, [np.log10(dense), np.log10(tiled)])
            self.plot.getPlotItem().setLabel("bottom", data["axis"])
            prepare_axes(self.plot, [self.plot.getPlotItem()])
        self.plot_cover.cover(False)

    def _set_texts(self, trace: Trace) -> None:
        """The sweep's legend and note: from the config alone, so they are set with the
        first tier even while the lines wait for the plots' part."""
        config = self.state.config
        sram = _sweep_sram(trace)
        n = trace.schedule.n_q
        by_n = sweep_key(config, sram)[0] is _sweep
        self.legend_label.setText(legend_html(pens_for(config.pass_name)))
        m_note = f"M = {sram:,}" + ("" if trace.sram_capacity else " (working set)")
        self.plot_note.setText(
            (f"● N = {n}" if by_n else f"● window left {_mark_x(trace, by_n)}, N = {n}")
            + f"; blocks {trace.schedule.block_q}×"
            f"{trace.schedule.block_k}, {m_note}; "
            + ("" if config.pass_name == "forward" else f"{config.pass_name} pass; ")
            + "the bound is drawn with constant 1"
        )

    def _on_step(self, step: int) -> None:
        trace = self.state.trace
        if trace is None:
            return
        if self._same_rows(trace) and self._shown[3] == step:
            return  # (a new trace of the same timelines at the same step)
        self._shown = (trace.lanes["dense"], trace.lanes["tiled"], trace.dtype, step)
        counts = trace.counts_at(step)
        for r, t in enumerate(self._tensors):
            for c, (lane, d) in enumerate(COLUMNS):
                self._set(r, c, counts[lane][t][d])
        for c, (lane, d) in enumerate(COLUMNS):
            total = sum(counts[lane][t][d] for t in trace.tensors)
            self._set(0, c, total, self.totals_table)
        totals = trace.totals_at(step)
        self.dense_total_label.setText(f"{totals['dense']:,}")
        self.tiled_total_label.setText(f"{totals['tiled']:,}")
        ratio = totals["dense"] / totals["tiled"] if totals["tiled"] else float("nan")
        self.ratio_label.setText(f"{ratio:.2f}×" if totals["tiled"] else "—")
        for lane, label in (("dense", self.dense_bytes_label), ("tiled", self.tiled_bytes_label)):
            nbytes = sum(
                element_bytes(t, trace.dtype) * counts[lane][t][d]
                for t in trace.tensors
                for d in ("read", "write")
            )
            label.setText(f"{format_bytes(nbytes)} as {trace.dtype}")
        for lane, label in (("dense", self.dense_run_label), ("tiled", self.tiled_run_label)):
            label.setText(f"of {self._final[lane]:,} in the run")

    def _set(self, row: int, col: int, value: int, table: QTableWidget | None = None) -> None:
        table = table or self.table
        item = table.item(row, col)
        if item is None:
            item = QTableWidgetItem()
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(row, col, item)
        item.setText(f"{value:,}")


def format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"
