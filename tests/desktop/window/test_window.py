"""The window on the reference example: ledger totals, per-row state, clicks, dialogs, frames."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint, Qt

import compute
from desktop.panels.stats import fmt, fmt_vec
from desktop.scene import geometry as geo
from desktop.state.config import Config


def test_opens_on_seed_example_and_ends_at_240_and_96(window):
    st = window.state
    assert st.config == Config()
    assert st.trace.schedule.n_q == 6 and st.trace.schedule.d == 2
    window.playback.step_by(-st.n_steps)
    assert st.step == 0
    window.playback.step_by(st.n_steps)
    assert st.step == st.n_steps - 1
    assert window.ledger_panel.dense_total_label.text() == "240"
    assert window.ledger_panel.tiled_total_label.text() == "96"
    assert window.ledger_panel.ratio_label.text() == "2.50×"


def test_each_tile_of_q0_shows_the_cores_state(window):
    st = window.state
    trace = st.trace
    st.set_row(0)
    steps, tiles = trace.row_updates(0)
    assert len(steps) == trace.schedule.t_c
    labels = window.stats_panel.labels
    for step, tile in zip(steps.tolist(), tiles.tolist(), strict=True):
        st.set_step(step)
        core = trace.row_state(0, step)
        assert core.tile == tile + 1
        assert labels["m"].text() == fmt(core.m)
        assert labels["l"].text() == fmt(core.l)
        assert labels["alpha"].text() == fmt(core.alpha)
        assert labels["a"].text() == fmt_vec(core.a)
        assert labels["out"].text() == fmt_vec(core.partial_output)
        # The tiled lane's SRAM tiles hold the same numbers.
        sram = {t.tensor: t for t in geo.tiled_sram(trace, step)}
        assert sram["m"].values[0, 0] == core.m
        assert sram["l"].values[0, 0] == core.l
        np.testing.assert_array_equal(sram["O"].values[0], core.a)
    # After the last tile, a/ℓ is the output and the error is against float64.
    np.testing.assert_allclose(trace.row_state(0, steps[-1]).partial_output, trace.reference[0])
    err_row = np.abs(trace.tiled_output[0].astype(np.float64) - trace.reference[0]).max()
    assert labels["error"].text() == (
        f"this row {fmt(err_row)}, all rows {fmt(trace.max_abs_error)} "
        f"(tiled in {trace.dtype} vs float64)"
    )
    assert window.stats_panel.names["error"].text() == "max |O − O_ref|"


def _row_point(lane, tensor: str, row: int) -> QPoint:
    lane.grab()  # lays out and paints once
    rect = lane._layout()[tensor]
    n_q = lane.state.trace.schedule.n_q
    y = rect.top() + (row + 0.5) * rect.height() / n_q
    return QPoint(int(rect.center().x()), int(y))


def test_clicking_a_row_selects_it_in_either_lane(window, qtbot):
    st = window.state
    for lane_name, tensor, row in (("dense", "S", 3), ("tiled", "Q", 5), ("dense", "O", 1)):
        lane = window.lanes[lane_name]
        qtbot.mouseClick(lane, Qt.MouseButton.LeftButton, pos=_row_point(lane, tensor, row))
        assert st.row == row
        assert window.stats_panel.row_spin.value() == row
    # K rows are keys, not query rows: clicking them leaves the selection alone.
    lane = window.lanes["dense"]
    qtbot.mouseClick(lane, Qt.MouseButton.LeftButton, pos=_row_point(lane, "K", 4))
    assert st.row == 1


def test_clicking_an_sram_tile_row_selects_it(window, qtbot):
    st = window.state
    st.set_step(st.trace.row_updates(2)[0][0])  # block 1 updating
    lane = window.lanes["tiled"]
    lane.grab()
    tile, _slot, rect = next(x for x in lane._sram if x[0].tensor == "Q")
    assert tile.first_row == 2
    pos = QPoint(int(rect.center().x()), int(rect.top() + rect.height() * 0.75))
    qtbot.mouseClick(lane, Qt.MouseButton.LeftButton, pos=pos)
    assert st.row == 3


def test_bad_npy_shows_a_dialog_and_keeps_the_previous_state(window, dialogs, tmp_path):
    st = window.state
    before_config, before_trace = st.config, st.trace
    bad_shape = tmp_path / "bad.npy"
    np.save(bad_shape, np.zeros((2, 3)))
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"not a numpy file at all")
    nan = tmp_path / "nan.npz"
    np.savez(nan, q=np.full((4, 2), np.nan), k=np.ones((4, 2)), v=np.ones((4, 2)))
    for path in (bad_shape, garbage, nan, tmp_path / "missing.npy"):
        st.update_config(input="file", file=str(path))
        assert st.config is before_config and st.trace is before_trace
        assert window.controls.input_combo.currentData() == "seed"
    assert len(dialogs) == 4
    for text in dialogs:
        assert text.endswith(".") and "\n" not in text


def test_open_file_through_the_dialog(window, monkeypatch, tmp_path):
    from PySide6.QtWidgets import QFileDialog

    path = tmp_path / "qkv.npz"
    rng = np.random.default_rng(1)
    np.savez(path, q=rng.normal(size=(5, 3)), k=rng.normal(size=(7, 3)), v=rng.normal(size=(7, 4)))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    window.controls.open_file()
    s = window.state.trace.schedule
    assert (s.n_q, s.n_k, s.d, s.d_v) == (5, 7, 3, 4)
    assert window.state.config.input == "file"
    assert window.controls.n_spin.value() == 5 and window.controls.nk_spin.value() == 7


def test_render_frames_of_window_lanes_and_panels(window):
    for target in ("window", "dense", "tiled", "stats", "ledger"):
        image = window.render_frame(3, target)
        assert not image.isNull() and image.width() > 100
    assert window.state.step == 3


def test_status_bar_names_the_step(window):
    window.state.set_step(4)
    assert window.status_label.text() == window.state.trace.steps[4].describe()


def test_themes_and_about(window, dialogs):
    for theme in ("dark", "light", "system"):
        window.set_theme(theme)
        window.render_frame(5)
    window.about()
    assert "FlashAttention" in dialogs[-1]


def test_causal_kv_outer_with_lse_draws_every_step(window):
    window.state.set_config(
        Config(
            n=9,
            n_keys=11,
            d=3,
            dv=2,
            block_q=2,
            block_k=3,
            order="kv-outer",
            causal=True,
            save_lse=True,
            input="random",
            sram=40,
        )
    )
    trace = window.state.trace
    assert trace.schedule.causal and trace.schedule.order == "kv-outer"
    for step in range(trace.n_steps):
        window.state.set_step(step)
        for lane in window.lanes.values():
            lane.grab()
    led = trace.ledger()
    assert window.ledger_panel.tiled_total_label.text() == f"{led.lanes['tiled'].total_elements:,}"
    assert (
        compute.ledger(
            9, 11, 3, 2, block_q=2, block_k=3, order="kv-outer", causal=True, save_lse=True
        )
        .lanes["tiled"]
        .total_elements
        == led.lanes["tiled"].total_elements
    )


def test_a_failing_first_configuration_falls_back_to_the_seed(qtbot, dialogs, tmp_path):
    from desktop.window.main_window import MainWindow

    w = MainWindow(Config(input="file", file=str(tmp_path / "gone.npz")), persist=False)
    qtbot.addWidget(w)
    assert len(dialogs) == 1 and "does not exist" in dialogs[0]
    assert w.state.config == Config() and w.state.trace is not None
    w.close()


def test_jumping_through_the_selected_rows_key_tiles(window, qtbot):
    st = window.state
    st.set_row(3)
    window.playback.step_by(-st.n_steps)
    updates = st.trace.row_updates(3)[0].tolist()
    seen = []
    for _ in range(len(updates) + 1):  # one extra press past the last tile stays put
        window.stats_panel.sigTileJump.emit(+1)
        seen.append(st.step)
    assert seen == updates + [updates[-1]]
    window.playback.row_tile(-1)
    assert st.step == updates[-2]


def test_dropping_an_npz_opens_it(window, tmp_path):
    from PySide6.QtCore import QMimeData, QUrl

    path = tmp_path / "drop.npz"
    rng = np.random.default_rng(2)
    np.savez(path, q=rng.normal(size=(4, 2)), k=rng.normal(size=(4, 2)), v=rng.normal(size=(4, 2)))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    assert window._dropped_file(mime) == str(path)
    other = QMimeData()
    other.setUrls([QUrl.fromLocalFile(str(tmp_path / "notes.txt"))])
    assert window._dropped_file(other) is None
    window.state.update_config(input="file", file=window._dropped_file(mime))
    assert window.state.trace.schedule.n_q == 4
    assert window.controls.input_combo.currentText() == "drop.npz"  # not "File…"


def test_ledger_shows_running_and_final_totals(window):
    st = window.state
    st.set_step(0)
    panel = window.ledger_panel
    assert panel.dense_total_label.text() == f"{st.trace.totals_at(0)['dense']:,}"
    assert panel.dense_run_label.text() == "of 240 in the run"
    assert panel.tiled_run_label.text() == "of 96 in the run"


def test_tooltips_name_the_cell_and_its_value(window):
    from PySide6.QtCore import QPointF

    lane = window.lanes["dense"]
    lane.grab()
    rect = lane._layout()["S"]
    n = window.state.trace.schedule.n_q
    pos = QPointF(rect.left() + 2.5 * rect.width() / n, rect.top() + 1.5 * rect.height() / n)
    value = window.state.trace.scores[1, 2]
    assert lane._tooltip(pos) == f"S[1, 2] = {value:.6g}"


# ---- first launch ---------------------------------------------------------------------
def test_initial_geometry_fits_the_available_screen():
    from PySide6.QtCore import QRect

    from desktop.window.main_window import DESIGN_SIZE, initial_geometry

    for available in (QRect(0, 0, 1366, 740), QRect(0, 28, 1366, 740), QRect(1920, 0, 1280, 680)):
        rect = initial_geometry(available)
        assert available.contains(rect), (available, rect)
        assert rect.width() < 1366 and rect.height() < 740
    big = initial_geometry(QRect(0, 0, 2560, 1400))
    assert (big.width(), big.height()) == DESIGN_SIZE


def test_layout_fits_a_1366_by_768_screen(window):
    # What the layout needs at least (docks, lanes' minimum height) fits a small laptop.
    need = window.minimumSizeHint()
    assert need.width() <= 1366 - 16 and need.height() <= 768 - 48, need


def test_opens_at_step_one_with_a_hint_that_goes_once_used(qtbot, dialogs):
    from desktop.window.main_window import HINT, MainWindow

    w = MainWindow(persist=False)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.trace is not None, timeout=10_000)
    assert w.state.step == 0 and "step 1 /" in w.bar.step_label.text()
    assert w.hint_label.isVisible() and w.hint_label.text() == HINT
    w.playback.play()
    assert w.hint_label.isHidden()
    w.playback.pause()
    w.close()


def test_hint_also_goes_when_a_row_is_followed(window):
    assert window.hint_label.isVisible()
    window.state.set_row(3)
    assert window.hint_label.isHidden()


def test_title_names_the_configuration_not_the_app_again(window):
    title = window.windowTitle()
    assert "FlashAttention Explorer" not in title  # Qt appends the display name itself
    assert title == "reference example, N = 6, d = 2, blocks 2×2"


def test_about_lists_every_shortcut_the_version_and_the_papers(window, dialogs):
    from PySide6.QtGui import QAction, QKeySequence

    from desktop.window.main_window import app_version

    window.about()
    text = dialogs[-1]
    keys = [
        a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        for a in window.findChildren(QAction)
    ]
    keys = [k for k in keys if k]
    assert len(keys) >= 12  # play, 4 steps, 2 tile jumps, open, quit, 3 exports
    for k in keys:
        assert f"<b>{k}</b>" in text
    assert app_version() in text and "arXiv:2205.14135" in text and "arXiv:2307.08691" in text


def test_a_short_screen_tabs_the_ledger_beside_the_statistics(window):
    from PySide6.QtCore import QRect

    window.fit_to(QRect(0, 0, 1366, 740))
    right = Qt.DockWidgetArea.RightDockWidgetArea
    assert window.dockWidgetArea(window.docks["ledger"]) == right
    assert window.docks["ledger"] in window.tabifiedDockWidgets(window.docks["stats"])
    assert QRect(0, 0, 1366, 740).contains(window.geometry())
    window.fit_to(QRect(0, 0, 1920, 1080))  # a tall screen: the ledger strip comes back
    assert window.dockWidgetArea(window.docks["ledger"]) == Qt.DockWidgetArea.BottomDockWidgetArea


def test_gpu_panel_fits_its_dock_without_scrolling_at_1600_by_1000(window, qtbot):
    # The panel sits in a scroll area sized by its preferred heights; the heatmap used to ask
    # for 480 px, so the whole panel scrolled with the bundled report open.
    from desktop.panels.gpu.panel import GpuPanel

    window.resize(1600, 1000)
    window.docks["gpu"].raise_()
    panel = window.findChild(GpuPanel)
    scroll = window.docks["gpu"].widget()
    qtbot.waitUntil(lambda: panel.isVisible() and panel.table.rowCount() > 0)
    qtbot.waitUntil(lambda: panel.height() <= scroll.viewport().height())
    assert scroll.verticalScrollBar().maximum() == 0
    # The room beyond the tables goes to the heatmap (stacked layout), not to a gap.
    assert panel.sweep_view.height() > panel.sweep_view.minimumSizeHint().height()


def test_view_menu_lists_the_panels_together_then_the_theme(window):
    actions = window._view_menu.actions()
    texts = [a.text() for a in actions]
    theme = texts.index("Theme")
    separator = actions.index(window.panels_separator)
    assert separator < theme
    panels = {d.toggleViewAction().text() for d in window.docks.values()}
    assert set(texts[:separator]) == panels  # the GPU panel too, not after Theme
    file_texts = [a.text().replace("&", "") for a in window.file_menu.actions()]
    assert "Back to the reference example" in file_texts


def test_a_long_file_name_is_elided_in_the_source_box(window, tmp_path):
    path = tmp_path / "my_attention_inputs_with_a_rather_long_name.npz"
    rng = np.random.default_rng(3)
    np.savez(path, q=rng.normal(size=(4, 2)), k=rng.normal(size=(4, 2)), v=rng.normal(size=(4, 2)))
    window.state.update_config(input="file", file=str(path))
    combo = window.controls.input_combo
    text = combo.currentText()
    assert text.startswith("my_") and text.endswith(".npz") and "…" in text
    assert combo.fontMetrics().horizontalAdvance(text) <= combo.width() - 24
