"""Every control changes the trace as it should; programmatic updates don't re-fire."""

from __future__ import annotations

import compute
from desktop.state.config import Config


def test_every_control_changes_the_trace(window, qtbot):
    c, st = window.controls, window.state

    def trace():
        return st.trace

    c.n_spin.setValue(8)
    assert trace().schedule.n_q == 8 and st.config.input == "random"
    from desktop.panels.controls import n_from_slider, slider_from_n

    c.n_slider.setValue(slider_from_n(10))
    assert n_from_slider(slider_from_n(10)) == 10
    assert trace().schedule.n_q == 10 and c.n_spin.value() == 10
    c.nk_spin.setValue(12)
    assert trace().schedule.n_k == 12
    c.d_spin.setValue(4)
    assert trace().schedule.d == 4 and trace().q.shape == (10, 4)
    c.dv_spin.setValue(3)
    assert trace().schedule.d_v == 3 and trace().v.shape == (12, 3)
    c.bq_spin.setValue(3)
    assert trace().schedule.block_q == 3
    c.bk_spin.setValue(5)
    assert trace().schedule.block_k == 5 and trace().schedule.t_c == 3
    c.order_combo.setCurrentIndex(c.order_combo.findData("kv-outer"))
    assert trace().schedule.order == "kv-outer"
    c.causal_check.setChecked(True)
    assert trace().schedule.causal
    c.lse_check.setChecked(True)
    assert trace().schedule.save_lse
    c.dtype_combo.setCurrentIndex(c.dtype_combo.findData("float16"))
    assert trace().dtype == "float16"
    old_q = trace().q
    c.seed_spin.setValue(7)
    assert st.config.seed == 7 and not (trace().q == old_q).all()
    c.scale_spin.setValue(3.0)
    assert st.config.input_scale == 3.0
    assert abs(trace().q).max() > 3 * abs(old_q).max() / 2
    assert not c.paper_button.isEnabled()
    c.sram_spin.setValue(256)
    assert trace().sram_capacity == 256 and c.paper_button.isEnabled()
    assert "M = 256" in c.fits_label.text()
    c.paper_button.click()
    b_r, b_c = compute.paper_block_sizes(256, 4)
    assert (trace().schedule.block_q, trace().schedule.block_k) == (b_r, b_c)
    c.input_combo.setCurrentIndex(c.input_combo.findData("seed"))
    c.input_combo.activated.emit(c.input_combo.currentIndex())
    assert trace().schedule.n_q == 6 and st.config.input == "seed"
    assert c.n_spin.value() == 6  # the controls follow the inputs' real shape
    window.stats_panel.row_spin.setValue(4)
    assert st.row == 4


def test_programmatic_updates_do_not_request_builds(window, monkeypatch):
    calls = []
    monkeypatch.setattr(window.state.builder, "request", lambda cfg: calls.append(cfg))
    window.controls.show_config(Config(n=50, d=8, block_q=5, order="kv-outer", causal=True))
    assert calls == []


def test_transport_controls(window, qtbot):
    st, bar, pb = window.state, window.bar, window.playback
    bar.first_button.click()
    assert st.step == 0
    bar.forward_button.click()
    bar.forward_button.click()
    assert st.step == 2
    bar.back_button.click()
    assert st.step == 1
    bar.scrubber.setValue(10)
    assert st.step == 10 and "11 / 27" in bar.step_label.text()
    bar.last_button.click()
    assert st.step == st.n_steps - 1
    bar.speed_combo.setCurrentIndex(bar.speed_combo.findData(256))
    assert pb.speed == 256
    bar.play_button.click()  # at the end: replays from the start
    assert pb.playing
    qtbot.waitUntil(lambda: not pb.playing, timeout=3000)
    assert st.step == st.n_steps - 1


def test_playback_skips_frames_instead_of_drifting(window, qtbot):
    import time

    st, pb = window.state, window.playback
    st.set_step(0)
    pb.set_speed(8)
    t0 = time.perf_counter()
    pb.play()
    qtbot.wait(500)
    pb.pause()
    elapsed = time.perf_counter() - t0
    # The step follows the clock (about 4 steps in 0.5 s at 8 steps/s), never ahead of it,
    # however slow the frames were.
    assert 1 <= st.step <= elapsed * 8 + 1
    assert not pb._timer.isActive()


def test_keyboard_shortcuts(window, qtbot):
    from PySide6.QtCore import Qt

    st = window.state
    window.activateWindow()
    window.lanes["dense"].setFocus()
    qtbot.keyClick(window.lanes["dense"], Qt.Key.Key_Home)
    assert st.step == 0
    qtbot.keyClick(window.lanes["dense"], Qt.Key.Key_Right)
    assert st.step == 1
    qtbot.keyClick(window.lanes["dense"], Qt.Key.Key_Left)
    assert st.step == 0
    qtbot.keyClick(window.lanes["dense"], Qt.Key.Key_End)
    assert st.step == st.n_steps - 1
    qtbot.keyClick(window.lanes["dense"], Qt.Key.Key_Space)
    assert window.playback.playing
    qtbot.keyClick(window.lanes["dense"], Qt.Key.Key_Space)
    assert not window.playback.playing


def test_users_blocks_survive_n_going_up_and_back_down(window, qtbot):
    st, c = window.state, window.controls
    notices = []
    st.sigNotice.connect(notices.append)
    c.bq_spin.setValue(3)
    c.bk_spin.setValue(2)
    c.n_spin.setValue(1024)  # tiny blocks at large N: 342 × 512 tiles, millions of steps
    qtbot.waitUntil(lambda: not st.builder.busy and st.config.n == 1024, timeout=60000)
    s = st.trace.schedule
    assert (s.block_q, s.block_k) == (3, 2) and (c.bq_spin.value(), c.bk_spin.value()) == (3, 2)
    assert (s.t_r, s.t_c) == (342, 512)
    # More tiles than a lane draws: one frame advances a group, and the bar says so.
    from desktop.scene.grouping import grouping_for

    group = grouping_for(st.trace)
    assert group.stride > 1 and f"each frame: {group.per_frame} key tiles" in (
        window.bar.step_label.text()
    )
    st.set_step(0)
    window.playback.step_by(1)
    assert st.step == group.stride
    # Jumping through the row's key tiles goes to the exact update steps, not in frames.
    updates = st.trace.row_updates(st.row)[0].tolist()
    st.set_step(0)
    window.playback.row_tile(+1)
    assert st.step == next(u for u in updates if u > 0)
    led = st.trace.ledger().lanes["tiled"].counts
    closed = compute.closed_form_ledger(1024, 1024, 2, 2, block_q=3, block_k=2).lanes["tiled"]
    assert {t: dict(led[t]) for t in compute.TENSORS} == {
        t: dict(closed.counts[t]) for t in compute.TENSORS
    }
    c.n_spin.setValue(16)
    qtbot.waitUntil(lambda: not st.builder.busy and st.config.n == 16, timeout=60000)
    assert (st.config.block_q, st.config.block_k) == (3, 2)
    assert (c.bq_spin.value(), c.bk_spin.value()) == (3, 2)
    assert notices == []  # nothing was changed behind the user's back


def test_changing_n_says_why_the_source_changed(window, qtbot):
    st, c = window.state, window.controls
    before = {w: w.mapTo(c, w.rect().topLeft()) for w in (c.n_spin, c.d_spin, c.bq_spin)}
    assert st.config.input == "seed" and c.source_note.text() == ""
    c.n_spin.setValue(9)
    assert st.config.input == "random" and c.input_combo.currentData() == "random"
    assert "reference example is fixed at N = 6" in c.source_note.text()
    qtbot.wait(20)
    # The note's room was there before it: no control moved under the pointer.
    assert {w: w.mapTo(c, w.rect().topLeft()) for w in before} == before
    c.input_combo.setCurrentIndex(c.input_combo.findData("seed"))
    c.input_combo.activated.emit(c.input_combo.currentIndex())
    assert st.config.input == "seed" and st.config.n == 6 and c.source_note.text() == ""


def test_d_v_follows_d_until_set_apart(window, qtbot):
    st, c = window.state, window.controls
    c.d_spin.setValue(64)
    qtbot.waitUntil(lambda: not st.builder.busy and st.config.d == 64, timeout=60000)
    assert st.config.dv == 64 and c.dv_spin.value() == 64
    c.dv_spin.setValue(8)
    qtbot.waitUntil(lambda: not st.builder.busy and st.config.dv == 8, timeout=60000)
    c.d_spin.setValue(32)
    qtbot.waitUntil(lambda: not st.builder.busy and st.config.d == 32, timeout=60000)
    assert st.config.dv == 8  # set apart by the user: stays


def test_controls_have_stable_object_names(window):
    from PySide6.QtWidgets import QWidget

    for name in (
        "n_spin",
        "n_keys_spin",
        "d_spin",
        "dv_spin",
        "block_q_spin",
        "block_k_spin",
        "order_combo",
        "causal_check",
        "dtype_combo",
        "input_combo",
    ):
        assert window.findChild(QWidget, name) is not None, name


def test_auto_speed_plays_the_whole_run_in_twenty_seconds(window):
    from desktop.state.playback import AUTO, AUTO_SECONDS

    bar, pb = window.bar, window.playback
    bar.speed_combo.setCurrentIndex(bar.speed_combo.findData(AUTO))
    assert pb.speed == AUTO
    assert pb.rate == max(1.0, window.state.n_steps / AUTO_SECONDS)


def test_controls_show_a_file_larger_than_their_usual_range(window, tmp_path):
    import numpy as np

    path = tmp_path / "wide.npz"
    rng = np.random.default_rng(0)
    np.savez(
        path, q=rng.normal(size=(3, 300)), k=rng.normal(size=(4, 300)), v=rng.normal(size=(4, 2))
    )
    window.state.update_config(input="file", file=str(path))
    assert window.controls.d_spin.value() == 300 and window.state.trace.schedule.d == 300


def test_paper_blocks_are_the_largest_that_fit_near_the_rule():
    from desktop.state.config import paper_blocks, working_set

    for cfg in (
        Config(sram=20),  # the rule gives 2×3, which needs 30
        Config(input="random", n=37, d=5, dv=3, sram=150),
        Config(input="random", n=9, d=16, dv=16, sram=4000),  # blocks past N: clamped
        Config(input="random", n=300, d=64, dv=64, sram=100_000),  # the rule fits
    ):
        rule = paper_blocks(cfg)
        assert rule.paper == compute.paper_block_sizes(cfg.sram, cfg.d)
        assert rule.paper_need == working_set(cfg, *rule.paper)
        b_r, b_c = rule.chosen
        assert rule.chosen_need == working_set(cfg, b_r, b_c) <= cfg.sram
        # Brute force: no tile within the rule's bounds is larger (as clamped to N) and fits.
        area = min(b_r, cfg.n) * min(b_c, cfg.n_k)
        for r in range(1, rule.paper[0] + 1):
            for c in range(1, rule.paper[1] + 1):
                if working_set(cfg, r, c) <= cfg.sram:
                    assert min(r, cfg.n) * min(c, cfg.n_k) <= area
        if rule.paper_need <= cfg.sram:
            assert rule.chosen == rule.paper
    assert paper_blocks(Config(sram=20)).chosen == (1, 2)
    assert paper_blocks(Config(sram=5)).chosen is None  # even 1×1 needs 11


def test_paper_button_chooses_fitting_blocks_and_says_why(window, qtbot):
    st, c = window.state, window.controls
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        c.sram_spin.setValue(20)
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        c.paper_button.click()
    assert (st.config.block_q, st.config.block_k) == (1, 2)
    note = c.paper_note.text()
    assert "Paper's rule: 2×3, working set 30 of M = 20" in note
    assert "Chose 1×2" in note and "ignores S_ij, m and ℓ" in note
    assert c.fits_label.text().startswith("✔ fits")
