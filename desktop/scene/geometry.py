"""Where things go in a lane: HBM tensor rectangles, SRAM tiles and their values.

Pure geometry and look-ups (no painting). Both lanes share one column layout of the
HBM slots (Q, K, V, S, P, O, then the tiled lane's m, ℓ, L), so a tensor in the dense
lane sits exactly above the same tensor in the tiled lane, and the tiled lane's S and
P appear as empty ghosts under the dense lane's full matrices.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF

from compute import Action, Region, Trace

from .backward import (
    dense_backward_sram,
    grad_slots,
    is_backward,
    region_cells,
    tiled_backward_sram,
)
from .sampled_region import SAMPLED_ABOVE, dense_region
from .tiles import QUERY_TENSORS, SramTile

__all__ = ["QUERY_TENSORS", "SramTile"]  # re-exported: views import them from here

MAX_CELL_W, MAX_CELL_H = 48.0, 30.0
MIN_SLOT_W = 16.0
GAP = 10.0

SYMBOL = {"l": "ℓ", "m": "m", "L": "L"}


def hbm_slots(trace: Trace) -> list[tuple[str, int, int]]:
    """(tensor, rows, cols) for every HBM slot drawn in either lane, in order."""
    s = trace.schedule
    slots = [
        ("Q", s.n_q, s.d),
        ("K", s.n_k, s.d),
        ("V", s.n_k, s.d_v),
        ("S", s.n_q, s.n_k),
        ("P", s.n_q, s.n_k),
        ("O", s.n_q, s.d_v),
    ]
    # Wherever a forward runs (forward, training), m and ℓ always get a column: in HBM for
    # KV-outer, a ghost ("on chip only") for Q-outer; either way the SRAM tiles of m and ℓ
    # sit under them. The backward alone reads L and keeps no running statistics.
    if trace.pass_name != "backward":
        slots += [("m", s.n_q, 1), ("l", s.n_q, 1)]
    if s.save_lse:
        slots.append(("L", s.n_q, 1))
    return slots + grad_slots(trace)


def layout_hbm(slots: list[tuple[str, int, int]], area: QRectF) -> dict[str, QRectF]:
    """Rectangles for each slot inside `area` (label space above each is the caller's)."""
    cols = np.array([c for _, _, c in slots], dtype=float)
    avail = max(area.width() - GAP * (len(slots) - 1), len(slots) * MIN_SLOT_W)
    if cols.sum() * 10.0 <= avail:
        # Small enough for proportional cells of at least 10 px: cells line up.
        widths = cols * min(MAX_CELL_W, avail / cols.sum())
    else:
        # Large N: compress so Q, K, V stay visible next to N × N matrices.
        weight = cols**0.6
        widths = np.maximum(MIN_SLOT_W, weight / weight.sum() * avail)
        widths *= avail / widths.sum()
    n_rows = max(r for _, r, _ in slots)
    cell_h = min(MAX_CELL_H, area.height() / n_rows)
    rects, x = {}, area.left()
    for (name, rows, _), w in zip(slots, widths, strict=True):
        rects[name] = QRectF(x, area.top(), float(w), rows * cell_h)
        x += float(w) + GAP
    return rects


def region_rect(tensor_rect: QRectF, shape: tuple[int, int], region: Region) -> QRectF:
    """The part of a tensor's rectangle covering `region` (element coordinates)."""
    rows, cols = shape
    ch, cw = tensor_rect.height() / rows, tensor_rect.width() / cols
    (r0, r1), (c0, c1) = region.rows, region.cols
    return QRectF(
        tensor_rect.left() + c0 * cw,
        tensor_rect.top() + r0 * ch,
        max((c1 - c0) * cw, 1.5),
        max((r1 - r0) * ch, 1.5),
    )


def _block_tile_count(trace: Trace, action: Action, step: int) -> int:
    """Key tiles the action's query block has been updated with after `step`."""
    if trace.schedule.order == "kv-outer":  # visiting tile j: updated once `update` ran
        return action.block_j + (action.phase != "load_state")
    return trace.tiles_seen(trace.schedule.rows(action.block_i)[0], step)


def tiled_sram(trace: Trace, step: int) -> list[SramTile]:
    """The tiled lane's SRAM after `step`: Q_i, K_j, V_j, S_ij, m, ℓ, a."""
    s = trace.schedule
    action = trace.action("tiled", step)
    if is_backward(action):
        return tiled_backward_sram(trace, step, action)
    held = {r.tensor: r for r in action.resident} if action else {}
    block = action.block_i if action else None
    acc_label = "a = Σ P̃V" if s.order == "q-outer" else "a = ℓ·O_i"
    tiles = [
        SramTile("Q", "Q_i", None),
        SramTile("K", "K_j", None),
        SramTile("V", "V_j", None),
        SramTile("S", "S_ij", None),
        SramTile("P", "P̃_ij", None),
        SramTile("m", "m", None),
        SramTile("l", "ℓ", None),
        SramTile("O", acc_label, None),
    ]
    by = {t.tensor: t for t in tiles}
    for name, src in (("Q", trace.q), ("K", trace.k), ("V", trace.v)):
        if name in held:
            r = held[name]
            by[name].values = src[r.rows[0] : r.rows[1], r.cols[0] : r.cols[1]]
            if name == "Q":
                by[name].first_row = r.rows[0]
    if "S" in held:  # the score tile, computed for this region only
        r = held["S"]
        by["S"].values = trace.scores_region(*r.rows, *r.cols)
        by["S"].first_row = r.rows[0]
    if "S" in held:  # P̃_ij = exp(S_ij − m_new), as the recurrence formed it
        r = held["S"]
        by["P"].values = trace.p_tilde_tile(block, action.block_j)
        by["P"].first_row = r.rows[0]
    if block is not None:
        r0, r1 = s.rows(block)
        tile = _block_tile_count(trace, action, step)
        m, l, a = trace.block_state(block, tile)  # noqa: E741
        by["m"].values, by["l"].values, by["O"].values = m[:, None], l[:, None], a
        if action.phase == "write_o":
            by["O"].label, by["O"].values = "O_i = a/ℓ", trace.tiled_output_rows(r0, r1)
        for name in ("m", "l", "O"):
            by[name].first_row = r0
    return tiles


def dense_sram(trace: Trace, step: int) -> list[SramTile]:
    """The dense lane's SRAM after `step`: whatever its action holds."""
    action = trace.action("dense", step)
    if action is None:
        return []
    if is_backward(action):
        return dense_backward_sram(trace, step, action)
    sources = {"Q": trace.q, "K": trace.k, "V": trace.v}
    tiles = []
    for r in action.resident:
        values = sources.get(r.tensor)
        if values is not None:
            values = values[r.rows[0] : r.rows[1], r.cols[0] : r.cols[1]]
        elif r.tensor in ("S", "P"):  # computed for this region only (N × N is never held)
            values = dense_region(trace, r.tensor, r.rows, r.cols)  # made where drawn
            if region_cells(r) <= SAMPLED_ABOVE:  # a tile: held whole, the trace's array
                values = np.asarray(values)
        first = r.rows[0] if r.tensor in QUERY_TENSORS else None
        if values is None:  # the O accumulator: Σ P_ij V_j over the tiles read so far
            partial = trace.dense_partial_output(action.block_i, action.block_j)
            tiles.append(SramTile(r.tensor, "O_i += P_ij V_j", partial, first, cached=False))
            continue
        label = f"{r.tensor}_{'ij' if r.tensor in 'SP' else ('i' if r.tensor == 'Q' else 'j')}"
        if r.cols[1] - r.cols[0] == trace.schedule.n_k and r.tensor in "SP":
            label = f"{r.tensor} rows of block {action.block_i}"
        tiles.append(
            SramTile(
                r.tensor,
                label,
                values,
                first,
                probabilities=r.tensor == "P",
            )
        )
    if action.phase == "write_o":
        r0, r1 = trace.schedule.rows(action.block_i)
        tiles.append(SramTile("O", "O_i", trace.reference_rows(r0, r1), r0))
    return tiles


def layout_sram(tiles: list[SramTile], columns: dict[str, QRectF], area: QRectF) -> list[QRectF]:
    """Each SRAM tile sits under its tensor's HBM column, so transfers run straight down."""
    out = []
    for tile in tiles:
        col = columns.get(tile.tensor)
        left, width = (col.left(), col.width()) if col is not None else (area.left(), 40.0)
        out.append(QRectF(left, area.top(), width, area.height()))
    return out


def action_of(trace: Trace, lane: str, step: int) -> Action | None:
    return trace.action(lane, step) if 0 <= step < trace.n_steps else None
