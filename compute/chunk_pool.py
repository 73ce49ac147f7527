"""Row chunks of a pass over S on two threads, their results taken in order.

A pass over S (compute.full_pass, compute.backward_numbers) is a loop over row chunks
whose products (QKᵀ, exp, PV, the block sums) are NumPy calls that release the GIL, so
two chunks run at once on two cores. Whatever a pass adds up across chunks (dK, dV, the
samples) is added by the caller in chunk order, as the one-thread loop did: the digits
do not depend on which thread ran a chunk or which finished first.

Each pass starts its own two threads and ends them. At most `threads` chunks are in
flight: memory is that many chunks' arrays, as the memory estimate (desktop.state.config)
counts them. `check` runs before each chunk is started (compute.numbers.Cancelled abandons
the pass); chunks already running finish before the exception leaves, so no thread writes
into a pass that was given up. (The desktop app runs with one malloc arena,
desktop/__init__: with one per chunk thread the freed chunks' memory stayed in each, and
the peak grew by tens of MB.)
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")

CHUNK_THREADS = max(1, min(2, os.cpu_count() or 1))  # the "both cores"


def ordered_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    check: Callable[[], None] | None = None,
    threads: int = CHUNK_THREADS,
) -> Iterator[R]:
    """fn(item) for each item, run on up to `threads` threads, yielded in item order."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        for item in items:
            if check is not None:
                check()
            yield fn(item)
        return
    errors = np.geterr()  # the caller's np.errstate holds in the chunks' threads too

    def run(item: T) -> R:
        with np.errstate(**errors):
            return fn(item)

    # A pool per pass: its threads end with it (a window closed leaves none behind), and
    # starting two threads costs well under a chunk's time.
    with ThreadPoolExecutor(threads, thread_name_prefix="chunk") as pool:
        yield from _in_order(pool, run, items, check, threads)


def run_all(jobs: Sequence[Callable[[], R]], threads: int = CHUNK_THREADS) -> list[R]:
    """Each job() on up to `threads` threads, each started as soon as a thread is free
    (not when the one before it is consumed, as ordered_map's chunks are), the results
    in job order. An error is raised once every job has ended: none runs on after."""
    if threads <= 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    errors = np.geterr()

    def run(job: Callable[[], R]) -> R:
        with np.errstate(**errors):
            return job()

    with ThreadPoolExecutor(min(threads, len(jobs)), thread_name_prefix="chunk") as pool:
        futures = [pool.submit(run, job) for job in jobs]
        for future in futures:  # every job ended before the first error is raised
            future.exception()
        return [future.result() for future in futures]


def _in_order(
    pool: ThreadPoolExecutor,
    run: Callable[[T], R],
    items: list[T],
    check: Callable[[], None] | None,
    threads: int,
) -> Iterator[R]:
    running: deque[Future] = deque()
    pending = iter(items)
    try:
        for item in pending:
            if check is not None:
                check()
            running.append(pool.submit(run, item))
            if len(running) >= threads:
                break
        while running:
            result = running.popleft().result()
            for item in pending:  # keep `threads` in flight while this one is consumed
                if check is not None:
                    check()
                running.append(pool.submit(run, item))
                break
            yield result
    finally:
        for future in running:  # cancelled or failed: let the running chunks finish
            if not future.cancel():
                future.exception()
