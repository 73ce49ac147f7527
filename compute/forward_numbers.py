"""The forward's numbers of one trace, computed when a view asks and then kept.

A number service composed into compute.trace.Trace (it owns its caches; the Trace is
data, timeline and ledger). One chunked pass over S (compute.full_pass, shared by every
trace of the same inputs through compute.numbers) gives the dense lane's row statistics,
reference output and display-resolution S and P, and the tiled lane's output and L;
regions of S and P are computed when a view shows them; one query block's history of
(m, ℓ, a, α, P̃) after each key tile (O(N_k · d) per row, a few blocks cached), and
every row's state at a tile for KV-outer's HBM (a cursor). Views look numbers up here
(through the Trace's compatible names); they never compute attention.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np

from .attention import RowHistory, causal_mask, overflow_notice, round_to, stats_dtype
from .first_tier import dense_chunk, row_sample, score_means, tiled_rows_state
from .full_pass import (
    DISPLAY_CELLS,
    BlockMeans,
    DensePass,
    FullPass,
    TiledPass,
    _lse,
    combine,
    dense_pass,
    row_chunks,
    tiled_pass,
)
from .inputs import HISTORY_BLOCKS
from .numbers import SHARED
from .recurrence import BlockHistory, TileCursor
from .schedule import Schedule
from .timeline import LaneTimeline

T = TypeVar("T")
Check = Callable[[], None] | None  # called between chunks; raises to cancel a pass

DEFAULT_DO_KEY = ("default dO",)  # compute.backward_rows.default_do, the same for a shape
# Query blocks whose partly made history is kept: the block playback is in, the one it
# left, and the selected row's.
PARTIAL_BLOCKS = 4


class Memo:
    """A service's own caches of computed numbers, keeping the newest few per name. They
    hold arrays only, never the trace, so a trace is freed as soon as it is dropped."""

    def __init__(self) -> None:
        self._caches: dict[str, OrderedDict] = {}

    def _memo(self, name: str, size: int, key: Hashable, compute: Callable[[], T]) -> T:
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

    def _holds(self, name: str, key: Hashable) -> bool:
        """Whether cache `name` holds a value for `key` (nothing is computed)."""
        return key in self._caches.get(name, ())


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


class ForwardNumbers(Memo):
    """The forward's numbers of one trace's inputs and schedule (see the module)."""

    def __init__(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        schedule: Schedule,
        *,
        scale: float,
        dtype: str,
        tiled_lane: LaneTimeline,
        do: np.ndarray | None,
        inputs_key: Hashable,
        do_key: Hashable,
    ) -> None:
        super().__init__()
        self.q, self.k, self.v, self.schedule = q, k, v, schedule
        self.scale, self.dtype, self.tiled_lane = scale, dtype, tiled_lane
        self.do, self.inputs_key, self.do_key = do, inputs_key, do_key

    # ---- numbers that need all of S: one chunked pass, on first use -------------------
    def summary(self, cap: int = DISPLAY_CELLS, check: Check = None) -> FullPass:
        """The dense lane's row statistics, reference output and S, P at `cap` cells a
        side, and the tiled lane's output and L (compute.full_pass); cached per cap.
        `check` is called between chunks and may raise to cancel (nothing is kept)."""
        return self._memo("summary", 2, cap, lambda: self._summary_uncached(cap, check))

    def _summary_uncached(self, cap: int, check: Check = None) -> FullPass:
        dense = self.dense_pass(cap, check)
        return combine(dense, self.tiled_pass(check))

    def _dense_key(self, cap: int) -> tuple:
        return (self.inputs_key, self.schedule.mask, self.scale, cap)

    @property
    def _wide(self) -> bool:
        return self.dtype == "float64"  # the tiled lane comes from the dense products

    def _found_forward(self, cap: int = DISPLAY_CELLS, count: bool = False) -> DensePass | None:
        """A dense pass of these inputs and mask already made (its forward numbers: a
        backward's pass holds them too), or None; `count` as NumberCache.get."""
        key = self._dense_key(cap)
        keys = [(*key, None), (*key, DEFAULT_DO_KEY)]
        if self.do is not None:
            keys.insert(1, (*key, self.do_key))
        for k in keys:
            found = SHARED.get("dense", k)
            if found is not None:
                return SHARED.get("dense", k, count=count)
        if count:
            SHARED.misses += 1
        return None

    def _run_dense(self, cap: int, check: Check, **kw) -> DensePass:
        # Scores beyond a narrow dtype give inf/NaN, as on a GPU; the app reports that
        # once (attention.overflow_notice), not as NumPy warnings per chunk.
        with np.errstate(over="ignore", invalid="ignore"):
            return dense_pass(
                self.q, self.k, self.v, causal=self.schedule.mask, scale=self.scale,
                cap=cap, check=check, tiled64=self._wide, **kw,
            )  # fmt: skip

    def forward_pass(self, cap: int = DISPLAY_CELLS, check: Check = None) -> DensePass:
        """The dense lane's forward numbers (and in float64 the tiled lane's, from the
        same products), without a backward's: what a backward's first tier reads of
        every row (a key tile's P columns and D span every row). Shared through
        compute.numbers by every trace of these inputs and mask."""
        found = self._found_forward(cap, count=True)
        if found is not None:
            return found
        return SHARED.put("dense", (*self._dense_key(cap), None), self._run_dense(cap, check))

    def dense_pass(self, cap: int = DISPLAY_CELLS, check: Check = None) -> DensePass:
        """The dense lane's numbers (and, with a backward, its backward's, from the same
        S and P; in float64 the tiled lane's too): shared through compute.numbers by
        every trace of these inputs and mask. A backward whose forward numbers are made
        already forms only its own products (the same chunks: the same digits)."""
        if self.do is None:
            return self.forward_pass(cap, check)
        key = (*self._dense_key(cap), self.do_key)
        found = SHARED.get("dense", key, count=True)
        if found is not None and (found.backward.tiled64 is not None or not self._wide):
            return found
        forward = self._found_forward(cap)
        if forward is not None:
            forward = dataclasses.replace(forward, backward=None)
        return SHARED.put("dense", key, self._run_dense(cap, check, do=self.do, forward=forward))

    def summary_cached(self, cap: int = DISPLAY_CELLS) -> bool:
        """Whether `summary(cap)` would find its passes over S already done (a change of
        B_r, or back to blocks seen before): then nothing is worth streaming."""
        if self._holds("summary", cap):
            return True
        return self._dense_found(cap) and self._tiled_found()

    def _dense_found(self, cap: int = DISPLAY_CELLS) -> bool:
        """Whether the dense lane's forward numbers are made (these inputs and mask)."""
        return self._found_forward(cap) is not None

    def _tiled_key(self) -> tuple:
        s = self.schedule  # not B_r: each row's closed form is its own
        if self._wide:  # the fold: B_c and the order change nothing (TiledPass)
            return (self.inputs_key, s.mask, self.scale, "float64")
        return (self.inputs_key, s.mask, self.scale, s.block_k, s.order, self.dtype)

    def _tiled_found(self) -> bool:
        if SHARED.get("tiled", self._tiled_key()) is not None:
            return True
        found = self._found_forward() if self._wide else None
        return found is not None and found.tiled64 is not None

    def tiled_pass(self, check: Check = None) -> TiledPass:
        """The tiled lane's output, L and final state, shared as `dense_pass` is. In
        float64, from the dense pass's products when it has them (full_pass.TiledPass)."""
        if self._wide:
            found = self._found_forward()
            if found is None and SHARED.get("tiled", self._tiled_key()) is None:
                found = self.forward_pass(DISPLAY_CELLS, check)  # makes both lanes' numbers
            if found is not None and found.tiled64 is not None:
                return found.tiled64

        def run() -> TiledPass:
            with np.errstate(over="ignore", invalid="ignore"):
                return tiled_pass(
                    self.q,
                    self.k,
                    self.v,
                    self.schedule,
                    scale=self.scale,
                    dtype=self.dtype,
                    check=check,
                )

        return SHARED.value("tiled", self._tiled_key(), run)

    def score_means(self, cap: int = DISPLAY_CELLS) -> BlockMeans:
        """S by block means at `cap` cells a side without forming S
        (compute.first_tier.score_means): inputs and mask only, so shared as the dense
        pass is (a change of blocks, order, dtype or pass finds it)."""
        return SHARED.value(
            "score_means",
            self._dense_key(cap),
            lambda: score_means(
                self.q, self.k, causal=self.schedule.mask, scale=self.scale, cap=cap
            ),
        )

    def row_sample(self) -> tuple[np.ndarray, np.ndarray]:
        """(|S|, P) on evenly spaced whole rows (compute.first_tier.row_sample), for the
        colour scales: shared as score_means is."""

        def run():
            out = row_sample(self.q, self.k, causal=self.schedule.mask, scale=self.scale)
            for a in out:
                a.setflags(write=False)
            return out

        return SHARED.value("row_sample", self._dense_key(0), run)

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
        """Dense P[r0:r1, c0:c1] = exp(S − rowmax) / rowsum, with the rows' full statistics,
        from the kept S region (a dense lane holds S and P of the same rows at once)."""
        return self._memo(
            "region",
            6,
            ("P", r0, r1, c0, c1),
            lambda: self._probs(r0, r1, c0, c1, self.scores_region(r0, r1, c0, c1)),
        )

    def _scores(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        s = (self.q[r0:r1] @ self.k[c0:c1].T) * self.scale  # S = Q Kᵀ · scale
        if self.schedule.mask:
            mask = causal_mask(
                np.arange(r0, r1), np.arange(c0, c1), self.schedule.n_q, self.schedule.n_k,
                self.schedule.mask,
            )  # fmt: skip
            s = np.where(mask, s, -np.inf)
        s.setflags(write=False)
        return s

    def dense_rows(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows r0:r1's dense (row max, row sum, reference output), float64: the pass
        over S's rows once it is made, before it the same chunks' products formed for
        these rows (compute.first_tier.dense_chunk: the same digits, whichever is at
        hand), so the selected row and the current tiles are exact within a frame."""
        found = self._found_forward()
        if found is not None:
            return found.row_max[r0:r1], found.row_sum[r0:r1], found.reference[r0:r1]
        chunks = row_chunks(*self._sizes, r0, r1)
        if len(chunks) > 2 and r1 - r0 == self.schedule.n_q:  # all rows: make the pass
            f = self.forward_pass()
            return f.row_max[r0:r1], f.row_sum[r0:r1], f.reference[r0:r1]
        parts = [self._dense_chunk(a, b)[:3] for a, b in chunks]
        a0 = chunks[0][0]
        if len(parts) == 1:
            return tuple(x[r0 - a0 : r1 - a0] for x in parts[0])  # type: ignore[return-value]
        return tuple(np.concatenate(x)[r0 - a0 : r1 - a0] for x in zip(*parts, strict=True))  # type: ignore[return-value]

    @property
    def _sizes(self) -> tuple[int, int]:
        return self.schedule.n_q, self.schedule.n_k

    def _dense_chunk(self, r0: int, r1: int) -> tuple[np.ndarray, ...]:
        """One chunk's dense rows (and in float64 its tiled lane's: the same E)."""

        def run():
            with np.errstate(over="ignore", invalid="ignore"):
                out = dense_chunk(
                    self.q, self.k, self.v, r0, r1, causal=self.schedule.mask,
                    scale=self.scale, fold=self._wide,
                )  # fmt: skip
            for a in out:
                a.setflags(write=False)
            return out

        return self._memo("dense_rows", 4, (r0, r1), run)

    def reference_rows(self, r0: int, r1: int) -> np.ndarray:
        """The float64 reference output of rows r0:r1 (see dense_rows)."""
        return self.dense_rows(r0, r1)[2]

    def tiled_output_rows(self, r0: int, r1: int) -> np.ndarray:
        """The tiled lane's output of rows r0:r1 in its dtype: the tiled pass's rows once
        it is made, before it the same chunks' closed form for these rows
        (compute.first_tier.tiled_rows: the same digits)."""
        return self.tiled_rows_state(r0, r1)[0]

    def tiled_rows_state(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        """(output, L) of the tiled lane's rows r0:r1, as tiled_output_rows: the tiled
        pass's rows once it is made, before it those rows' chunks alone."""
        if self._tiled_found():
            t = self.tiled_pass()
            return t.tiled_output[r0:r1], t.lse[r0:r1]
        chunks = row_chunks(*self._sizes, r0, r1)
        parts = [self._tiled_chunk(a, b) for a, b in chunks]
        a0 = chunks[0][0]
        if len(parts) == 1:
            return tuple(x[r0 - a0 : r1 - a0] for x in parts[0])  # type: ignore[return-value]
        return tuple(np.concatenate(x)[r0 - a0 : r1 - a0] for x in zip(*parts, strict=True))  # type: ignore[return-value]

    def _tiled_chunk(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        if self._wide:  # the fold of the dense chunk's E (full_pass.TiledPass)
            mx, sm, _o, out = self._dense_chunk(r0, r1)
            return out, _lse(mx, sm)

        def run():
            with np.errstate(over="ignore", invalid="ignore"):
                out = tiled_rows_state(
                    self.q, self.k, self.v, self.schedule, r0, r1, scale=self.scale,
                    dtype=self.dtype,
                )  # fmt: skip
            for a in out:
                a.setflags(write=False)
            return out

        return self._memo("tiled_rows", 4, (r0, r1), run)

    def _probs(
        self, r0: int, r1: int, c0: int, c1: int, scores: np.ndarray | None = None
    ) -> np.ndarray:
        # The rows' softmax statistics: dense_rows (one source: the pass's chunks).
        m, l, _ = self.dense_rows(r0, r1)  # noqa: E741
        m, l = m[:, None], l[:, None]  # noqa: E741
        s = self._scores(r0, r1, c0, c1) if scores is None else scores
        p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
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
        return self._memo("blocks", HISTORY_BLOCKS, block, lambda: self._partial(block).complete())

    def _partial(self, block: int) -> BlockHistory:
        """The block's history made as far as it has been read (recurrence.BlockHistory):
        playback reads one tile of each block it enters; the last few are kept."""
        return self._memo(
            "partial",
            PARTIAL_BLOCKS,
            block,
            lambda: BlockHistory(
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
        if self._holds("blocks", block):
            h = self.block_history(block)
            return h.m[:, tiles], h.l[:, tiles], h.a[:, tiles]
        if self.schedule.order == "kv-outer" and not self._holds("partial", block):
            m, l, o = self.state_after_tiles(tiles)  # noqa: E741
            return m[r0:r1], l[r0:r1], o[r0:r1] * l[r0:r1, None]
        return self._partial(block).state(tiles)

    def p_tilde_tile(self, block: int, tile: int) -> np.ndarray:
        """P̃_ij = exp(S_ij − m_new) of block i's rows and key tile j, as the recurrence
        formed it (inputs rounded to the dtype, statistics dtype); from the block's history
        when at hand, else computed for this tile alone (KV-outer, as in block_state)."""
        c0, c1 = self.schedule.cols(tile)
        if self._holds("blocks", block):
            return self.block_history(block).p_tilde[:, c0:c1]
        if self.schedule.order == "q-outer" or self._holds("partial", block):
            return self._partial(block).p_tilde[:, c0:c1]
        return self._memo("p_tilde", 4, (block, tile), lambda: self._p_tilde(block, tile))

    def _p_tilde(self, block: int, tile: int) -> np.ndarray:
        s = self.schedule
        (r0, r1), (c0, c1) = s.rows(block), s.cols(tile)
        acc = stats_dtype(self.dtype)
        q, k = (round_to(x, self.dtype).astype(acc) for x in (self.q[r0:r1], self.k[c0:c1]))
        sc = (q @ k.T) * acc(self.scale)  # S_ij in the statistics dtype
        if s.mask:
            mask = causal_mask(np.arange(r0, r1), np.arange(c0, c1), s.n_q, s.n_k, s.mask)
            sc = np.where(mask, sc, acc(-np.inf))
        m_new = self.state_after_tiles(tile + 1)[0][r0:r1]
        p = np.exp(sc - np.where(np.isfinite(m_new), m_new, 0)[:, None])  # exp(S_ij − m_new)
        p.setflags(write=False)
        return p

    def row_updates(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """(step indices, key tile indices) at which the tiled lane updated `row`."""
        return self.tiled_lane.steps_of("update", row // self.schedule.block_q)

    def tiles_seen(self, row: int, step: int) -> int:
        """How many key tiles (by index) `row`'s block has been updated with after `step`
        (the tile of its last update, plus one; 0 before any)."""
        steps, tiles = self.row_updates(row)
        n = int(np.searchsorted(steps, step, side="right"))
        return int(tiles[n - 1]) + 1 if n else 0

    def row_state(self, row: int, step: int) -> RowState:
        """The tiled lane's state of `row` after step `step` (-1 = before the first step)."""
        tile = self.tiles_seen(row, step)
        h = self.row_history(row)
        return RowState(tile, float(h.m[tile]), float(h.l[tile]), h.a[tile], float(h.alpha[tile]))

    def dense_partial_output(self, block: int, tile: int) -> np.ndarray:
        """The dense lane's O_i accumulator after key tiles 0..tile: Σ_{j ≤ tile} P_ij V_j.

        Phase 3 of the dense lane reads P_ij and V_j tile by tile and sums them into O_i
        on chip; after the last tile this is the reference output of the block's rows.
        """
        r0, r1 = self.schedule.rows(block)
        c1 = self.schedule.cols(tile)[1]
        return self._probs(r0, r1, 0, c1) @ self.v[:c1]

    @cached_property
    def max_abs_error(self) -> float:
        """Largest |tiled − reference| over the output (the build's worker asks first)."""
        return float(
            np.max(np.abs(self.tiled_output.astype(np.float64) - self.reference), initial=0.0)
        )

    @cached_property
    def overflow(self) -> str | None:
        """One sentence if the tiled lane overflowed the dtype (attention.overflow_notice),
        else None; made once, on the build's worker."""
        return overflow_notice(self.q, self.k, self.v, self.dtype, self.tiled_output)
