"""The mask on a lane's N_q × N_k tensors: which tiles are skipped, masked or fully seen.

Drawn over S and P (in the tiled lane, over their outlines: it never stores them) once per
trace, from the schedule's tile classes (compute.mask): a skipped tile (no row of its
block sees any of its keys, so it is never loaded) is hatched; a masked tile (loaded, some
scores set to −∞) gets a dashed outline; a fully seen tile (no mask needed) is left as it
is. Rows that see no key at all (output 0, L = −∞) get a mark at the tensor's left edge.
"""

from __future__ import annotations

import numpy as np
from pyqtgraph.functions import create_qpolygonf, ndarray_from_qpolygonf
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPalette, QPen, QPolygonF

from compute.schedule import Schedule

MIN_TILE_PX = 3.0  # tiles narrower than this are drawn as runs, never as single lines
EMPTY_ROW_RGB = (192, 57, 43)  # rows that see no key: the red the ledger's dense curve uses


def _masked_runs(s: Schedule) -> list[tuple[int, int, int]]:
    """(block i, first tile, end tile) runs of masked tiles, from the schedule's spans
    (O(T_r), no T_r × T_c matrix): a block loads tiles [lo, hi), [f_lo, f_hi) of them full."""
    (lo, hi), (f_lo, f_hi) = s.row_span, s.full_span
    out = []
    for i in range(s.t_r):
        a, b = int(lo[i]), int(hi[i])
        fa, fb = (int(f_lo[i]), int(f_hi[i])) if f_hi[i] > f_lo[i] else (b, b)
        out += [(i, j0, j1) for j0, j1 in ((a, fa), (fb, b)) if j1 > j0]
    return out


def skipped_polygons(s: Schedule, rect: QRectF) -> list[QPolygonF]:
    """The skipped tiles of `rect` (an N_q × N_k tensor) as at most two staircases: left of
    each block's first loaded tile and right of its last (a block loads one run of tiles,
    compute.mask), a vertex pair per change of edge: one fill each, however many blocks
    (a rectangle per block would be a sub-pixel fill each at small blocks)."""
    lo, hi = (np.asarray(x, dtype=np.int64) for x in s.row_span)
    none = hi <= lo  # a block that loads nothing is skipped across
    left_end = np.where(none, s.t_c, lo)  # tiles [0, left_end) and [right_start, T_c)
    right_start = np.where(none, s.t_c, hi)
    ch, cw = rect.height() / s.n_q, rect.width() / s.n_k
    row_y = rect.top() + np.minimum(np.arange(s.t_r + 1) * s.block_q, s.n_q) * ch
    out = []
    for tiles, side in ((left_end, rect.left()), (right_start, rect.right())):
        edge = rect.left() + np.minimum(tiles * s.block_k, s.n_k) * cw
        if np.all(edge == side):  # nothing skipped on this side
            continue
        starts = np.flatnonzero(np.r_[True, edge[1:] != edge[:-1]])  # rows where it moves
        ends = np.r_[starts[1:], s.t_r]
        # side, then (x, top) and (x, bottom) of each run, then side: filled through a numpy
        # view of the polygon, not a Python QPointF per vertex (a vertex pair per block).
        polygon = create_qpolygonf(2 * starts.size + 2)
        xy = ndarray_from_qpolygonf(polygon)
        xy[0], xy[-1] = (side, row_y[0]), (side, row_y[-1])
        xy[1:-1, 0] = np.repeat(edge[starts], 2)
        xy[1:-1, 1] = np.column_stack((row_y[starts], row_y[ends])).ravel()
        out.append(polygon)
    return out


def paint_mask(p: QPainter, palette: QPalette, s: Schedule, rect: QRectF) -> None:
    """The tile classes and empty rows of `s`'s mask over `rect` (nothing without a mask)."""
    if not s.mask:
        return
    mid = QColor(palette.color(QPalette.ColorRole.WindowText))
    mid.setAlpha(110)
    p.save()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QBrush(mid, Qt.BrushStyle.BDiagPattern))
    for polygon in skipped_polygons(s, rect):
        p.drawPolygon(polygon)
    if min(rect.width() / s.t_c, rect.height() / s.t_r) >= MIN_TILE_PX:
        edge = QColor(palette.color(QPalette.ColorRole.Highlight))
        p.setPen(QPen(edge, 1.2, Qt.PenStyle.DashLine))
        p.setBrush(Qt.BrushStyle.NoBrush)
        ch, cw = rect.height() / s.n_q, rect.width() / s.n_k
        for i, j0, j1 in _masked_runs(s):
            r0, r1 = s.rows(i)
            for j in range(j0, j1):
                c0, c1 = s.cols(j)
                p.drawRect(
                    QRectF(
                        rect.left() + c0 * cw, rect.top() + r0 * ch, (c1 - c0) * cw, (r1 - r0) * ch
                    )
                )
    empty = s.mask.empty_rows(s.n_q, s.n_k)
    if empty.size:
        ch = rect.height() / s.n_q
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(*EMPTY_ROW_RGB))
        runs = np.split(empty, np.flatnonzero(np.diff(empty) > 1) + 1)
        for run in runs:
            top = rect.top() + int(run[0]) * ch
            p.drawRect(QRectF(rect.left() - 4, top, 3, max(1.0, len(run) * ch)))
    p.restore()


LEGEND = (
    "hatched: skipped tile (no row of the block sees its keys; never loaded) · dashed: masked "
    "tile (loaded, hidden scores set to −∞) · plain: every score seen · red mark: a row that "
    "sees no key (output 0, L = −∞)"
)
