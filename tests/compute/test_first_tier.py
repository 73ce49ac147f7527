"""compute.first_tier: the numbers shown within a frame equal the pass over all of S.

S's block means by bilinearity against independent block means of the dense S; a few
rows' statistics and outputs against compute.full_pass's rows; |S| and P on sampled
whole rows against the dense S and its softmax. Random shapes, blocks that do not
divide N and blocks larger than N, causal or not, every order and dtype.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import DTYPES, ORDERS, random_inputs
from compute.attention import causal_mask, default_scale
from compute.first_tier import dense_rows, row_sample, score_means, tiled_rows
from compute.full_pass import full_pass
from compute.schedule import Schedule
from tests.compute.test_full_pass import block_means


def _dense_s(q, k, causal, scale):
    s = (q @ k.T) * scale
    if causal:
        n_q, n_k = q.shape[0], k.shape[0]
        s = np.where(causal_mask(np.arange(n_q), np.arange(n_k), n_q, n_k), s, -np.inf)
    return s


@settings(max_examples=80, deadline=None)
@given(
    n_q=st.integers(1, 70),
    n_k=st.integers(1, 70),
    d=st.integers(1, 6),
    cap=st.integers(1, 20),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_score_means_are_the_block_means_of_s(n_q, n_k, d, cap, causal, seed):
    inputs = random_inputs(n_q, d, 3, n_k=n_k, seed=seed)
    scale = default_scale(d)
    s = _dense_s(inputs.q, inputs.k, causal, scale)
    _assert_score_means(inputs, s, causal, scale, cap)


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 70),
    n_k=st.integers(1, 70),
    cap=st.integers(1, 20),
    left=st.integers(-1, 30),
    right=st.integers(-1, 30),
    top_left=st.booleans(),
    packed=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_score_means_under_every_mask_are_the_block_means_of_s(
    n, n_k, cap, left, right, top_left, packed, seed
):
    """Windows, both alignments and packed sequences: the cells a mask cuts (formed from
    their entries, every row of cells at once) as the dense S's block means."""
    from compute.mask import Mask

    if packed:
        cuts = np.random.default_rng(seed).integers(1, 6, size=n)
        lengths = tuple(int(x) for x in np.diff(np.unique(np.r_[0, np.cumsum(cuts), n].clip(0, n))))
        mask, n_k = Mask(left=left, right=right, lengths=tuple(x for x in lengths if x)), n
    else:
        mask = Mask(left=left, right=right, top_left=top_left)
    inputs = random_inputs(n, 3, 2, n_k=n_k, seed=seed)
    scale = default_scale(3)
    s = (inputs.q @ inputs.k.T) * scale
    s = np.where(causal_mask(np.arange(n), np.arange(n_k), n, n_k, mask), s, -np.inf)
    _assert_score_means(inputs, s, mask, scale, cap)


def _assert_score_means(inputs, s, mask, scale, cap):
    """score_means without S equals the dense S's block means (−∞ cells alike)."""
    want, factor = block_means(s, cap)
    got = score_means(inputs.q, inputs.k, causal=mask, scale=scale, cap=cap)
    assert got.factor == factor
    assert np.array_equal(np.isneginf(got.values), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got.values[finite], want[finite], rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    n_q=st.integers(1, 50),
    n_k=st.integers(1, 50),
    block_q=st.integers(1, 60),
    block_k=st.integers(1, 60),
    order=st.sampled_from(ORDERS),
    causal=st.booleans(),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
    rows=st.tuples(st.integers(0, 49), st.integers(1, 50)),
)
def test_a_few_rows_equal_the_full_pass(
    n_q, n_k, block_q, block_k, order, causal, dtype, seed, rows
):
    inputs = random_inputs(n_q, 4, 3, n_k=n_k, seed=seed)
    q, k, v = inputs.q, inputs.k, inputs.v
    s = Schedule(n_q, n_k, 4, 3, block_q, block_k, order=order, causal=causal)
    scale = default_scale(4)
    r0 = min(rows[0], n_q - 1)
    r1 = min(n_q, r0 + rows[1])
    with np.errstate(over="ignore", invalid="ignore"):
        full = full_pass(q, k, v, s, scale=scale, dtype=dtype, cap=8)
        mx, sm, ref = dense_rows(q, k, v, r0, r1, causal=causal, scale=scale)
        tiled = tiled_rows(q, k, v, s, r0, r1, scale=scale, dtype=dtype)
    np.testing.assert_allclose(mx, full.row_max[r0:r1], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(sm, full.row_sum[r0:r1], rtol=1e-13)
    np.testing.assert_allclose(ref, full.reference[r0:r1], rtol=1e-12, atol=1e-14)
    assert tiled.dtype == full.tiled_output.dtype
    # The same closed form over fewer rows: only a product's summation order may differ.
    tol = {"float64": 1e-12, "float32": 1e-6}.get(dtype, 2e-3)
    np.testing.assert_allclose(
        tiled.astype(np.float64), full.tiled_output[r0:r1].astype(np.float64), rtol=tol, atol=tol
    )


@settings(max_examples=40, deadline=None)
@given(
    n_q=st.integers(1, 300),
    n_k=st.integers(1, 300),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
    sample=st.sampled_from([7, 100, 4096]),
)
def test_the_samples_of_s_and_p_are_whole_rows(n_q, n_k, causal, seed, sample):
    inputs = random_inputs(n_q, 5, 2, n_k=n_k, seed=seed)
    scale = default_scale(5)
    s = _dense_s(inputs.q, inputs.k, causal, scale)
    got, probs = row_sample(inputs.q, inputs.k, causal=causal, scale=scale, sample=sample)
    count = min(n_q, -(-sample // n_k))
    rows = np.unique(np.linspace(0, n_q - 1, count).round().astype(int))
    assert len(rows) == count  # evenly spaced and distinct, from the first row
    assert rows[0] == 0 and (count == 1 or rows[-1] == n_q - 1)
    want = np.abs(s[rows].ravel())
    np.testing.assert_allclose(got, want[np.isfinite(want)], rtol=1e-12, atol=1e-14)
    sr = s[rows]
    seen = np.isfinite(sr).any(axis=1, keepdims=True)  # a causal row may see no key
    e = np.exp(sr - np.where(seen, sr.max(axis=1, keepdims=True), 0.0))
    want_p = np.where(seen, e / np.where(seen, e.sum(axis=1, keepdims=True), 1.0), 0.0)
    np.testing.assert_allclose(probs, want_p.ravel(), rtol=1e-12, atol=1e-300)
