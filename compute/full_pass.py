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

import dataclasses
import math
import threading
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
from .chunk_pool import ordered_map
from .mask import Mask
from .schedule import Schedule

CHUNK_ELEMENTS = 1 << 19  # scores per chunk (4 MB in float64; two run at once): rows = this / N_k
DISPLAY_CELLS = 256  # S, P, dP and dS are summarised at this many cells a side unless asked
# At most this many rows per chunk of a pass of several: the first tier forms the selected
# block's chunk, so a chunk's rows are that tier's cost. A pass of one chunk stays one (its
# chunk is the whole pass; split, it pays a thread pool and per-chunk sums for nothing).
MAX_CHUNK_ROWS = 128


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
    """Accumulates block sums of row chunks (any rows: a cell a chunk cuts gets its part)."""

    def __init__(self, rows: int, cols: int, cap: int) -> None:
        self.fr, self.fc = math.ceil(rows / cap), math.ceil(cols / cap)
        self.hr, self.hc = math.ceil(rows / self.fr), math.ceil(cols / self.fc)
        self.cols = cols
        self.total = np.zeros((self.hr, self.hc))
        self.count = np.zeros((self.hr, self.hc))
        self.masked = np.zeros((self.hr, self.hc))

    def _span(self, r0: int, n: int) -> tuple[int, int, np.ndarray]:
        """(first cell row, cell rows, rows of the chunk in each)."""
        c0, c1 = r0 // self.fr, (r0 + n - 1) // self.fr + 1
        lo = np.maximum(np.arange(c0, c1) * self.fr, r0)
        hi = np.minimum(np.arange(c0 + 1, c1 + 1) * self.fr, r0 + n)
        return c0, c1 - c0, hi - lo

    def _cells(self, x: np.ndarray, r0: int) -> np.ndarray:
        """Per-cell sums of a row chunk starting at row r0."""
        n = x.shape[0]
        c0, h, _ = self._span(r0, n)
        # Rows first, then columns, on every path: a chunk that cuts a cell gets the
        # digits of one that does not (and a 4-axis sum of a view is 2-7x slower).
        if r0 % self.fr == 0 and n == h * self.fr:
            rows = x.reshape(h, self.fr, self.cols).sum(axis=1, dtype=np.float64)
        else:
            starts = np.maximum(np.arange(c0, c0 + h) * self.fr - r0, 0)
            rows = np.add.reduceat(x, starts, axis=0, dtype=np.float64)
        if self.cols != self.hc * self.fc:
            pad = np.zeros((h, self.hc * self.fc))
            pad[:, : self.cols] = rows
            rows = pad
        return rows.reshape(h, self.hc, self.fc).sum(axis=2)

    def part(self, r0: int, chunk: np.ndarray, all_finite: bool = False) -> tuple:
        """A row chunk's cell sums, to be merged in chunk order (a chunk may share a cell
        row with the next, and then the order of the additions sets the digits)."""
        n = chunk.shape[0]
        c0, h, in_rows = self._span(r0, n)
        if all_finite:
            # No −∞ anywhere (no mask, or P): each cell counts the entries it covers.
            in_cols = np.minimum(self.fc, self.cols - np.arange(self.hc) * self.fc)
            return c0, h, self._cells(chunk, r0), np.outer(in_rows, in_cols), None
        # Finite entries summed and counted, −∞ (masked) counted: three cell sums.
        finite = np.isfinite(chunk)
        return (
            c0,
            h,
            self._cells(np.where(finite, chunk, 0.0), r0),
            self._cells(finite.view(np.uint8), r0),
            self._cells(np.isneginf(chunk).view(np.uint8), r0),
        )

    def merge(self, part: tuple) -> None:
        c0, h, total, count, masked = part
        self.total[c0 : c0 + h] += total
        self.count[c0 : c0 + h] += count
        if masked is not None:
            self.masked[c0 : c0 + h] += masked

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
    tiled64: TiledPass | None = None  # the float64 tiled lane's, from the same products


@dataclass(frozen=True)
class DenseBackward:
    """The dense lane's backward (float64): D = rowsum(dO ∘ O), dP and dS at display
    resolution, a strided sample of |dP| and |dS|, and the gradients (dQ, dK, dV)."""

    D: np.ndarray
    dp_small: BlockMeans
    ds_small: BlockMeans
    sample: np.ndarray
    gradients: tuple[np.ndarray, np.ndarray, np.ndarray]
    tiled64: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # float64 tiled lane's


@dataclass(frozen=True)
class TiledPass:
    """The tiled lane's output in its dtype, L, and the final (m, ℓ, O) in the statistics
    dtype: they depend on the inputs, the mask, B_c, the order and the dtype (not B_r:
    each row's closed form is its own).

    In float64 nothing is rounded, and the closed form's weighted tiles fold into one
    exponential: e^(m_j − m_T) · exp(S_j − m_j) = exp(S_j − m_T) = E, the dense lane's
    unnormalised P, whatever B_c and the order. So the float64 lane is a_T = E V,
    ℓ_T = rowsum(E), m_T = the row max, O = a_T / ℓ_T: formed from the dense pass's S
    and E (dense_pass's `tiled64`), not from scores of its own. It still differs from
    the reference P V (= (E / ℓ) V) where a kernel's result does: the division comes
    after the sum over keys, not before."""

    tiled_output: np.ndarray
    lse: np.ndarray
    tiled_state: tuple[np.ndarray, np.ndarray, np.ndarray]


def softmax_rows(
    q: np.ndarray, k: np.ndarray, rows: np.ndarray, *, causal: bool | Mask, scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Query rows `rows` (consecutive) over all keys, float64: (S, row max, row sum, P)."""
    s64, mx, e, sm = _softmax_chunk(q, k, int(rows[0]), int(rows[-1]) + 1, causal, scale)
    return s64, mx, sm, _divide_rows(e, sm)  # P = softmax(S); zeros for a masked row


def chunk_rows(n_q: int, n_k: int) -> int:
    """Query rows per chunk of every pass over S: about CHUNK_ELEMENTS scores, at most
    MAX_CHUNK_ROWS rows unless one chunk holds every row, a whole number of display
    cells. A row's float64 numbers (S, its statistics, P, O) are the products of its
    chunk wherever they are formed (the pass, or a few rows for the first tier): a
    product's last digit depends on how many rows it is formed for, so one partition
    makes every path give the same digits."""
    fr = math.ceil(n_q / DISPLAY_CELLS)
    chunk = max(1, CHUNK_ELEMENTS // max(1, n_k))
    if chunk < n_q:
        chunk = min(chunk, MAX_CHUNK_ROWS)
    return min(max(1, n_q), max(fr, chunk - chunk % fr))


def row_chunks(n_q: int, n_k: int, r0: int = 0, r1: int | None = None) -> list[tuple[int, int]]:
    """The chunks (chunk_rows) that cover query rows r0:r1 (all rows by default)."""
    r1 = n_q if r1 is None else r1
    c = chunk_rows(n_q, n_k)
    return [(a, min(n_q, a + c)) for a in range((r0 // c) * c, r1, c)]


def _softmax_chunk(q, k, r0: int, r1: int, causal: bool, scale: float):
    """One chunk's float64 (S, row max, E = exp(S − row max), row sum)."""
    n_q, n_k = q.shape[0], k.shape[0]
    s64 = (q[r0:r1] @ k.T) * scale  # S = Q Kᵀ · scale, float64
    if causal:
        s64 = np.where(
            causal_mask(np.arange(r0, r1), np.arange(n_k), n_q, n_k, causal), s64, -np.inf
        )
    mx = np.max(s64, axis=1, initial=-np.inf)
    e = np.exp(s64 - _safe_max(mx)[:, None])
    return s64, mx, e, e.sum(axis=1)


def _lse(m: np.ndarray, l: np.ndarray) -> np.ndarray:  # noqa: E741
    """L = m + log ℓ, −∞ for a row that sees no key."""
    return np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf).astype(l.dtype)


@dataclass
class _Acc:
    """What a pass accumulates over chunks (filled row by row, frozen at the end)."""

    n_q: int
    n_k: int
    d: int
    d_v: int
    cap: int

    def __post_init__(self) -> None:
        n_q, n_k = self.n_q, self.n_k
        self.fields: dict[str, np.ndarray] = {}
        self.means = {name: _Means(n_q, n_k, self.cap) for name in ("S", "P", "dP", "dS")}
        self.samples: dict[str, list] = {"S": [], "P": [], "grad": []}
        self.lock = threading.Lock()

    def rows(self, name: str, r0: int, r1: int, values: np.ndarray) -> None:
        """Rows r0:r1 of field `name` (chunks on two threads: each writes its own rows)."""
        out = self.fields.get(name)
        if out is None:
            with self.lock:
                out = self.fields.get(name)
                if out is None:
                    shape = (self.n_q, *values.shape[1:])
                    out = self.fields[name] = np.empty(shape, values.dtype)
        out[r0:r1] = values

    def add(self, name: str, values: np.ndarray) -> None:
        out = self.fields.get(name)
        self.fields[name] = values.copy() if out is None else np.add(out, values, out=out)

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        return self.fields.get(name, np.zeros(shape))

    def frozen(self, *names: str) -> list[np.ndarray]:
        out = [self.fields[n] for n in names]
        for a in out:
            a.setflags(write=False)
        return out


def dense_pass(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    causal: bool,
    scale: float,
    cap: int,
    do: np.ndarray | None = None,
    forward: DensePass | None = None,
    tiled64: bool = False,
    sample: int = 32768,
    check: Callable[[], None] | None = None,
) -> DensePass:
    """One pass over row chunks (row_chunks) forming each chunk's S and P once: the
    dense lane's forward numbers, and with `do` its backward's in the same loop. With
    `forward` (this pass's forward numbers, made before) only the backward's products
    are formed (S and P again, from the same chunks: the same digits). `tiled64` adds
    the float64 tiled lane's forward (and with `do` its backward) from the same products
    (TiledPass's docstring). `check` is called before each chunk: it raises
    (compute.numbers.Cancelled) to abandon the pass."""
    n_q, n_k, d, d_v = q.shape[0], k.shape[0], q.shape[1], v.shape[1]
    acc = _Acc(n_q, n_k, d, d_v, cap)
    stride = max(1, (n_q * n_k) // sample)
    g_stride = max(1, (n_q * n_k) // 16384)
    fold = tiled64 and (forward is None or forward.tiled64 is None)

    def chunk(rows: tuple[int, int]) -> tuple[dict, dict, dict]:
        """One chunk's products: its rows written into acc (each chunk its own), the
        sums over chunks, the cell sums and the samples returned, to be added in chunk
        order (compute.chunk_pool)."""
        r0, r1 = rows
        sums: dict[str, np.ndarray] = {}
        means: dict[str, tuple] = {}  # cell sums (_Means.part), merged in chunk order
        samples: dict[str, list] = {"S": [], "P": [], "grad": []}
        s64, mx, e, sm = _softmax_chunk(q, k, r0, r1, causal, scale)
        p = _divide_rows(e, sm)  # P = softmax(S); zeros for a fully masked row
        if forward is None:
            acc.rows("row_max", r0, r1, mx)
            acc.rows("row_sum", r0, r1, sm)
            reference = p @ v  # O = P V
            acc.rows("reference", r0, r1, reference)
            means["S"] = acc.means["S"].part(r0, s64, all_finite=not causal)
            means["P"] = acc.means["P"].part(r0, p, all_finite=True)  # P is finite (0 where masked)
            first = (-(r0 * n_k)) % stride  # the same global stride across chunks
            flat, p_flat = s64.ravel()[first::stride], p.ravel()[first::stride]
            samples["S"].append(np.abs(flat[np.isfinite(flat)]))
            samples["P"].append(p_flat.copy())  # a copy: a view keeps the chunk alive
        else:
            reference = forward.reference[r0:r1]
        if fold:  # the float64 tiled lane: a_T = E V, ℓ_T = rowsum(E) (TiledPass)
            o_t = _divide_rows(e @ v, sm)
            acc.rows("tiled_output", r0, r1, o_t)
        del e  # (the chunk's arrays are few at a time: the memory estimate counts them)
        if do is None:
            return sums, means, samples
        # The standard backward on the same P: D = rowsum(dO ∘ O), then five products.
        do_c = do[r0:r1]
        d_ref = np.sum(do_c * reference, axis=1)
        acc.rows("D", r0, r1, d_ref)
        dp = do_c @ v.T  # dP = dO Vᵀ
        ds = dp - d_ref[:, None]
        ds *= p  # dS = P ∘ (dP − D)
        sums["dv"] = p.T @ do_c  # dV = Pᵀ dO, summed over row chunks
        acc.rows("dq", r0, r1, (ds @ k) * scale)  # dQ = dS K · scale
        sums["dk"] = (ds.T @ q[r0:r1]) * scale  # dK = dSᵀ Q · scale
        means["dP"] = acc.means["dP"].part(r0, dp, all_finite=True)
        means["dS"] = acc.means["dS"].part(r0, ds, all_finite=True)
        first = (-(r0 * n_k)) % g_stride
        samples["grad"] += [
            np.abs(dp.ravel()[first::g_stride]),
            np.abs(ds.ravel()[first::g_stride]),
        ]
        if tiled64:  # the float64 tiled backward on the same S and dP
            if not fold:
                o_t = forward.tiled64.tiled_output[r0:r1]
            _tiled64_backward_chunk(acc, sums, r0, r1, s64, dp, mx, sm, o_t, do_c, q, k, scale)
        return sums, means, samples

    for sums, means, samples in ordered_map(chunk, row_chunks(n_q, n_k), check):
        for name, values in sums.items():
            acc.add(name, values)
        for name, part in means.items():
            acc.means[name].merge(part)
        for name, values in samples.items():
            acc.samples[name] += values
    if forward is None:
        row_max, row_sum, reference = acc.frozen("row_max", "row_sum", "reference")
        forward = DensePass(
            row_max, row_sum, reference, acc.means["S"].result(), acc.means["P"].result(),
            np.concatenate(acc.samples["S"]), np.concatenate(acc.samples["P"]),
        )  # fmt: skip
    if fold:
        (out,) = acc.frozen("tiled_output")
        forward = dataclasses.replace(forward, tiled64=_tiled64(out, forward))
    if do is None:
        return forward
    (d_ref, dq) = acc.frozen("D", "dq")
    dk, dv = acc.get("dk", (n_k, d)), acc.get("dv", (n_k, d_v))
    for a in (dk, dv):
        a.setflags(write=False)
    tiled_grads = None
    if tiled64:
        tiled_grads = tuple(acc.frozen("tq")) + (acc.get("tk", (n_k, d)), acc.get("tv", (n_k, d_v)))
        for a in tiled_grads:
            a.setflags(write=False)
    backward = DenseBackward(
        d_ref, acc.means["dP"].result(), acc.means["dS"].result(),
        np.concatenate(acc.samples["grad"]), (dq, dk, dv), tiled_grads,
    )  # fmt: skip
    return dataclasses.replace(forward, backward=backward)


def _tiled64(out: np.ndarray, dense: DensePass) -> TiledPass:
    """The float64 tiled lane's TiledPass from its folded output and the dense rows'
    statistics (m_T is the row max, ℓ_T the row sum of E)."""
    lse = _lse(dense.row_max, dense.row_sum)
    lse.setflags(write=False)
    return TiledPass(out, lse, (dense.row_max, dense.row_sum, out))


def _tiled64_backward_chunk(acc, sums, r0, r1, s64, dp, mx, sm, o_t, do_c, q, k, scale) -> None:
    """The float64 tiled lane's backward for one chunk (compute.backward_numbers's
    tiled_backward in float64, on the dense pass's S and dP: the same products):
    P̃ = exp(S − L) from its forward's L, D = rowsum(dO ∘ O) on its own O. Overwrites
    s64 (the chunk's S) with P̃; the chunk's parts of dK, dV go into `sums`."""
    lse = _lse(mx, sm)
    pt = np.subtract(s64, _safe_max(lse)[:, None], out=s64)  # (S is not read after this)
    np.exp(pt, out=pt)  # P̃ = exp(S − L), recomputed from L
    d_t = np.sum(do_c * o_t, axis=1)  # D = rowsum(dO ∘ O)
    dst = dp - d_t[:, None]
    dst *= pt  # dS = P̃ ∘ (dP − D)
    sums["tv"] = pt.T @ do_c  # dV_j += P̃ᵀ dO_i
    acc.rows("tq", r0, r1, (dst @ k) * scale)  # dQ_i = Σ_j dS_ij K_j · scale
    sums["tk"] = (dst.T @ q[r0:r1]) * scale  # dK_j += dS_ijᵀ Q_i · scale


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
    as in dense_pass. In float64, the fold of TiledPass's docstring on the dense
    chunks' S and E (the same digits as dense_pass's `tiled64`)."""
    if dtype == "float64":
        n_q, n_k = s.n_q, s.n_k
        out, m_t, l_t = np.empty((n_q, s.d_v)), np.empty(n_q), np.empty(n_q)

        def fold(rows: tuple[int, int]) -> None:
            r0, r1 = rows
            _s, m_t[r0:r1], e, l_t[r0:r1] = _softmax_chunk(q, k, r0, r1, s.mask, scale)
            out[r0:r1] = _divide_rows(e @ v, l_t[r0:r1])  # a_T / ℓ_T with a_T = E V

        for _ in ordered_map(fold, row_chunks(n_q, n_k), check):
            pass
        lse = _lse(m_t, l_t)
        for a in (out, m_t, l_t, lse):
            a.setflags(write=False)
        return TiledPass(out, lse, (m_t, l_t, out))
    prepared = _prepare(q, k, v, dtype, scale)
    acc = prepared[0]
    n_q, n_k = s.n_q, s.n_k
    out = np.empty((n_q, s.d_v), dtype=acc)
    m_t, l_t = np.empty(n_q, dtype=acc), np.empty(n_q, dtype=acc)

    def rows_of(rows: tuple[int, int]) -> None:
        r0, r1 = rows
        out[r0:r1], m_t[r0:r1], l_t[r0:r1] = tiled_chunk(prepared, s, r0, r1, dtype)

    for _ in ordered_map(rows_of, row_chunks(n_q, n_k), check):
        pass
    lse = _lse(m_t, l_t)
    tiled = round_to(out, dtype).astype(output_dtype(dtype))
    for a in (tiled, lse, m_t, l_t, out):
        a.setflags(write=False)
    return TiledPass(tiled, lse, (m_t, l_t, out))


def tiled_chunk(prepared: tuple, s: Schedule, r0: int, r1: int, dtype: str):
    """The tiled lane's (O, m_T, ℓ_T) of one chunk of rows (row_chunks) in a narrow
    dtype, from `_prepare`'s rounded inputs: its own scores, the closed form."""
    acc, qd, kd, vd, scale_acc = prepared
    sc = _tile_scores(qd, kd, slice(r0, r1), slice(0, s.n_k), s.n_q, s.n_k, scale_acc, s.mask)
    return _tiled_rows(sc.astype(acc, copy=False), vd, s, dtype, acc)


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
    wide = dtype == "float64"
    dense = dense_pass(q, k, v, causal=s.mask, scale=scale, cap=cap, sample=sample, tiled64=wide)
    return combine(
        dense, dense.tiled64 if wide else tiled_pass(q, k, v, s, scale=scale, dtype=dtype)
    )


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
