"""Strokes drawn once and then copied: dashed outlines and transfer arrows.

The lanes draw the same dashed outline around a resident block, and the same arrow from
an HBM region to its SRAM tile, on many steps in a row (Q_i for a whole block, K_j again
on every block). Stroking them is the expensive part (a dashed outline of a 400 × 150
px block ~0.3 ms, an arrow ~0.2 ms; a blit of the stroke ~10 µs). A stroke whose pixels
come from one fill of its outline (a pen wider than 1 px, solid or dashed: the raster
engine fills the stroker's outline once) blends into the frame exactly as its image made
on a transparent background does (source-over, premultiplied: src + dst·(1 − αsrc) with
the same src either way), so the copy is pixel-identical to stroking again. The image is
made the second time a stroke is drawn (most strokes of a moving block are drawn once).
Pens of 1 px or less take the raster engine's line path, whose spans may overlap: those
are drawn as they are, as is anything drawn under a transform other than the identity
(another pixel ratio, an export), a clip or another composition mode.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable

from PySide6.QtCore import QPoint, QRect, QRectF
from PySide6.QtGui import QImage, QPainter, QTransform

PAD = 2  # px of antialiasing and round caps beyond a stroke's geometric bounds
MAX_BYTES = 8 * 2**20  # images held per cache (a lane's); the oldest go first
SEEN = 4096  # keys remembered as drawn once (an image is made the second time)
PLAIN = QTransform.TransformationType.TxNone
SOURCE_OVER = QPainter.CompositionMode.CompositionMode_SourceOver

Draw = Callable[[QPainter], None]


def can_copy(painter: QPainter) -> bool:
    """Whether a stroke's image can stand in for drawing it on `painter` (see the module)."""
    return (
        painter.deviceTransform().type() == PLAIN
        and not painter.hasClipping()
        and painter.compositionMode() == SOURCE_OVER
        and painter.opacity() == 1.0
    )


class Sprites:
    """Images of single-fill strokes by key (everything a stroke's pixels depend on),
    with the device pixels they cover; least recently drawn dropped past MAX_BYTES."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[Hashable, list[tuple[QPoint, QImage]]] = OrderedDict()
        self._seen: OrderedDict[Hashable, None] = OrderedDict()  # keys drawn once so far
        self._bytes = 0

    def draw(
        self, painter: QPainter, key: Hashable, bounds: QRectF, passes: tuple[Draw, ...],
        frame: float | None = None,
    ) -> None:  # fmt: skip
        """Each of `passes` (one fill each, in order) as drawn on `painter` within
        `bounds`. With `frame` (a rectangle's stroke reach), only the bands around the
        edges of `bounds` are kept and copied: its inside is left untouched."""
        if not can_copy(painter):
            for draw in passes:
                draw(painter)
            return
        parts = self._held.get(key)
        if parts is None and key not in self._seen:
            # Seen once: drawn as it is. Most strokes of a moving block are never drawn
            # again, and making an image of one costs more than stroking it.
            self._seen[key] = None
            if len(self._seen) > SEEN:
                self._seen.popitem(last=False)
            for draw in passes:
                draw(painter)
            return
        if parts is None:
            parts = self._make(bounds, passes, frame)
            self._held[key] = parts
            self._bytes += sum(img.sizeInBytes() for _at, img in parts)
            while self._bytes > self.max_bytes and len(self._held) > 1:
                _key, old = self._held.popitem(last=False)
                self._bytes -= sum(img.sizeInBytes() for _at, img in old)
        else:
            self._held.move_to_end(key)
        for at, img in parts:
            painter.drawImage(at, img)

    @staticmethod
    def _make(
        bounds: QRectF, passes: tuple[Draw, ...], frame: float | None
    ) -> list[tuple[QPoint, QImage]]:
        x0, y0 = math.floor(bounds.left()) - PAD, math.floor(bounds.top()) - PAD
        x1, y1 = math.ceil(bounds.right()) + PAD, math.ceil(bounds.bottom()) + PAD
        box = QRect(x0, y0, x1 - x0, y1 - y0)
        pieces = [box]
        if frame is not None:
            # The inside of a rectangle's outline: no pixel there is touched.
            ix0, iy0 = math.ceil(bounds.left() + frame) + 1, math.ceil(bounds.top() + frame) + 1
            ix1 = math.floor(bounds.right() - frame) - 1
            iy1 = math.floor(bounds.bottom() - frame) - 1
            if ix1 - ix0 > 8 and iy1 - iy0 > 8:
                pieces = [
                    QRect(x0, y0, x1 - x0, iy0 - y0),  # top band, full width
                    QRect(x0, iy1, x1 - x0, y1 - iy1),  # bottom band
                    QRect(x0, iy0, ix0 - x0, iy1 - iy0),  # left, between the bands
                    QRect(ix1, iy0, x1 - ix1, iy1 - iy0),  # right
                ]
        out = []
        for draw in passes:
            img = QImage(box.width(), box.height(), QImage.Format.Format_ARGB32_Premultiplied)
            img.fill(0)
            p = QPainter(img)
            p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            p.translate(-x0, -y0)
            draw(p)
            p.end()
            for piece in pieces:
                part = img if piece == box else img.copy(piece.translated(-x0, -y0))
                out.append((piece.topLeft(), part))
        return out
