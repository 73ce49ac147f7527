"""Where a decode schedule sits on the H200's roofline: bound time and which bound applies.

A step that moves B bytes and does F matmul FLOPs takes at least max(B / bandwidth,
F / peak). Its arithmetic intensity F / B against the ridge peak / bandwidth says which
bound applies: decode's intensity is about 2 · G · N_q FLOPs per K/V element (at most a
few hundred), so with few new tokens it sits far left of the ridge, memory-bound.
The constants are the H200's: 4.8 TB/s nominal HBM bandwidth, 4.3 TB/s measured
device-to-device copy and 790 TFLOP/s measured bf16 dense matmul (the floors of
compute/gpu/FLASH_NOTES.md). The bound ignores parallelism: a schedule with
fewer blocks than SMs may not reach the bandwidth at all, which is what split-KV's
H_kv · S' blocks are for (`DecodeLedger.blocks` against `H200_SMS`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .ledger import DecodeLedger, closed_form_decode_ledger, decode_ledgers
from .problem import SCHEDULES, DecodeProblem

H200_NOMINAL_BANDWIDTH = 4.8e12  # bytes/s, the data sheet's HBM3e figure
H200_COPY_BANDWIDTH = 4.3e12  # bytes/s, measured device-to-device copy
H200_MATMUL_PEAK = 790e12  # FLOP/s, measured bf16 dense matmul on random data
H200_SMS = 132


@dataclass(frozen=True)
class RooflinePoint:
    """A step's bytes and FLOPs against one bandwidth and one peak."""

    bytes: int
    flops: int
    bandwidth: float
    peak: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte."""
        return self.flops / self.bytes

    @property
    def ridge(self) -> float:
        """The intensity where the two bounds meet: peak / bandwidth."""
        return self.peak / self.bandwidth

    @property
    def memory_time(self) -> float:
        """Seconds to move the bytes at the bandwidth."""
        return self.bytes / self.bandwidth

    @property
    def compute_time(self) -> float:
        """Seconds to do the FLOPs at the peak."""
        return self.flops / self.peak

    @property
    def time(self) -> float:
        """The roofline-bound time: the larger of the two."""
        return max(self.memory_time, self.compute_time)

    @property
    def bound(self) -> str:
        """ "memory" or "compute": which bound sets the time (memory on a tie)."""
        return "memory" if self.memory_time >= self.compute_time else "compute"

    @property
    def attainable(self) -> float:
        """FLOP/s the roofline allows: min(peak, intensity · bandwidth)."""
        return min(self.peak, self.intensity * self.bandwidth)

    def to_dict(self) -> dict:
        return {
            "bytes": self.bytes,
            "flops": self.flops,
            "bandwidth": self.bandwidth,
            "peak": self.peak,
            "intensity": self.intensity,
            "ridge": self.ridge,
            "memory_time_s": self.memory_time,
            "compute_time_s": self.compute_time,
            "time_s": self.time,
            "bound": self.bound,
        }


def roofline_point(
    n_bytes: int,
    flops: int,
    *,
    bandwidth: float = H200_COPY_BANDWIDTH,
    peak: float = H200_MATMUL_PEAK,
) -> RooflinePoint:
    """The roofline of `n_bytes` moved and `flops` done; one sentence on a bad argument."""
    if n_bytes < 1:
        raise ValueError(f"A roofline needs at least one byte moved, not {n_bytes}.")
    if flops < 0:
        raise ValueError(f"FLOPs cannot be negative, not {flops}.")
    if not (bandwidth > 0 and peak > 0):
        raise ValueError("Bandwidth and peak must be positive numbers.")
    return RooflinePoint(int(n_bytes), int(flops), float(bandwidth), float(peak))


def decode_roofline(
    ledger: DecodeLedger, *, bandwidth: float = H200_COPY_BANDWIDTH, peak: float = H200_MATMUL_PEAK
) -> RooflinePoint:
    """Where one schedule's decode step sits: its ledger's bytes and the step's FLOPs."""
    return roofline_point(ledger.total_bytes, ledger.flops, bandwidth=bandwidth, peak=peak)


def bandwidth_fraction(
    n_bytes: int, seconds: float, *, ceiling: float = H200_COPY_BANDWIDTH
) -> float:
    """Achieved bandwidth (bytes moved over a measured time) as a fraction of `ceiling`."""
    if not seconds > 0:
        raise ValueError(f"A measured time must be a positive number of seconds, not {seconds}.")
    return n_bytes / seconds / ceiling


def decode_summary(
    problem: DecodeProblem,
    *,
    bandwidth: float = H200_COPY_BANDWIDTH,
    peak: float = H200_MATMUL_PEAK,
    closed_form: bool = False,
) -> dict:
    """Every schedule's ledger and roofline for one decode step, as plain data (JSON-ready).
    With closed_form the ledgers come from the formulas (held equal to the counted walk by
    the tests) in constant time, for caches too long to walk tile by tile."""
    config = asdict(problem) | {
        "group": problem.group,
        "t_c": problem.t_c,
        "splits_used": problem.splits_used,
    }
    ledgers = (
        {name: closed_form_decode_ledger(problem, name) for name in SCHEDULES}
        if closed_form
        else decode_ledgers(problem)
    )
    schedules = {
        name: led.to_dict()
        | {"roofline": decode_roofline(led, bandwidth=bandwidth, peak=peak).to_dict()}
        for name, led in ledgers.items()
    }
    machine = {"bandwidth": bandwidth, "peak": peak, "sms": H200_SMS}
    return {"config": config, "machine": machine, "schedules": schedules}


def filling_splits(h_kv: int, t_c: int, *, sms: int = H200_SMS, waves: int = 2) -> int:
    """Splits per K/V head so that H_kv · S >= waves · SMs (one-pass launches only H_kv
    blocks), capped at the T_c tiles a split needs at least one of."""
    if min(h_kv, t_c, sms, waves) < 1:
        raise ValueError("Heads, tiles, SMs and waves must be whole numbers of at least 1.")
    return max(1, min(t_c, math.ceil(waves * sms / h_kv)))
