"""Decode: every schedule against an independent float64 reference, the splits' partials
and their combine, the counted walk against the closed form, the roofline."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.decode import (
    H200_COPY_BANDWIDTH,
    H200_MATMUL_PEAK,
    SCHEDULES,
    TENSORS,
    DecodeProblem,
    bandwidth_fraction,
    closed_form_decode_ledger,
    combine,
    decode_attention,
    decode_inputs,
    decode_ledger,
    decode_roofline,
    decode_summary,
    decode_walk,
    one_pass_decode,
    roofline_point,
    split_kv_decode,
    split_partials,
    split_table,
)

FAST = settings(max_examples=25, deadline=None, derandomize=True)

# Hidden-looking configurations: N_k odd, splits not dividing N_k or T_c, more splits
# than tiles, GQA groups 1, 4 and 8, B_c larger than N_k.
HIDDEN = [
    dict(n_q=1, n_k=97, d=8, d_v=8, h_q=8, h_kv=1, block_k=16, splits=5),
    dict(n_q=3, n_k=41, d=5, d_v=3, h_q=8, h_kv=2, block_k=4, splits=7),
    dict(n_q=16, n_k=33, d=4, d_v=6, h_q=2, h_kv=2, block_k=8, splits=9),
    dict(n_q=5, n_k=19, d=3, d_v=3, h_q=12, h_kv=3, block_k=64, splits=3),
    dict(n_q=2, n_k=7, d=2, d_v=2, h_q=4, h_kv=1, block_k=1, splits=4),
    dict(n_q=1, n_k=1, d=1, d_v=1, h_q=1, h_kv=1, block_k=3, splits=2),
]


def reference(p: DecodeProblem, q, k, v, keys=(0, None)):
    """float64 softmax(Q Kᵀ/√d) V per query head over keys[0]:keys[1], causal bottom-right,
    written without compute.attention. Returns O and the log-sum-exp (−∞: no key)."""
    c0, c1 = keys[0], p.n_k if keys[1] is None else keys[1]
    out = np.zeros((p.h_q, p.n_q, p.d_v))
    lse = np.full((p.h_q, p.n_q), -np.inf)
    for h in range(p.h_q):
        g = h * p.h_kv // p.h_q
        for r in range(p.n_q):
            last = min(c1, r + p.n_k - p.n_q + 1)  # keys c <= r + N_k − N_q
            if last <= c0:
                continue
            s = k[g, c0:last] @ q[h, r] / math.sqrt(p.d)
            top = s.max()
            w = np.exp(s - top)
            out[h, r] = w @ v[g, c0:last] / w.sum()
            lse[h, r] = top + math.log(w.sum())
    return out, lse


@st.composite
def problems(draw, dtype="float64"):
    n_q = draw(st.integers(1, 16))
    h_kv = draw(st.integers(1, 2))
    return DecodeProblem(
        n_q=n_q,
        n_k=n_q + draw(st.integers(0, 70)),
        d=draw(st.integers(1, 6)),
        d_v=draw(st.integers(1, 6)),
        h_q=h_kv * draw(st.sampled_from([1, 4, 8])),
        h_kv=h_kv,
        block_k=draw(st.integers(1, 24)),
        splits=draw(st.integers(1, 30)),
        dtype=dtype,
    )


def as_dict(ledger):
    return {t: dict(ledger.counts[t]) for t in TENSORS}


@FAST
@given(problems(), st.integers(0, 2**31 - 1))
def test_every_schedule_equals_the_float64_reference(p, seed):
    q, k, v = decode_inputs(p, seed=seed, scale=1.5)
    want, want_lse = reference(p, q, k, v)
    for schedule in SCHEDULES:
        got = decode_attention(p, schedule, q, k, v)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=schedule)
    for run in (one_pass_decode, split_kv_decode):
        np.testing.assert_allclose(run(p, q, k, v)[1], want_lse, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("config", HIDDEN)
def test_hidden_configurations_equal_the_reference(config):
    p = DecodeProblem(**config)
    q, k, v = decode_inputs(p, seed=sum(config.values()))
    want, _ = reference(p, q, k, v)
    for schedule in SCHEDULES:
        np.testing.assert_allclose(
            decode_attention(p, schedule, q, k, v), want, rtol=1e-10, atol=1e-12
        )


@FAST
@given(problems(), st.integers(0, 2**31 - 1))
def test_each_split_partial_is_attention_over_its_keys(p, seed):
    q, k, v = decode_inputs(p, seed=seed)
    parts = split_partials(p, q, k, v)
    assert len(parts.keys) == p.splits_used == min(p.splits, math.ceil(p.n_k / p.block_k))
    # The splits partition the cache, in order, each within one tile of the others.
    assert parts.keys[0, 0] == 0 and parts.keys[-1, 1] == p.n_k
    assert (parts.keys[1:, 0] == parts.keys[:-1, 1]).all()
    tiles = [math.ceil((c1 - c0) / p.block_k) for c0, c1 in parts.keys]
    assert min(tiles) >= 1 and max(tiles) - min(tiles) <= 1
    for s, keys in enumerate(parts.keys.tolist()):
        want, want_lse = reference(p, q, k, v, keys)
        np.testing.assert_allclose(parts.o[s], want, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(parts.lse[s], want_lse, rtol=1e-12, atol=1e-12)
        seen = parts.l[s] > 0
        np.testing.assert_allclose(
            parts.a[s][seen] / parts.l[s][seen][:, None], want[seen], rtol=1e-10, atol=1e-12
        )


@FAST
@given(problems(), st.integers(0, 2**31 - 1), st.randoms(use_true_random=False))
def test_the_combine_weights_sum_to_one_in_any_split_order(p, seed, rnd):
    q, k, v = decode_inputs(p, seed=seed)
    parts = split_partials(p, q, k, v)
    merged = combine(parts.o, parts.lse)
    np.testing.assert_allclose(merged.weights.sum(axis=0), 1, rtol=1e-12)
    # w_s = exp(L_s − L): each split's share of the softmax mass.
    np.testing.assert_allclose(
        merged.weights, np.exp(parts.lse - merged.lse), rtol=1e-12, atol=1e-300
    )
    order = list(range(p.splits_used))
    rnd.shuffle(order)
    shuffled = combine(parts.o[order], parts.lse[order])
    np.testing.assert_allclose(shuffled.o, merged.o, rtol=1e-12, atol=1e-14)
    want, want_lse = reference(p, q, k, v)
    np.testing.assert_allclose(merged.o, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(merged.lse, want_lse, rtol=1e-12)


def test_a_split_the_causal_mask_hides_merges_with_zero_weight():
    # N_q = 4 against 9 keys, one key per split: new token 0 sees keys 0..5 only.
    p = DecodeProblem(n_q=4, n_k=9, d=3, d_v=2, block_k=1, splits=9)
    q, k, v = decode_inputs(p, seed=3)
    parts = split_partials(p, q, k, v)
    merged = combine(parts.o, parts.lse)
    assert np.isneginf(parts.lse[6:, 0, 0]).all() and (parts.o[6:, 0, 0] == 0).all()
    assert (merged.alpha[6:, 0, 0] == 0).all() and (merged.weights[6:, 0, 0] == 0).all()
    assert np.isfinite(parts.lse[:, 0, 3]).all()  # the last new token sees every key
    np.testing.assert_allclose(merged.o, reference(p, q, k, v)[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_low_precision_schedules_stay_within_the_dtype(dtype):
    p = DecodeProblem(
        n_q=2, n_k=301, d=16, d_v=16, h_q=8, h_kv=2, block_k=32, splits=5, dtype=dtype
    )
    q, k, v = decode_inputs(p, seed=11)
    want, _ = reference(p, q, k, v)
    eps = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}[dtype]
    for run in (one_pass_decode, split_kv_decode):
        got = run(p, q, k, v)[0].astype(np.float64)
        assert np.abs(got - want).max() < 8 * eps, run.__name__
        assert np.abs(got - want).max() > 0  # rounded to the dtype, not float64


@FAST
@given(problems(), st.sampled_from(SCHEDULES))
def test_the_counted_walk_equals_the_closed_form(p, schedule):
    assert as_dict(decode_ledger(p, schedule)) == as_dict(closed_form_decode_ledger(p, schedule))


@pytest.mark.parametrize("config", HIDDEN)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_hidden_ledgers_equal_the_closed_form(config, schedule):
    p = DecodeProblem(**config, dtype="bfloat16")
    counted, closed = decode_ledger(p, schedule), closed_form_decode_ledger(p, schedule)
    assert as_dict(counted) == as_dict(closed)
    assert counted.total_bytes == closed.total_bytes


@pytest.mark.parametrize("config", HIDDEN)
def test_the_walk_reads_every_cached_key_once_and_every_partial_back(config):
    p = DecodeProblem(**config)
    for schedule in SCHEDULES:
        k_reads = np.zeros((p.h_kv * p.n_k, p.d), dtype=int)
        written, read = [], []
        for action in decode_walk(p, schedule):
            for t in action.transfers:
                (r0, r1), (c0, c1) = t.region.rows, t.region.cols
                if t.tensor == "K":
                    k_reads[r0:r1, c0:c1] += 1
                if t.tensor == "O_s":
                    (written if t.direction == "write" else read).append((r0, r1))
        assert (k_reads == 1).all(), schedule  # one read per K/V head, not per query head
        assert sorted(written) == sorted(read) and len(set(written)) == len(written)
        if schedule == "split-kv":
            assert len(written) == p.h_kv * p.splits_used


def test_a_ledger_worked_by_hand():
    # R = H_q N_q = 8 rows, T_c = 3 tiles, S' = 2 splits, float16 (partials float32).
    p = DecodeProblem(n_q=2, n_k=7, d=3, d_v=2, h_q=4, h_kv=2, block_k=3, splits=2, dtype="float16")
    split = decode_ledger(p, "split-kv")
    c = split.counts
    assert (c["Q"]["read"], c["K"]["read"], c["V"]["read"], c["O"]["write"]) == (48, 42, 28, 16)
    assert (c["O_s"]["write"], c["O_s"]["read"], c["L_s"]["write"], c["L_s"]["read"]) == (
        32,
        32,
        16,
        16,
    )
    assert split.total_bytes == (48 + 42 + 28 + 16) * 2 + 64 * 4 + 32 * 4
    assert split.bytes_per_token == split.total_bytes / 2
    assert split.blocks == 4
    one = decode_ledger(p, "one-pass")
    assert one.total_bytes == (24 + 42 + 28 + 16) * 2 and one.blocks == 2
    dense = decode_ledger(p, "dense")
    assert dense.total_bytes == one.total_bytes + 4 * 8 * 7 * 2
    # FLOPs: pairs per head = 2 · 5 + 3 = 13; 2 · 4 heads · 13 · (3 + 2).
    assert split.flops == one.flops == 520


def test_kv_bytes_are_counted_once_per_group():
    base = dict(n_q=1, n_k=1001, d=64, d_v=64, block_k=64, splits=4, dtype="bfloat16")
    mha = decode_ledger(DecodeProblem(**base, h_q=8, h_kv=8), "one-pass")
    gqa = decode_ledger(DecodeProblem(**base, h_q=8, h_kv=1), "one-pass")
    assert mha.counts["K"]["read"] == 8 * gqa.counts["K"]["read"] == 8 * 1001 * 64
    assert mha.counts["Q"]["read"] == gqa.counts["Q"]["read"]
    assert gqa.intensity > 7 * mha.intensity


def test_split_kv_buys_parallelism_not_fewer_bytes():
    p = DecodeProblem(
        n_q=1, n_k=65536, d=128, d_v=128, h_q=8, h_kv=2, block_k=128, splits=32, dtype="bfloat16"
    )
    one, split = decode_ledger(p, "one-pass"), decode_ledger(p, "split-kv")
    for t in ("K", "V"):
        assert split.counts[t] == one.counts[t]
    assert split.total_bytes > one.total_bytes
    assert (one.blocks, split.blocks) == (2, 64)


def test_decode_is_memory_bound_on_the_h200():
    p = DecodeProblem(
        n_q=1, n_k=65536, d=128, d_v=128, h_q=32, h_kv=8, block_k=128, splits=16, dtype="bfloat16"
    )
    for schedule in SCHEDULES:
        led = decode_ledger(p, schedule)
        point = decode_roofline(led)
        assert point.bound == "memory" and point.intensity < point.ridge
        assert point.time == led.total_bytes / H200_COPY_BANDWIDTH
        assert point.attainable == pytest.approx(point.intensity * H200_COPY_BANDWIDTH)
    one = decode_roofline(decode_ledger(p, "one-pass"))
    # About 4 FLOPs per byte (2 G FLOPs per bf16 K/V element), against a ridge of ~184.
    assert 3.9 < one.intensity < 4.1
    assert one.ridge == pytest.approx(790e12 / 4.3e12)
    assert one.time == pytest.approx(2 * 8 * 65536 * 128 * 2 / 4.3e12, rel=1e-3)
    nominal = decode_roofline(decode_ledger(p, "one-pass"), bandwidth=4.8e12)
    assert nominal.time < one.time


def test_a_compute_heavy_point_is_compute_bound():
    point = roofline_point(10**6, 10**12)
    assert point.bound == "compute" and point.time == 10**12 / H200_MATMUL_PEAK
    assert point.attainable == H200_MATMUL_PEAK


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (dict(n_q=17, n_k=40, d=4, d_v=4), "1 to 16 new queries"),
        (dict(n_q=4, n_k=3, d=4, d_v=4), "at least the number of new queries"),
        (dict(n_q=1, n_k=9, d=4, d_v=4, h_q=6, h_kv=4), "multiple of H_kv"),
        (dict(n_q=1, n_k=9, d=4, d_v=4, splits=0), "splits must be a whole number"),
        (dict(n_q=1, n_k=9, d=4, d_v=4, dtype="int8"), "dtype must be one of"),
    ],
)
def test_bad_configurations_say_what_is_wrong(config, words):
    with pytest.raises(ValueError, match=words):
        DecodeProblem(**config)


def test_inputs_of_the_wrong_shape_are_refused():
    p = DecodeProblem(n_q=2, n_k=9, d=4, d_v=4, h_q=4, h_kv=2)
    q, k, v = decode_inputs(p, seed=0)
    with pytest.raises(ValueError, match="k has shape"):
        split_kv_decode(p, q, k[:1], v)
    with pytest.raises(ValueError, match="schedule must be"):
        decode_attention(p, "paged", q, k, v)


def test_the_split_table_lists_one_rows_partials_and_their_merge():
    p = DecodeProblem(n_q=3, n_k=23, d=4, d_v=3, h_q=4, h_kv=2, block_k=5, splits=3)
    q, k, v = decode_inputs(p, seed=5)
    parts = split_partials(p, q, k, v)
    merged = combine(parts.o, parts.lse)
    table = split_table(parts, merged, head=3, row=1)
    assert [s.keys for s in table.splits] == [(0, 5), (5, 15), (15, 23)]
    # Head 3 reads K/V head 1; token 1 sees keys 0..21.
    keys = np.arange(22)
    scores = k[1, keys] @ q[3, 1] / 2.0
    assert table.lse == pytest.approx(np.log(np.exp(scores).sum()), rel=1e-12)
    for row in table.splits:
        c0, c1 = row.keys
        part = scores[c0 : min(c1, 22)]
        assert row.lse == pytest.approx(np.log(np.exp(part).sum()), rel=1e-12)
        assert row.m == pytest.approx(part.max()) and row.weight == pytest.approx(
            math.exp(row.lse - table.lse)
        )
        assert row.alpha == pytest.approx(math.exp(row.lse - table.m))
    assert table.m == max(s.lse for s in table.splits)
    assert sum(s.weight for s in table.splits) == pytest.approx(1)
    with pytest.raises(ValueError, match="outside the 4 heads"):
        split_table(parts, merged, head=4, row=0)


def test_the_summary_is_json_and_matches_the_ledgers():
    p = DecodeProblem(n_q=2, n_k=7, d=3, d_v=2, h_q=4, h_kv=2, block_k=3, splits=5, dtype="float16")
    summary = json.loads(json.dumps(decode_summary(p)))
    assert summary["config"]["splits_used"] == 3 and summary["config"]["group"] == 2
    for name in SCHEDULES:
        entry = summary["schedules"][name]
        assert entry["total_bytes"] == decode_ledger(p, name).total_bytes
        assert entry["roofline"]["bound"] == "memory"
        assert entry["roofline"]["time_s"] == entry["total_bytes"] / H200_COPY_BANDWIDTH
    assert summary["schedules"]["split-kv"]["blocks"] == 6


def test_bandwidth_fraction():
    assert bandwidth_fraction(43 * 10**9, 0.01) == pytest.approx(1.0)
    assert bandwidth_fraction(43 * 10**9, 0.02, ceiling=4.3e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive number of seconds"):
        bandwidth_fraction(10, 0.0)


def test_filling_splits_fill_twice_the_sms_within_the_tiles():
    from compute.decode import H200_SMS, filling_splits

    assert filling_splits(8, 1024) == 33 and 8 * 33 >= 2 * H200_SMS
    assert filling_splits(1, 128) == 128  # capped at T_c: a split needs a tile
    assert filling_splits(264, 5) == 1
    with pytest.raises(ValueError, match="at least 1"):
        filling_splits(0, 4)
