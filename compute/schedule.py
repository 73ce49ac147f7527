"""The declared HBM schedules of both lanes, as sequences of actions (shape only, no values).

Each lane is a generator of `Action`s: what the lane does in one animation step, which
HBM regions it reads or writes, and which tiles sit in SRAM afterwards. The trace
zips the two lanes onto one timeline; the ledger counts the same actions, so the
animation, the ledger and the closed form can never drift apart.

Lanes (the conventions of the FlashAttention explainer this app follows):
- dense: (1) per query block, load Q_i, then per key tile S_ij = Q_i K_jᵀ written to
  HBM; (2) per query block, read the S rows, softmax, write P; (3) per query block,
  read P_ij and V_j to accumulate O_i, then write O_i.
- tiled, order "q-outer": per query block, load Q_i once; per visible K/V tile, load
  K_j and V_j, update m, ℓ, a on chip; write O_i (and L_i when saved).
- tiled, order "kv-outer" (Algorithm 1): initialise O, ℓ, m in HBM; per K/V tile load
  K_j, V_j; per query block that can see it, read Q_i, O_i, ℓ_i, m_i, update, write
  O_i, ℓ_i, m_i back.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .attention import ORDERS, tile_visibility

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

    def __post_init__(self) -> None:
        for name in ("n_q", "n_k", "d", "d_v", "block_q", "block_k"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}.")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}.")

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
    def visible(self) -> np.ndarray:
        """(T_r, T_c): whether query block i loads key tile j (always True without causal)."""
        out = tile_visibility(self.n_q, self.n_k, self.block_q, self.block_k, self.causal)
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


def dense_actions(s: Schedule) -> Iterator[Action]:
    """The dense lane: S and P materialised in HBM, block by block."""
    d, dv, nk = (0, s.d), (0, s.d_v), (0, s.n_k)
    for i in range(s.t_r):
        r = s.rows(i)
        q_i = _region("Q", r, d)
        yield Action(
            "dense", "load_q", f"S: load Q block {i}", i, None, (_read("Q", r, d),), (q_i,)
        )
        for j in range(s.t_c):
            c = s.cols(j)
            yield Action(
                "dense",
                "write_s",
                f"S: load K tile {j}, write S block ({i},{j})",
                i,
                j,
                (_read("K", c, d), _write("S", r, c)),
                (q_i, _region("K", c, d), _region("S", r, c)),
                (_region("S", r, c),),
            )
    for i in range(s.t_r):
        r = s.rows(i)
        yield Action(
            "dense",
            "softmax",
            f"softmax: read S rows of block {i}, write P",
            i,
            None,
            (_read("S", r, nk), _write("P", r, nk)),
            (_region("S", r, nk), _region("P", r, nk)),
            (_region("P", r, nk),),
        )
    for i in range(s.t_r):
        r = s.rows(i)
        o_i = _region("O", r, dv)
        for j in range(s.t_c):
            c = s.cols(j)
            yield Action(
                "dense",
                "accumulate",
                f"O: read P block ({i},{j}) and V tile {j}",
                i,
                j,
                (_read("P", r, c), _read("V", c, dv)),
                (_region("P", r, c), _region("V", c, dv), o_i),
                (o_i,),
            )
        yield Action(
            "dense", "write_o", f"O: write O block {i}", i, None, (_write("O", r, dv),), ()
        )


def q_outer_actions(s: Schedule) -> Iterator[Action]:
    """The tiled lane, query-resident (FlashAttention-2's forward order)."""
    d, dv, one = (0, s.d), (0, s.d_v), (0, 1)
    for i in range(s.t_r):
        r = s.rows(i)
        q_i = _region("Q", r, d)
        state = (_region("m", r, one), _region("l", r, one), _region("O", r, dv))
        yield Action("tiled", "load_q", f"load Q block {i}", i, None, (_read("Q", r, d),), (q_i,))
        for j in np.flatnonzero(s.visible[i]).tolist():
            c = s.cols(j)
            kv = (_region("K", c, d), _region("V", c, dv))
            yield Action(
                "tiled",
                "load_kv",
                f"load K, V tile {j} for query block {i}",
                i,
                j,
                (_read("K", c, d), _read("V", c, dv)),
                (q_i, *kv, *state),
            )
            yield Action(
                "tiled",
                "update",
                f"scores, rescale by α and accumulate: block {i}, tile {j}",
                i,
                j,
                (),
                (q_i, *kv, _region("S", r, c), *state),
                (_region("S", r, c), *state),
            )
        writes = (_write("O", r, dv),) + ((_write("L", r, one),) if s.save_lse else ())
        label = f"write O block {i}" + (" and L" if s.save_lse else "")
        yield Action("tiled", "write_o", label, i, None, writes, ())


def kv_outer_actions(s: Schedule) -> Iterator[Action]:
    """The tiled lane as Algorithm 1 of the original paper (K/V block outer)."""
    d, dv, one, nq = (0, s.d), (0, s.d_v), (0, 1), (0, s.n_q)
    visits = s.visible
    never = [i for i in range(s.t_r) if not visits[i].any()]
    last_visit = {i: int(np.flatnonzero(visits[i])[-1]) for i in range(s.t_r) if visits[i].any()}
    init = [_write("O", nq, dv), _write("l", nq, one), _write("m", nq, one)]
    if s.save_lse:
        init += [_write("L", s.rows(i), one) for i in never]
    yield Action(
        "tiled", "init", "initialise O = 0, ℓ = 0, m = −∞ in HBM", None, None, tuple(init), ()
    )
    for j in range(s.t_c):
        c = s.cols(j)
        kv = (_region("K", c, d), _region("V", c, dv))
        yield Action(
            "tiled",
            "load_kv",
            f"load K, V tile {j}",
            None,
            j,
            (_read("K", c, d), _read("V", c, dv)),
            kv,
        )
        for i in np.flatnonzero(visits[:, j]).tolist():
            r = s.rows(i)
            state = (_region("O", r, dv), _region("l", r, one), _region("m", r, one))
            held = (*kv, _region("Q", r, d), *state)
            yield Action(
                "tiled",
                "load_state",
                f"read Q, O, ℓ, m of block {i}",
                i,
                j,
                tuple(_read(x.tensor, x.rows, x.cols) for x in (held[2], *state)),
                held,
            )
            yield Action(
                "tiled",
                "update",
                f"scores, rescale and update: block {i}, tile {j}",
                i,
                j,
                (),
                (*held, _region("S", r, c)),
                (_region("S", r, c), *state),
            )
            writes = [_write(x.tensor, x.rows, x.cols) for x in state]
            if s.save_lse and last_visit[i] == j:
                writes.append(_write("L", r, one))
            yield Action(
                "tiled", "write_state", f"write O, ℓ, m of block {i}", i, j, tuple(writes), kv
            )


def lane_actions(s: Schedule, lane: str) -> Iterator[Action]:
    """The actions of one lane of a schedule."""
    if lane == "dense":
        return dense_actions(s)
    return q_outer_actions(s) if s.order == "q-outer" else kv_outer_actions(s)
