"""Float64 NumPy reference on a sample of heads and rows, and the error measures reported.

Attention rows are independent, so the reference for sampled query rows is exact for
those rows; this keeps the check affordable at N = 16384 (the full N x N float64
matrix per head would be 2 GB).
"""

from __future__ import annotations

import math

import numpy as np

from ..attention import dense_attention
from ..mask import Mask


def sample_indices(bh: int, n_q: int, *, max_heads: int = 2, max_rows: int = 512, seed: int = 0):
    """Heads and query rows to check: all when small, else a fixed random sample (sorted).

    The last row is always included: under causal masking it sees every key.
    """
    rng = np.random.default_rng(seed)
    heads = np.arange(bh) if bh <= max_heads else np.sort(rng.choice(bh, max_heads, False))
    if n_q <= max_rows:
        rows = np.arange(n_q)
    else:
        rows = np.unique(np.append(rng.choice(n_q, max_rows - 1, False), n_q - 1))
    return heads, rows


def reference_rows(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    rows: np.ndarray,
    *,
    causal: bool | Mask = False,
    scale: float | None = None,
) -> np.ndarray:
    """Float64 attention output for query rows `rows` of one head (q is the full (N_q, d));
    `causal` is a compute.mask.Mask or the bool that means bottom-right causal."""
    return dense_attention(q, k, v, causal=causal, scale=scale, rows=np.asarray(rows))


def error_stats(out: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """max |out - ref|, and ‖out - ref‖ / ‖ref‖ (Frobenius); NaN never passes silently."""
    out = np.asarray(out, dtype=np.float64)
    diff = out - ref
    if not np.all(np.isfinite(out)):
        return {"max_abs": math.inf, "rel": math.inf}
    norm = float(np.linalg.norm(ref))
    return {
        "max_abs": float(np.max(np.abs(diff))) if diff.size else 0.0,
        "rel": float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff)),
    }
