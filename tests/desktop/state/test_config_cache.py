"""desktop.state.config: inputs named by their source, so a change that keeps them reuses
the numbers that depend on them only (compute.numbers)."""

from __future__ import annotations

import numpy as np

from compute.numbers import SHARED
from desktop.state.config import Config, build, inputs_key, make_inputs


def test_inputs_are_keyed_by_source():
    c = Config(n=40, d=4, dv=4, block_q=4, block_k=4, input="random", seed=3)
    assert inputs_key(c) == inputs_key(c.replace(block_q=7, dtype="float16", causal=True))
    assert inputs_key(c) != inputs_key(c.replace(seed=4))
    assert inputs_key(c) != inputs_key(c.replace(n=41))
    assert inputs_key(c) != inputs_key(c.replace(input_scale=2.0))
    assert make_inputs(c) is make_inputs(c.replace(order="kv-outer"))
    assert not make_inputs(c).q.flags.writeable


def test_a_file_saved_again_is_read_again(tmp_path):
    path = tmp_path / "qkv.npz"
    rng = np.random.default_rng(0)
    np.savez(path, q=rng.standard_normal((5, 2)), k=rng.standard_normal((5, 2)), v=np.ones((5, 2)))
    c = Config(input="file", file=str(path))
    first = make_inputs(c)
    np.savez(path, q=np.zeros((5, 2)), k=np.zeros((5, 2)), v=np.ones((5, 2)))
    again = make_inputs(c)
    assert not np.array_equal(first.q, again.q) and np.all(again.q == 0)


def test_a_block_change_reuses_the_dense_numbers_bit_for_bit():
    SHARED.clear()
    c = Config(n=50, d=4, dv=4, block_q=4, block_k=4, input="random", seed=1, pass_name="training")
    _, a = build(c)
    ref, grads = a.reference, a.gradients("dense")
    misses = SHARED.misses
    _, b = build(c.replace(block_q=9, block_k=3, dtype="float16"))
    assert b.reference is ref and b.gradients("dense") is grads  # found, not recomputed
    assert SHARED.misses == misses + 2  # only the tiled forward and backward were computed
