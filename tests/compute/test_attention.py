"""The maths: tiled attention against the float64 dense reference, and the explainer's own check."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import ORDERS, dense_attention, seed_example, tiled_attention

SEED = seed_example()
# Stated tolerances of each emulated dtype against float64 (max abs error, unit-scale data).
TOLERANCE = {"float64": 1e-12, "float32": 2e-5, "float16": 5e-3, "bfloat16": 4e-2}


def independent_dense(q, k, v):
    """The explainer's own dense softmax, written out as the explainer writes it."""
    scores = q @ k.T / np.sqrt(q.shape[1])
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return weights @ v


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block_k", [1, 2, 3, 4, 7])
def test_seed_cpu_check(order, block_k):
    dense = independent_dense(SEED.q, SEED.k, SEED.v)
    tiled = tiled_attention(SEED.q, SEED.k, SEED.v, block_q=2, block_k=block_k, order=order)
    np.testing.assert_allclose(tiled, dense, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dense_attention(SEED.q, SEED.k, SEED.v), dense, rtol=1e-14)


def test_seed_q0_output():
    # Q0 = (1, 0): scores are the first components of K over sqrt(2).
    s = np.array([-1, 0, 2, 1, 3, -1]) / np.sqrt(2)
    w = np.exp(s) / np.exp(s).sum()
    np.testing.assert_allclose(dense_attention(SEED.q, SEED.k, SEED.v)[0], w @ SEED.v, rtol=1e-14)


def random_case(rng, n_q, n_k, d, d_v, scale=1.0):
    return (
        rng.standard_normal((n_q, d)) * scale,
        rng.standard_normal((n_k, d)) * scale,
        rng.standard_normal((n_k, d_v)),
    )


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize(
    ("n_q", "n_k", "block_q", "block_k"),
    [(37, 53, 7, 5), (53, 37, 16, 3), (29, 29, 64, 64), (40, 24, 1, 1), (31, 31, 8, 100)],
)
def test_tiled_matches_dense(order, causal, dtype, n_q, n_k, block_q, block_k):
    rng = np.random.default_rng(1)
    q, k, v = random_case(rng, n_q, n_k, 16, 12)
    ref = dense_attention(q, k, v, causal=causal)
    out = tiled_attention(
        q, k, v, block_q=block_q, block_k=block_k, order=order, causal=causal, dtype=dtype
    )
    assert out.shape == ref.shape
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=TOLERANCE[dtype], rtol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_is_visibly_rounded(dtype):
    # The emulation must actually round: its error is nonzero yet within tolerance.
    rng = np.random.default_rng(2)
    q, k, v = random_case(rng, 64, 64, 32, 32)
    out = tiled_attention(q, k, v, block_q=16, block_k=16, dtype=dtype).astype(np.float64)
    err = np.abs(out - dense_attention(q, k, v)).max()
    assert 1e-6 < err < TOLERANCE[dtype]


def test_bfloat16_rounding_is_nearest_even():
    from compute.attention import round_to

    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9, -3.14159], dtype=np.float64)
    got = round_to(x, "bfloat16")
    # bf16 keeps 8 significand bits: ties go to even.
    np.testing.assert_array_equal(got[:4], [1.0, 1.0, 1.0 + 2**-6, 1.0])
    assert got[4] == -3.140625


@pytest.mark.parametrize("order", ORDERS)
def test_fully_masked_rows_are_zero_not_nan(order):
    rng = np.random.default_rng(3)
    q, k, v = random_case(rng, 10, 4, 8, 8)  # n_q > n_k: the first 6 rows see no key
    out, lse = tiled_attention(
        q, k, v, block_q=3, block_k=2, order=order, causal=True, return_lse=True
    )
    ref = dense_attention(q, k, v, causal=True)
    assert np.all(out[:6] == 0) and np.all(ref[:6] == 0)
    assert np.all(np.isneginf(lse[:6])) and np.all(np.isfinite(lse[6:]))
    np.testing.assert_allclose(out, ref, atol=1e-12)


@pytest.mark.parametrize("order", ORDERS)
def test_lse_matches_logsumexp(order):
    rng = np.random.default_rng(4)
    q, k, v = random_case(rng, 23, 31, 8, 4)
    _, lse = tiled_attention(q, k, v, block_q=5, block_k=6, order=order, return_lse=True)
    s = q @ k.T / np.sqrt(8)
    expected = s.max(1) + np.log(np.exp(s - s.max(1, keepdims=True)).sum(1))
    np.testing.assert_allclose(lse, expected, rtol=1e-12)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_large_scores_stay_finite_and_exact(order, dtype):
    rng = np.random.default_rng(5)
    q, k, v = random_case(rng, 48, 48, 4, 4, scale=100.0)
    assert np.abs(q @ k.T / 2).max() > 1e4
    out = tiled_attention(q, k, v, block_q=5, block_k=7, order=order, dtype=dtype)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, dense_attention(q, k, v), atol=TOLERANCE[dtype] * 10)


@settings(max_examples=60, deadline=None)
@given(
    n_q=st.integers(1, 24),
    n_k=st.integers(1, 24),
    d=st.integers(1, 6),
    d_v=st.integers(1, 5),
    block_q=st.integers(1, 30),
    block_k=st.integers(1, 30),
    order=st.sampled_from(ORDERS),
    causal=st.booleans(),
    log_scale=st.floats(-2, 2),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_any_shape_and_blocks(
    n_q, n_k, d, d_v, block_q, block_k, order, causal, log_scale, seed
):
    rng = np.random.default_rng(seed)
    q, k, v = random_case(rng, n_q, n_k, d, d_v, scale=10.0**log_scale)
    out = tiled_attention(q, k, v, block_q=block_q, block_k=block_k, order=order, causal=causal)
    ref = dense_attention(q, k, v, causal=causal)
    np.testing.assert_allclose(out, ref, atol=1e-10, rtol=1e-10)
