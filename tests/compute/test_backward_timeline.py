"""The backward and training timelines (arrays) against the declared walk and the ledger,
and the backward's per-row numbers against compute.attention_backward."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import ORDERS, attention_backward, build_trace, pass_ledger, random_inputs
from compute.backward_rows import DO_SEED, default_do
from compute.backward_schedule import PASS_TENSORS, backward_steps
from compute.schedule import DIRECTIONS, Schedule
from compute.timeline import NONE, PHASES, LaneTimeline

schedules = st.builds(
    Schedule,
    n_q=st.integers(1, 20),
    n_k=st.integers(1, 20),
    d=st.integers(1, 4),
    d_v=st.integers(1, 4),
    block_q=st.integers(1, 25),
    block_k=st.integers(1, 25),
    order=st.sampled_from(ORDERS),
    causal=st.booleans(),
    save_lse=st.just(True),
)


def _ledger_array(s: Schedule, pass_name: str, lane: str) -> np.ndarray:
    led = pass_ledger(
        pass_name, s.n_q, s.n_k, s.d, s.d_v, block_q=s.block_q, block_k=s.block_k,
        order=s.order, causal=s.causal,
    )  # fmt: skip
    c = led.lanes[lane].counts
    return np.array([[c[t][d] for d in DIRECTIONS] for t in PASS_TENSORS])


@settings(max_examples=200, deadline=None)
@given(s=schedules, lane=st.sampled_from(["dense", "tiled"]))
def test_backward_arrays_equal_the_counted_walk(s, lane):
    walked = list(backward_steps(s, lane))
    tl = LaneTimeline(s, lane, "backward")
    assert tl.length == len(walked)
    phases, bi, bj = tl.arrays()
    assert [PHASES[p] for p in phases] == ["bwd_" + w.phase for w in walked]
    assert [None if i == NONE else i for i in bi.tolist()] == [w.block_i for w in walked]
    assert [None if j == NONE else j for j in bj.tolist()] == [w.block_j for w in walked]
    running = np.zeros((len(PASS_TENSORS), len(DIRECTIONS)), dtype=np.int64)
    for t, w in enumerate(walked):
        a = tl.action(t)
        moves = sorted((m.tensor, m.direction, m.rows, m.cols) for m in w.moves)
        assert (
            sorted((x.tensor, x.direction, x.region.rows, x.region.cols) for x in a.transfers)
            == moves
        )
        for m in w.moves:
            running[PASS_TENSORS.index(m.tensor), DIRECTIONS.index(m.direction)] += m.elements
        np.testing.assert_array_equal(tl.counts_at(t), running)
    np.testing.assert_array_equal(tl.totals, _ledger_array(s, "backward", lane))


@settings(max_examples=300, deadline=None)
@given(
    s=schedules,
    lane=st.sampled_from(["dense", "tiled"]),
    pass_name=st.sampled_from(["backward", "training"]),
)
def test_running_counts_end_at_the_pass_ledger(s, lane, pass_name):
    tl = LaneTimeline(s, lane, pass_name)
    expected = _ledger_array(s, pass_name, lane)
    np.testing.assert_array_equal(tl.totals, expected)
    np.testing.assert_array_equal(tl.counts_at(tl.length - 1), expected)
    if pass_name == "training":  # the forward's parts first: its counts carry over
        forward = LaneTimeline(s, lane, "forward")
        at = tl.counts_at(forward.length - 1)
        np.testing.assert_array_equal(at[: len(forward.tensors)], forward.totals)
        assert (at[len(forward.tensors) :] == 0).all()


def test_seed_example_totals():
    from compute import seed_example

    x = seed_example()
    for pass_name, dense, tiled in (("backward", 444, 270), ("training", 684, 372)):
        t = build_trace(x.q, x.k, x.v, block_q=2, block_k=2, pass_name=pass_name)
        assert t.totals_at(t.n_steps - 1) == {"dense": dense, "tiled": tiled}
        led = t.ledger()
        assert (led.lanes["dense"].total_elements, led.lanes["tiled"].total_elements) == (
            dense,
            tiled,
        )
        assert led.config()["pass"] == pass_name


@pytest.mark.parametrize(
    ("n_q", "n_k", "bq", "bk", "causal", "dtype"),
    [
        (9, 7, 2, 3, True, "float64"),
        (8, 13, 5, 20, False, "float64"),
        (11, 11, 4, 3, True, "float32"),
    ],
)
def test_backward_rows_accumulate_to_the_gradients(n_q, n_k, bq, bk, causal, dtype):
    x = random_inputs(n_q, 4, 3, n_k=n_k, seed=7)
    do = np.random.default_rng(8).standard_normal((n_q, 3))
    t = build_trace(
        x.q, x.k, x.v, block_q=bq, block_k=bk, causal=causal, dtype=dtype,
        pass_name="backward", do=do,
    )  # fmt: skip
    dq, dk, dv = attention_backward(
        x.q, x.k, x.v, do, causal=causal, block_q=bq, block_k=bk, dtype=dtype
    )
    ref = attention_backward(x.q, x.k, x.v, do, causal=causal, method="dense")
    tol = 1e-9 if dtype == "float64" else 1e-4
    for r in range(n_q):
        b = t.backward_row(r)
        np.testing.assert_allclose(b.dq[-1], dq[r], atol=tol)
        np.testing.assert_allclose(b.dq_reference, ref[0][r], atol=1e-12)
        np.testing.assert_allclose(b.p_tilde, t.probs[r], atol=tol)  # P̃ = the forward's P
        assert b.L == pytest.approx(float(t.lse[r])) or not np.isfinite(b.L)
        # dQ_row after the tiles the lane has passed at the end is the whole sum
        assert t.backward_tiles_done(r, t.n_steps - 1) == t.schedule.last_visit[r // bq] + 1
    for c in range(n_k):
        kr = t.key_row(c)
        np.testing.assert_allclose(kr.dk[-1], dk[c], atol=tol)
        np.testing.assert_allclose(kr.dv[-1], dv[c], atol=tol)
        np.testing.assert_allclose(kr.dk_reference, ref[1][c], atol=1e-12)
        np.testing.assert_allclose(kr.dv_reference, ref[2][c], atol=1e-12)


def test_dq_row_grows_tile_by_tile_on_the_timeline():
    x = random_inputs(10, 3, 3, seed=3)
    t = build_trace(x.q, x.k, x.v, block_q=3, block_k=4, pass_name="backward")
    row = 4
    done = [t.backward_tiles_done(row, s) for s in range(-1, t.n_steps)]
    assert done[0] == 0 and done[-1] == t.schedule.t_c
    assert all(b - a in (0, 1) for a, b in zip(done, done[1:], strict=False))
    blocks = [t.backward_blocks_done(5, s) for s in range(-1, t.n_steps)]
    assert blocks[0] == 0 and blocks[-1] == t.schedule.t_r
    assert all(b >= a for a, b in zip(blocks, blocks[1:], strict=False))


def test_default_do_is_seeded_and_used():
    x = random_inputs(5, 2, 2, seed=1)
    t = build_trace(x.q, x.k, x.v, block_q=2, block_k=2, pass_name="backward")
    np.testing.assert_array_equal(t.do, np.random.default_rng(DO_SEED).standard_normal((5, 2)))
    np.testing.assert_array_equal(t.do, default_do(5, 2))
    f = build_trace(x.q, x.k, x.v, block_q=2, block_k=2)
    assert f.do is None and f.tensors == t.tensors[: len(f.tensors)]


def test_bad_pass_and_do_are_one_sentence():
    x = random_inputs(4, 2, 2, seed=1)
    with pytest.raises(ValueError, match="pass must be"):
        build_trace(x.q, x.k, x.v, block_q=2, block_k=2, pass_name="sideways")
    with pytest.raises(ValueError, match="dO has shape"):
        build_trace(x.q, x.k, x.v, block_q=2, block_k=2, pass_name="backward", do=np.zeros((3, 2)))


def test_dense_lane_gradients_regions_and_summary():
    x = random_inputs(9, 3, 2, n_k=7, seed=11)
    do = np.random.default_rng(12).standard_normal((9, 2))
    t = build_trace(x.q, x.k, x.v, block_q=2, block_k=3, causal=True, pass_name="training", do=do)
    ref = attention_backward(x.q, x.k, x.v, do, causal=True, method="dense")
    for got, want in zip(t.gradients("dense"), ref, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)
    p = t.probs
    dp = do @ x.v.T
    ds = p * (dp - np.sum(p * dp, axis=1, keepdims=True))
    np.testing.assert_allclose(t.grad_region("dP", 0, 9, 0, 7), dp, atol=1e-12)
    np.testing.assert_allclose(t.grad_region("dS", 2, 5, 1, 6), ds[2:5, 1:6], atol=1e-12)
    np.testing.assert_allclose(t.backward_summary(4).ds_small.values[0, 0], ds[:3, :2].mean())
    np.testing.assert_allclose(t.backward_D, np.sum(do * t.tiled_output, axis=1), atol=1e-12)
    b = t.backward_block(1)
    np.testing.assert_allclose(b.ds, ds[2:4], atol=1e-12)  # P̃ ∘ (dP − D): the same dS


def test_tiled_backward_from_a_saved_forward_and_pass_working_sets():
    from compute import tiled_attention
    from compute.backward_schedule import backward_sram_elements

    x = random_inputs(13, 4, 3, n_k=10, seed=21)
    do = np.random.default_rng(22).standard_normal((13, 3))
    kw = dict(causal=True, block_q=4, block_k=3, dtype="float32")
    o, lse = tiled_attention(x.q, x.k, x.v, return_lse=True, **kw)
    again = attention_backward(x.q, x.k, x.v, do, saved=(o, lse), **kw)
    for a, b in zip(attention_backward(x.q, x.k, x.v, do, **kw), again, strict=True):
        np.testing.assert_array_equal(a, b)  # the same forward, so the same numbers
    for pass_name in ("forward", "backward", "training"):
        t = build_trace(x.q, x.k, x.v, block_q=4, block_k=3, pass_name=pass_name, do=do)
        led = pass_ledger(pass_name, 13, 10, 4, 3, block_q=4, block_k=3, save_lse=True)
        for lane in ("dense", "tiled"):
            assert t.sram_need(lane) == led.lanes[lane].sram_elements
            assert t.ledger().lanes[lane].sram_elements == led.lanes[lane].sram_elements
        if pass_name == "backward":
            assert t.sram_need("tiled") == backward_sram_elements(t.schedule, "tiled")


@pytest.mark.parametrize(
    ("dtype", "causal", "n_q", "n_k", "tol"),
    [
        ("float64", True, 11, 9, 1e-12),
        ("float32", False, 8, 12, 1e-4),
        ("float16", True, 9, 14, 3e-2),
    ],
)
def test_trace_gradients_equal_attention_backward(dtype, causal, n_q, n_k, tol):
    x = random_inputs(n_q, 4, 3, n_k=n_k, seed=31)
    do = np.random.default_rng(32).standard_normal((n_q, 3))
    t = build_trace(
        x.q, x.k, x.v, block_q=3, block_k=5, causal=causal, dtype=dtype, pass_name="backward", do=do
    )
    kw = dict(causal=causal, block_q=3, block_k=5, dtype=dtype)
    for got, want in zip(
        t.gradients("tiled"), attention_backward(x.q, x.k, x.v, do, **kw), strict=True
    ):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    ref = attention_backward(x.q, x.k, x.v, do, causal=causal, method="dense")
    for got, want in zip(t.gradients("dense"), ref, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_memory_budget_counts_the_backward():
    from compute.inputs import InputError, check_memory_budget, memory_estimate

    args = (2048, 2048, 64, 64, 1024)  # T_c = 1024 key tiles of 2
    fwd = memory_estimate(*args, block_q=512)
    bwd = memory_estimate(*args, block_q=512, backward=(2, 4))
    # 16 blocks' P̃, dP, dS and dQ after every tile come on top of the forward's history
    assert bwd - fwd >= 8 * 2048 * (3 * 2048 + 1025 * 64)
    check_memory_budget(*args, block_q=512, memory_budget=fwd)
    with pytest.raises(InputError, match="memory budget"):
        check_memory_budget(*args, block_q=512, memory_budget=fwd, backward=(2, 4))
