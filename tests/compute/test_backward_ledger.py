"""Backward and training ledgers: the seed's totals, the declared schedule, counted = closed form."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import ORDERS, PASS_TENSORS, TENSORS, ledger, pass_ledger
from compute.backward_schedule import backward_steps
from compute.schedule import Schedule

SEED = dict(block_q=2, block_k=2)


def as_dict(lane):
    return {t: dict(lane.counts[t]) for t in PASS_TENSORS}


@pytest.mark.parametrize("counted", [True, False])
def test_seed_totals(counted):
    back = pass_ledger("backward", 6, 6, 2, 2, **SEED, counted=counted)
    train = pass_ledger("training", 6, 6, 2, 2, **SEED, counted=counted)
    assert (back.lanes["dense"].total_elements, back.lanes["tiled"].total_elements) == (444, 270)
    assert (train.lanes["dense"].total_elements, train.lanes["tiled"].total_elements) == (684, 372)


def test_seed_dense_backward_breakdown():
    # T_r = T_c = 3, N·N = 36, N·d = 12. (1) P 36, dO 3·12, dV 12; (2) dO 12, V 3·12, dP 36;
    # (3) P 36, dP 36, dS 36; (4) dS 36, K 3·12, dQ 12; (5) dS 36, Q 3·12, dK 12.
    c = as_dict(pass_ledger("backward", 6, 6, 2, 2, **SEED).lanes["dense"])
    assert c["P"] == {"read": 72, "write": 0}
    assert c["dO"] == {"read": 48, "write": 0}
    assert c["dP"] == {"read": 36, "write": 36}
    assert c["dS"] == {"read": 72, "write": 36}
    assert c["Q"]["read"] == c["K"]["read"] == c["V"]["read"] == 36
    assert c["dQ"]["write"] == c["dK"]["write"] == c["dV"]["write"] == 12
    assert all(c[t] == {"read": 0, "write": 0} for t in ("O", "S", "m", "l", "L", "D"))


def test_seed_tiled_backward_breakdown():
    # Preprocess: O 12, dO 12 read, D 6 written; dQ = 0 written (12); K, V read once (12 each);
    # 9 visits, each reading Q_i 4, dO_i 4, L_i 2, D_i 2, dQ_i 4 and writing dQ_i 4; dK, dV 12.
    c = as_dict(pass_ledger("backward", 6, 6, 2, 2, **SEED).lanes["tiled"])
    assert c["O"] == {"read": 12, "write": 0}
    assert c["dO"] == {"read": 12 + 36, "write": 0}
    assert c["D"] == {"read": 18, "write": 6}
    assert c["dQ"] == {"read": 36, "write": 12 + 36}
    assert c["Q"]["read"] == 36 and c["L"] == {"read": 18, "write": 0}
    assert c["K"]["read"] == c["V"]["read"] == c["dK"]["write"] == c["dV"]["write"] == 12
    assert all(c[t] == {"read": 0, "write": 0} for t in ("S", "P", "dP", "dS", "m", "l"))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("causal", [False, True])
def test_training_is_forward_saving_l_plus_backward(order, causal):
    kw = dict(block_q=3, block_k=4, order=order, causal=causal)
    train = pass_ledger("training", 11, 9, 3, 2, **kw, counted=True)
    back = pass_ledger("backward", 11, 9, 3, 2, **kw, counted=True)
    fwd = ledger(11, 9, 3, 2, **kw, save_lse=True)
    assert train.config()["save_lse"] is True and train.config()["pass"] == "training"
    assert back.config()["save_lse"] is True and back.config()["pass"] == "backward"
    for lane in ("dense", "tiled"):
        for t in PASS_TENSORS:
            for d in ("read", "write"):
                f = fwd.lanes[lane].counts[t][d] if t in TENSORS else 0
                assert train.lanes[lane].counts[t][d] == f + back.lanes[lane].counts[t][d]
    # What the tiled backward reads of L is what its forward wrote, once per visit.
    assert train.lanes["tiled"].counts["L"]["write"] == 11


def test_backward_does_not_depend_on_the_forward_order():
    a = pass_ledger("backward", 13, 7, 4, 3, block_q=3, block_k=2, order="q-outer")
    b = pass_ledger("backward", 13, 7, 4, 3, block_q=3, block_k=2, order="kv-outer")
    for lane in ("dense", "tiled"):
        assert as_dict(a.lanes[lane]) == as_dict(b.lanes[lane])


def test_causal_skips_invisible_tiles_in_the_tiled_lane_only():
    full = pass_ledger("backward", 8, 8, 4, 4, block_q=2, block_k=2).lanes
    causal = pass_ledger("backward", 8, 8, 4, 4, block_q=2, block_k=2, causal=True).lanes
    # Query block i sees tiles 0..i: 10 of 16 visits, each reading Q_i (2·4 elements).
    assert causal["tiled"].counts["Q"]["read"] == 10 * 2 * 4
    assert full["tiled"].counts["Q"]["read"] == 16 * 2 * 4
    assert as_dict(causal["dense"]) == as_dict(full["dense"])


def test_blocks_that_see_no_key_are_never_visited():
    # N_q = 10 > N_k = 4, causal: rows 0..5 see no key, so blocks 0 and 1 (rows 0..5) never
    # visit a tile; their dQ is only the zeros written at the start.
    s = Schedule(10, 4, 2, 2, 3, 2, causal=True)
    visited = {step.block_i for step in backward_steps(s, "tiled") if step.phase == "load_q"}
    assert visited == {2, 3}
    c = pass_ledger("backward", 10, 4, 2, 2, block_q=3, block_k=2, causal=True).lanes["tiled"]
    # Block 2 (rows 6..8) sees tiles 0 and 1, block 3 (row 9) both: 2·3 + 2·1 visited rows.
    assert c.counts["L"]["read"] == 8


def test_bytes_keep_statistics_in_float32():
    r = pass_ledger("backward", 6, 6, 2, 2, **SEED, dtype="float16").lanes
    # Tiled: L (18 read) and D (6 written + 18 read) are float32, the rest float16.
    assert r["tiled"].total_bytes == (270 - 42) * 2 + 42 * 4
    assert r["dense"].total_bytes == 444 * 2
    r64 = pass_ledger("training", 6, 6, 2, 2, **SEED, dtype="float64").lanes
    assert r64["tiled"].total_bytes == 372 * 8


def test_json_lists_the_gradient_tensors_and_the_pass():
    d = pass_ledger("backward", 6, 6, 2, 2, **SEED).to_dict()
    assert d["config"]["pass"] == "backward"
    for lane in ("dense", "tiled"):
        assert list(d["lanes"][lane]["by_tensor"]) == list(PASS_TENSORS)
        assert {"dO", "dQ", "dK", "dV", "dP", "dS", "L", "D"} <= set(d["lanes"][lane]["by_tensor"])
    assert d["lanes"]["tiled"]["by_tensor"]["dQ"] == {"read": 36, "write": 48}
    assert d["ratio_dense_over_tiled"] == pytest.approx(444 / 270)
    # The forward through pass_ledger is the forward ledger itself, schema unchanged.
    forward = pass_ledger("forward", 6, 6, 2, 2, **SEED).to_dict()
    assert forward == ledger(6, 6, 2, 2, **SEED).to_dict()
    assert list(forward["lanes"]["dense"]["by_tensor"]) == list(TENSORS)


def test_sram_working_sets():
    r = pass_ledger("backward", 64, 64, 16, 8, block_q=16, block_k=32, sram_capacity=3000).lanes
    # K_j, V_j, dK_j, dV_j: 2·32·24; Q_i, dO_i, dQ_i: 16·40; L_i, D_i: 32; two 16×32 tiles.
    assert r["tiled"].sram_elements == 2 * 32 * 24 + 16 * 40 + 32 + 2 * 16 * 32
    assert r["tiled"].fits is False
    # Dense: the dS phase holds two 16-row blocks of full rows (P and dP), 2·16·64.
    assert r["dense"].sram_elements == 2 * 16 * 64
    train = pass_ledger("training", 64, 64, 16, 8, block_q=16, block_k=32).lanes
    fwd = ledger(64, 64, 16, 8, block_q=16, block_k=32).lanes
    for lane in ("dense", "tiled"):
        assert train[lane].sram_elements == max(r[lane].sram_elements, fwd[lane].sram_elements)


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
    pass_name=st.sampled_from(["backward", "training"]),
)
def test_counted_ledger_equals_closed_form(
    n_q, n_k, d, d_v, block_q, block_k, order, causal, save_lse, pass_name
):
    kw = dict(block_q=block_q, block_k=block_k, order=order, causal=causal, save_lse=save_lse)
    counted = pass_ledger(pass_name, n_q, n_k, d, d_v, **kw, counted=True)
    formula = pass_ledger(pass_name, n_q, n_k, d, d_v, **kw)
    for lane in ("dense", "tiled"):
        assert as_dict(counted.lanes[lane]) == as_dict(formula.lanes[lane])
        assert counted.lanes[lane].sram_elements == formula.lanes[lane].sram_elements
    tiled = counted.lanes["tiled"].counts
    # Every row's D is written once; dK and dV once per key; dQ zeroed once plus per visit.
    assert tiled["D"]["write"] == n_q
    assert tiled["dK"]["write"] == n_k * d and tiled["dV"]["write"] == n_k * d_v
    assert tiled["dQ"]["write"] == n_q * d + tiled["dQ"]["read"]


@pytest.mark.parametrize(
    ("pass_name", "kwargs", "message"),
    [
        ("sideways", {}, "pass must be one of forward, backward, training"),
        ("backward", {"dtype": "int8"}, "dtype must be one of"),
        ("backward", {"block_q": 0}, "block_q must be a whole number of at least 1"),
        ("training", {"order": "diagonal"}, "order must be one of"),
        ("backward", {"sram_capacity": 0}, "SRAM capacity must be at least 1"),
    ],
)
def test_bad_configuration_is_one_sentence(pass_name, kwargs, message):
    kw = {**SEED, **kwargs}
    with pytest.raises(ValueError, match=message):
        pass_ledger(pass_name, 6, 6, 2, 2, **kw)
