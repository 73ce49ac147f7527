"""The Mask control sets the trace's mask; the lanes draw its tile classes; the statistics
panel says why a row is zero."""

from __future__ import annotations

import numpy as np

from compute.mask import Mask


def test_the_mask_control_sets_the_trace_mask(window):
    c, st = window.controls, window.state
    m = c.mask_control
    c.n_spin.setValue(12)
    c.nk_spin.setValue(8)
    c.causal_check.setChecked(True)
    assert st.trace.schedule.mask == Mask.causal_mask()
    m.swap_button.click()
    assert st.trace.schedule.mask == Mask.causal_mask(top_left=True)
    assert m.align_combo.currentData() is True
    m.left_spin.setValue(3)
    assert st.trace.schedule.mask == Mask(3, 0, True)
    c.causal_check.setChecked(False)
    c.nk_spin.setValue(0)  # N_keys = N again: packing needs it
    m.right_spin.setValue(2)
    assert st.trace.schedule.mask == Mask(3, 2, True)  # a window aligned top-left
    m.packed_edit.setText("5,x")
    m.packed_edit.editingFinished.emit()
    assert not m.error_label.isHidden() and "commas" in m.error_label.text()
    m.packed_edit.setText("5, 1, 6")
    m.packed_edit.editingFinished.emit()
    assert m.error_label.isHidden()
    assert st.trace.schedule.mask == Mask(3, 2, False, (5, 1, 6))  # packed: square, no alignment
    assert st.config.packed == "5,1,6" and st.config.window == "3,2"
    m.show_config(st.config)  # set back from the config shown, as after a build
    assert (m.left_spin.value(), m.right_spin.value(), m.packed_edit.text()) == (3, 2, "5,1,6")


def test_the_stats_panel_says_why_a_row_is_zero(window):
    c, st = window.controls, window.state
    c.n_spin.setValue(10)
    c.nk_spin.setValue(6)
    c.causal_check.setChecked(True)
    st.set_row(1)
    note = window.findChild(type(c.mask_control.error_label), "mask_note")
    assert not note.isHidden() and "Row 1 sees no key" in note.text()
    st.set_row(7)
    assert note.isHidden()


def test_the_ledger_sweeps_the_window_size_for_a_window():
    from compute import pass_ledger
    from desktop.panels.ledger import N_AXIS, WINDOW_AXIS, sweep
    from desktop.state.config import Config

    config = Config(n=64, d=4, dv=4, block_q=8, block_k=8, causal=True, window="16,0")
    data = sweep(config, 1000)
    assert data["axis"] == WINDOW_AXIS and 16 in data["n"].tolist()
    at = data["n"].tolist().index(16)
    led = pass_ledger("forward", 64, 64, 4, 4, block_q=8, block_k=8, causal=config.mask)
    assert data["q-outer"][at] == led.lanes["tiled"].total_elements
    assert np.all(np.diff(data["q-outer"]) >= 0)  # a wider window never loads less
    assert sweep(config.replace(window=""), 1000)["axis"] == N_AXIS
    # Cached by what it depends on: new inputs find the same sweep, a new window its own.
    assert sweep(config.replace(seed=5), 1000) is data
    wider = sweep(config.replace(window="24,0"), 1000)
    assert wider is not data and 24 in wider["n"].tolist()


def test_compare_shows_both_alignments_in_one_click(window):
    c = window.controls
    c.n_spin.setValue(12)
    c.nk_spin.setValue(8)
    dialog = c.mask_control.compare()
    bottom, top = (m.schedule for m in dialog.maps)
    assert bottom.mask == Mask.causal_mask() and top.mask == Mask.causal_mask(top_left=True)
    assert "4 row(s) see no key" in dialog.texts[0].text()  # rows 0..3: 12 queries, 8 keys
    assert "0 row(s) see no key" in dialog.texts[1].text()
    assert f"{int(bottom.visible.sum())} of" in dialog.texts[0].text()
    dialog.grab()  # paints without error
    dialog.close()
