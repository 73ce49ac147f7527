"""Bytes per generated token of each decode schedule: counted from the walk and closed form.

`decode_ledger` counts the elements every action of compute.decode.walk moves;
`closed_form_decode_ledger` gives the same counts from formulas, and the tests hold the
two equal. With R = H_q · N_q query rows and S' = min(S, T_c) splits, per decode step:
- every schedule reads Q once per block it launches, K (H_kv · N_k · d) and V
  (H_kv · N_k · d_v) once (one block serves a whole GQA group, so a K/V byte is read
  once per group, not once per query head), and writes O (R · d_v);
- dense also writes and reads S and P (R · N_k each way);
- split-kv reads Q S' times and writes then reads the partials O_s (S' · R · d_v) and
  L_s (S' · R): the K/V bytes are the one-pass's, the splits buy parallelism
  (H_kv · S' blocks instead of H_kv), not fewer bytes.
Q, K, V, S, P and O take the dtype's bytes; O_s and L_s the accumulator's (float32,
float64 for float64), as FlashAttention's split kernel keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..ledger import count_transfers, element_bytes, freeze_counts
from ..schedule import DIRECTIONS
from .problem import SCHEDULES, DecodeProblem
from .walk import TENSORS, DecodeAction, decode_walk

Counts = Mapping[str, Mapping[str, int]]
PARTIALS = frozenset({"O_s", "L_s"})


def decode_element_bytes(tensor: str, dtype: str) -> int:
    """Bytes per element in HBM: the partials in the accumulator type, the rest as the
    forward's ledger stores them (compute.ledger.element_bytes)."""
    if tensor in PARTIALS:
        return 8 if dtype == "float64" else 4
    return element_bytes(tensor, dtype)


def _freeze(counts: Mapping[str, Mapping[str, int]]) -> Counts:
    return freeze_counts(counts, TENSORS)


@dataclass(frozen=True)
class DecodeLedger:
    """One schedule's HBM transfers for one decode step: counts[tensor][direction]."""

    problem: DecodeProblem
    schedule: str
    counts: Counts

    @property
    def total_elements(self) -> int:
        return sum(c[d] for c in self.counts.values() for d in DIRECTIONS)

    @property
    def total_bytes(self) -> int:
        dtype = self.problem.dtype
        return sum(
            decode_element_bytes(t, dtype) * c[d]
            for t, c in self.counts.items()
            for d in DIRECTIONS
        )

    @property
    def bytes_per_token(self) -> float:
        """Bytes per generated token: the step's bytes over its N_q new tokens."""
        return self.total_bytes / self.problem.n_q

    @property
    def flops(self) -> int:
        """The step's matmul FLOPs (the same for every schedule; see DecodeProblem.flops)."""
        return self.problem.flops

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.total_bytes

    @property
    def blocks(self) -> int:
        """Thread blocks the main pass runs side by side: H_kv, or H_kv · S' for split-kv."""
        p = self.problem
        return p.h_kv * (p.splits_used if self.schedule == "split-kv" else 1)

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule,
            "total_elements": self.total_elements,
            "total_bytes": self.total_bytes,
            "bytes_per_token": self.bytes_per_token,
            "flops": self.flops,
            "intensity": self.intensity,
            "blocks": self.blocks,
            "by_tensor": {t: dict(c) for t, c in self.counts.items()},
        }


def count_decode_actions(actions: Iterable[DecodeAction]) -> Counts:
    """Sum the elements every action moves, per tensor and direction."""
    return count_transfers((a.transfers for a in actions), TENSORS)


def _check(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(
            f"The decode schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}."
        )


def decode_ledger(problem: DecodeProblem, schedule: str) -> DecodeLedger:
    """The schedule's ledger counted from its declared walk."""
    _check(schedule)
    return DecodeLedger(problem, schedule, count_decode_actions(decode_walk(problem, schedule)))


def closed_form_decode_ledger(problem: DecodeProblem, schedule: str) -> DecodeLedger:
    """The same counts from formulas (module docstring)."""
    _check(schedule)
    p = problem
    rows = p.h_q * p.n_q  # R
    blocks_per_head = p.splits_used if schedule == "split-kv" else 1
    counts: dict[str, dict[str, int]] = {
        "Q": {"read": blocks_per_head * rows * p.d},
        "K": {"read": p.h_kv * p.n_k * p.d},
        "V": {"read": p.h_kv * p.n_k * p.d_v},
        "O": {"write": rows * p.d_v},
    }
    if schedule == "dense":
        counts["S"] = counts["P"] = {"read": rows * p.n_k, "write": rows * p.n_k}
    if schedule == "split-kv":
        counts["O_s"] = dict.fromkeys(DIRECTIONS, p.splits_used * rows * p.d_v)
        counts["L_s"] = dict.fromkeys(DIRECTIONS, p.splits_used * rows)
    return DecodeLedger(problem, schedule, _freeze(counts))


def decode_ledgers(problem: DecodeProblem) -> dict[str, DecodeLedger]:
    """Every schedule's counted ledger, by name."""
    return {name: decode_ledger(problem, name) for name in SCHEDULES}
