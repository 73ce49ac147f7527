"""The Trace: both lanes on the same inputs, advancing on one shared timeline.

A Trace is data, looked up by step index. Step t holds the dense lane's t-th action
and the tiled lane's t-th action (None once a lane has finished); both lanes are
`LaneTimeline`s, arrays of O(T_r + T_c) numbers, so a timeline of millions of steps
costs kilobytes and a Step object exists only while a view asks for it.

Numbers are computed when first asked for and then kept, all read-only: one chunked
pass over S (compute.full_pass) gives the dense lane's row statistics, reference
output and display-resolution S and P, and the tiled lane's output and L; regions of
S and P are computed when a view shows them; one query block's history of
(m, ℓ, a, α, P̃) after each key tile (O(N_k · d) per row, a few blocks cached), and
every row's state at a tile for KV-outer's HBM (a cursor). Views look numbers up here;
they never compute attention.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .attention import RowHistory, causal_mask, default_scale, round_to, stats_dtype
from .backward_ledger import PassLedger
from .backward_numbers import BackwardNumbers
from .backward_rows import default_do
from .full_pass import DensePass, FullPass, TiledPass, combine, dense_pass, tiled_pass
from .inputs import HISTORY_BLOCKS, validate_inputs
from .ledger import LaneLedger, Ledger, check_ledger_args, freeze_counts, make_ledger
from .numbers import SHARED
from .problem import Problem
from .recurrence import TileCursor, block_history
from .schedule import DIRECTIONS, LANES, Action, Schedule
from .timeline import LaneTimeline

DISPLAY_CELLS = 256  # S and P are summarised at this many cells a side unless asked
DEFAULT_DO_KEY = ("default dO",)  # compute.backward_rows.default_do, the same for a shape


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
class Trace(BackwardNumbers):
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
        # Per-trace caches of computed numbers (a frozen dataclass: set once, here). They
        # hold arrays only, never the trace, so a trace is freed as soon as it is dropped.
        object.__setattr__(self, "_caches", {})

    def _memo(self, name: str, size: int, key, compute):
        """The value of compute() cached under (name, key), keeping the `size` newest."""
        cache = self._caches.setdefault(name, OrderedDict())
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        value = cache[key] = compute()
        while len(cache) > size:
            cache.popitem(last=False)
        return value

    def cached(self, name: str) -> int:
        """How many values of one cache are held (tests: nothing computed early)."""
        return len(self._caches.get(name, ()))

    @property
    def problem(self) -> Problem:
        """This trace's problem (compute.problem): sizes, dtype, mask, order and blocks."""
        s = self.schedule
        return Problem.of_shapes(
            (s.n_q, s.d), (s.n_k, s.d_v), block_q=s.block_q, block_k=s.block_k,
            dtype=self.dtype, causal=s.causal, order=s.order, save_lse=s.save_lse,
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

    # ---- numbers that need all of S: one chunked pass, on first use -------------------
    def summary(self, cap: int = DISPLAY_CELLS) -> FullPass:
        """The dense lane's row statistics, reference output and S, P at `cap` cells a
        side, and the tiled lane's output and L (compute.full_pass); cached per cap."""
        return self._memo("summary", 2, cap, lambda: self._summary_uncached(cap))

    def _summary_uncached(self, cap: int) -> FullPass:
        return combine(self.dense_pass(cap), self.tiled_pass())

    def _dense_key(self, cap: int) -> tuple:
        return (self.inputs_key, self.schedule.causal, self.scale, cap)

    def dense_pass(self, cap: int = DISPLAY_CELLS) -> DensePass:
        """The dense lane's numbers (and, with a backward, its backward's, from the same
        S and P): shared through compute.numbers by every trace of these inputs and mask."""
        key = self._dense_key(cap)
        if self.do is None:  # a backward's pass of the same inputs holds the forward's too
            found = SHARED.get("dense", (*key, DEFAULT_DO_KEY))
            if found is not None:
                return found
        do_key = None if self.do is None else self.do_key

        def run() -> DensePass:
            # Scores beyond a narrow dtype give inf/NaN, as on a GPU; the app reports that
            # once (attention.overflow_notice), not as NumPy warnings per chunk.
            with np.errstate(over="ignore", invalid="ignore"):
                return dense_pass(
                    self.q, self.k, self.v, causal=self.schedule.causal, scale=self.scale,
                    cap=cap, do=self.do,
                )  # fmt: skip

        return SHARED.value("dense", (*key, do_key), run)

    def _tiled_key(self) -> tuple:
        s = self.schedule  # not B_r: each row's closed form is its own
        return (self.inputs_key, s.causal, self.scale, s.block_k, s.order, self.dtype)

    def tiled_pass(self) -> TiledPass:
        """The tiled lane's output, L and final state, shared as `dense_pass` is."""

        def run() -> TiledPass:
            with np.errstate(over="ignore", invalid="ignore"):
                return tiled_pass(
                    self.q, self.k, self.v, self.schedule, scale=self.scale, dtype=self.dtype
                )

        return SHARED.value("tiled", self._tiled_key(), run)

    @property
    def reference(self) -> np.ndarray:
        """The float64 output softmax(S) V, every other path's reference."""
        return self.summary().reference

    @property
    def tiled_output(self) -> np.ndarray:
        """The tiled lane's O in its dtype (the recurrence's closed form; see full_pass)."""
        return self.summary().tiled_output

    @property
    def lse(self) -> np.ndarray:
        """L = m + log ℓ per row (−∞ for a row that sees no key)."""
        return self.summary().lse

    def scores_region(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """Dense S[r0:r1, c0:c1] in float64 (−∞ where causally masked); the last few
        regions asked for are kept, so a view asking again gets the same array."""
        return self._memo("region", 6, ("S", r0, r1, c0, c1), lambda: self._scores(r0, r1, c0, c1))

    def probs_region(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """Dense P[r0:r1, c0:c1] = exp(S − rowmax) / rowsum, with the rows' full statistics."""
        return self._memo("region", 6, ("P", r0, r1, c0, c1), lambda: self._probs(r0, r1, c0, c1))

    def _scores(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        s = (self.q[r0:r1] @ self.k[c0:c1].T) * self.scale  # S = Q Kᵀ · scale
        if self.schedule.causal:
            mask = causal_mask(
                np.arange(r0, r1), np.arange(c0, c1), self.schedule.n_q, self.schedule.n_k
            )
            s = np.where(mask, s, -np.inf)
        s.setflags(write=False)
        return s

    def _probs(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        f = self.summary()
        m, l = f.row_max[r0:r1, None], f.row_sum[r0:r1, None]  # noqa: E741
        p = np.exp(self._scores(r0, r1, c0, c1) - np.where(np.isfinite(m), m, 0.0))
        out = np.zeros_like(p)
        np.divide(p, l, out=out, where=l > 0)  # a fully masked row has P = 0
        out.setflags(write=False)
        return out

    @cached_property
    def scores(self) -> np.ndarray:
        """The whole dense S (N_q × N_k float64): for small problems and tests; views ask
        for regions or the display-resolution summary instead."""
        return self._scores(0, self.schedule.n_q, 0, self.schedule.n_k)

    @cached_property
    def probs(self) -> np.ndarray:
        """The whole dense P (N_q × N_k); see `scores`."""
        return self._probs(0, self.schedule.n_q, 0, self.schedule.n_k)

    def block_history(self, block: int) -> RowHistory:
        """Query block `block`'s rows: m, ℓ, α, a and P̃ after each key tile, computed on
        first use (compute.recurrence); the 16 blocks asked for last are kept."""
        return self._memo(
            "blocks",
            HISTORY_BLOCKS,
            block,
            lambda: block_history(
                self.q, self.k, self.v, self.schedule, block, scale=self.scale, dtype=self.dtype
            ),
        )

    def row_history(self, row: int) -> RowHistory:
        """One query row's m, ℓ, α (T_c + 1,), a (T_c + 1, d_v) and P̃ (N_k,) after each key
        tile (index 0 = before any), computed with its block on first use."""
        block = row // self.schedule.block_q
        h, r = self.block_history(block), row - self.schedule.rows(block)[0]
        return RowHistory(h.m[r], h.l[r], h.a[r], h.alpha[r], h.p_tilde[r])

    @cached_property
    def _cursor(self) -> TileCursor:
        return TileCursor(self.q, self.k, self.v, self.schedule, scale=self.scale, dtype=self.dtype)

    def state_after_tiles(self, tiles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(m, ℓ, O = a/ℓ) of every row after key tiles 0..tiles−1, as Algorithm 1's HBM
        holds them once each block has been written back."""
        if tiles >= self.schedule.t_c:  # the end of the run: the full pass has it already
            return self.summary().tiled_state
        return self._cursor.state(tiles)

    def block_state(self, block: int, tiles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(m, ℓ, a) of query block `block`'s rows after `tiles` key tiles.

        From the block's history when it is at hand; under KV-outer, where every step
        visits another block, from the all-rows state at that tile instead (a = ℓ · O), so
        stepping through blocks never recomputes a block's whole history.
        """
        r0, r1 = self.schedule.rows(block)
        if self.schedule.order == "kv-outer" and ("blocks", block) not in self._held():
            m, l, o = self.state_after_tiles(tiles)  # noqa: E741
            return m[r0:r1], l[r0:r1], o[r0:r1] * l[r0:r1, None]
        h = self.block_history(block)
        return h.m[:, tiles], h.l[:, tiles], h.a[:, tiles]

    def p_tilde_tile(self, block: int, tile: int) -> np.ndarray:
        """P̃_ij = exp(S_ij − m_new) of block i's rows and key tile j, as the recurrence
        formed it (inputs rounded to the dtype, statistics dtype); from the block's history
        when at hand, else computed for this tile alone (KV-outer, as in block_state)."""
        c0, c1 = self.schedule.cols(tile)
        if self.schedule.order == "q-outer" or ("blocks", block) in self._held():
            return self.block_history(block).p_tilde[:, c0:c1]
        return self._memo("p_tilde", 4, (block, tile), lambda: self._p_tilde(block, tile))

    def _p_tilde(self, block: int, tile: int) -> np.ndarray:
        s = self.schedule
        (r0, r1), (c0, c1) = s.rows(block), s.cols(tile)
        acc = stats_dtype(self.dtype)
        q, k = (round_to(x, self.dtype).astype(acc) for x in (self.q[r0:r1], self.k[c0:c1]))
        sc = (q @ k.T) * acc(self.scale)  # S_ij in the statistics dtype
        if s.causal:
            mask = causal_mask(np.arange(r0, r1), np.arange(c0, c1), s.n_q, s.n_k)
            sc = np.where(mask, sc, acc(-np.inf))
        m_new = self.state_after_tiles(tile + 1)[0][r0:r1]
        p = np.exp(sc - np.where(np.isfinite(m_new), m_new, 0)[:, None])  # exp(S_ij − m_new)
        p.setflags(write=False)
        return p

    def _held(self) -> set:
        return {(name, key) for name, cache in self._caches.items() for key in cache}

    def row_updates(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """(step indices, key tile indices) at which the tiled lane updated `row`."""
        return self.lanes["tiled"].steps_of("update", row // self.schedule.block_q)

    def row_state(self, row: int, step: int) -> RowState:
        """The tiled lane's state of `row` after step `step` (-1 = before the first step)."""
        steps, tiles = self.row_updates(row)
        n = int(np.searchsorted(steps, step, side="right"))
        tile = int(tiles[n - 1]) + 1 if n else 0
        h = self.row_history(row)
        return RowState(tile, float(h.m[tile]), float(h.l[tile]), h.a[tile], float(h.alpha[tile]))

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

    def dense_partial_output(self, block: int, tile: int) -> np.ndarray:
        """The dense lane's O_i accumulator after key tiles 0..tile: Σ_{j ≤ tile} P_ij V_j.

        Phase 3 of the dense lane reads P_ij and V_j tile by tile and sums them into O_i
        on chip; after the last tile this is the reference output of the block's rows.
        """
        r0, r1 = self.schedule.rows(block)
        c1 = self.schedule.cols(tile)[1]
        return self._probs(r0, r1, 0, c1) @ self.v[:c1]

    @property
    def max_abs_error(self) -> float:
        """Largest |tiled − reference| over the output."""
        return float(
            np.max(np.abs(self.tiled_output.astype(np.float64) - self.reference), initial=0.0)
        )


def build_trace(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    problem: Problem | None = None,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    order: str = "q-outer",
    causal: bool = False,
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
        causal, dtype, save_lse = problem.causal, problem.dtype, problem.save_lse
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
        do = default_do(n_q, d_v) if do is None else np.asarray(do, dtype=np.float64)
        if do.shape != (n_q, d_v):
            raise ValueError(f"dO has shape {do.shape} but the output O has shape {(n_q, d_v)}.")
        do = _readonly(do.copy())
    else:
        do = None
    schedule = Schedule(n_q, n_k, d, d_v, block_q, block_k, order, causal, save_lse)
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
        lanes={lane: LaneTimeline(schedule, lane, pass_name) for lane in LANES},
        pass_name=pass_name,
        do=do,
        inputs_key=(object() if inputs_key is None else inputs_key, n_q, n_k, d, d_v),
        do_key=do_key,
    )
