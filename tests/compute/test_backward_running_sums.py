"""compute.running_sums: every entry, however it is reached, has np.cumsum's digits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compute.running_sums as rs
from compute.backward_rows import _split, _tiles_of
from compute.running_sums import RunningSums


def _reference(a, b_padded, scale):
    per = np.matmul(a, b_padded)
    if scale is not None:
        per = per * scale
    out = np.zeros((per.shape[0] + 1, *per.shape[1:]), dtype=per.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        np.cumsum(per, axis=0, out=out[1:])
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.integers(1, 5),
    keys=st.integers(1, 40),
    block=st.integers(1, 9),
    width=st.integers(1, 6),
    dtype=st.sampled_from([np.float64, np.float32]),
    scaled=st.booleans(),
    chunk=st.sampled_from([1, 3, 7, 1 << 15]),
    seed=st.integers(0, 2**16),
)
def test_entries_have_cumsums_digits_in_any_order(
    monkeypatch, rows, keys, block, width, dtype, scaled, chunk, seed
):
    monkeypatch.setattr(rs, "CHUNK_ELEMENTS", chunk)  # checkpoints every few blocks, or none
    rng = np.random.default_rng(seed)
    ds = rng.standard_normal((rows, keys)).astype(dtype)
    kd = rng.standard_normal((keys, width)).astype(dtype)
    kd.flat[:: max(1, kd.size // 3)] = -0.0  # a signed zero stays as cumsum leaves it
    scale = dtype(0.37) if scaled else None
    a = _split(ds.T, block).transpose(0, 2, 1)
    want = _reference(a, _split(kd, block), scale)
    tiles, last = _tiles_of(kd, block)
    sums = RunningSums(a, tiles, scale, b_last=last)
    assert sums.shape == want.shape and len(sums) == len(want)
    for k in rng.permutation(len(want)):
        got = sums[int(k)]
        assert got.dtype == want.dtype and got.tobytes() == want[k].tobytes()
        assert not got.flags.writeable
    assert sums[-1].tobytes() == want[-1].tobytes()
    assert np.asarray(sums).tobytes() == want.tobytes()
    assert sums[:, 0].tobytes() == want[:, 0].tobytes()


def test_an_entry_past_the_end_is_an_index_error():
    sums = RunningSums(np.ones((3, 2, 2)), np.ones((3, 2, 4)))
    with pytest.raises(IndexError):
        sums[4]
    with pytest.raises(IndexError):
        sums[-5]
    assert sums[-4].tobytes() == np.zeros((2, 4)).tobytes()


@settings(max_examples=80, deadline=None)
@given(
    steps=st.integers(0, 40),
    rows=st.integers(1, 9),
    width=st.sampled_from([1, 3, 64, 130, 300]),
    axis=st.integers(0, 2),
    in_place=st.booleans(),
    dtype=st.sampled_from([np.float64, np.float32]),
    seed=st.integers(0, 2**16),
)
def test_ordered_cumsum_has_cumsums_digits(steps, rows, width, axis, in_place, dtype, seed):
    """Wide or narrow steps, any axis, in place or not: the bits of np.cumsum (which
    adds in order), never a reassociated sum."""
    shape = [rows, width]
    shape.insert(axis, steps)
    # values of mixed magnitude, so that any other order of additions shows in the bits
    x = np.random.default_rng(seed).standard_normal(shape) * 10.0 ** np.random.default_rng(
        seed + 1
    ).integers(-8, 8, size=shape)
    x = x.astype(dtype)
    want = np.cumsum(x, axis=axis)
    got = rs.ordered_cumsum(x, axis=axis, out=x if in_place else None)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)
    if in_place:
        assert got is x


def test_ordered_cumsum_adds_wide_steps_by_step(monkeypatch):
    """The loop is taken where steps are wide (the point of it), and gives cumsum's bits."""
    calls = []
    real = np.cumsum
    monkeypatch.setattr(rs.np, "cumsum", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = np.random.default_rng(3).standard_normal((50, 2, rs.WIDE_STEP))
    got = rs.ordered_cumsum(x)
    assert not calls
    assert np.array_equal(got, real(x, axis=0))
