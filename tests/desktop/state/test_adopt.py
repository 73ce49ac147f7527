"""AppState.adopt: a copy shows what the original shows, with no rebuild."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")


def test_a_copy_takes_step_row_and_key_row(qapp):
    from desktop.state.app_state import AppState
    from desktop.state.config import Config

    original = AppState()
    original.builder.force_inline = True
    original.set_config(Config(pass_name="backward"))
    original.set_step(11)
    original.set_row(3)
    original.set_key(4)
    copy = AppState()
    copy.adopt(original)
    assert copy.trace is original.trace  # no rebuild
    assert (copy.step, copy.row, copy.key) == (11, 3, 4)
