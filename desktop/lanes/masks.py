"""The mask on a lane's N_q × N_k tensors: which tiles are skipped, masked or fully seen.

Drawn over S and P (in the tiled lane, over their outlines: it never stores them) once per
trace, from the schedule's tile classes (compute.mask): a skipped tile (no row of its
block sees any of its keys, so it is never loaded) is hatched; a masked tile (loaded, some
scores set to −∞) gets a dashed outline; a fully seen tile (no mask needed) is left as it
is. Rows that see no key at all (output 0, L = −∞) get a mark at the tensor's left edge.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPalette, QPen

from compute.mask import MASKED, SKIPPED
from compute.schedule import Schedule

MIN_TILE_PX = 3.0  # tiles narrower than this are drawn as runs, never as single lines
EMPTY_ROW_RGB = (192, 57, 43)  # rows that see no key: the red the ledger's dense curve uses


def _runs(s: Schedule, cls: int) -> list[tuple[int, int, int]]:
    """(block i, first tile, end tile) runs of class `cls`, from the schedule's spans (O(T_r),
    no T_r × T_c matrix): a block sees tiles [lo, hi), of which [f_lo, f_hi) are full."""
    (lo, hi), (f_lo, f_hi) = s.row_span, s.full_span
    out = []
    for i in range(s.t_r):
        a, b = int(lo[i]), int(hi[i])
        fa, fb = (int(f_lo[i]), int(f_hi[i])) if f_hi[i] > f_lo[i] else (b, b)
        if cls == SKIPPED:
            runs = ((0, a), (b, s.t_c)) if b > a else ((0, s.t_c),)
        elif cls == MASKED:
            runs = ((a, fa), (fb, b))
        else:
            runs = ((fa, fb),)
        out += [(i, j0, j1) for j0, j1 in runs if j1 > j0]
    return out


def tile_rects(s: Schedule, rect: QRectF, cls: int) -> list[QRectF]:
    """Rectangles of `rect` (an N_q × N_k tensor) covering the tiles of class `cls`,
    one per run along a block row, so a large T_c draws few rectangles."""
    ch, cw = rect.height() / s.n_q, rect.width() / s.n_k
    out = []
    for i, j0, j1 in _runs(s, cls):
        (r0, r1), c0, c1 = s.rows(i), s.cols(j0)[0], s.cols(j1 - 1)[1]
        out.append(
            QRectF(rect.left() + c0 * cw, rect.top() + r0 * ch, (c1 - c0) * cw, (r1 - r0) * ch)
        )
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
    for r in tile_rects(s, rect, SKIPPED):
        p.drawRect(r)
    if min(rect.width() / s.t_c, rect.height() / s.t_r) >= MIN_TILE_PX:
        edge = QColor(palette.color(QPalette.ColorRole.Highlight))
        p.setPen(QPen(edge, 1.2, Qt.PenStyle.DashLine))
        p.setBrush(Qt.BrushStyle.NoBrush)
        ch, cw = rect.height() / s.n_q, rect.width() / s.n_k
        for i, j0, j1 in _runs(s, MASKED):
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
