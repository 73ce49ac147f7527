"""What an SRAM tile is (SramTile) and which tensors are indexed by query row.

Its own module so that desktop.scene.geometry (the forward's layout) and
desktop.scene.backward (the backward's tiles) both import it and neither imports the
other back: geometry -> backward -> tiles, one direction (an import-linter contract).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QUERY_TENSORS = frozenset({"Q", "S", "P", "O", "m", "l", "L", "dO", "D", "dP", "dS", "dQ"})


@dataclass
class SramTile:
    """One tile drawn in SRAM: what it is, its element region, and values to show."""

    tensor: str
    label: str
    values: np.ndarray | None  # None: the slot is empty at this step
    first_row: int | None = None  # query row of values[0] (for clicks); None for K/V
    note: str = ""  # shown when there are no values (e.g. "accumulating")
    cached: bool = True  # values are a view into the trace (safe to cache its image)
    probabilities: bool = False  # values are P (drawn on the probability scale)
