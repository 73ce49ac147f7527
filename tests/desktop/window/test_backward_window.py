"""The window in the backward pass and a training step: the Pass control, every step
drawn, the ledger's totals, the statistics panel's dQ row."""

from __future__ import annotations

import numpy as np
import pytest

import compute


def _choose_pass(window, qtbot, pass_name: str) -> None:
    from PySide6.QtWidgets import QComboBox

    combo = window.findChild(QComboBox, "pass_combo")
    combo.setCurrentIndex(combo.findData(pass_name))
    qtbot.waitUntil(lambda: window.state.trace.pass_name == pass_name, timeout=5000)


@pytest.mark.parametrize(
    ("pass_name", "dense", "tiled"), [("backward", 444, 270), ("training", 684, 372)]
)
def test_pass_control_switches_and_ledger_ends_at_the_pass_totals(
    window, qtbot, pass_name, dense, tiled
):
    _choose_pass(window, qtbot, pass_name)
    st = window.state
    assert st.config.pass_name == pass_name
    st.set_step(st.n_steps - 1)
    for step in range(st.n_steps):  # every step draws in both lanes
        st.set_step(step)
        for lane in window.lanes.values():
            lane.grab()
    assert window.ledger_panel.dense_total_label.text() == str(dense)
    assert window.ledger_panel.tiled_total_label.text() == str(tiled)
    _choose_pass(window, qtbot, "forward")
    st.set_step(st.n_steps - 1)
    assert window.ledger_panel.dense_total_label.text() == "240"


def test_pass_is_a_config_field_persisted_and_a_flag():
    from desktop.cli.args import requested_config
    from desktop.cli.gui import flags_given, parser
    from desktop.state.config import Config

    assert Config().pass_name == "forward"
    cfg = Config(pass_name="training")
    assert Config.from_dict(cfg.to_dict()) == cfg
    assert Config.from_dict({"pass_name": "sideways"}) == Config()  # bad saved value: default
    args = parser().parse_args(["--pass", "backward"])
    assert requested_config(args).pass_name == "backward"
    assert flags_given(["--pass", "backward"])


def test_backward_sram_and_equation_show_the_cores_numbers(window, qtbot):
    from desktop.scene.backward import backward_equation
    from desktop.scene.geometry import tiled_sram

    _choose_pass(window, qtbot, "backward")
    trace = window.state.trace
    tl = trace.lanes["tiled"]
    steps, tiles = tl.steps_of("bwd_update", 1)  # block 1 (rows 2, 3) meets each key tile
    for step, j in zip(steps.tolist(), tiles.tolist(), strict=True):
        held = {t.tensor: t for t in tiled_sram(trace, step)}
        b = trace.backward_block(1)
        c0, c1 = trace.schedule.cols(j)
        np.testing.assert_array_equal(held["P"].values, b.p_tilde[:, c0:c1])
        np.testing.assert_allclose(held["P"].values, trace.probs[2:4, c0:c1], atol=1e-12)
        np.testing.assert_array_equal(held["dQ"].values, b.dq[j + 1])  # tile j added
        text = backward_equation(trace, "tiled", step, 2, trace.action("tiled", step))
        assert f"tile {j}" in text and "L = " in text
    dq = compute.attention_backward(trace.q, trace.k, trace.v, trace.do, block_q=2, block_k=2)[0]
    np.testing.assert_allclose(trace.backward_block(1).dq[-1], dq[2:4], atol=1e-12)


def test_stats_panel_follows_the_row_and_key_to_the_reference(window, qtbot):
    from desktop.scene.row_series import fmt_vec

    _choose_pass(window, qtbot, "backward")
    st, trace = window.state, window.state.trace
    st.set_row(3)
    st.set_key(4)
    panel = window.stats_panel.backward
    assert panel.isVisible() and not window.stats_panel.plots.isVisible()
    dq, dk, dv = compute.attention_backward(
        trace.q, trace.k, trace.v, trace.do, block_q=2, block_k=2
    )
    st.set_step(0)  # before the main loop: nothing accumulated yet
    assert panel.labels["dq"].text().startswith(fmt_vec(np.zeros(2)))
    st.set_step(st.n_steps - 1)
    np.testing.assert_allclose(trace.backward_row(3).dq[-1], dq[3], atol=1e-12)
    assert (
        panel.labels["dq"].text() == f"{fmt_vec(trace.backward_row(3).dq[-1])} after 3 of 3 tiles"
    )
    assert panel.labels["dk"].text().startswith(fmt_vec(trace.key_row(4).dk[-1]))
    np.testing.assert_allclose(trace.key_row(4).dk[-1], dk[4], atol=1e-12)
    np.testing.assert_allclose(trace.key_row(4).dv[-1], dv[4], atol=1e-12)
    # Part way: dQ_row after the tiles the lane has visited equals the core's partial sum.
    step = int(trace.lanes["tiled"].steps_of("bwd_update", 1)[0][1])  # block 1, tile 1
    st.set_step(step)
    assert panel.labels["dq"].text() == f"{fmt_vec(trace.backward_row(3).dq[2])} after 2 of 3 tiles"


def test_ledger_panel_shows_every_pass_and_the_kept_memory(window, qtbot):
    _choose_pass(window, qtbot, "training")
    memory = window.ledger_panel.backward_memory
    assert memory.isVisible()
    text = memory.totals_label.text()
    assert "forward 240 vs 96" in text and "backward 444 vs 270" in text
    assert "training 684 vs 372" in text
    assert memory.bars.kept == {"dense": 36, "tiled": 6}
    assert memory.bars.notes["dense"].startswith("N_q·N_k = 36 (")
    assert memory.bars.notes["tiled"].endswith("6× less")
    memory.bars.grab()
    _choose_pass(window, qtbot, "forward")
    assert not memory.isVisible()


def test_clicking_a_key_row_selects_it_for_dk_dv(window, qtbot):
    from PySide6.QtCore import QPoint, Qt

    _choose_pass(window, qtbot, "backward")
    st = window.state
    lane = window.lanes["tiled"]
    for tensor, key in (("dK", 5), ("K", 2)):
        r = lane._layout()[tensor]
        pos = QPoint(int(r.center().x()), int(r.top() + (key + 0.5) * r.height() / 6))
        qtbot.mouseClick(lane, Qt.MouseButton.LeftButton, pos=pos)
        assert st.key == key and st.row == 0  # a key, not a query row
        assert window.stats_panel.backward.key_spin.value() == key


def test_causal_kv_outer_training_with_more_keys_draws_every_step(window):
    from desktop.state.config import Config

    window.state.set_config(
        Config(n=7, n_keys=10, d=3, dv=2, block_q=3, block_k=4, order="kv-outer", causal=True,
               dtype="float32", input="random", pass_name="training")
    )  # fmt: skip
    trace = window.state.trace
    assert trace.pass_name == "training" and trace.schedule.order == "kv-outer"
    for step in range(trace.n_steps):
        window.state.set_step(step)
        window.state.set_key(step % 10)
        for lane in window.lanes.values():
            lane.grab()
        window.stats_panel.grab()
    led = compute.pass_ledger(
        "training", 7, 10, 3, 2, block_q=3, block_k=4, order="kv-outer", causal=True,
        dtype="float32",
    )  # fmt: skip
    text = window.ledger_panel.tiled_total_label.text()
    assert text == f"{led.lanes['tiled'].total_elements:,}"
    assert window.ledger_panel.dense_total_label.text() == f"{led.lanes['dense'].total_elements:,}"


def test_only_the_forward_draws_the_running_statistics_columns(window, qtbot):
    from desktop.scene.geometry import hbm_slots

    names = [name for name, _, _ in hbm_slots(window.state.trace)]
    assert {"m", "l"} <= set(names)
    _choose_pass(window, qtbot, "backward")
    names = [name for name, _, _ in hbm_slots(window.state.trace)]
    assert "m" not in names and "l" not in names
    assert {"L", "D", "dQ", "dK", "dV"} <= set(names)  # the backward's own columns stay
    _choose_pass(window, qtbot, "training")  # its forward half keeps them
    assert {"m", "l"} <= {name for name, _, _ in hbm_slots(window.state.trace)}


def test_a_streamed_backward_forms_its_gradients_off_the_gui_thread(window, qtbot, monkeypatch):
    """While a backward's second tier is pending, the window (every step of the timeline
    painted, the statistics shown) never forms the whole gradients or the dense pass on
    the GUI thread: they come from the worker, then replace the placeholders."""
    import threading
    import time

    import compute.backward_numbers
    import compute.forward_numbers
    import compute.full_pass
    from compute.numbers import SHARED
    from desktop.scene import render
    from desktop.state import worker
    from desktop.state.config import Config

    SHARED.clear()
    monkeypatch.setattr(render, "STREAM_WORK", 0)
    monkeypatch.setattr(render, "BACKWARD_STREAM_WORK", 0)
    monkeypatch.setattr(worker, "THREAD_THRESHOLD_WORK", 0)
    monkeypatch.setattr(compute.full_pass, "CHUNK_ELEMENTS", 64)
    on_gui = []

    def watch(module, name):
        real = getattr(module, name)

        def wrapped(*a, **kw):
            if threading.current_thread() is threading.main_thread():
                on_gui.append(name)
            return real(*a, **kw)

        monkeypatch.setattr(module, name, wrapped)

    watch(compute.forward_numbers, "dense_pass")
    watch(compute.backward_numbers, "tiled_backward")
    real_check = worker._BuildJob.check
    monkeypatch.setattr(worker._BuildJob, "check", lambda job: (time.sleep(0.02), real_check(job)))
    # The worker waits for the first tier's paint however loaded the machine is (past
    # PAINT_WAIT_S it would go on unpainted and could finish before the check below).
    monkeypatch.setattr(worker, "PAINT_WAIT_S", 30.0)
    state = window.state
    c = Config(n=40, d=3, dv=2, block_q=6, block_k=7, input="random", seed=11, pass_name="backward")
    state.set_config(c)
    qtbot.waitUntil(lambda: state.config == c, timeout=30000)
    assert state.pending_parts  # the first tier is shown, the gradients still coming
    for step in range(0, state.n_steps, max(1, state.n_steps // 12)):
        state.set_step(step)
        window.grab()  # paint every view at this step
    assert on_gui == []
    qtbot.waitUntil(lambda: not state.pending_parts and not state.builder.busy, timeout=60000)
    window.grab()
    assert not any(img.pending for img in state.images.lanes["dense"].values())
