"""The paper check in the GPU panel: FlashAttention's Figure 2 (left) beside our ledgers and
the DRAM bytes measured for the same workload (compute.paper_check).

One table (the paper's two printings, the declared ledgers, the measured paths of the
report that profiled the workload) and the sentences that read it: the FLOP column's check,
where the declared figures meet the paper's, and what the measured ones add.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from compute import paper_check as pc

# The figures first: in a side dock the source, last and stretched, is what gets cut.
HEADER = ["standard / dense GB", "Flash / tiled GB", "source"]


def paper_rows(reports: list[dict]) -> tuple[list[list[str]], str]:
    """The table's rows and the measured device's name ("" when no report measured it)."""
    rows = [[f"{f.standard_gb:.1f}", f"{f.flash_gb:.1f}", f"{f.label}: HBM reads + writes"]
            for f in pc.PAPER_FIGURES]  # fmt: skip
    for r in pc.declared_rows():
        dense = r.lane == "dense"
        cells = [f"{r.gb:.3f}", ""] if dense else ["", f"{r.gb:.3f}"]
        rows.append([*cells, f"declared ledger, {r.label.split(', ')[1]} ({r.tiles})"])
    report, measured = pc.measured_rows(reports)
    device = "" if report is None else report["device"].get("name") or "a GPU"
    for m in measured:
        dense = m.label == "dense"
        cells = [f"{m.gb:.3f}", ""] if dense else ["", f"{m.gb:.3f}"]
        rows.append([*cells, f"measured DRAM on {device}: {m.label}"])
    return rows, device


class PaperView(QWidget):
    """The paper check's table and sentences."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = QTableWidget(0, len(HEADER))
        self.table.setHorizontalHeaderLabels(HEADER)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        w = pc.PAPER
        self.title = QLabel(
            f"FlashAttention, Figure 2 (left): GPT-2 medium attention, batch {w.batch}, "
            f"{w.heads} heads, N = {w.n}, d = {w.d}, {w.dtype}, forward + backward, on an "
            f"{w.device}; declared ledgers at Algorithm 1's tiles for {w.sram_bytes // 1024} KB "
            "of SRAM and at the tensor-core kernel's tiles."
        )
        self.notes = QLabel()
        for label in (self.title, self.notes):
            label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.notes)
        self.show_reports([])

    def show_reports(self, reports: list[dict]) -> None:
        """Fill the table with the paper, the ledgers and what `reports` measured."""
        rows, device = paper_rows(reports)
        self.table.setRowCount(len(rows))
        for i, cells in enumerate(rows):
            for j, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                cell.setToolTip(cells[-1])  # the whole source, where the column cuts it
                self.table.setItem(i, j, cell)
        self.table.resizeRowsToContents()
        rows_px = sum(self.table.rowHeight(r) for r in range(self.table.rowCount()))
        # Every row in view, above the horizontal scroll bar a narrow dock gives the table.
        bar = self.table.horizontalScrollBar().sizeHint().height()
        header = self.table.horizontalHeader().sizeHint().height()
        self.table.setMinimumHeight(header + rows_px + bar + 4)
        _, measured = pc.measured_rows(reports)
        notes = [pc.sources(), pc.flop_reading(), pc.reading()]
        measured_text = pc.measured_reading(measured, device) if measured else ""
        notes.append(measured_text or "No report here measured this workload's DRAM bytes.")
        self.notes.setText("\n\n".join(notes))
