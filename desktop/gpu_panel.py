"""The GPU side panel: measured tiled kernel against dense, counted transfers, block sweep.

Shows one GPU bench report: recorded here through a worker thread when this machine
has a usable CUDA device, or opened from a JSON file recorded on one that does (so a
desktop with no NVIDIA GPU still sees real figures). For the sliders' block sizes it
marks the current choice on the block_q x block_k sweep heatmap and, when asked to,
re-runs the benchmark once the sliders settle. Every failure (no GPU, a compile error
with its NVRTC log, out of device memory, tiles too large) becomes a message here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QThread, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGraphicsRectItem,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from compute.gpu import DeviceStatus, status
from compute.gpu.bench import BenchCancelled, BenchConfig, GpuUnavailable, run_bench
from compute.gpu.report import HEADER, ReportError, report_label, result_rows, split_reports
from compute.gpu.report import sweep_for as find_sweep

from .theme import style_plot

# The H200 recording shipped in a checkout: shown until the user opens or records another.
BUNDLED_REPORT = Path(__file__).parents[1] / "assets" / "benchmarks" / "gpu_tiled_h200.json"
DEBOUNCE_MS = 600  # sliders must rest this long before an automatic re-run
COUNT_HEADER = ["tensor", "dir", "kernel-counted", "ledger", "equal"]
Runner = Callable[..., dict]


class BenchThread(QThread):
    """Runs one benchmark off the GUI thread; cancel() stops it between steps."""

    sigProgress = Signal(int, int, str)
    sigDone = Signal(object)  # the report dict
    sigFailed = Signal(str, str)  # one-sentence message, full detail (e.g. the NVRTC log)

    def __init__(self, config: BenchConfig, runner: Runner, parent=None) -> None:
        super().__init__(parent)
        self.config, self._runner, self._cancel = config, runner, False

    def cancel(self) -> None:
        self._cancel = True

    def run(self) -> None:
        try:
            report = self._runner(
                self.config, progress=self.sigProgress.emit, should_stop=lambda: self._cancel
            )
        except BenchCancelled:
            self.sigFailed.emit("Benchmark cancelled.", "")
        except GpuUnavailable as exc:
            self.sigFailed.emit(str(exc), "")
        except Exception as exc:  # the edge: anything else is shown, never raised into Qt
            text = str(exc).strip() or type(exc).__name__
            self.sigFailed.emit(f"The benchmark failed: {text.splitlines()[0]}", text)
        else:
            self.sigDone.emit(report)


class GpuPanel(QWidget):
    """Device line, run controls, results and counts tables, and the sweep heatmap."""

    sigReportShown = Signal()

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        device: DeviceStatus | None = None,
        runner: Runner = run_bench,
    ) -> None:
        super().__init__(parent)
        self.device = device if device is not None else status()
        self._runner = runner
        self._thread: BenchThread | None = None
        self.reports: list[dict] = []
        self.blocks = (64, 64)
        self.order = "q-outer"
        self._sweep_n = 0
        self._debounce = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._debounce.timeout.connect(self.run_current)
        self._build()
        self._show_device()

    # -- layout ------------------------------------------------------------------------
    def _build(self) -> None:
        self.device_label, self.recorded_label, self.message = QLabel(), QLabel(), QLabel()
        for label in (self.device_label, self.recorded_label, self.message):
            label.setWordWrap(True)
        self.open_button = QPushButton("Open report…")
        self.open_button.clicked.connect(self._open_dialog)
        self.selector = QComboBox()
        self.selector.currentIndexChanged.connect(self._show_selected)
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
        self.counts = self._table(COUNT_HEADER)
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(180)
        item = self.plot.getPlotItem()
        item.setLabel("bottom", "block_k (B_c)")
        item.setLabel("left", "block_q (B_r)")
        item.setMenuEnabled(False)
        item.setMouseEnabled(False, False)
        self.image = pg.ImageItem()
        cmap = pg.colormap.get("viridis")
        cmap.reverse()  # in place: the fastest cell is the brightest
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

        files = QHBoxLayout()
        files.addWidget(self.open_button)
        files.addWidget(self.selector, 1)
        run = QHBoxLayout()
        for text, w in (("N", self.n_spin), ("batch·heads", self.bh_spin), ("", self.dtype_combo)):
            if text:
                run.addWidget(QLabel(text))
            run.addWidget(w)
        run.addWidget(self.run_button)
        run.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.device_label)
        layout.addLayout(files)
        layout.addWidget(self.recorded_label)
        layout.addLayout(run)
        options = QHBoxLayout()
        options.addWidget(self.auto_check)
        options.addWidget(self.sweep_check)
        options.addStretch(1)
        layout.addLayout(options)
        layout.addWidget(self.progress)
        layout.addWidget(self.message)
        layout.addWidget(self.detail)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.counts, 1)
        layout.addWidget(self.plot, 2)
        layout.addWidget(self.sweep_note)
        self._set_running(False)

    @staticmethod
    def _table(header: list[str]) -> QTableWidget:
        table = QTableWidget(0, len(header))
        table.setHorizontalHeaderLabels(header)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        return table

    def _show_device(self) -> None:
        if self.device.usable:
            self.device_label.setText(f"This machine: {self.device.describe()}")
        else:
            self.device_label.setText(f"No GPU benchmark here: {self.device.reason}")
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
            self.load_report(Path(path))

    def load_report(self, path: Path) -> bool:
        """Show the reports in a JSON file; a bad file becomes a message, never an error."""
        try:
            reports = split_reports(json.loads(Path(path).read_text()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ReportError) as exc:
            reason = exc if isinstance(exc, ReportError) else "it is not readable JSON"
            self.show_message(f"Could not open {Path(path).name}: {reason}")
            return False
        self.set_reports(reports)
        return True

    def set_reports(self, reports: list[dict]) -> None:
        self.reports = reports
        self.selector.blockSignals(True)  # programmatic change: show once, below
        self.selector.clear()
        self.selector.addItems([report_label(r) for r in reports])

        # Open on the most complete report (most kernels measured, then the panel's N).
        def completeness(i: int) -> tuple[int, bool]:
            r = reports[i]
            ok = sum("error" not in x for x in r["results"])
            return ok, r["config"].get("n") == self.n_spin.value()

        first = max(range(len(reports)), key=completeness)
        self.selector.setCurrentIndex(first)
        self.selector.blockSignals(False)
        self.show_message("")
        self._show_selected(first)

    def current_report(self) -> dict | None:
        i = self.selector.currentIndex()
        return self.reports[i] if 0 <= i < len(self.reports) else None

    def _show_selected(self, _index: int = 0) -> None:
        report = self.current_report()
        if report is None:
            return
        dev, c = report["device"], report["config"]
        self.recorded_label.setText(
            f"Recorded on {dev.get('name') or 'an unknown device'} at "
            f"{report.get('created_utc', '?')}: N_q={c['n']}, N_k={c['n_keys']}, d={c['d']}, "
            f"{c['dtype']}, batch·heads={c['batch_heads']}, median of {c['repeats']} runs."
        )
        self._fill_results(report)
        self._fill_counts(report)
        sweep = find_sweep(report, self.reports)
        owner = next((r for r in self.reports if r.get("sweep") is sweep), report)
        self._sweep_n = owner["config"]["n"]
        self._draw_sweep(sweep)
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
        self.counts.setVisible(bool(rows))

    # -- sweep heatmap -----------------------------------------------------------------
    def _draw_sweep(self, sweep: dict | None) -> None:
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
        self._mark_current()

    def _mark_current(self) -> None:
        sweep = getattr(self, "sweep", None)
        if not sweep:
            return
        bq, bk = self.blocks
        best = sweep.get("best") or {}
        note = f"Tiled kernel, ms per run at N={self._sweep_n} ({sweep['order']}); ☆ fastest"
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

    # -- running -----------------------------------------------------------------------
    def set_blocks(self, block_q: int, block_k: int, order: str = "q-outer") -> None:
        """The sliders moved: mark the choice; re-run once they settle, if asked to."""
        self.blocks, self.order = (block_q, block_k), order
        self._mark_current()
        if self.auto_check.isChecked() and self.device.usable:
            self._debounce.start()

    def bench_config(self) -> BenchConfig:
        bq, bk = self.blocks
        return BenchConfig(
            n=self.n_spin.value(), block_q=bq, block_k=bk, order=self.order,
            dtype=self.dtype_combo.currentText(), batch_heads=self.bh_spin.value(),
            kernels=("tiled", "dense", "fast"), sweep_blocks=self.sweep_check.isChecked(),
        )  # fmt: skip

    def run_current(self) -> bool:
        """Start a benchmark of the current settings in a worker thread."""
        if not self.device.usable:
            self.show_message(f"No GPU benchmark here: {self.device.reason}")
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


def attach_gpu_panel(window, title: str = "GPU benchmark") -> GpuPanel:
    """Dock a GpuPanel in the main window, follow its sliders, stop it on close.

    `window` needs `add_side_panel(widget, title, key)` and `state.sigConfigChanged`
    emitting a Config with block_q, block_k and order (desktop.main_window.MainWindow).
    """
    panel = GpuPanel()
    window.add_side_panel(panel, title, "gpu")
    if BUNDLED_REPORT.is_file():
        panel.load_report(BUNDLED_REPORT)

    def follow(config) -> None:
        panel.set_blocks(config.block_q, config.block_k, config.order)

    window.state.sigConfigChanged.connect(follow)
    if getattr(window.state, "config", None) is not None:
        follow(window.state.config)
    _CloseWatcher(panel, window)
    return panel
