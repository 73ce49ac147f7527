"""What the decode view shows, computed by compute.decode on seeded inputs (no Qt).

A DecodeStep holds the problem, each split's partial state and the combine, the selected
query row's statistics (compute.decode.split_table), the closed-form ledgers and roofline
of every schedule, and the check that makes the numbers trustworthy: the split-KV and
one-pass outputs against the float64 dense reference on the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compute.decode import (
    DecodeProblem,
    Merge,
    SplitPartials,
    SplitTable,
    combine,
    decode_inputs,
    decode_summary,
    dense_decode,
    one_pass_decode,
    split_partials,
    split_table,
)

# Sizes the view computes numbers for at once, on the GUI thread: about 2 s of NumPy at most
# (measured on the shared development machine: 1e8 multiply-adds take about 2 s, a tile step
# of the streamed schedules 1-3 ms, one split's block about 5 ms).
MAX_VIEW_KEYS = 16384
MAX_VIEW_HEADS = 64
MAX_VIEW_SPLITS = 512
MAX_VIEW_WORK = 100_000_000  # H_q · N_q · N_k · (d + d_v)
MAX_VIEW_TILE_STEPS = 1024  # H_kv · T_c
MAX_VIEW_BLOCKS = 512  # H_kv · S' (the default splits fill 2 x 132 SMs: 264 and more)


@dataclass(frozen=True)
class DecodeStep:
    """One decode step's numbers for the view."""

    problem: DecodeProblem
    parts: SplitPartials
    merged: Merge
    table: SplitTable
    summary: dict
    split_error: float  # max |O_split-KV − O_dense|
    one_pass_error: float  # max |O_one-pass − O_dense|


def check_view_size(problem: DecodeProblem) -> None:
    """One sentence if the view would compute for too long at this size."""
    if problem.n_k > MAX_VIEW_KEYS or problem.h_q > MAX_VIEW_HEADS:
        raise ValueError(
            f"The decode view computes every number for up to {MAX_VIEW_KEYS:,} keys and "
            f"{MAX_VIEW_HEADS} query heads; use `flash-explorer decode` for the ledger of a "
            "larger step."
        )
    if problem.splits > MAX_VIEW_SPLITS:
        raise ValueError(f"The decode view draws at most {MAX_VIEW_SPLITS} splits.")
    p = problem
    if (
        p.h_q * p.n_q * p.n_k * (p.d + p.d_v) > MAX_VIEW_WORK
        or p.h_kv * p.t_c > MAX_VIEW_TILE_STEPS
    ):
        raise ValueError(
            "This step is too large to compute in the window at once: use fewer heads, new "
            "tokens or keys, a smaller head size or a larger tile (`flash-explorer decode` "
            "prints the ledger of any size)."
        )


def decode_step(
    problem: DecodeProblem, *, head: int = 0, row: int = 0, seed: int = 0
) -> DecodeStep:
    """The numbers of `problem` on seeded standard-normal inputs, row (head, row) selected."""
    check_view_size(problem)
    q, k, v = decode_inputs(problem, seed=seed)
    parts = split_partials(problem, q, k, v)
    merged = combine(parts.o, parts.lse)
    reference = dense_decode(problem, q, k, v)[2]
    one_pass = one_pass_decode(problem, q, k, v)[0]
    return DecodeStep(
        problem,
        parts,
        merged,
        split_table(parts, merged, head, row),
        decode_summary(problem, closed_form=True),
        float(np.max(np.abs(merged.o - reference))),
        float(np.max(np.abs(one_pass - reference))),
    )


def steps_to_finish(problem: DecodeProblem) -> tuple[int, int]:
    """Animation steps (one tile per block per step) of one-pass and of split-KV's splits."""
    longest = max(t1 - t0 for t0, t1 in map(problem.split_tiles, range(problem.splits_used)))
    return problem.t_c, longest
