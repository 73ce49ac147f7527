"""The backward pass: dense and FlashAttention-2 tiled gradients against an independent reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import attention_backward, dense_attention, seed_example

SEED = seed_example()
METHODS = ("dense", "tiled")
# Stated tolerances of each emulated dtype: max abs error over max |reference| (unit-scale data).
TOLERANCE = {"float64": 1e-12, "float32": 3e-6, "float16": 5e-3, "bfloat16": 4e-2}


def jacobian_reference(q, k, v, do, causal=False, scale=None):
    """Row by row through the softmax Jacobian diag(p) − p pᵀ, in float64, no tiles, no D."""
    n_q, n_k = len(q), len(k)
    scale = 1 / np.sqrt(q.shape[1]) if scale is None else scale
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for r in range(n_q):
        seen = np.arange(n_k) <= r + n_k - n_q if causal else np.ones(n_k, dtype=bool)
        if not seen.any():
            continue
        s = q[r] @ k[seen].T * scale
        p = np.exp(s - s.max())
        p /= p.sum()
        ds = (np.diag(p) - np.outer(p, p)) @ (v[seen] @ do[r])  # ∂φ/∂s_r
        dv[seen] += np.outer(p, do[r])
        dq[r] = ds @ k[seen] * scale
        dk[seen] += np.outer(ds, q[r]) * scale
    return dq, dk, dv


def random_case(rng, n_q, n_k, d, d_v, scale=1.0):
    return (
        rng.standard_normal((n_q, d)) * scale,
        rng.standard_normal((n_k, d)) * scale,
        rng.standard_normal((n_k, d_v)),
        rng.standard_normal((n_q, d_v)),
    )


def assert_close(got, ref, tol):
    for g, r in zip(got, ref, strict=True):
        assert g.shape == r.shape
        assert np.all(np.isfinite(g))
        err = np.abs(g.astype(np.float64) - r).max(initial=0.0)
        assert err <= tol * max(np.abs(r).max(initial=0.0), 1.0), err


# The seed's example with dO fixed below; gradients computed once in float64 by
# `jacobian_reference` (12 decimals). Checks by hand: dV's rows sum to dO's column sums (each
# P row sums to 1) and dK's rows sum to zero (each dS row sums to zero).
SEED_DO = np.array([[1, -1], [0.5, 0], [0, 2], [-1, 1], [2, 0.5], [0, -0.5]], dtype=np.float64)
SEED_DQ = [
    [-0.798677410163, 0.674542154044],
    [0.337133326481, -0.275374149543],
    [1.446664776994, -1.393417000447],
    [-0.077871326602, 0.761607344293],
    [0.437651281500, -0.530980022557],
    [-0.283102839133, 0.223213556639],
]
SEED_DK = [
    [0.450553069182, -0.108135115847],
    [-0.002600815044, 0.206955813022],
    [-0.038297197784, 0.259790284920],
    [-0.030343018568, -0.737132575816],
    [0.155233574957, 0.529297036240],
    [-0.534545612744, -0.150775442518],
]
SEED_DV = [
    [0.114215712544, 0.455934647197],
    [0.174255526061, 0.384828896336],
    [0.635938257823, 0.284683826440],
    [0.322422334079, 0.472629188216],
    [1.280894818608, -0.171872714503],
    [-0.027726649114, 0.573796156314],
]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("block_k", [1, 2, 3, 4, 7])
def test_seed_gradients(method, block_k):
    got = attention_backward(
        SEED.q, SEED.k, SEED.v, SEED_DO, method=method, block_q=2, block_k=block_k
    )
    for g, expected in zip(got, (SEED_DQ, SEED_DK, SEED_DV), strict=True):
        np.testing.assert_allclose(g, expected, atol=1e-12, rtol=0)
    dq, dk, dv = got
    np.testing.assert_allclose(dv.sum(axis=0), SEED_DO.sum(axis=0), atol=1e-12)
    np.testing.assert_allclose(dk.sum(axis=0), 0, atol=1e-12)


def test_seed_constants_are_the_reference():
    ref = jacobian_reference(SEED.q, SEED.k, SEED.v, SEED_DO)
    for r, expected in zip(ref, (SEED_DQ, SEED_DK, SEED_DV), strict=True):
        np.testing.assert_allclose(r, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_dense_matches_finite_differences(causal):
    # φ(Q, K, V) = sum(O ∘ dO); central differences of the float64 dense forward.
    rng = np.random.default_rng(1201)
    q, k, v, do = random_case(rng, 7, 9, 4, 3)
    grads = attention_backward(q, k, v, do, causal=causal, method="dense")
    h = 1e-6
    for which, g in enumerate(grads):
        numeric = np.zeros_like(g)
        for idx in np.ndindex(g.shape):
            plus, minus = [q.copy(), k.copy(), v.copy()], [q.copy(), k.copy(), v.copy()]
            plus[which][idx] += h
            minus[which][idx] -= h
            phi_plus = np.sum(dense_attention(*plus, causal=causal) * do)
            phi_minus = np.sum(dense_attention(*minus, causal=causal) * do)
            numeric[idx] = (phi_plus - phi_minus) / (2 * h)
        np.testing.assert_allclose(g, numeric, atol=1e-8, rtol=0)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize(
    ("n_q", "n_k", "block_q", "block_k"),
    [(37, 53, 7, 5), (53, 37, 16, 3), (29, 29, 64, 64), (40, 24, 1, 1), (31, 31, 8, 100)],
)
def test_matches_reference(method, causal, dtype, n_q, n_k, block_q, block_k):
    rng = np.random.default_rng([n_q, n_k, block_q, block_k, causal, len(dtype)])
    q, k, v, do = random_case(rng, n_q, n_k, 16, 12)
    ref = jacobian_reference(q, k, v, do, causal=causal)
    got = attention_backward(
        q, k, v, do, causal=causal, method=method, block_q=block_q, block_k=block_k, dtype=dtype
    )
    assert_close(got, ref, TOLERANCE[dtype])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_is_visibly_rounded(method, dtype):
    rng = np.random.default_rng(1202)
    q, k, v, do = random_case(rng, 64, 64, 32, 32)
    ref = jacobian_reference(q, k, v, do)
    got = attention_backward(q, k, v, do, method=method, block_q=16, block_k=16, dtype=dtype)
    err = max(np.abs(g.astype(np.float64) - r).max() for g, r in zip(got, ref, strict=True))
    assert 1e-6 < err < TOLERANCE[dtype]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("block_q", [3, 4])  # 4: rows 4, 5 share a block with rows that see keys
def test_rows_that_see_no_key_get_zero_gradients(method, dtype, block_q):
    rng = np.random.default_rng(1203)
    q, k, v, do = random_case(rng, 10, 4, 8, 8)  # n_q > n_k: rows 0..5 see no key
    dq, dk, dv = attention_backward(
        q, k, v, do, causal=True, method=method, block_q=block_q, block_k=2, dtype=dtype
    )
    assert np.all(dq[:6] == 0)
    assert all(np.all(np.isfinite(g)) for g in (dq, dk, dv))
    # Those rows' dO cannot reach dK or dV: changing it changes nothing.
    do2 = do.copy()
    do2[:6] = rng.standard_normal((6, 8))
    again = attention_backward(
        q, k, v, do2, causal=True, method=method, block_q=block_q, block_k=2, dtype=dtype
    )
    for a, b in zip((dq, dk, dv), again, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_large_scores_stay_finite(dtype):
    rng = np.random.default_rng(1204)
    q, k, v, do = random_case(rng, 48, 48, 4, 4, scale=30.0)
    s_max = np.abs(q @ k.T / 2).max()
    assert s_max > 1e3
    ref = jacobian_reference(q, k, v, do)
    for method in METHODS:
        got = attention_backward(q, k, v, do, method=method, block_q=5, block_k=7, dtype=dtype)
        # Rounding S costs about eps·|S| in every exponent, so the bound scales with max |S|.
        assert_close(got, ref, TOLERANCE[dtype] * s_max)


@pytest.mark.parametrize("method", METHODS)
def test_custom_scale(method):
    rng = np.random.default_rng(1205)
    q, k, v, do = random_case(rng, 13, 17, 5, 3)
    ref = jacobian_reference(q, k, v, do, causal=True, scale=0.7)
    got = attention_backward(
        q, k, v, do, causal=True, scale=0.7, method=method, block_q=4, block_k=6
    )
    assert_close(got, ref, 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    n_q=st.integers(1, 24),
    n_k=st.integers(1, 24),
    d=st.integers(1, 6),
    d_v=st.integers(1, 5),
    block_q=st.integers(1, 30),
    block_k=st.integers(1, 30),
    causal=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_tiled_equals_dense(n_q, n_k, d, d_v, block_q, block_k, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v, do = random_case(rng, n_q, n_k, d, d_v)
    ref = jacobian_reference(q, k, v, do, causal=causal)
    for method in METHODS:
        got = attention_backward(
            q, k, v, do, causal=causal, method=method, block_q=block_q, block_k=block_k
        )
        assert_close(got, ref, 1e-10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "sideways"}, "method must be one of"),
        ({"dtype": "int8"}, "dtype must be one of"),
        ({"block_q": 0}, "block_q and block_k must be at least 1"),
        ({"do": np.zeros((6, 3))}, "dO must match O"),
    ],
)
def test_bad_arguments_are_one_sentence(kwargs, message):
    do = kwargs.pop("do", SEED_DO)
    with pytest.raises(ValueError, match=message):
        attention_backward(SEED.q, SEED.k, SEED.v, do, **kwargs)
