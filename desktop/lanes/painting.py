"""Small QPainter helpers shared by the lanes: matrices with numbers, veils, arrows.

Each function draws one thing into a given rectangle and keeps no state, so a lane's
paintEvent reads as a list of what is on screen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QImage,
    QPaintEngine,
    QPainter,
    QPainterPath,
    QPen,
    QPolygonF,
)

from desktop.lanes.sprites import Sprites, can_copy
from desktop.scene.render import ColorScale
from desktop.theme import qimage

# Numbers go in cells wherever a 7 px digit fits: a cell at least NUMBER_MIN_H tall,
# and per cell a form of its value that leaves NUMBER_GAP px to each neighbour; a cell
# too narrow for any form stays a colour (never text running into the next one).
NUMBER_MIN_PX, NUMBER_MAX_PX = 7, 12
NUMBER_MIN_W, NUMBER_MIN_H = 9.0, 9.0
NUMBER_GAP = 1.5
NEUTRAL = QColor(225, 225, 215)  # matches the ℓ and L columns in HBM
WHITE, DARK = QColor("white"), QColor(20, 20, 20)  # numbers on dark and light cells


def _short_exponent(text: str) -> str:
    """'7.4e-04' -> '7.4e-4', '1e+04' -> '1e4': the exponent without padding or plus sign."""
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else text


def number_forms(x: float, width: float, short: bool = False) -> list[str]:
    """The ways a cell may write x, most precise first (`short`: the exponent forms too)."""
    if math.isinf(x):
        return ["−∞" if x < 0 else "∞"]
    forms = [f"{x:.3g}", f"{x:.2g}"] if width >= 36 else [f"{x:.2g}"]
    if short:
        forms += _exponent_forms(x)
    return [f.replace("-", "−") for f in forms]


def _exponent_forms(x: float) -> list[str]:
    return [_short_exponent(f"{x:{spec}}") for spec in (".2g", ".1e", ".1g", ".0e")]


def format_number(x: float, width: float, advance: Callable[[str], float] | None = None) -> str:
    """Compact cell text: 3 significant digits when the cell is wide, 2 otherwise.

    With `advance` (text -> its drawn width), digits are dropped until the text fits
    `width`, so a small value such as 0.00074 reads 7.4e−4 or 7e−4 instead of spilling
    into its neighbours; when nothing fits, the shortest form.
    """
    forms = number_forms(x, width)
    if advance is None:
        return forms[0]
    # NUMBER_GAP of margin each side, so neighbouring numbers never touch. A paint writes
    # up to 4096 cells and the plain forms nearly always fit: the exponent forms are made
    # and measured only when they do not.
    room = width - 2 * NUMBER_GAP
    for form in forms:
        if advance(form) <= room:
            return form
    if math.isinf(x):
        return forms[0] if advance(forms[0]) <= room else ""
    short = [f.replace("-", "−") for f in _exponent_forms(x)]
    return next((f for f in short if advance(f) <= room), "")


VECTOR_CELLS_MAX = 64 * 64  # on SVG/PDF, heatmaps up to 64x64 cells are drawn as rectangles


def is_vector(painter: QPainter) -> bool:
    """Whether `painter` draws on an SVG or PDF (where cells should be shapes, not pixels)."""
    engine = painter.paintEngine()
    kinds = (QPaintEngine.Type.SVG, QPaintEngine.Type.Pdf)
    return engine is not None and engine.type() in kinds


def draw_image(painter: QPainter, rect: QRectF, image: QImage) -> None:
    """Cells stay crisp: nearest-neighbour scaling (no smoothing between cells).

    On a vector device each cell becomes a rectangle (runs of equal colour along a row
    merged), so a slide zooms without blur; denser heatmaps stay an embedded image at
    their full resolution."""
    if is_vector(painter) and image.width() * image.height() <= VECTOR_CELLS_MAX:
        draw_cells(painter, rect, image)
        return
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
    painter.drawImage(rect, image)


def paint_ready(image: QImage) -> QImage:
    """`image` in the raster engine's own format (premultiplied ARGB32), converted once:
    drawn as RGBA8888 it is converted again on every paint."""
    return image.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)


def draw_cells(painter: QPainter, rect: QRectF, image: QImage) -> None:
    """`image`'s pixels as filled rectangles over `rect` (transparent pixels skipped)."""
    if image.format() == QImage.Format.Format_ARGB32_Premultiplied:
        image = image.convertToFormat(QImage.Format.Format_ARGB32)  # pixel() is unpremultiplied
    rows, cols = image.height(), image.width()
    cw, ch = rect.width() / cols, rect.height() / rows
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)  # no hairline seams
    for r in range(rows):
        c = 0
        while c < cols:
            rgba = image.pixel(c, r)
            run = c + 1
            while run < cols and image.pixel(run, r) == rgba:
                run += 1
            color = QColor.fromRgba(rgba)
            if color.alpha():
                # Opaque cells overlap their right and lower neighbours by a hair, which
                # those paint over: viewers' antialiasing then leaves no seam between
                # them (translucent ones may not overlap: the overlap would show darker).
                grow = 0.4 if color.alpha() == 255 else 0.0
                w = (run - c) * cw + (grow if run < cols else 0.0)
                h = ch + (grow if r + 1 < rows else 0.0)
                painter.fillRect(QRectF(rect.left() + c * cw, rect.top() + r * ch, w, h), color)
            c = run
    painter.restore()


def draw_numbers(
    painter: QPainter,
    rect: QRectF,
    values: np.ndarray,
    scale: ColorScale,
    font: QFont,
    hidden: np.ndarray | None = None,
    least: float | None = None,
) -> None:
    """Write each value in its cell when the cells are large enough to read.

    `hidden` (same shape) marks cells whose value is not there yet (not written).
    `least`: the smallest size in device pixels worth drawing (a storyboard panel is
    shrunk onto its page); None keeps NUMBER_MIN_PX logical pixels.
    """
    rows, cols = values.shape
    cw, ch = rect.width() / cols, rect.height() / rows
    if cw < NUMBER_MIN_W or ch < NUMBER_MIN_H or rows * cols > 4096:
        return
    zoom = math.sqrt(abs(painter.worldTransform().determinant())) or 1.0
    px = number_px(cw, ch, None if least is None else least / zoom)
    if px is None:
        return
    f = QFont(font)
    f.setPixelSize(px)
    painter.setFont(f)
    advance = QFontMetricsF(f).horizontalAdvance
    center = Qt.AlignmentFlag.AlignCenter
    left, top, vmax = rect.left(), rect.top(), scale.vmax
    pen = None
    # Python floats, converted once rather than per cell (exactly: float16 and bfloat16
    # widen to float64 without rounding)
    cells = np.asarray(values, dtype=np.float64).tolist()
    skip = hidden.tolist() if hidden is not None else None
    for r in range(rows):
        row = cells[r]
        for c in range(cols):
            if skip is not None and skip[r][c]:
                continue
            x = row[c]
            dark_cell = math.isfinite(x) and abs(x) / vmax > 0.55
            text = format_number(x, cw, advance)
            if text:
                want = WHITE if dark_cell else DARK
                if want is not pen:  # one pen per run of light or dark cells
                    painter.setPen(want)
                    pen = want
                painter.drawText(QRectF(left + c * cw, top + r * ch, cw, ch), center, text)


def number_px(cw: float, ch: float, least: float | None = None) -> int | None:
    """The numbers' pixel size in cells of cw × ch px: as large as reads well, not below
    NUMBER_MIN_PX (a digit is about 0.6 of it wide; "0.53" about 2.5 of it). With
    `least` (logical px), at least that, or None where a number that tall overflows the
    cell (format_number then drops digits, or the whole number, to fit the width)."""
    px = int(max(NUMBER_MIN_PX, min(NUMBER_MAX_PX, ch * 0.6, cw / 2.8)))
    if least is None:
        return px
    px = max(px, math.ceil(least - 1e-9))
    return px if px <= ch * 0.85 else None


def draw_matrix(
    painter: QPainter,
    rect: QRectF,
    values: np.ndarray,
    scale: ColorScale,
    font: QFont,
    image: QImage | None = None,
    neutral: bool = False,
    least: float | None = None,
) -> None:
    """A heatmap of `values` (or a prepared image of them) with numbers when they fit.

    `neutral` paints a plain tint instead (ℓ is a sum of exponentials, not on the scale).
    """
    if neutral:
        painter.fillRect(rect, NEUTRAL)
        draw_numbers(painter, rect, values, ColorScale(np.inf), font, least=least)
        return
    draw_image(painter, rect, image if image is not None else qimage(scale.rgba(values)))
    draw_numbers(painter, rect, values, scale, font, least=least)


def veil_image(masks: tuple[np.ndarray, ...], colors: tuple[QColor, ...]) -> QImage:
    """A transparent image, `colors[k]` where `masks[k]` is True (cells not yet written);
    the masks are disjoint. One 8-bit indexed image for all of them: a playback frame
    makes and draws it for each tensor being written, and an RGBA image per mask cost
    ~1 ms apiece to fill and blend at 256 × 256 cells."""
    index = np.zeros(masks[0].shape, dtype=np.uint8)
    for k, mask in enumerate(masks, start=1):
        index[mask] = k
    h, w = index.shape
    image = QImage(index.data, w, h, w, QImage.Format.Format_Indexed8)
    image.setColorTable([0, *(c.rgba() for c in colors)])
    return paint_ready(image)  # a copy: owns its pixels (`index` is freed on return)


def draw_grid(
    painter: QPainter, rect: QRectF, shape: tuple[int, int], block: tuple[int, int], color: QColor
) -> None:
    """Block boundaries (every block[0] rows, block[1] columns) when at least 12 px apart
    (denser lines would stripe the heatmap rather than show its tiles)."""
    rows, cols = shape
    painter.setPen(QPen(color, 1.0))
    ch, cw = rect.height() / rows, rect.width() / cols
    if block[0] and block[0] * ch >= 12:
        for r in range(block[0], rows, block[0]):
            y = rect.top() + r * ch
            painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
    if block[1] and block[1] * cw >= 12:
        for c in range(block[1], cols, block[1]):
            x = rect.left() + c * cw
            painter.drawLine(QPointF(x, rect.top()), QPointF(x, rect.bottom()))


def highlight(painter: QPainter, rect: QRectF, color: QColor, fill_alpha: int = 70) -> None:
    """A translucent fill and a 2.5 px frame (a fill of alpha 0 changes no pixel)."""
    if fill_alpha > 0:
        fill = QColor(color)
        fill.setAlpha(fill_alpha)
        painter.fillRect(rect, fill)
    painter.setPen(QPen(color, 2.5))
    painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.drawRect(rect.adjusted(-1, -1, 1, 1))


def transfer_path(start: QPointF, end: QPointF) -> QPainterPath:
    """A gentle S-curve from the bottom of an HBM tensor down to its SRAM tile."""
    path = QPainterPath(start)
    mid = (start.y() + end.y()) / 2
    path.cubicTo(QPointF(start.x(), mid), QPointF(end.x(), mid), end)
    return path


def draw_arrow(
    painter: QPainter,
    path: QPainterPath,
    color: QColor,
    toward_end: bool,
    progress: float,
    sprites: Sprites | None = None,
    key: Hashable = None,
) -> None:
    """The transfer's path with a head at its destination and, mid-step, a moving packet.
    With `sprites`, the path and head are copied from the images made the first time
    this `key` (everything the path depends on) was drawn (desktop.lanes.sprites)."""
    c = QColor(color)
    c.setAlpha(210)
    pen = QPen(c, 2.5, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap)
    at = 1.0 if toward_end else 0.0
    tip = path.pointAtPercent(at)
    angle = math.radians(-path.angleAtPercent(at)) + (0.0 if toward_end else math.pi)
    head = QPolygonF(
        [
            tip,
            tip - QPointF(math.cos(angle - 0.45) * 10, math.sin(angle - 0.45) * 10),
            tip - QPointF(math.cos(angle + 0.45) * 10, math.sin(angle + 0.45) * 10),
        ]
    )
    if sprites is None or not can_copy(painter):
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(path)
        painter.setBrush(c)
        painter.drawPolygon(head)
    else:

        def line(p: QPainter) -> None:
            p.setPen(pen)
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawPath(path)

        def head_fill(p: QPainter) -> None:  # drawPolygon fills, then strokes: two fills
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(c)
            p.drawPolygon(head)

        def head_line(p: QPainter) -> None:
            p.setPen(pen)
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawPolygon(head)

        bounds = path.boundingRect().united(head.boundingRect()).adjusted(-2.5, -2.5, 2.5, 2.5)
        sprites.draw(painter, ("arrow", key, c.rgba()), bounds, (line, head_fill, head_line))
        painter.setPen(pen)  # as the direct drawing leaves them, for the packet
        painter.setBrush(c)
    if 0.0 < progress < 1.0:
        p = path.pointAtPercent(progress if toward_end else 1.0 - progress)
        painter.setPen(QPen(QColor(0, 0, 0, 120), 1))
        painter.drawRoundedRect(QRectF(p.x() - 6, p.y() - 4, 12, 8), 2, 2)


def draw_outline(
    painter: QPainter, rect: QRectF, pen: QPen, sprites: Sprites | None = None
) -> None:
    """`rect`'s outline in `pen` (no fill); copied from `sprites` where its pixels can be
    (a pen wider than 1 px: desktop.lanes.sprites)."""
    painter.setPen(pen)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    if sprites is None or pen.widthF() <= 1.0:
        painter.drawRect(rect)
        return

    def outline(p: QPainter) -> None:
        p.setPen(pen)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRect(rect)

    key = (
        "outline", rect.x(), rect.y(), rect.width(), rect.height(), pen.color().rgba(),
        pen.widthF(), pen.style(), pen.capStyle(), pen.joinStyle(),
    )  # fmt: skip
    sprites.draw(painter, key, rect, (outline,), frame=pen.widthF())


def draw_fitted_text(painter: QPainter, rect: QRectF, text: str, align: Qt.AlignmentFlag) -> str:
    """Draw the whole sentence in `rect`: on one line where it fits, else wrapped at a
    smaller size; elided only if even that cannot hold it. Returns what was drawn.

    Exported frames have no tooltips, so a cut sentence would be lost there.
    """
    font = QFont(painter.font())
    flags = int(align | Qt.AlignmentFlag.AlignVCenter)
    if painter.fontMetrics().horizontalAdvance(text) <= rect.width():
        painter.drawText(rect, flags, text)
        return text
    small = QFont(font)
    small.setPointSizeF(max(6.5, font.pointSizeF() * 0.82))
    painter.setFont(small)
    wrap = flags | int(Qt.TextFlag.TextWordWrap)
    need = painter.boundingRect(QRectF(rect.left(), 0, rect.width(), 1000), wrap, text)
    if need.height() > rect.height() + 2:
        text = painter.fontMetrics().elidedText(
            text, Qt.TextElideMode.ElideRight, int(2 * rect.width() - 8)
        )
    painter.drawText(rect, wrap, text)
    painter.setFont(font)
    return text
