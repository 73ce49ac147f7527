"""The backward pass of exact attention: the standard dense backward and FlashAttention-2's.

Forward: S = Q Kᵀ · scale (−∞ where masked), P = softmax(S), O = P V. Given dO = ∂φ/∂O,
    dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP − D),   dQ = dS K · scale,   dK = dSᵀ Q · scale,
with D = rowsum(P ∘ dP) = rowsum(dO ∘ O) (the softmax Jacobian applied row by row).

`method="dense"` materialises P, dP and dS (N_q × N_k each), as the standard implementation
stores them in HBM. `method="tiled"` is Algorithm 2 of the FlashAttention-2 paper, K/V tile
outer: the forward saves only O and the per-row log-sum-exp L = m + log ℓ, a preprocessing
pass forms D = rowsum(dO ∘ O), and every tile recomputes S_ij and P_ij = exp(S_ij − L_i)
on chip. dK_j and dV_j accumulate on chip across query blocks; dQ_i accumulates in HBM.

The tiled loop is vectorised over query blocks: for one key tile every visible block's rows
are processed at once (they are independent given L and D), so Python loops over the T_c
tiles only. With a dtype other than float64, inputs, O and dO are rounded to that dtype,
statistics and accumulators are float32, and P̃ and dS are rounded to the dtype before each
matmul, as a GPU kernel does; the dense method stores P, dP and dS in the dtype.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from .attention import (
    _divide_rows,
    _safe_max,
    _tile_scores,
    default_scale,
    output_dtype,
    round_to,
    stats_dtype,
    tile_visibility,
    tiled_attention,
)
from .mask import Mask

Method = Literal["dense", "tiled"]
METHODS: tuple[str, ...] = ("dense", "tiled")

Gradients = tuple[np.ndarray, np.ndarray, np.ndarray]


def _check(q, k, v, do, method, dtype) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}.")
    round_to(np.zeros(1), dtype)  # raises the dtype sentence for an unknown dtype
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2 or do.ndim != 2:
        raise ValueError("Q, K, V and dO must be 2-D matrices.")
    if q.shape[1] != k.shape[1] or len(k) != len(v):
        raise ValueError("Q and K need the same d, and K and V the same number of rows.")
    if do.shape != (len(q), v.shape[1]):
        raise ValueError(
            f"dO has shape {do.shape} but the output O has shape {(len(q), v.shape[1])}; "
            "dO must match O."
        )


def _cast(x: np.ndarray, dtype: str, acc: type[np.floating]) -> np.ndarray:
    """An HBM operand: rounded to the input dtype, held in the accumulator dtype."""
    return round_to(np.asarray(x, dtype=np.float64), dtype).astype(acc)


def _finish(dq, dk, dv, dtype) -> Gradients:
    """Gradients leave the kernel in the input dtype (bfloat16 lives in float32)."""
    out = output_dtype(dtype)
    return tuple(round_to(g, dtype).astype(out) for g in (dq, dk, dv))  # type: ignore[return-value]


def _dense(q, k, v, do, causal, scale, dtype) -> Gradients:
    acc = stats_dtype(dtype)
    qd, kd, vd, dod = (_cast(x, dtype, acc) for x in (q, k, v, do))
    n_q, n_k = len(qd), len(kd)
    scale = acc(scale)
    s = (qd @ kd.T) * scale  # S = Q Kᵀ · scale
    if not causal.is_none:
        s = np.where(causal.visible(np.arange(n_q), np.arange(n_k), n_q, n_k), s, acc(-np.inf))
    m = _safe_max(np.max(s, axis=1, initial=-np.inf))
    e = np.exp(s - m[:, None])
    p = round_to(_divide_rows(e, e.sum(axis=1)), dtype).astype(acc)  # P = softmax(S), stored
    dv = p.T @ dod  # (1) dV = Pᵀ dO
    dp = round_to(dod @ vd.T, dtype).astype(acc)  # (2) dP = dO Vᵀ, stored
    d_row = np.sum(p * dp, axis=1)  # D = rowsum(P ∘ dP)
    ds = round_to(p * (dp - d_row[:, None]), dtype).astype(acc)  # (3) dS = P ∘ (dP − D), stored
    dq = (ds @ kd) * scale  # (4) dQ = dS K · scale
    dk = (ds.T @ qd) * scale  # (5) dK = dSᵀ Q · scale
    return _finish(dq, dk, dv, dtype)


def _tiled(q, k, v, do, causal, scale, dtype, block_q, block_k, saved=None) -> Gradients:
    acc = stats_dtype(dtype)
    # The forward (FlashAttention-2's query-resident order) saves only O and L = m + log ℓ
    # (given in `saved` when the caller has run it already).
    o, lse = saved if saved is not None else tiled_attention(
        q, k, v, block_q=block_q, block_k=block_k, causal=causal, scale=scale, dtype=dtype,
        return_lse=True,
    )  # fmt: skip
    qd, kd, vd, dod, od = (_cast(x, dtype, acc) for x in (q, k, v, do, o))
    n_q, n_k, d = len(qd), len(kd), qd.shape[1]
    scale = acc(scale)
    # A row that sees no key has L = −∞; all its scores are −∞ too, so any finite stand-in
    # gives P = exp(−∞) = 0 there (and never −∞ − −∞ = NaN).
    lse = _safe_max(lse.astype(acc))
    # Preprocessing pass: D_i = rowsum(dO_i ∘ O_i).
    d_row = np.sum(dod * od, axis=1)
    dq = np.zeros((n_q, d), dtype=acc)  # dQ = 0, written to HBM before the main loop
    dk = np.zeros_like(kd)
    dv = np.zeros_like(vd)
    visible = tile_visibility(n_q, n_k, block_q, block_k, causal)
    for j in range(math.ceil(n_k / block_k)):
        # Load K_j, V_j; dK_j = dV_j = 0 on chip.
        cols = slice(j * block_k, min(n_k, (j + 1) * block_k))
        blocks = np.flatnonzero(visible[:, j])
        if blocks.size == 0:
            continue  # no query block sees tile j: dK_j = dV_j = 0
        # Every mask's visible blocks of a tile are one contiguous run (compute.mask). Their
        # rows are processed at once: the inner loop over query blocks i becomes one matmul
        # whose row sum is the accumulation over i.
        rows = slice(int(blocks[0]) * block_q, min(n_q, (int(blocks[-1]) + 1) * block_q))
        s = _tile_scores(qd, kd, rows, cols, n_q, n_k, scale, causal)  # S_ij = Q_i K_jᵀ · scale
        p = np.exp(s - lse[rows, None])  # P_ij = exp(S_ij − L_i), recomputed from the saved L
        p_lo = round_to(p, dtype).astype(acc)  # P̃ in the input dtype for the matmul
        dv[cols] = p_lo.T @ dod[rows]  # dV_j ← dV_j + P_ijᵀ dO_i  (summed over blocks i)
        dp = dod[rows] @ vd[cols].T  # dP_ij = dO_i V_jᵀ
        ds = p * (dp - d_row[rows, None])  # dS_ij = P_ij ∘ (dP_ij − D_i)
        ds_lo = round_to(ds, dtype).astype(acc)  # dS in the input dtype for the matmuls
        dq[rows] += (ds_lo @ kd[cols]) * scale  # dQ_i ← dQ_i + dS_ij K_j · scale  (in HBM)
        dk[cols] = (ds_lo.T @ qd[rows]) * scale  # dK_j ← dK_j + dS_ijᵀ Q_i · scale
        # dK_j and dV_j are complete: written to HBM once per tile (the assignments above).
    return _finish(dq, dk, dv, dtype)


def attention_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    do: np.ndarray,
    *,
    causal: bool | Mask = False,
    scale: float | None = None,
    method: Method = "tiled",
    block_q: int | None = None,
    block_k: int | None = None,
    dtype: str = "float64",
    saved: tuple[np.ndarray, np.ndarray] | None = None,
    mask: Mask | None = None,
) -> Gradients:
    """Gradients (dQ, dK, dV) of attention's output O with respect to Q, K and V, given dO.

    method="dense" is the standard backward from a materialised P; method="tiled" is
    FlashAttention-2's backward (Algorithm 2), recomputing P tile by tile from the saved
    L and D = rowsum(dO ∘ O). Blocks default to 64 (clipped to N) and may exceed N or not
    divide it. `mask` (a compute.mask.Mask; by default the one `causal` means, bottom-right)
    masks as in the forward; a query row that sees no key gets dQ = 0 and contributes
    nothing to dK and dV. Gradients are returned in the
    input dtype (float32 for bfloat16). `saved` = (O, L) of the tiled forward, when the
    caller has them already (method="tiled" then skips running the forward again).
    """
    q, k, v, do = (np.asarray(x, dtype=np.float64) for x in (q, k, v, do))
    _check(q, k, v, do, method, dtype)
    causal = Mask.of(causal) if mask is None else mask
    causal.check(len(q), len(k))
    scale = default_scale(q.shape[1]) if scale is None else float(scale)
    if method == "dense":
        return _dense(q, k, v, do, causal, scale, dtype)
    block_q = min(64, len(q)) if block_q is None else block_q
    block_k = min(64, len(k)) if block_k is None else block_k
    if block_q < 1 or block_k < 1:
        raise ValueError("block_q and block_k must be at least 1.")
    return _tiled(q, k, v, do, causal, scale, dtype, block_q, block_k, saved)
