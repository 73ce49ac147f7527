"""What the NumPy benchmark scripts (bench_core, bench_backward) share: wall-clock runs of
a call, the machine they ran on, and writing the result as JSON.

Benchmarks print and record times; nothing here (or in the tests) asserts on them.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def timed_runs(fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds each of `repeats` calls of fn took (the caller picks the figure it reports)."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return runs


def machine() -> dict[str, str]:
    """The Python, NumPy and processor a result was measured with."""
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "processor": platform.machine(),
    }


def write_json(path: Path | None, result: dict) -> None:
    """Write `result` to `path` (folders made as needed); nothing when path is None."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
