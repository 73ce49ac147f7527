"""The HBM transfer ledger: element counts per tensor and direction for both lanes.

`ledger` counts the schedule's actions (the very actions the trace animates);
`closed_form_ledger` computes the same numbers from formulas, and the tests hold the
two equal for every configuration. Also here: the paper's block-size rule from SRAM
capacity M and Theorem 2's HBM-access bound, so the GUI can plot ledgers against it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from .attention import DTYPE_BYTES, DTYPES
from .schedule import DIRECTIONS, LANES, STAT_TENSORS, TENSORS, Action, Schedule, lane_actions

Counts = Mapping[str, Mapping[str, int]]

# Per-row statistics live in float32 (float64 for float64): the forward's m, ℓ, L and the
# backward's D = rowsum(dO ∘ O).
STATISTICS = STAT_TENSORS | {"D"}


def element_bytes(tensor: str, dtype: str) -> int:
    """Bytes per element in HBM: tensors in the input dtype, statistics in float32 (float64)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}.")
    if tensor in STATISTICS:
        return 8 if dtype == "float64" else 4
    return DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class LaneLedger:
    """One lane's transfers: counts[tensor][direction] in elements, plus SRAM working set."""

    lane: str
    counts: Counts
    dtype: str
    sram_elements: int
    sram_capacity: int | None

    @property
    def total_elements(self) -> int:
        return sum(c[d] for c in self.counts.values() for d in DIRECTIONS)

    @property
    def total_bytes(self) -> int:
        return sum(
            element_bytes(t, self.dtype) * c[d] for t, c in self.counts.items() for d in DIRECTIONS
        )

    @property
    def fits(self) -> bool | None:
        """Whether the working set fits in SRAM capacity M (None when M is not given)."""
        return None if self.sram_capacity is None else self.sram_elements <= self.sram_capacity

    def to_dict(self) -> dict:
        return {
            "total_elements": self.total_elements,
            "total_bytes": self.total_bytes,
            # Every tensor the counts list (the forward's TENSORS; a backward adds dO, dQ, ...).
            "by_tensor": {t: dict(c) for t, c in self.counts.items()},
            "sram_elements": self.sram_elements,
            "fits_sram": self.fits,
        }


@dataclass(frozen=True)
class Ledger:
    """Both lanes' ledgers for one schedule and dtype."""

    schedule: Schedule
    dtype: str
    lanes: Mapping[str, LaneLedger]
    sram_capacity: int | None = None

    @property
    def ratio(self) -> float:
        """Dense over tiled total transfers."""
        return self.lanes["dense"].total_elements / self.lanes["tiled"].total_elements

    def config(self) -> dict:
        s = self.schedule
        return {
            "n_q": s.n_q,
            "n_k": s.n_k,
            "d": s.d,
            "d_v": s.d_v,
            "block_q": s.block_q,
            "block_k": s.block_k,
            "order": s.order,
            "causal": s.causal,
            "save_lse": s.save_lse,
            "dtype": self.dtype,
            "sram_capacity": self.sram_capacity,
        }

    def to_dict(self) -> dict:
        return {
            "config": self.config(),
            "lanes": {name: lane.to_dict() for name, lane in self.lanes.items()},
            "ratio_dense_over_tiled": self.ratio,
        }


def freeze_counts(counts: Mapping[str, Mapping[str, int]]) -> Counts:
    """Read-only per-tensor, per-direction counts."""
    return MappingProxyType({t: MappingProxyType(dict(counts[t])) for t in TENSORS})


def _empty() -> dict[str, dict[str, int]]:
    return {t: dict.fromkeys(DIRECTIONS, 0) for t in TENSORS}


def count_actions(actions: Iterable[Action | None]) -> Counts:
    """Sum the elements every action moves, per tensor and direction."""
    counts = _empty()
    for action in actions:
        if action is None:
            continue
        for transfer in action.transfers:
            counts[transfer.tensor][transfer.direction] += transfer.elements
    return freeze_counts(counts)


def check_ledger_args(dtype: str, sram_capacity: int | None) -> None:
    """The dtype and SRAM capacity checks every ledger makes, one sentence each."""
    element_bytes("Q", dtype)
    if sram_capacity is not None and sram_capacity < 1:
        raise ValueError("SRAM capacity must be at least 1 element.")


def make_ledger(
    schedule: Schedule, lane_counts: Mapping[str, Counts], dtype: str, sram_capacity: int | None
) -> Ledger:
    """Wrap per-lane counts into a Ledger (validates dtype and capacity)."""
    check_ledger_args(dtype, sram_capacity)
    lanes = {
        lane: LaneLedger(
            lane, lane_counts[lane], dtype, schedule.sram_elements(lane), sram_capacity
        )
        for lane in LANES
    }
    return Ledger(schedule, dtype, MappingProxyType(lanes), sram_capacity)


def ledger(
    n_q: int,
    n_k: int,
    d: int,
    d_v: int,
    *,
    block_q: int,
    block_k: int,
    order: str = "q-outer",
    causal: bool = False,
    save_lse: bool = False,
    dtype: str = "float64",
    sram_capacity: int | None = None,
) -> Ledger:
    """Count both lanes' HBM transfers by walking the declared schedule, action by action."""
    s = Schedule(n_q, n_k, d, d_v, block_q, block_k, order, causal, save_lse)
    counts = {lane: count_actions(lane_actions(s, lane)) for lane in LANES}
    return make_ledger(s, counts, dtype, sram_capacity)


def _visible_keys_per_block(s: Schedule) -> np.ndarray:
    """Keys in the tiles each query block loads (tail tiles count their real size)."""
    if not s.causal:
        return np.full(s.t_r, s.n_k)
    last_row = np.minimum((np.arange(s.t_r) + 1) * s.block_q, s.n_q) - 1
    last_visible_key = last_row + (s.n_k - s.n_q)
    # Tiles whose first key is <= the last visible key: floor(last/B_c) + 1, clamped.
    tiles = np.clip(np.floor_divide(last_visible_key, s.block_k) + 1, 0, s.t_c)
    return np.minimum(tiles * s.block_k, s.n_k)


def visited_rows(s: Schedule) -> int:
    """Σ over visits (query block i, key tile j it sees) of block i's rows, from formulas."""
    first_row = np.arange(s.t_r) * s.block_q
    block_rows = np.minimum(first_row + s.block_q, s.n_q) - first_row
    if not s.causal:
        return int(block_rows.sum()) * s.t_c
    # Block i sees tiles 0 .. ⌊(last row + N_k − N_q) / B_c⌋ (bottom-right alignment), clamped.
    last_visible_key = first_row + block_rows - 1 + (s.n_k - s.n_q)
    tiles = np.clip(np.floor_divide(last_visible_key, s.block_k) + 1, 0, s.t_c)
    return int((tiles * block_rows).sum())


def closed_form_counts(s: Schedule) -> dict[str, Counts]:
    """Both lanes' counts from formulas, independent of the action generators."""
    dense, tiled = _empty(), _empty()
    dense["Q"]["read"] = s.n_q * s.d
    dense["K"]["read"] = s.t_r * s.n_k * s.d
    dense["V"]["read"] = s.t_r * s.n_k * s.d_v
    dense["O"]["write"] = s.n_q * s.d_v
    for t in ("S", "P"):
        dense[t]["read"] = dense[t]["write"] = s.n_q * s.n_k
    keys = _visible_keys_per_block(s)
    tiled["K"]["read"] = int(keys.sum()) * s.d
    tiled["V"]["read"] = int(keys.sum()) * s.d_v
    if s.save_lse:
        tiled["L"]["write"] = s.n_q
    if s.order == "q-outer":
        tiled["Q"]["read"] = s.n_q * s.d
        tiled["O"]["write"] = s.n_q * s.d_v
    else:
        # Each visit of (tile j, block i) reads Q_i, O_i, ℓ_i, m_i and writes O_i, ℓ_i, m_i.
        visits_rows = visited_rows(s)
        tiled["K"]["read"], tiled["V"]["read"] = s.n_k * s.d, s.n_k * s.d_v
        tiled["Q"]["read"] = visits_rows * s.d
        tiled["O"]["read"] = visits_rows * s.d_v
        tiled["O"]["write"] = s.n_q * s.d_v + visits_rows * s.d_v
        for t in ("l", "m"):
            tiled[t]["read"] = visits_rows
            tiled[t]["write"] = s.n_q + visits_rows
    return {"dense": freeze_counts(dense), "tiled": freeze_counts(tiled)}


def closed_form_ledger(
    n_q: int,
    n_k: int,
    d: int,
    d_v: int,
    *,
    block_q: int,
    block_k: int,
    order: str = "q-outer",
    causal: bool = False,
    save_lse: bool = False,
    dtype: str = "float64",
    sram_capacity: int | None = None,
) -> Ledger:
    """The same ledger as `ledger`, from formulas (constant work in N for non-causal)."""
    s = Schedule(n_q, n_k, d, d_v, block_q, block_k, order, causal, save_lse)
    return make_ledger(s, closed_form_counts(s), dtype, sram_capacity)


def paper_block_sizes(sram_capacity: int, d: int) -> tuple[int, int]:
    """Algorithm 1's rule: B_c = ⌈M / 4d⌉, B_r = min(⌈M / 4d⌉, d). Returns (B_r, B_c)."""
    if sram_capacity < 1 or d < 1:
        raise ValueError("SRAM capacity and d must be at least 1.")
    b_c = math.ceil(sram_capacity / (4 * d))
    return min(b_c, d), b_c


def theorem2_bound(n: int, d: int, sram_capacity: int) -> float:
    """Theorem 2's order of FlashAttention's HBM accesses, N² d² / M (constant taken as 1)."""
    return n * n * d * d / sram_capacity
