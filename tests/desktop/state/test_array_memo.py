"""scene.array_memo: a result is reused only for the very arrays it was made from, and an
entry goes when one of them is gone (ids are reused after an array dies)."""

from __future__ import annotations

import gc

import numpy as np

from desktop.scene import render
from desktop.scene.array_memo import ArrayMemo
from desktop.state.config import Config, build


def test_a_result_is_reused_for_the_same_arrays_only():
    memo, calls = ArrayMemo(4), []

    def make(x):
        calls.append(1)
        return x.sum()

    a, b = np.arange(3.0), np.arange(3.0)
    assert memo.get((a,), "sum", lambda: make(a)) == 3.0
    assert memo.get((a,), "sum", lambda: make(a)) == 3.0
    assert len(calls) == 1
    memo.get((b,), "sum", lambda: make(b))  # equal values, another array: made again
    memo.get((a,), "other", lambda: make(a))  # another function of a
    assert len(calls) == 3


def test_an_entry_dies_with_its_array_and_a_reused_id_is_not_a_hit():
    memo = ArrayMemo(8)
    a = np.ones(4)
    memo.get((a,), "f", lambda: "from a")
    del a
    gc.collect()
    b = np.zeros(4)
    assert memo.get((b,), "f", lambda: "from b") == "from b"
    assert len(memo._entries) == 1  # a's entry went with a
    # An id reused before the dead array's entry was purged: the entry's array is
    # another one, so it is not a hit (forged: c's id on an entry made from d).
    c, d = np.zeros(4), np.zeros(4)
    memo.get((d,), "f", lambda: "from d")
    memo._entries[((id(c),), "f")] = memo._entries.pop(((id(d),), "f"))
    assert memo.get((c,), "f", lambda: "from c") == "from c"


def test_the_least_recently_used_entry_goes_first():
    memo = ArrayMemo(2)
    xs = [np.full(2, float(k)) for k in range(3)]
    for x in xs[:2]:
        memo.get((x,), "f", lambda x=x: float(x[0]))
    memo.get((xs[0],), "f", lambda: -1.0)  # a hit: xs[0] becomes the newest
    memo.get((xs[2],), "f", lambda: 2.0)  # evicts xs[1]
    assert list(memo._entries) == [((id(xs[0]),), "f"), ((id(xs[2]),), "f")]
    assert memo.get((xs[0],), "f", lambda: -2.0) == 0.0


def test_a_blocks_change_reuses_the_heatmaps_it_shares_and_equals_a_fresh_preparation():
    c = Config(n=300, d=4, dv=3, block_q=16, block_k=32, input="random", seed=8)
    _, first = build(c)
    a = render.prepare_images(first)
    _, other = build(c.replace(block_q=8, block_k=8))
    b = render.prepare_images(other)
    for name in ("Q", "K", "V", "S", "P", "O"):
        assert b.lanes["dense"][name].rgba is a.lanes["dense"][name].rgba  # shared, not remade
    render._MEMO.clear()
    fresh = render.prepare_images(other)
    for lane in ("dense", "tiled"):
        for name, img in b.lanes[lane].items():
            np.testing.assert_array_equal(img.rgba, fresh.lanes[lane][name].rgba, f"{lane} {name}")
            if img.first_write is not None:
                np.testing.assert_array_equal(img.first_write, fresh.lanes[lane][name].first_write)
