"""The declared HBM schedules of both lanes: what one action is (shape only, no values).

`make_action` says what a lane does in one animation step: which HBM regions it reads
or writes and which tiles sit in SRAM afterwards. The timeline (compute.timeline)
holds each lane as arrays and builds an Action only when a view asks for that step;
the loop generators here walk the same actions one by one and are the oracle the
array timeline and the closed-form ledger are tested against.

Lanes (the conventions of the FlashAttention explainer this app follows):
- dense: (1) per query block, load Q_i, then per key tile S_ij = Q_i K_jᵀ written to
  HBM; (2) per query block, read the S rows, softmax, write P; (3) per query block,
  read P_ij and V_j to accumulate O_i, then write O_i.
- tiled, order "q-outer": per query block, load Q_i once; per visible K/V tile, load
  K_j and V_j, update m, ℓ, a on chip; write O_i (and L_i when saved).
- tiled, order "kv-outer" (Algorithm 1): initialise O, ℓ, m in HBM; per K/V tile load
  K_j, V_j (unless no query block sees tile j: then it is skipped, not loaded); per
  query block that can see it, read Q_i, O_i, ℓ_i, m_i, update, write O_i, ℓ_i, m_i back.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .attention import ORDERS
from .mask import FULL, MASKED, SKIPPED, Mask

TENSORS: tuple[str, ...] = ("Q", "K", "V", "O", "S", "P", "m", "l", "L")
DIRECTIONS: tuple[str, ...] = ("read", "write")
LANES: tuple[str, ...] = ("dense", "tiled")
STAT_TENSORS = frozenset({"m", "l", "L"})


@dataclass(frozen=True)
class Region:
    """A rectangle of one tensor: rows [r0, r1) and columns [c0, c1)."""

    tensor: str
    rows: tuple[int, int]
    cols: tuple[int, int]

    @property
    def elements(self) -> int:
        return (self.rows[1] - self.rows[0]) * (self.cols[1] - self.cols[0])


@dataclass(frozen=True)
class Transfer:
    """One HBM transfer: a region moved in one direction ("read" = HBM to SRAM)."""

    region: Region
    direction: str

    @property
    def tensor(self) -> str:
        return self.region.tensor

    @property
    def elements(self) -> int:
        return self.region.elements


@dataclass(frozen=True)
class Action:
    """What one lane does in one step.

    phase: a stable code ("load_q", "load_kv", "update", "write_o", "write_s",
    "softmax", "accumulate", "init", "load_state", "write_state").
    label: the step in words, for the status bar.
    block_i / block_j: the query block and key tile involved (None when not applicable).
    resident: regions held in SRAM after the action.
    """

    lane: str
    phase: str
    label: str
    block_i: int | None
    block_j: int | None
    transfers: tuple[Transfer, ...]
    resident: tuple[Region, ...]
    computes: tuple[Region, ...] = ()


@dataclass(frozen=True)
class Schedule:
    """Shape-only configuration: everything that decides the transfers, nothing numeric."""

    n_q: int
    n_k: int
    d: int
    d_v: int
    block_q: int
    block_k: int
    order: str = "q-outer"
    causal: bool = False
    save_lse: bool = False
    mask: Mask | None = None

    def __post_init__(self) -> None:
        # `causal` is kept for callers that name the mask by a bool; the mask decides, and
        # `causal` then says whether it is causal (any alignment).
        mask = Mask.of(self.causal) if self.mask is None else self.mask
        object.__setattr__(self, "mask", mask)
        object.__setattr__(self, "causal", mask.causal)
        for name in ("n_q", "n_k", "d", "d_v", "block_q", "block_k"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}.")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}.")
        mask.check(self.n_q, self.n_k)

    @property
    def t_r(self) -> int:
        """T_r: number of query blocks."""
        return math.ceil(self.n_q / self.block_q)

    @property
    def t_c(self) -> int:
        """T_c: number of key/value tiles."""
        return math.ceil(self.n_k / self.block_k)

    def rows(self, i: int) -> tuple[int, int]:
        return i * self.block_q, min(self.n_q, (i + 1) * self.block_q)

    def cols(self, j: int) -> tuple[int, int]:
        return j * self.block_k, min(self.n_k, (j + 1) * self.block_k)

    @cached_property
    def tile_class(self) -> np.ndarray:
        """(T_r, T_c): SKIPPED, MASKED or FULL (compute.mask) for block i and tile j."""
        out = self.mask.tile_classes(self.n_q, self.n_k, self.block_q, self.block_k)
        out.setflags(write=False)
        return out

    @cached_property
    def visible(self) -> np.ndarray:
        """(T_r, T_c): whether query block i loads key tile j (every tile not skipped)."""
        out = self.tile_class != SKIPPED
        out.setflags(write=False)
        return out

    @cached_property
    def row_span(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) per query block: it loads key tiles lo ≤ j < hi (from the mask's row
        bounds, not from `visible`: the tests hold the two equal)."""
        lo, hi = self.mask.block_spans(self.n_q, self.n_k, self.block_q, self.block_k)
        for x in (lo, hi):
            x.setflags(write=False)
        return lo, hi

    @cached_property
    def col_span(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) per key tile: query blocks lo ≤ i < hi load it (one run for every mask),
        by bisection over the blocks' spans (both ends non-decreasing in the block)."""
        b_lo, b_hi = self.row_span
        j = np.arange(self.t_c)
        first = np.searchsorted(b_hi, j, side="right")  # first block whose span ends past j
        end = np.searchsorted(b_lo, j, side="right")  # blocks whose span starts at or before j
        seen = first < end
        lo, hi = np.where(seen, first, 0), np.where(seen, end, 0)
        for x in (lo, hi):
            x.setflags(write=False)
        return lo.astype(np.int64), hi.astype(np.int64)

    @cached_property
    def seen_tiles(self) -> np.ndarray:
        """(T_c,): whether some query block sees key tile j. A K/V-outer loop (forward
        Algorithm 1, the backward) loads K_j, V_j only then; the others are skipped."""
        lo, hi = self.col_span
        out = hi > lo
        out.setflags(write=False)
        return out

    @cached_property
    def full_span(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) per query block: its FULL tiles (no mask needed) are lo ≤ j < hi."""
        lo, hi = self.mask.full_spans(self.n_q, self.n_k, self.block_q, self.block_k)
        for x in (lo, hi):
            x.setflags(write=False)
        return lo, hi

    def tile_class_at(self, i: int, j: int) -> int:
        """SKIPPED, MASKED or FULL of tile (i, j) from the spans (no T_r × T_c matrix)."""
        (lo, hi), (f_lo, f_hi) = self.row_span, self.full_span
        if not lo[i] <= j < hi[i]:
            return SKIPPED
        return FULL if f_lo[i] <= j < f_hi[i] else MASKED

    @cached_property
    def last_visit(self) -> np.ndarray:
        """(T_r,): the last key tile query block i loads; -1 when it sees none."""
        lo, hi = self.row_span
        out = np.where(hi > lo, hi - 1, -1)
        out.setflags(write=False)
        return out

    def sram_elements(self, lane: str) -> int:
        """Peak SRAM working set of a lane, in elements, at this schedule's block sizes."""
        b_r, b_c = min(self.block_q, self.n_q), min(self.block_k, self.n_k)
        if lane == "tiled":
            # Q_i, K_j, V_j, the score tile, the accumulator (a or O_i), m and ℓ.
            return b_r * self.d + b_c * (self.d + self.d_v) + b_r * b_c + b_r * self.d_v + 2 * b_r
        # Dense: phase 1 holds Q_i, K_j and an S tile; phase 2 a whole block of S rows
        # (softmax needs the full row); phase 3 a P tile, V_j and the O_i accumulator.
        phase1 = b_r * self.d + b_c * self.d + b_r * b_c
        phase2 = 2 * b_r * self.n_k
        phase3 = b_r * b_c + b_c * self.d_v + b_r * self.d_v
        return max(phase1, phase2, phase3)


def _region(tensor: str, rows: tuple[int, int], cols: tuple[int, int]) -> Region:
    return Region(tensor, rows, cols)


def _read(tensor, rows, cols) -> Transfer:
    return Transfer(Region(tensor, rows, cols), "read")


def _write(tensor, rows, cols) -> Transfer:
    return Transfer(Region(tensor, rows, cols), "write")


def _masked(s: Schedule, i: int, j: int) -> str:
    """ " (masked)" when tile (i, j) has hidden cells (a full tile needs no mask)."""
    return " (masked)" if s.tile_class_at(i, j) == MASKED else ""


def lane_kind(s: Schedule, lane: str) -> str:
    """ "dense", "q-outer" or "kv-outer": which declared schedule a lane follows."""
    return "dense" if lane == "dense" else s.order


def make_action(s: Schedule, lane: str, phase: str, i: int | None, j: int | None) -> Action:
    """The one action a lane takes in `phase` on query block i and key tile j.

    The generators below and the array timeline (compute.timeline) both build their
    actions here, so the regions the GUI draws and the counts the ledger sums are one
    definition.
    """
    kind = lane_kind(s, lane)
    d, dv, one, nk, nq = (0, s.d), (0, s.d_v), (0, 1), (0, s.n_k), (0, s.n_q)
    r = s.rows(i) if i is not None else None
    c = s.cols(j) if j is not None else None
    if kind == "dense":
        if phase == "load_q":
            return Action(
                lane,
                phase,
                f"S: load Q block {i}",
                i,
                None,
                (_read("Q", r, d),),
                (_region("Q", r, d),),
            )
        if phase == "write_s":
            return Action(
                lane,
                phase,
                f"S: load K tile {j}, write S block ({i},{j})",
                i,
                j,
                (_read("K", c, d), _write("S", r, c)),
                (_region("Q", r, d), _region("K", c, d), _region("S", r, c)),
                (_region("S", r, c),),
            )
        if phase == "softmax":
            return Action(
                lane,
                phase,
                f"softmax: read S rows of block {i}, write P",
                i,
                None,
                (_read("S", r, nk), _write("P", r, nk)),
                (_region("S", r, nk), _region("P", r, nk)),
                (_region("P", r, nk),),
            )
        if phase == "accumulate":
            o_i = _region("O", r, dv)
            return Action(
                lane,
                phase,
                f"O: read P block ({i},{j}) and V tile {j}",
                i,
                j,
                (_read("P", r, c), _read("V", c, dv)),
                (_region("P", r, c), _region("V", c, dv), o_i),
                (o_i,),
            )
        if phase == "write_o":
            return Action(lane, phase, f"O: write O block {i}", i, None, (_write("O", r, dv),), ())
    elif kind == "q-outer":
        q_i = _region("Q", r, d)
        state = (_region("m", r, one), _region("l", r, one), _region("O", r, dv))
        if phase == "load_q":
            return Action(lane, phase, f"load Q block {i}", i, None, (_read("Q", r, d),), (q_i,))
        if phase == "load_kv":
            return Action(
                lane,
                phase,
                f"load K, V tile {j} for query block {i}",
                i,
                j,
                (_read("K", c, d), _read("V", c, dv)),
                (q_i, _region("K", c, d), _region("V", c, dv), *state),
            )
        if phase == "update":
            return Action(
                lane,
                phase,
                f"scores{_masked(s, i, j)}, rescale by α and accumulate: block {i}, tile {j}",
                i,
                j,
                (),
                (q_i, _region("K", c, d), _region("V", c, dv), _region("S", r, c), *state),
                (_region("S", r, c), *state),
            )
        if phase == "write_o":
            writes = (_write("O", r, dv),) + ((_write("L", r, one),) if s.save_lse else ())
            label = f"write O block {i}" + (" and L" if s.save_lse else "")
            return Action(lane, phase, label, i, None, writes, ())
    else:  # kv-outer, Algorithm 1
        if phase == "init":
            init = [_write("O", nq, dv), _write("l", nq, one), _write("m", nq, one)]
            if s.save_lse:  # blocks no tile is visible to get L = −∞ written here
                init += [
                    _write("L", s.rows(b), one) for b in np.flatnonzero(s.last_visit < 0).tolist()
                ]
            return Action(
                lane, phase, "initialise O = 0, ℓ = 0, m = −∞ in HBM", None, None, tuple(init), ()
            )
        kv = (_region("K", c, d), _region("V", c, dv))
        if phase == "load_kv" and not s.seen_tiles[j]:
            label = f"skip K, V tile {j}: no query row sees it (not loaded)"
            return Action(lane, phase, label, None, j, (), ())
        if phase == "load_kv":
            return Action(
                lane,
                phase,
                f"load K, V tile {j}",
                None,
                j,
                (_read("K", c, d), _read("V", c, dv)),
                kv,
            )
        state = (_region("O", r, dv), _region("l", r, one), _region("m", r, one))
        held = (*kv, _region("Q", r, d), *state)
        if phase == "load_state":
            return Action(
                lane,
                phase,
                f"read Q, O, ℓ, m of block {i}",
                i,
                j,
                tuple(_read(x.tensor, x.rows, x.cols) for x in (held[2], *state)),
                held,
            )
        if phase == "update":
            return Action(
                lane,
                phase,
                f"scores{_masked(s, i, j)}, rescale and update: block {i}, tile {j}",
                i,
                j,
                (),
                (*held, _region("S", r, c)),
                (_region("S", r, c), *state),
            )
        if phase == "write_state":
            writes = [_write(x.tensor, x.rows, x.cols) for x in state]
            if s.save_lse and s.last_visit[i] == j:  # the block's last visit also writes L
                writes.append(_write("L", r, one))
            return Action(lane, phase, f"write O, ℓ, m of block {i}", i, j, tuple(writes), kv)
    raise ValueError(f"The {kind} schedule has no phase {phase!r}.")


def dense_actions(s: Schedule) -> Iterator[Action]:
    """The dense lane, as a loop (the oracle the array timeline is tested against).

    (1) per query block, load Q_i, then per key tile write S_ij; (2) per block, softmax
    the S rows into P; (3) per block, accumulate P_ij V_j over the tiles, write O_i.
    """
    for i in range(s.t_r):
        yield make_action(s, "dense", "load_q", i, None)
        for j in range(s.t_c):
            yield make_action(s, "dense", "write_s", i, j)
    for i in range(s.t_r):
        yield make_action(s, "dense", "softmax", i, None)
    for i in range(s.t_r):
        for j in range(s.t_c):
            yield make_action(s, "dense", "accumulate", i, j)
        yield make_action(s, "dense", "write_o", i, None)


def q_outer_actions(s: Schedule) -> Iterator[Action]:
    """The tiled lane, query-resident (FlashAttention-2's forward order), as a loop."""
    for i in range(s.t_r):
        yield make_action(s, "tiled", "load_q", i, None)
        for j in np.flatnonzero(s.visible[i]).tolist():
            yield make_action(s, "tiled", "load_kv", i, j)
            yield make_action(s, "tiled", "update", i, j)
        yield make_action(s, "tiled", "write_o", i, None)


def kv_outer_actions(s: Schedule) -> Iterator[Action]:
    """The tiled lane as Algorithm 1 of the original paper (K/V block outer), as a loop; a
    tile no block sees keeps its load_kv step, which then moves nothing (skipped)."""
    yield make_action(s, "tiled", "init", None, None)
    for j in range(s.t_c):
        yield make_action(s, "tiled", "load_kv", None, j)
        for i in np.flatnonzero(s.visible[:, j]).tolist():
            for phase in ("load_state", "update", "write_state"):
                yield make_action(s, "tiled", phase, i, j)


def lane_actions(s: Schedule, lane: str) -> Iterator[Action]:
    """The actions of one lane of a schedule."""
    if lane == "dense":
        return dense_actions(s)
    return q_outer_actions(s) if s.order == "q-outer" else kv_outer_actions(s)
