"""The lanes' mask drawing: the skipped-tile staircases cover exactly the skipped tiles."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, QRectF, Qt

from compute.mask import SKIPPED
from desktop.lanes.masks import skipped_polygons
from desktop.state.config import Config, build


@pytest.mark.parametrize(
    "cfg",
    [
        Config(n=37, d=2, dv=2, block_q=4, block_k=5, causal=True),
        Config(n=20, n_keys=33, d=2, dv=2, block_q=3, block_k=4, causal=True, top_left=True),
        Config(n=33, n_keys=20, d=2, dv=2, block_q=4, block_k=3, causal=True),
        Config(n=64, d=2, dv=2, block_q=8, block_k=8, causal=True, window="16,0"),
        Config(n=48, d=2, dv=2, block_q=5, block_k=7, window="6,9"),
        Config(n=40, d=2, dv=2, block_q=6, block_k=4, packed="8,32", causal=True),
        Config(n=40, d=2, dv=2, block_q=64, block_k=64, causal=True),
        Config(n=24, d=2, dv=2, block_q=4, block_k=4),
    ],
)
def test_skipped_polygons_cover_the_skipped_tiles_alone(cfg):
    """Every tile's centre lies in a staircase exactly when the schedule skips it, for
    masks of both alignments, windows, packed sequences, blocks that do not divide N
    and blocks larger than N; without a mask there is nothing to cover."""
    s = build(cfg.replace(input="random"))[1].schedule
    rect = QRectF(10.0, 20.0, 310.0, 170.0)
    polygons = skipped_polygons(s, rect)
    ch, cw = rect.height() / s.n_q, rect.width() / s.n_k
    skipped = 0
    for i in range(s.t_r):
        r0, r1 = s.rows(i)
        for j in range(s.t_c):
            c0, c1 = s.cols(j)
            centre = QPointF(rect.left() + (c0 + c1) / 2 * cw, rect.top() + (r0 + r1) / 2 * ch)
            inside = [p.containsPoint(centre, Qt.FillRule.OddEvenFill) for p in polygons]
            assert sum(inside) <= 1  # the two staircases never overlap
            want = s.tile_class_at(i, j) == SKIPPED
            assert any(inside) == want, (i, j)
            skipped += want
    assert len(polygons) <= 2
    assert (skipped == 0) == (not polygons)


def test_masked_runs_are_exactly_the_masked_tiles():
    """The dashed outlines' runs: every masked tile once, no other class."""
    from compute.mask import MASKED, Mask
    from compute.schedule import Schedule
    from desktop.lanes.masks import _masked_runs

    s = Schedule(11, 9, 2, 2, 3, 2, mask=Mask(2, 1, False, ()))
    assert MASKED in set(s.tile_class.ravel().tolist())
    got = sorted((i, j) for i, j0, j1 in _masked_runs(s) for j in range(j0, j1))
    want = sorted(zip(*(x.tolist() for x in np.nonzero(s.tile_class == MASKED)), strict=True))
    assert got == want
