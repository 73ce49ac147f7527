"""The standard (dense) attention backward on the GPU: P, dP and dS materialised in device memory.

The dense forward stores P = softmax(Q Kᵀ · scale) (N_q × N_k per head); the backward then
runs the five steps of the paper's standard backward with cuBLAS matmuls (cupy.matmul):
    dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(P ∘ dP)),  dQ = dS K · scale,  dK = dSᵀ Q · scale.
P, dP and dS are held in the inputs' dtype, as that implementation stores them; the row sums
D are float32. Its transfers are cuBLAS's and CuPy's own, so no counting build exists for it:
the ledger's dense lane is its declared model.
"""

from __future__ import annotations

import math


def dense_probabilities_gpu(q, k, *, causal: bool = False, scale: float | None = None):
    """P = softmax(Q Kᵀ · scale) on (BH, N, d) device arrays, in the inputs' dtype (what the
    dense forward saves for its backward). Rows that see no key get P = 0."""
    import cupy

    n_q, n_k = q.shape[1], k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else float(scale)
    s = cupy.matmul(q, k.transpose(0, 2, 1)).astype(cupy.float32)  # S = Q Kᵀ
    s *= cupy.float32(scale)
    if causal:  # bottom-right alignment: row r sees key c iff c <= r + (n_k - n_q)
        hidden = cupy.arange(n_k)[None, :] > cupy.arange(n_q)[:, None] + (n_k - n_q)
        cupy.copyto(s, cupy.float32(-math.inf), where=hidden[None])
    m = s.max(axis=-1, keepdims=True)
    m = cupy.where(cupy.isneginf(m), cupy.float32(0), m)  # no −∞ − −∞ for rows with no key
    p = cupy.exp(s - m)
    denom = p.sum(axis=-1, keepdims=True)
    p /= cupy.where(denom == 0, cupy.float32(1), denom)
    return p.astype(q.dtype, copy=False)


def dense_attention_backward_gpu(
    q, k, v, do, *, p=None, causal: bool = False, scale: float | None = None
):
    """(dQ, dK, dV) on (BH, N, d) device arrays from a materialised P (computed if not given)."""
    import cupy

    scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else float(scale)
    if p is None:
        p = dense_probabilities_gpu(q, k, causal=causal, scale=scale)
    dv = cupy.matmul(p.transpose(0, 2, 1), do)  # (1) dV = Pᵀ dO
    dp = cupy.matmul(do, v.transpose(0, 2, 1))  # (2) dP = dO Vᵀ, stored
    pf = p.astype(cupy.float32, copy=False)
    dpf = dp.astype(cupy.float32, copy=False)
    d_row = (pf * dpf).sum(axis=-1, keepdims=True)  # D = rowsum(P ∘ dP)
    ds = (pf * (dpf - d_row)).astype(q.dtype, copy=False)  # (3) dS = P ∘ (dP − D), stored
    dq = cupy.matmul(ds, k) * q.dtype.type(scale)  # (4) dQ = dS K · scale
    dk = cupy.matmul(ds.transpose(0, 2, 1), q) * q.dtype.type(scale)  # (5) dK = dSᵀ Q · scale
    return dq, dk, dv
