"""A large dense-lane region drawn from the cells a raster paint reads paints what the
whole heatmap paints, pixel for pixel, and the scene's regions make those cells as the
trace's whole regions have them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QRectF
from PySide6.QtGui import QImage, QPainter, QPixmap, QTransform

from desktop.lanes.painting import draw_image, paint_ready
from desktop.lanes.sampling import SampledPicks, draw_sampled
from desktop.scene.render import ColorScale
from desktop.scene.sampled_region import SampledRegion, dense_region
from desktop.state.config import Config, build
from desktop.theme import qimage


def _pixels(pixmap: QPixmap) -> np.ndarray:
    image = pixmap.toImage().convertToFormat(QImage.Format.Format_ARGB32)
    return np.frombuffer(image.constBits(), np.uint32).reshape(image.height(), -1).copy()


def _paint(draw, transform: QTransform | None = None) -> np.ndarray:
    pixmap = QPixmap(320, 240)
    pixmap.fill()
    p = QPainter(pixmap)
    p.setRenderHint(QPainter.RenderHint.Antialiasing, True)  # as a lane paints
    if transform is not None:
        p.setWorldTransform(transform)
    draw(p)
    p.end()
    return _pixels(pixmap)


@settings(deadline=None, max_examples=40)
@given(
    rows=st.integers(1, 3000),
    cols=st.integers(1, 300),
    x=st.floats(-20, 200),
    y=st.floats(-20, 150),
    w=st.floats(0.5, 300),
    h=st.floats(0.5, 300),
    zoom=st.sampled_from([None, 0.75, 1.5]),
    seed=st.integers(0, 2**16),
)
def test_the_cells_read_paint_what_the_whole_heatmap_paints(
    qapp, rows, cols, x, y, w, h, zoom, seed
):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((rows, cols))
    values[rng.random((rows, cols)) < 0.05] = -np.inf  # masked cells: translucent grey
    made = []

    def cells(r, c):
        made.append(len(r) * len(c))
        return values[np.ix_(r, c)]

    region = SampledRegion(values.shape, cells, lambda: values)
    scale, rect = ColorScale(2.0), QRectF(x, y, w, h)
    t = None if zoom is None else QTransform.fromScale(zoom, zoom).translate(3.25, -1.5)
    whole = _paint(lambda p: draw_image(p, rect, paint_ready(qimage(scale.rgba(values)))), t)
    picks = SampledPicks()
    drawn = []
    sampled = _paint(lambda p: drawn.append(draw_sampled(p, rect, region, scale, picks)), t)
    assert drawn == [True]
    assert np.array_equal(sampled, whole)
    assert sum(made) <= rows * cols


def test_a_painter_that_needs_the_whole_region_is_told_so(qapp):
    values = np.zeros((100, 10))
    region = SampledRegion(values.shape, lambda r, c: values[np.ix_(r, c)], lambda: values)
    pixmap = QPixmap(50, 50)
    p = QPainter(pixmap)
    p.setClipRect(0, 0, 20, 20)  # a clip: Qt may take another path, so draw the whole
    assert not draw_sampled(p, QRectF(0, 0, 40, 40), region, ColorScale(1.0), SampledPicks())
    p.setClipping(False)
    p.setWorldTransform(QTransform().rotate(30))
    assert not draw_sampled(p, QRectF(0, 0, 40, 40), region, ColorScale(1.0), SampledPicks())
    p.resetTransform()
    assert draw_sampled(p, QRectF(0, 0, 40, 40), region, ColorScale(1.0), SampledPicks())
    p.end()
    page = QImage(2100, 2100, QImage.Format.Format_ARGB32_Premultiplied)  # a 4K export's
    p = QPainter(page)
    assert not draw_sampled(p, QRectF(0, 0, 40, 40), region, ColorScale(1.0), SampledPicks())
    p.end()


@pytest.mark.parametrize("causal", [False, True])
def test_dense_regions_make_the_trace_regions_cells(causal):
    cfg = Config(n=96, d=8, dv=8, block_q=32, block_k=32, input="random", seed=3,
                 pass_name="backward", causal=causal)  # fmt: skip
    _, trace = build(cfg)
    trace.forward.summary()  # every row's statistics, as the dense lane's P needs
    trace.backward_summary(64)
    rng = np.random.default_rng(0)
    for tensor in ("S", "P", "dP", "dS"):
        region = dense_region(trace, tensor, (0, 96), (32, 64))
        whole = np.asarray(region)
        if tensor in ("S", "P"):
            want = (trace.scores_region if tensor == "S" else trace.probs_region)(0, 96, 32, 64)
        else:
            want = trace.grad_region(tensor, 0, 96, 32, 64)
        assert whole is want  # the trace's own array
        r = np.sort(rng.choice(96, 17, replace=False))
        c = np.sort(rng.choice(32, 9, replace=False))
        np.testing.assert_allclose(region.cells(r, c), want[np.ix_(r, c)], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("causal", [False, True])
def test_a_forward_softmax_step_holds_its_rows_as_regions_made_where_drawn(causal):
    """The dense forward's softmax step holds a query block's S and P rows: above
    SAMPLED_ABOVE cells they are regions made where drawn, whose whole is the trace's
    region and whose cells are its cells; a small step keeps the arrays."""
    from desktop.scene.backward import region_cells
    from desktop.scene.geometry import dense_sram
    from desktop.scene.sampled_region import SAMPLED_ABOVE

    for n, sampled in ((160, True), (40, False)):
        cfg = Config(n=n, d=8, dv=8, block_q=64, block_k=32, input="random", seed=4,
                     causal=causal)  # fmt: skip
        _, trace = build(cfg)
        step = next(
            k for k in range(trace.n_steps)
            if (a := trace.action("dense", k)) is not None and a.phase == "softmax"
        )  # fmt: skip
        held = {t.tensor: t for t in dense_sram(trace, step)}
        r = {x.tensor: x for x in trace.action("dense", step).resident}["S"]
        assert (region_cells(r) > SAMPLED_ABOVE) is sampled
        for tensor, region in (("S", trace.scores_region), ("P", trace.probs_region)):
            values = held[tensor].values
            assert isinstance(values, SampledRegion) is sampled
            want = region(*r.rows, *r.cols)
            np.testing.assert_array_equal(np.asarray(values), want)
            if sampled:
                rows, cols = np.array([0, 5, 63]), np.array([0, 77, n - 1])
                np.testing.assert_allclose(
                    values.cells(rows, cols), want[np.ix_(rows, cols)], rtol=1e-12, atol=1e-14
                )
