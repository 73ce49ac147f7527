"""The ledger panel's backward part: every pass's totals, and what each lane must keep
from the forward for the backward, drawn as bars.

Dense keeps P (N_q · N_k elements per head) to read it back; the tiled lane keeps only
L = m + log ℓ (N_q elements) and recomputes P̃ = exp(S − L) tile by tile. The totals
are the compute core's closed-form pass ledgers (compute.pass_ledger) at the trace's
shapes and the config's own block sizes; hidden in the forward pass.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from compute import PASSES, Trace, element_bytes, pass_ledger
from desktop.state.app_state import AppState

DENSE_COLOR, TILED_COLOR = QColor("#c0392b"), QColor("#2471a3")


def kept_elements(trace: Trace) -> dict[str, int]:
    """Elements each lane keeps from the forward for the backward: P, or L."""
    s = trace.schedule
    return {"dense": s.n_q * s.n_k, "tiled": s.n_q}


class KeepBars(QWidget):
    """Two horizontal bars, dense's P against tiled's L, on one linear scale."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kept: dict[str, int] = {}
        self.notes: dict[str, str] = {}
        self.setFixedHeight(40)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_kept(self, kept: dict[str, int], notes: dict[str, str] | None = None) -> None:
        """`notes` (per lane) is written at the right end of its bar instead of the count."""
        self.kept, self.notes = kept, notes or {}
        self.update()

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        if not self.kept:
            return
        p = QPainter(self)
        text = self.palette().color(QPalette.ColorRole.WindowText)
        label_w, h = 110.0, 16.0
        width = max(10.0, self.width() - label_w - 8)
        top = max(self.kept.values())
        names = {"dense": "dense keeps P", "tiled": "tiled keeps L"}
        for k, lane in enumerate(("dense", "tiled")):
            y = 2 + k * (h + 4)  # two bars of 16 px in the 40 px the widget keeps
            p.setPen(text)
            p.drawText(QRectF(0, y, label_w, h), Qt.AlignmentFlag.AlignVCenter, names[lane])
            w = max(1.5, width * self.kept[lane] / top)  # the tiled bar is N_k times shorter
            p.fillRect(QRectF(label_w, y, w, h), DENSE_COLOR if lane == "dense" else TILED_COLOR)
            p.drawText(
                QRectF(label_w + 4, y, width - 4, h),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight,
                self.notes.get(lane, f"{self.kept[lane]:,}"),
            )
        p.end()


class BackwardMemory(QWidget):
    """Totals of the forward, the backward and a training step; the kept-memory bars."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.totals_label = QLabel()
        self.totals_label.setObjectName("pass_totals_label")
        self.totals_label.setWordWrap(True)
        self.totals_label.setToolTip(
            "Total HBM transfers of each pass at these block sizes (closed form, elements)"
        )
        self.bars = KeepBars()
        self.bars.setObjectName("keep_bars")
        self.bars.setToolTip(
            "Memory each lane keeps from the forward for the backward, per head: dense "
            "stores P (N_q · N_k), FlashAttention only L (N_q) and recomputes P̃ = exp(S − L)"
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for w in (self.totals_label, self.bars):
            layout.addWidget(w)
        self.hide()
        state.sigTraceChanged.connect(self._on_trace)

    def _on_trace(self, trace: Trace) -> None:
        if trace.pass_name == "forward" or self.state.config is None:
            self.hide()
            return
        self.show()
        config, s = self.state.config, trace.schedule
        rows = []
        for pass_name in PASSES:
            # The trace's shapes: ledger_for would read a file's shapes from disk again.
            led = pass_ledger(pass_name, s.n_q, s.n_k, s.d, s.d_v, **config.core_options())
            dense, tiled = (led.lanes[x].total_elements for x in ("dense", "tiled"))
            rows.append(f"{pass_name} {dense:,} vs {tiled:,}")
        self.totals_label.setText("Dense vs tiled, whole pass: " + " · ".join(rows))
        kept = kept_elements(trace)
        nbytes = {
            "dense": kept["dense"] * element_bytes("P", trace.dtype),
            "tiled": kept["tiled"] * element_bytes("L", trace.dtype),
        }
        # What each lane keeps for the backward, per head, written on its bar (the panel is
        # short: a separate sentence above the bars pushed them under the table).
        notes = {
            "dense": f"N_q·N_k = {kept['dense']:,} ({nbytes['dense']:,} B) per head",
            "tiled": f"N_q = {kept['tiled']:,} ({nbytes['tiled']:,} B), {s.n_k}× less",
        }
        self.bars.set_kept(kept, notes)
