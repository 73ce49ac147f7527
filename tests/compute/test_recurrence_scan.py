"""compute.recurrence's scan of ℓ and a (x_j = α_j x_(j−1) + b_j) against the loop it
replaces, bit for bit: runs of α = 1 summed by np.cumsum add in the loop's order."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from compute.recurrence import _linear_scan, _unit_runs


def _loop(alpha, add, start):
    out, x = np.empty_like(add), start
    for j in range(alpha.shape[1]):
        x = alpha[:, j, None] * x + add[:, j]
        out[:, j] = x
    return out


@given(
    rows=st.integers(1, 4),
    n=st.integers(1, 60),
    k=st.integers(1, 5),
    changes=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([np.float64, np.float32]),
)
def test_the_scan_gives_the_loops_bits(rows, n, k, changes, seed, dtype):
    rng = np.random.default_rng(seed)
    alpha = np.where(rng.random((rows, n)) < changes, rng.random((rows, n)), 1.0).astype(dtype)
    alpha[:, 0] = rng.choice([0.0, 1.0, 0.5])  # before any key α is 0
    add = (rng.standard_normal((rows, n, k)) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
    start = rng.standard_normal((rows, k)).astype(dtype)
    want = _loop(alpha, add, start)
    got = add.copy()
    _linear_scan(alpha, got, start, _unit_runs(alpha))
    assert got.dtype == want.dtype
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_runs_start_where_any_rows_alpha_is_not_one():
    alpha = np.ones((2, 8))
    alpha[0, 3] = 0.5
    alpha[1, 6] = 0.25
    assert _unit_runs(alpha) == [(0, 3), (3, 6), (6, 8)]
    assert _unit_runs(np.ones((1, 4))) == [(0, 4)]
    alpha = np.full((1, 3), 0.5)
    assert _unit_runs(alpha) == [(0, 1), (1, 2), (2, 3)]
