"""A memo shared by the GUI thread and the prefetcher: one making, the same value."""

from __future__ import annotations

import threading

import pytest

from compute.forward_numbers import Memo, made_ahead


def test_an_entry_being_made_ahead_is_waited_for_not_made_twice():
    memo, started, release = Memo(), threading.Event(), threading.Event()
    calls: list[str] = []

    def slow():
        calls.append("ahead")
        started.set()
        release.wait(5)
        return object()

    got = {}

    def ahead():
        with made_ahead():
            got["ahead"] = memo._memo("blocks", 4, 7, slow)

    t = threading.Thread(target=ahead)
    t.start()
    assert started.wait(5)
    asker = threading.Thread(target=lambda: got.update(view=memo._memo("blocks", 4, 7, list)))
    asker.start()
    asker.join(0.2)
    assert asker.is_alive()  # waiting for the prefetcher's value, not making its own
    release.set()
    t.join(5)
    asker.join(5)
    assert calls == ["ahead"] and got["view"] is got["ahead"]
    assert memo._held() == {("blocks", 7)}


def test_a_failed_ahead_entry_is_made_by_the_thread_that_asks():
    memo, started, release = Memo(), threading.Event(), threading.Event()

    def fails():
        started.set()
        release.wait(5)
        raise MemoryError

    def ahead():
        with made_ahead(), pytest.raises(MemoryError):
            memo._memo("blocks", 4, 1, fails)

    t = threading.Thread(target=ahead)
    t.start()
    assert started.wait(5)
    got = {}
    asker = threading.Thread(target=lambda: got.update(v=memo._memo("blocks", 4, 1, lambda: 42)))
    asker.start()
    release.set()
    t.join(5)
    asker.join(5)
    assert got["v"] == 42 and memo.cached("blocks") == 1


def test_outside_made_ahead_two_threads_never_wait_on_each_other():
    """A worker's long pass is not waited for: the GUI thread makes its own (the design
    of compute.numbers: a first-tier number never waits on a pass)."""
    memo, started, release = Memo(), threading.Event(), threading.Event()

    def long_pass():
        started.set()
        release.wait(5)
        return "worker"

    t = threading.Thread(target=lambda: memo._memo("summary", 2, 0, long_pass))
    t.start()
    assert started.wait(5)
    assert memo._memo("summary", 2, 0, lambda: "gui") == "gui"
    release.set()
    t.join(5)
    assert memo.cached("summary") == 1


def test_made_ahead_is_off_again_after_an_error():
    from compute import forward_numbers

    with pytest.raises(ValueError), made_ahead():
        raise ValueError
    assert not forward_numbers._AHEAD.on
