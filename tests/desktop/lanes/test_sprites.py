"""Strokes copied from their first drawing are the pixels of drawing them again."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPen

from desktop.lanes.painting import draw_arrow, draw_outline, transfer_path
from desktop.lanes.sprites import Sprites


def _background(seed: int) -> QImage:
    rgba = np.random.default_rng(seed).integers(0, 256, size=(160, 240, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    img = QImage(rgba.data, 240, 160, 240 * 4, QImage.Format.Format_RGBA8888)
    return img.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)


def _paint(background: QImage, draw, scale: float = 1.0) -> QImage:
    out = background.copy()
    p = QPainter(out)
    p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    p.scale(scale, scale)
    draw(p)
    p.end()
    return out


RECTS = [QRectF(10.3, 12.7, 150.2, 90.1), QRectF(40.5, 30.25, 6.2, 5.1), QRectF(3, 4, 120, 1.5)]
PENS = [
    QPen(QColor(20, 20, 20, 150), 1.2, Qt.PenStyle.DashLine),
    QPen(QColor(200, 40, 40), 2.5),
    QPen(QColor(0, 90, 200, 90), 1.0, Qt.PenStyle.DashLine),  # 1 px: drawn, not copied
]


@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_outlines_copied_equal_outlines_drawn(qapp, scale):
    sprites = Sprites()
    for k in range(3):  # the second and third rounds copy what the first made
        bg = _background(k)
        for rect in RECTS:
            for pen in PENS:
                direct = _paint(bg, lambda p, r=rect, q=pen: draw_outline(p, r, q))
                copied = _paint(bg, lambda p, r=rect, q=pen: draw_outline(p, r, q, sprites), scale)
                if scale == 1.0:
                    assert copied == direct
                else:  # another pixel ratio: drawn as it is, never a copy
                    assert copied == _paint(
                        bg, lambda p, r=rect, q=pen: draw_outline(p, r, q), scale
                    )
    assert scale != 1.0 or len(sprites._held) == len(RECTS) * 2


@pytest.mark.parametrize("progress", [0.0, 0.5, 1.0])
def test_arrows_copied_equal_arrows_drawn(qapp, progress):
    sprites = Sprites()
    for k in range(2):
        bg = _background(10 + k)
        for start, end, toward in (
            (QPointF(20.3, 10.2), QPointF(200.7, 140.4), True),
            (QPointF(180.1, 20.9), QPointF(30.6, 120.2), False),
            (QPointF(100.5, 5.5), QPointF(100.5, 150.5), True),
        ):
            path = transfer_path(start, end)
            key = (start.x(), start.y(), end.x(), end.y(), toward)
            args = (path, QColor(30, 160, 60), toward, progress)
            direct = _paint(bg, lambda p, a=args: draw_arrow(p, *a))
            copied = _paint(bg, lambda p, a=args, k=key: draw_arrow(p, *a, sprites, k))
            assert copied == direct
    assert len(sprites._held) == 3


def test_the_oldest_strokes_go_past_the_byte_limit(qapp):
    sprites = Sprites(max_bytes=20_000)
    bg = _background(0)
    pen = PENS[0]
    for k in range(6):
        rect = QRectF(5 + k, 5, 100, 80)
        for _again in range(2):  # an image is made the second time
            _paint(bg, lambda p, r=rect: draw_outline(p, r, pen, sprites))
    assert 1 <= len(sprites._held) < 6 and sprites._bytes <= 20_000


def test_a_stroke_drawn_once_keeps_no_image(qapp):
    sprites = Sprites()
    bg = _background(1)
    _paint(bg, lambda p: draw_outline(p, RECTS[0], PENS[0], sprites))
    assert not sprites._held
    _paint(bg, lambda p: draw_outline(p, RECTS[0], PENS[0], sprites))
    assert len(sprites._held) == 1
