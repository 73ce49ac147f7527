"""The backward's numbers for one query block or one key tile, on demand (what views show).

FlashAttention's backward (Algorithm 2 of FlashAttention-2, as `compute.backward._tiled`
runs it) never stores P: for query block i it recomputes P̃_i = exp(S_i − L_i) from Q, K
and the saved L, forms dP_i = dO_i Vᵀ and dS_i = P̃_i ∘ (dP_i − D_i) with
D_i = rowsum(dO_i ∘ O_i), and adds dS_ij K_j · scale into dQ_i once per key tile j. Key
tile j gathers dV_j = Σ_i P̃_ijᵀ dO_i and dK_j = Σ_i dS_ijᵀ Q_i · scale over the query
blocks i.

These functions do that for one block's rows (O(B_r · N_k · d)) or one tile's keys
(O(N_q · B_c · d)) with the dtype emulation of `compute.backward` (inputs, O and dO
rounded to the dtype; statistics and accumulators in float32; P̃ and dS rounded to the
dtype before each matmul), keeping the partial sums after each key tile (dQ) or query
block (dK, dV) so a view can show them accumulating, beside float64 references.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

import numpy as np

from .attention import _safe_max, _tile_scores, round_to, stats_dtype
from .running_sums import RunningSums
from .schedule import Schedule

DO_SEED = 20240  # the seed of the displayed dO when no file gives one (standard normal)


@lru_cache(maxsize=2)
def default_do(n_q: int, d_v: int) -> np.ndarray:
    """dO for the display when none is given: standard normal, seeded with DO_SEED,
    read-only and kept for the last two shapes (a new input keeps its shape, and its
    normals cost as much as one of Q, K, V)."""
    do = np.random.default_rng(DO_SEED).standard_normal((n_q, d_v))
    do.setflags(write=False)
    return do


@dataclass(frozen=True)
class BackwardBlock:
    """Query block i's backward (rows r0..r1−1): L, D, the recomputed P̃, dP and dS rows,
    and dQ after each key tile (dq[j] = after tiles 0..j−1; dq[T_c] is the result).

    The float64 reference is made when first read: playback draws the tiles of every
    block it reaches, the reference only the selected row's (the statistics panel)."""

    r0: int
    L: np.ndarray  # (R,)
    D: np.ndarray  # (R,) rowsum(dO ∘ O)
    p_tilde: np.ndarray  # (R, N_k) exp(S − L), recomputed as the backward does
    dp: np.ndarray  # (R, N_k) dO Vᵀ
    ds: np.ndarray  # (R, N_k) P̃ ∘ (dP − D), rounded to the dtype
    dq: RunningSums  # (T_c + 1, R, d), each entry made when asked for
    _reference: Callable[[], np.ndarray] = field(repr=False, compare=False)

    @cached_property
    def dq_reference(self) -> np.ndarray:
        """(R, d) float64 dense reference."""
        return self._reference()

    def make_all(self) -> BackwardBlock:
        """Make now what the statistics panel reads of its row's block (the whole dQ
        history, the reference): the worker does, so the GUI thread finds them made."""
        self.dq.full()
        _ = self.dq_reference
        return self


@dataclass(frozen=True)
class KeyTile:
    """Key tile j's dK and dV after each query block (index 0 = before any), keys c0..c1−1;
    the float64 references made when first read (the selected key's, not playback's)."""

    c0: int
    dk: RunningSums  # (T_r + 1, C, d), each entry made when asked for
    dv: RunningSums  # (T_r + 1, C, d_v)
    _references: Callable[[], tuple[np.ndarray, np.ndarray]] = field(repr=False, compare=False)

    @cached_property
    def _made(self) -> tuple[np.ndarray, np.ndarray]:
        return self._references()

    @property
    def dk_reference(self) -> np.ndarray:
        """(C, d) float64 dense reference."""
        return self._made[0]

    @property
    def dv_reference(self) -> np.ndarray:
        """(C, d_v) float64 dense reference."""
        return self._made[1]

    def make_all(self) -> KeyTile:
        """Make now what the statistics panel reads of its key's tile (the whole dK, dV
        histories, the references): see BackwardBlock.make_all."""
        self.dk.full()
        self.dv.full()
        _ = self._made
        return self


@dataclass(frozen=True)
class Operands:
    """What every block or tile look-up reads, prepared once per trace: the float64
    inputs (for references), the tiled lane's rounded copies in its statistics dtype,
    L with a finite stand-in for rows that see no key, and D = rowsum(dO ∘ O)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray
    acc: type
    qd: np.ndarray
    kd: np.ndarray
    vd: np.ndarray
    dod: np.ndarray
    lse: np.ndarray  # as saved (−∞ for a row that sees no key)
    lse_a: np.ndarray  # −∞ replaced: its scores are −∞ too, so P̃ = 0 there, never NaN
    D: np.ndarray  # rowsum(dO ∘ O), the tiled lane's preprocessing pass


def input_operands(q, k, v, do, dtype: str) -> Operands:
    """The inputs' part of Operands (float64, and rounded to the tiled lane's dtype: the
    float64 inputs themselves, read-only, when that is float64), without L and D: what
    one block's backward reads beside its own rows' L and D (row_stats)."""
    acc = stats_dtype(dtype)
    raw = [np.asarray(x, dtype=np.float64) for x in (q, k, v, do)]
    qd, kd, vd, dod = (round_to(x, dtype).astype(acc, copy=False) for x in raw)
    return Operands(*raw, acc, qd, kd, vd, dod, None, None, None)  # type: ignore[arg-type]


def row_stats(ops: Operands, r0: int, o_rows, lse_rows, dtype: str):
    """(L, L with −∞ replaced, D) of rows r0.. from those rows' O and L alone: the same
    digits as operands() gives them (every quantity is the row's own)."""
    od = round_to(np.asarray(o_rows, float), dtype).astype(ops.acc, copy=False)
    d_rows = np.sum(ops.dod[r0 : r0 + len(od)] * od, axis=1)  # D = rowsum(dO ∘ O)
    lse = np.asarray(lse_rows)
    return lse, _safe_max(lse.astype(ops.acc)), d_rows


def operands(q, k, v, do, o, lse, dtype: str, inputs: Operands | None = None) -> Operands:
    """The operands of the tiled backward for one trace (see Operands); `inputs`, the
    same inputs' input_operands if made (their rounded copies are reused)."""
    ops = inputs if inputs is not None else input_operands(q, k, v, do, dtype)
    lse, lse_a, d_rows = row_stats(ops, 0, o, lse, dtype)
    d_rows.setflags(write=False)
    return replace(ops, lse=lse, lse_a=lse_a, D=d_rows)


def _scores(qd, kd, rows, cols, s: Schedule, scale, acc):
    return _tile_scores(qd, kd, rows, cols, s.n_q, s.n_k, acc(scale), s.mask)  # S = Q Kᵀ · scale


def _split(x: np.ndarray, block: int) -> np.ndarray:
    """(rows, w) to (blocks, block, w): consecutive blocks of rows, the last one padded
    with zero rows (which add nothing to a product)."""
    rows, w = x.shape
    blocks = -(-rows // block)
    if blocks * block != rows:
        x = np.concatenate([x, np.zeros((blocks * block - rows, w), dtype=x.dtype)])
    return x.reshape(blocks, block, w)


def _tiles_of(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray | None]:
    """_split(x, block) as (its blocks but a padded last one, that last one padded) or
    (all of its blocks, None) when `block` divides the rows: the same blocks, without
    a padded copy of the whole of x."""
    rows, w = x.shape
    blocks = -(-rows // block)
    if blocks * block == rows:
        return x.reshape(blocks, block, w), None
    main = (blocks - 1) * block
    return x[:main].reshape(blocks - 1, block, w), _split(x[main:], block)


def _made(x):
    """A reference's operand: given, or made now (a callable: nothing before it is read)."""
    return x() if callable(x) else x


def _frozen(*arrays):
    for x in arrays:
        x.setflags(write=False)


def backward_block(
    ops: Operands, s: Schedule, block: int, *, scale: float, dtype: str, p_reference,
    stats=None,
) -> BackwardBlock:  # fmt: skip
    """Query block `block`'s backward numbers; p_reference is the float64 forward P rows
    of the block (for the reference gradient), or a callable making them when the
    reference is first read; `stats`, the block's (L, L_a, D) from
    row_stats when `ops` has no every-row L and D (input_operands)."""
    acc, qd, kd, vd, dod = ops.acc, ops.qd, ops.kd, ops.vd, ops.dod
    r0, r1 = s.rows(block)
    rows = slice(r0, r1)
    lse, lse_a, d_rows = (
        stats if stats is not None else (ops.lse[rows], ops.lse_a[rows], ops.D[rows])
    )
    sc = _scores(qd, kd, rows, slice(0, s.n_k), s, scale, acc)
    p = np.exp(sc - lse_a[:, None])  # P̃_i = exp(S_i − L_i), recomputed from the saved L
    # D_i = rowsum(dO_i ∘ O_i), the preprocessing pass's
    dp = dod[rows] @ vd.T  # dP_i = dO_i Vᵀ
    # dS_i = P̃_i ∘ (dP_i − D_i)
    ds = round_to(p * (dp - d_rows[:, None]), dtype).astype(acc, copy=False)
    # dQ_i ← dQ_i + dS_ij K_j · scale, once per key tile: the running sums in tile order,
    # each made when asked for (compute.running_sums).
    kd_tiles, kd_last = _tiles_of(kd, s.block_k)
    dq = RunningSums(
        _split(ds.T, s.block_k).transpose(0, 2, 1), kd_tiles, acc(scale), b_last=kd_last
    )

    def reference() -> np.ndarray:  # the float64 reference: the dense formulas on exact P
        k64, v64, do64 = ops.k, ops.v, ops.do
        p64 = np.asarray(_made(p_reference), dtype=np.float64)
        dp64 = do64[rows] @ v64.T
        ds64 = p64 * (dp64 - np.sum(p64 * dp64, axis=1, keepdims=True))  # D = rowsum(P ∘ dP)
        ref = (ds64 @ k64) * scale
        ref.setflags(write=False)
        return ref

    lse_rows = np.asarray(lse, dtype=np.float64)
    _frozen(p, dp, ds, lse_rows, d_rows)
    return BackwardBlock(r0, lse_rows, d_rows, p, dp, ds, dq, reference)


def key_tile(
    ops: Operands, s: Schedule, tile: int, *, scale: float, dtype: str, p_reference, o_reference
) -> KeyTile:
    """Key tile `tile`'s dK and dV accumulating over the query blocks; p_reference is the
    float64 forward P columns (N_q, C) and o_reference the float64 output (either may be
    a callable, called when the references are first read)."""
    acc, qd, kd, vd, dod, lse_a = ops.acc, ops.qd, ops.kd, ops.vd, ops.dod, ops.lse_a
    c0, c1 = s.cols(tile)
    cols = slice(c0, c1)
    sc = _scores(qd, kd, slice(0, s.n_q), cols, s, scale, acc)
    p = np.exp(sc - lse_a[:, None])  # P̃_:j = exp(S_:j − L)
    d_rows = ops.D  # D = rowsum(dO ∘ O)
    dp = dod @ vd[cols].T  # dP_:j = dO V_jᵀ
    p_lo = round_to(p, dtype).astype(acc, copy=False)
    ds_lo = round_to(p * (dp - d_rows[:, None]), dtype).astype(acc, copy=False)  # dS = P̃ ∘ (dP − D)
    # Per query block i (a block that sees no key here adds 0), the running sums in block
    # order, each made when asked for:
    (do_b, do_last), (q_b, q_last) = _tiles_of(dod, s.block_q), _tiles_of(qd, s.block_q)
    p_blocks = _split(p_lo, s.block_q).transpose(0, 2, 1)
    dv = RunningSums(p_blocks, do_b, b_last=do_last)  # dV_j += P̃ᵀ dO_i
    ds_blocks = _split(ds_lo, s.block_q).transpose(0, 2, 1)
    dk = RunningSums(ds_blocks, q_b, acc(scale), b_last=q_last)  # dK_j += dS_ijᵀ Q_i · scale

    def references() -> tuple[np.ndarray, np.ndarray]:
        q64, v64, do64 = ops.q, ops.v, ops.do
        p64 = np.asarray(_made(p_reference), dtype=np.float64)
        dp64 = do64 @ v64[cols].T
        o64 = np.asarray(_made(o_reference), dtype=np.float64)
        d64 = np.sum(do64 * o64, axis=1)  # D = rowsum(dO ∘ O)
        dk_ref = (p64 * (dp64 - d64[:, None])).T @ q64 * scale
        dv_ref = p64.T @ do64
        _frozen(dk_ref, dv_ref)
        return dk_ref, dv_ref

    return KeyTile(c0, dk, dv, references)
