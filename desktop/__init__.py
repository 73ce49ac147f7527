"""FlashAttention Explorer's desktop side: the Qt app, exports and the command line.

This package's __init__ and `cli` import no Qt, so `flash-explorer ledger` and
`flash-explorer bench` run on a GPU server with no display and no PySide6.

Importing it (every `flash-explorer` command does, before NumPy loads) leaves one core to
the GUI thread: NumPy's BLAS gets one thread fewer than the cores this process may use,
unless the user has chosen a count. On a two-core laptop a second BLAS thread competes
with the event loop and the worker's own chunks; the count is fixed for the whole
process because a product's last digit depends on it (cached and fresh numbers agree).
It also keeps the process's threads on one malloc arena (see _one_malloc_arena).
"""

import os
import sys

_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _leave_a_core_for_the_gui() -> None:
    if any(name in os.environ for name in _BLAS_THREAD_VARIABLES):
        return
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        cores = os.cpu_count() or 1
    os.environ["OPENBLAS_NUM_THREADS"] = str(max(1, cores - 1))


_leave_a_core_for_the_gui()

# glibc's mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
MMAP_THRESHOLD = 32 << 20  # glibc's largest (64-bit): a pass's 4 MB chunks stay on the heap
TRIM_THRESHOLD = 128 << 20  # free heap kept for the next pass, not handed back each time


def _one_malloc_arena() -> None:
    """All threads allocate from one glibc arena, and a pass's chunk arrays reuse the
    heap. A pass over S runs its chunks on two threads (compute.chunk_pool); with an
    arena each, the memory their freed chunks left in each arena stayed with the
    process, and the peak RSS a window or an export reached grew by 25-50 MB beyond its
    estimate (tests/faults/test_budgets). And each chunk's S, P (4 MB each) was a fresh
    mapping whose pages the kernel faulted in and zeroed: a quarter of a pass's CPU time
    at N = 1024 (glibc's sliding threshold mapped them again whenever a free handed the
    heap's top back). Set before any thread starts (Qt's and the worker's too); elsewhere
    nothing to do."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_ARENA_MAX, 1)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    except (OSError, AttributeError):
        pass  # not glibc (musl keeps one arena anyway)


_one_malloc_arena()


def version() -> str:
    """The installed package's version (what a bug report should quote)."""
    from importlib import metadata

    try:
        return metadata.version("flash-attention-explorer")
    except metadata.PackageNotFoundError:
        return "(not installed)"
