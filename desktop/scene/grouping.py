"""How finely the lanes animate a timeline: the one place tile grouping is decided.

The numbers are always the user's (every step exists and can be scrubbed to); only
the animation groups. A lane can show about MAX_DRAWN_TILES distinct tiles a side;
past that, one animation frame advances a group of tiles, and the bar says so
("each frame: 16 key tiles"). Arrow keys and playback move by one frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compute import Trace

MAX_DRAWN_TILES = 128  # tiles a side a lane draws as distinct cells
# Frames in a whole run before frames group: about what 128 × 128 tiles take.
MAX_FRAMES = 2 * MAX_DRAWN_TILES * MAX_DRAWN_TILES


@dataclass(frozen=True)
class Grouping:
    stride: int  # timeline steps per animation frame
    unit: str  # what one group of steps does, in words ("key tiles", "block visits")
    per_frame: int  # how many of `unit` one frame advances

    def describe(self) -> str:
        """One line for the bar; empty when every step is its own frame."""
        return f"each frame: {self.per_frame:,} {self.unit}" if self.stride > 1 else ""


def grouping_for(trace: Trace) -> Grouping:
    """Steps per frame: whole tiles of the tiled lane (Q-outer: load K/V + update per key
    tile; KV-outer: read state, update, write back per query-block visit)."""
    s = trace.schedule
    steps_per, unit = (2, "key tiles") if s.order == "q-outer" else (3, "query-block visits")
    groups = math.ceil(trace.n_steps / (MAX_FRAMES * steps_per))
    if groups <= 1:
        return Grouping(1, unit, 1)
    return Grouping(groups * steps_per, unit, groups)
