"""Exact attention: the float64 dense reference and the tiled online-softmax recurrence.

`dense_attention` materialises the full score matrix and is the reference every other
path is checked against. `tiled_attention` runs the online-softmax recurrence
(running max m, denominator l, numerator a, rescale factor alpha) over K/V tiles, in
either loop order, optionally with the rounding a GPU kernel would apply.

Both loop orders are vectorised over query blocks: query blocks are independent in
the recurrence (FlashAttention-2 runs them in parallel), so processing every block's
rows for one key tile at a time gives exactly the per-block results while keeping
the Python loop at T_c iterations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .dtypes import DTYPE_NAMES, DType
from .mask import SKIPPED, Mask

Order = Literal["q-outer", "kv-outer"]
ORDERS: tuple[str, ...] = ("q-outer", "kv-outer")
DTYPES: tuple[str, ...] = DTYPE_NAMES

# Bytes per element of each input dtype; statistics are float32 unless inputs are float64.
DTYPE_BYTES = {name: DType.of(name).bytes for name in DTYPE_NAMES}


def default_scale(d: int) -> float:
    """The softmax temperature used when none is given: 1/sqrt(d)."""
    return 1.0 / math.sqrt(d)


def causal_offset(n_q: int, n_k: int) -> int:
    """Bottom-right alignment: query row r sees key c iff c <= r + offset."""
    return n_k - n_q


def causal_mask(
    rows: np.ndarray, cols: np.ndarray, n_q: int, n_k: int, mask: Mask | bool = True
) -> np.ndarray:
    """Boolean visibility of keys `cols` to queries `rows` (True = visible) under `mask`
    (by default the bottom-right causal mask; see compute.mask)."""
    return Mask.of(mask).visible(rows, cols, n_q, n_k)


def resolve_mask(causal: Mask | bool, mask: Mask | None) -> Mask:
    """The mask a call names: `mask` when given, else the one `causal` means."""
    return Mask.of(causal) if mask is None else mask


def stats_dtype(dtype: str) -> type[np.floating]:
    """Statistics and accumulators: float64 for float64 inputs, float32 otherwise (as GPUs do)."""
    return np.float64 if dtype == "float64" else np.float32


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round `x` to `dtype`'s precision, returned in the accumulator dtype for that dtype."""
    if dtype == "float64":
        return np.asarray(x, dtype=np.float64)
    if dtype == "float32":
        return np.asarray(x, dtype=np.float32)
    if dtype == "float16":
        # Beyond 65504 the cast gives inf, as a GPU's conversion does; overflow_notice
        # reports it, so NumPy's warning would only repeat it (once per call).
        with np.errstate(over="ignore"):
            return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        # Round-to-nearest-even on the upper 16 bits of the float32 pattern (NaN-free inputs).
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        return ((bits + rounding) & np.uint32(0xFFFF0000)).view(np.float32)
    raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}.")


def output_dtype(dtype: str) -> type[np.floating]:
    """NumPy dtype in which `tiled_attention` returns its output (bfloat16 lives in float32)."""
    return {"float64": np.float64, "float32": np.float32, "float16": np.float16}.get(
        dtype, np.float32
    )


def _safe_max(m: np.ndarray) -> np.ndarray:
    # A row that has seen no key has m = -inf; subtracting it would give -inf - -inf = NaN.
    return np.where(np.isneginf(m), np.zeros_like(m), m)


def _divide_rows(a: np.ndarray, l: np.ndarray) -> np.ndarray:
    # Rows with no visible key have l = 0 and return zeros. A row whose l overflowed
    # (inf or NaN) divides anyway and gives inf/NaN, as a GPU kernel would: hiding it as
    # zeros would look exactly like a fully masked row.
    out = np.zeros_like(a)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        np.divide(a, l[:, None], out=out, where=l[:, None] != 0)
    return out


DTYPE_MAX = {
    "float64": float(np.finfo(np.float64).max),
    "float32": float(np.finfo(np.float32).max),
    "float16": float(np.finfo(np.float16).max),  # 65504
    "bfloat16": 3.3895313892515355e38,
}


def overflow_notice(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, dtype: str, tiled_output: np.ndarray
) -> str | None:
    """One sentence if the tiled lane overflowed `dtype` (inputs or scores), else None."""
    largest = max(float(np.max(np.abs(x), initial=0.0)) for x in (q, k, v))
    if largest > DTYPE_MAX[dtype]:
        return (
            f"Inputs reach {largest:.3g}, beyond {dtype}'s largest value "
            f"{DTYPE_MAX[dtype]:.5g}: the tiled lane overflows to inf/NaN, as a GPU would; "
            "lower the input scale or choose a wider dtype."
        )
    bad = int(
        np.count_nonzero(~np.isfinite(np.asarray(tiled_output, dtype=np.float64)).any(axis=1))
    )
    if bad:
        return (
            f"{bad} row(s) of the tiled output overflowed {dtype} to inf/NaN (scores beyond "
            "its range), as a GPU would; lower the input scale or choose a wider dtype."
        )
    return None


def dense_lane(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    causal: bool | Mask = False,
    scale: float | None = None,
    rows: np.ndarray | None = None,
    mask: Mask | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dense path's S (−∞ where masked), P and output O, all float64.

    With `rows`, only those query rows are computed (a sample for large problems); the
    mask still aligns them against the full N_q. Fully masked rows give P = O = 0.
    `mask` (a compute.mask.Mask) overrides `causal`.
    """
    mask = resolve_mask(causal, mask)
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    n_q, n_k = len(q), len(k)
    rows = np.arange(n_q) if rows is None else np.asarray(rows)
    scale = default_scale(q.shape[1]) if scale is None else float(scale)
    s = (q[rows] @ k.T) * scale
    if not mask.is_none:
        s = np.where(mask.visible(rows, np.arange(n_k), n_q, n_k), s, -np.inf)
    m = np.max(s, axis=1, initial=-np.inf)
    p = np.exp(s - _safe_max(m)[:, None])
    l = p.sum(axis=1)
    return s, _divide_rows(p, l), _divide_rows(p @ v, l)


def dense_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    causal: bool | Mask = False,
    scale: float | None = None,
    rows: np.ndarray | None = None,
    mask: Mask | None = None,
) -> np.ndarray:
    """Materialised softmax(Q Kᵀ · scale) V in float64: the reference for every other path.

    With `rows`, only those query rows are computed; see `dense_lane`.
    """
    return dense_lane(q, k, v, causal=causal, scale=scale, rows=rows, mask=mask)[2]


def tile_visibility(
    n_q: int, n_k: int, block_q: int, block_k: int, causal: bool | Mask
) -> np.ndarray:
    """(T_r, T_c) booleans: True where some row of query block i can see some key of tile j
    (`causal` is a Mask or the bool that means bottom-right causal / none)."""
    return Mask.of(causal).tile_classes(n_q, n_k, block_q, block_k) != SKIPPED


@dataclass(frozen=True)
class RowHistory:
    """Per-row online-softmax state after each key tile (index 0 = before any tile).

    m, l, alpha: (N_q, T_c + 1); a: (N_q, T_c + 1, d_v). alpha[:, j + 1] is the factor
    that rescaled the old sums at tile j (zero before any key is seen, one when the tile
    was skipped or did not raise the max). p_tilde (N_q, N_k) holds, for every score,
    the exponentiated value the recurrence formed with that tile's running max.
    """

    m: np.ndarray
    l: np.ndarray
    a: np.ndarray
    alpha: np.ndarray
    p_tilde: np.ndarray

    @classmethod
    def empty(cls, rows: int, t_c: int, n_k: int, d_v: int, acc, alpha: float = 0.0):
        """The state before any tile (m = −∞, ℓ = a = 0) in every column; α = `alpha`."""
        return cls(
            m=np.full((rows, t_c + 1), -np.inf, dtype=acc),
            l=np.zeros((rows, t_c + 1), dtype=acc),
            a=np.zeros((rows, t_c + 1, d_v), dtype=acc),
            alpha=np.full((rows, t_c + 1), alpha, dtype=acc),
            p_tilde=np.zeros((rows, n_k), dtype=acc),
        )


def _prepare(q, k, v, dtype, scale):
    acc = stats_dtype(dtype)
    qd, kd, vd = (
        round_to(np.asarray(x, dtype=np.float64), dtype).astype(acc, copy=False) for x in (q, k, v)
    )
    scale = default_scale(qd.shape[1]) if scale is None else float(scale)
    return acc, qd, kd, vd, acc(scale)


def _tile_scores(qd, kd, rows, cols, n_q, n_k, scale, causal, row0=0):
    """S_ij = Q_i K_jᵀ · scale, −∞ where `causal` (a Mask, or the bool for bottom-right
    causal) hides the key; qd's row 0 is row `row0` of the N_q-row problem."""
    s = (qd[rows] @ kd[cols].T) * scale  # S_ij = Q_i K_jᵀ · scale
    mask = Mask.of(causal)
    if not mask.is_none:
        r = row0 + np.arange(len(qd))[rows]
        c = np.arange(n_k)[cols]
        s = np.where(mask.visible(r, c, n_q, n_k), s, s.dtype.type(-np.inf))
    return s


def _tile_update(order, s, m_old, l_old, carried, v_tile, dtype, acc):
    """One key tile's recurrence step for the rows of the score tile `s` (`_run`'s loop body,
    and `recurrence.TileCursor`'s).

    `carried` is what the order keeps per row: the numerator a (q-outer) or O = a/ℓ
    (kv-outer, Algorithm 1). Returns (m_new, ℓ_new, α, P̃ against the running max, the new
    carried rows, the unnormalised numerator a after the tile).
    """
    if order == "q-outer":
        m_new = np.maximum(m_old, s.max(axis=1))  # m_new = max(m, rowmax(S_ij))
        m_ref = _safe_max(m_new)
        alpha = np.exp(m_old - m_ref)  # α = exp(m − m_new); 0 before any key is seen
        p = np.exp(s - m_ref[:, None])  # P̃_ij = exp(S_ij − m_new)
        l_new = alpha * l_old + p.sum(axis=1)  # ℓ = α ℓ + rowsum(P̃_ij)
        # a = α a + P̃_ij V_j, with P̃ rounded to the input dtype before the matmul.
        a_now = alpha[:, None] * carried + round_to(p, dtype).astype(acc) @ v_tile
        return m_new, l_new, alpha, p, a_now, a_now
    m_tile = s.max(axis=1)  # m̃_ij = rowmax(S_ij)
    p = np.exp(s - _safe_max(m_tile)[:, None])  # P̃_ij = exp(S_ij − m̃_ij)
    l_tile = p.sum(axis=1)  # ℓ̃_ij = rowsum(P̃_ij)
    m_new = np.maximum(m_old, m_tile)  # m_new = max(m_i, m̃_ij)
    m_ref = _safe_max(m_new)
    alpha = np.exp(m_old - m_ref)  # e^{m_i − m_new}
    beta = np.exp(m_tile - m_ref)  # e^{m̃_ij − m_new}
    l_new = alpha * l_old + beta * l_tile  # ℓ_new = e^{..} ℓ_i + e^{..} ℓ̃_ij
    pv = round_to(p, dtype).astype(acc) @ v_tile
    # O_i = diag(ℓ_new)⁻¹ (diag(ℓ_i) e^{m_i − m_new} O_i + e^{m̃_ij − m_new} P̃_ij V_j)
    a_now = (l_old * alpha)[:, None] * carried + beta[:, None] * pv
    p = p * beta[:, None]  # express P̃ against the running max, as q-outer does
    return m_new, l_new, alpha, p, _divide_rows(a_now, l_new), a_now


def _run(q, k, v, block_q, block_k, order, causal, scale, dtype, record, rows_of=None):
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {order!r}.")
    if block_q < 1 or block_k < 1:
        raise ValueError("block_q and block_k must be at least 1.")
    acc, qd, kd, vd, scale = _prepare(q, k, v, dtype, scale)
    n_q, n_k, d_v = len(qd), len(kd), vd.shape[1]
    causal = Mask.of(causal)
    # rows_of = (r0, N): Q holds rows r0.. of an N-row problem, masked as its rows are.
    row0, n_all = rows_of if rows_of is not None else (0, n_q)
    t_c = math.ceil(n_k / block_k)
    visible = causal.row_tile_classes(row0, row0 + n_q, n_all, n_k, block_q, block_k) != SKIPPED
    m = np.full(n_q, -np.inf, dtype=acc)
    l = np.zeros(n_q, dtype=acc)
    # q-outer carries the unnormalised numerator a; kv-outer (Algorithm 1) carries O = a/l.
    a = np.zeros((n_q, d_v), dtype=acc)
    o = np.zeros((n_q, d_v), dtype=acc)
    hist = None
    if record:
        hist = RowHistory.empty(n_q, t_c, n_k, d_v, acc)
    for j in range(t_c):
        cols = slice(j * block_k, min(n_k, (j + 1) * block_k))
        active_blocks = np.flatnonzero(visible[:, j])
        if record:
            hist.m[:, j + 1], hist.l[:, j + 1], hist.alpha[:, j + 1] = m, l, 1
            hist.a[:, j + 1] = a if order == "q-outer" else o * l[:, None]
        if active_blocks.size == 0:
            continue
        # Every mask's visible blocks of a tile are one contiguous run (compute.mask).
        rows = slice(
            int(active_blocks[0]) * block_q, min(n_q, (int(active_blocks[-1]) + 1) * block_q)
        )
        s = _tile_scores(qd, kd, rows, cols, n_all, n_k, scale, causal, row0)
        acc_rows = a[rows] if order == "q-outer" else o[rows]
        m_new, l_new, alpha, p, carried, a_now = _tile_update(
            order, s, m[rows], l[rows], acc_rows, vd[cols], dtype, acc
        )
        if order == "q-outer":
            a[rows] = carried
        else:
            o[rows] = carried
        m[rows], l[rows] = m_new, l_new
        if record:
            hist.m[rows, j + 1], hist.l[rows, j + 1] = m_new, l_new
            hist.alpha[rows, j + 1] = alpha
            hist.a[rows, j + 1] = a_now
            hist.p_tilde[rows, cols] = p
    out = _divide_rows(a, l) if order == "q-outer" else o  # one division at the end (q-outer)
    out = round_to(out, dtype).astype(output_dtype(dtype))
    with np.errstate(invalid="ignore"):
        lse = np.where(l == 0, -np.inf, m + np.log(np.where(l == 0, 1, l))).astype(acc)
    return out, lse, hist


def tiled_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    block_q: int,
    block_k: int,
    order: Order = "q-outer",
    causal: bool | Mask = False,
    scale: float | None = None,
    dtype: str = "float64",
    return_lse: bool = False,
    mask: Mask | None = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact attention by the online-softmax recurrence over (block_q × block_k) tiles.

    order="q-outer" is the query-resident schedule (FlashAttention-2's forward
    order); order="kv-outer" is Algorithm 1 of the original paper. With a dtype other
    than float64, inputs and P̃ are rounded to that dtype and statistics kept in float32,
    as a GPU kernel does. With return_lse, also returns L = m + log ℓ per row (-inf for a
    row that sees no key). `mask` (a compute.mask.Mask) overrides `causal`.
    """
    causal = resolve_mask(causal, mask)
    # Overflow gives inf/NaN silently here, as on a GPU; overflow_notice reports it.
    with np.errstate(over="ignore", invalid="ignore"):
        out, lse, _ = _run(q, k, v, block_q, block_k, order, causal, scale, dtype, record=False)
    return (out, lse) if return_lse else out


def tiled_attention_history(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    block_q: int,
    block_k: int,
    order: Order = "q-outer",
    causal: bool | Mask = False,
    scale: float | None = None,
    dtype: str = "float64",
    mask: Mask | None = None,
    rows_of: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray, RowHistory]:
    """`tiled_attention` that also records every row's state after each key tile. With
    rows_of = (r0, N), Q is rows r0.. of an N-row problem and is masked as those rows."""
    causal = resolve_mask(causal, mask)
    with np.errstate(over="ignore", invalid="ignore"):
        return _run(q, k, v, block_q, block_k, order, causal, scale, dtype, True, rows_of)
