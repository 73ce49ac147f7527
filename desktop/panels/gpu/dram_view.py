"""Declared against measured bytes per path: the GPU panel's DRAM view.

For one report's "dram" block (compute.gpu.dram, report version 4) each path gets two bars,
both as fractions of the path's declared ledger (so the dense path's gigabytes and the
tiled kernel's megabytes share one axis): the declared bar, split per tensor where the
teaching kernels' COUNT_TRANSFERS build counted them and whole otherwise, and the measured
bar, DRAM read below written. A path with no ledger (the peers) is drawn against the
tensor-core kernel's ledger of the same run. Each bar is labelled with its gigabytes, and
below the plot each path's one-line reading of the gap.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from compute import PASS_TENSORS, element_bytes
from compute.gpu.report import L2_CAVEAT, dram_label, dram_reading
from desktop.panels.gpu.sweep import bar_plot
from desktop.theme import FollowsPalette, style_plot

WIDTH = 0.38
# One colour per tensor (declared segments) and for DRAM read / write (measured).
# One colour per tensor, the same in every bar (PASS_TENSORS' order: Q K V O S P m l L dO dQ
# dK dV dP dS D).
TENSOR_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b",
                  "#b279a2", "#ff9da6", "#9d755d", "#bab0ac", "#17becf", "#8c564b",
                  "#bcbd22", "#7f7f7f", "#aec7e8", "#98df8a")  # fmt: skip
READ, WRITE, WHOLE = "#2f4b7c", "#a05195", "#999999"


@dataclass(frozen=True)
class Segment:
    """One stacked piece of a bar: what it is, its bytes and its colour."""

    label: str
    bytes: int
    colour: str


@dataclass(frozen=True)
class PathBars:
    """A path's two bars, in bytes, and the declared bytes they are drawn against."""

    name: str
    declared: list[Segment]  # empty: no ledger of its own
    measured: list[Segment]  # empty: not measured
    scale_bytes: int  # the declared bytes the bars are fractions of (0: nothing to scale by)
    scale_note: str
    reading: str


def _counted_segments(entry: dict, cfg: dict) -> list[Segment]:
    """The teaching kernel's own per-tensor counts (per head) as bytes over all heads."""
    counts, heads, dtype = entry["counts_kernel"], cfg["batch_heads"], cfg["dtype"]
    out = []
    order = {t: i for i, t in enumerate(PASS_TENSORS)}
    for tensor, rw in sorted(counts.items(), key=lambda kv: order.get(kv[0], len(order))):
        n = (rw.get("read", 0) + rw.get("write", 0)) * heads * element_bytes(tensor, dtype)
        if n:
            colour = TENSOR_COLOURS[order.get(tensor, 0) % len(TENSOR_COLOURS)]
            out.append(Segment(tensor, n, colour))
    return out


def path_bars(report: dict) -> list[PathBars]:
    """Every path of the report's "dram" block as bars (pure: tested without Qt)."""
    block, cfg = report["dram"], report["config"]
    flash = next((e for e in block["paths"] if e["path"] == "flash" and e.get("declared")), None)
    bars = []
    for e in block["paths"]:
        dec, m = e.get("declared"), e.get("measured")
        if dec is not None and "counts_kernel" in e:
            declared = _counted_segments(e, cfg)
        elif dec is not None:
            declared = [Segment("declared", dec["bytes"], WHOLE)]
        else:
            declared = []
        measured = []
        if m is not None:
            measured = [Segment("DRAM read", m["dram_read_bytes"], READ),
                        Segment("DRAM write", m["dram_write_bytes"], WRITE)]  # fmt: skip
        if dec is not None:
            scale, note = dec["bytes"], "its own ledger"
        elif flash is not None:
            scale, note = flash["declared"]["bytes"], "the tensor-core kernel's ledger"
        else:
            scale, note = 0, "no ledger"
        reading = dram_reading(e, block["score_bytes"], block["l2_bytes"])
        bars.append(PathBars(dram_label(e), declared, measured, scale, note, reading))
    return bars


class DramView(FollowsPalette, QWidget):
    """The bars of one report's DRAM block and the readings of its gaps."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # The heatmap's modest height, for the same scroll area.
        self.plot = bar_plot("× declared", 180)
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.legend = QLabel()  # the colours of the bars' segments
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.readings = QLabel()
        self.readings.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.legend)
        layout.addWidget(self.readings)
        self.bars: list[PathBars] = []
        self.restyle()

    def restyle(self) -> None:
        style_plot(self.plot, [self.plot.getPlotItem()], self.palette())

    def show_report(self, report: dict | None) -> None:
        """Draw the report's DRAM block (None, or a report without one: say so)."""
        item = self.plot.getPlotItem()
        item.clear()
        if report is None or not report.get("dram"):
            self.bars = []
            self.title.setText("No DRAM measurement for this report (flash-explorer bench --dram).")
            self.readings.setText("")
            self.legend.setText("")
            return
        c, block = report["config"], report["dram"]
        fits = "fits in" if block["s_fits_l2"] else "does not fit in"
        self.title.setText(
            f"Declared (left bar: per tensor where the teaching kernel counted them) against "
            f"DRAM bytes measured by ncu (right bar: read, written) at N={c['n']}, "
            f"batch·heads={c['batch_heads']}, {c['dtype']}, {c.get('pass_name', 'forward')}; "
            f"S is {block['score_bytes'] / 2**20:,.0f} MiB and {fits} the "
            f"{block['l2_bytes'] / 2**20:,.0f} MiB L2. {L2_CAVEAT}"
        )
        self.bars = path_bars(report)
        ticks = []
        top = 1.0
        colours: dict[str, str] = {}
        for i, bar in enumerate(self.bars):
            # Numbers, named in the readings below: seven names do not fit a side dock.
            ticks.append((i, str(i + 1)))
            if not bar.scale_bytes:
                continue
            heights = []
            for x, segments in ((i - WIDTH / 2, bar.declared), (i + WIDTH / 2, bar.measured)):
                y = 0.0
                for seg in segments:
                    h = seg.bytes / bar.scale_bytes
                    item.addItem(pg.BarGraphItem(x=[x], y0=[y], height=[h], width=WIDTH,
                                                 brush=seg.colour, pen=None))  # fmt: skip
                    colours.setdefault(seg.label, seg.colour)
                    y += h
                heights.append(y)
            # One label a path, above its taller bar: declared, then measured gigabytes.
            gb = [sum(s.bytes for s in segs) / 1e9 for segs in (bar.declared, bar.measured)]
            label = "\n".join(f"{g:.3g}" if segs else "-" for g, segs in
                              zip(gb, (bar.declared, bar.measured), strict=True))  # fmt: skip
            text = pg.TextItem(label, anchor=(0.5, 1.0), color="#888888")
            text.setPos(i, max(heights))
            item.addItem(text)
            top = max(top, *heights)
        item.getAxis("bottom").setTicks([ticks])
        item.setYRange(0, top * 1.25, padding=0)
        item.setXRange(-0.6, len(self.bars) - 0.4, padding=0)
        self.legend.setText(
            "Bars, as fractions of the path's declared bytes; labels: declared, then measured "
            "GB. " + " ".join(f'<span style="color:{c}">■</span>&nbsp;{name}'
                              for name, c in colours.items())
        )  # fmt: skip
        self.readings.setText(
            "\n".join(
                f"{i}. {b.name}: {b.reading}"
                + ("" if b.scale_note == "its own ledger" else f" (drawn against {b.scale_note})")
                for i, b in enumerate(self.bars, 1)
            )
        )
