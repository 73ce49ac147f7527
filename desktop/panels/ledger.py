"""The HBM ledger: running transfer counts for both lanes, and transfers against N.

The table and totals show the Trace's running counts up to the current step (the very
transfers the lanes animate). The plot sweeps N with the compute core's closed-form
ledger at the current block sizes, d, d_v, mask and dtype, for the dense lane and both
tiled loop orders, beside Theorem 2's order N²d²/M; the current N is marked.
"""

from __future__ import annotations

import functools

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

import compute
from compute import Trace, element_bytes
from desktop.panels.backward_memory import BackwardMemory
from desktop.state.app_state import AppState
from desktop.state.config import Config
from desktop.theme import style_plot

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


SWEEP_N = np.unique(np.geomspace(4, 4096, 28).astype(int))


def sweep(config: Config, sram: int) -> dict[str, np.ndarray]:
    """Total transfers against N for dense, q-outer and kv-outer at the config's shapes."""
    key = (config.n_k / config.n, config.d, config.dv, config.block_q, config.block_k)
    return _sweep(*key, config.causal, config.save_lse, sram)


@functools.lru_cache(maxsize=64)  # dragging N leaves every other argument unchanged
def _sweep(
    ratio: float, d: int, dv: int, block_q: int, block_k: int, causal: bool, lse: bool, sram: int
) -> dict[str, np.ndarray]:
    out = {"n": SWEEP_N, "dense": [], "q-outer": [], "kv-outer": [], "bound": []}
    kw = dict(block_q=block_q, block_k=block_k, causal=causal, save_lse=lse)
    for n in SWEEP_N.tolist():
        n_k = max(1, round(n * ratio))
        for order in ("q-outer", "kv-outer"):
            led = compute.closed_form_ledger(n, n_k, d, dv, order=order, **kw)
            out[order].append(led.lanes["tiled"].total_elements)
        out["dense"].append(led.lanes["dense"].total_elements)
        out["bound"].append(compute.theorem2_bound(n, d, sram))
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


class LedgerPanel(QWidget):
    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        big = QFont(self.font())
        big.setPointSizeF(big.pointSizeF() * 1.6)
        big.setBold(True)
        self.dense_total_label, self.tiled_total_label, self.ratio_label = (
            QLabel(),
            QLabel(),
            QLabel(),
        )
        self.dense_bytes_label, self.tiled_bytes_label = QLabel(), QLabel()
        totals = QGridLayout()
        for col, (title, value, sub) in enumerate(
            (
                ("Dense", self.dense_total_label, self.dense_bytes_label),
                ("Tiled", self.tiled_total_label, self.tiled_bytes_label),
                ("Dense / tiled", self.ratio_label, QLabel("so far")),
            )
        ):
            value.setFont(big)
            totals.addWidget(QLabel(title), 0, col, Qt.AlignmentFlag.AlignCenter)
            totals.addWidget(value, 1, col, Qt.AlignmentFlag.AlignCenter)
            totals.addWidget(sub, 2, col, Qt.AlignmentFlag.AlignCenter)
        self.dense_total_label.setToolTip(
            "Elements moved between HBM and SRAM by the dense lane so far"
        )
        self.tiled_total_label.setToolTip(
            "Elements moved between HBM and SRAM by the tiled lane so far"
        )
        self.ratio_label.setToolTip("Dense elements ÷ tiled elements, so far")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([f"{lane}\n{d}" for lane, d in COLUMNS])
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setMinimumHeight(120)
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(160)
        item = self.plot.getPlotItem()
        item.setLogMode(x=True, y=True)
        item.setLabel("bottom", "N (query and key positions)")
        item.setLabel("left", "HBM transfers (elements)")
        item.setMenuEnabled(False)
        item.addLegend(offset=(6, 6), labelTextSize="8pt")  # top left: the lines rise to the right
        pens = {
            "dense": pg.mkPen("#c0392b", width=2),
            "q-outer": pg.mkPen("#2471a3", width=2),
            "kv-outer": pg.mkPen("#7d3c98", width=2, style=Qt.PenStyle.DashLine),
            "bound": pg.mkPen("#7f8c8d", width=1.5, style=Qt.PenStyle.DotLine),
        }
        names = {
            "dense": "dense",
            "q-outer": "tiled, Q-outer",
            "kv-outer": "tiled, KV-outer",
            "bound": "Theorem 2: N²d²/M",
        }
        self._lines = {k: item.plot([], [], pen=pens[k], name=names[k]) for k in pens}
        self._marks = pg.ScatterPlotItem(size=10, brush=pg.mkBrush(240, 180, 0), pen=pg.mkPen("k"))
        item.addItem(self._marks)
        self.plot_note = QLabel()
        self.plot_note.setWordWrap(True)
        left = QVBoxLayout()
        left.addLayout(totals)
        self.backward_memory = BackwardMemory(state)  # backward and training only
        left.addWidget(self.backward_memory)
        left.addWidget(self.table, 1)
        right = QVBoxLayout()
        right.addWidget(self.plot, 1)
        right.addWidget(self.plot_note)
        layout = QHBoxLayout(self)  # a wide strip: counts beside the sweep over N
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(left, 1)
        layout.addLayout(right, 1)
        self._tensors: list[str] = []
        self.restyle()
        state.sigTraceChanged.connect(self._on_trace)
        state.sigStepChanged.connect(self._on_step)

    def restyle(self) -> None:
        style_plot(self.plot, [self.plot.getPlotItem()], self.palette())

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.PaletteChange:
            self.restyle()  # a theme switch reaches pyqtgraph only through here
        super().changeEvent(event)

    def _on_trace(self, trace: Trace) -> None:
        full = trace.counts_at(trace.n_steps - 1)
        self._final = trace.totals_at(trace.n_steps - 1)  # the whole run, for "of N"
        self._tensors = [t for t in trace.tensors if any(full[lane][t][d] for lane, d in COLUMNS)]
        self.table.setRowCount(len(self._tensors) + 1)
        self.table.setVerticalHeaderLabels([SYMBOLS.get(t, t) for t in self._tensors] + ["total"])
        for r, t in enumerate(self._tensors):
            self.table.verticalHeaderItem(r).setToolTip(TENSOR_TIPS.get(t, t))
        self._update_plot(trace)
        self._on_step(self.state.step)

    def _update_plot(self, trace: Trace) -> None:
        config = self.state.config
        sram = trace.sram_capacity or trace.schedule.sram_elements("tiled")
        data = sweep(config, sram)
        for key, line in self._lines.items():
            line.setData(data["n"], data[key])
        totals = trace.totals_at(trace.n_steps - 1)  # the whole run's totals
        n = trace.schedule.n_q
        self._marks.setData(
            [np.log10(n)] * 2, [np.log10(totals["dense"]), np.log10(totals["tiled"])]
        )
        m_note = f"M = {sram:,}" + ("" if trace.sram_capacity else " (working set)")
        self.plot_note.setText(
            f"● this configuration, N = {n}; blocks {trace.schedule.block_q}×"
            f"{trace.schedule.block_k}, {m_note}; the bound is drawn with constant 1"
        )

    def _on_step(self, step: int) -> None:
        trace = self.state.trace
        if trace is None:
            return
        counts = trace.counts_at(step)
        for r, t in enumerate(self._tensors):
            for c, (lane, d) in enumerate(COLUMNS):
                self._set(r, c, counts[lane][t][d])
        for c, (lane, d) in enumerate(COLUMNS):
            self._set(len(self._tensors), c, sum(counts[lane][t][d] for t in trace.tensors))
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
            final = self._final[lane]
            label.setText(f"{format_bytes(nbytes)} ({trace.dtype}) · of {final:,}")

    def _set(self, row: int, col: int, value: int) -> None:
        item = self.table.item(row, col)
        if item is None:
            item = QTableWidgetItem()
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(row, col, item)
        item.setText(f"{value:,}")


def format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"
