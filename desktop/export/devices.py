"""Paint pages onto an output file's device: a raster image, an SVG or a (multi-page) PDF.

Every device is drawn into memory and returned as bytes, so the caller writes the file
atomically and checks every write. All devices work at 96 dpi, so a font's point size
lands on the same pixels in a PNG, an SVG and a PDF.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF, QRect, QSize, QSizeF
from PySide6.QtGui import QColor, QImage, QPageLayout, QPageSize, QPainter, QPdfWriter

from desktop.export.atomic import ExportError
from desktop.export.canvas import DPI, begin, new_image
from desktop.export.frames import png_bytes

Paint = Callable[[QPainter], None]  # paints one page at its output size, origin top left
VECTOR_SUFFIXES = (".svg", ".pdf")


def image_of(size: tuple[int, int], paint: Paint, fill: QColor) -> QImage:
    image = new_image(size, fill)
    p = begin(image)
    paint(p)
    p.end()
    return image


def svg_bytes(size: tuple[int, int], paint: Paint, *, description: str = "") -> bytes:
    """One page as SVG: shapes and text, as the painters drew them."""
    from PySide6.QtSvg import QSvgGenerator

    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    generator = QSvgGenerator()
    generator.setOutputDevice(buffer)
    generator.setResolution(DPI)
    generator.setSize(QSize(*size))
    generator.setViewBox(QRect(0, 0, *size))
    generator.setTitle("FlashAttention Explorer")
    generator.setDescription(description)
    p = begin(generator)
    paint(p)
    if not p.end():
        raise ExportError("Qt could not finish drawing the SVG; try PNG instead.")
    return bytes(buffer.data())


def pdf_bytes(size: tuple[int, int], pages: Sequence[Paint], *, title: str = "") -> bytes:
    """Pages of `size` pixels (at 96 dpi) as one PDF; text stays text (searchable)."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QPdfWriter(buffer)
    writer.setResolution(DPI)
    writer.setCreator("FlashAttention Explorer")
    writer.setTitle(title or "FlashAttention Explorer")
    points = QSizeF(size[0] * 72 / DPI, size[1] * 72 / DPI)
    writer.setPageLayout(
        QPageLayout(
            QPageSize(points, QPageSize.Unit.Point, "", QPageSize.SizeMatchPolicy.ExactMatch),
            QPageLayout.Orientation.Portrait,
            QMarginsF(0, 0, 0, 0),
        )
    )
    p = begin(writer)
    for index, paint in enumerate(pages):
        if index:
            writer.newPage()
        paint(p)
    if not p.end():
        raise ExportError("Qt could not finish drawing the PDF; try PNG instead.")
    buffer.close()
    return bytes(data)


def still_bytes(
    suffix: str, size: tuple[int, int], paint: Paint, fill: QColor, *, description: str = ""
) -> bytes:
    """One page to the format that `suffix` names (.png, .svg, .pdf)."""
    if suffix == ".svg":
        return svg_bytes(size, paint, description=description)
    if suffix == ".pdf":
        return pdf_bytes(size, [paint], title=description)
    return png_bytes(image_of(size, paint, fill))
