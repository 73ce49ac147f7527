"""The Trace: both lanes on the same inputs, advancing on one shared timeline.

A Trace is data. Step t holds the dense lane's t-th action and the tiled lane's t-th
action (None once a lane has finished). Numbers live in read-only arrays computed
once: the dense lane's S, P and output, and the tiled lane's per-row state after each
key tile (m, ℓ, a, α). Views look numbers up here; they never compute attention.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .attention import (
    RowHistory,
    default_scale,
    dense_lane,
    tiled_attention_history,
)
from .inputs import validate_inputs
from .ledger import Ledger, freeze_counts, make_ledger
from .schedule import DIRECTIONS, LANES, TENSORS, Action, Schedule, lane_actions


@dataclass(frozen=True)
class Step:
    """One point of the shared timeline: what each lane does (None = that lane is done)."""

    index: int
    dense: Action | None
    tiled: Action | None

    def action(self, lane: str) -> Action | None:
        return self.dense if lane == "dense" else self.tiled

    def describe(self) -> str:
        parts = [
            f"{lane}: {a.label}" if a is not None else f"{lane}: done"
            for lane, a in (("dense", self.dense), ("tiled", self.tiled))
        ]
        return f"Step {self.index + 1}. " + "; ".join(parts)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class RowState:
    """The tiled lane's state of one query row after some number of key tiles."""

    tile: int  # how many key tiles (by index) the row's block has passed; 0 = none
    m: float
    l: float
    a: np.ndarray
    alpha: float

    @property
    def partial_output(self) -> np.ndarray:
        """a / ℓ: attention over the keys seen so far (zeros before any key)."""
        return self.a / self.l if self.l > 0 else np.zeros_like(self.a)


@dataclass(frozen=True, eq=False)
class Trace:
    schedule: Schedule
    dtype: str
    scale: float
    sram_capacity: int | None
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray  # dense S (float64; -inf where causally masked)
    probs: np.ndarray  # dense P
    reference: np.ndarray  # dense float64 output: the reference
    tiled_output: np.ndarray  # tiled lane's output in the chosen dtype
    lse: np.ndarray  # tiled lane's L = m + log ℓ per row
    history: RowHistory
    steps: tuple[Step, ...]
    # cumulative[t + 1, lane, tensor, direction]: elements moved up to and including step t.
    cumulative: np.ndarray = field(repr=False)

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def lane_length(self, lane: str) -> int:
        """Number of steps in which `lane` acts."""
        return sum(1 for s in self.steps if s.action(lane) is not None)

    @cached_property
    def _updates(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        steps: dict[int, list[tuple[int, int]]] = {}
        for st in self.steps:
            a = st.tiled
            if a is not None and a.phase == "update":
                steps.setdefault(a.block_i, []).append((st.index, a.block_j))
        return {
            i: (np.array([s for s, _ in v]), np.array([j for _, j in v])) for i, v in steps.items()
        }

    def row_updates(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """(step indices, key tile indices) at which the tiled lane updated `row`."""
        empty = np.zeros(0, dtype=int)
        return self._updates.get(row // self.schedule.block_q, (empty, empty))

    def row_state(self, row: int, step: int) -> RowState:
        """The tiled lane's state of `row` after step `step` (-1 = before the first step)."""
        steps, tiles = self.row_updates(row)
        n = int(np.searchsorted(steps, step, side="right"))
        tile = int(tiles[n - 1]) + 1 if n else 0
        h = self.history
        return RowState(
            tile,
            float(h.m[row, tile]),
            float(h.l[row, tile]),
            h.a[row, tile],
            float(h.alpha[row, tile]),
        )

    def counts_at(self, step: int) -> dict[str, dict[str, dict[str, int]]]:
        """Running counts per lane, tensor and direction after step `step` (-1 = none yet)."""
        c = self.cumulative[max(-1, min(step, self.n_steps - 1)) + 1]
        return {
            lane: {
                t: {d: int(c[li, ti, di]) for di, d in enumerate(DIRECTIONS)}
                for ti, t in enumerate(TENSORS)
            }
            for li, lane in enumerate(LANES)
        }

    def totals_at(self, step: int) -> dict[str, int]:
        """Running total elements per lane after step `step`."""
        c = self.cumulative[max(-1, min(step, self.n_steps - 1)) + 1]
        return {lane: int(c[li].sum()) for li, lane in enumerate(LANES)}

    def ledger(self) -> Ledger:
        """The whole run's ledger: this trace's own steps, summed (the last running counts)."""
        counts = {lane: freeze_counts(c) for lane, c in self.counts_at(self.n_steps - 1).items()}
        return make_ledger(self.schedule, counts, self.dtype, self.sram_capacity)

    def dense_partial_output(self, block: int, tile: int) -> np.ndarray:
        """The dense lane's O_i accumulator after key tiles 0..tile: Σ_{j ≤ tile} P_ij V_j.

        Phase 3 of the dense lane reads P_ij and V_j tile by tile and sums them into O_i
        on chip; after the last tile this is the reference output of the block's rows.
        """
        r0, r1 = self.schedule.rows(block)
        c1 = self.schedule.cols(tile)[1]
        return self.probs[r0:r1, :c1] @ self.v[:c1]

    @property
    def max_abs_error(self) -> float:
        """Largest |tiled − reference| over the output."""
        return float(
            np.max(np.abs(self.tiled_output.astype(np.float64) - self.reference), initial=0.0)
        )


def _cumulative(steps: tuple[Step, ...]) -> np.ndarray:
    tensor_index = {t: i for i, t in enumerate(TENSORS)}
    dir_index = {d: i for i, d in enumerate(DIRECTIONS)}
    per_step = np.zeros((len(steps) + 1, len(LANES), len(TENSORS), len(DIRECTIONS)), dtype=np.int64)
    for st in steps:
        for li, lane in enumerate(LANES):
            a = st.action(lane)
            if a is None:
                continue
            for tr in a.transfers:
                per_step[st.index + 1, li, tensor_index[tr.tensor], dir_index[tr.direction]] += (
                    tr.elements
                )
    return np.cumsum(per_step, axis=0)


def build_trace(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    block_q: int,
    block_k: int,
    order: str = "q-outer",
    causal: bool = False,
    sram_capacity: int | None = None,
    dtype: str = "float64",
    save_lse: bool = False,
    scale: float | None = None,
) -> Trace:
    """Run both lanes on the same inputs and record them step by step."""
    q, k, v = validate_inputs(q, k, v)
    n_q, d = q.shape
    n_k, d_v = v.shape
    schedule = Schedule(n_q, n_k, d, d_v, block_q, block_k, order, causal, save_lse)
    scale = default_scale(d) if scale is None else float(scale)
    out, lse, hist = tiled_attention_history(
        q,
        k,
        v,
        block_q=block_q,
        block_k=block_k,
        order=order,
        causal=causal,
        scale=scale,
        dtype=dtype,
    )
    scores, probs, reference = dense_lane(q, k, v, causal=causal, scale=scale)
    steps = tuple(
        Step(i, dense, tiled)
        for i, (dense, tiled) in enumerate(
            itertools.zip_longest(lane_actions(schedule, "dense"), lane_actions(schedule, "tiled"))
        )
    )
    for a in (hist.m, hist.l, hist.a, hist.alpha, hist.p_tilde):
        _readonly(a)
    return Trace(
        schedule=schedule,
        dtype=dtype,
        scale=scale,
        sram_capacity=sram_capacity,
        q=_readonly(q),
        k=_readonly(k),
        v=_readonly(v),
        scores=_readonly(scores),
        probs=_readonly(probs),
        reference=_readonly(reference),
        tiled_output=_readonly(out),
        lse=_readonly(lse),
        history=hist,
        steps=steps,
        cumulative=_readonly(_cumulative(steps)),
    )
