"""Lay the lanes out for an output size and paint them on any device: image, SVG or PDF.

An export does not grab the window's widgets (their size is the user's window, not the
slide): it lays the chosen lanes out afresh for the output, the way a window of that size
would, and paints them with the lanes' own painters (desktop.lanes.hbm, .sram). The
layout is a function of (trace, step, row, progress, target, size, theme) only, so the
GUI dialog and the CLI draw the same pixels, and the user's view never moves.

Sizes are logical: a 1280x720 output is painted 1:1; larger outputs scale the painter
(fonts and strokes grow with the slide), smaller ones shrink down to ZOOM_MIN so a
README column still gets numbers in cells. On SVG and PDF the painters draw cells as
rectangles and numbers as text (painting.draw_image picks rectangles on vector devices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPalette
from PySide6.QtWidgets import QStyleFactory

from compute import Trace
from compute.timeline import BACKWARD_PHASES
from desktop.lanes import hbm as hbm_painter
from desktop.lanes import sram as sram_painter
from desktop.lanes.context import LaneContext
from desktop.lanes.view import (
    ARROW_GAP,
    BACKWARD_TITLES,
    SHORT_BACKWARD_TITLES,
    SHORT_TITLES,
    TITLES,
)
from desktop.scene import geometry as geo
from desktop.scene.render import NUMBERS_CAP, live_tensors
from desktop.theme import dark_palette, qimage

LANE_TARGETS: tuple[str, ...] = ("both", "dense", "tiled")
REFERENCE = (1280.0, 720.0)  # the output size painted 1:1 (a 720p slide)
ZOOM_MIN = 0.75  # below this, text would be too small to read on a README column
FONT_PT = 9.0  # at 96 dpi: 12 px, the app's body text
BAR = 4.0  # the clip-position bar of animation frames
DPI = 96  # every device is set to 96 dpi, so points map to the same pixels everywhere


@dataclass(frozen=True)
class Frame:
    """What the lane painters read from the app's state, frozen for one exported frame.

    Painters read `images`, `row` and `progress` from LaneContext.state; a Frame stands in
    for the AppState so an export never moves the window's step."""

    trace: Trace
    images: object  # desktop.scene.render.LaneImages
    step: int
    row: int
    progress: float = 1.0


NARROWEST = 1040.0  # logical width below which the matrices' cells get too thin for numbers
HBM_CAP, SRAM_CAP = 240.0, 150.0  # tall tensors fill what is left rather than set the zoom


def natural_heights(trace: Trace) -> tuple[float, float]:
    """HBM and SRAM frame heights (logical px) that show every cell at its full height."""
    s = trace.schedule
    rows = max(s.n_q, s.n_k)
    hbm = 24 + min(rows * geo.MAX_CELL_H, HBM_CAP) + 12
    tile_rows = min(max(s.block_q, s.block_k), rows)
    sram = 4 + 18 + min(tile_rows * geo.MAX_CELL_H, SRAM_CAP) + 30
    return hbm, sram


CELL_FOR_DIGITS = 30.0  # a cell this wide holds 2 significant digits (painting.format_number)


def least_width(trace: Trace) -> float:
    """The logical width at which every HBM cell can hold its number: many tensors (the
    backward's gradients) need a wider page than the forward's few. Past NUMBERS_CAP
    columns numbers are not drawn anyway, so wide matrices do not count."""
    slots = geo.hbm_slots(trace)
    cols = sum(c for _, _, c in slots)
    if cols > NUMBERS_CAP:
        return NARROWEST
    need = cols * CELL_FOR_DIGITS + geo.GAP * (len(slots) - 1) + 40
    return max(NARROWEST, min(need, 2 * REFERENCE[0]))


def zoom_for(
    size: tuple[float, float], content_height: float | None = None, width: float = NARROWEST
) -> float:
    """Output pixels per logical pixel: 1 at 1280x720, growing with the slide; larger
    when the content is short (one lane on a wide slide), so it fills the slide; smaller
    when the tensors need a logical `width` beyond the output's."""
    base = min(size[0] / REFERENCE[0], size[1] / REFERENCE[1])
    fill = size[1] / content_height if content_height else base
    return max(ZOOM_MIN, min(size[0] / width, max(base, fill)))


def export_palette(theme: str) -> QPalette:
    """Light (Fusion's standard) by default; dark on request. Never the user's window's."""
    if theme == "dark":
        return dark_palette()
    return QStyleFactory.create("Fusion").standardPalette()


def export_font() -> QFont:
    font = QFont("DejaVu Sans")
    font.setPointSizeF(FONT_PT)
    return font


@dataclass
class LanePainter:
    """Paints one lane of a Frame inside a logical rectangle (origin at 0, 0)."""

    frame: Frame
    lane: str
    palette: QPalette
    font: QFont
    width: float
    height: float
    number_min_px: float | None = None  # LaneContext.number_min_px

    def __post_init__(self) -> None:
        self.images = {
            name: qimage(t.rgba) for name, t in self.frame.images.lanes[self.lane].items()
        }
        self.live = live_tensors(self.frame.trace, self.lane)

    # ---- geometry (as LaneView._frames, with the "now:" line on a line of its own) ----
    def now_text(self) -> str:
        action = self.frame.trace.steps[self.frame.step].action(self.lane)
        return f"now: {action.label}" if action is not None else "done"

    def header_height(self) -> float:
        """Title line plus the "now:" line, wrapped to the lane's width (never cut)."""
        italic = QFont(self.font)
        italic.setItalic(True)
        fm = QFontMetricsF(italic)
        box = fm.boundingRect(
            QRectF(0, 0, self.width - 16, 1000), Qt.TextFlag.TextWordWrap, self.now_text()
        )
        return 24 + max(fm.height(), box.height()) + 2

    def frames(self) -> tuple[QRectF, QRectF]:
        top = self.header_height()
        body = self.height - top - 4
        hbm_nat, sram_nat = natural_heights(self.frame.trace)
        extra = body - ARROW_GAP - hbm_nat - sram_nat
        if extra >= 0:  # room to spare: each frame its natural height, the rest shared
            hbm_h = hbm_nat + extra / 2
        else:
            hbm_h = max(90.0, (body - ARROW_GAP) * 0.58)
        hbm = QRectF(6, top, self.width - 12, hbm_h)
        sram_top = hbm.bottom() + ARROW_GAP
        return hbm, QRectF(6, sram_top, self.width - 12, max(60.0, self.height - sram_top - 2))

    def context(self, hbm: QRectF) -> LaneContext:
        area = hbm.adjusted(24, 24, -10, -6)
        rects = geo.layout_hbm(geo.hbm_slots(self.frame.trace), area)
        return LaneContext(
            state=self.frame,  # type: ignore[arg-type]  (a frozen stand-in: images, row, progress)
            lane=self.lane,
            palette=self.palette,
            font=self.font,
            images=self.images,
            live=self.live,
            rects=rects,
            number_min_px=self.number_min_px,
        )

    # ---- painting ------------------------------------------------------------------
    def paint_static(self, p: QPainter, vector: bool = False) -> None:
        """Frames, heatmaps, numbers, grid: what stays fixed for the trace and size (on a
        vector page, painted per step without the numbers not written yet)."""
        hbm, sram = self.frames()
        ctx = self.context(hbm)
        p.fillRect(
            QRectF(0, 0, self.width, self.height), self.palette.color(QPalette.ColorRole.Window)
        )
        hbm_painter.paint_frame(p, ctx, hbm, "HBM (off chip)")
        hbm_painter.paint_frame(p, ctx, sram, "SRAM (on chip)")
        hbm_painter.paint_hbm(p, ctx, self.frame.trace, self.frame.step if vector else None)

    def paint_step(self, p: QPainter) -> None:
        """What changes with the step: title and "now:", live state, veils, row, SRAM."""
        trace, step = self.frame.trace, self.frame.step
        hbm, sram = self.frames()
        ctx = self.context(hbm)
        self.paint_title(p)
        hbm_painter.paint_live(p, ctx, trace, step)
        hbm_painter.paint_veils(p, ctx, step)
        hbm_painter.paint_row(p, ctx, trace)
        tiles = sram_painter.paint_sram(p, ctx, trace, step, sram, sram_painter.TileImages())
        sram_painter.paint_transfers(p, ctx, trace, step, tiles)

    def paint_title(self, p: QPainter) -> None:
        trace, step = self.frame.trace, self.frame.step
        text = self.palette.color(QPalette.ColorRole.WindowText)
        line = QRectF(8, 2, self.width - 16, 22)
        action = trace.steps[step].action(self.lane)
        backward = trace.pass_name == "backward" or (
            trace.pass_name == "training" and (action is None or action.phase in BACKWARD_PHASES)
        )  # as LaneView: a training step's lanes are named by the pass they are in
        titles, short = (
            (BACKWARD_TITLES, SHORT_BACKWARD_TITLES) if backward else (TITLES, SHORT_TITLES)
        )
        order = ""
        if self.lane == "tiled" and not backward:
            order = f" ({'Q-outer' if trace.schedule.order == 'q-outer' else 'KV-outer'})"
        total = f"HBM transfers: {trace.totals_at(step)[self.lane]:,}"
        bold = QFont(self.font)
        bold.setBold(True)
        room = line.width() - QFontMetricsF(self.font).horizontalAdvance(total) - 24
        title = titles[self.lane] + order
        if QFontMetricsF(bold).horizontalAdvance(title) > room:
            title = short[self.lane] + order  # the name only: the tagline would overrun
        p.setFont(bold)
        p.setPen(text)
        p.drawText(line, Qt.AlignmentFlag.AlignVCenter, title)
        p.setFont(self.font)
        p.drawText(line, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight, total)
        italic = QFont(self.font)
        italic.setItalic(True)
        p.setFont(italic)
        p.setPen(self.palette.color(QPalette.ColorRole.Highlight))
        now = QRectF(8, 24, self.width - 16, self.header_height() - 24)
        p.drawText(now, Qt.TextFlag.TextWordWrap | Qt.AlignmentFlag.AlignTop, self.now_text())
        p.setFont(self.font)


def lane_rects(target: str, width: float, height: float) -> list[tuple[str, QRectF]]:
    """Where each lane goes: one lane fills the area; both stack, dense above tiled."""
    if target in ("dense", "tiled"):
        return [(target, QRectF(0, 0, width, height))]
    half = (height - 4) / 2
    return [("dense", QRectF(0, 0, width, half)), ("tiled", QRectF(0, half + 4, width, half))]


class LaneCanvas:
    """A lane target laid out at a logical size; paints any Frame of one trace onto a painter.

    For raster output the fixed layer is painted once per canvas into an image (as the
    view caches it); for vector output everything is painted directly, so nothing is a
    bitmap but the heatmaps too dense for cells."""

    def __init__(
        self,
        trace: Trace,
        target: str,
        size: tuple[int, int],
        theme: str = "light",
        *,
        lines: int = 1,
        number_min_px: float | None = None,
    ) -> None:
        """`lines`: caption lines under the lanes (0: none; animations 1, stills 2);
        `number_min_px`: cell numbers smaller than this on the output are left out."""
        self.target, self.size, self.lines = target, size, lines
        self.number_min_px = number_min_px
        self.palette = export_palette(theme)
        self.font = export_font()
        hbm, sram = natural_heights(trace)
        n_lanes = 1 if target in ("dense", "tiled") else 2
        header = 24 + 2 * QFontMetricsF(self.font).lineSpacing() + 6
        content = n_lanes * (header + hbm + ARROW_GAP + sram + 6) + self.footer_height()
        # The least height that shows both frames whole (LanePainter.frames' minimums):
        # a short output shrinks below ZOOM_MIN rather than cut the SRAM frame off.
        least = n_lanes * (header + 90 + ARROW_GAP + 60 + 10) + self.footer_height()
        self.zoom = min(zoom_for(size, content, least_width(trace)), size[1] / least)
        self.logical = (size[0] / self.zoom, size[1] / self.zoom)
        self._static: dict[tuple, QImage] = {}

    def lanes_height(self) -> float:
        return self.logical[1] - self.footer_height()

    def footer_height(self) -> float:
        if not self.lines:
            return 0.0
        return QFontMetricsF(self.font).lineSpacing() * self.lines + 10 + BAR

    def _painters(self, frame: Frame) -> list[tuple[LanePainter, QRectF]]:
        w, h = self.logical[0], self.lanes_height()
        return [
            (
                LanePainter(
                    frame, lane, self.palette, self.font, r.width(), r.height(), self.number_min_px
                ),
                r,
            )
            for lane, r in lane_rects(self.target, w, h)
        ]

    def _static_image(self, frame: Frame) -> QImage:
        """The fixed layer for this trace and row, painted once at the output's pixel size."""
        key = (id(frame.trace), frame.row)
        image = self._static.get(key)
        if image is None:
            self._static.clear()
            image = new_image(self.size, self.palette.color(QPalette.ColorRole.Window))
            p = begin(image)
            p.scale(self.zoom, self.zoom)
            for lane, rect in self._painters(frame):
                p.save()
                p.translate(rect.topLeft())
                lane.paint_static(p)
                p.restore()
            p.end()
            self._static[key] = image
        return image

    def paint(
        self,
        p: QPainter,
        frame: Frame,
        *,
        fraction: float | None = None,
        vector: bool = False,
    ) -> None:
        """The whole frame at output size: lanes, the caption footer, the clip bar."""
        window = self.palette.color(QPalette.ColorRole.Window)
        if vector:
            p.fillRect(QRectF(0, 0, self.size[0], self.size[1]), window)
        else:
            p.drawImage(0, 0, self._static_image(frame))
        p.save()
        p.scale(self.zoom, self.zoom)
        for lane, rect in self._painters(frame):
            p.save()
            p.translate(rect.topLeft())
            if vector:
                lane.paint_static(p, vector=True)
            lane.paint_step(p)
            p.restore()
        if self.lines:
            self._paint_footer(p, step_caption(frame.trace, frame.step, self.target), fraction)
        p.restore()

    def _paint_footer(self, p: QPainter, caption: str, fraction: float | None) -> None:
        w, top = self.logical[0], self.lanes_height()
        text = self.palette.color(QPalette.ColorRole.WindowText)
        p.setPen(text)
        p.setFont(self.font)
        line = QRectF(8, top + 4, w - 16, self.footer_height() - 4 - BAR)
        if self.lines == 1:  # animations: one line, so every frame keeps the same layout
            caption = p.fontMetrics().elidedText(
                caption, Qt.TextElideMode.ElideRight, int(line.width())
            )
        flags = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft
        p.drawText(line, flags | Qt.TextFlag.TextWordWrap, caption)
        if fraction is not None:
            # The bar advances every frame, so held frames differ (GIF writers keep each
            # one) and a viewer of a looping GIF sees where in the clip it is.
            track = QColor(text)
            track.setAlpha(40)
            y = self.logical[1] - BAR
            p.fillRect(QRectF(0, y, w, BAR), track)
            p.fillRect(QRectF(0, y, w * fraction, BAR), QColor("#4393c3"))


def new_image(size: tuple[int, int], fill: QColor) -> QImage:
    image = QImage(size[0], size[1], QImage.Format.Format_RGB888)
    dots = round(DPI / 0.0254)
    image.setDotsPerMeterX(dots)
    image.setDotsPerMeterY(dots)
    image.fill(fill)
    return image


def begin(device) -> QPainter:
    p = QPainter(device)
    p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
    return p


def grid_shape(n: int) -> tuple[int, int]:
    """Columns and rows for n storyboard panels: as square as possible, filled row by row."""
    cols = max(1, math.ceil(math.sqrt(n)))
    return cols, math.ceil(n / cols)


def step_caption(trace: Trace, step: int, target: str) -> str:
    """The footer's sentence: the step of both lanes, or of the one lane a frame shows
    (a tiled lane's frame said what the dense lane did)."""
    k = trace.steps[step]
    if target not in ("dense", "tiled"):
        return k.describe()
    action = k.dense if target == "dense" else k.tiled
    return f"Step {step + 1}. {target}: {action.label if action is not None else 'done'}"
