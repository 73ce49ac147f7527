"""One backward action as the views see it: HBM transfers, what sits in SRAM, what is computed.

The backward counterpart of `compute.schedule.make_action`: the array timeline
(compute.timeline) stores only phase codes and block indices, and builds an `Action` here
when a view asks for a step. The transfers are the declared moves of
`compute.backward_schedule` (a test holds them equal step by step); the resident regions
are what the lanes draw in SRAM.

- dense (the standard backward): each step reads whole operands from HBM and writes a
  gradient or an N_q × N_k intermediate (dP, dS) back.
- tiled (FlashAttention-2's Algorithm 2, K/V outer): K_j, V_j, dK_j and dV_j stay on chip
  while the query blocks stream past; S, P̃ = exp(S − L), dP and dS are tiles in SRAM only;
  dQ_i goes back to HBM after each visit.
"""

from __future__ import annotations

from .schedule import Action, Region, Schedule, Transfer


def _g(tensor, rows, cols) -> Region:
    return Region(tensor, rows, cols)


def _rd(region: Region) -> Transfer:
    return Transfer(region, "read")


def _wr(region: Region) -> Transfer:
    return Transfer(region, "write")


def backward_action(s: Schedule, lane: str, phase: str, i: int | None, j: int | None) -> Action:
    """The backward action of `lane` in `phase` ("bwd_…") on query block i and key tile j."""
    d, dv, one, nq, nk = (0, s.d), (0, s.d_v), (0, 1), (0, s.n_q), (0, s.n_k)
    r = s.rows(i) if i is not None else None
    c = s.cols(j) if j is not None else None
    if lane == "dense":
        spec = {
            # (reads, write, label): one step of the standard backward.
            "bwd_dv": ((_g("P", nq, c), _g("dO", nq, dv)), _g("dV", c, dv),
                       f"dV = Pᵀ dO: key tile {j}"),
            "bwd_dp": ((_g("dO", r, dv), _g("V", nk, dv)), _g("dP", r, nk),
                       f"dP = dO Vᵀ: query block {i}"),
            "bwd_ds": ((_g("P", r, nk), _g("dP", r, nk)), _g("dS", r, nk),
                       f"dS = P ∘ (dP − rowsum(P ∘ dP)): query block {i}"),
            "bwd_dq": ((_g("dS", r, nk), _g("K", nk, d)), _g("dQ", r, d),
                       f"dQ = dS K: query block {i}"),
            "bwd_dk": ((_g("dS", nq, c), _g("Q", nq, d)), _g("dK", c, d),
                       f"dK = dSᵀ Q: key tile {j}"),
        }  # fmt: skip
        if phase in spec:
            reads, out, label = spec[phase]
            moves = (*(_rd(x) for x in reads), _wr(out))
            return Action(lane, phase, label, i, j, moves, (*reads, out), (out,))
    else:
        kv = (_g("K", c, d), _g("V", c, dv), _g("dK", c, d), _g("dV", c, dv)) if c else ()
        if phase == "bwd_preprocess":
            o_i, do_i, d_i = _g("O", r, dv), _g("dO", r, dv), _g("D", r, one)
            label = f"D = rowsum(dO ∘ O): block {i}"
            return Action(lane, phase, label, i, None, (_rd(o_i), _rd(do_i), _wr(d_i)),
                          (o_i, do_i, d_i), (d_i,))  # fmt: skip
        if phase == "bwd_init":
            label = "initialise dQ = 0 in HBM"
            return Action(lane, phase, label, None, None, (_wr(_g("dQ", nq, d)),), ())
        if phase == "bwd_load_kv" and not s.seen_tiles[j]:  # no query row sees tile j
            label = f"skip K, V tile {j}: no query row sees it; dK_j = dV_j = 0 on chip"
            return Action(lane, phase, label, None, j, (), kv[2:])
        if phase == "bwd_load_kv":
            label = f"load K, V tile {j}; dK_j = dV_j = 0 on chip"
            return Action(lane, phase, label, None, j, (_rd(kv[0]), _rd(kv[1])), kv)
        block = (
            _g("Q", r, d), _g("dO", r, dv), _g("L", r, one), _g("D", r, one), _g("dQ", r, d),
        ) if r else ()  # fmt: skip
        if phase == "bwd_load_q":
            label = f"read Q, dO, L, D, dQ of block {i}"
            return Action(lane, phase, label, i, j, tuple(_rd(x) for x in block), kv + block)
        if phase == "bwd_update":
            tiles = tuple(_g(t, r, c) for t in ("S", "P", "dP", "dS"))
            label = f"recompute S, P̃ = exp(S − L); dV_j, dP, dS, dK_j, dQ_i: block {i}, tile {j}"
            computes = (*tiles, kv[2], kv[3], block[4])
            return Action(lane, phase, label, i, j, (), kv + block + tiles, computes)
        if phase == "bwd_write_dq":
            label = f"write dQ block {i}"
            return Action(lane, phase, label, i, j, (_wr(block[4]),), kv)
        if phase == "bwd_write_dkdv":
            label = f"write dK, dV tile {j}"
            return Action(lane, phase, label, None, j, (_wr(kv[2]), _wr(kv[3])), ())
    raise ValueError(f"The {lane} backward has no phase {phase!r}.")
