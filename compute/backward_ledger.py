"""HBM ledgers of the backward pass and of a training step (forward + backward).

`pass_ledger(..., counted=True)` counts the declared steps of `compute.backward_schedule`
(the oracle); by default it computes the same numbers from formulas, and a property test
holds the two equal. The tiled backward reads L, so its forward always saves it (in
training, the forward's ledger counts writing L).
The results are `Ledger`s (same JSON schema as the forward's), with the gradient tensors
and D in `by_tensor` and the pass named in the config.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .backward_schedule import (
    PASS_TENSORS,
    PASSES,
    BackwardStep,
    backward_sram_elements,
    backward_steps,
)
from .ledger import (
    Counts,
    LaneLedger,
    Ledger,
    check_ledger_args,
    closed_form_ledger,
    count_transfers,
    freeze_counts,
    ledger,
    seen_keys,
    visited_rows,
)
from .mask import Mask
from .problem import Problem
from .schedule import DIRECTIONS, LANES, Schedule


@dataclass(frozen=True)
class PassLedger(Ledger):
    """A Ledger of the backward pass or a training step; its config names the pass."""

    pass_name: str = "backward"

    def config(self) -> dict:
        return {**super().config(), "pass": self.pass_name}


def _freeze(counts: Mapping[str, Mapping[str, int]]) -> Counts:
    return freeze_counts(counts, PASS_TENSORS)


def count_steps(steps: Iterable[BackwardStep]) -> Counts:
    """Sum the elements every step moves, per tensor and direction."""
    return count_transfers((step.moves for step in steps), PASS_TENSORS)


def _add(a: Counts, b: Counts) -> Counts:
    """a + b per tensor and direction (a tensor absent from one counts 0 there)."""
    none: Mapping[str, int] = {}
    return _freeze(
        {
            t: {d: a.get(t, none).get(d, 0) + b.get(t, none).get(d, 0) for d in DIRECTIONS}
            for t in PASS_TENSORS
        }
    )


def closed_form_backward_counts(s: Schedule) -> dict[str, Counts]:
    """Both lanes' backward counts from formulas, independent of the step generators."""
    n_q, n_k, d, d_v, qk = s.n_q, s.n_k, s.d, s.d_v, s.n_q * s.n_k
    dense = {
        "P": {"read": 2 * qk},  # (1) and (3)
        "dO": {"read": s.t_c * n_q * d_v + n_q * d_v},  # (1) once per key tile, (2) once
        "V": {"read": s.t_r * n_k * d_v},  # (2) once per query block
        "K": {"read": s.t_r * n_k * d},  # (4) once per query block
        "Q": {"read": s.t_c * n_q * d},  # (5) once per key tile
        "dP": {"read": qk, "write": qk},
        "dS": {"read": 2 * qk, "write": qk},  # written by (3), read by (4) and (5)
        "dV": {"write": n_k * d_v},
        "dQ": {"write": n_q * d},
        "dK": {"write": n_k * d},
    }
    rows, seen = visited_rows(s), seen_keys(s)
    tiled = {
        "O": {"read": n_q * d_v},  # preprocessing
        "dO": {"read": n_q * d_v + rows * d_v},  # preprocessing, then each visit
        "D": {"read": rows, "write": n_q},
        "dQ": {"read": rows * d, "write": n_q * d + rows * d},  # zeros, then each visit
        "Q": {"read": rows * d},
        "L": {"read": rows},
        "K": {"read": seen * d},  # the key tiles some query row sees, once each
        "V": {"read": seen * d_v},
        "dK": {"write": n_k * d},  # every tile: a skipped one writes its zeros
        "dV": {"write": n_k * d_v},
    }
    return {"dense": _freeze(dense), "tiled": _freeze(tiled)}


def _counted_or_closed(s: Schedule, pass_name: str, counted: bool, dtype: str) -> tuple:
    """Per-lane counts and SRAM working sets of the backward or the training step."""
    if counted:
        counts = {lane: count_steps(backward_steps(s, lane)) for lane in LANES}
    else:
        counts = closed_form_backward_counts(s)
    sram = {lane: backward_sram_elements(s, lane) for lane in LANES}
    if pass_name == "training":
        # The forward's own ledger (counted or closed form, as asked), L saved.
        shape = (s.n_q, s.n_k, s.d, s.d_v)
        kw = dict(block_q=s.block_q, block_k=s.block_k, order=s.order, causal=s.mask)
        forward = (ledger if counted else closed_form_ledger)(
            *shape, **kw, save_lse=True, dtype=dtype
        )
        counts = {lane: _add(forward.lanes[lane].counts, counts[lane]) for lane in LANES}
        sram = {lane: max(sram[lane], forward.lanes[lane].sram_elements) for lane in LANES}
    return counts, sram


def pass_ledger(
    pass_name: str,
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
    counted: bool = False,
) -> Ledger:
    """Both lanes' HBM ledger of one pass: "forward", "backward" or "training".

    counted=True walks the declared steps (the oracle); otherwise the closed form gives the
    same numbers. "forward" is `compute.ledger` / `closed_form_ledger` itself. `order` and
    `save_lse` describe the forward (the backward always runs K/V outer); with a backward
    the tiled forward always saves L (the backward reads it), so save_lse is set.
    """
    kw = dict(
        block_q=block_q, block_k=block_k, order=order, causal=causal, save_lse=save_lse,
        dtype=dtype, sram_capacity=sram_capacity,
    )  # fmt: skip
    if pass_name == "forward":
        return (ledger if counted else closed_form_ledger)(n_q, n_k, d, d_v, **kw)
    if pass_name not in PASSES:
        raise ValueError(f"pass must be one of {', '.join(PASSES)}, not {pass_name!r}.")
    check_ledger_args(dtype, sram_capacity)
    save_lse = True  # the tiled backward reads L, so its forward saved it
    s = Schedule(n_q, n_k, d, d_v, block_q, block_k, order, False, save_lse, Mask.of(causal))
    counts, sram = _counted_or_closed(s, pass_name, counted, dtype)
    lanes = {
        lane: LaneLedger(lane, counts[lane], dtype, sram[lane], sram_capacity) for lane in LANES
    }
    return PassLedger(s, dtype, MappingProxyType(lanes), sram_capacity, pass_name)


def problem_ledger(
    problem: Problem, pass_name: str = "forward", *, sram_capacity: int | None = None
) -> Ledger:
    """`pass_ledger` of a compute.problem.Problem (the closed form)."""
    return pass_ledger(
        pass_name, problem.n, problem.n_k, problem.d, problem.d_v,
        **problem.options(), sram_capacity=sram_capacity,
    )  # fmt: skip
