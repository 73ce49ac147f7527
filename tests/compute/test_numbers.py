"""compute.numbers: numbers cached by what they depend on, bit-identical to a fresh build.

Traces of the same inputs key share the dense lane's pass (inputs and mask only) and the
tiled lane's (plus B_c, order, dtype); whatever order the configurations come in, every
number a trace shows equals, bit for bit, the one a trace with a private key computes.
The dense pass's fused backward equals the standard backward computed whole.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import DTYPES, ORDERS, attention_backward, build_trace, random_inputs
from compute.backward_rows import default_do
from compute.full_pass import dense_pass
from compute.numbers import SHARED, NumberCache

configs = st.fixed_dictionaries(
    {
        "block_q": st.integers(1, 20),
        "block_k": st.integers(1, 20),
        "order": st.sampled_from(ORDERS),
        "dtype": st.sampled_from(DTYPES),
        "pass_name": st.sampled_from(["forward", "backward", "training"]),
    }
)


def numbers(trace) -> list[np.ndarray]:
    """Every array a view reads from the trace's summaries."""
    f = trace.summary()
    out = [f.row_max, f.row_sum, f.reference, f.tiled_output, f.lse, *f.tiled_state]
    out += [f.scores_small.values, f.probs_small.values, f.scores_sample, f.probs_sample]
    if trace.do is not None:
        b = trace.backward_summary(256)
        out += [b.dp_small.values, b.ds_small.values, b.sample, *b.gradients]
        out += [*b.tiled_gradients, trace.reference_D, trace.backward_D]
    return out


@settings(max_examples=40, deadline=None)
@given(
    n_q=st.integers(1, 30),
    n_k=st.integers(1, 30),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
    first=configs,
    visits=st.lists(configs, min_size=1, max_size=4),
)
def test_cached_numbers_are_bit_identical_to_a_fresh_build(n_q, n_k, causal, seed, first, visits):
    SHARED.clear()
    r = random_inputs(n_q, 3, 2, n_k=n_k, seed=seed)
    key = ("test inputs", seed, n_q, n_k)
    for cfg in [*visits, first]:  # fill the cache in any order, then ask for `first`
        cached = build_trace(r.q, r.k, r.v, causal=causal, inputs_key=key, **cfg)
        fresh = build_trace(r.q, r.k, r.v, causal=causal, **cfg)  # a private key
        mine, theirs = numbers(cached), numbers(fresh)
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs, strict=True):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    assert SHARED.hits > 0  # the last trace found what the others made


def test_a_different_key_is_never_shared():
    SHARED.clear()
    a, b = random_inputs(12, 3, 3, seed=1), random_inputs(12, 3, 3, seed=2)
    kw = {"dtype": "float16"}
    ta = build_trace(a.q, a.k, a.v, block_q=4, block_k=4, inputs_key=("x", 1), **kw)
    tb = build_trace(b.q, b.k, b.v, block_q=4, block_k=4, inputs_key=("x", 2), **kw)
    assert not np.array_equal(ta.reference, tb.reference)
    # Same key, other blocks: the dense pass is reused (one computed), the tiled one not.
    tc = build_trace(a.q, a.k, a.v, block_q=3, block_k=5, inputs_key=("x", 1), **kw)
    np.testing.assert_array_equal(tc.reference, ta.reference)
    assert SHARED.held("dense") == 2 and SHARED.held("tiled") == 3
    # In float64 the tiled lane comes from the dense pass's products (full_pass.TiledPass):
    # nothing of its own, whatever B_c and the order, and not another key's.
    t64 = build_trace(a.q, a.k, a.v, block_q=3, block_k=7, inputs_key=("x", 1))
    u64 = build_trace(a.q, a.k, a.v, block_q=5, block_k=2, order="kv-outer", inputs_key=("x", 1))
    assert t64.tiled_pass() is u64.tiled_pass()  # (the dense pass had none: one of its own)
    assert SHARED.held("dense") == 2 and SHARED.held("tiled") == 4
    fresh = build_trace(a.q, a.k, a.v, block_q=3, block_k=7, inputs_key=("x", 3))
    assert fresh.tiled_pass() is fresh.dense_pass().tiled64 is not None  # made by the pass
    np.testing.assert_array_equal(fresh.tiled_output, t64.tiled_output)
    assert not np.array_equal(t64.tiled_output, tb.tiled_output)


@settings(max_examples=30, deadline=None)
@given(
    n_q=st.integers(1, 40),
    n_k=st.integers(1, 40),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
    chunk_rows=st.integers(1, 9),
)
def test_the_fused_dense_backward_equals_the_standard_one(n_q, n_k, causal, seed, chunk_rows):
    import compute.full_pass as fp

    r = random_inputs(n_q, 4, 3, n_k=n_k, seed=seed)
    do = default_do(n_q, 3)
    old = fp.CHUNK_ELEMENTS
    fp.CHUNK_ELEMENTS = n_k * chunk_rows  # streamed in chunks of a few rows
    try:
        streamed = dense_pass(r.q, r.k, r.v, causal=causal, scale=0.5, cap=8, do=do)
    finally:
        fp.CHUNK_ELEMENTS = old
    whole = dense_pass(r.q, r.k, r.v, causal=causal, scale=0.5, cap=8)
    np.testing.assert_allclose(streamed.reference, whole.reference, rtol=1e-13, atol=1e-14)
    g = attention_backward(r.q, r.k, r.v, do, causal=causal, scale=0.5, method="dense")
    for mine, ref in zip(streamed.backward.gradients, g, strict=True):
        np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        streamed.backward.D, np.sum(do * whole.reference, axis=1), rtol=1e-12, atol=1e-14
    )


def test_the_cache_keeps_the_newest_entries():
    c = NumberCache(entries=2)
    for i in range(3):
        assert c.value("k", i, lambda i=i: [i]) == [i]
    assert c.held("k") == 2 and c.get("k", 0) is None and c.get("k", 2) == [2]


def test_the_cache_holds_at_most_its_bytes_and_always_the_newest():
    c = NumberCache(entries=10, max_bytes=100)
    for i in range(3):
        c.put("a" if i % 2 else "b", i, np.zeros(5))  # 40 bytes each
    assert c.bytes_held <= 100 and c.get("b", 2) is not None
    c.put("a", "big", np.zeros(50))  # 400 bytes: over on its own, kept as the newest
    assert c.get("a", "big") is not None and c.bytes_held == 400


@settings(max_examples=40, deadline=None)
@given(
    n_q=st.integers(1, 40),
    n_k=st.integers(1, 40),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
    chunk_rows=st.integers(1, 9),
    cfg=configs,
    rows=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    cols=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_rows_show_the_same_digits_before_and_after_the_pass(
    n_q, n_k, causal, seed, chunk_rows, cfg, rows, cols
):
    """One source for a row's numbers: the selected rows' statistics, reference, tiled
    output and P regions are bit for bit the same whether the pass over S is made yet
    or not (blocks that do not divide N, blocks past N, several chunks)."""
    import compute.full_pass as fp

    r = random_inputs(n_q, 3, 2, n_k=n_k, seed=seed)
    lo, hi = sorted(round(x * n_q) for x in rows)
    lo, hi = min(lo, n_q - 1), max(hi, min(lo, n_q - 1) + 1)
    c0, c1 = sorted(round(x * n_k) for x in cols)
    c0, c1 = min(c0, n_k - 1), max(c1, min(c0, n_k - 1) + 1)

    def looks(trace):
        return [
            *trace.dense_rows(lo, hi), trace.reference_rows(lo, hi),
            trace.tiled_output_rows(lo, hi), trace.probs_region(lo, hi, c0, c1),
            trace.forward._probs(0, n_q, c0, c1),
        ]  # fmt: skip

    old = fp.CHUNK_ELEMENTS
    fp.CHUNK_ELEMENTS = n_k * chunk_rows
    try:
        SHARED.clear()
        key = ("one source", seed)
        before = looks(build_trace(r.q, r.k, r.v, causal=causal, inputs_key=key, **cfg))
        after_trace = build_trace(r.q, r.k, r.v, causal=causal, inputs_key=key, **cfg)
        after_trace.summary()
        if after_trace.do is not None:
            after_trace.backward_summary(256)
        after = looks(after_trace)
        full = after_trace.summary()
    finally:
        fp.CHUNK_ELEMENTS = old
    for a, b in zip(before, after, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(before[0], full.row_max[lo:hi])
    np.testing.assert_array_equal(before[1], full.row_sum[lo:hi])
    np.testing.assert_array_equal(before[2], full.reference[lo:hi])
    np.testing.assert_array_equal(before[4], full.tiled_output[lo:hi])


@settings(max_examples=40, deadline=None)
@given(
    n_q=st.integers(1, 30),
    n_k=st.integers(1, 30),
    block_q=st.integers(1, 34),
    block_k=st.integers(1, 34),
    order=st.sampled_from(ORDERS),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_float64_tiled_lane_from_the_dense_products_equals_its_loops(
    n_q, n_k, block_q, block_k, order, causal, seed
):
    """In float64 the tiled lane's forward and backward are formed from the dense pass's
    S, E and dP (compute.full_pass.TiledPass): they equal the tile loops
    (tiled_attention, attention_backward) within rounding, for any blocks."""
    from compute.attention import tiled_attention

    SHARED.clear()
    r = random_inputs(n_q, 4, 3, n_k=n_k, seed=seed, scale=2.0)
    do = default_do(n_q, 3)
    kw = dict(block_q=block_q, block_k=block_k, order=order, causal=causal)
    t = build_trace(r.q, r.k, r.v, pass_name="backward", do=do, **kw)
    out, lse = tiled_attention(r.q, r.k, r.v, return_lse=True, **kw)
    np.testing.assert_allclose(t.tiled_output, out, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(t.lse, lse, rtol=1e-12, atol=1e-13)
    want = attention_backward(r.q, r.k, r.v, do, block_q=block_q, block_k=block_k, causal=causal)
    for got, ref in zip(t.gradients("tiled"), want, strict=True):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_a_p_region_is_made_from_the_kept_s_region():
    """probs_region forms its S once and keeps it: the dense lane's softmax step draws
    S and P of the same rows, and its P is exp(S − m) / ℓ of that very S."""
    r = random_inputs(40, 4, 3, n_k=33, seed=11)
    trace = build_trace(r.q, r.k, r.v, block_q=8, block_k=16, causal=True)
    f = trace.forward
    p = f.probs_region(8, 16, 0, 33)
    assert f.cached("region") == 2
    s = f.scores_region(8, 16, 0, 33)
    assert f.cached("region") == 2  # found, not made again
    m, l, _ = f.dense_rows(8, 16)  # noqa: E741
    want = np.exp(s - np.where(np.isfinite(m), m, 0.0)[:, None]) / l[:, None]
    np.testing.assert_array_equal(p, want)
    np.testing.assert_array_equal(s, f._scores(8, 16, 0, 33))
