"""Declared against measured, in the ledger panel: the ledger's bytes beside what the GPU's
own DRAM counters counted, per path, from the bundled H200 recording (no GPU needed).

The ledger counts what a declared schedule moves between HBM and on-chip memory, each
re-read of a tile again; Nsight Compute's DRAM counters count what reached DRAM after the
L2 cache served what it could. For one recorded configuration (the one nearest the app's
pass and N until another is picked) each path gets a row of two horizontal bars, both as
fractions of the path's declared bytes: declared, split per tensor where the teaching
kernel's COUNT_TRANSFERS build counted them and whole otherwise, and measured, DRAM read
then written. A bar longer than the axis is cut and labelled with its multiple.
`gap_reading` is the one line that says why the two differ; each path's own reading
(compute.gpu.report.dram_reading) is listed below it. The bars' numbers come from
desktop.panels.gpu.dram_view.path_bars, as in the GPU panel.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QVBoxLayout, QWidget

from compute.gpu.report import L2_CAVEAT, bundled_report, dram_label, split_reports
from desktop.panels.gpu.dram_view import PathBars, path_bars
from desktop.state.app_state import AppState
from desktop.theme import FollowsPalette, style_plot

X_MAX = 1.6  # the axis ends here (× declared): a bar past it is cut and labelled
HEIGHT = 0.36  # each bar's thickness; a path's two bars share one unit of the y axis
ROW_PX = 44  # the plot's least height per path
SYMBOLS = {"l": "ℓ"}  # as the ledger's table names the running denominator
FUSED = ("tiled", "flash")  # the paths that keep S and P on chip
# The N x N matrices the dense lane stores in each pass.
NN_MATRICES = {"forward": "S and P", "backward": "P, dP and dS", "training": "S, P, dP and dS"}


def measured_reports(reports: list[dict]) -> list[dict]:
    """The reports that hold a DRAM profile ("dram" block, report version 4), in order."""
    return [r for r in reports if r.get("dram")]


def config_label(report: dict) -> str:
    """One short line naming a measured configuration and where its S stands to the L2."""
    c, block = report["config"], report["dram"]
    where = "≤" if block["s_fits_l2"] else ">"
    return (
        f"{c.get('pass_name', 'forward')}, N={c['n']}, batch·heads={c['batch_heads']}, "
        f"d={c['d']} (S {block['score_bytes'] / 2**20:,.0f} MiB {where} L2)"
    )


def nearest(reports: list[dict], pass_name: str, n: int) -> int:
    """The index of the measured report nearest a configuration: the same pass where one
    was recorded, then the N nearest on a log scale (the later one on a tie)."""
    same = [i for i, r in enumerate(reports) if r["config"].get("pass_name") == pass_name]
    pool = same or list(range(len(reports)))
    return min(reversed(pool), key=lambda i: abs(math.log(reports[i]["config"]["n"] / max(1, n))))


def _ratio(entry: dict) -> float | None:
    m, dec = entry.get("measured"), entry.get("declared")
    if m is None or not dec or not dec["bytes"]:
        return None
    return m["dram_bytes"] / dec["bytes"]


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}–{hi:{fmt}}"


def gap_reading(report: dict) -> str:
    """One line: how far the measured DRAM bytes stand from the declared ones, and why
    (the fused kernels' re-reads served by L2; the dense path's S and P against the L2)."""
    block = report["dram"]
    mib, l2 = block["score_bytes"] / 2**20, block["l2_bytes"] / 2**20
    parts = []
    fused = [e for e in block["paths"] if e["path"] in FUSED and _ratio(e) is not None]
    if fused:
        ratios = [_ratio(e) for e in fused]
        hits = [e["measured"]["l2_hit_rate_pct"] for e in fused]
        hits = [h for h in hits if h is not None]
        served = "most" if max(ratios) < 0.5 else "part"
        hit = f" (L2 hit rate {_span(hits, '.0f')}%)" if hits else ""
        parts.append(
            f"the fused kernels moved {_span([100 * r for r in ratios], '.0f')}% of their "
            f"declared bytes{hit}: L2 serves {served} of the tile re-reads the ledger counts"
        )
    dense = next((e for e in block["paths"] if e["path"] == "dense"), None)
    ratio = None if dense is None else _ratio(dense)
    if ratio is not None:
        kernels = len(dense["measured"].get("kernels", []))
        square = NN_MATRICES.get(report["config"].get("pass_name", "forward"), "S and P")
        size = f"S ({mib:,.0f} MiB)"
        if block["s_fits_l2"]:
            why = f"{size} fits in the {l2:,.0f} MiB L2"
        else:
            why = f"{size} is too large for the {l2:,.0f} MiB L2, so {square} go to DRAM"
        if ratio > 1.25:
            why += (
                f", and its {kernels} kernels (float32 copies, one pass per elementwise step) "
                "read and write N x N arrays again"
            )
        elif ratio < 0.8:
            why += f", so part of {square} never leaves L2"
        parts.append(f"dense moved {100 * ratio:.0f}%: {why}")
    if not parts:
        return "No path of this recording has both a ledger and a DRAM measurement."
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _gb(n: int) -> str:
    return f"{n / 1e9:.3g} GB"


class LedgerMeasured(FollowsPalette, QWidget):
    """The ledger's declared bytes beside ncu's DRAM bytes for one recorded configuration.

    `reports`: the GPU reports to offer (default: the bundled H200 recording, read the
    first time the view is shown, so the window starts without parsing it)."""

    def __init__(
        self,
        state: AppState | None = None,
        reports: list[dict] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.state = state
        self._reports = None if reports is None else measured_reports(reports)
        self._picked = False  # a configuration the user chose stays until the next pick
        self.bars: list[PathBars] = []
        self.combo = QComboBox()
        self.combo.setToolTip("The configuration measured on the GPU whose DRAM bytes are shown")
        self.combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.combo.setMinimumContentsLength(12)
        self.combo.activated.connect(self._pick)  # the user's choice only, never ours
        self.combo.currentIndexChanged.connect(self._draw)
        self.title = QLabel()
        self.plot = pg.PlotWidget()
        item = self.plot.getPlotItem()
        item.setLabel("bottom", "× the path's declared bytes")
        item.setMenuEnabled(False)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        item.showGrid(x=True, alpha=0.3)
        item.invertY(True)  # the first path on top, as the readings list them
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.gap = QLabel()
        self.gap.setObjectName("dram_gap")
        self.details = QLabel()
        for label in (self.title, self.legend, self.gap, self.details):
            label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        # The combo alone on its row keeps the panel narrow enough to stack in a side dock;
        # the reading of the gap and the colours right above the bars, what each side
        # counts below them.
        layout.addWidget(self.combo)
        layout.addWidget(self.gap)
        layout.addWidget(self.legend)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.title)
        layout.addWidget(self.details)
        self.restyle()
        if state is not None:
            state.sigConfigChanged.connect(lambda _c: self.follow())
        if self._reports is not None:
            self._fill()

    @property
    def reports(self) -> list[dict]:
        """The measured reports offered (the bundled recording read now if not yet)."""
        if self._reports is None:
            self._reports = measured_reports(split_reports(bundled_report()))
            self._fill()
        return self._reports

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        _ = self.reports  # the recording is read the first time the view is seen
        super().showEvent(event)

    def restyle(self) -> None:
        style_plot(self.plot, [self.plot.getPlotItem()], self.palette())

    def _fill(self) -> None:
        self.combo.blockSignals(True)
        self.combo.clear()
        for r in self._reports or []:
            self.combo.addItem(config_label(r))
        self.combo.blockSignals(False)
        self._picked = False
        self.follow()

    def _pick(self, index: int) -> None:
        self._picked = True
        self._draw(index)  # Qt announced the new index before the pick: say "picked" now

    def follow(self) -> None:
        """Show the recording nearest the app's configuration (until the user picks one)."""
        if self._reports is None or self._picked or not self._reports:
            if self._reports == []:
                self._draw(-1)
            return
        cfg = None if self.state is None else self.state.config
        index = (
            len(self._reports) - 1 if cfg is None else nearest(self._reports, cfg.pass_name, cfg.n)
        )
        if index == self.combo.currentIndex():
            self._draw(index)
        else:
            self.combo.setCurrentIndex(index)  # draws through currentIndexChanged

    def _draw(self, index: int) -> None:
        item = self.plot.getPlotItem()
        item.clear()
        if not self._reports or not 0 <= index < len(self._reports):
            self.bars = []
            self.title.setText("No recording here holds DRAM bytes (flash-explorer bench --dram).")
            for label in (self.gap, self.legend, self.details):
                label.setText("")
            return
        report = self._reports[index]
        block = report["dram"]
        device = report["device"].get("name") or "a GPU"
        c = report["config"]
        cfg = None if self.state is None else self.state.config
        which = (
            f"The recording nearest this configuration ({cfg.pass_name}, N = {cfg.n}); pick "
            "another above. "
            if cfg is not None and not self._picked
            else ""
        )
        self.title.setText(
            f"{which}Upper bar: the ledger's declared bytes, per tensor where the teaching kernel "
            f"counted them; lower bar: DRAM bytes read and written as the {device}'s counters "
            f"(Nsight Compute) saw them, {c['dtype']}, {c.get('pass_name', 'forward')} pass. "
            "The ledger counts every transfer its schedule declares, re-reads included; DRAM "
            f"sees only what got past the {block['l2_bytes'] / 2**20:,.0f} MiB L2. {L2_CAVEAT}"
        )
        self.gap.setText(gap_reading(report))
        self.bars = [b for b in path_bars(report) if b.scale_bytes and b.measured]
        ticks = []
        for i, bar in enumerate(self.bars):
            ticks.append((i, bar.name))
            for y, segments in ((i - HEIGHT / 2, bar.declared), (i + HEIGHT / 2, bar.measured)):
                self._bar(item, y, segments, bar.scale_bytes)
            if not bar.declared:  # a peer: its transfers are not modelled
                note = pg.TextItem("no ledger: lower bar against flash's",
                                   anchor=(0.0, 0.5), color="#888888")  # fmt: skip
                note.setPos(0.0, i - HEIGHT / 2)
                item.addItem(note)
        item.getAxis("left").setTicks([ticks])
        self.plot.setMinimumHeight(ROW_PX * len(self.bars) + 50)  # every path's name readable
        item.setXRange(0, X_MAX, padding=0)
        item.setYRange(-0.6, len(self.bars) - 0.4, padding=0)
        # The legend: the declared bars' tensors first, then the measured bars' read, write.
        colours: dict[str, str] = {}
        declared = [s for b in self.bars for s in b.declared]
        for seg in declared + [s for b in self.bars for s in b.measured]:
            colours.setdefault(SYMBOLS.get(seg.label, seg.label), seg.colour)
        self.legend.setText(
            " ".join(f'<span style="color:{c}">■</span>&nbsp;{name}' for name, c in colours.items())
        )
        shown = {b.name for b in self.bars}
        lines = [
            f"{b.name}: {b.reading}"
            + ("" if b.scale_note == "its own ledger" else f" (drawn against {b.scale_note})")
            for b in self.bars
        ]
        lines += [
            f"{dram_label(e)}: {e['error']}"
            for e in block["paths"]
            if dram_label(e) not in shown and "error" in e
        ]
        self.details.setText("\n".join(lines))

    def _bar(self, item, y: float, segments: list, scale: int) -> None:
        """One stacked bar at height y, cut at X_MAX, labelled with its GB (and multiple)."""
        x = 0.0
        for seg in segments:
            width = seg.bytes / scale
            left, right = min(x, X_MAX), min(x + width, X_MAX)
            if right > left:
                item.addItem(pg.BarGraphItem(x0=[left], y=[y], width=[right - left],
                                             height=[HEIGHT], brush=seg.colour, pen=None))  # fmt: skip
            x += width
        if not segments:
            return
        total = sum(s.bytes for s in segments)
        text = _gb(total) if x <= X_MAX else f"{_gb(total)}, ×{x:.2f} ▸"
        inside = x > X_MAX * 0.7  # no room after the bar: the label goes on it, in white
        label = pg.TextItem(text, anchor=(1.0, 0.5) if inside else (0.0, 0.5),
                            color="#ffffff" if inside else "#888888")  # fmt: skip
        label.setPos(min(x, X_MAX), y)
        item.addItem(label)
