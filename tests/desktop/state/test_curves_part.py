"""A threaded build that comes in one part shows its numbers first and the row's curves,
the all-rows numbers and the key row's tile after that paint: the plots are covered
meanwhile (never another configuration's curves), dK is marked computing, and the lanes
keep the heatmaps they were given (no second static rebuild)."""

from __future__ import annotations

import pytest

from compute.numbers import SHARED
from desktop.panels.backward_stats import BackwardStats
from desktop.panels.stats import StatsPanel
from desktop.scene.row_series import stats_curves
from desktop.state import worker
from desktop.state.app_state import AppState
from desktop.state.config import Config


@pytest.mark.parametrize("pass_name", ["forward", "backward", "training"])
def test_a_one_part_build_delivers_its_curves_after_the_first_paint(qtbot, monkeypatch, pass_name):
    SHARED.clear()
    monkeypatch.setattr(worker, "THREAD_THRESHOLD_WORK", 0)  # threaded, but one part
    state = AppState()
    stats, backward = StatsPanel(state), BackwardStats(state)
    for w in (stats, backward):
        qtbot.addWidget(w)
        w.show()
    seen, images_changed = [], []

    def on_trace(_trace):
        seen.append(
            (
                state.pending_parts,
                stats.plots_cover.isVisible(),
                backward.plot_cover.isVisible(),
                backward._drawn,
                _trace.backward is not None and _trace.key_tile_ready(0),
                backward.labels["dk"].text() if _trace.backward is not None else None,
            )
        )

    state.sigTraceChanged.connect(on_trace)
    state.sigImagesChanged.connect(lambda: images_changed.append(state.trace))
    a = Config(n=30, d=3, dv=2, block_q=4, block_k=5, input="random", seed=3, pass_name=pass_name)
    state.set_config(a)
    qtbot.waitUntil(lambda: state.config == a and not state.pending_parts, timeout=30000)
    assert state.builder.wait(30000)
    forward_plots = pass_name != "backward"
    # The first delivery: numbers, with the curves, the all-rows numbers and the key row's
    # tile still to come: the plots covered, dK marked computing, not made on this thread.
    bwd = pass_name != "forward"
    assert seen == [
        (worker.LATE_PARTS, forward_plots, bwd, None, False, "computing…" if bwd else None)
    ]
    assert worker.LATE_PARTS == {"plots", "errors"}
    assert images_changed == []  # one part: the lanes' heatmaps were complete at once
    # The curves' part: uncovered, drawn from this trace and row.
    assert not stats.plots_cover.isVisible() and not backward.plot_cover.isVisible()
    if forward_plots:
        assert stats._series is stats_curves(state.trace, state.row)
    if pass_name != "forward":
        assert backward._drawn == (state.trace, state.row)
        assert state.trace.key_tile_ready(0) and not state.trace.backward.key_tiles_deferred
        assert backward.labels["dk"].text().startswith("[")  # the worker's tile, shown
    state.builder.shutdown()


def test_a_part_waits_for_the_windows_paint_not_for_a_zero_timer(window, qtbot):
    """Qt paints a window on a timer of its own (~5 ms after the first update), so a zero
    timer could run before the paint and the next part joined it; after_paint waits for
    the window's update request (MainWindow.event), with a fallback if none comes."""
    from PySide6.QtCore import QCoreApplication, QEvent

    from desktop.state.app_state import PAINT_DUE_MS

    st, ran = window.state, []
    assert st.paints_reported
    st.after_paint(lambda: ran.append("after paint"))
    QCoreApplication.sendEvent(window, QEvent(QEvent.Type.UpdateRequest))
    assert ran == ["after paint"]
    st.after_paint(lambda: ran.append("fallback"))
    window.hide()  # no paint comes: the fallback runs it
    qtbot.waitUntil(lambda: "fallback" in ran, timeout=4 * PAINT_DUE_MS)


def test_after_paint_holds_its_callbacks_until_the_window_says_it_painted(qtbot):
    from desktop.state.app_state import PAINT_DUE_MS

    state, ran = AppState(), []
    state.paints_reported = True  # as MainWindow sets it
    state.after_paint(lambda: ran.append(1))
    qtbot.wait(PAINT_DUE_MS // 4)
    assert ran == []  # a zero timer would have run it by now
    state.window_painted()
    assert ran == [1]
    state.window_painted()
    assert ran == [1]  # once


def test_without_a_window_the_curves_come_at_the_next_turn_of_the_event_loop(qtbot):
    state = AppState()
    state.set_config(Config(n=30, d=3, dv=2, block_q=4, block_k=5, input="random", seed=12))
    assert state.pending_parts == frozenset({"plots"})
    qtbot.waitUntil(lambda: not state.pending_parts, timeout=2_000)
