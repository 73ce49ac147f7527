"""The one timer of every GPU measurement: CUDA events, warm-up, L2 flushed, median.

Inputs are rotated over enough copies to exceed several times the L2 cache (60 MB on an
H200), and before each timed run a scratch buffer twice the L2's size is overwritten
(outside the events), so no run finds its inputs in cache. Warm-up runs come first so
module loading, run-time compilation and cuBLAS / cuDNN handle creation stay out of the
numbers. Events are recorded on the legacy default stream, which torch's default stream
also is, so the peers (torch SDPA) are timed by the same code.
Several contenders are compared with `time_interleaved`: each one's repeats split into
rounds, the paths alternating round by round with the order rotated each round, so no path
always runs first or last in a case (position alone moves a path: FLASH_NOTES.md v6-v7). The H200 runs these kernels
at its 700 W power cap: within about a second of sustained load its SM clock falls from
1980 MHz to 1450-1700 (FLASH_NOTES.md v7), so `preheat` first runs the paths untimed for a
set time and every path is then timed at the clock it keeps under sustained load. At that
cap the clock follows the power of what ran just before, so a path timed right after a
lighter one (FA2 draws less) starts its slice at a higher clock: `settle_s` runs each path
untimed on its own before each of its slices, so every slice is timed at the clock that
path itself holds (FLASH_NOTES.md v9).
Also: the peak device memory of one call.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
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


ROUNDS = 3  # interleaved rounds per path in time_interleaved (repeats split between them)


def interleaved_order(names: Sequence[str], rounds: int) -> list[list[str]]:
    """The path order of each round: round r starts r places further along the list."""
    n = len(names)
    return [[names[(r + i) % n] for i in range(n)] for r in range(rounds)] if n else []


def _device_sync() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def preheat(
    paths: Mapping[str, tuple[Callable[..., Any], Sequence[Sequence[Any]]]],
    seconds: float,
    *,
    sync: Callable[[], None] = _device_sync,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """Run every path in turn, untimed, until `seconds` of wall time have passed (the GPU
    synchronised after each pass), so the power governor has settled on the clock it holds
    under sustained load before anything is timed. Returns the number of passes."""
    end = clock() + seconds
    passes = 0
    while paths and (passes == 0 or clock() < end):
        for fn, arg_sets in paths.values():
            fn(*arg_sets[passes % len(arg_sets)])
        sync()
        passes += 1
    return passes


def time_interleaved(
    paths: Mapping[str, tuple[Callable[..., Any], Sequence[Sequence[Any]]]],
    *,
    warmup: int = 3,
    repeats: int = 20,
    rounds: int = ROUNDS,
    l2_bytes: int = 0,
    preheat_s: float = 0.0,
    settle_s: float = 0.0,
    timer: Callable[..., Timing] | None = None,
    heater: Callable[..., int] = preheat,
) -> dict[str, Timing]:
    """time_cuda of every path {name: (fn, arg_sets)}, in `rounds` rounds of about
    repeats / rounds runs each (the full warm-up in a path's first round, one run later),
    paths alternating round by round in interleaved_order; one Timing per path over all
    its rounds. With preheat_s > 0 the paths first run untimed for that long (`preheat`);
    with settle_s > 0 each slice is preceded by settle_s of its own path's untimed runs.
    `timer` and `heater` stand in for time_cuda and preheat (CPU tests)."""
    timer = timer or time_cuda
    if preheat_s > 0:
        heater(paths, preheat_s)
    rounds = max(1, min(rounds, repeats))
    per_round = [repeats // rounds + (1 if r < repeats % rounds else 0) for r in range(rounds)]
    times: dict[str, list[float]] = {name: [] for name in paths}
    for r, order in enumerate(interleaved_order(list(paths), rounds)):
        for name in order:
            fn, arg_sets = paths[name]
            if settle_s > 0:
                heater({name: paths[name]}, settle_s)
            t = timer(fn, arg_sets, warmup=warmup if r == 0 else 1, repeats=per_round[r],
                      l2_bytes=l2_bytes)  # fmt: skip
            times[name].extend(t.times_ms)
    return {name: Timing(tuple(ts)) for name, ts in times.items()}


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
