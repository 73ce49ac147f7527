"""One line per step saying what the recurrence does, with the selected row's numbers.

NumPy only. The numbers are the compute core's (row states before and after the
step, and the P̃ it recorded); this module only picks and formats them.
"""

from __future__ import annotations

import math

from compute import Trace

from .backward import backward_equation, is_backward

PHASE_TEXT = {
    ("dense", "load_q"): "Q_i is read to form S = Q Kᵀ / √d",
    ("dense", "write_s"): "S_ij = Q_i K_jᵀ / √d is written to HBM",
    ("dense", "softmax"): "softmax needs whole rows: S rows come back, P rows go out",
    ("dense", "accumulate"): "O_i += P_ij V_j: P is read back from HBM",
    ("dense", "write_o"): "O_i is written: the dense lane is done with this block",
    ("tiled", "load_q"): "Q_i stays on chip while the K/V tiles stream past",
    ("tiled", "load_kv"): "K_j and V_j come in; S_ij and P̃_ij will exist only on chip",
    (
        "tiled",
        "update",
    ): "m ← max(m, rowmax S_ij) · α = e^(m_old − m) · ℓ ← αℓ + rowsum P̃ · a ← αa + P̃V",
    ("tiled", "write_o"): "O_i = a/ℓ: one division per row, then one write",
    ("tiled", "init"): "Algorithm 1 starts with O = 0, ℓ = 0, m = −∞ in HBM",
    ("tiled", "load_state"): "Algorithm 1 re-reads Q_i, O_i, ℓ_i, m_i for every K/V tile",
    ("tiled", "write_state"): "…and writes O_i, ℓ_i, m_i back after each update",
}


def num(x: float) -> str:
    if math.isinf(x):
        return "−∞" if x < 0 else "∞"
    return f"{x:.4g}".replace("-", "−")


def step_equation(trace: Trace, lane: str, step: int, row: int) -> str:
    """What `lane` does at `step`; for a tiled update of `row`'s block, with its numbers."""
    action = trace.action(lane, step)  # this lane's only (a Step makes both)
    if action is None:
        return "done"
    if action.phase.endswith("load_kv") and not action.transfers:
        return action.label  # a key tile no row sees: skipped, nothing comes in
    if is_backward(action):
        return backward_equation(trace, lane, step, row, action)
    text = PHASE_TEXT.get((lane, action.phase), action.label)
    s = trace.schedule
    if lane != "tiled" or action.phase != "update" or action.block_i != row // s.block_q:
        return text
    before, after = trace.row_state(row, step - 1), trace.row_state(row, step)
    c0, c1 = s.cols(action.block_j)
    sum_p = float(trace.row_history(row).p_tilde[c0:c1].sum())  # the core's P̃ for this tile
    head = f"row {row}, tile {action.block_j}: m = max({num(before.m)}, rowmax S) = {num(after.m)}"
    if s.order == "q-outer":
        return (
            f"{head} · α = {num(after.alpha)} · ℓ = α·{num(before.l)} + ΣP̃ "
            f"({num(sum_p)}) = {num(after.l)} · a ← α a + P̃V"
        )
    return f"{head} · ℓ = {num(after.l)} · O_i ← (ℓ_i e^(m_i−m) O_i + P̃V e^(m̃−m)) / ℓ"
