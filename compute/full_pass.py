"""Everything that needs the whole of S, in one pass over row chunks (never N × N at once).

At N = 4096, S and P in float64 are 134 MB each, and the tiled recurrence with 2×2
blocks loops over 2048 tiles for every row. One pass over chunks of query rows makes:

- the dense lane: each row's softmax statistics (row max, row sum), the float64
  reference output, and S and P block-averaged to the resolution a view draws, plus a
  strided sample of S for a colour scale;
- the tiled lane's output and L, from the recurrence's closed form. Unrolling
  a ← α a + P̃_j V_j and ℓ ← α ℓ + rowsum(P̃_j) over the tiles gives, with m_j the
  running max after tile j and m_T the final one,
      a_T = Σ_j e^(m_j − m_T) P̃_j V_j,   ℓ_T = Σ_j e^(m_j − m_T) rowsum(P̃_j),
  with P̃_j = exp(S_j − m_j) rounded to the input dtype exactly where the loop rounds it
  (Q-outer; KV-outer forms P̃ against the tile's own max m̃_j and weights by e^(m̃_j − m_T)).
  Only the order of the additions differs from the loop (a relative difference of a few
  units in the last place of the statistics dtype); tests hold it to `tiled_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .attention import (
    _divide_rows,
    _prepare,
    _safe_max,
    _tile_scores,
    causal_mask,
    output_dtype,
    round_to,
)
from .mask import Mask
from .schedule import Schedule

CHUNK_ELEMENTS = 1 << 20  # scores per chunk (8 MB in float64): rows = this / N_k


@dataclass(frozen=True)
class BlockMeans:
    """A matrix block-averaged to a display grid (finite entries only; a cell whose
    entries are mostly −∞ is −∞), as `desktop.scene.render.downsample` defines it."""

    values: np.ndarray
    factor: tuple[int, int]


@dataclass(frozen=True)
class FullPass:
    row_max: np.ndarray  # dense softmax: max_c S[r, c] (−∞ for a fully masked row)
    row_sum: np.ndarray  # Σ_c exp(S[r, c] − row_max) (0 for a fully masked row)
    reference: np.ndarray  # float64 softmax(S) V
    tiled_output: np.ndarray  # the tiled lane's O in its dtype
    lse: np.ndarray  # the tiled lane's L = m + log ℓ
    tiled_state: tuple[np.ndarray, np.ndarray, np.ndarray]  # final (m, ℓ, O) in the stats dtype
    scores_small: BlockMeans
    probs_small: BlockMeans
    scores_sample: np.ndarray  # every k-th finite |S|, for a colour scale
    probs_sample: np.ndarray  # the same entries of P


class _Means:
    """Accumulates block sums of row chunks aligned to the row factor."""

    def __init__(self, rows: int, cols: int, cap: int) -> None:
        self.fr, self.fc = math.ceil(rows / cap), math.ceil(cols / cap)
        self.hr, self.hc = math.ceil(rows / self.fr), math.ceil(cols / self.fc)
        self.cols = cols
        self.total = np.zeros((self.hr, self.hc))
        self.count = np.zeros((self.hr, self.hc))
        self.masked = np.zeros((self.hr, self.hc))

    def _cells(self, x: np.ndarray) -> np.ndarray:
        """Per-cell sums of a row chunk, zero-padded where the cells overhang the matrix."""
        n = x.shape[0]
        h = math.ceil(n / self.fr)
        if n == h * self.fr and self.cols == self.hc * self.fc:
            blocks = x  # cells divide the chunk: a view, no copy
        else:
            blocks = np.zeros((h * self.fr, self.hc * self.fc), dtype=x.dtype)
            blocks[:n, : self.cols] = x
        return blocks.reshape(h, self.fr, self.hc, self.fc).sum(axis=(1, 3))

    def add(self, r0: int, chunk: np.ndarray, all_finite: bool = False) -> None:
        n = chunk.shape[0]
        h = math.ceil(n / self.fr)
        c0 = r0 // self.fr
        if all_finite:
            # No −∞ anywhere (no mask, or P): each cell counts the entries it covers.
            in_rows = np.minimum(self.fr, n - np.arange(h) * self.fr)
            in_cols = np.minimum(self.fc, self.cols - np.arange(self.hc) * self.fc)
            self.total[c0 : c0 + h] += self._cells(chunk)
            self.count[c0 : c0 + h] += np.outer(in_rows, in_cols)
            return
        # Finite entries summed and counted, −∞ (masked) counted: three cell sums.
        finite = np.isfinite(chunk)
        self.total[c0 : c0 + h] += self._cells(np.where(finite, chunk, 0.0))
        self.count[c0 : c0 + h] += self._cells(finite.view(np.uint8))
        self.masked[c0 : c0 + h] += self._cells(np.isneginf(chunk).view(np.uint8))

    def result(self) -> BlockMeans:
        mean = np.divide(
            self.total, self.count, out=np.zeros_like(self.total), where=self.count > 0
        )
        mean[self.masked > self.count] = -np.inf
        mean.setflags(write=False)
        return BlockMeans(mean, (self.fr, self.fc))


def _tiles(x: np.ndarray, block_k: int, fill: float) -> np.ndarray:
    """(R, N_k) to (R, T_c, B_c), the last tile padded with `fill`."""
    rows, n_k = x.shape
    t_c = math.ceil(n_k / block_k)
    if t_c * block_k == n_k:
        return x.reshape(rows, t_c, block_k)  # a view: the tiles divide the keys
    pad = np.full((rows, t_c * block_k), fill, dtype=x.dtype)
    pad[:, :n_k] = x
    return pad.reshape(rows, t_c, block_k)


def _over_tile(op: np.ufunc, t: np.ndarray) -> np.ndarray:
    """op-reduce the last axis (a tile's keys). NumPy reduces a short last axis slowly,
    so narrow tiles are combined column by column instead (same operations, same order
    for max; a sum of a few terms in sequence)."""
    if t.shape[2] > 16:
        return op.reduce(t, axis=2)
    out = t[:, :, 0].copy()
    for c in range(1, t.shape[2]):
        op(out, t[:, :, c], out=out)
    return out


def _tiled_rows(sc: np.ndarray, vd: np.ndarray, s: Schedule, dtype: str, acc):
    """The tiled lane's (a_T / ℓ_T, m_T, ℓ_T) for a chunk of rows, from its scores `sc`
    (all keys, or the keys of the first few tiles: the state after those tiles)."""
    n_k = sc.shape[1]
    t = _tiles(sc, s.block_k, -np.inf)
    m_tile = _over_tile(np.maximum, t)  # m̃_j = rowmax(S_j)
    m_run = np.maximum.accumulate(m_tile, axis=1)  # m_j = max(m_{j−1}, m̃_j)
    m_final = m_run[:, -1]
    ref = _safe_max(m_final)
    if s.order == "q-outer":
        base = m_run  # P̃_j = exp(S_j − m_j), formed against the running max
    else:
        base = m_tile  # P̃_j = exp(S_j − m̃_j), against the tile's own max (Algorithm 1)
    p = np.exp(t - _safe_max(base)[:, :, None])
    weight = np.exp(base - ref[:, None])  # e^(m_j − m_T): the product of the later α's
    l_final = (weight * _over_tile(np.add, p)).sum(axis=1)  # ℓ_T = Σ_j e^(m_j − m_T) rowsum(P̃_j)
    rounded = round_to(p, dtype).astype(acc, copy=False) * weight[:, :, None]
    a_final = rounded.reshape(sc.shape[0], -1)[:, :n_k] @ vd  # a_T = Σ_j e^(..) P̃_j V_j
    return _divide_rows(a_final, l_final), m_final, l_final


@dataclass(frozen=True)
class DensePass:
    """The dense lane's numbers: they depend on the inputs and the mask only (not on
    blocks, order, dtype or pass), so compute.numbers caches them by that. With dO the
    same pass over S and P also makes the backward's dense numbers (`backward`)."""

    row_max: np.ndarray
    row_sum: np.ndarray
    reference: np.ndarray
    scores_small: BlockMeans
    probs_small: BlockMeans
    scores_sample: np.ndarray
    probs_sample: np.ndarray
    backward: DenseBackward | None = None


@dataclass(frozen=True)
class DenseBackward:
    """The dense lane's backward (float64): D = rowsum(dO ∘ O), dP and dS at display
    resolution, a strided sample of |dP| and |dS|, and the gradients (dQ, dK, dV)."""

    D: np.ndarray
    dp_small: BlockMeans
    ds_small: BlockMeans
    sample: np.ndarray
    gradients: tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class TiledPass:
    """The tiled lane's output in its dtype, L, and the final (m, ℓ, O) in the statistics
    dtype: they depend on the inputs, the mask, B_c, the order and the dtype (not B_r:
    each row's closed form is its own)."""

    tiled_output: np.ndarray
    lse: np.ndarray
    tiled_state: tuple[np.ndarray, np.ndarray, np.ndarray]


def softmax_rows(
    q: np.ndarray, k: np.ndarray, rows: np.ndarray, *, causal: bool | Mask, scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Query rows `rows` (consecutive) over all keys, float64: (S, row max, row sum, P)."""
    n_q, n_k = q.shape[0], k.shape[0]
    s64 = (q[rows[0] : rows[-1] + 1] @ k.T) * scale  # S = Q Kᵀ · scale, float64
    if causal:
        s64 = np.where(causal_mask(rows, np.arange(n_k), n_q, n_k, causal), s64, -np.inf)
    mx = np.max(s64, axis=1, initial=-np.inf)
    p = np.exp(s64 - _safe_max(mx)[:, None])
    sm = p.sum(axis=1)
    return s64, mx, sm, _divide_rows(p, sm)  # P = softmax(S); zeros for a masked row


def _chunk_rows(n_k: int, fr: int) -> int:
    chunk = max(1, CHUNK_ELEMENTS // n_k)
    return max(fr, chunk - chunk % fr)  # chunks aligned to display cells


def dense_pass(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    causal: bool,
    scale: float,
    cap: int,
    do: np.ndarray | None = None,
    sample: int = 32768,
    check: Callable[[], None] | None = None,
) -> DensePass:
    """One pass over row chunks of S forming each chunk's S and P once: the dense lane's
    forward numbers, and with `do` its backward's in the same loop. `check` is called
    before each chunk: it raises (compute.numbers.Cancelled) to abandon the pass."""
    n_q, n_k, d_v = q.shape[0], k.shape[0], v.shape[1]
    row_max, row_sum = np.empty(n_q), np.empty(n_q)
    reference = np.empty((n_q, d_v))
    s_means, p_means = _Means(n_q, n_k, cap), _Means(n_q, n_k, cap)
    stride = max(1, (n_q * n_k) // sample)
    samples, p_samples = [], []
    chunk = _chunk_rows(n_k, s_means.fr)
    if do is not None:
        d_ref = np.empty(n_q)
        dp_means, ds_means = _Means(n_q, n_k, cap), _Means(n_q, n_k, cap)
        g_stride = max(1, (n_q * n_k) // 16384)
        g_samples = []
        dq = np.empty((n_q, q.shape[1]))
        dk, dv = np.zeros((n_k, q.shape[1])), np.zeros((n_k, d_v))
    for r0 in range(0, n_q, chunk):
        if check is not None:
            check()
        r1 = min(n_q, r0 + chunk)
        rows = np.arange(r0, r1)
        s64, mx, sm, p = softmax_rows(q, k, rows, causal=causal, scale=scale)
        row_max[r0:r1], row_sum[r0:r1] = mx, sm
        reference[r0:r1] = p @ v  # O = P V
        s_means.add(r0, s64, all_finite=not causal)
        p_means.add(r0, p, all_finite=True)  # P is finite everywhere (0 where masked)
        first = (-(r0 * n_k)) % stride  # the same global stride across chunks
        flat, p_flat = s64.ravel()[first::stride], p.ravel()[first::stride]
        samples.append(np.abs(flat[np.isfinite(flat)]))
        p_samples.append(p_flat.copy())  # a copy: a view would keep the whole chunk alive
        if do is None:
            continue
        # The standard backward on the same P: D = rowsum(dO ∘ O), then five products.
        d_ref[r0:r1] = np.sum(do[r0:r1] * reference[r0:r1], axis=1)
        dp = do[r0:r1] @ v.T  # dP = dO Vᵀ
        ds = p * (dp - d_ref[r0:r1, None])  # dS = P ∘ (dP − D)
        dv += p.T @ do[r0:r1]  # dV = Pᵀ dO, summed over row chunks
        dq[r0:r1] = (ds @ k) * scale  # dQ = dS K · scale
        dk += (ds.T @ q[r0:r1]) * scale  # dK = dSᵀ Q · scale
        dp_means.add(r0, dp, all_finite=True)
        ds_means.add(r0, ds, all_finite=True)
        first = (-(r0 * n_k)) % g_stride
        g_samples += [np.abs(dp.ravel()[first::g_stride]), np.abs(ds.ravel()[first::g_stride])]
    for a in (row_max, row_sum, reference):
        a.setflags(write=False)
    backward = None
    if do is not None:
        for a in (d_ref, dq, dk, dv):
            a.setflags(write=False)
        backward = DenseBackward(
            d_ref, dp_means.result(), ds_means.result(), np.concatenate(g_samples), (dq, dk, dv)
        )
    return DensePass(
        row_max, row_sum, reference, s_means.result(), p_means.result(),
        np.concatenate(samples), np.concatenate(p_samples), backward,
    )  # fmt: skip


def tiled_pass(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    s: Schedule,
    *,
    scale: float,
    dtype: str,
    check: Callable[[], None] | None = None,
) -> TiledPass:
    """The tiled lane's closed form (module docstring) over row chunks of its own scores
    (inputs rounded to the dtype, statistics dtype; in float64 the dense scores); `check`
    as in dense_pass."""
    acc, qd, kd, vd, scale_acc = _prepare(q, k, v, dtype, scale)
    n_q, n_k = s.n_q, s.n_k
    out = np.empty((n_q, s.d_v), dtype=acc)
    m_t, l_t = np.empty(n_q, dtype=acc), np.empty(n_q, dtype=acc)
    chunk = max(1, CHUNK_ELEMENTS // n_k)
    for r0 in range(0, n_q, chunk):
        if check is not None:
            check()
        r1 = min(n_q, r0 + chunk)
        sc = _tile_scores(qd, kd, slice(r0, r1), slice(0, n_k), n_q, n_k, scale_acc, s.mask)
        out[r0:r1], m_t[r0:r1], l_t[r0:r1] = _tiled_rows(
            sc.astype(acc, copy=False), vd, s, dtype, acc
        )
    lse = np.where(l_t > 0, m_t + np.log(np.where(l_t > 0, l_t, 1)), -np.inf).astype(acc)
    tiled = round_to(out, dtype).astype(output_dtype(dtype))
    for a in (tiled, lse, m_t, l_t, out):
        a.setflags(write=False)
    return TiledPass(tiled, lse, (m_t, l_t, out))


def combine(dense: DensePass, tiled: TiledPass) -> FullPass:
    """Both lanes' numbers as one FullPass (what the views read)."""
    return FullPass(
        dense.row_max, dense.row_sum, dense.reference, tiled.tiled_output, tiled.lse,
        tiled.tiled_state, dense.scores_small, dense.probs_small, dense.scores_sample,
        dense.probs_sample,
    )  # fmt: skip


def full_pass(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    s: Schedule,
    *,
    scale: float,
    dtype: str,
    cap: int,
    sample: int = 32768,
) -> FullPass:
    """Both lanes' numbers (module docstring): dense_pass and tiled_pass, combined."""
    dense = dense_pass(q, k, v, causal=s.mask, scale=scale, cap=cap, sample=sample)
    return combine(dense, tiled_pass(q, k, v, s, scale=scale, dtype=dtype))


def tiled_state_after(
    qd: np.ndarray, kd: np.ndarray, vd: np.ndarray, s: Schedule, tiles: int, *, scale, dtype, acc
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row's (m, ℓ, O = a/ℓ) after key tiles 0..tiles−1, by the closed form over the
    first tiles · B_c keys (inputs already rounded to the dtype, in the statistics dtype).
    Costs one pass over those keys, wherever the timeline was before."""
    n_q = s.n_q
    keys = min(s.n_k, tiles * s.block_k)
    m = np.full(n_q, -np.inf, dtype=acc)
    l = np.zeros(n_q, dtype=acc)  # noqa: E741
    o = np.zeros((n_q, s.d_v), dtype=acc)
    if keys == 0:
        return m, l, o
    chunk = max(1, CHUNK_ELEMENTS // keys)
    for r0 in range(0, n_q, chunk):
        r1 = min(n_q, r0 + chunk)
        # S = Q Kᵀ · scale over the keys seen
        sc = _tile_scores(qd, kd, slice(r0, r1), slice(0, keys), n_q, s.n_k, scale, s.mask)
        o[r0:r1], m[r0:r1], l[r0:r1] = _tiled_rows(
            sc.astype(acc, copy=False), vd[:keys], s, dtype, acc
        )
    return m, l, o
