"""What the two halves of the harness share: which paths take a problem, and the row a
measured path becomes.

The forward's paths (bench.py) are timed together, interleaved; the backward's
(bench_backward.py) alone. Both refuse a problem a path cannot run with `path_refusal`'s
sentence and make their rows here, so neither harness module imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .dtypes import FLASH_DTYPES, KERNEL_DTYPES
from .flash import SUPPORTED_HEAD_DIMS
from .peers import FA4, PEERS
from .timing import Timing


def path_refusal(kernel: str, dtype: str, d: int, d_v: int) -> str | None:
    """Why path `kernel` ('tiled', 'dense', 'flash', 'flash[spec]' or a peer) cannot run a
    problem of this dtype and head sizes, as one sentence; None if it can."""
    if kernel in ("tiled", "dense") and dtype not in KERNEL_DTYPES:
        return f"the {kernel} path takes {' or '.join(KERNEL_DTYPES)}, not {dtype}"
    if kernel == "flash" or kernel.startswith("flash["):
        if d != d_v or d not in SUPPORTED_HEAD_DIMS:
            dims = " or ".join(map(str, SUPPORTED_HEAD_DIMS))
            return f"the flash kernel takes d = d_v = {dims}, not d = {d}, d_v = {d_v}"
        if dtype not in FLASH_DTYPES:
            return f"the flash kernel takes {' or '.join(FLASH_DTYPES)}, not {dtype}"
    if kernel in PEERS and dtype not in FLASH_DTYPES:
        return f"SDPA is compared in {' or '.join(FLASH_DTYPES)}, not {dtype}"
    if kernel == FA4 and dtype not in FLASH_DTYPES:
        return f"FA4 is compared in {' or '.join(FLASH_DTYPES)}, not {dtype}"
    if kernel == FA4 and d != d_v:
        return f"FA4 is compared at d = d_v, not d = {d}, d_v = {d_v}"
    return None


@dataclass
class PendingRow:
    """A path measured for error and peak memory, its timing still to come (the forward's
    paths of a case are then timed together, interleaved: timing.time_interleaved; the
    backward's rows, bench_backward, are timed alone), and finish_row makes its row."""

    kernel: str
    fn: Callable
    lane: object  # its ledger lane, or None
    extra: dict
    errs: dict[str, float]
    peak: int
    out_bytes: int
    after: dict = field(default_factory=dict)  # fields that follow the timing in the row


def finish_row(cfg: Any, p: PendingRow, timing: Timing) -> dict:
    """The report row of a pending path, given its timing (cfg: a bench.BenchConfig)."""
    ms = timing.median_ms
    ledger_bytes = None if p.lane is None else p.lane.total_bytes * cfg.batch_heads
    return {
        "kernel": p.kernel,
        **p.extra,
        "ms": ms,
        "ms_min": timing.min_ms,
        "ms_max": timing.max_ms,
        "runs": len(timing.times_ms),
        "tflops": cfg.flops() / (ms * 1e-3) / 1e12,
        "ledger_elements": None if p.lane is None else p.lane.total_elements * cfg.batch_heads,
        "ledger_bytes": ledger_bytes,
        "ledger_gbs": None if ledger_bytes is None else ledger_bytes / (ms * 1e-3) / 1e9,
        "peak_bytes": p.peak,
        "output_bytes": p.out_bytes,
        "extra_bytes": max(p.peak - p.out_bytes, 0),
        "max_abs_err": p.errs["max_abs"],
        "rel_err": p.errs["rel"],
        **p.after,
    }
