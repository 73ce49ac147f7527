"""The decode view: its numbers against compute.decode and a float64 reference, its
animation steps, its refusals, and Pass -> Decode in the window."""

from __future__ import annotations

import numpy as np
import pytest

from compute.decode import DecodeProblem, combine, decode_inputs, split_partials
from desktop.decode.model import check_view_size, decode_step, steps_to_finish

# N_k odd, splits not dividing the tiles, GQA group 4, two new tokens.
ODD = DecodeProblem(2, 1001, 16, 16, 8, 2, block_k=64, splits=5)


def test_step_numbers_are_the_cores_and_exact():
    step = decode_step(ODD, head=5, row=1, seed=3)
    parts = split_partials(ODD, *decode_inputs(ODD, seed=3))
    merged = combine(parts.o, parts.lse)
    assert [r.keys for r in step.table.splits] == [tuple(k) for k in parts.keys.tolist()]
    assert step.table.lse == pytest.approx(float(merged.lse[5, 1]), abs=0)
    weights = [r.weight for r in step.table.splits]
    assert sum(weights) == pytest.approx(1.0, abs=1e-12)
    assert step.split_error < 1e-12 and step.one_pass_error < 1e-12
    assert step.summary["config"]["splits_used"] == 5


def test_split_kv_finishes_in_a_fraction_of_the_steps():
    assert steps_to_finish(ODD) == (16, 4)  # T_c = 16 tiles in 5 splits of 3 or 4
    more = DecodeProblem(1, 100, 8, 8, splits=50, block_k=64)
    assert steps_to_finish(more) == (2, 1)  # more splits than tiles: S' = T_c


@pytest.mark.parametrize(
    "problem",
    [
        DecodeProblem(1, 100_000, 8, 8),  # too many keys
        DecodeProblem(16, 16384, 256, 256, 64, 64, splits=256),  # a minute of NumPy
        DecodeProblem(1, 16384, 8, 8, block_k=1),  # 16384 tile steps
    ],
)
def test_too_large_for_the_view_is_one_sentence(problem):
    with pytest.raises(ValueError, match="flash-explorer decode"):
        check_view_size(problem)


def test_view_shows_every_split_and_the_merge(qtbot):
    from desktop.decode.view import DecodeView

    view = DecodeView()
    qtbot.addWidget(view)
    for box, value in ((view.nk, 1001), (view.hq, 8), (view.hkv, 2), (view.splits, 5),
                       (view.nq, 2), (view.d, 16)):  # fmt: skip
        box.setValue(value)
    view.recompute()
    assert view.message.text() == ""
    assert view.table.rowCount() == 5 + 1
    assert view.table.item(5, 0).text() == "merge"
    assert "split-kv" in view.ledger.text() and "Exact" in view.ledger.text()
    want = decode_step(ODD, head=0, row=0).table.lse
    assert float(view.table.item(5, 4).text()) == pytest.approx(want, rel=1e-3)
    view.slider.setValue(2)  # mid-animation paints without error
    view.canvas.repaint()


def test_view_refuses_bad_heads_in_one_sentence_and_keeps_the_last_step(qtbot):
    from desktop.decode.view import DecodeView

    view = DecodeView()
    qtbot.addWidget(view)
    view.recompute()
    shown = view.data
    view.hq.setValue(7)  # 7 query heads over 2 K/V heads
    view.recompute()
    assert "cannot share 2 K/V heads evenly" in view.message.text()
    assert view.data is shown


def test_pass_decode_swaps_the_lanes_for_the_view(window, qtbot):
    combo = window.controls.pass_combo
    before = window.state.current_config.pass_name
    window.playback.play()
    combo.setCurrentIndex(combo.findData("decode"))
    qtbot.waitUntil(lambda: window.decode_view.isVisible())
    assert not window.lanes_splitter.isVisible()
    assert window.state.current_config.pass_name == before  # not a Config pass
    assert window.decode_view.data is not None and np.isfinite(window.decode_view.data.table.lse)
    # The lanes' playback and row statistics are not the decode view's: paused and greyed.
    assert not window.playback.playing
    assert not window.bar.isEnabled() and not window.stats_panel.isEnabled()
    assert not window.ledger_panel.isEnabled()
    assert not window.play_action.isEnabled()  # Space does not play the hidden lanes
    combo.setCurrentIndex(combo.findData("forward"))
    assert window.lanes_splitter.isVisible() and not window.decode_view.isVisible()
    assert window.bar.isEnabled() and window.stats_panel.isEnabled()
    assert window.ledger_panel.isEnabled()
    assert window.play_action.isEnabled()
