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
from .mask import Mask
from .schedule import (
    DIRECTIONS,
    LANES,
    STAT_TENSORS,
    TENSORS,
    Action,
    Schedule,
    Transfer,
    lane_actions,
)

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
            "mask": s.mask.to_dict(),
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


def freeze_counts(
    counts: Mapping[str, Mapping[str, int]], tensors: Iterable[str] = TENSORS
) -> Counts:
    """Read-only per-tensor, per-direction counts over `tensors` (absent ones are 0)."""
    out = {}
    for t in tensors:
        c = counts.get(t)
        # Absent tensors share one read-only zero row: a sweep freezes a few thousand.
        out[t] = MappingProxyType({d: int(c.get(d, 0)) for d in DIRECTIONS}) if c else _NONE
    return MappingProxyType(out)


_NONE: Mapping[str, int] = MappingProxyType(dict.fromkeys(DIRECTIONS, 0))


def _empty() -> dict[str, dict[str, int]]:
    return {t: dict.fromkeys(DIRECTIONS, 0) for t in TENSORS}


def count_transfers(
    moves: Iterable[Iterable[Transfer]], tensors: Iterable[str] = TENSORS
) -> Counts:
    """Sum the elements of every group of transfers, per tensor and direction: the one
    counter of the forward's actions, the backward's steps and the decode walk."""
    tensors = tuple(tensors)
    counts = {t: dict.fromkeys(DIRECTIONS, 0) for t in tensors}
    for group in moves:
        for transfer in group:
            counts[transfer.tensor][transfer.direction] += transfer.elements
    return freeze_counts(counts, tensors)


def count_actions(actions: Iterable[Action | None]) -> Counts:
    """Sum the elements every action moves, per tensor and direction."""
    return count_transfers(a.transfers for a in actions if a is not None)


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
    causal: bool | Mask = False,
    save_lse: bool = False,
    dtype: str = "float64",
    sram_capacity: int | None = None,
) -> Ledger:
    """Count both lanes' HBM transfers by walking the declared schedule, action by action."""
    s = Schedule(n_q, n_k, d, d_v, block_q, block_k, order, False, save_lse, Mask.of(causal))
    counts = {lane: count_actions(lane_actions(s, lane)) for lane in LANES}
    return make_ledger(s, counts, dtype, sram_capacity)


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """Σ_{i=0}^{n−1} ⌊(a·i + b) / m⌋ for n, m ≥ 1 and a, b ≥ 0, in O(log) steps and O(1)
    memory (the Euclid-like reduction), exact in Python integers at any size."""
    total = 0
    while True:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return total
        n, b, m, a = y_max // m, y_max % m, a, m


def _first(pred, hi: int) -> int:
    """The first i in [0, hi) with pred(i) (pred monotone: False then True), else hi."""
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _clamped_sum(s: Schedule, base: int, plus: int) -> tuple[int, int]:
    """(Σ, #{= T_c}) over the full query blocks i < T_r − 1 of
    f(i) = clamp(⌊(B_r i + base) / B_c⌋ + plus, 0, T_c), with plus 0 or 1: f is monotone in
    i, so its clamped ranges are found by bisection and the middle is one floor_sum."""
    b_r, b_c, t_c, full = s.block_q, s.block_k, s.t_c, s.t_r - 1

    def f(i: int) -> int:
        return min(t_c, max(0, (b_r * i + base) // b_c + plus))

    lo = _first(lambda i: f(i) > 0, full)
    hi = _first(lambda i: f(i) >= t_c, full)
    # Σ over lo ≤ i < hi of ⌊(B_r i + base) / B_c⌋ + plus: all terms ≥ 1, so B_r lo + base ≥ 0.
    mid = 0
    if hi > lo:
        mid = floor_sum(hi - lo, b_c, b_r, b_r * lo + base) + plus * (hi - lo)
    return mid + t_c * (full - hi), full - hi


def _band_tile_sums(s: Schedule) -> tuple[int, int, int]:
    """(Σ_i tiles_i · rows_i, Σ_i tiles_i, #{i : block i loads the last tile}) over query
    blocks i of a (non-packed) window or causal mask, from formulas: O(log N) time, O(1)
    memory, so any N is counted without per-block arrays.

    Block i (rows r0..r1 − 1) loads the key tiles j with j ≤ ⌊(r1 − 1 + off + right) / B_c⌋
    and j ≥ ⌊(r0 + off − left) / B_c⌋ (each side only when bounded), so tiles_i = A(i) − B(i)
    with A(i) = clamp(⌊(r1 − 1 + off + right) / B_c⌋ + 1, 0, T_c) the tiles up to its last
    and B(i) = clamp(⌊(r0 + off − left) / B_c⌋, 0, T_c) those before its first (T_c when
    that key is past N_k; A ≥ B as the band holds the diagonal); it loads the last tile
    iff A = T_c > B.
    """
    m, b_r, b_c, t_c = s.mask, s.block_q, s.block_k, s.t_c
    off, full = m.offset(s.n_q, s.n_k), s.t_r - 1
    last_r0, last_r1 = full * b_r, s.n_q

    def a_of(r1: int) -> int:
        return t_c if m.right < 0 else min(t_c, max(0, (r1 - 1 + off + m.right) // b_c + 1))

    def b_of(r0: int) -> int:
        first_key = r0 + off - m.left
        if m.left < 0:
            return 0
        # A first key past N_k (inside the last tile's padding) leaves no tile.
        return t_c if first_key >= s.n_k else max(0, first_key // b_c)

    def count_from(bound: int) -> int:  # #{i < full : B_r i + off − left ≥ bound}
        return full - min(full, max(0, -(-(bound - off + m.left) // b_r)))

    if m.right < 0:
        a_sum, a_sat = t_c * full, full
    else:
        a_sum, a_sat = _clamped_sum(s, b_r - 1 + off + m.right, 1)
    if m.left < 0:
        b_sum, b_sat = 0, 0
    else:
        b_sum, b_sat = _clamped_sum(s, off - m.left, 0)
        padded = count_from(s.n_k) - count_from(t_c * b_c)  # first key in the padding
        b_sum, b_sat = b_sum + padded, b_sat + padded
    tile_sum = a_sum - b_sum
    last = a_of(last_r1) - b_of(last_r0)
    rows_sum = b_r * tile_sum + (last_r1 - last_r0) * last
    last_tile = (a_sat - b_sat) + (a_of(last_r1) == t_c > b_of(last_r0))
    return rows_sum, tile_sum + last, last_tile


def _tile_sums(s: Schedule) -> tuple[int, int, int]:
    """`_band_tile_sums` for any mask: packed sequences from the mask's per-block spans
    (O(T_r), independent of the tile classes the walk reads)."""
    if s.mask.is_none:
        return s.n_q * s.t_c, s.t_r * s.t_c, s.t_r
    if not s.mask.lengths:
        return _band_tile_sums(s)
    lo, hi = s.row_span
    tiles = hi - lo
    rows = np.minimum(np.arange(1, s.t_r + 1) * s.block_q, s.n_q) - np.arange(s.t_r) * s.block_q
    last = (hi == s.t_c) & (tiles > 0)
    return int(tiles @ rows), int(tiles.sum()), int(last.sum())


def _visible_keys(s: Schedule) -> int:
    """Σ over query blocks of the keys in the tiles each loads (tail tiles count their
    real size): tiles · B_c, less the tail's shortfall T_c · B_c − N_k where the last loads."""
    _, tile_sum, last_tile = _tile_sums(s)
    return tile_sum * s.block_k - last_tile * (s.t_c * s.block_k - s.n_k)


def _seen_tiles(s: Schedule) -> tuple[int, bool]:
    """(#key tiles some query row sees, whether the last tile is one): the tiles a K/V-outer
    loop loads. From formulas: each row's visible keys are one run and consecutive rows'
    runs touch or overlap, so the seen keys are one run [K0, K1), K0 the first non-empty
    row's lo and K1 the last one's hi. Without packing, row r is non-empty iff its window's
    right end is at or past key 0 (r ≥ −off − right) and its left end before N_k
    (r < N_k − off + left); a packed row sees its own diagonal key, so every key is seen."""
    m, b_c, t_c = s.mask, s.block_k, s.t_c
    if m.is_none or m.lengths:
        return t_c, True
    off = m.offset(s.n_q, s.n_k)
    r_a = max(0, -off - m.right) if m.right >= 0 else 0
    r_b = min(s.n_q, s.n_k - off + m.left) if m.left >= 0 else s.n_q
    if r_a >= r_b:
        return 0, False
    k0 = max(0, r_a + off - m.left) if m.left >= 0 else 0
    k1 = min(s.n_k, r_b + off + m.right) if m.right >= 0 else s.n_k
    j0, j1 = k0 // b_c, (k1 - 1) // b_c + 1
    return j1 - j0, j1 == t_c


def seen_keys(s: Schedule) -> int:
    """The keys in the tiles some query row sees (tail tiles count their real size): what
    a K/V-outer loop reads of K and V, each tile once."""
    tiles, last = _seen_tiles(s)
    return tiles * s.block_k - last * (s.t_c * s.block_k - s.n_k)


def visited_rows(s: Schedule) -> int:
    """Σ over visits (query block i, key tile j it sees) of block i's rows, from formulas."""
    return _tile_sums(s)[0]


def closed_form_counts(s: Schedule) -> dict[str, Counts]:
    """Both lanes' counts from formulas, independent of the action generators."""
    dense, tiled = _empty(), _empty()
    dense["Q"]["read"] = s.n_q * s.d
    dense["K"]["read"] = s.t_r * s.n_k * s.d
    dense["V"]["read"] = s.t_r * s.n_k * s.d_v
    dense["O"]["write"] = s.n_q * s.d_v
    for t in ("S", "P"):
        dense[t]["read"] = dense[t]["write"] = s.n_q * s.n_k
    keys = _visible_keys(s)
    tiled["K"]["read"] = keys * s.d
    tiled["V"]["read"] = keys * s.d_v
    if s.save_lse:
        tiled["L"]["write"] = s.n_q
    if s.order == "q-outer":
        tiled["Q"]["read"] = s.n_q * s.d
        tiled["O"]["write"] = s.n_q * s.d_v
    else:
        # Each visit of (tile j, block i) reads Q_i, O_i, ℓ_i, m_i and writes O_i, ℓ_i, m_i.
        visits_rows = visited_rows(s)
        seen = seen_keys(s)  # each tile some block sees is loaded once; the rest skipped
        tiled["K"]["read"], tiled["V"]["read"] = seen * s.d, seen * s.d_v
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
    causal: bool | Mask = False,
    save_lse: bool = False,
    dtype: str = "float64",
    sram_capacity: int | None = None,
) -> Ledger:
    """The same ledger as `ledger`, from formulas: O(log N) time and O(1) memory, so the
    ledger of any N is answered (`ledger` walks the actions: for tests and small N)."""
    s = Schedule(n_q, n_k, d, d_v, block_q, block_k, order, False, save_lse, Mask.of(causal))
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
