"""The Trace: both lanes on the same inputs, advancing on one shared timeline.

A Trace is data, looked up by step index. Step t holds the dense lane's t-th action
and the tiled lane's t-th action (None once a lane has finished); both lanes are
`LaneTimeline`s, arrays of O(T_r + T_c) numbers, so a timeline of millions of steps
costs kilobytes and a Step object exists only while a view asks for it.

A Trace is data (inputs, schedule, dtype), a timeline (the two lanes) and a ledger
(their running counts), composed with two number services that own their caches:
`trace.forward` (compute.forward_numbers: S, P, the reference, the tiled lane's output
and L, the recurrence's histories) and `trace.backward` (compute.backward_numbers: the
gradients, D, dP and dS; None for a forward trace). Numbers are computed when first
asked for and then kept, all read-only. The services' names are also the Trace's own
(trace.summary() is trace.forward.summary()): the compatible API the views use. Views
look numbers up here; they never compute attention.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .attention import default_scale, round_to
from .backward_ledger import PassLedger
from .backward_numbers import BackwardNumbers
from .backward_rows import default_do
from .backward_schedule import backward_sram_elements
from .forward_numbers import DEFAULT_DO_KEY, DISPLAY_CELLS, ForwardNumbers, RowState
from .inputs import validate_inputs
from .ledger import LaneLedger, Ledger, check_ledger_args, freeze_counts, make_ledger
from .mask import Mask
from .problem import Problem
from .schedule import DIRECTIONS, LANES, Action, Schedule
from .timeline import LaneTimeline, lane_timelines

__all__ = ["DISPLAY_CELLS", "RowState", "Step", "Steps", "Trace", "build_trace"]

# The services' public names, answered by the Trace itself (the compatible API).
FORWARD_NAMES = frozenset(
    {
        "summary", "dense_pass", "tiled_pass", "reference", "tiled_output", "lse",
        "scores_region", "probs_region", "scores", "probs", "block_history", "row_history",
        "state_after_tiles", "block_state", "p_tilde_tile", "row_updates", "row_state",
        "dense_partial_output", "max_abs_error", "overflow", "dense_rows", "reference_rows",
        "tiled_output_rows", "tiled_rows_state", "tiles_seen",
    }
)  # fmt: skip
BACKWARD_NAMES = frozenset(
    {
        "gradients", "backward_D", "reference_D", "backward_block", "key_tile",
        "backward_row", "key_row", "backward_tiles_done", "backward_blocks_done",
        "grad_region", "backward_summary", "key_tile_ready", "rows_D",
    }
)  # fmt: skip


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


class Steps(Sequence):
    """The timeline as a read-only sequence of Steps, each built when indexed."""

    def __init__(self, lanes: dict[str, LaneTimeline], n_steps: int) -> None:
        self._lanes, self._n = lanes, n_steps

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):  # noqa: ANN001 (int or slice, as any Sequence)
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = index + self._n if index < 0 else index
        if not 0 <= i < self._n:
            raise IndexError(f"step {index} is outside 0..{self._n - 1}")
        return Step(i, self._lanes["dense"].action(i), self._lanes["tiled"].action(i))

    def __iter__(self) -> Iterator[Step]:
        return (self[i] for i in range(self._n))


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Trace:
    schedule: Schedule
    dtype: str
    scale: float
    sram_capacity: int | None
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    lanes: dict[str, LaneTimeline] = field(repr=False)
    pass_name: str = "forward"  # "forward", "backward" or "training" (forward then backward)
    do: np.ndarray | None = field(default=None, repr=False)  # dO, for a backward
    # What the inputs (and dO) are, for compute.numbers: equal keys promise equal arrays.
    inputs_key: Hashable = field(default_factory=object, repr=False)
    do_key: Hashable = field(default_factory=object, repr=False)

    def __post_init__(self) -> None:
        # The number services (a frozen dataclass: set once, here).
        forward = ForwardNumbers(
            self.q, self.k, self.v, self.schedule, scale=self.scale, dtype=self.dtype,
            tiled_lane=self.lanes["tiled"], do=self.do, inputs_key=self.inputs_key,
            do_key=self.do_key,
        )  # fmt: skip
        object.__setattr__(self, "forward", forward)
        backward = None if self.do is None else BackwardNumbers(forward)
        object.__setattr__(self, "backward", backward)

    def __getattr__(self, name: str):  # noqa: ANN204 (whatever the service's member is)
        # Only for names not found on the Trace: the services' compatible names.
        services = self.__dict__
        if name in FORWARD_NAMES and "forward" in services:
            return getattr(services["forward"], name)
        if name in BACKWARD_NAMES and "forward" in services:
            backward = services.get("backward")
            if backward is None:
                raise ValueError("This trace has no backward pass (dO was not given).")
            return getattr(backward, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def cached(self, name: str) -> int:
        """How many values of one of the services' caches are held (tests: nothing
        computed early)."""
        services = [self.forward] + ([self.backward] if self.backward is not None else [])
        return sum(s.cached(name) for s in services)

    @property
    def problem(self) -> Problem:
        """This trace's problem (compute.problem): sizes, dtype, mask, order and blocks."""
        s = self.schedule
        return Problem.of_shapes(
            (s.n_q, s.d), (s.n_k, s.d_v), block_q=s.block_q, block_k=s.block_k,
            dtype=self.dtype, causal=s.causal, order=s.order, save_lse=s.save_lse,
            masking=s.mask,
        )  # fmt: skip

    # ---- the timeline ----------------------------------------------------------------
    @property
    def tensors(self) -> tuple[str, ...]:
        """The tensors the running counts list: the forward's, or PASS_TENSORS with a backward."""
        return self.lanes["dense"].tensors

    @cached_property
    def n_steps(self) -> int:
        return max(t.length for t in self.lanes.values())

    @cached_property
    def steps(self) -> Steps:
        return Steps(self.lanes, self.n_steps)

    def lane_length(self, lane: str) -> int:
        return self.lanes[lane].length

    def action(self, lane: str, step: int) -> Action | None:
        """The action of `lane` at `step` (None when the lane is done or out of range)."""
        return self.lanes[lane].action(step)

    def sram_need(self, lane: str) -> int:
        """Peak SRAM working set of `lane` over this trace's pass, in elements."""
        forward = self.schedule.sram_elements(lane)
        if self.pass_name == "forward":
            return forward
        backward = backward_sram_elements(self.schedule, lane)
        return backward if self.pass_name == "backward" else max(forward, backward)

    # ---- running counts --------------------------------------------------------------
    def counts_array(self, step: int) -> np.ndarray:
        """(lanes, tensors, directions) elements moved by steps 0..step (−1 = none yet)."""
        step = max(-1, min(step, self.n_steps - 1))
        return np.stack([self.lanes[lane].counts_at(step) for lane in LANES])

    def counts_at(self, step: int) -> dict[str, dict[str, dict[str, int]]]:
        """Running counts per lane, tensor and direction after step `step` (-1 = none yet)."""
        c = self.counts_array(step)
        return {
            lane: {
                t: {d: int(c[li, ti, di]) for di, d in enumerate(DIRECTIONS)}
                for ti, t in enumerate(self.tensors)
            }
            for li, lane in enumerate(LANES)
        }

    def totals_at(self, step: int) -> dict[str, int]:
        """Running total elements per lane after step `step`."""
        c = self.counts_array(step)
        return {lane: int(c[li].sum()) for li, lane in enumerate(LANES)}

    def ledger(self) -> Ledger:
        """The whole run's ledger: this trace's own timelines, summed."""
        end = self.counts_at(self.n_steps - 1)
        if self.pass_name == "forward":
            counts = {lane: freeze_counts(c) for lane, c in end.items()}
            return make_ledger(self.schedule, counts, self.dtype, self.sram_capacity)
        check_ledger_args(self.dtype, self.sram_capacity)
        lanes = {
            lane: LaneLedger(lane, end[lane], self.dtype, self.sram_need(lane), self.sram_capacity)
            for lane in LANES
        }
        return PassLedger(self.schedule, self.dtype, lanes, self.sram_capacity, self.pass_name)


def build_trace(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    problem: Problem | None = None,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    order: str = "q-outer",
    causal: bool | Mask = False,
    sram_capacity: int | None = None,
    dtype: str = "float64",
    save_lse: bool = False,
    scale: float | None = None,
    pass_name: str = "forward",
    do: np.ndarray | None = None,
    inputs_key: Hashable | None = None,
) -> Trace:
    """Both lanes' timelines on the same inputs; numbers follow when first asked for.

    pass_name "backward" or "training" (forward then backward) adds the backward's
    schedules; its tiled forward saves L (the backward reads it), so save_lse is set. dO
    defaults to compute.backward_rows.default_do (seeded standard normal). `problem`
    (compute.problem.Problem) gives the blocks, order, mask, dtype and save_lse at once;
    its sizes must be the inputs'. `inputs_key` names the inputs (equal keys promise
    equal arrays; compute.numbers): traces of the same key share the numbers that do not
    depend on their blocks, order, dtype or pass.
    """
    q, k, v = validate_inputs(q, k, v)
    if problem is not None:
        if (problem.n, problem.d, problem.n_k, problem.d_v) != (*q.shape, *v.shape):
            raise ValueError(
                f"The problem is N = {problem.n}, d = {problem.d}, N_k = {problem.n_k}, "
                f"d_v = {problem.d_v} but the inputs are Q {q.shape} and V {v.shape}."
            )
        block_q, block_k, order = problem.block_q, problem.block_k, problem.order
        causal, dtype, save_lse = problem.attention_mask, problem.dtype, problem.save_lse
    if block_q is None or block_k is None:
        raise ValueError("build_trace needs block_q and block_k (or a problem).")
    n_q, d = q.shape
    n_k, d_v = v.shape
    if pass_name not in ("forward", "backward", "training"):
        raise ValueError(f"pass must be forward, backward or training, not {pass_name!r}.")
    do_key: Hashable = object()
    if pass_name != "forward":
        save_lse = True
        if do is None:
            do_key = DEFAULT_DO_KEY
            do = default_do(n_q, d_v)  # read-only already: no copy
        else:
            do = np.asarray(do, dtype=np.float64)
            if do.shape != (n_q, d_v):
                raise ValueError(
                    f"dO has shape {do.shape} but the output O has shape {(n_q, d_v)}."
                )
            do = _readonly(do.copy())
    else:
        do = None
    lanes = lane_timelines(
        Schedule(n_q, n_k, d, d_v, block_q, block_k, order, causal, save_lse), LANES, pass_name
    )
    schedule = lanes[LANES[0]].schedule  # (a kept timeline's: the same object for both)
    scale = default_scale(d) if scale is None else float(scale)
    round_to(np.zeros(1), dtype)  # an unknown dtype is one sentence now, not at first view
    return Trace(
        schedule=schedule,
        dtype=dtype,
        scale=scale,
        sram_capacity=sram_capacity,
        q=_readonly(q),
        k=_readonly(k),
        v=_readonly(v),
        lanes=lanes,
        pass_name=pass_name,
        do=do,
        inputs_key=(object() if inputs_key is None else inputs_key, n_q, n_k, d, d_v),
        do_key=do_key,
    )
