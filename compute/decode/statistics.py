"""One query row's split statistics, as a statistics panel lists them.

For query head h and new token r: each split's keys, its partial (m_s, ℓ_s) on chip,
L_s = m_s + log ℓ_s in HBM, the α_s = exp(L_s − m*) the combine rescales it by and
the weight exp(L_s − L) its O_s enters the output with; then the merged m*, ℓ and L.
"""

from __future__ import annotations

from dataclasses import dataclass

from .attention import Merge, SplitPartials


@dataclass(frozen=True)
class SplitRow:
    """One split's statistics for one query row."""

    split: int
    keys: tuple[int, int]
    m: float
    l: float
    lse: float
    alpha: float
    weight: float


@dataclass(frozen=True)
class SplitTable:
    """Every split's row, then the merge: m* = max_s L_s, ℓ = Σ α_s, L = m* + log ℓ."""

    head: int
    row: int
    splits: tuple[SplitRow, ...]
    m: float
    l: float
    lse: float


def split_table(parts: SplitPartials, merged: Merge, head: int, row: int) -> SplitTable:
    """The statistics of query head `head`, new token `row`; one sentence if out of range."""
    n_heads, n_rows = parts.m.shape[1:]
    if not (0 <= head < n_heads and 0 <= row < n_rows):
        raise ValueError(
            f"Query head {head}, token {row} is outside the {n_heads} heads × {n_rows} new "
            "tokens of this decode step."
        )
    at = (slice(None), head, row)
    splits = tuple(
        SplitRow(s, (int(c0), int(c1)), float(m), float(l), float(lse), float(alpha), float(w))
        for s, ((c0, c1), m, l, lse, alpha, w) in enumerate(
            zip(
                parts.keys,
                parts.m[at],
                parts.l[at],
                parts.lse[at],
                merged.alpha[at],
                merged.weights[at],
                strict=True,
            )
        )
    )
    return SplitTable(
        head,
        row,
        splits,
        float(merged.m[head, row]),
        float(merged.l[head, row]),
        float(merged.lse[head, row]),
    )
