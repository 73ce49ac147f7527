"""What skipped tiles save, measured: the GPU panel's mask view.

For every bench report of the teaching kernel run with a mask (`flash-explorer bench
--kernel tiled --mask/--window/--packed`), paired with the unmasked run of the same shape,
order and blocks, one row: the median time and the bytes the kernel's COUNT_TRANSFERS build
counted, masked against unmasked, and the tile visits the mask leaves loaded. The rows of
the window's current mask (the same kind of mask: causal either way, a window, packed) come
first and the sentence above the table reads them. The reports are the panel's (run here or
opened) and, with no GPU here, the bundled recording (compute/gpu/reports/
mask_saving_h200.json, made by compute/gpu/lab/mask_saving.py on an H200).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHeaderView, QLabel, QTableWidgetItem, QVBoxLayout, QWidget

from compute import element_bytes
from compute.cli_fields import mask_of
from compute.gpu.report import ReportError, bundled_report, pass_of, split_reports
from compute.mask import Mask
from compute.schedule import Schedule
from desktop.panels.eliding import FitTable

BUNDLED = "mask_saving_h200"  # compute/gpu/reports/<name>.json
# Short, two-line heads and cells: the panel is often a narrow side dock.
HEADER = ["mask", "order", "ms", "MB", "time ×\nbytes ×", "tiles"]


@dataclass(frozen=True)
class Saving:
    """One mask's measured run beside the unmasked run of the same shape and order."""

    mask: Mask
    n_q: int
    n_k: int
    order: str
    ms: float
    ms_none: float
    bytes: int  # counted by the kernel, all heads
    bytes_none: int
    counts_match: bool  # both runs' counts equal their closed-form ledgers
    visits: int  # (query block, key tile) pairs loaded
    visits_all: int
    kv_tiles: int  # key tiles loaded at all (K/V outer: each once)
    kv_tiles_all: int
    device: str
    command: str

    @property
    def label(self) -> str:
        shape = f"N={self.n_q}" + (f", N_k={self.n_k}" if self.n_k != self.n_q else "")
        return f"{self.mask.label} ({shape})"


def report_mask(report: dict) -> Mask:
    """The mask a bench report was run with (reports before the mask flags: none/causal)."""
    c = report["config"]
    return mask_of(c["causal"], c.get("top_left", False), c.get("window", ""), c.get("packed", ""))


def _tiled(report: dict) -> dict | None:
    return next(
        (
            r
            for r in report["results"]
            if r["kernel"] == "tiled" and "ms" in r and "counts_kernel" in r
        ),
        None,
    )


def counted_bytes(row: dict, config: dict) -> int:
    """The bytes of the kernel's own counts (per head in the report) over all heads."""
    per_head = sum(
        (rw["read"] + rw["write"]) * element_bytes(t, config["dtype"])
        for t, rw in row["counts_kernel"].items()
    )
    return per_head * config["batch_heads"]


def _key(report: dict, row: dict) -> tuple:
    c = report["config"]
    return (c["n"], c["n_keys"], c["d"], c["d_v"], c["dtype"], c["batch_heads"],
            pass_of(report), row.get("order"), row.get("block_q"), row.get("block_k"))  # fmt: skip


def savings(reports: list[dict]) -> list[Saving]:
    """Every masked forward run of the teaching kernel paired with its unmasked run (pure:
    tested without Qt). Runs with no unmasked partner are left out."""
    plain: dict[tuple, tuple[dict, dict]] = {}
    masked: list[tuple[dict, dict, Mask]] = []
    for report in reports:
        row = _tiled(report)
        if row is None or pass_of(report) != "forward":
            continue
        try:
            mask = report_mask(report)
        except ValueError:  # a hand-edited window or packed text: not a run to read
            continue
        if mask.is_none:
            plain.setdefault(_key(report, row), (report, row))
        else:
            masked.append((report, row, mask))
    out = []
    for report, row, mask in masked:
        partner = plain.get(_key(report, row))
        if partner is None:
            continue
        base, base_row = partner
        c = report["config"]
        s = Schedule(c["n"], c["n_keys"], c["d"], c["d_v"], row["block_q"], row["block_k"],
                     row["order"], mask=mask)  # fmt: skip
        out.append(
            Saving(
                mask,
                c["n"],
                c["n_keys"],
                row["order"],
                row["ms"],
                base_row["ms"],
                counted_bytes(row, c),
                counted_bytes(base_row, base["config"]),
                bool(row.get("counts_match")) and bool(base_row.get("counts_match")),
                int(s.visible.sum()),
                s.t_r * s.t_c,
                int(s.seen_tiles.sum()),
                s.t_c,
                report["device"].get("name") or "a GPU",
                report.get("command", ""),
            )  # fmt: skip
        )
    return out


def family(mask: Mask) -> tuple:
    """The kind of mask, as the rows are matched to the window's: causal and its alignment,
    windowed or not, packed or not."""
    return mask.kind, mask.windowed, bool(mask.lengths)


def ranked(rows: list[Saving], mask: Mask, n_q: int, n_k: int) -> list[Saving]:
    """The rows, the current mask's first: the same mask, then the same kind (N_q ≠ N_k
    when the window's is), then the rest in their order."""

    def rank(s: Saving) -> tuple:
        same = family(s.mask) == family(mask)
        return (s.mask != mask, not same, (s.n_q != s.n_k) != (n_q != n_k))

    return sorted(rows, key=rank)


def reading(rows: list[Saving], mask: Mask, n_q: int, n_k: int) -> str:
    """The sentence above the table: what the current mask's kind saved where measured."""
    if not rows:
        return (
            "No mask-saving measurement here: run flash-explorer bench --kernel tiled with "
            "--mask, --window or --packed, and once without, then open both reports."
        )
    yours = f"Your mask, {mask.label} at N = {n_q}" + (f", N_k = {n_k}" if n_k != n_q else "")
    if mask.is_none:
        return (
            f"{yours}: every tile is loaded, nothing to skip. Below, what the masks measured "
            f"on {rows[0].device} skip (choose one in the Mask control to put it first)."
        )
    best = ranked(rows, mask, n_q, n_k)
    if family(best[0].mask) != family(mask):
        return f"{yours}: no run of this kind of mask was measured; the others are below."
    shown = [
        s for s in best if s.mask == best[0].mask and (s.n_q, s.n_k) == (best[0].n_q, best[0].n_k)
    ]
    parts = []
    for s in shown:
        parts.append(
            f"{s.order} loads {s.visits:,} of {s.visits_all:,} tile visits and takes "
            f"{s.ms:.2f} ms instead of {s.ms_none:.2f} ({s.ms_none / s.ms:.2f}x faster), "
            f"moving {s.bytes / 1e6:,.1f} MB instead of {s.bytes_none / 1e6:,.1f} "
            f"({s.bytes_none / max(s.bytes, 1):.2f}x fewer)"
        )
    same = "" if best[0].mask == mask else " (the same kind of mask)"
    return (
        f"{yours}. Measured on {best[0].device} for {best[0].label}{same}: "
        + "; ".join(parts)
        + ". Bytes are what the kernel counted itself"
        + (", equal to the closed-form ledger." if all(s.counts_match for s in shown) else ".")
    )


def table_rows(rows: list[Saving]) -> list[list[str]]:
    """The table's cells for the (ranked) rows."""
    out = []
    for s in rows:
        shape = f"N {s.n_q}" + (f", N_k {s.n_k}" if s.n_k != s.n_q else "")
        words = s.mask.label.replace("causal ", "causal\n").replace("packed ", "packed\n")
        mask = "\n".join([*words.split(", "), shape])
        saved = f"{s.ms_none / s.ms:.2f}\n{s.bytes_none / max(s.bytes, 1):.2f}"
        tiles = f"{s.visits:,} /\n{s.visits_all:,}"
        if s.order == "kv-outer":
            tiles += f"\nK/V {s.kv_tiles}/{s.kv_tiles_all}"
        out.append([mask, s.order, f"{s.ms:.3f} /\n{s.ms_none:.3f}",
                    f"{s.bytes / 1e6:,.1f} /\n{s.bytes_none / 1e6:,.1f}", saved, tiles])  # fmt: skip
    return out


def bundled() -> list[dict]:
    """The bundled recording's reports ([] when it cannot be read: the view says so)."""
    try:
        return split_reports(bundled_report(BUNDLED))
    except (OSError, ValueError, ReportError):
        return []


class MaskSavingView(QWidget):
    """The sentence and the table; follows the app's mask when given its AppState."""

    def __init__(self, state=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel(
            "Skipped tiles, measured: the teaching kernel with a mask against the same run "
            "without. Each cell: masked over unmasked (ms: median time; MB: what its "
            "COUNT_TRANSFERS build counted; tiles: (query block, key tile) visits loaded of "
            "all, K/V outer also the key tiles loaded at all); time × and bytes ×: the saving."
        )
        self.summary = QLabel()
        for label in (self.title, self.summary):
            label.setWordWrap(True)
        self.table = FitTable(0, len(HEADER))
        self.table.setHorizontalHeaderLabels(HEADER)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(True)
        # Columns share a narrow dock's width: rows grow to their wrapped cells.
        self.table.horizontalHeader().sectionResized.connect(
            lambda *_: self.table.resizeRowsToContents()
        )
        self.table.setEditTriggers(FitTable.EditTrigger.NoEditTriggers)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        self._bundled_savings = savings(bundled())  # (read once: it never changes)
        self._reports: list[dict] = []
        self.mask, self.n_q, self.n_k = Mask(), 1, 1
        self.rows: list[Saving] = []
        if state is not None:
            state.sigConfigChanged.connect(self.follow)
            if state.config is not None:
                self.follow(state.config)
        self._refresh()

    def follow(self, config) -> None:
        """The app's configuration changed: put its mask's rows first."""
        try:
            mask = getattr(config, "mask", None)
        except ValueError:  # the Mask control refuses such a config before it is built
            return
        if not isinstance(mask, Mask):  # a config that names no mask: keep the last
            return
        if (mask, config.n, config.n_k) == (self.mask, self.n_q, self.n_k):
            return  # (a change of blocks, inputs or dtype ranks nothing differently)
        self.mask, self.n_q, self.n_k = mask, config.n, config.n_k
        self._refresh()

    def show_reports(self, reports: list[dict]) -> None:
        """The panel's reports (run here or opened), read beside the bundled recording."""
        self._reports = list(reports)
        self._refresh()

    def _refresh(self) -> None:
        found = savings(self._reports)
        keys = {(s.mask, s.n_q, s.n_k, s.order) for s in found}
        found += [s for s in self._bundled_savings if (s.mask, s.n_q, s.n_k, s.order) not in keys]
        self.rows = ranked(found, self.mask, self.n_q, self.n_k)
        self.summary.setText(reading(self.rows, self.mask, self.n_q, self.n_k))
        cells = table_rows(self.rows)
        self.table.setRowCount(len(cells))
        bold = QFont(self.font())
        bold.setBold(True)
        for i, (line, s) in enumerate(zip(cells, self.rows, strict=True)):
            current = not self.mask.is_none and family(s.mask) == family(self.mask)
            for j, text in enumerate(line):
                item = QTableWidgetItem(text)
                item.setToolTip(s.command or text)
                if current:
                    item.setFont(bold)
                self.table.setItem(i, j, item)
        self.table.resizeRowsToContents()
        self.table.fit_columns()
        rows_px = sum(self.table.rowHeight(r) for r in range(min(self.table.rowCount(), 4)))
        head = self.table.horizontalHeader().sizeHint().height()
        self.table.setMinimumHeight(head + rows_px + 4 if cells else head + 4)
