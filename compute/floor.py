"""The unavoidable exact work of one configuration, timed: the floor a change can approach.

`flash-explorer bench-gui` divides a change's time to complete by this, measured in the
same process on the same inputs and on as many threads as the app's passes use
(compute.chunk_pool), so the ratio is honest on a noisy machine. The work is
what the numbers of a complete view need at least, in chunks of query rows as the app
forms them: S = Q Kᵀ · scale, P = softmax(S), O = P V and block means of S and P; with a
backward dP = dO Vᵀ, dS = P ∘ (dP − D), dV = Pᵀ dO, dQ = dS K, dK = dSᵀ Q and block means
of dP and dS. The tiled lane's own numbers (its output and gradients, whose rounding the
view shows against the reference) add their products: in a narrow dtype its own scores
(rounded inputs, its statistics dtype), exponentials, output and gradients; in float64 it
reads the dense S and dP and adds its output E V, its P̃ = exp(S − L) and its three
gradient products. `dense=False` leaves out what depends on the inputs and the mask only
(a change of block sizes, order, dtype or pass reuses it): the narrow tiled lane's share
then remains, and in float64 nothing (its tiled lane depends on the inputs alone).
"""

from __future__ import annotations

import time

import numpy as np

from .attention import round_to, stats_dtype
from .chunk_pool import ordered_map
from .full_pass import CHUNK_ELEMENTS

_CAP = 256  # display cells a side, as the views draw


def _block_sums(x: np.ndarray, cap: int = _CAP) -> np.ndarray:
    rows, cols = x.shape
    fr, fc = max(1, rows // cap), max(1, cols // cap)
    h, w = rows // fr, cols // fc
    rows = x[: h * fr, : w * fc].reshape(h, fr, w * fc).sum(axis=1)
    return rows.reshape(h, w, fc).sum(axis=2)  # as full_pass._Means: rows, then columns


def floor_seconds(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    dtype: str,
    backward: bool,
    dense: bool = True,
    scale: float | None = None,
) -> float:
    """Seconds this process takes for the floor work of one configuration (see module)."""
    n_q, d = q.shape
    n_k = k.shape[0]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    rng = np.random.default_rng(0)
    do = rng.standard_normal((n_q, v.shape[1])) if backward else None
    narrow = dtype != "float64"
    if narrow:
        acc = stats_dtype(dtype)
        qd, kd, vd = (round_to(x, dtype).astype(acc) for x in (q, k, v))
    chunk = max(1, CHUNK_ELEMENTS // n_k)

    def one(rows: tuple[int, int]) -> None:
        r0, r1 = rows
        if dense:
            s = (q[r0:r1] @ k.T) * scale  # S = Q Kᵀ · scale
            e = np.exp(s - s.max(axis=1, keepdims=True))
            rowsum = e.sum(axis=1, keepdims=True)
            p = e / rowsum  # P = softmax(S)
            o = p @ v  # O = P V
            _block_sums(s), _block_sums(p)
            if not narrow:  # the float64 tiled lane's output: E V / ℓ
                o_t = (e @ v) / rowsum
            if backward:
                dp = do[r0:r1] @ v.T  # dP = dO Vᵀ
                d_ref = np.sum(do[r0:r1] * o, axis=1, keepdims=True)
                ds = p * (dp - d_ref)  # dS = P ∘ (dP − D)
                _ = p.T @ do[r0:r1], ds @ k, ds.T @ q[r0:r1]  # dV, dQ, dK
                _block_sums(dp), _block_sums(ds)
                if not narrow:  # its backward on the same S and dP, from its own L
                    pt = np.exp(s - (s.max(axis=1, keepdims=True) + np.log(rowsum)))
                    dst = pt * (dp - np.sum(do[r0:r1] * o_t, axis=1, keepdims=True))
                    _ = pt.T @ do[r0:r1], dst @ k, dst.T @ q[r0:r1]
        if narrow:  # the tiled lane's own scores and exponentials
            st = (qd[r0:r1] @ kd.T) * acc(scale)
            pt = np.exp(st - st.max(axis=1, keepdims=True))
            _ = pt @ vd
            if backward:
                dst = pt * (do[r0:r1].astype(acc) @ vd.T)
                _ = pt.T @ do[r0:r1].astype(acc), dst @ kd, dst.T @ qd[r0:r1]

    # On both cores, as the app runs its passes (compute.chunk_pool): timed on one, the
    # floor was up to twice what the app needs.
    chunks = [(r0, min(n_q, r0 + chunk)) for r0 in range(0, n_q, chunk)]
    t0 = time.perf_counter()
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in ordered_map(one, chunks):
            pass
    return time.perf_counter() - t0
