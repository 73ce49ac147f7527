"""The ledger: the reference example's totals, counts equal to the closed form, the paper's helpers."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import (
    ORDERS,
    TENSORS,
    closed_form_ledger,
    ledger,
    paper_block_sizes,
    seed_example,
    theorem2_bound,
)


def as_dict(lane):
    return {t: dict(lane.counts[t]) for t in TENSORS}


@pytest.mark.parametrize("block_k", [1, 2, 3, 4, 5, 6, 7, 100])
def test_seed_totals_for_every_block_k(block_k):
    result = ledger(6, 6, 2, 2, block_q=2, block_k=block_k)
    assert result.lanes["dense"].total_elements == 240
    assert result.lanes["tiled"].total_elements == 96


def test_seed_breakdown_matches_the_seed_text():
    result = ledger(6, 6, 2, 2, block_q=2, block_k=2)
    for lane in ("dense", "tiled"):
        c = result.lanes[lane].counts
        assert (c["Q"]["read"], c["K"]["read"], c["V"]["read"], c["O"]["write"]) == (12, 36, 36, 12)
    dense = result.lanes["dense"].counts
    assert all(dense[t][d] == 36 for t in ("S", "P") for d in ("read", "write"))
    tiled = result.lanes["tiled"].counts
    assert all(tiled[t][d] == 0 for t in ("S", "P", "m", "l", "L") for d in ("read", "write"))
    assert result.ratio == 2.5


def test_bytes_follow_the_dtype():
    r64 = ledger(6, 6, 2, 2, block_q=2, block_k=2, dtype="float64")
    r16 = ledger(6, 6, 2, 2, block_q=2, block_k=2, dtype="float16", save_lse=True)
    assert r64.lanes["dense"].total_bytes == 240 * 8
    # 96 fp16 elements plus 6 float32 L values.
    assert r16.lanes["tiled"].total_bytes == 96 * 2 + 6 * 4


def test_kv_outer_is_algorithm_1_literally():
    # N=6, B_r=B_c=2: init writes O(12) ℓ(6) m(6); 3x3 visits each read Q_i(4) O_i(4) ℓ_i(2)
    # m_i(2) and write O_i, ℓ_i, m_i; K and V read once.
    c = ledger(6, 6, 2, 2, block_q=2, block_k=2, order="kv-outer").lanes["tiled"].counts
    assert c["K"]["read"] == c["V"]["read"] == 12
    assert c["Q"]["read"] == 9 * 4
    assert (c["O"]["read"], c["O"]["write"]) == (9 * 4, 12 + 9 * 4)
    assert (c["l"]["read"], c["l"]["write"]) == (9 * 2, 6 + 9 * 2)
    assert (c["m"]["read"], c["m"]["write"]) == (9 * 2, 6 + 9 * 2)


def test_causal_skips_invisible_tiles_in_q_outer_only():
    full = ledger(8, 8, 4, 4, block_q=2, block_k=2).lanes
    causal = ledger(8, 8, 4, 4, block_q=2, block_k=2, causal=True).lanes
    # Query block i sees tiles 0..i: 1+2+3+4 = 10 of 16 tiles.
    assert causal["tiled"].counts["K"]["read"] == 10 * 2 * 4
    assert full["tiled"].counts["K"]["read"] == 16 * 2 * 4
    assert as_dict(causal["dense"]) == as_dict(full["dense"])


def test_sram_fit_indicator():
    result = ledger(64, 64, 16, 16, block_q=16, block_k=16, sram_capacity=1000)
    tiled = result.lanes["tiled"]
    assert tiled.sram_elements == 16 * 16 + 16 * 32 + 16 * 16 + 16 * 16 + 32
    assert tiled.fits is False
    assert ledger(64, 64, 16, 16, block_q=16, block_k=16, sram_capacity=2000).lanes["tiled"].fits
    assert ledger(64, 64, 16, 16, block_q=16, block_k=16).lanes["tiled"].fits is None


def test_json_shape():
    d = ledger(6, 6, 2, 2, block_q=2, block_k=2).to_dict()
    assert d["lanes"]["dense"]["total_elements"] == 240
    assert d["lanes"]["tiled"]["by_tensor"]["Q"] == {"read": 12, "write": 0}
    assert d["config"]["block_k"] == 2


@settings(max_examples=300, deadline=None)
@given(
    n_q=st.integers(1, 40),
    n_k=st.integers(1, 40),
    d=st.integers(1, 9),
    d_v=st.integers(1, 9),
    block_q=st.integers(1, 45),
    block_k=st.integers(1, 45),
    order=st.sampled_from(ORDERS),
    causal=st.booleans(),
    save_lse=st.booleans(),
)
def test_counted_ledger_equals_closed_form(
    n_q, n_k, d, d_v, block_q, block_k, order, causal, save_lse
):
    kw = dict(block_q=block_q, block_k=block_k, order=order, causal=causal, save_lse=save_lse)
    counted, formula = ledger(n_q, n_k, d, d_v, **kw), closed_form_ledger(n_q, n_k, d, d_v, **kw)
    for lane in ("dense", "tiled"):
        assert as_dict(counted.lanes[lane]) == as_dict(formula.lanes[lane])
    if save_lse:
        assert counted.lanes["tiled"].counts["L"]["write"] == n_q


def test_trace_ledger_equals_counted_ledger():
    s = seed_example()
    from compute import build_trace

    trace = build_trace(s.q, s.k, s.v, block_q=2, block_k=3, causal=True, order="kv-outer")
    counted = ledger(6, 6, 2, 2, block_q=2, block_k=3, causal=True, order="kv-outer")
    for lane in ("dense", "tiled"):
        assert as_dict(trace.ledger().lanes[lane]) == as_dict(counted.lanes[lane])


def test_paper_block_sizes_and_bound():
    # M = 100 KB of float32 = 25,600 elements, d = 64: B_c = ceil(25600/256) = 100, B_r = 64.
    assert paper_block_sizes(25_600, 64) == (64, 100)
    assert paper_block_sizes(100, 64) == (1, 1)
    assert theorem2_bound(1024, 64, 25_600) == pytest.approx(1024**2 * 64**2 / 25_600)


def test_bad_configuration_is_one_sentence():
    with pytest.raises(ValueError, match="block_q must be a whole number of at least 1"):
        ledger(6, 6, 2, 2, block_q=0, block_k=2)
    with pytest.raises(ValueError, match="dtype must be one of"):
        ledger(6, 6, 2, 2, block_q=2, block_k=2, dtype="int8")
    with pytest.raises(ValueError, match="order must be one of"):
        ledger(6, 6, 2, 2, block_q=2, block_k=2, order="diagonal")


@settings(max_examples=300, deadline=None)
@given(
    n_q=st.integers(1, 200),
    n_k=st.integers(1, 200),
    block_q=st.integers(1, 210),
    block_k=st.integers(1, 210),
)
def test_causal_visits_by_formula_equal_the_visibility_matrix(n_q, n_k, block_q, block_k):
    """The O(1)-memory sums against the (T_r, T_c) visibility matrix they replace."""
    from compute.ledger import _visible_keys, visited_rows
    from compute.schedule import Schedule

    s = Schedule(n_q, n_k, 1, 1, block_q, block_k, causal=True)
    rows = np.array([s.rows(i)[1] - s.rows(i)[0] for i in range(s.t_r)])
    widths = np.array([s.cols(j)[1] - s.cols(j)[0] for j in range(s.t_c)])
    assert visited_rows(s) == int((s.visible.sum(axis=1) * rows).sum())
    assert _visible_keys(s) == int((s.visible * widths).sum())


def test_floor_sum_equals_the_sum():
    from compute.ledger import floor_sum

    for n, m, a, b in [(1, 1, 0, 0), (7, 3, 5, 2), (100, 7, 13, 50), (5, 10**12, 10**13, 3)]:
        assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))
