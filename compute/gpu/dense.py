"""The dense GPU path a user would otherwise write: S and P materialised in device memory.

S = Q Kᵀ (cuBLAS via cupy.matmul), scaled and masked in place, softmax written to a new
array P, then O = P V, all in the inputs' dtype. Peak extra memory is S plus P.
"""

from __future__ import annotations

import math


def dense_attention_gpu(q, k, v, *, causal: bool = False, scale: float | None = None):
    """softmax(Q Kᵀ · scale) V on (BH, N, d) device arrays, materialising S and P."""
    import cupy

    n_q, n_k = q.shape[1], k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else float(scale)
    s = cupy.matmul(q, k.transpose(0, 2, 1))  # S = Q Kᵀ, written to HBM
    s *= s.dtype.type(scale)
    if causal:  # bottom-right alignment: row r sees key c iff c <= r + (n_k - n_q)
        rows = cupy.arange(n_q)[:, None]
        hidden = cupy.arange(n_k)[None, :] > rows + (n_k - n_q)
        cupy.copyto(s, s.dtype.type(-math.inf), where=hidden[None])
    m = s.max(axis=-1, keepdims=True)
    if causal and n_q > n_k:  # rows that see no key: avoid -inf - -inf, give zeros
        m = cupy.where(cupy.isneginf(m), m.dtype.type(0), m)
    s -= m
    p = cupy.exp(s)  # P, a second N_q x N_k array
    del s
    denom = p.sum(axis=-1, keepdims=True)
    if causal and n_q > n_k:
        denom = cupy.where(denom == 0, denom.dtype.type(1), denom)
    p /= denom
    return cupy.matmul(p, v)
