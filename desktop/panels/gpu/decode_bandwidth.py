"""Decode bandwidth in the GPU panel: achieved bytes per second of one decode step by the
split-KV kernel (compute.gpu.decode), as a fraction of the copy bandwidth measured in the
same process, per configuration of a decode benchmark report (compute.gpu.decode_bench).

The bytes are the one-pass ledger's (Q, K, V read once, O written: what any schedule must
move) over the median time, recomputed here from the report's times, not copied from it.
SDPA's fraction stands beside each bar where the report timed it. Without a usable GPU the
view shows the measured report bundled under assets/benchmarks/decode/; with one, "Measure
on this GPU" runs the benchmark in a worker thread (tens of seconds) and shows its report.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt, QThread, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from compute.gpu import DeviceStatus, status
from desktop.panels.gpu.sweep import bar_plot
from desktop.theme import FollowsPalette, style_plot

BUNDLED = Path(__file__).resolve().parents[3] / "assets" / "benchmarks" / "decode"
BUNDLED_REPORT = BUNDLED / "decode_h200.json"
TARGET = 0.6  # issue 33's bar: split-KV at >= 60% of the copy bandwidth at N_k = 65536
WIDTH = 0.38
OURS, PEER = "#4c78a8", "#999999"
HEADER = ["#", "H_q/H_kv", "N_k", "S", "split-kv µs", "TB/s", "of copy", "SDPA"]

Runner = Callable[..., dict]


class DecodeReportError(ValueError):
    """A file that is not a decode benchmark report; the message is one sentence."""


@dataclass(frozen=True)
class BandwidthRow:
    """One configuration: the split-KV step's time, bytes per second and fraction of the
    copy bandwidth, and SDPA's fraction (None where the report did not time it)."""

    h_q: int
    h_kv: int
    n_k: int
    splits: int
    time_us: float
    bandwidth: float
    fraction: float
    peer_fraction: float | None

    @property
    def label(self) -> str:
        return f"{self.h_q}/{self.h_kv}, N_k = {self.n_k}"


def bandwidth_rows(report: dict) -> list[BandwidthRow]:
    """Every case of a decode report as a row (pure: tested without Qt)."""
    copy_bw = report["copy_bandwidth"]
    rows = []
    for c in report["cases"]:
        paths = c["paths"]
        seconds = paths["split-kv"]["median_ms"] * 1e-3
        bw = c["useful_bytes"] / seconds
        peer = paths.get("sdpa")
        peer_fraction = None if peer is None else c["useful_bytes"] / (peer["median_ms"] * 1e-3)
        rows.append(
            BandwidthRow(
                c["h_q"],
                c["h_kv"],
                c["n_k"],
                c["splits_used"],
                seconds * 1e6,
                bw,
                bw / copy_bw,
                None if peer_fraction is None else peer_fraction / copy_bw,
            )
        )
    return rows


def read_decode_report(path: Path) -> dict:
    """A decode benchmark report from a JSON file; DecodeReportError (one sentence) when the
    file is missing, unreadable or not such a report."""
    what = "Pick a JSON written by python -m compute.gpu.decode_bench."
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise DecodeReportError(f"{path} could not be read ({exc.strerror}). {what}") from exc
    except ValueError as exc:
        raise DecodeReportError(f"{path} is not JSON. {what}") from exc
    try:
        if not report["copy_bandwidth"] > 0 or not report["cases"]:
            raise ValueError
        bandwidth_rows(report)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise DecodeReportError(f"{path} is not a decode benchmark report. {what}") from exc
    return report


class DecodeBenchThread(QThread):
    """compute.gpu.decode_bench.measure off the GUI thread."""

    sigProgress = Signal(int, int, str)
    sigDone = Signal(object)
    sigFailed = Signal(str)

    def __init__(self, runner: Runner, parent=None) -> None:
        super().__init__(parent)
        self._runner = runner

    def run(self) -> None:
        try:
            report = self._runner(progress=self.sigProgress.emit)
        except Exception as exc:  # the edge: shown as a sentence, never raised into Qt
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.sigFailed.emit(f"The decode benchmark failed: {text}")
        else:
            self.sigDone.emit(report)


def _measure(**kwargs) -> dict:
    from compute.gpu.decode_bench import measure  # torch and CuPy only when asked to measure

    return measure(**kwargs)


class DecodeBandwidthView(FollowsPalette, QWidget):
    """Bars of the split-KV kernel's fraction of the copy bandwidth per decode case, with
    SDPA's beside them, the 60% bar and the ceiling drawn across, and the figures below."""

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        device: DeviceStatus | None = None,
        runner: Runner = _measure,
        report_path: Path = BUNDLED_REPORT,
    ) -> None:
        super().__init__(parent)
        self.device = device if device is not None else status()
        self._runner = runner
        self._thread: DecodeBenchThread | None = None
        self.rows: list[BandwidthRow] = []
        self.title, self.message = QLabel(), QLabel()
        for label in (self.title, self.message):
            label.setWordWrap(True)
        self.plot = bar_plot("of copy bandwidth", 160)
        self.legend = QLabel(
            f'<span style="color:{OURS}">■</span>&nbsp;split-KV kernel &nbsp; '
            f'<span style="color:{PEER}">■</span>&nbsp;PyTorch SDPA &nbsp; '
            f"dashed: {TARGET:.0%} (the target); solid: the copy ceiling"
        )
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.table = QTableWidget(0, len(HEADER))
        self.table.setHorizontalHeaderLabels(HEADER)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.open_button = QPushButton("Open decode report…")
        self.open_button.clicked.connect(self._open_dialog)
        self.measure_button = QPushButton("Measure on this GPU")
        self.measure_button.clicked.connect(self.measure)
        self.measure_button.setEnabled(self.device.usable)
        self.measure_button.setToolTip(
            "Runs python -m compute.gpu.decode_bench's cases here (tens of seconds)"
            if self.device.usable
            else f"{self.device.reason} The bars show the bundled H200 measurement."
        )
        buttons = QHBoxLayout()
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.measure_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.title)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.legend)
        layout.addWidget(self.table)
        layout.addWidget(self.message)
        self.restyle()
        self.open_report(report_path, bundled=True)

    def restyle(self) -> None:
        style_plot(self.plot, [self.plot.getPlotItem()], self.palette())

    # -- reports -------------------------------------------------------------------------
    def open_report(self, path: Path, *, bundled: bool = False) -> bool:
        """Show the decode report in `path`; a bad file becomes the message line."""
        try:
            report = read_decode_report(path)
        except DecodeReportError as exc:
            self.message.setText(str(exc))
            return False
        source = "bundled measurement" if bundled else f"report {Path(path).name}"
        self.show_report(report, source)
        return True

    def _open_dialog(self) -> None:
        name, _ = QFileDialog.getOpenFileName(
            self, "Open decode report", str(BUNDLED), "JSON (*.json)"
        )
        if name:
            self.open_report(Path(name))

    def show_report(self, report: dict, source: str) -> None:
        """Draw the bars and fill the table from one decode report."""
        self.rows = bandwidth_rows(report)
        dev = report.get("device", {}).get("name") or "a GPU"
        copy_tb = report["copy_bandwidth"] / 1e12
        self.title.setText(
            f"Decode, N_q = 1, d = {report['cases'][0]['d']}, {report['cases'][0]['dtype']} on "
            f"{dev} ({source}): bytes any schedule must move per step over the split-KV "
            f"kernel's median time, as a fraction of the {copy_tb:.2f} TB/s device-to-device "
            "copy measured in the same process."
        )
        item = self.plot.getPlotItem()
        item.clear()
        n = len(self.rows)
        xs = list(range(n))
        item.addItem(pg.BarGraphItem(x=[x - WIDTH / 2 for x in xs], height=[r.fraction for r in self.rows],
                                     width=WIDTH, brush=OURS, pen=None))  # fmt: skip
        peers = [(x, r.peer_fraction) for x, r in zip(xs, self.rows, strict=True)
                 if r.peer_fraction is not None]  # fmt: skip
        if peers:
            item.addItem(pg.BarGraphItem(x=[x + WIDTH / 2 for x, _ in peers], height=[f for _, f in peers],
                                         width=WIDTH, brush=PEER, pen=None))  # fmt: skip
        for x, r in zip(xs, self.rows, strict=True):
            text = pg.TextItem(f"{r.fraction:.0%}", anchor=(0.5, 1.0), color=OURS)
            text.setPos(x - WIDTH / 2, r.fraction)
            item.addItem(text)
        item.addItem(
            pg.InfiniteLine(TARGET, angle=0, pen=pg.mkPen("#e45756", style=Qt.PenStyle.DashLine))
        )
        item.addItem(pg.InfiniteLine(1.0, angle=0, pen=pg.mkPen("#888888")))
        item.getAxis("bottom").setTicks([[(x, str(x + 1)) for x in xs]])
        item.setXRange(-0.6, n - 0.4, padding=0)
        item.setYRange(0, 1.12, padding=0)
        self.table.setRowCount(n)
        for i, r in enumerate(self.rows):
            peer = "" if r.peer_fraction is None else f"{r.peer_fraction:.0%}"
            cells = [str(i + 1), f"{r.h_q}/{r.h_kv}", str(r.n_k), str(r.splits), f"{r.time_us:.1f}",
                     f"{r.bandwidth / 1e12:.2f}", f"{r.fraction:.0%}", peer]  # fmt: skip
            for j, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                cell.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, j, cell)
        longest = max(r.n_k for r in self.rows)
        at = sorted((r for r in self.rows if r.n_k == longest), key=lambda r: r.fraction)
        span = f"{at[0].fraction:.0%}" + (
            f" ({at[0].h_q}/{at[0].h_kv}) to {at[-1].fraction:.0%} ({at[-1].h_q}/{at[-1].h_kv})"
            if len(at) > 1 else f" ({at[0].h_q}/{at[0].h_kv})"
        )  # fmt: skip
        self.message.setText(
            f"At N_k = {longest} the split-KV kernel reaches {span} of the copy bandwidth; "
            "decode is memory-bound, so this fraction, not FLOP/s, is its speed."
        )

    # -- measuring -----------------------------------------------------------------------
    def measure(self) -> None:
        """Run the decode benchmark in a worker thread (only with a usable GPU)."""
        if not self.device.usable or self._thread is not None:
            return
        self.measure_button.setEnabled(False)
        self.message.setText("Measuring the decode cases on this GPU…")
        thread = DecodeBenchThread(self._runner, self)
        thread.sigProgress.connect(
            lambda i, n, what: self.message.setText(f"Measuring {i + 1} of {n}: {what}…")
        )
        thread.sigDone.connect(lambda report: self.show_report(report, "measured here just now"))
        thread.sigFailed.connect(self.message.setText)
        thread.finished.connect(self._finished)
        self._thread = thread
        thread.start()

    def _finished(self) -> None:
        if self._thread is not None:
            self._thread.deleteLater()
        self._thread = None
        self.measure_button.setEnabled(self.device.usable)

    def shutdown(self, msecs: int = 30000) -> None:
        """Wait for a running measurement (window close, tests)."""
        if self._thread is not None:
            self._thread.wait(msecs)
