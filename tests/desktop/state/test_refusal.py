"""Issue 27 item 22: the memory budget is checked on the configuration the user lands on.

Raising B_r before B_c at N = 4096, d = 128 passes through 64×2 blocks, over the budget.
That step is refused without a dialog: the controls keep what was asked, the old
numbers stay veiled with the sentence (never shown as current), and the next request
that fits is built and lifts the veil. Real builds, real widgets; nothing patched.
"""

from __future__ import annotations

from desktop.state.config import Config

BIG = dict(n=4096, d=128, dv=128, input="random", pass_name="forward")


def test_passing_through_an_over_budget_config_is_not_an_error(window, dialogs, qtbot):
    state = window.state
    state.builder.force_inline = True
    start = Config(n=64, d=128, dv=128, block_q=2, block_k=2, input="random")
    state.set_config(start)
    assert state.config == start
    over = Config(**BIG, block_q=64, block_k=2)
    state.set_config(over)  # B_r raised first: over the budget
    assert dialogs == []  # no modal dialog on the way
    assert state.refused and "memory budget" in state.refusal
    assert state.requested == over and state.config == start  # controls keep the request
    veils = [v for v in window.veils if v.isVisible()]
    assert len(veils) == len(window.veils)  # the old numbers are covered
    assert "memory budget" in window.veils[0].text()
    assert not window.veils[0].grab().isNull()  # paints the sentence, wrapped
    from PySide6.QtWidgets import QSpinBox

    assert window.findChild(QSpinBox, "block_q_spin").value() == 64
    lands = Config(n=64, d=128, dv=128, block_q=64, block_k=64, input="random")
    state.set_config(lands)  # then B_c (and a size that builds quickly here)
    assert state.config == lands and not state.refused and state.refusal == ""
    assert not any(v.isVisible() for v in window.veils)
    assert dialogs == []


def test_an_over_budget_first_config_still_opens_the_reference_example(qtbot):
    from desktop.state.app_state import AppState

    state = AppState()
    state.builder.force_inline = True
    errors: list[str] = []
    state.sigError.connect(errors.append)
    state.set_config(Config(**BIG, block_q=64, block_k=2))
    assert errors and "memory budget" in errors[0]
    assert state.config == Config() and not state.refused
