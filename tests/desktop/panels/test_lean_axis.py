"""The lean axis draws exactly what pyqtgraph's AxisItem draws, and is ready before paint."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyqtgraph")


def _specs(specs) -> tuple | None:
    """Draw specs as plain values: pens by colour and width, points and rects by numbers."""
    if specs is None:
        return None
    (pen, a, b), ticks, texts = specs

    def pt(q):
        return (q.x(), q.y())

    return (
        (pen.color().rgba(), pt(a), pt(b)),
        [(p.color().rgba(), p.widthF(), pt(p1), pt(p2)) for p, p1, p2 in ticks],
        [((r.x(), r.y(), r.width(), r.height()), int(f), s) for r, f, s in texts],
    )


@pytest.fixture
def plots(qapp):
    import pyqtgraph as pg

    from desktop.panels.lean_axis import LeanAxis
    from desktop.panels.sparse_axis import SparseAxis

    view = pg.GraphicsLayoutWidget()
    view.resize(420, 640)
    items = []
    for k in range(4):
        cls = SparseAxis if k < 2 else LeanAxis
        axes = {name: cls(name) for name in ("left", "bottom", "right", "top")}
        item = view.addPlot(row=k, col=0, axisItems=axes)
        item.showAxis("right")
        item.showAxis("top")
        if k == 3:
            item.setLogMode(x=True, y=True)  # (the ledger's sweep)
        items.append(item)
    view.show()
    qapp.processEvents()
    yield view, items
    view.close()


def test_the_same_lines_and_labels_as_pyqtgraph(qapp, plots):
    import pyqtgraph as pg
    from PySide6.QtGui import QImage, QPainter

    view, items = plots
    rng = random.Random(28)
    image = QImage(1, 1, QImage.Format.Format_ARGB32_Premultiplied)
    painter = QPainter(image)
    compared = 0
    try:
        for trial in range(160):
            item = items[trial % len(items)]
            lo = rng.uniform(-1e3, 1e3) * 10 ** rng.randint(-6, 3)
            hi = lo + abs(rng.gauss(0, 1)) * 10 ** rng.randint(-8, 4)
            item.setYRange(lo, hi, padding=0)
            item.setXRange(-lo, 3 * hi + 1, padding=0)
            if trial % 9 == 0:
                view.resize(rng.randint(200, 900), rng.randint(160, 900))
            qapp.processEvents()
            for name in ("left", "bottom", "right", "top"):
                axis = item.getAxis(name)
                ours = _specs(axis.generateDrawSpecs(painter))
                theirs = _specs(pg.AxisItem.generateDrawSpecs(axis, painter))
                assert ours == theirs, (name, lo, hi)
                compared += ours is not None and len(ours[2]) > 0
    finally:
        painter.end()
    assert compared > 300  # most layouts had labels to compare


@pytest.mark.parametrize("log", [False, True])
def test_the_same_tick_values_as_pyqtgraph(qapp, log):
    import pyqtgraph as pg

    from desktop.panels.lean_axis import LeanAxis

    rng = random.Random(46)
    cases = [(0.0, 2.0, 400), (-1.3, 2.7, 80), (1e-7, 3e-7, 30), (2.0, 12.0, 300)]
    for _ in range(200):  # (in log mode the range is in decades, as the ledger's sweep)
        lo = rng.uniform(-8, 8) if log else rng.uniform(-1e3, 1e3) * 10 ** rng.randint(-6, 3)
        cases.append((lo, lo + rng.uniform(1e-3, 12), rng.randint(20, 1200)))
    ours, theirs = LeanAxis("left"), pg.AxisItem("left")
    ours.setLogMode(log)
    theirs.setLogMode(log)
    for lo, hi, size in cases:
        assert ours.tickValues(lo, hi, size) == theirs.tickValues(lo, hi, size), (lo, hi, size)


def test_axes_are_laid_out_before_the_paint(qapp, plots):
    """After prepare_axes the axes hold their pictures at their final widths: the paint
    plays them, and leaves the layout as it found it."""
    from desktop.panels.lean_axis import prepare_axes

    view, items = plots
    item = items[0]
    item.setYRange(0.0, 123456.0, padding=0)  # wider labels than the axis has room for
    prepare_axes(view, items)
    width = item.getAxis("left").width()
    assert all(i.getAxis(n).picture is not None for i in items for n in ("left", "bottom"))
    view.viewport().repaint()
    qapp.processEvents()
    assert item.getAxis("left").width() == width
    assert item.getAxis("left").picture is not None


def test_a_view_out_of_sight_is_left_alone(qapp, plots):
    from desktop.panels.lean_axis import prepare_axes

    view, items = plots
    view.hide()
    for item in items:
        item.getAxis("left").picture = None
    prepare_axes(view, items)
    assert all(item.getAxis("left").picture is None for item in items)
