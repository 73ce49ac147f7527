"""FlashAttention Explorer's desktop side: the Qt app, exports and the command line.

This package's __init__ and `cli` import no Qt, so `flash-explorer ledger` and
`flash-explorer bench` run on a GPU server with no display and no PySide6.

Importing it (every `flash-explorer` command does, before NumPy loads) leaves one core to
the GUI thread: NumPy's BLAS gets one thread fewer than the cores this process may use,
unless the user has chosen a count. On a two-core laptop a second BLAS thread competes
with the event loop and the worker's own chunks; the count is fixed for the whole
process because a product's last digit depends on it (cached and fresh numbers agree).
"""

import os

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


def version() -> str:
    """The installed package's version (what a bug report should quote)."""
    from importlib import metadata

    try:
        return metadata.version("flash-attention-explorer")
    except metadata.PackageNotFoundError:
        return "(not installed)"
