"""The backward timeline's reduction (compute/gpu/lab/backward_timeline.py) on made-up
stamps, without a GPU."""

import numpy as np

from compute.gpu.lab import backward_timeline as bt


def _stamps(start: int, items: int, lag: int) -> np.ndarray:
    """One CTA's stamps: block b's top at 1000 b, the ws order's k-th event 10 k later,
    consumer 1 `lag` cycles behind but released from the hand-off with consumer 0; dQ (event
    12) in consumer 0's even and consumer 1's odd blocks; the clock starting at `start`."""
    raw = np.full((bt.CTAS, bt.WARPS, bt.BLOCKS + 1, bt.EV), bt.MISSING, dtype=np.int64)
    order = [ev for ev, _ in bt.ORDERS["ws"]]
    for w in range(bt.WARPS):
        raw[0, w, bt.BLOCKS, 0] = start + (5 if w else 0)
        raw[0, w, bt.BLOCKS, 3] = items
    for b in range(items):
        for ev in (0, 1, 2):
            raw[0, 0, b, ev] = start + 1000 * b + 10 * ev
        for cw, warps in ((0, (4, 5, 6, 7)), (1, (8, 9, 10, 11))):
            for w in warps:
                for k, ev in enumerate(order):
                    if ev == 12 and b % 2 != cw:
                        continue
                    shift = lag * cw if order.index(ev) < order.index(11) else 0
                    raw[0, w, b, ev] = start + 1000 * b + 10 * k + shift
    return (raw % (1 << 32)).astype(np.uint32)


def test_reduce_gives_the_made_up_phases_across_the_clock_wrap():
    raw = _stamps((1 << 32) - 3500, 12, lag=4)
    rel = bt.relative(raw)
    assert rel[0, 0, 0, 0] == 0 and rel[0, 4, 11, 0] == 11000
    out = bt.reduce(rel, [12, 0, 0, 0], bt.ORDERS["ws"])
    (cta,) = out["ctas"]
    assert cta["blocks"] == 12
    c0 = cta["roles"]["consumer 0 (dQ blocks)"]
    assert c0["period"] == 1000 and c0["wait Q"] == 10 and c0["issue dQ"] == 10
    assert "issue dQ" not in cta["roles"]["consumer 0 (no dQ)"]
    assert cta["roles"]["consumer 0 (no dQ)"]["wait GEMMs"] == 20  # from the hand-off
    assert cta["roles"]["producer"] == {"wait free stage": 10, "issue loads": 10,
                                        "to next block": 980, "period": 1000}  # fmt: skip
    # consumer 1 arrives 4 later at the hand-off (both released 10 after 0 arrived)
    assert cta["handoff"]["wait"] == {"consumer 0": 10.0, "consumer 1": 6.0}
    assert cta["handoff"]["arrived last"] == {"consumer 0": 0, "consumer 1": 8}
    assert cta["handoff"]["consumer 1 top - consumer 0 top"] == 4.0
    s = bt.summary({"ctas": out["ctas"], "tensor_clocks": 500.0})
    assert s["tensor_share"] == 0.5
    assert "| wait Q |" in bt.table({"summary": s})


def test_tensor_clocks_by_flop_count():
    assert bt.tensor_clocks(25, 64) == 1280  # 5 GEMMs of 2 * 64 * 128 * 64 FLOP
    assert bt.tensor_clocks(23, 128) == 3200  # 80-row blocks at d = 128
    assert bt.kind(23) == "ws80-dqfirst" and bt.kind(13) == "ws80" and bt.kind(25) == "ws"


def test_the_hand_off_ends_at_the_last_arrival():
    """bar.sync's clock read issues before the barrier resolves: a consumer's own stamp
    after it is its arrival, and the release is the later consumer's."""
    raw = _stamps(1000, 12, lag=0)
    rel = bt.relative(raw)
    for w in (8, 9, 10, 11):  # consumer 1 reaches the barrier 300 later in block 5
        rel[0, w, 5, 10] += 300
        rel[0, w, 5, 11] += 300
    out = bt.released(rel)
    assert (out[0, 4:12, 5, 11] == rel[0, 8, 5, 11]).all()
    assert (out[0, 4:12, 4, 11] == rel[0, 4, 4, 11]).all()
    (cta,) = bt.reduce(rel, [12, 0, 0, 0], bt.ORDERS["ws"], skip=5)["ctas"]
    assert cta["blocks"] == 12
    # block 5 alone is steady with skip 5 and 12 blocks: blocks 5 and 6
    assert cta["handoff"]["wait"]["consumer 0"] == (310 + 10) / 2
