"""The selected row's numbers for the statistics panel: series, formats, formulas.

NumPy only. The series are looked up in the Trace's row history (the compute
core's numbers), never computed here; formats are shared with the tests so a test can
compare what the panel shows with what the core holds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import numpy as np

from compute import Trace
from compute.attention import round_to

FORMULAS = {
    "m": "Running max after the tiles seen so far: m_new = max(m, rowmax(S_ij)); −∞ before any key",
    "l": "Running denominator: ℓ = α ℓ + rowsum(P̃_ij), with P̃_ij = exp(S_ij − m_new)",
    "alpha": "Rescale factor of the old sums at the last tile: α = exp(m_old − m_new) (0 before any key)",
    "a": "Unnormalised numerator: a = α a + P̃_ij V_j (d_v components)",
    "out": "Partial output a/ℓ: attention over the keys seen so far; the output after the last tile",
    "dense": "The dense lane's output row, softmax(S) V, as written to HBM in the chosen dtype",
    "ref": "The float64 reference row, softmax(S) V: what every error is measured against",
    "error": "max |O − O_ref|: the tiled output against the float64 reference, this row and all rows",
}
STEP_X = 1  # plots count steps from 1, as the playback bar and the status bar do
SCALAR_COLORS = {"m": "#2471a3", "l": "#1a9850", "alpha": "#8e44ad"}
MAX_COLOURED = 8  # above this many components of a, draw them as one bundle


def finite_range(values) -> tuple[float, float]:
    """(min, max) over the finite entries of an array or tuple of arrays; (0, 1) if none."""
    parts = values if isinstance(values, tuple) else (values,)
    flat = np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in parts])
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return 0.0, 1.0
    lo, hi = float(flat.min()), float(flat.max())
    return (lo - 0.5, hi + 0.5) if hi - lo < 1e-12 else (lo, hi)


def step_bundle(edges: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step curves of every column of `values` (steps × components) in one NaN-split line."""
    n, comps = values.shape
    x = np.repeat(edges, 2)[1:-1] if len(edges) == n + 1 else np.repeat(edges, 1)
    xs = np.empty((comps, len(x) + 1))  # one row per component, a NaN ending each
    xs[:, :-1], xs[:, -1] = x, np.nan
    ys = np.empty_like(xs)
    if len(edges) == n + 1:
        ys[:, :-1] = np.repeat(np.asarray(values, dtype=float).T, 2, axis=1)
    else:  # constant targets drawn across `edges`
        ys[:, :-1] = np.asarray(values[0], dtype=float)[:, None]
    ys[:, -1] = np.nan
    return xs.ravel(), ys.ravel()


ENVELOPE_BINS = 256  # a bundle's columns across the row's updates: a pixel or two each


def envelope_bundle(
    edges: np.ndarray, values: np.ndarray, bins: int = ENVELOPE_BINS
) -> tuple[np.ndarray, np.ndarray]:
    """step_bundle's lines drawn at `bins` columns across the updates: the same pixels,
    not one vertex per update. A column holds the values that start in it and the one
    held into it; the line rises through their minimum and maximum at the column's
    first update, so no excursion is lost. The first and last values are held across
    their spans as step_bundle draws them. At most `bins` updates: step_bundle itself
    (the plot spans the row's updates, at least a third of its width, so a column is
    never wider than a pixel or two)."""
    n, comps = values.shape
    if n - 2 <= bins or len(edges) != n + 1:
        return step_bundle(edges, values)
    vals = np.asarray(values, dtype=float)
    starts = np.asarray(edges[1:-1], dtype=float)  # the updates: values 1..n-1 start here
    lo, hi = starts[0], starts[-1]
    col = np.minimum(((starts - lo) * (bins / (hi - lo))).astype(np.intp), bins - 1)
    first = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])  # each column's first update
    inner = vals[1:]  # (n - 1, comps), aligned with starts
    held = vals[first]  # the value held into each column (the one before its first update)
    # fmin / fmax: a/ℓ is NaN before the first key; a column is drawn from what it has.
    ymin = np.fmin(np.fmin.reduceat(inner, first, axis=0), held)
    ymax = np.fmax(np.fmax.reduceat(inner, first, axis=0), held)
    k = len(first)
    # The first value held from the start to the first update, the columns' (min, max)
    # pairs, the last value held from the last update to the end; NaN ends a component.
    x = np.empty(2 * k + 5)
    x[0], x[1], x[-3], x[-2], x[-1] = edges[0], lo, hi, edges[-1], np.nan
    x[2 : 2 * k + 2 : 2] = x[3 : 2 * k + 3 : 2] = starts[first]
    ys = np.empty((comps, len(x)))
    ys[:, 0] = ys[:, 1] = vals[0]
    ys[:, 2 : 2 * k + 2 : 2] = ymin.T
    ys[:, 3 : 2 * k + 3 : 2] = ymax.T
    ys[:, -3] = ys[:, -2] = vals[-1]
    ys[:, -1] = np.nan
    return np.tile(x, comps), ys.ravel()


def fmt(x: float) -> str:
    """How the panel writes a number (tests compare against the same format)."""
    return "−∞" if np.isneginf(x) else f"{x:.6g}".replace("-", "−")


def fmt_vec(v: np.ndarray, limit: int = 4) -> str:
    items = ", ".join(fmt(float(x)) for x in v[:limit])
    return f"[{items}{', …' if len(v) > limit else ''}]"


def row_series(trace: Trace, row: int) -> dict[str, np.ndarray]:
    """The row's state as a step function of the timeline, looked up in the trace's row history.

    The state only changes at the row's update steps, so the series holds one value per
    update (plus the initial state) and `edges`, the step boundaries where each value
    starts and ends: ~T_c points per curve however long the timeline is.
    """
    steps, tiles = trace.row_updates(row)
    cols = np.concatenate([[0], np.asarray(tiles, dtype=int) + 1])  # history index per value
    edges = np.concatenate([[-0.5], np.asarray(steps, dtype=float) - 0.5, [trace.n_steps - 0.5]])
    h = trace.row_history(row)  # computed for this row's block on first use, then cached
    m, l, a = h.m[cols], h.l[cols], h.a[cols]  # noqa: E741
    out = np.full(a.shape, np.nan, dtype=np.float64)
    np.divide(a, l[:, None], out=out, where=l[:, None] > 0)
    return {"edges": edges, "m": m, "l": l, "alpha": h.alpha[cols], "a": a, "out": out}


def dense_output_row(trace: Trace, row: int) -> np.ndarray:
    """The dense lane's output row as stored in the chosen dtype (the float64 result rounded)."""
    return np.asarray(
        round_to(trace.reference_rows(row, row + 1)[0], trace.dtype), dtype=np.float64
    )


def active_steps(trace: Trace, row: int) -> tuple[int, int]:
    """First and last 0-based step that update `row` (the whole run if none do)."""
    steps, _tiles = trace.row_updates(row)
    if len(steps) == 0:
        return 0, trace.n_steps - 1
    return int(steps[0]), int(steps[-1])


def zoom_window(active: tuple[int, int], step: int, n_steps: int) -> tuple[int, int]:
    """The 0-based steps the plots show: the row's active steps (at least 8), widened by
    one whole span on the side of `step` when it is near them (within that span), so
    playback into and out of the row's tiles keeps the marker in view; far away, the
    row's steps stay on show. The range moves at most four times as playback passes a
    row (into the span before, onto its steps, into the span after, away): each move
    redraws every curve (15-30 ms at N = 4096), the frames in between keep the cached
    lines and only the marker moves."""
    first, last = active
    width = min(n_steps, max(last - first + 1, 8))
    lo = max(0, min(first, n_steps - width))
    if lo <= width // 4:
        # The row starts within a quarter span of the run's start (its block's loads
        # come first): show the run from step 0, with no span before it to widen into,
        # so playback from the start does not move the range onto the row's first step.
        lo, width = 0, min(n_steps, max(width, last + 1))
    hi = lo + width - 1
    if lo - width <= step < lo:
        lo = max(0, lo - width)
    elif hi < step <= hi + width:
        hi = min(n_steps - 1, hi + width)
    return lo, hi


@dataclass(frozen=True)
class StatsCurves:
    """Everything the statistics panel plots for one row, as arrays: made on the build's
    worker with the first tier (stats_curves), so the GUI thread only hands them over."""

    x: np.ndarray  # step edges, 1-based (the curves' x)
    scalars: dict[str, np.ndarray]  # m (−∞ as NaN), ℓ, α per value
    a: np.ndarray  # (values, d_v)
    out: np.ndarray  # a/ℓ (values, d_v)
    ref: np.ndarray  # the row's float64 output (d_v,)
    span: np.ndarray  # the whole run's x extent (the targets' dashes, coloured case)
    bundles: tuple  # (x, y) of the a, a/ℓ and target bundles; (None, None) when coloured
    ranges: dict[str, tuple[float, float]]  # each plot's y range (finite values)
    active: tuple[int, int]  # the row's first and last update step

    @property
    def coloured(self) -> bool:
        return self.a.shape[1] <= MAX_COLOURED


_CURVES: WeakKeyDictionary = WeakKeyDictionary()  # trace -> {row: StatsCurves}
_CURVES_LOCK = threading.Lock()  # the worker fills a new trace's entry, the GUI reads
CURVE_ROWS = 4  # rows kept per trace (the selected row and the few before it)


def stats_curves(trace: Trace, row: int) -> StatsCurves:
    """The row's StatsCurves, made on first use and kept with the trace."""
    with _CURVES_LOCK:
        held = _CURVES.setdefault(trace, {})
        found = held.get(row)
    if found is not None:
        return found
    made = _make_curves(trace, row)
    with _CURVES_LOCK:
        held.pop(row, None)
        held[row] = made
        while len(held) > CURVE_ROWS:
            del held[next(iter(held))]
    return made


def _make_curves(trace: Trace, row: int) -> StatsCurves:
    s = row_series(trace, row)
    # Step curves: a value holds from its update step to the next; the edges sit at
    # half steps so the marker at step t is inside the value shown after step t.
    x = s["edges"] + STEP_X
    m = np.where(np.isfinite(s["m"]), s["m"], np.nan)
    scalars = {
        "m": m,
        "l": np.asarray(s["l"], dtype=float),
        "alpha": np.asarray(s["alpha"], dtype=float),
    }
    ref = trace.reference_rows(row, row + 1)[0]
    span = np.array([-0.5, trace.n_steps - 0.5]) + STEP_X
    if trace.schedule.d_v <= MAX_COLOURED:
        bundles = ((None, None), (None, None), (None, None))
    else:
        # Targets as short dashes at the right end, where a/ℓ arrives: 64 full-width
        # dashed lines would hide the curves.
        tail = np.array([0.85 * trace.n_steps, trace.n_steps - 0.5]) + STEP_X
        bundles = (
            envelope_bundle(x, s["a"]),
            envelope_bundle(x, s["out"]),
            step_bundle(tail, np.tile(ref, (1, 1))),
        )
    ys = {"m": m, "l": s["l"], "alpha": s["alpha"], "a": s["a"], "out": (s["out"], ref)}
    ranges = {key: finite_range(values) for key, values in ys.items()}
    return StatsCurves(
        x, scalars, s["a"], s["out"], ref, span, bundles, ranges, active_steps(trace, row)
    )
