"""The chunked full pass against the loops it replaces: `dense_lane` for the dense lane,
`tiled_attention` for the tiled lane's output (same rounding points, other summation
order), and the desktop's block means for the display-resolution S and P."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import DTYPES, ORDERS, dense_attention, random_inputs
from compute.attention import dense_lane, tiled_attention
from compute.full_pass import full_pass
from compute.schedule import Schedule


def block_means(values, cap):
    """Independent block means: finite entries averaged, mostly −∞ cells stay −∞."""
    rows, cols = values.shape
    fr, fc = -(-rows // cap), -(-cols // cap)
    out = np.zeros((-(-rows // fr), -(-cols // fc)))
    for a in range(out.shape[0]):
        for b in range(out.shape[1]):
            cell = values[a * fr : (a + 1) * fr, b * fc : (b + 1) * fc]
            finite = cell[np.isfinite(cell)]
            out[a, b] = finite.mean() if finite.size else 0.0
            if np.isneginf(cell).sum() > finite.size:
                out[a, b] = -np.inf
    return out, (fr, fc)


@settings(max_examples=80, deadline=None)
@given(
    n_q=st.integers(1, 40),
    n_k=st.integers(1, 40),
    block_q=st.integers(1, 45),
    block_k=st.integers(1, 45),
    order=st.sampled_from(ORDERS),
    causal=st.booleans(),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
    cap=st.integers(1, 16),
)
def test_full_pass_equals_the_loops(n_q, n_k, block_q, block_k, order, causal, dtype, seed, cap):
    r = random_inputs(n_q, 5, 3, n_k=n_k, seed=seed, scale=2.0)
    s = Schedule(n_q, n_k, 5, 3, block_q, block_k, order, causal)
    f = full_pass(r.q, r.k, r.v, s, scale=1 / np.sqrt(5), dtype=dtype, cap=cap)
    scores, probs, reference = dense_lane(r.q, r.k, r.v, causal=causal)
    np.testing.assert_allclose(f.reference, reference, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(f.row_max, np.max(scores, axis=1, initial=-np.inf))
    kw = dict(block_q=block_q, block_k=block_k, order=order, causal=causal, dtype=dtype)
    out, lse = tiled_attention(r.q, r.k, r.v, return_lse=True, **kw)
    out, mine = out.astype(np.float64), f.tiled_output.astype(np.float64)
    if dtype == "float64":
        np.testing.assert_allclose(mine, out, rtol=1e-12, atol=1e-13)
    else:  # the summation order moves the result by far less than the dtype's own error
        dtype_error = np.max(np.abs(out - reference), initial=0.0)
        assert np.max(np.abs(mine - out), initial=0.0) <= 0.5 * dtype_error + 1e-6
    np.testing.assert_allclose(f.lse, lse, rtol=1e-5, atol=1e-6)
    for small, full in ((f.scores_small, scores), (f.probs_small, probs)):
        expected, factor = block_means(full, cap)
        assert small.factor == factor
        np.testing.assert_allclose(small.values, expected, rtol=1e-12, atol=1e-14)


def test_chunks_do_not_change_the_numbers(monkeypatch):
    import compute.full_pass as fp

    r = random_inputs(300, 4, 4, n_k=77, seed=9)
    s = Schedule(300, 77, 4, 4, 7, 5, "q-outer", True)
    whole = full_pass(r.q, r.k, r.v, s, scale=0.5, dtype="float16", cap=32)
    monkeypatch.setattr(fp, "CHUNK_ELEMENTS", 77 * 13)  # 13 rows, cut to the cell height
    chunked = fp.full_pass(r.q, r.k, r.v, s, scale=0.5, dtype="float16", cap=32)
    np.testing.assert_array_equal(chunked.tiled_output, whole.tiled_output)
    np.testing.assert_allclose(chunked.scores_small.values, whole.scores_small.values)
    np.testing.assert_allclose(
        chunked.reference, dense_attention(r.q, r.k, r.v, causal=True, scale=0.5)
    )
