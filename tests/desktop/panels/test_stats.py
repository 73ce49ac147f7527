"""The statistics panel as a reader meets it: 1-based steps, labelled outputs, a zoomed view."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

from compute.attention import round_to
from desktop.scene.row_series import STEP_X, fmt_vec, zoom_window
from desktop.state.config import Config


def test_marker_and_axis_count_from_one_as_the_slider(window):
    st, panel = window.state, window.stats_panel
    panel.whole_run.setChecked(True)
    for step in (0, 8, st.n_steps - 1):
        st.set_step(step)
        assert window.bar.scrubber.value() == step
        assert f"step {step + 1} /" in window.bar.step_label.text()
        for marker in panel._markers:
            assert marker.value() == step + 1
    lo, hi = panel._items["m"].viewRange()[0]
    assert 0 < lo < 1 and st.n_steps < hi < st.n_steps + 1


def test_backward_marker_counts_from_one_too(window, qtbot):
    from PySide6.QtWidgets import QComboBox

    st, backward = window.state, window.stats_panel.backward
    combo = window.findChild(QComboBox, "pass_combo")
    combo.setCurrentIndex(combo.findData("backward"))
    qtbot.waitUntil(lambda: st.trace.pass_name == "backward" and not st.pending_parts, timeout=5000)
    for step in (0, 11, st.n_steps - 1):
        st.set_step(step)
        assert backward._marker.value() == step + 1
    first_edge = backward._curves[0].xData[0]
    assert first_edge == 0.5  # step 1's cell spans 0.5 to 1.5, as in the forward plots


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dense_output_in_dtype_and_float64_reference_are_separate_lines(window, qtbot, dtype):
    st, panel = window.state, window.stats_panel
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(Config(input="random", seed=3, n=7, d=3, dv=3, dtype=dtype))
    st.set_row(4)
    ref = st.trace.reference[4]
    dense = np.asarray(round_to(ref, dtype), dtype=np.float64)
    assert not np.array_equal(dense, ref)  # rounding shows: the two lines differ
    assert panel.labels["dense"].text() == fmt_vec(dense)
    assert panel.labels["ref"].text() == fmt_vec(ref)
    assert panel.names["dense"].text() == f"dense O ({dtype})"
    assert panel.names["ref"].text() == "O_ref (float64)"


def test_zoom_window_holds_the_active_steps_and_follows_the_step_near_them():
    assert zoom_window((100, 199), 150, 1000) == (100, 199)
    # just past or before: widened by the whole span on that side, at once, so playback
    # past the row moves the range at most four times
    assert zoom_window((100, 199), 250, 1000) == (100, 299)
    assert zoom_window((100, 199), 200, 1000) == (100, 299)
    assert zoom_window((100, 199), 299, 1000) == (100, 299)
    assert zoom_window((100, 199), 300, 1000) == (100, 199)
    assert zoom_window((100, 199), 20, 1000) == (0, 199)
    assert zoom_window((100, 199), 90, 1000) == (0, 199)
    assert zoom_window((300, 399), 250, 1000) == (200, 399)
    windows = {zoom_window((100, 199), step, 1000) for step in range(1000)}
    assert len(windows) == 3  # before, on the row's steps (also far away), after
    # a row that starts near the run's start is shown from step 0 on: no range move
    # between the first steps and the row's own
    assert zoom_window((2, 4096), 0, 10**6) == zoom_window((2, 4096), 258, 10**6) == (0, 4096)
    assert zoom_window((2, 6), 1, 100) == zoom_window((2, 6), 4, 100) == (0, 7)
    assert zoom_window((2, 6), 9, 100) == (0, 15)
    assert zoom_window((900, 989), 999, 1000) == (900, 999)  # never past the run
    for step in range(0, 400):  # the window always holds a step within one span
        lo, hi = zoom_window((100, 199), step, 1000)
        assert lo <= step <= hi or step < 0 or step > 299
    assert zoom_window((100, 199), 900, 1000) == (100, 199)  # far: the row's steps stay
    assert zoom_window((500, 509), 3, 1000) == (500, 509)
    assert zoom_window((0, 2), 1, 5) == (0, 4)  # at least 8 steps, at most the run
    assert zoom_window((996, 999), 999, 1000) == (992, 999)


def test_plots_zoom_to_the_rows_active_steps_with_a_whole_run_toggle(window, qtbot):
    st, panel = window.state, window.stats_panel
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(Config(input="random", seed=1, n=64, d=4, dv=4, block_q=8, block_k=8))
    qtbot.waitUntil(lambda: not st.pending_parts, timeout=10_000)  # the curves' part
    st.set_row(40)
    steps, _ = st.trace.row_updates(40)
    st.set_step(int(steps[0]))
    lo, hi = panel._items["m"].viewRange()[0]
    first, last = int(steps[0]) + STEP_X, int(steps[-1]) + STEP_X
    assert lo <= first and hi >= last
    assert hi - lo < 0.5 * st.n_steps  # a zoom, not the whole run
    panel.whole_run.setChecked(True)
    lo, hi = panel._items["m"].viewRange()[0]
    assert lo < 1 and hi > st.n_steps


def test_components_of_a_have_a_legend(window, qtbot):
    import pyqtgraph as pg

    from desktop.scene.row_series import MAX_COLOURED

    panel = window.stats_panel
    curves = panel._curves["a"]
    text = panel.components_label.text()
    for k in range(window.state.trace.schedule.d_v):
        colour = pg.intColor(k, hues=MAX_COLOURED).name()
        assert colour == curves[k].opts["pen"].color().name() and colour in text
    assert not panel.components_label.isHidden()


def test_backward_plot_range_holds_every_curve_after_each_change(window, qtbot):
    """The dQ_row plot's ranges are set from its curves (no auto-range per frame): they
    follow a new row, new inputs and new blocks, never keeping the last one's."""
    from desktop.state.config import Config

    st, backward = window.state, window.stats_panel.backward
    item = backward.plot.getPlotItem()
    base = Config(n=10, d=3, block_q=3, block_k=4, input="random", pass_name="backward")
    for cfg, row in ((base, 0), (base, 7), (base.replace(seed=9, input_scale=6.0), 7),
                     (base.replace(block_q=2, block_k=5), 7)):  # fmt: skip
        if cfg != st.config:
            with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
                st.set_config(cfg)
            qtbot.waitUntil(lambda: not st.pending_parts, timeout=10_000)  # the curves' part
        st.set_row(row)
        assert st.row == row
        ys = [c.getData()[1] for c in backward._curves if c.getData()[1] is not None]
        ys = np.concatenate([y for y in ys if len(y)])
        (x0, x1), (y0, y1) = item.viewRange()
        assert y0 <= ys.min() and ys.max() <= y1
        assert (ys.max() - ys.min()) >= 0.5 * (y1 - y0)  # fitted, not a stale wide range
        assert x0 <= 0.5 and st.trace.n_steps + 0.5 <= x1 + 1e-9


@given(
    n=hs.integers(3, 900),
    comps=hs.integers(1, 5),
    bins=hs.integers(2, 64),
    seed=hs.integers(0, 2**31 - 1),
)
def test_an_envelope_covers_each_column_as_the_step_curves_do(n, comps, bins, seed):
    from desktop.scene.row_series import envelope_bundle, step_bundle

    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n, comps))
    values[0] = np.nan  # a/ℓ before any key
    gaps = rng.integers(1, 9, size=n + 1).astype(float)
    edges = np.cumsum(gaps) - 0.5
    xs, ys = envelope_bundle(edges, values, bins)
    if n - 2 <= bins:  # few updates: the step curves themselves
        sx, sy = step_bundle(edges, values)
        assert np.array_equal(xs, sx, equal_nan=True) and np.array_equal(ys, sy, equal_nan=True)
        return
    per = len(xs) // comps
    assert len(xs) == per * comps and per <= 2 * bins + 5  # no more vertices than columns
    starts = edges[1:-1]
    col = np.minimum(
        ((starts - starts[0]) * (bins / (starts[-1] - starts[0]))).astype(int), bins - 1
    )
    for c in range(comps):
        x, y = xs[c * per : (c + 1) * per], ys[c * per : (c + 1) * per]
        assert np.isnan(x[-1]) and np.isnan(y[-1])
        assert x[0] == edges[0] and x[-2] == edges[-1] and y[-2] == values[-1, c]
        for b in np.unique(col):  # each column spans what the values held in it span
            inside = np.flatnonzero(col == b)
            held = values[inside[0] : inside[-1] + 2, c]  # the one held into it, and its own
            at = x[:-1] == starts[inside[0]]
            assert np.nanmin(y[:-1][at]) == np.nanmin(held)
            assert np.nanmax(y[:-1][at]) == np.nanmax(held)
        assert np.all(np.diff(x[:-1]) >= 0)  # left to right, never back


def test_a_bundle_is_each_components_step_curve_split_by_nans():
    from desktop.scene.row_series import step_bundle

    rng = np.random.default_rng(2)
    values = rng.normal(size=(6, 4))
    edges = np.arange(7) - 0.5
    xs, ys = step_bundle(edges, values)
    gaps = np.flatnonzero(np.isnan(xs))
    assert np.array_equal(gaps, np.flatnonzero(np.isnan(ys))) and len(gaps) == 4
    parts = zip(np.split(xs, gaps + 1)[:4], np.split(ys, gaps + 1)[:4], strict=True)
    for c, (xc, yc) in enumerate(parts):
        assert np.array_equal(xc[:-1], np.repeat(edges, 2)[1:-1])
        assert np.array_equal(yc[:-1], np.repeat(values[:, c], 2))  # held until the next step
    tx, ty = step_bundle(np.array([3.0, 8.0]), values[:1])  # the targets: flat dashes
    assert np.array_equal(ty[~np.isnan(ty)], np.repeat(values[0], 2))
    assert np.array_equal(tx[~np.isnan(tx)], np.tile([3.0, 8.0], 4))


def test_a_streamed_trace_shows_its_readouts_first_and_its_curves_with_the_second_tier(
    window, qtbot, monkeypatch
):
    """A streamed trace: its read-outs come with the first tier and its curves with the
    second; until then the plots are covered, never showing the previous trace's
    curves beside the new read-outs."""
    from desktop.scene import render
    from desktop.scene.row_series import fmt, stats_curves
    from desktop.state import worker

    monkeypatch.setattr(worker, "THREAD_THRESHOLD_WORK", 0)  # every build on the worker
    monkeypatch.setattr(render, "STREAM_WORK", 0)
    st, panel = window.state, window.stats_panel
    seen = []

    def first_tier(trace) -> None:
        core = trace.row_state(st.row, st.step)
        seen.append(
            (
                "plots" in st.pending_parts,
                panel.plots_cover.isVisibleTo(panel),
                panel._series is None,
                panel.labels["m"].text() == fmt(core.m),
            )
        )

    st.sigStepChanged.connect(lambda _s: first_tier(st.trace))
    target = Config(input="random", seed=11, n=37, d=4, dv=3, block_q=5, block_k=7)
    st.set_config(target)
    qtbot.waitUntil(lambda: st.config == target and not st.pending_parts, timeout=20_000)
    assert seen and seen[-1] == (True, True, True, True)  # covered, read-outs current
    assert not panel.plots_cover.isVisibleTo(panel)
    curves = stats_curves(st.trace, st.row)
    assert panel._series is curves
    (m_curve,) = panel._curves["m"][:1]
    np.testing.assert_array_equal(m_curve.xData, curves.x[: len(m_curve.xData)])
