"""The GPU side panel: the tiled kernel, dense and the tensor-core kernel measured in the
forward, the backward or a training step; counted transfers; the block sweep.

A pass selector picks forward, backward or training: the report list shows that pass's
reports, and "Run on this GPU" measures that pass. Shows one GPU bench report: recorded here through a worker thread when this machine
has a usable CUDA device, or opened from a JSON file recorded on one that does (so a
desktop with no NVIDIA GPU still sees real figures). For the sliders' block sizes it
marks the current choice on the block_q x block_k sweep heatmap and, when asked to,
re-runs the benchmark once the sliders settle. Every failure (no GPU, a compile error
with its NVRTC log, out of device memory, tiles too large) becomes a message here.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QThread, QTimer, Signal
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from compute import PASSES
from compute.gpu import DeviceStatus, status
from compute.gpu.bench import BenchConfig, run_bench
from compute.gpu.report import (
    HEADER,
    ReportError,
    bundled_report,
    pass_of,
    read_reports,
    report_label,
    result_rows,
    split_reports,
)
from compute.gpu.report import sweep_for as find_sweep
from desktop.panels.eliding import ElidedCombo, FitTable
from desktop.panels.gpu.bench_thread import BenchThread, Runner
from desktop.panels.gpu.decode_bandwidth import DecodeBandwidthView
from desktop.panels.gpu.dram_view import DramView
from desktop.panels.gpu.mask_saving import MaskSavingView
from desktop.panels.gpu.paper_view import PaperView
from desktop.panels.gpu.sweep import SweepView
from desktop.state.app_state import AppState

DEBOUNCE_MS = 600  # sliders must rest this long before an automatic re-run
COUNT_HEADER = ["tensor", "dir", "kernel-counted", "ledger", "equal"]


class GpuPanel(QWidget):
    """Device line, run controls, results and counts tables, and the sweep heatmap."""

    sigReportShown = Signal()
    sigReportFailed = Signal()

    def __init__(
        self,
        state: AppState | None = None,
        parent: QWidget | None = None,
        *,
        device: DeviceStatus | None = None,
        runner: Runner = run_bench,
    ) -> None:
        """With `state` (the app's AppState, as every panel takes), the sweep mark follows
        its block sizes and order and the pass selector its pass; N, batch·heads and the
        dtype are the benchmark's own (a GPU measures N = 4096 in float16 while the
        explorer shows N = 6 in float64)."""
        super().__init__(parent)
        self.state = state
        self.device = device if device is not None else status()
        self._runner = runner
        self._thread: BenchThread | None = None
        self._readers: set[ReportReader] = set()
        self.reports: list[dict] = []
        self._shown: list[int] = []  # indices into reports of the selector's entries
        self.blocks = (64, 64)
        self.order = "q-outer"
        self._debounce = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._debounce.timeout.connect(self.run_current)
        self._build()
        self._show_device()
        if state is not None:
            state.sigConfigChanged.connect(self.follow)
            if state.config is not None:
                self.follow(state.config)

    def follow(self, config) -> None:
        """The app's configuration changed: mark its blocks; show its pass."""
        self.set_blocks(config.block_q, config.block_k, config.order)
        pass_name = getattr(config, "pass_name", None)
        if pass_name in PASSES and pass_name != self.pass_combo.currentText():
            self.pass_combo.setCurrentText(pass_name)

    # -- layout ------------------------------------------------------------------------
    def _build(self) -> None:
        self.device_label, self.recorded_label, self.message = QLabel(), QLabel(), QLabel()
        for label in (self.device_label, self.recorded_label, self.message):
            label.setWordWrap(True)
        self.open_button = QPushButton("Open report…")
        self.open_button.clicked.connect(self._open_dialog)
        self.selector = ElidedCombo()
        # Long report names must not widen the panel (it is a tab beside the statistics).
        self.selector.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.selector.setMinimumContentsLength(16)
        self.selector.currentIndexChanged.connect(self._show_selected)
        self.pass_combo = QComboBox()
        self.pass_combo.addItems(PASSES)
        self.pass_combo.setToolTip(
            "forward; backward alone (from what each path's forward saved); "
            "training = forward + backward"
        )
        self.pass_combo.currentTextChanged.connect(self._fill_selector)
        self.n_spin = QSpinBox(minimum=16, maximum=16384, value=4096, singleStep=1024)
        self.bh_spin = QSpinBox(minimum=1, maximum=256, value=32)
        self.dtype_combo = QComboBox()
        self.dtype_combo.addItems(["float16", "float32"])
        self.run_button, self.cancel_button = QPushButton("Run on this GPU"), QPushButton("Cancel")
        self.run_button.clicked.connect(self.run_current)
        self.cancel_button.clicked.connect(self.cancel)
        self.auto_check = QCheckBox("Re-run when the sliders settle")
        self.sweep_check = QCheckBox("with the block sweep", checked=True)
        self.progress = QProgressBar()
        self.detail = QPlainTextEdit(readOnly=True)
        self.detail.setMaximumHeight(90)
        self.table = self._table(HEADER)
        # In a side dock the eleven columns ran past the table's edge ("peak Mi"): there
        # the same results are shown a path per column, a measure per row.
        self.by_measure = self._table([], FitTable)
        self.by_measure.verticalHeader().setVisible(True)
        # Ten measures in rows: compact ones, so the sweep heatmap below still shows.
        rows = self.by_measure.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(self.by_measure.fontMetrics().height() + 4)
        self.by_measure.setWordWrap(True)
        self.by_measure.setVisible(False)
        self.counts = self._table(COUNT_HEADER)
        self.sweep_view = SweepView()
        # Declared against measured DRAM bytes, and the paper's Figure 2 beside both.
        self.dram_view, self.paper_view = DramView(), PaperView()
        self.dram_tabs = QTabWidget()
        self.dram_tabs.addTab(self.dram_view, "DRAM: declared vs measured")
        self.dram_tabs.addTab(self.paper_view, "Paper check")
        self.decode_view = DecodeBandwidthView(device=self.device)
        self.dram_tabs.addTab(self.decode_view, "Decode bandwidth")
        self.mask_view = MaskSavingView(self.state)  # what skipped tiles save, measured
        self.dram_tabs.addTab(self.mask_view, "Masks: skipped tiles")
        # Folded by default, so the timing tables and the heatmap fit the dock unscrolled;
        # it opens by itself when the report chosen is a DRAM measurement.
        self.dram_toggle = QToolButton(checkable=True)
        self.dram_toggle.setText("More measurements")
        self.dram_toggle.setToolTip(
            "Declared against measured DRAM bytes per path, FlashAttention's Figure 2 beside "
            "our ledgers, decode bandwidth and what skipped tiles save (below the results)"
        )
        self.dram_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.dram_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.dram_toggle.toggled.connect(self._show_dram)
        self.dram_tabs.setVisible(False)

        files = QHBoxLayout()
        files.addWidget(self.open_button)
        files.addWidget(self.pass_combo)
        files.addWidget(self.dram_toggle)  # on this row: a row of its own made the dock scroll
        files.addStretch(1)
        # The report's name on a row of its own: beside the buttons a side dock cut it.
        picker = QHBoxLayout()
        picker.addWidget(self.selector, 1)
        shape = QHBoxLayout()  # two rows, so the panel fits a side dock's width
        for text, w in (("N", self.n_spin), ("batch·heads", self.bh_spin), ("", self.dtype_combo)):
            if text:
                shape.addWidget(QLabel(text))
            shape.addWidget(w)
        shape.addStretch(1)
        run = QHBoxLayout()
        run.addWidget(self.run_button)
        run.addWidget(self.cancel_button)
        run.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.device_label)
        layout.addLayout(files)
        layout.addLayout(picker)
        layout.addWidget(self.recorded_label)
        layout.addLayout(shape)
        layout.addLayout(run)
        options = QHBoxLayout()
        options.addWidget(self.auto_check)
        options.addWidget(self.sweep_check)
        options.addStretch(1)
        layout.addLayout(options)
        layout.addWidget(self.progress)
        layout.addWidget(self.message)
        layout.addWidget(self.detail)
        # Tables beside the sweep heatmap where the panel is wide (the bottom dock), so
        # both show without scrolling; stacked where it is narrow (tabbed on the right).
        tables = QVBoxLayout()
        tables.addWidget(self.table)
        tables.addWidget(self.by_measure)
        tables.addWidget(self.counts)
        tables.addStretch(1)
        self._results = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        # Wide: the results table (up to five paths, eleven columns) gets two thirds.
        self._results.addLayout(tables, 2)
        self._results.addWidget(self.sweep_view, 1)
        layout.addLayout(self._results, 1)
        layout.addWidget(self.dram_tabs, 1)
        self._set_running(False)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        narrow = event.size().width() < 900
        self._results.setDirection(
            QBoxLayout.Direction.TopToBottom if narrow else QBoxLayout.Direction.LeftToRight
        )
        # Stacked, the room left over goes to the heatmap, not to a gap under the tables.
        self._results.setStretch(0, 0 if narrow else 2)
        self.table.setVisible(not narrow)
        self.by_measure.setVisible(narrow)
        super().resizeEvent(event)

    def _show_dram(self, shown: bool) -> None:
        self.dram_tabs.setVisible(shown)
        self.dram_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)

    @staticmethod
    def _table(header: list[str], kind: type[QTableWidget] = QTableWidget) -> QTableWidget:
        table = kind(0, len(header))
        table.setHorizontalHeaderLabels(header)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        return table

    def _show_device(self) -> None:
        if self.device.usable:
            self.device_label.setText(f"This machine: {self.device.describe()}")
        else:
            self.device_label.setText(no_gpu_text(self.device))
        # What only a run uses cannot be changed where nothing can run.
        why = "" if self.device.usable else "Needs an NVIDIA GPU with CUDA on this machine."
        for w in (self.n_spin, self.bh_spin, self.dtype_combo, self.auto_check, self.sweep_check):
            w.setEnabled(self.device.usable)
            w.setToolTip(why)
        self._set_running(False)

    def _set_running(self, running: bool) -> None:
        self.run_button.setEnabled(self.device.usable and not running)
        self.cancel_button.setEnabled(running)
        self.progress.setVisible(running)

    def show_message(self, text: str, detail: str = "") -> None:
        self.message.setText(text)
        self.detail.setPlainText(detail)
        self.detail.setVisible(bool(detail))

    # -- reports -----------------------------------------------------------------------
    def _open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open GPU report", "", "JSON (*.json)")
        if path:
            self.open_report(Path(path))

    def load_report(self, path: Path) -> bool:
        """Show the reports in a JSON file, read here; a bad file becomes a message."""
        try:
            reports = read_reports(path)
        except ReportError as exc:
            self._report_failed(Path(path).name, str(exc))
            return False
        self.set_reports(reports)
        return True

    def open_report(self, path: Path) -> None:
        """Read and check a JSON file off the GUI thread, then show it (or the message):
        the window stays responsive whatever the file holds."""
        reader = ReportReader(Path(path), self)
        reader.sigRead.connect(self.set_reports)
        reader.sigFailed.connect(self._report_failed)
        reader.finished.connect(reader.deleteLater)
        self._readers.add(reader)
        reader.finished.connect(lambda: self._readers.discard(reader))
        self.show_message(f"Reading {Path(path).name}…")
        reader.start()

    def _report_failed(self, name: str, reason: str) -> None:
        self.show_message(f"Could not open {name}: {reason}")
        self.sigReportFailed.emit()

    def set_reports(self, reports: list[dict]) -> None:
        """Show these reports; the pass stays where it is if they hold it, else forward
        (or the first report's pass)."""
        self.reports = reports
        passes = [pass_of(r) for r in reports]
        chosen = self.pass_combo.currentText()
        if passes and chosen not in passes:
            chosen = "forward" if "forward" in passes else passes[0]
        self.pass_combo.blockSignals(True)  # programmatic change: fill once, below
        self.pass_combo.setCurrentText(chosen)
        self.pass_combo.blockSignals(False)
        self.paper_view.show_reports(reports)
        self.mask_view.show_reports(reports)
        self._fill_selector()

    def _fill_selector(self, _pass: str = "") -> None:
        """List the chosen pass's reports; open on the most complete one."""
        chosen = self.pass_combo.currentText()
        self._shown = [i for i, r in enumerate(self.reports) if pass_of(r) == chosen]
        self.selector.blockSignals(True)  # programmatic change: show once, below
        self.selector.clear()
        labels = [report_label(self.reports[i]) for i in self._shown]
        self.selector.addItems(labels)
        for i, label in enumerate(labels):  # the whole name, where the dock is narrow
            self.selector.setItemData(i, label, Qt.ItemDataRole.ToolTipRole)
        self.show_message("")
        if not self._shown:
            self.selector.blockSignals(False)
            self._clear_results()
            self.show_message(
                f"No {chosen} report here: run one on a GPU, or open a recording that holds one."
            )
            return

        # Open on the most complete report (most paths measured, then the panel's N).
        def completeness(i: int) -> tuple[int, bool]:
            r = self.reports[self._shown[i]]
            ok = sum("error" not in x for x in r["results"])
            return ok, r["config"].get("n") == self.n_spin.value()

        first = max(range(len(self._shown)), key=completeness)
        self.selector.setCurrentIndex(first)
        self.selector.blockSignals(False)
        self._show_selected(first)

    def _clear_results(self) -> None:
        self.recorded_label.setText("")
        for table in (self.table, self.by_measure, self.counts):
            table.setRowCount(0)
        self.counts.setVisible(False)
        self.sweep_view.show_sweep(None, 0, self.blocks)

    def current_report(self) -> dict | None:
        i = self.selector.currentIndex()
        return self.reports[self._shown[i]] if 0 <= i < len(self._shown) else None

    def _show_selected(self, _index: int = 0) -> None:
        report = self.current_report()
        if report is None:
            return
        dev, c = report["device"], report["config"]
        self.recorded_label.setText(
            f"Recorded on {dev.get('name') or 'an unknown device'} at "
            f"{report.get('created_utc', '?')}: N_q={c['n']}, N_k={c['n_keys']}, d={c['d']}, "
            f"{c['dtype']}, batch·heads={c['batch_heads']}, {pass_of(report)} pass, "
            + ("DRAM bytes by ncu, each path once." if report.get("dram")
               else f"median of {c['repeats']} runs.")
        )  # fmt: skip
        self.dram_view.show_report(dram_for(report, self.reports))
        if report.get("dram"):
            self.dram_toggle.setChecked(True)
        self._fill_results(report)
        self._fill_counts(report)
        sweep = find_sweep(report, self.reports)
        owner = next((r for r in self.reports if r.get("sweep") is sweep), report)
        self.sweep_view.show_sweep(sweep, owner["config"]["n"], self.blocks)
        self.sigReportShown.emit()

    def _fill_results(self, report: dict) -> None:
        rows = result_rows(report)
        self.table.setRowCount(len(rows))
        for i, (cells, result) in enumerate(zip(rows, report["results"], strict=True)):
            for j, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                cell.setToolTip(result.get("error_detail", ""))
                self.table.setItem(i, j, cell)
            if "error" in result:
                self.table.setSpan(i, 3, 1, len(HEADER) - 3)
        fit_rows(self.table)
        self._fill_by_measure(rows, report["results"])

    def _fill_by_measure(self, rows: list[list[str]], results: list[dict]) -> None:
        """The results transposed: a column per path (headed by its kernel), a row per
        measure; a failed path's error spans its column below the blocks."""
        table = self.by_measure
        table.clearSpans()
        table.setColumnCount(len(rows))
        table.setRowCount(len(HEADER) - 1)
        for j, cells in enumerate(rows):
            # "sdpa-\ncudnn": two short lines fit a column where one long one did not.
            head = QTableWidgetItem(cells[0].replace("-", "-\n"))
            head.setToolTip(f"{cells[0]} ({cells[1]}, blocks {cells[2]})")
            table.setHorizontalHeaderItem(j, head)
        table.setVerticalHeaderLabels(HEADER[1:])
        for j, (cells, result) in enumerate(zip(rows, results, strict=True)):
            for i in range(1, len(HEADER)):
                text = cells[i] if i < len(cells) else ""
                cell = QTableWidgetItem(text)  # elided in a shared column: whole on hover
                cell.setToolTip(result.get("error_detail", "") or text)
                table.setItem(i - 1, j, cell)
            if "error" in result:
                table.setSpan(2, j, len(HEADER) - 3, 1)
        fit_rows(table)
        table.fit_columns()

    def _fill_counts(self, report: dict) -> None:
        counted = next((r for r in report["results"] if "counts_kernel" in r), None)
        rows = []
        if counted is not None:
            kc, lc = counted["counts_kernel"], counted["counts_ledger"]
            for tensor in kc:
                for d in ("read", "write"):
                    k, m = kc[tensor][d], lc[tensor][d]
                    if k or m:
                        rows.append([tensor, d, f"{k:,}", f"{m:,}", "yes" if k == m else "NO"])
        self.counts.setRowCount(len(rows))
        for i, cells in enumerate(rows):
            for j, text in enumerate(cells):
                self.counts.setItem(i, j, QTableWidgetItem(text))
        fit_rows(self.counts)
        self.counts.setVisible(bool(rows))

    # -- running -----------------------------------------------------------------------
    def set_blocks(self, block_q: int, block_k: int, order: str = "q-outer") -> None:
        """The sliders moved: mark the choice; re-run once they settle, if asked to."""
        self.blocks, self.order = (block_q, block_k), order
        self.sweep_view.mark(self.blocks)
        if self.auto_check.isChecked() and self.device.usable:
            self._debounce.start()

    def bench_config(self) -> BenchConfig:
        bq, bk = self.blocks
        return BenchConfig(
            n=self.n_spin.value(), block_q=bq, block_k=bk, order=self.order,
            dtype=self.dtype_combo.currentText(), batch_heads=self.bh_spin.value(),
            kernels=("tiled", "dense", "flash"), sweep_blocks=self.sweep_check.isChecked(),
            pass_name=self.pass_combo.currentText(),
        )  # fmt: skip

    def run_current(self) -> bool:
        """Start a benchmark of the current settings in a worker thread."""
        if not self.device.usable:
            self.show_message(no_gpu_text(self.device))
            return False
        if self._thread is not None:
            self._thread.cancel()  # the newest request wins; the old one stops at its next step
            self._debounce.start()
            return False
        thread = BenchThread(self.bench_config(), self._runner, self)
        thread.sigProgress.connect(self._progress)
        thread.sigDone.connect(self._done)
        thread.sigFailed.connect(self._failed)
        thread.finished.connect(self._finished)
        self._thread = thread
        self._set_running(True)
        self.show_message("Running the benchmark…")
        thread.start()
        return True

    def cancel(self) -> None:
        self._debounce.stop()
        if self._thread is not None:
            self._thread.cancel()

    def _progress(self, done: int, total: int, text: str) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.setFormat(f"{text} (%v/%m)")

    def _done(self, report: dict) -> None:
        self.set_reports([report])
        failed = [r for r in report["results"] if "error" in r]
        if failed:
            self.show_message(failed[0]["error"], failed[0].get("error_detail", ""))

    def _failed(self, text: str, detail: str) -> None:
        self.show_message(text, detail)

    def _finished(self) -> None:
        if self._thread is not None:
            self._thread.deleteLater()
        self._thread = None
        self._set_running(False)

    def shutdown(self, msecs: int = 30000) -> None:
        """Stop any running benchmark and wait for its thread (window close, tests)."""
        self._debounce.stop()
        if self._thread is not None:
            self._thread.cancel()
            self._thread.wait(msecs)
        for reader in list(self._readers):
            reader.wait(msecs)
        self.decode_view.shutdown(msecs)


def dram_for(report: dict, reports: list[dict]) -> dict | None:
    """The report's own DRAM block's report, else the last one recorded for the same dtype,
    d, pass and N, else for the same dtype, d and pass (None when none measured it)."""
    if report.get("dram"):
        return report

    def key(r: dict, with_n: bool) -> tuple:
        rc = r["config"]
        return (rc["dtype"], rc["d"], pass_of(r), rc["causal"]) + ((rc["n"],) if with_n else ())

    for with_n in (True, False):
        found = [r for r in reports if r.get("dram") and key(r, with_n) == key(report, with_n)]
        if found:
            return found[-1]
    return None


class ReportReader(QThread):
    """Reads and checks one report file off the GUI thread."""

    sigRead = Signal(object)  # the list of reports
    sigFailed = Signal(str, str)  # the file's name, the one-sentence reason

    def __init__(self, path: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path = path

    def run(self) -> None:
        try:
            reports = read_reports(self.path)
        except ReportError as exc:
            self.sigFailed.emit(self.path.name, str(exc))
        except Exception as exc:  # the edge: never raised into Qt
            self.sigFailed.emit(self.path.name, f"it could not be read ({type(exc).__name__})")
        else:
            self.sigRead.emit(reports)


class _CloseWatcher(QObject):
    """Stops the panel's benchmark thread when the window closes (a running QThread
    destroyed with its parent would abort the application)."""

    def __init__(self, panel: GpuPanel, window: QObject) -> None:
        super().__init__(panel)
        self._panel = panel
        window.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.Close:
            self._panel.shutdown()
        return False


def nvidia_gpu_present() -> bool:
    """Whether this machine shows an NVIDIA driver or device (without CuPy)."""
    import shutil

    paths = ("/proc/driver/nvidia/gpus", "/dev/nvidia0", "/dev/nvidiactl")
    return any(os.path.exists(p) for p in paths) or shutil.which("nvidia-smi") is not None


def no_gpu_text(device: DeviceStatus) -> str:
    """Why nothing can run here, in words that help: installing CuPy does not help a
    machine that has no NVIDIA GPU."""
    if device.reason.startswith("CuPy is not installed") and not nvidia_gpu_present():
        return (
            "This machine has no NVIDIA GPU with CUDA, so the benchmark cannot run here; "
            "the reports below were recorded on one."
        )
    return f"No GPU benchmark here: {device.reason}"


def fit_rows(table: QTableWidget) -> None:
    """Cap a table at its rows' height, so the sweep heatmap below gets the rest."""
    rows = sum(table.rowHeight(r) for r in range(table.rowCount()))
    bar = table.horizontalScrollBar().sizeHint().height()
    table.setMaximumHeight(table.horizontalHeader().sizeHint().height() + rows + bar + 6)


def attach_gpu_panel(window, title: str = "GPU benchmark") -> GpuPanel:
    """Dock a GpuPanel in the main window, follow its sliders, stop it on close.

    `window` needs `add_side_panel(widget, title, key, beside)` and `state.sigConfigChanged`
    emitting a Config with block_q, block_k and order (desktop.window.main_window.MainWindow).
    The panel is a tab beside the statistics: that area is tall enough to show the
    results, the kernel counts and the sweep heatmap together.
    """
    panel = GpuPanel(window.state)
    window.add_side_panel(panel, title, "gpu", beside="stats")
    panel.set_reports(split_reports(bundled_report()))  # the H200 recording shipped in the package
    _CloseWatcher(panel, window)
    return panel
