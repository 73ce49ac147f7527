"""The statistics plots' value axis: tick numbers never print over each other."""

from __future__ import annotations

import pytest

pytest.importorskip("pyqtgraph")


@pytest.mark.parametrize("size", [15.0, 30.0, 45.0, 80.0, 200.0])
@pytest.mark.parametrize(("lo", "hi"), [(0.08, 0.21), (0.0, 1.97), (-10.0, 5.0), (0.0, 0.5)])
def test_labelled_ticks_fit_the_axis_length(qapp, size, lo, hi):
    from PySide6.QtGui import QFontMetricsF

    from desktop.panels.sparse_axis import LABEL_PITCH, SparseAxis

    axis = SparseAxis("left")
    text_h = QFontMetricsF(axis.font()).height()
    major = axis.tickValues(lo, hi, size)[0][1]  # the labelled level's values
    labels = [v for v in major if lo <= v <= hi]
    fit = int(size / (LABEL_PITCH * text_h))
    assert len(labels) <= fit + 1
    if len(labels) > 1:  # neighbours sit at least a text height apart on screen
        gap = (labels[1] - labels[0]) / (hi - lo) * size
        assert gap >= text_h
    if size >= 80:
        assert len(labels) >= 2  # a tall enough axis still reads its scale


def test_a_tall_axis_keeps_pyqtgraphs_ticks(qapp):
    import pyqtgraph as pg

    from desktop.panels.sparse_axis import SparseAxis

    assert SparseAxis("left").tickSpacing(0, 2, 400) == pg.AxisItem("left").tickSpacing(0, 2, 400)
