"""The array timeline against the action-by-action walk, and the on-demand numbers
against the full recorded recurrence (`tiled_attention_history`)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compute import DTYPES, ORDERS, random_inputs
from compute.attention import tiled_attention_history
from compute.recurrence import TileCursor, block_history
from compute.schedule import DIRECTIONS, TENSORS, Schedule, lane_actions
from compute.timeline import NONE, PHASES, LaneTimeline

schedules = st.builds(
    Schedule,
    n_q=st.integers(1, 24),
    n_k=st.integers(1, 24),
    d=st.integers(1, 5),
    d_v=st.integers(1, 5),
    block_q=st.integers(1, 30),
    block_k=st.integers(1, 30),
    order=st.sampled_from(ORDERS),
    causal=st.booleans(),
    save_lse=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(s=schedules, lane=st.sampled_from(["dense", "tiled"]))
def test_arrays_equal_the_walked_action_list(s, lane):
    walked = list(lane_actions(s, lane))
    tl = LaneTimeline(s, lane)
    assert tl.length == len(walked)
    phases, bi, bj = tl.arrays()
    assert [PHASES[p] for p in phases] == [a.phase for a in walked]
    assert [None if i == NONE else i for i in bi.tolist()] == [a.block_i for a in walked]
    assert [None if j == NONE else j for j in bj.tolist()] == [a.block_j for a in walked]
    running = np.zeros((len(TENSORS), len(DIRECTIONS)), dtype=np.int64)
    assert (tl.counts_at(-1) == 0).all()
    for t, action in enumerate(walked):
        assert tl.action(t) == action  # labels, transfers and residency too
        for tr in action.transfers:
            running[TENSORS.index(tr.tensor), DIRECTIONS.index(tr.direction)] += tr.elements
        np.testing.assert_array_equal(tl.counts_at(t), running)
    np.testing.assert_array_equal(tl.totals, running)
    assert tl.action(len(walked)) is None
    for block in range(s.t_r):
        steps, tiles = tl.steps_of("update", block)
        expected = [
            (t, a.block_j)
            for t, a in enumerate(walked)
            if a.phase == "update" and a.block_i == block
        ]
        assert list(zip(steps.tolist(), tiles.tolist(), strict=True)) == expected


def _tolerance(dtype):
    return dict(rtol=1e-13, atol=1e-14) if dtype == "float64" else dict(rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(s=schedules, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_on_demand_numbers_equal_the_full_recurrence(s, dtype, seed):
    r = random_inputs(s.n_q, s.d, s.d_v, n_k=s.n_k, seed=seed)
    scale = 1 / np.sqrt(s.d)
    kw = dict(block_q=s.block_q, block_k=s.block_k, order=s.order, causal=s.causal)
    _, _, full = tiled_attention_history(r.q, r.k, r.v, scale=scale, dtype=dtype, **kw)
    for block in range(s.t_r):
        r0, r1 = s.rows(block)
        h = block_history(r.q, r.k, r.v, s, block, scale=scale, dtype=dtype)
        for name in ("m", "l", "a", "alpha", "p_tilde"):
            np.testing.assert_allclose(
                getattr(h, name), getattr(full, name)[r0:r1], **_tolerance(dtype), err_msg=name
            )
    cursor = TileCursor(r.q, r.k, r.v, s, scale=scale, dtype=dtype)
    # Forward tile by tile (the loop: exact), then back and far ahead (closed-form jumps).
    for k, tiles in enumerate([*range(s.t_c + 1), 0, s.t_c // 2, s.t_c, 1]):
        m, l, o = cursor.state(tiles)
        if k <= s.t_c:  # the loop itself: bit for bit
            np.testing.assert_array_equal(m, full.m[:, tiles])
            np.testing.assert_array_equal(l, full.l[:, tiles])
        # A jump computes S over other matrix shapes (last-place differences in S itself).
        np.testing.assert_allclose(m, full.m[:, tiles], **_tolerance(dtype))
        np.testing.assert_allclose(l, full.l[:, tiles], **_tolerance(dtype))
        a = full.a[:, tiles]
        expected = np.zeros_like(a)
        np.divide(a, full.l[:, tiles, None], out=expected, where=full.l[:, tiles, None] > 0)
        np.testing.assert_allclose(o, expected, **_tolerance(dtype))


@settings(max_examples=150, deadline=None)
@given(s=schedules, lane=st.sampled_from(["dense", "tiled"]))
def test_write_regions_equal_the_walked_writes(s, lane):
    walked = list(lane_actions(s, lane))
    tl = LaneTimeline(s, lane)
    for tensor in TENSORS:
        expected = sorted(
            (t, *tr.region.rows, *tr.region.cols)
            for t, a in enumerate(walked)
            for tr in a.transfers
            if tr.tensor == tensor and tr.direction == "write"
        )
        got = sorted(zip(*(x.tolist() for x in tl.write_regions(tensor)), strict=True))
        assert got == expected, tensor


@settings(max_examples=200, deadline=None)
@given(
    s=schedules,
    lane=st.sampled_from(["dense", "tiled"]),
    pass_name=st.sampled_from(["forward", "backward", "training"]),
    fr=st.integers(1, 7),
    fc=st.integers(1, 7),
)
def test_write_steps_per_cell_equal_every_write_spread(s, lane, pass_name, fr, fc):
    """The per-cell formulas (grid writes, per-visit writes of block rows) against every
    write region of the lane spread over the cells it covers."""
    tl = LaneTimeline(s, lane, pass_name)
    shapes = {"O": (s.n_q, s.d_v), "dQ": (s.n_q, s.d), "S": (s.n_q, s.n_k), "m": (s.n_q, 1)}
    shapes |= {"l": (s.n_q, 1), "L": (s.n_q, 1), "dK": (s.n_k, s.d), "dV": (s.n_k, s.d_v)}
    shapes |= {"P": (s.n_q, s.n_k), "dP": (s.n_q, s.n_k), "dS": (s.n_q, s.n_k), "D": (s.n_q, 1)}
    for tensor, shape in shapes.items():
        if tensor not in tl.tensors:
            continue
        h, w = -(-shape[0] // fr), -(-shape[1] // fc)
        first = np.full((h, w), np.iinfo(np.int64).max)
        last = np.full((h, w), -1)
        for step, r0, r1, c0, c1 in zip(*tl.write_regions(tensor), strict=True):
            cells = np.s_[r0 // fr : -(-r1 // fr), c0 // fc : -(-c1 // fc)]
            first[cells] = np.minimum(first[cells], step)
            last[cells] = np.maximum(last[cells], step)
        first[first == np.iinfo(np.int64).max] = -1
        got_first, got_last = tl.write_steps_per_cell(tensor, shape, (fr, fc))
        np.testing.assert_array_equal(got_first, first, err_msg=tensor)
        np.testing.assert_array_equal(got_last, last, err_msg=tensor)


def test_traces_of_one_tiling_share_their_timelines_and_schedule():
    """A new seed keeps the timelines (they depend on the schedule and the pass alone);
    other blocks or another pass get their own, equal to ones made afresh."""
    from compute import build_trace
    from compute.timeline import LaneTimeline

    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((37, 3)) for _ in range(3))
    a = build_trace(q, k, v, block_q=5, block_k=7, causal=True, pass_name="training")
    q2, k2, v2 = (rng.standard_normal((37, 3)) for _ in range(3))
    b = build_trace(q2, k2, v2, block_q=5, block_k=7, causal=True, pass_name="training")
    assert all(b.lanes[lane] is a.lanes[lane] for lane in a.lanes)
    assert b.schedule is a.schedule and all(t.schedule is b.schedule for t in b.lanes.values())
    c = build_trace(q, k, v, block_q=6, block_k=7, causal=True, pass_name="training")
    d = build_trace(q, k, v, block_q=5, block_k=7, causal=True, pass_name="backward")
    for other in (c, d):
        assert all(other.lanes[lane] is not a.lanes[lane] for lane in a.lanes)
        for lane, t in other.lanes.items():
            fresh = LaneTimeline(other.schedule, lane, other.pass_name)
            assert t.length == fresh.length
            assert np.array_equal(t.seg_cumulative, fresh.seg_cumulative)
            assert np.array_equal(t.seg_start, fresh.seg_start)
