"""The next frame's numbers made ahead on a second thread equal those made when painted."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QApplication

from desktop.cli.bench_gui import _settle
from desktop.lanes.prefetch import step_numbers
from desktop.scene import geometry as geo
from desktop.state.config import Config, build


def _tiles(trace, step):
    return [
        None if t.values is None else np.array(t.values)
        for t in geo.tiled_sram(trace, step) + geo.dense_sram(trace, step)
    ]


def test_numbers_made_ahead_are_the_ones_a_fresh_trace_paints():
    for cfg in (
        Config(n=40, d=4, dv=4, block_q=5, block_k=3, input="random"),
        Config(n=24, d=4, dv=4, block_q=4, block_k=5, input="random", pass_name="backward"),
        Config(n=24, d=4, dv=4, block_q=4, block_k=4, input="random", pass_name="training"),
    ):
        ahead, fresh = build(cfg)[1], build(cfg)[1]
        for step in range(0, ahead.n_steps, 3):
            step_numbers(ahead, step)
            for a, b in zip(_tiles(ahead, step), _tiles(fresh, step), strict=True):
                assert (a is None) == (b is None)
                if a is not None:
                    np.testing.assert_array_equal(a, b)


def test_a_q_outer_forward_frame_has_the_next_block_made_before_it_paints(window, qtbot):
    state = window.state
    cfg = Config(n=64, d=4, dv=4, block_q=4, block_k=4, input="random")
    state.set_config(cfg)
    _settle(QApplication.instance(), state, cfg)
    lane = window.lanes["tiled"]
    trace = state.trace
    state.set_step(0)
    lane.next_frame.wait()
    assert trace.forward.cached("blocks") >= 2  # block 0 and the one after it
    assert ("blocks", 1) in trace.forward._held()


def test_nothing_is_made_ahead_past_the_last_step():
    trace = build(Config())[1]
    step_numbers(trace, trace.n_steps)  # no such step: nothing to make
    assert trace.forward.cached("blocks") == 0
