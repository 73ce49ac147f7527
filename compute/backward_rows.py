"""The backward's numbers for one query row or one key row, on demand (what the views show).

FlashAttention's backward (Algorithm 2 of FlashAttention-2, as `compute.backward._tiled`
runs it) never stores P: for query row r it recomputes P̃_r = exp(S_r − L_r) from Q, K and
the saved L, forms dP_r = dO_r Vᵀ and dS_r = P̃_r ∘ (dP_r − D_r) with D_r = rowsum(dO_r ∘ O_r),
and adds dS_rj K_j · scale to dQ_r once per key tile j. A key row c gathers
dV_c = Σ_i P̃_ic dO_i and dK_c = Σ_i dS_ic Q_i · scale across the query blocks i.

These functions do that for one row, in O(N · d), with the dtype emulation of
`compute.backward` (inputs, O and dO rounded to the dtype; statistics and accumulators in
float32; P̃ and dS rounded to the dtype before each matmul), keeping the partial sums after
each tile (query row) or query block (key row), so a view can show them accumulating.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attention import _safe_max, causal_mask, round_to, stats_dtype
from .schedule import Schedule

DO_SEED = 20240  # the seed of the displayed dO when no file gives one (standard normal)


def default_do(n_q: int, d_v: int) -> np.ndarray:
    """dO for the display when none is given: standard normal, seeded with DO_SEED."""
    return np.random.default_rng(DO_SEED).standard_normal((n_q, d_v))


@dataclass(frozen=True)
class BackwardRow:
    """Query row `row`'s backward: L, D, the recomputed P̃ row beside the forward's P row,
    and dQ_row after each key tile (dq[j] = after tiles 0..j−1; dq[T_c] is the result)."""

    row: int
    L: float
    D: float
    p_tilde: np.ndarray  # (N_k,) exp(S − L), recomputed as the backward does
    dq: np.ndarray  # (T_c + 1, d)
    dq_reference: np.ndarray  # (d,) float64 dense reference


@dataclass(frozen=True)
class KeyRow:
    """Key row `col`'s dK and dV after each query block (index 0 = before any)."""

    col: int
    dk: np.ndarray  # (T_r + 1, d)
    dv: np.ndarray  # (T_r + 1, d_v)
    dk_reference: np.ndarray
    dv_reference: np.ndarray


def _operands(q, k, v, do, o, lse, dtype):
    acc = stats_dtype(dtype)
    cast = [round_to(np.asarray(x, dtype=np.float64), dtype).astype(acc) for x in (q, k, v, do, o)]
    # A row that sees no key has L = −∞; its scores are −∞ too, so a finite stand-in gives
    # P̃ = 0 there, never NaN (as compute.backward does).
    return acc, cast, _safe_max(np.asarray(lse).astype(acc))


def backward_row(
    q, k, v, do, o, lse, s: Schedule, row: int, *, scale: float, dtype: str, p_reference
) -> BackwardRow:
    """Query row `row`'s backward numbers; o and lse are the tiled forward's O and L, and
    p_reference the float64 forward P row (for the reference gradient)."""
    acc, (qd, kd, vd, dod, od), lse_a = _operands(q, k, v, do, o, lse, dtype)
    sc = (kd @ qd[row]) * acc(scale)  # S_r = Q_r Kᵀ · scale
    if s.causal:
        sc = np.where(causal_mask(np.array([row]), np.arange(s.n_k), s.n_q, s.n_k)[0], sc, -np.inf)
    p = np.exp(sc - lse_a[row])  # P̃_r = exp(S_r − L_r), recomputed from the saved L
    d_row = np.sum(dod[row] * od[row])  # D_r = rowsum(dO_r ∘ O_r)
    dp = vd @ dod[row]  # dP_r = dO_r Vᵀ
    ds_lo = round_to(p * (dp - d_row), dtype).astype(acc)  # dS_r = P̃_r ∘ (dP_r − D_r)
    dq = np.zeros((s.t_c + 1, s.d), dtype=acc)
    for j in range(s.t_c):  # dQ_r ← dQ_r + dS_rj K_j · scale, once per key tile
        c0, c1 = s.cols(j)
        dq[j + 1] = dq[j] + (ds_lo[c0:c1] @ kd[c0:c1]) * acc(scale)
    # The float64 reference: the dense formulas on the exact P row.
    q64, k64, v64, do64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v, do))
    p64 = np.asarray(p_reference, dtype=np.float64)
    dp64 = v64 @ do64[row]
    ds64 = p64 * (dp64 - np.sum(p64 * dp64))  # D = rowsum(P ∘ dP) = rowsum(dO ∘ O)
    ref = (ds64 @ k64) * scale
    for x in (p, dq, ref):
        x.setflags(write=False)
    return BackwardRow(row, float(lse[row]), float(d_row), p, dq, ref)


def key_row(
    q,
    k,
    v,
    do,
    o,
    lse,
    s: Schedule,
    col: int,
    *,
    scale: float,
    dtype: str,
    p_reference,
    o_reference,
) -> KeyRow:
    """Key row `col`'s dK and dV accumulating over the query blocks; p_reference is the
    float64 forward P column (N_q,) and o_reference the float64 output."""
    acc, (qd, kd, vd, dod, od), lse_a = _operands(q, k, v, do, o, lse, dtype)
    sc = (qd @ kd[col]) * acc(scale)  # S_:c = Q K_cᵀ · scale
    if s.causal:
        mask = causal_mask(np.arange(s.n_q), np.array([col]), s.n_q, s.n_k)[:, 0]
        sc = np.where(mask, sc, -np.inf)
    p = np.exp(sc - lse_a)  # P̃_:c = exp(S_:c − L)
    d_rows = np.sum(dod * od, axis=1)  # D = rowsum(dO ∘ O)
    dp = dod @ vd[col]  # dP_:c = dO V_cᵀ
    p_lo = round_to(p, dtype).astype(acc)
    ds_lo = round_to(p * (dp - d_rows), dtype).astype(acc)  # dS_:c = P̃ ∘ (dP − D)
    dk = np.zeros((s.t_r + 1, s.d), dtype=acc)
    dv = np.zeros((s.t_r + 1, s.d_v), dtype=acc)
    for i in range(s.t_r):  # per query block i (a block that never sees the key adds 0)
        r0, r1 = s.rows(i)
        dv[i + 1] = dv[i] + p_lo[r0:r1] @ dod[r0:r1]  # dV_c ← dV_c + P̃_icᵀ dO_i
        dk[i + 1] = dk[i] + (ds_lo[r0:r1] @ qd[r0:r1]) * acc(scale)  # dK_c ← dK_c + dS_icᵀ Q_i
    q64, v64, do64 = (np.asarray(x, dtype=np.float64) for x in (q, v, do))
    p64 = np.asarray(p_reference, dtype=np.float64)
    dp64 = do64 @ v64[col]
    d64 = np.sum(do64 * np.asarray(o_reference, dtype=np.float64), axis=1)  # D = rowsum(dO ∘ O)
    dk_ref = (p64 * (dp64 - d64)) @ q64 * scale
    dv_ref = p64 @ do64
    for x in (dk, dv, dk_ref, dv_ref):
        x.setflags(write=False)
    return KeyRow(col, dk, dv, dk_ref, dv_ref)
