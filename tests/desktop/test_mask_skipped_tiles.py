"""A key tile no query row sees, in the K/V-outer lanes: its load step moves nothing and
the step's equation says it is skipped, forward and backward (NumPy only, no widgets)."""

from __future__ import annotations

import numpy as np

import compute
from compute.mask import Mask
from desktop.scene.equations import PHASE_TEXT, step_equation


def test_a_skipped_key_tile_is_said_and_not_loaded():
    inp = compute.random_inputs(4, 3, 2, n_k=12, seed=5)
    # Top-left causal: row 3 sees keys 0..3, so tiles 2 and 3 (keys 6..11) are never seen.
    tr = compute.build_trace(
        inp.q, inp.k, inp.v, block_q=2, block_k=3, order="kv-outer",
        causal=Mask.causal_mask(top_left=True), pass_name="training",
    )  # fmt: skip
    assert tr.schedule.seen_tiles.tolist() == [True, True, False, False]
    said = {}
    for st in tr.steps:
        a = st.tiled
        if a is not None and a.phase in ("load_kv", "bwd_load_kv"):
            text = step_equation(tr, "tiled", st.index, 0)
            said[(a.phase, a.block_j)] = (bool(a.transfers), text)
    for phase in ("load_kv", "bwd_load_kv"):
        for j in (0, 1):
            assert said[(phase, j)][0] and "skip" not in said[(phase, j)][1]
        for j in (2, 3):
            moved, text = said[(phase, j)]
            assert not moved and text.startswith(f"skip K, V tile {j}: no query row sees it")
    assert said[("load_kv", 0)][1] == PHASE_TEXT[("tiled", "load_kv")]
    # The output is still exact: rows see only the keys of the tiles that were loaded.
    want = compute.dense_attention(inp.q, inp.k, inp.v, mask=Mask.causal_mask(top_left=True))
    np.testing.assert_allclose(tr.tiled_output, want, rtol=0, atol=1e-12)
