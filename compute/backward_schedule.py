"""The declared HBM schedules of the backward pass, step by step (shape only, no values).

Each lane is a generator of `BackwardStep`s, written as the loops of the algorithm so that
summing their moves is the counted ledger (the oracle the closed form is held to).

- dense (the standard backward, with the dense forward's blocking: an operand that spans all
  keys is read once per query block, one that spans all queries once per key tile):
  (1) dV = Pᵀ dO, per key tile: read P's columns and all of dO, write dV_j;
  (2) dP = dO Vᵀ, per query block: read dO_i and all of V, write dP's rows;
  (3) dS = P ∘ (dP − rowsum(P ∘ dP)), per query block: read P and dP rows, write dS rows;
  (4) dQ = dS K · scale, per query block: read dS rows and all of K, write dQ_i;
  (5) dK = dSᵀ Q · scale, per key tile: read dS columns and all of Q, write dK_j.
- tiled (FlashAttention-2's Algorithm 2, K/V outer): preprocess D = rowsum(dO ∘ O) per
  query block; write dQ = 0; per key tile read K_j, V_j; per query block that sees the tile
  read Q_i, dO_i, L_i, D_i and dQ_i, then write dQ_i back (dQ accumulates in HBM); after
  the query blocks write dK_j and dV_j. S, P, dP and dS never leave the chip.

The backward always runs K/V outer; the forward's `order` does not change it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .schedule import TENSORS, Region, Schedule, Transfer

# The gradient tensors and D = rowsum(dO ∘ O); backward and training ledgers list these
# after the forward's tensors (the backward reads L, already a forward tensor).
BACKWARD_TENSORS: tuple[str, ...] = ("dO", "dQ", "dK", "dV", "dP", "dS", "D")
PASS_TENSORS: tuple[str, ...] = TENSORS + BACKWARD_TENSORS
PASSES: tuple[str, ...] = ("forward", "backward", "training")


@dataclass(frozen=True)
class BackwardStep:
    """What one lane does in one step of the backward: its HBM moves, in words and blocks."""

    lane: str
    phase: str
    label: str
    block_i: int | None
    block_j: int | None
    moves: tuple[Transfer, ...]


def _r(tensor, rows, cols) -> Transfer:
    return Transfer(Region(tensor, rows, cols), "read")


def _w(tensor, rows, cols) -> Transfer:
    return Transfer(Region(tensor, rows, cols), "write")


def dense_backward_steps(s: Schedule) -> Iterator[BackwardStep]:
    """The standard backward: P, dP and dS materialised in HBM."""
    d, dv, nq, nk = (0, s.d), (0, s.d_v), (0, s.n_q), (0, s.n_k)
    for j in range(s.t_c):
        c = s.cols(j)
        moves = (_r("P", nq, c), _r("dO", nq, dv), _w("dV", c, dv))
        yield BackwardStep("dense", "dv", f"dV = Pᵀ dO: key tile {j}", None, j, moves)
    for i in range(s.t_r):
        r = s.rows(i)
        moves = (_r("dO", r, dv), _r("V", nk, dv), _w("dP", r, nk))
        yield BackwardStep("dense", "dp", f"dP = dO Vᵀ: query block {i}", i, None, moves)
    for i in range(s.t_r):
        r = s.rows(i)
        moves = (_r("P", r, nk), _r("dP", r, nk), _w("dS", r, nk))
        label = f"dS = P ∘ (dP − rowsum(P ∘ dP)): query block {i}"
        yield BackwardStep("dense", "ds", label, i, None, moves)
    for i in range(s.t_r):
        r = s.rows(i)
        moves = (_r("dS", r, nk), _r("K", nk, d), _w("dQ", r, d))
        yield BackwardStep("dense", "dq", f"dQ = dS K: query block {i}", i, None, moves)
    for j in range(s.t_c):
        c = s.cols(j)
        moves = (_r("dS", nq, c), _r("Q", nq, d), _w("dK", c, d))
        yield BackwardStep("dense", "dk", f"dK = dSᵀ Q: key tile {j}", None, j, moves)


def tiled_backward_steps(s: Schedule) -> Iterator[BackwardStep]:
    """FlashAttention-2's backward, K/V outer, dQ accumulated in HBM."""
    d, dv, one, nq = (0, s.d), (0, s.d_v), (0, 1), (0, s.n_q)
    for i in range(s.t_r):
        r = s.rows(i)
        moves = (_r("O", r, dv), _r("dO", r, dv), _w("D", r, one))
        yield BackwardStep("tiled", "preprocess", f"D = rowsum(dO ∘ O): block {i}", i, None, moves)
    yield BackwardStep("tiled", "init", "initialise dQ = 0 in HBM", None, None, (_w("dQ", nq, d),))
    for j in range(s.t_c):
        c = s.cols(j)
        if s.seen_tiles[j]:
            moves, label = (_r("K", c, d), _r("V", c, dv)), f"load K, V tile {j}; dK_j = dV_j = 0"
        else:  # no query row sees tile j: K_j, V_j are never loaded, dK_j = dV_j = 0
            moves, label = (), f"skip K, V tile {j}: no query row sees it; dK_j = dV_j = 0"
        yield BackwardStep("tiled", "load_kv", label, None, j, moves)
        for i in np.flatnonzero(s.visible[:, j]).tolist():
            r = s.rows(i)
            loads = tuple(_r(t, r, d if t == "Q" else dv) for t in ("Q", "dO"))
            loads += (_r("L", r, one), _r("D", r, one), _r("dQ", r, d))
            yield BackwardStep("tiled", "load_q", f"read Q, dO, L, D, dQ of block {i}", i, j, loads)
            label = f"recompute S, P = exp(S − L); dV_j, dP, dS, dK_j: block {i}, tile {j}"
            yield BackwardStep("tiled", "update", label, i, j, ())
            yield BackwardStep("tiled", "write_dq", f"write dQ block {i}", i, j, (_w("dQ", r, d),))
        moves = (_w("dK", c, d), _w("dV", c, dv))
        yield BackwardStep("tiled", "write_dkdv", f"write dK, dV tile {j}", None, j, moves)


def backward_steps(s: Schedule, lane: str) -> Iterator[BackwardStep]:
    """The backward steps of one lane ("dense" or "tiled")."""
    return dense_backward_steps(s) if lane == "dense" else tiled_backward_steps(s)


def backward_sram_elements(s: Schedule, lane: str) -> int:
    """Peak SRAM working set of a lane's backward, in elements, at this schedule's blocks."""
    b_r, b_c = min(s.block_q, s.n_q), min(s.block_k, s.n_k)
    if lane == "tiled":
        # K_j, V_j, dK_j, dV_j; Q_i, dO_i, dQ_i; L_i, D_i; an S/P tile and a dP/dS tile.
        return 2 * b_c * (s.d + s.d_v) + b_r * (2 * s.d + s.d_v) + 2 * b_r + 2 * b_r * b_c
    # Dense, streaming each phase tile by tile: (1) P_ij, dO_i, dV_j; (2) dO_i, V_j, dP_ij;
    # (3) a block of P and dP rows (the rowsum needs whole rows); (4) dS_ij, K_j, dQ_i;
    # (5) dS_ij, Q_i, dK_j.
    dv_phase = b_r * b_c + b_r * s.d_v + b_c * s.d_v
    ds_phase = 2 * b_r * s.n_k
    dqk_phase = b_r * b_c + b_r * s.d + b_c * s.d
    return max(dv_phase, ds_phase, dqk_phase)
