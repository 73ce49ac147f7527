"""SRAM tile labels over narrow columns: shortened until no two neighbours touch, whole
where they fit, and the tiles' order in the list is not their order on screen."""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import QFont, QFontMetrics

from desktop.lanes.sram import fit_labels


def _extents(fm, labels, slots):
    return sorted(
        (s.center().x() - fm.horizontalAdvance(t) / 2, s.center().x() + fm.horizontalAdvance(t) / 2)
        for t, s in zip(labels, slots, strict=True)
    )


def test_neighbours_over_narrow_columns_never_touch_and_wide_ones_stay_whole(qapp):
    fm = QFontMetrics(QFont())
    narrow = [QRectF(x, 0, 14, 40) for x in (400, 422, 444)]  # dQ_i, dK_j, dV_j: 22 px apart
    wide = [QRectF(10, 0, 70, 40), QRectF(100, 0, 140, 40)]
    labels = ["S_ij", "P̃ = exp(S−L)", "dV_j", "dQ_i", "dK_j"]
    slots = [*wide, narrow[2], narrow[0], narrow[1]]  # list order is not screen order
    got = fit_labels(fm, labels, slots)
    assert got[:2] == ["S_ij", "P̃ = exp(S−L)"]  # room enough: whole
    assert all(g in (lab, lab.split("_")[0]) for g, lab in zip(got, labels, strict=True))
    spans = _extents(fm, got, slots)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert got[2:] != labels[2:]  # the narrow columns' labels were shortened


def test_a_long_label_over_a_narrow_column_loses_its_words_first(qapp):
    fm = QFontMetrics(QFont())
    got = fit_labels(fm, ["a = Σ P̃V"], [QRectF(0, 0, 8, 40)])
    assert got == ["a"]
