"""What the lanes cache or convert to paint faster still paints the same thing."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor, QImage

from desktop.lanes.painting import draw_cells, paint_ready, veil_image
from desktop.theme import qimage


def test_one_veil_image_holds_both_masks_in_their_colours(qapp):
    never = np.zeros((3, 5), bool)
    partial = np.zeros((3, 5), bool)
    never[2, :] = True
    partial[1, 3:] = True
    opaque, translucent = QColor(10, 200, 30, 255), QColor(250, 240, 230, 150)
    image = veil_image((never, partial), (opaque, translucent))
    assert (image.width(), image.height()) == (5, 3)
    for r in range(3):
        for c in range(5):
            got = image.pixelColor(c, r)
            if never[r, c]:
                assert got.rgba() == opaque.rgba()
            elif partial[r, c]:
                assert got.alpha() == 150
                for a, b in zip(got.getRgb()[:3], translucent.getRgb()[:3], strict=True):
                    assert abs(a - b) <= 1  # premultiplied storage rounds
            else:
                assert got.alpha() == 0


def test_a_paint_ready_image_keeps_every_pixel(qapp):
    rgba = np.random.default_rng(3).integers(0, 256, size=(4, 6, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    ready = paint_ready(qimage(rgba))
    assert ready.format() == QImage.Format.Format_ARGB32_Premultiplied
    for r in range(4):
        for c in range(6):
            assert ready.pixelColor(c, r).getRgb() == tuple(int(x) for x in rgba[r, c])


def test_vector_cells_of_a_premultiplied_image_have_the_straight_colour(qapp):
    """draw_cells reads pixel(): of a premultiplied image that is darker than the colour
    unless converted back."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QPainter

    veil = veil_image((np.ones((1, 1), bool),), (QColor(200, 100, 50, 128),))
    target = QImage(4, 4, QImage.Format.Format_ARGB32)
    target.fill(0)
    p = QPainter(target)
    p.setCompositionMode(QPainter.CompositionMode.CompositionMode_Source)
    draw_cells(p, QRectF(0, 0, 4, 4), veil)
    p.end()
    got = target.pixelColor(1, 1)
    assert got.alpha() == 128
    assert abs(got.red() - 200) <= 2 and abs(got.green() - 100) <= 2
