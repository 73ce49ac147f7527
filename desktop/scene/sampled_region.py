"""A dense-lane region too large to draw cell for cell, made where a paint looks.

In a backward step the dense lane holds a whole column block of P, dP or dS: 4096 × 128
cells at N = 4096 with 128-wide blocks, drawn as a tile about 100 px tall, so a raster
paint reads one row in 40 of it; in a forward its softmax step holds a query block's S
and P rows, 64 × 4096, read one column in ten or more. Forming all of it (its products
and exponentials) and colour-mapping all of it cost ~8 ms a playback frame. A
SampledRegion stands for such a region: `cells(rows, cols)` makes the cells at those
indices only (the same formulas as the trace's regions; one BLAS product of a subset may
differ from the whole's in the last place, ~1e-14), `np.asarray` the whole region through
the trace (an export, a vector paint, a test). NumPy only: the scene builds it, the lanes
draw it (desktop.lanes.sampling).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compute import Trace
from compute.attention import causal_mask

SAMPLED_ABOVE = 4096  # more cells than draw_numbers writes numbers in: made where drawn


class SampledRegion:
    """A (rows, cols) float64 region whose cells are made when asked for."""

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(
        self,
        shape: tuple[int, int],
        cells: Callable[[np.ndarray, np.ndarray], np.ndarray],
        whole: Callable[[], np.ndarray],
    ) -> None:
        self.shape = shape
        self._cells, self._whole = cells, whole

    def cells(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """values[np.ix_(rows, cols)] (local indices), made for those cells alone."""
        return self._cells(np.asarray(rows, dtype=np.intp), np.asarray(cols, dtype=np.intp))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self._whole()
        return whole if dtype is None else whole.astype(dtype)


def dense_region(trace: Trace, tensor: str, rows, cols) -> SampledRegion:
    """S, P, dP or dS over rows × cols (element ranges) of the dense lane, as a region
    made where drawn; np.asarray gives trace.scores_region / probs_region /
    grad_region's array."""
    (r0, r1), (c0, c1) = rows, cols
    if tensor == "S":
        whole = lambda: trace.scores_region(r0, r1, c0, c1)  # noqa: E731
    elif tensor == "P":
        whole = lambda: trace.probs_region(r0, r1, c0, c1)  # noqa: E731
    else:
        whole = lambda: trace.grad_region(tensor, r0, r1, c0, c1)  # noqa: E731

    def cells(ri: np.ndarray, ci: np.ndarray) -> np.ndarray:
        return _cells(trace, tensor, r0 + ri, c0 + ci, (r0, r1))

    return SampledRegion((r1 - r0, c1 - c0), cells, whole)


def _cells(trace: Trace, tensor: str, rows: np.ndarray, cols: np.ndarray, span) -> np.ndarray:
    """The formulas of ForwardNumbers._scores, _probs and BackwardNumbers.grad_region
    at the rows × cols given (global indices; `span` the region's rows, whose
    statistics the trace keeps)."""
    local = rows - span[0]
    if tensor in ("S", "P", "dS"):
        s = (trace.q[rows] @ trace.k[cols].T) * trace.scale  # S = Q Kᵀ · scale
        sch = trace.schedule
        if sch.mask:
            s = np.where(causal_mask(rows, cols, sch.n_q, sch.n_k, sch.mask), s, -np.inf)
        if tensor == "S":
            return s
        m, l, o = trace.dense_rows(*span)  # noqa: E741 (the rows' full statistics)
        m, l = m[local, None], l[local, None]  # noqa: E741
        p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        probs = np.zeros_like(p)
        np.divide(p, l, out=probs, where=l > 0)  # a fully masked row has P = 0
        if tensor == "P":
            return probs
    dp = trace.do[rows] @ trace.v[cols].T  # dP = dO Vᵀ
    if tensor == "dP":
        return dp
    d_rows = np.sum(trace.do[rows] * o[local], axis=1)  # D = rowsum(dO ∘ O), each row its own
    return probs * (dp - d_rows[:, None])  # dS = P ∘ (dP − D)
