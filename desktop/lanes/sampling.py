"""Draw a SampledRegion as its whole heatmap would be drawn, making only the cells seen.

A raster painter draws an image scaled into a rectangle by nearest-neighbour sampling
(draw_image turns smoothing off): each device pixel shows one source pixel, chosen by
Qt's fixed-point stepping from the rectangle's device coordinates. Which ones is found
by drawing a probe through the same transform onto a scratch image of the device's
size: a probe whose pixel (r, c) holds r (then c) in its colour bits, opaque, so
source-over copies it unchanged. The region then makes the cells at those rows and
columns only, and they are written into an otherwise transparent image of the region's
size: drawn with the same call, it puts the same colour on every pixel as the whole
heatmap (the pixels it reads are those), at the cost of the cells seen. The picks are
kept per shape, rectangle and transform (a playback frame draws the same slot again).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from PySide6.QtCore import QRectF
from PySide6.QtGui import QImage, QPaintEngine, QPainter, QTransform

from desktop.scene.render import ColorScale
from desktop.scene.sampled_region import SampledRegion
from desktop.theme import qimage

ARGB = QImage.Format.Format_ARGB32_Premultiplied
_INDEX_BITS = 0xFFFFFF  # a probe pixel's index: its 24 colour bits (16 M rows or columns)
# The probes are drawn on scratch images of the device's size: a lane is ~1366 × 400 px;
# a 4K export's page draws its regions whole rather than take two 33 MB scratches.
SCRATCH_PIXELS = 1 << 22


class SampledPicks:
    """The source rows and columns a raster paint reads, per shape, rectangle and
    transform; the last few kept."""

    LIMIT = 16

    def __init__(self) -> None:
        self._picks: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def get(self, painter: QPainter, rect: QRectF, shape: tuple[int, int]):
        """(rows, cols): the sorted source indices read, or None when the painter is not
        a plain raster one (a vector device, a clip, another composition mode, a
        rotation: Qt takes other paths there) or its device is too large for a scratch
        copy: draw the whole."""
        t = painter.worldTransform()
        engine = painter.paintEngine()
        device = painter.device()
        if (
            engine is None
            or engine.type() != QPaintEngine.Type.Raster
            or device.width() * device.height() > SCRATCH_PIXELS
            or painter.hasClipping()
            or painter.compositionMode() != QPainter.CompositionMode.CompositionMode_SourceOver
            or t.type().value > QTransform.TransformationType.TxScale.value
        ):
            return None
        key = (
            shape, rect.getRect(), device.width(), device.height(), device.devicePixelRatio(),
            t.m11(), t.m22(), t.dx(), t.dy(),
        )  # fmt: skip
        found = self._picks.get(key)
        if found is None:
            found = self._picks[key] = _probe(painter, rect, shape)
            if len(self._picks) > self.LIMIT:
                self._picks.popitem(last=False)
        else:
            self._picks.move_to_end(key)
        return found


def _probe(painter: QPainter, rect: QRectF, shape: tuple[int, int]):
    device = painter.device()
    rows, cols = shape
    picked = []
    for axis, count in ((0, rows), (1, cols)):
        index = np.arange(count, dtype=np.uint32)
        bits = index[:, None] if axis == 0 else index[None, :]
        probe = np.broadcast_to(np.uint32(0xFF000000) | bits, shape).copy()
        image = QImage(probe.data, cols, rows, cols * 4, ARGB)
        scratch = QImage(device.width(), device.height(), ARGB)
        scratch.setDevicePixelRatio(device.devicePixelRatio())
        scratch.fill(0)
        q = QPainter(scratch)
        q.setRenderHints(painter.renderHints())
        q.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        q.setWorldTransform(painter.worldTransform())
        q.drawImage(rect, image)
        q.end()
        px = np.frombuffer(scratch.constBits(), np.uint32).reshape(scratch.height(), -1)
        seen = px[(px >> 24) == 0xFF] & _INDEX_BITS
        picked.append(np.unique(seen).astype(np.intp))
    return picked[0], picked[1]


def draw_sampled(
    painter: QPainter, rect: QRectF, region: SampledRegion, scale: ColorScale, picks: SampledPicks
) -> bool:
    """Draw the region's heatmap into `rect` as draw_image draws the whole one, making
    only the cells it reads; False (nothing drawn) where the painter needs the whole."""
    found = picks.get(painter, rect, region.shape)
    if found is None:
        return False
    rows, cols = found
    out = np.zeros(region.shape, dtype=np.uint32)  # transparent where nothing is read
    if len(rows) and len(cols):
        seen = qimage(scale.rgba(region.cells(rows, cols))).convertToFormat(ARGB)
        colours = np.frombuffer(seen.constBits(), np.uint32).reshape(seen.height(), -1)
        out[np.ix_(rows, cols)] = colours[:, : len(cols)]
    image = QImage(out.data, out.shape[1], out.shape[0], out.shape[1] * 4, ARGB)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
    painter.drawImage(rect, image)  # draw_image's call, while `out` holds the pixels
    return True
