"""What the lanes show in the backward pass: gradient tensors in HBM, tiles in SRAM, the
step in words. NumPy only; every number is the compute core's (Trace.backward_block,
Trace.key_tile, Trace.gradients, Trace.grad_region), this module only picks them.

Dense lane: P is read back from HBM and dP, dS (N_q × N_k each) are written there.
Tiled lane: K_j, V_j, dK_j, dV_j stay on chip while the query blocks stream past; S,
P̃ = exp(S − L), dP and dS are tiles in SRAM only; dQ_i goes back to HBM every visit.
"""

from __future__ import annotations

import numpy as np

from compute import Trace
from compute.forward_numbers import DISPLAY_CELLS
from compute.timeline import BACKWARD_PHASES

from .sampled_region import SAMPLED_ABOVE, dense_region
from .tiles import QUERY_TENSORS, SramTile

# HBM slots the backward adds (after the forward's), with their shapes.
GRAD_SLOTS = ("dO", "D", "dP", "dS", "dQ", "dK", "dV")
NK_TENSORS = frozenset({"S", "P", "dP", "dS"})  # N_q × N_k matrices
GRAD_WRITTEN = frozenset({"D", "dP", "dS", "dQ", "dK", "dV"})

PHASE_TEXT = {
    "bwd_dv": "dV = Pᵀ dO: the stored P is read back from HBM",
    "bwd_dp": "dP = dO Vᵀ: an N × N_keys matrix goes to HBM",
    "bwd_ds": "dS = P ∘ (dP − rowsum(P ∘ dP)): P and dP rows come back, dS rows go out",
    "bwd_dq": "dQ = dS K · scale: dS is read back",
    "bwd_dk": "dK = dSᵀ Q · scale: dS is read back once more",
    "bwd_preprocess": "D = rowsum(dO ∘ O): one number per row, before the main loop",
    "bwd_init": "dQ = 0 in HBM: it accumulates there, one key tile at a time",
    "bwd_load_kv": "K_j, V_j come in; dK_j, dV_j start at 0 and stay on chip",
    "bwd_load_q": "Q_i, dO_i, L_i, D_i and the partial dQ_i come in",
    "bwd_update": "S = Q_i K_jᵀ, P̃ = exp(S − L): recomputed on chip, never stored",
    "bwd_write_dq": "dQ_i += dS K_j · scale goes back to HBM",
    "bwd_write_dkdv": "dK_j and dV_j are complete: written once",
}


def grad_slots(trace: Trace) -> list[tuple[str, int, int]]:
    """(tensor, rows, cols) of the backward's HBM slots; none for the forward."""
    if trace.pass_name == "forward":
        return []
    s = trace.schedule
    shapes = {
        "dO": (s.n_q, s.d_v), "D": (s.n_q, 1), "dP": (s.n_q, s.n_k), "dS": (s.n_q, s.n_k),
        "dQ": (s.n_q, s.d), "dK": (s.n_k, s.d), "dV": (s.n_k, s.d_v),
    }  # fmt: skip
    return [(name, *shapes[name]) for name in GRAD_SLOTS]


def grad_sources(trace: Trace, lane: str, small: bool) -> dict[str, object]:
    """The backward tensors a lane shows in HBM, as they are at the end of the run. dP and
    dS (dense only) are arrays when `small`, else None (the caller draws block means)."""
    if trace.pass_name == "forward":
        return {}
    dq, dk, dv = trace.gradients(lane)
    out: dict[str, object] = {"dO": trace.do}
    if lane == "dense":
        s = trace.schedule
        region = (0, s.n_q, 0, s.n_k)
        out["dP"] = trace.grad_region("dP", *region) if small else None
        out["dS"] = trace.grad_region("dS", *region) if small else None
    else:
        out["D"] = trace.backward_D[:, None]
    out.update(dQ=dq, dK=dk, dV=dv)
    return out


def is_backward(action) -> bool:
    return action is not None and action.phase in BACKWARD_PHASES


def _operand(trace: Trace, tensor: str, rows, cols) -> np.ndarray | None:
    """A region of a tensor the backward reads, from the trace's arrays."""
    (r0, r1), (c0, c1) = rows, cols
    arrays = {"Q": trace.q, "K": trace.k, "V": trace.v, "dO": trace.do}
    if tensor in arrays:
        return arrays[tensor][r0:r1, c0:c1]
    # O, L and D of the rows held: those rows' own (the first tier has no every-row pass)
    if tensor == "O":
        return trace.tiled_rows_state(r0, r1)[0][:, c0:c1]
    if tensor == "L":
        return trace.tiled_rows_state(r0, r1)[1][:, None]
    if tensor == "D":
        return trace.rows_D(r0, r1)[:, None]
    if tensor == "P":
        return trace.probs_region(r0, r1, c0, c1)
    if tensor in ("dP", "dS"):
        return trace.grad_region(tensor, r0, r1, c0, c1)
    return None


def dense_backward_sram(trace: Trace, step: int, action) -> list[SramTile]:
    """The dense lane's SRAM in a backward step: the operands it read, the result. The
    whole gradients come with the second tier (render.streams): until then they are
    marked "computing…", never computed here on the GUI thread."""
    results: dict[str, np.ndarray] = {}
    if trace.backward.summary_cached(DISPLAY_CELLS):
        dq, dk, dv = trace.gradients("dense")
        results = {"dQ": dq, "dK": dk, "dV": dv}
    # P and dS of every row need every row's statistics: the second tier's as well
    rows_only = not trace.forward.summary_cached(DISPLAY_CELLS)
    tiles = []
    for r in action.resident:
        every_row = r.tensor in ("P", "dS") and rows_only
        if (r.tensor in ("dQ", "dK", "dV") and not results) or every_row:
            tiles.append(SramTile(r.tensor, _label(r, trace), None, note="computing…"))
            continue
        if r.tensor in results:
            values = results[r.tensor][r.rows[0] : r.rows[1], r.cols[0] : r.cols[1]]
        elif r.tensor in ("P", "dP", "dS") and region_cells(r) > SAMPLED_ABOVE:
            values = dense_region(trace, r.tensor, r.rows, r.cols)  # made where drawn
        else:
            values = _operand(trace, r.tensor, r.rows, r.cols)
        first = r.rows[0] if r.tensor in QUERY_TENSORS else None
        tiles.append(
            SramTile(r.tensor, _label(r, trace), values, first, probabilities=r.tensor == "P")
        )
    return tiles


def region_cells(r) -> int:
    """How many cells a resident region holds."""
    return (r.rows[1] - r.rows[0]) * (r.cols[1] - r.cols[0])


def _label(r, trace: Trace) -> str:
    s = trace.schedule
    full_rows = r.rows == (0, s.n_q) and r.tensor in QUERY_TENSORS
    full_cols = r.cols == (0, s.n_k) and r.tensor in NK_TENSORS
    if full_rows and full_cols:
        return r.tensor
    if r.tensor in NK_TENSORS:
        return f"{r.tensor}_:j" if full_rows else f"{r.tensor}_i"
    if r.tensor in QUERY_TENSORS:
        return r.tensor if full_rows else f"{r.tensor}_i"
    return r.tensor if r.rows == (0, s.n_k) else f"{r.tensor}_j"


def tiled_backward_sram(trace: Trace, step: int, action) -> list[SramTile]:
    """The tiled lane's SRAM in a backward step: K_j, V_j, dK_j, dV_j held across the
    query blocks; Q_i, dO_i, L_i, D_i, dQ_i per visit; S, P̃, dP, dS tiles when updating."""
    s = trace.schedule
    held = {r.tensor: r for r in action.resident}
    tiles: list[SramTile] = []
    i, j = action.block_i, action.block_j
    for name in ("Q", "dO", "L", "D", "O"):
        if name in held:
            r = held[name]
            tiles.append(
                SramTile(name, f"{name}_i", _operand(trace, name, r.rows, r.cols), r.rows[0])
            )
    for name in ("K", "V"):
        if name in held:
            r = held[name]
            tiles.append(SramTile(name, f"{name}_j", _operand(trace, name, r.rows, r.cols)))
    if j is not None and "dK" in held and not trace.key_tile_ready(j):
        # dK_j, dV_j need every row's L and D: the second tier's (never made here)
        tiles.append(SramTile("dK", "dK_j", None, note="computing…"))
        tiles.append(SramTile("dV", "dV_j", None, note="computing…"))
    elif j is not None and "dK" in held:  # dK_j, dV_j after the blocks updated so far
        c0, c1 = s.cols(j)
        kt = trace.key_tile(j)
        done = trace.backward_blocks_done(c0, step)
        tiles.append(SramTile("dK", "dK_j", kt.dk[done], cached=False))
        tiles.append(SramTile("dV", "dV_j", kt.dv[done], cached=False))
    if i is not None and "dQ" in held:  # dQ_i as read, then with tile j added
        b = trace.backward_block(i)
        done = trace.backward_tiles_done(b.r0, step)
        tiles.append(SramTile("dQ", "dQ_i", b.dq[done], b.r0, cached=False))
    if "S" in held:  # the recomputed tiles, on chip only
        b = trace.backward_block(i)
        c0, c1 = s.cols(j)
        r = held["S"]
        tiles.append(SramTile("S", "S_ij", trace.scores_region(*r.rows, *r.cols), b.r0))
        tiles.append(SramTile("P", "P̃ = exp(S−L)", b.p_tilde[:, c0:c1], b.r0, probabilities=True))
        tiles.append(SramTile("dP", "dP_ij", b.dp[:, c0:c1], b.r0))
        tiles.append(SramTile("dS", "dS_ij", b.ds[:, c0:c1], b.r0))
    return tiles


def backward_equation(trace: Trace, lane: str, step: int, row: int, action) -> str:
    """The backward step in words; for a tiled update of `row`'s block, its numbers."""
    text = PHASE_TEXT.get(action.phase, action.label)
    s = trace.schedule
    if lane != "tiled" or action.phase != "bwd_update" or action.block_i != row // s.block_q:
        return text
    b = trace.backward_row(row)
    c0, c1 = s.cols(action.block_j)
    done = trace.backward_tiles_done(row, step)
    diff = float(
        np.max(np.abs(b.p_tilde[c0:c1] - trace.probs_region(row, row + 1, c0, c1)[0]), initial=0)
    )
    return (
        f"row {row}, tile {action.block_j}: P̃ = exp(S − L), L = {b.L:.4g}, D = {b.D:.4g}; "
        f"|P̃ − P| ≤ {diff:.1e}; dQ_row after {done} tile(s): "
        + ", ".join(f"{x:.4g}" for x in b.dq[done][:4])
    )
