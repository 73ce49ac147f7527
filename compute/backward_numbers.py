"""The backward's numbers of one trace, computed when a view asks and then kept.

A number service composed into compute.trace.Trace beside compute.forward_numbers (it
owns its caches and reads the forward's numbers through that service).

Everything here is derived from Q, K, V, dO and the forward's O and L, on demand:
- the gradients of both lanes (`compute.attention_backward`: dense in float64, the
  reference; tiled in the trace's dtype, FlashAttention-2's Algorithm 2);
- D = rowsum(dO ∘ O) per row (the tiled lane's preprocessing pass, in its dtype);
- one query block's recomputed P̃, dP, dS and dQ after each key tile, one key tile's dK,
  dV after each query block (compute.backward_rows);
- regions of the dense lane's dP and dS (float64), and both at display resolution
  (one chunked pass, as compute.full_pass does for S and P).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attention import _tile_scores, output_dtype, round_to
from .backward_rows import (
    BackwardBlock,
    KeyTile,
    Operands,
    backward_block,
    input_operands,
    key_tile,
    operands,
    row_stats,
)
from .chunk_pool import ordered_map
from .forward_numbers import DISPLAY_CELLS, Check, ForwardNumbers, Memo
from .full_pass import BlockMeans, row_chunks
from .inputs import HISTORY_BLOCKS, HISTORY_KEY_TILES
from .numbers import SHARED


@dataclass(frozen=True)
class BackwardRow:
    """Query row `row`: L, D, the recomputed P̃ row, dQ after each key tile, the reference."""

    row: int
    L: float
    D: float
    p_tilde: np.ndarray  # (N_k,)
    dq: np.ndarray  # (T_c + 1, d)
    dq_reference: np.ndarray  # (d,)


@dataclass(frozen=True)
class KeyRow:
    """Key row `col`: dK and dV after each query block (index 0 = before any), references."""

    col: int
    dk: np.ndarray  # (T_r + 1, d)
    dv: np.ndarray  # (T_r + 1, d_v)
    dk_reference: np.ndarray
    dv_reference: np.ndarray


@dataclass(frozen=True)
class BackwardSummary:
    """The dense lane's dP and dS at display resolution, and samples for a colour scale."""

    dp_small: BlockMeans
    ds_small: BlockMeans
    sample: np.ndarray  # every k-th |dP| and |dS|
    gradients: tuple[np.ndarray, np.ndarray, np.ndarray]  # float64 dense (dQ, dK, dV)
    tiled_gradients: tuple[np.ndarray, np.ndarray, np.ndarray]  # the tiled lane's, its dtype


class BackwardNumbers(Memo):
    """The backward's numbers of one trace (see the module); `forward` is its forward's."""

    def __init__(self, forward: ForwardNumbers) -> None:
        super().__init__()
        if forward.do is None:
            raise ValueError("This trace has no backward pass (dO was not given).")
        self.forward = f = forward
        self.q, self.k, self.v, self.do, self.schedule = f.q, f.k, f.v, f.do, f.schedule
        self.scale, self.dtype, self.tiled_lane, self.do_key = (
            f.scale,
            f.dtype,
            f.tiled_lane,
            f.do_key,
        )
        # Set while a worker makes the selected key's tile after its first paint: no
        # other tile counts as ready meanwhile, so the views mark them computing rather
        # than make one on the GUI thread (desktop.state.worker).
        self.key_tiles_deferred = False

    def _need_do(self) -> np.ndarray:
        if self.do is None:
            raise ValueError("This trace has no backward pass (dO was not given).")
        return self.do

    def _operands(self) -> Operands:
        """The backward's operands, prepared once (compute.backward_rows.Operands)."""

        def run():
            f = self.forward.tiled_pass()  # the tiled lane's O and L: not the dense pass
            return operands(
                self.q, self.k, self.v, self._need_do(), f.tiled_output, f.lse, self.dtype,
                inputs=self._input_operands(),
            )  # fmt: skip

        return self._memo("bwd_operands", 1, None, run)

    def _input_operands(self) -> Operands:
        """The inputs' rounded copies alone (backward_rows.input_operands), shared by
        the every-row operands and a block's own (before the forward's pass)."""
        held = self._caches.get("bwd_operands")
        if held:
            return next(iter(held.values()))
        return self._memo(
            "bwd_inputs", 1, None,
            lambda: input_operands(self.q, self.k, self.v, self._need_do(), self.dtype),
        )  # fmt: skip

    def _block_stats(self, r0: int, r1: int):
        """The block's (L, L_a, D): from the every-row operands once made (or the tiled
        pass, when it is), before them from the block's own rows of the tiled lane."""
        if self.cached("bwd_operands") or self.forward._tiled_found():
            ops = self._operands()
            return ops.lse[r0:r1], ops.lse_a[r0:r1], ops.D[r0:r1]
        o_rows, lse_rows = self.forward.tiled_rows_state(r0, r1)
        return row_stats(self._input_operands(), r0, o_rows, lse_rows, self.dtype)

    def gradients(self, lane: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dQ, dK, dV) of a lane: "dense" the float64 reference, "tiled" FlashAttention-2's
        backward with the trace's dtype emulation. Both come from the chunked pass of
        backward_summary (it forms P, dP and dS anyway): the tiled lane's sums are taken
        over row chunks instead of tile by tile, so they equal compute.attention_backward's
        up to the order of the additions (a test holds them within rounding), and a large
        N with tiny blocks costs no Python loop over thousands of tiles. In float64 the
        tiled lane's are formed in the dense pass's own loop, on its S and dP
        (compute.full_pass.dense_pass's `tiled64`)."""
        g = self.backward_summary(DISPLAY_CELLS)
        return g.gradients if lane == "dense" else g.tiled_gradients

    @property
    def backward_D(self) -> np.ndarray:
        """D = rowsum(dO ∘ O) per row, as the tiled lane's preprocessing pass forms it."""
        return self._operands().D

    @property
    def reference_D(self) -> np.ndarray:
        """D = rowsum(dO ∘ O) in float64 on the reference output (the dense lane's)."""
        found = self._found_dense()
        if found is not None:
            return found.backward.D

        def run():  # before the backward's pass: on every row's reference O, by chunks
            do, o = self._need_do(), self.forward.dense_rows(0, self.schedule.n_q)[2]
            d = np.empty(self.schedule.n_q)
            for r0, r1 in row_chunks(self.schedule.n_q, self.schedule.n_k):
                d[r0:r1] = np.sum(do[r0:r1] * o[r0:r1], axis=1)  # D = rowsum(dO ∘ O)
            d.setflags(write=False)
            return d

        return self._memo("reference_D", 1, None, run)

    def rows_D(self, r0: int, r1: int) -> np.ndarray:
        """D of rows r0:r1 as the tiled lane's preprocessing forms it (backward_D's
        rows), from those rows alone until the every-row operands are made."""
        return self._block_stats(r0, r1)[2]

    def _reference_D_rows(self, r0: int, r1: int) -> np.ndarray:
        """reference_D's rows r0:r1; before the pass over every row, from those rows'
        reference O alone (the same digits: each row's sum is its own)."""
        found = self._found_dense()
        if found is not None or self.cached("reference_D"):
            return self.reference_D[r0:r1]
        o = self.forward.dense_rows(r0, r1)[2]
        return np.sum(self._need_do()[r0:r1] * o, axis=1)  # D = rowsum(dO ∘ O)

    def key_tile_ready(self, tile: int) -> bool:
        """Whether key_tile(tile) is at hand without a pass over every row (it needs every
        row's L and D): in a streamed backward's first tier it is not, nor while
        `key_tiles_deferred`, and views mark it as computing instead of making it on the
        GUI thread."""
        held = tile in self._caches.get("key_tiles", ())
        return held or (not self.key_tiles_deferred and self.forward.summary_cached(DISPLAY_CELLS))

    def _found_dense(self, cap: int = DISPLAY_CELLS):
        """The dense backward pass of these inputs, mask and dO, if made (with the float64
        tiled lane's backward when this trace is float64)."""
        found = SHARED.get("dense", (*self.forward._dense_key(cap), self.do_key))
        if found is None or (self.dtype == "float64" and found.backward.tiled64 is None):
            return None
        return found

    def backward_block(self, block: int) -> BackwardBlock:
        """Query block `block`'s backward numbers (a few blocks are kept)."""
        r0, r1 = self.schedule.rows(block)
        # The reference is made when first read; its maker holds the forward's numbers, not
        # self: a block held in self's cache referring back to self would be a cycle, and
        # a discarded trace's caches would wait for the garbage collector.
        forward, n_k = self.forward, self.schedule.n_k
        return self._memo(
            "bwd_blocks", HISTORY_BLOCKS, block,
            lambda: backward_block(
                self._input_operands(), self.schedule, block, scale=self.scale,
                dtype=self.dtype, p_reference=lambda: forward._probs(r0, r1, 0, n_k),
                stats=self._block_stats(r0, r1),
            ),
        )  # fmt: skip

    def key_tile(self, tile: int) -> KeyTile:
        """Key tile `tile`'s dK, dV after each query block (a few tiles are kept)."""
        c0, c1 = self.schedule.cols(tile)
        forward, n_q = self.forward, self.schedule.n_q  # not self (see backward_block)
        return self._memo(
            "key_tiles", HISTORY_KEY_TILES, tile,
            lambda: key_tile(
                self._operands(), self.schedule, tile, scale=self.scale, dtype=self.dtype,
                p_reference=lambda: forward._probs(0, n_q, c0, c1),
                o_reference=lambda: forward.dense_rows(0, n_q)[2],
            ),
        )  # fmt: skip

    def backward_row(self, row: int) -> BackwardRow:
        """Query row `row`'s view of its block's backward numbers."""
        b = self.backward_block(row // self.schedule.block_q)
        r = row - b.r0
        return BackwardRow(
            row, float(b.L[r]), float(b.D[r]), b.p_tilde[r], b.dq[:, r], b.dq_reference[r]
        )

    def key_row(self, col: int) -> KeyRow:
        """Key row `col`'s view of its tile's dK, dV accumulation."""
        t = self.key_tile(col // self.schedule.block_k)
        c = col - t.c0
        return KeyRow(col, t.dk[:, c], t.dv[:, c], t.dk_reference[c], t.dv_reference[c])

    def backward_tiles_done(self, row: int, step: int) -> int:
        """How many key tiles the tiled lane's backward has added into dQ of `row` after
        step `step`: tiles are visited in order, so the count is the last tile seen + 1."""
        steps, tiles = self.tiled_lane.steps_of("bwd_update", row // self.schedule.block_q)
        n = int(np.searchsorted(steps, step, side="right"))
        return int(tiles[n - 1]) + 1 if n else 0

    def backward_blocks_done(self, col: int, step: int) -> int:
        """How many query blocks (by index) have added into dK, dV of key `col` after step
        `step`: key tile j's segment visits its blocks in order, three steps each."""
        s, lane = self.schedule, self.tiled_lane
        j = col // s.block_k
        p = len(lane.parts) - 1  # the backward's K/V-outer loop is the lane's last part
        part = lane.parts[p]
        seg = int(np.searchsorted(lane.seg_part, p)) + j
        lo, hi = lane._span_of(part)
        start = int(lane.seg_start[seg]) + len(part.head)
        updates = start + np.arange(hi[j] - lo[j]) * len(part.inner) + 1
        n = int(np.searchsorted(updates, step, side="right"))
        return int(lo[j]) + n if n else 0

    # ---- the dense lane's dP and dS ---------------------------------------------------
    def grad_region(self, name: str, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """The dense lane's dP (= dO Vᵀ) or dS (= P ∘ (dP − D)) over a region, float64."""

        def run():
            do = self._need_do()
            dp = do[r0:r1] @ self.v[c0:c1].T  # dP = dO Vᵀ
            out = dp
            if name == "dS":  # dS = P ∘ (dP − D), D = rowsum(dO ∘ O)
                d_rows = self._reference_D_rows(r0, r1)
                out = self.forward._probs(r0, r1, c0, c1) * (dp - d_rows[:, None])
            out.setflags(write=False)
            return out

        return self._memo("grad_region", 6, (name, r0, r1, c0, c1), run)

    def backward_summary(self, cap: int, check: Check = None) -> BackwardSummary:
        """dP and dS at `cap` cells a side (block means), in one chunked pass over rows;
        `check` is called between chunks and may raise to cancel (nothing is kept)."""
        return self._memo("bwd_summary", 1, cap, lambda: self._backward_summary(cap, check))

    def _tiled_backward_key(self) -> tuple:
        return (*self.forward._tiled_key(), self.do_key)

    def summary_cached(self, cap: int = DISPLAY_CELLS) -> bool:
        """Whether `backward_summary(cap)` would find its passes done (this trace's, or
        the shared ones of the same inputs, mask, B_c, order and dtype)."""
        if self._holds("bwd_summary", cap):
            return True
        if self._found_dense(cap) is None or not self.forward.summary_cached(cap):
            return False
        return (
            self.dtype == "float64"
            or SHARED.get("tiled_backward", self._tiled_backward_key()) is not None
        )

    def _backward_summary(self, cap: int, check: Check = None) -> BackwardSummary:
        self._need_do()
        # The same pass as the forward's S and P (in float64 with the tiled lane's).
        dense = self.forward.dense_pass(cap, check).backward
        if self.dtype == "float64":
            tiled = dense.tiled64
        else:
            self.forward.tiled_pass(check)  # the tiled lane's L, which its backward reads
            tiled = SHARED.value(
                "tiled_backward",
                self._tiled_backward_key(),
                lambda: tiled_backward(
                    self._operands(), self.schedule, self.scale, self.dtype, check=check
                ),
            )
        return BackwardSummary(dense.dp_small, dense.ds_small, dense.sample, dense.gradients, tiled)


def tiled_backward(
    ops: Operands, s, scale: float, dtype: str, check: Check = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tiled lane's (dQ, dK, dV) in a narrow dtype, over row chunks (in float64 the
    dense pass forms them, compute.full_pass.dense_pass's `tiled64`): inputs, O and dO
    rounded to the dtype, statistics and accumulators in the statistics dtype, P̃ =
    exp(S − L) from its forward's L (as compute.backward), P̃ and dS rounded before their
    matmuls as a kernel does. Only the order of the additions differs from the tile loop."""
    acc, qd, kd, vd, dod = ops.acc, ops.qd, ops.kd, ops.vd, ops.dod
    lse, d_t, sc_t = ops.lse_a, ops.D, acc(scale)  # lse_a: P̃ = 0 on −∞ rows
    tq = np.empty((s.n_q, s.d), dtype=acc)
    tk, tv = np.zeros((s.n_k, s.d), dtype=acc), np.zeros((s.n_k, s.d_v), dtype=acc)

    def chunk(rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """dQ of the chunk's rows (written), its parts of dV and dK (added in order)."""
        r0, r1 = rows
        st = _tile_scores(qd, kd, slice(r0, r1), slice(0, s.n_k), s.n_q, s.n_k, sc_t, s.mask)
        pt = np.exp(st - lse[r0:r1, None])
        dst = round_to(pt * (dod[r0:r1] @ vd.T - d_t[r0:r1, None]), dtype).astype(acc)
        tq[r0:r1] = (dst @ kd) * sc_t  # dQ_i = Σ_j dS_ij K_j · scale
        # dV_j += P̃ᵀ dO_i, dK_j += dS_ijᵀ Q_i · scale
        return round_to(pt, dtype).astype(acc).T @ dod[r0:r1], (dst.T @ qd[r0:r1]) * sc_t

    with np.errstate(over="ignore", invalid="ignore"):
        for dv_part, dk_part in ordered_map(chunk, row_chunks(s.n_q, s.n_k), check):
            tv += dv_part
            tk += dk_part
    out = output_dtype(dtype)  # gradients leave the kernel in the input dtype
    tiled = tuple(round_to(g, dtype).astype(out) for g in (tq, tk, tv))
    for x in tiled:
        x.setflags(write=False)
    return tiled
