"""A one-part build makes the statistics panel's rows on the worker, as a streamed one."""

from __future__ import annotations

import pytest

from desktop.state.config import Config
from desktop.state.worker import build_all


@pytest.mark.parametrize("pass_name", ["forward", "backward", "training"])
def test_the_selected_rows_come_made_with_the_trace(pass_name):
    cfg = Config(n=11, d=3, dv=2, block_q=3, block_k=4, input="random", pass_name=pass_name)
    firsts = []
    _config, trace, _images = build_all(
        cfg, on_first=lambda *a: firsts.append(a), check=lambda: None, row=7, key=6
    )
    assert firsts == []  # this size comes in one part
    forward_plots = pass_name != "backward"
    assert trace.cached("blocks") == int(forward_plots)
    if forward_plots:
        trace.row_history(7)  # the panel's row: its block (7 // 3) is the one made
        assert trace.cached("blocks") == 1
    if pass_name != "forward":
        assert trace.cached("bwd_blocks") == 1 and trace.cached("key_tiles") == 1
        trace.backward_row(7), trace.key_row(6)  # the panel's rows: nothing new computed
        assert trace.cached("bwd_blocks") == 1 and trace.cached("key_tiles") == 1
