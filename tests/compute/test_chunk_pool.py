"""Chunks of a pass on two threads: results in order, the same digits as one thread,
cancellation that leaves no chunk running, the caller's np.errstate honoured."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import compute.backward_numbers as bn
import compute.chunk_pool as chunk_pool
import compute.full_pass as fp
from compute.backward_numbers import tiled_backward
from compute.chunk_pool import ordered_map
from compute.numbers import Cancelled


def test_results_come_in_item_order_whichever_finishes_first():
    def slow_first(i: int) -> int:
        time.sleep(0.02 if i % 2 == 0 else 0.0)
        return i * i

    assert list(ordered_map(slow_first, range(9), threads=2)) == [i * i for i in range(9)]


def test_no_more_than_threads_chunks_run_at_once():
    running, peak, lock = [0], [0], threading.Lock()

    def work(_i: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.005)
        with lock:
            running[0] -= 1

    list(ordered_map(work, range(12), threads=2))
    assert peak[0] == 2


def test_a_cancelled_pass_leaves_no_chunk_running():
    started, finished = [], []
    calls = [0]

    def check() -> None:
        calls[0] += 1
        if calls[0] > 3:
            raise Cancelled

    def work(i: int) -> int:
        started.append(i)
        time.sleep(0.01)
        finished.append(i)
        return i

    with pytest.raises(Cancelled):
        list(ordered_map(work, range(20), check=check, threads=2))
    assert sorted(started) == sorted(finished)  # nothing still writing after the raise
    assert len(started) <= 4


def test_the_callers_errstate_holds_in_the_chunk_threads():
    def overflow(_i: int) -> float:
        return float(np.exp(np.float64(1000.0)))

    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        list(ordered_map(overflow, range(4), threads=2))
    with np.errstate(over="ignore"):
        assert list(ordered_map(overflow, range(4), threads=2)) == [np.inf] * 4


def test_run_all_starts_a_job_as_soon_as_a_thread_is_free():
    """ordered_map would wait for the slow first job's result before starting the third;
    run_all starts it on the thread the quick second one left."""
    ended, third_started = threading.Event(), []

    def slow() -> str:
        time.sleep(0.1)
        ended.set()
        return "slow"

    def third() -> str:
        third_started.append(ended.is_set())
        return "third"

    jobs = [slow, lambda: "quick", third]
    assert chunk_pool.run_all(jobs, threads=2) == ["slow", "quick", "third"]
    assert third_started == [False]


def test_run_all_raises_only_once_every_job_has_ended():
    finished = []

    def fail() -> None:
        raise ValueError("first")

    def slow() -> None:
        time.sleep(0.05)
        finished.append("slow")

    with pytest.raises(ValueError, match="first"):
        chunk_pool.run_all([fail, slow], threads=2)
    assert finished == ["slow"]  # nothing still running when the error left


def test_run_all_holds_the_callers_errstate_and_runs_inline_on_one_thread():
    def overflow() -> tuple[float, str]:
        return float(np.exp(np.float64(1000.0))), threading.current_thread().name

    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        chunk_pool.run_all([overflow, overflow], threads=2)
    with np.errstate(over="ignore"):
        (value, name), _ = chunk_pool.run_all([overflow, overflow], threads=2)
        assert value == np.inf and name.startswith("chunk")
        (_, name), _ = chunk_pool.run_all([overflow, overflow], threads=1)
        assert name == threading.current_thread().name


def _inputs(seed: int, n_q: int, n_k: int, d: int):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, d)) for n in (n_q, n_k, n_k))
    return q, k, v, rng.standard_normal((n_q, d))


@pytest.mark.parametrize("causal", [False, True])
def test_two_threads_give_one_threads_digits(monkeypatch, causal):
    """The dense pass (forward, backward, the float64 tiled lane) and the narrow tiled
    backward: bit for bit the same with the chunks on two threads as on one, however
    many chunks (sums over chunks are added in chunk order)."""
    from compute import build_trace

    q, k, v, do = _inputs(3, 97, 131, 8)
    monkeypatch.setattr(fp, "CHUNK_ELEMENTS", 131 * 5)  # many chunks of a few rows
    runs = []
    for threads in (1, 2):
        monkeypatch.setattr(chunk_pool, "CHUNK_THREADS", threads)
        real = chunk_pool.ordered_map
        monkeypatch.setattr(
            fp, "ordered_map", lambda f, it, c=None, _t=threads, _r=real: _r(f, it, c, _t)
        )
        dense = fp.dense_pass(q, k, v, causal=causal, scale=0.3, cap=16, do=do, tiled64=True)
        s = build_trace(q, k, v, block_q=16, block_k=24, causal=causal).schedule
        tiled = fp.tiled_pass(q, k, v, s, scale=0.3, dtype="float16")
        runs.append((dense, tiled))
    (d1, t1), (d2, t2) = runs
    pairs = [
        (d1.reference, d2.reference),
        (d1.row_sum, d2.row_sum),
        (d1.scores_small.values, d2.scores_small.values),
        (d1.probs_sample, d2.probs_sample),
        (d1.tiled64.tiled_output, d2.tiled64.tiled_output),
        (t1.tiled_output, t2.tiled_output),
        *zip(d1.backward.gradients, d2.backward.gradients, strict=True),
        *zip(d1.backward.tiled64, d2.backward.tiled64, strict=True),
        (d1.backward.ds_small.values, d2.backward.ds_small.values),
    ]
    for k, (a, b) in enumerate(pairs):
        assert a.tobytes() == b.tobytes(), k


def test_the_narrow_tiled_backward_is_the_same_on_two_threads(monkeypatch):
    from compute import build_trace

    q, k, v, do = _inputs(5, 70, 90, 8)
    monkeypatch.setattr(fp, "CHUNK_ELEMENTS", 90 * 3)
    grads = []
    for threads in (1, 2):
        trace = build_trace(
            q, k, v, block_q=16, block_k=32, dtype="bfloat16", do=do, pass_name="backward"
        )
        ops = trace.backward._operands()
        real = chunk_pool.ordered_map
        monkeypatch.setattr(
            bn, "ordered_map", lambda f, it, c=None, _t=threads, _r=real: _r(f, it, c, _t)
        )
        grads.append(tiled_backward(ops, trace.schedule, trace.scale, trace.dtype))
    for a, b in zip(*grads, strict=True):
        assert a.tobytes() == b.tobytes()
