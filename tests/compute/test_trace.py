"""The trace: both lanes on one timeline, the reference example's Q0 statistics, running counts."""

import numpy as np
import pytest

from compute import (
    ORDERS,
    build_trace,
    closed_form_ledger,
    dense_attention,
    random_inputs,
    seed_example,
)

SEED = seed_example()


def seed_trace(**kw):
    kw.setdefault("block_q", 2)
    kw.setdefault("block_k", 2)
    return build_trace(SEED.q, SEED.k, SEED.v, **kw)


def q0_expected_states(block_k):
    """Q0's (m, ℓ, a, α) after each key tile, computed here from the explainer's formulas."""
    s = SEED.q[0] @ SEED.k.T / np.sqrt(2)
    m, l, a, out = -np.inf, 0.0, np.zeros(2), []
    for c in range(0, 6, block_k):
        t, vt = s[c : c + block_k], SEED.v[c : c + block_k]
        m_new = max(m, t.max())
        alpha = np.exp(m - m_new)
        p = np.exp(t - m_new)
        l, a, m = alpha * l + p.sum(), alpha * a + p @ vt, m_new
        out.append((m, l, a.copy(), alpha))
    return out


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block_k", [1, 2, 3, 4, 7])
def test_replays_q0_statistics(order, block_k):
    trace = seed_trace(block_k=block_k, order=order)
    steps, tiles = trace.row_updates(0)
    expected = q0_expected_states(block_k)
    assert list(tiles) == list(range(len(expected)))
    for step, (m, l, a, alpha) in zip(steps, expected, strict=True):
        state = trace.row_state(0, int(step))
        assert state.m == pytest.approx(m, abs=1e-14)
        assert state.l == pytest.approx(l, rel=1e-13)
        np.testing.assert_allclose(state.a, a, rtol=1e-13)
        assert state.alpha == pytest.approx(alpha, abs=1e-14)
    final = trace.row_state(0, trace.n_steps - 1)
    np.testing.assert_allclose(final.partial_output, dense_attention(SEED.q, SEED.k, SEED.v)[0])


def test_q0_max_rises_in_every_tile_and_alpha_starts_at_zero():
    trace = seed_trace()
    h = trace.row_history(0)
    assert np.all(np.diff(h.m[1:]) > 0)  # the reference example: Q0 raises the max in each tile
    assert h.alpha[1] == 0  # before any key is seen, α is zero
    assert np.all((h.alpha[2:] > 0) & (h.alpha[2:] < 1))  # later tiles rescale
    before = trace.row_state(0, -1)
    assert (before.m, before.l, before.tile) == (-np.inf, 0.0, 0)
    assert np.all(before.partial_output == 0)


def test_running_counts_end_at_the_seed_totals():
    trace = seed_trace()
    assert trace.totals_at(trace.n_steps - 1) == {"dense": 240, "tiled": 96}
    assert trace.totals_at(-1) == {"dense": 0, "tiled": 0}
    totals = [sum(trace.totals_at(t).values()) for t in range(trace.n_steps)]
    assert totals == sorted(totals)
    assert trace.counts_at(trace.n_steps - 1)["dense"]["S"] == {"read": 36, "write": 36}


@pytest.mark.parametrize("order", ORDERS)
def test_tiled_lane_never_moves_s_or_p(order):
    trace = seed_trace(order=order, causal=True, block_k=3)
    for step in trace.steps:
        if step.tiled is not None:
            assert all(t.tensor not in ("S", "P") for t in step.tiled.transfers)
    assert trace.lane_length("dense") == trace.schedule.t_r * (2 * trace.schedule.t_c + 3)


def test_steps_name_lanes_phases_and_residency():
    trace = seed_trace()
    first = trace.steps[0]
    assert first.dense.phase == "load_q" and first.tiled.phase == "load_q"
    assert "Step 1." in first.describe()
    update = next(s.tiled for s in trace.steps if s.tiled and s.tiled.phase == "update")
    assert {r.tensor for r in update.resident} >= {"Q", "K", "V", "S", "m", "l"}
    last = trace.steps[-1]
    assert last.tiled is None and last.dense.phase == "write_o"


def test_trace_is_immutable():
    trace = seed_trace()
    with pytest.raises(ValueError):
        trace.scores[0, 0] = 1.0
    with pytest.raises(ValueError):
        trace.row_history(0).m[0] = 1.0
    with pytest.raises(ValueError):
        trace.lanes["tiled"].seg_start[0] = 1
    with pytest.raises(ValueError):
        trace.state_after_tiles(1)[0][0] = 1.0
    with pytest.raises(AttributeError):
        trace.dtype = "float32"


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_dtype_error_is_reported(dtype):
    r = random_inputs(40, 8, 8, seed=3)
    trace = build_trace(r.q, r.k, r.v, block_q=8, block_k=8, dtype=dtype)
    assert 0 < trace.max_abs_error < 5e-3
    assert build_trace(r.q, r.k, r.v, block_q=8, block_k=8).max_abs_error < 1e-12


def test_trace_holds_no_per_step_objects_or_arrays():
    # N = 4096 with 2×2 blocks: millions of steps, described by O(T_r + T_c) numbers.
    r = random_inputs(4096, 2, 2, seed=1)
    trace = build_trace(r.q, r.k, r.v, block_q=2, block_k=2)
    assert trace.n_steps == 2048 * (2 * 2048 + 3)
    held = sum(
        x.nbytes
        for lane in trace.lanes.values()
        for x in (lane.seg_start, lane.seg_cumulative, lane.seg_part, lane.seg_outer)
    )
    assert held < 64 * trace.schedule.t_r * 9 * 2 * 8
    counted = closed_form_ledger(4096, 4096, 2, 2, block_q=2, block_k=2)
    for lane in ("dense", "tiled"):
        assert trace.totals_at(trace.n_steps - 1)[lane] == counted.lanes[lane].total_elements
    last = trace.steps[-1]
    assert last.dense.phase == "write_o" and last.dense.block_i == 2047
    assert trace.cached("summary") == 0  # no attention was computed for the timeline


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_kv_outer_block_state_without_the_blocks_history(dtype):
    # KV-outer visits another block every step: its SRAM numbers come from the all-rows
    # state at the tile, and must equal the block's own history (computed afterwards).
    r = random_inputs(13, 3, 2, n_k=11, seed=8)
    kw = dict(block_q=3, block_k=4, order="kv-outer", causal=True, dtype=dtype)
    tol = dict(rtol=1e-12, atol=1e-13) if dtype == "float64" else dict(rtol=1e-5, atol=1e-6)
    fresh = build_trace(r.q, r.k, r.v, **kw)
    s = fresh.schedule
    got = {
        (i, t): (fresh.block_state(i, t), fresh.p_tilde_tile(i, min(t, s.t_c - 1)))
        for i in range(s.t_r)
        for t in range(s.t_c + 1)
    }
    assert fresh.cached("blocks") == 0  # no block's history was needed
    for (i, t), ((m, l, a), p) in got.items():
        h = fresh.block_history(i)
        np.testing.assert_allclose(m, h.m[:, t], **tol)
        np.testing.assert_allclose(l, h.l[:, t], **tol)
        np.testing.assert_allclose(a, h.a[:, t], **tol)
        c0, c1 = s.cols(min(t, s.t_c - 1))
        if s.visible[i, min(t, s.t_c - 1)]:
            np.testing.assert_allclose(p, h.p_tilde[:, c0:c1], **tol)


@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
def test_a_frame_reads_a_blocks_tile_without_its_whole_history(dtype, monkeypatch):
    # Q-outer playback shows the current block's state at one tile: made as far as that
    # tile (recurrence.BlockHistory), with the whole history's very digits.
    import compute.recurrence as recurrence

    monkeypatch.setattr(recurrence, "SCAN_CHUNK_ELEMENTS", 1)  # chunks of MIN_CHUNK_TILES
    r = random_inputs(20, 3, 2, n_k=600, seed=4)
    trace = build_trace(r.q, r.k, r.v, block_q=4, block_k=2, dtype=dtype)
    s = trace.schedule
    step = int(trace.row_updates(8)[0][40])  # block 2's update with key tile 40
    t = trace.tiles_seen(8, step)
    assert t == 41
    m, l, a = trace.block_state(2, t)  # noqa: E741
    p = trace.p_tilde_tile(2, 40)
    assert trace.cached("blocks") == 0  # no block's whole history was made
    chunk = recurrence.MIN_CHUNK_TILES
    assert trace.forward._partial(2)._scan.done == -(-t // chunk) * chunk < s.t_c
    h = trace.block_history(2)
    assert trace.forward._partial(2).complete() is h  # the same arrays, finished
    for got, want in ((m, h.m[:, t]), (l, h.l[:, t]), (a, h.a[:, t]), (p, h.p_tilde[:, 80:82])):
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable
    assert trace.row_state(8, step).tile == t
