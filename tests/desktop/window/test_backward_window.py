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
