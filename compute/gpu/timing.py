"""The one timer of every GPU measurement: CUDA events, warm-up, L2 flushed, median.

Inputs are rotated over enough copies to exceed several times the L2 cache (60 MB on an
H200), and before each timed run a scratch buffer twice the L2's size is overwritten
(outside the events), so no run finds its inputs in cache. Warm-up runs come first so
module loading, run-time compilation and cuBLAS / cuDNN handle creation stay out of the
numbers. Events are recorded on the legacy default stream, which torch's default stream
also is, so the peers (torch SDPA) are timed by the same code.
Also: the peak device memory of one call.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """Per-run milliseconds from CUDA events, and their median."""

    times_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def min_ms(self) -> float:
        return min(self.times_ms)

    @property
    def max_ms(self) -> float:
        return max(self.times_ms)


def rotation_count(bytes_per_set: int, l2_bytes: int, *, cap: int = 16) -> int:
    """How many input copies to rotate so consecutive runs don't find inputs in L2."""
    target = 4 * max(l2_bytes, 1)
    return max(2, min(cap, math.ceil(target / max(bytes_per_set, 1))))


def time_cuda(
    fn: Callable[..., Any],
    arg_sets: Sequence[Sequence[Any]],
    *,
    warmup: int = 3,
    repeats: int = 20,
    l2_bytes: int = 0,
) -> Timing:
    """Event timings of fn(*arg_sets[i % len]) over `repeats` runs, L2 flushed before each."""
    import cupy

    n = len(arg_sets)
    for i in range(warmup):
        fn(*arg_sets[i % n])
    scratch = cupy.empty(max(2 * l2_bytes, 1) // 4, dtype=cupy.int32) if l2_bytes else None
    starts = [cupy.cuda.Event() for _ in range(repeats)]
    ends = [cupy.cuda.Event() for _ in range(repeats)]
    for i in range(repeats):
        if scratch is not None:
            scratch.fill(i)  # evict the last run's lines from L2; not inside the events
        starts[i].record()
        fn(*arg_sets[(warmup + i) % n])
        ends[i].record()
    ends[-1].synchronize()
    times = tuple(cupy.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends, strict=True))
    return Timing(times)


def peak_pool_bytes(fn: Callable[[], Any]) -> tuple[int, int]:
    """(peak bytes allocated during fn(), bytes of what it returned), via a fresh pool.

    A CuPy MemoryPool keeps freed blocks and reuses them, so the bytes it holds after
    the call are the call's high-water mark (rounded to the pool's 512-byte units).
    """
    import cupy

    # Blocks the default pool still caches from earlier runs would otherwise sit beside
    # this measurement's own (twice S and P for the dense path at N = 16384).
    cupy.get_default_memory_pool().free_all_blocks()
    pool = cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(pool.malloc):
        out = fn()
        cupy.cuda.Device().synchronize()
        peak = pool.total_bytes()
        arrays = out if isinstance(out, tuple | list) else (out,)
        out_bytes = sum(int(a.nbytes) for a in arrays if hasattr(a, "nbytes"))
        del out, arrays
    pool.free_all_blocks()
    return int(peak), out_bytes
