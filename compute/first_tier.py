"""The numbers a view shows first, exact, without forming all of S.

- S's block means: the mean of S over a block of rows I and columns J is
  mean(Q_I) · mean(K_J)ᵀ · scale (S is bilinear in Q and K), so the display grid of S
  costs one (cells × d) product, not N_q · N_k · d. Only the cells a causal mask cuts
  need their entries (a diagonal band: one small product per row of cells).
- |S| and P on a few evenly spaced whole rows, for S's and P's colour scales.
- A few query rows' dense softmax statistics and output, and the tiled lane's output,
  over the chunks holding those rows (O(chunk · N_k · d)): what the selected row and
  the current tiles show.
Every row's numbers here are formed in the chunks of compute.full_pass.row_chunks, as
the pass over S forms them, so a row shows the same digits before and after that pass.
"""

from __future__ import annotations

import math

import numpy as np

from . import full_pass
from .attention import (
    _divide_rows,
    _prepare,
    _safe_max,
    causal_mask,
    output_dtype,
    round_to,
)
from .full_pass import BlockMeans, _softmax_chunk, tiled_chunk
from .mask import FULL, SKIPPED, Mask
from .schedule import Schedule


def _cell_sums(x: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray]:
    """Sums of x's rows over consecutive groups of f, and each group's size."""
    n = x.shape[0]
    h = math.ceil(n / f)
    starts = np.arange(h) * f
    if n == h * f:  # groups that divide the rows: a view's sum (reduceat is ~3x slower)
        return x.reshape(h, f, *x.shape[1:]).sum(axis=1), np.minimum(f, n - starts)
    return np.add.reduceat(x, starts, axis=0), np.minimum(f, n - starts)


def score_means(
    q: np.ndarray, k: np.ndarray, *, causal: bool, scale: float, cap: int
) -> BlockMeans:
    """S = Q Kᵀ · scale block-averaged to at most `cap` cells a side, as
    desktop.scene.render.downsample defines it (finite entries; a cell mostly −∞ is −∞)."""
    n_q, n_k = q.shape[0], k.shape[0]
    fr, fc = math.ceil(n_q / cap), math.ceil(n_k / cap)
    qs, rows = _cell_sums(np.asarray(q, dtype=np.float64), fr)
    ks, cols = _cell_sums(np.asarray(k, dtype=np.float64), fc)
    count = np.outer(rows, cols).astype(np.float64)
    mean = (qs @ ks.T) * scale / count  # mean(Q_I) · mean(K_J)ᵀ · scale
    if causal:
        # A cell is whole, empty or cut as a (fr × fc) tile of the mask is (compute.mask).
        classes = Mask.of(causal).tile_classes(n_q, n_k, fr, fc)
        whole, empty = classes == FULL, classes == SKIPPED
        mean[empty] = -np.inf
        _cut_cells(q, k, mean, ~whole & ~empty, count, Mask.of(causal), fr, fc, scale)
    mean.setflags(write=False)
    return BlockMeans(mean, (fr, fc))


CUT_GROUP_ELEMENTS = 1 << 20  # scores of cut cells formed at once (bounded memory)


def _cut_cells(
    q: np.ndarray, k: np.ndarray, mean: np.ndarray, cut: np.ndarray, count: np.ndarray,
    mask: Mask, fr: int, fc: int, scale: float,
) -> None:  # fmt: skip
    """The means of the cells the mask cuts, from their entries: for each row of cells,
    the span from its first cut cell to its last (a diagonal band, a window's edges), all
    such rows at once in groups (one batched product; a loop over 256 rows of cells was
    two thirds of a causal first tier at N = 1024). A cell mostly −∞ is −∞."""
    n_q, n_k = q.shape[0], k.shape[0]
    cell_rows = np.flatnonzero(cut.any(axis=1))
    if not cell_rows.size:
        return
    n_cols = cut.shape[1]
    first = cut[cell_rows].argmax(axis=1)
    span = n_cols - cut[cell_rows, ::-1].argmax(axis=1) - first  # cells, first to last cut
    group = max(1, CUT_GROUP_ELEMENTS // (fr * int(span.max()) * fc))
    for g in range(0, len(cell_rows), group):
        ci, j0, sp = cell_rows[g : g + group], first[g : g + group], span[g : g + group]
        cells = int(sp.max())
        r = ci[:, None] * fr + np.arange(fr)  # (cell rows, fr) query rows
        row_ok = r < n_q
        r = np.minimum(r, n_q - 1)
        c = (j0 * fc)[:, None] + np.arange(cells * fc)  # (cell rows, width) keys
        col_ok = c < np.minimum((j0 + sp) * fc, n_k)[:, None]
        c = np.minimum(c, n_k - 1)
        lo, hi = (x.reshape(r.shape) for x in mask.row_bounds(r.ravel(), n_q, n_k))
        visible = (c[:, None, :] >= lo[:, :, None]) & (c[:, None, :] < hi[:, :, None])
        visible &= row_ok[:, :, None] & col_ok[:, None, :]
        s = np.matmul(q[r], np.swapaxes(k[c], 1, 2)) * scale  # S on the spans
        by_cell = (len(ci), cells, fc)
        total = np.where(visible, s, 0.0).sum(axis=1).reshape(by_cell).sum(axis=2)
        seen = visible.sum(axis=1).reshape(by_cell).sum(axis=2)
        jj = j0[:, None] + np.arange(cells)
        inside = np.arange(cells)[None, :] < sp[:, None]
        ii, jj, total, seen = (
            np.broadcast_to(x, inside.shape)[inside] for x in (ci[:, None], jj, total, seen)
        )
        cell = np.divide(total, seen, out=np.zeros_like(total), where=seen > 0)
        cell[count[ii, jj] - seen > seen] = -np.inf
        mean[ii, jj] = cell


def row_sample(
    q: np.ndarray, k: np.ndarray, *, causal: bool, scale: float, sample: int = 32768
) -> tuple[np.ndarray, np.ndarray]:
    """(|S| finite, P) over evenly spaced whole query rows, about `sample` entries (at
    least one row): for S's and P's colour scales. Whole rows make it one small product
    (gathering `sample` scattered entries cost 76 ms at N = 4096, d = 128), and P on a
    whole row is exact from that row alone."""
    n_q, n_k = q.shape[0], k.shape[0]
    count = min(n_q, max(1, -(-sample // n_k)))
    rows = np.unique(np.linspace(0, n_q - 1, count).round().astype(np.intp))
    s = (q[rows] @ k.T) * scale  # S = Q Kᵀ · scale on those rows
    if causal:
        s = np.where(causal_mask(rows, np.arange(n_k), n_q, n_k, causal), s, -np.inf)
    mx = np.max(s, axis=1, initial=-np.inf)
    p = np.exp(s - _safe_max(mx)[:, None])
    p = _divide_rows(p, p.sum(axis=1))  # P = softmax(S); zeros for a fully masked row
    flat = s.ravel()
    return np.abs(flat[np.isfinite(flat)]), p.ravel()


def dense_rows(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, r0: int, r1: int, *, causal: bool, scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Query rows r0:r1's (row max, row sum, softmax(S) V) in float64, over all keys,
    formed in the pass's chunks that cover them (compute.full_pass.row_chunks): the
    same digits as the pass over S, at the cost of a chunk or two."""
    parts = [
        dense_chunk(q, k, v, a, b, causal=causal, scale=scale) for a, b in _cover(q, k, r0, r1)
    ]
    a0 = _cover(q, k, r0, r1)[0][0]
    return tuple(np.concatenate(x)[r0 - a0 : r1 - a0] for x in zip(*parts, strict=True))  # type: ignore[return-value]


def _cover(q: np.ndarray, k: np.ndarray, r0: int, r1: int) -> list[tuple[int, int]]:
    return full_pass.row_chunks(q.shape[0], k.shape[0], r0, r1)


def dense_chunk(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, r0: int, r1: int, *, causal: bool,
    scale: float, fold: bool = False,
) -> tuple[np.ndarray, ...]:  # fmt: skip
    """One chunk's (row max, row sum, softmax(S) V), as compute.full_pass.dense_pass forms
    it; with `fold` also the float64 tiled lane's output E V / ℓ from the same E."""
    _s, mx, e, sm = _softmax_chunk(q, k, r0, r1, causal, scale)
    out = (mx, sm, _divide_rows(e, sm) @ v)  # O = softmax(S) V
    return (*out, _divide_rows(e @ v, sm)) if fold else out


def tiled_rows(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, s: Schedule, r0: int, r1: int, *,
    scale: float, dtype: str,
) -> np.ndarray:  # fmt: skip
    """The tiled lane's output of rows r0:r1 in its dtype, formed in the chunks that
    cover them as compute.full_pass.tiled_pass forms them (the same digits)."""
    return tiled_rows_state(q, k, v, s, r0, r1, scale=scale, dtype=dtype)[0]


def tiled_rows_state(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, s: Schedule, r0: int, r1: int, *,
    scale: float, dtype: str,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(output in its dtype, L) of the tiled lane's rows r0:r1, as tiled_rows: what the
    backward of those rows reads (its first tier needs no other row's forward)."""
    outs, lses = [], []
    prepared = _prepare(q, k, v, dtype, scale) if dtype != "float64" else None
    chunks = _cover(q, k, r0, r1)
    for a, b in chunks:
        if prepared is None:  # the fold over the dense chunk's E (full_pass.TiledPass)
            _s, m_t, e, l_t = _softmax_chunk(q, k, a, b, s.mask, scale)
            outs.append(_divide_rows(e @ v, l_t))
        else:
            out, m_t, l_t = tiled_chunk(prepared, s, a, b, dtype)
            outs.append(out)
        lses.append(full_pass._lse(m_t, l_t))
    a0 = chunks[0][0]
    out = np.concatenate(outs)[r0 - a0 : r1 - a0]
    return round_to(out, dtype).astype(output_dtype(dtype)), np.concatenate(lses)[r0 - a0 : r1 - a0]
