"""What a lane's painters read, passed explicitly: the lane, the app's state and the widget's look.

The HBM and SRAM painters are plain functions of a LaneContext, so they rely on nothing
but these fields (no mixin reaching into a widget's attributes), and an exporter or a test
can paint a lane with a context of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF
from PySide6.QtGui import QFont, QImage, QPalette

from desktop.state.app_state import AppState


@dataclass(frozen=True)
class LaneContext:
    state: AppState
    lane: str  # "dense" or "tiled"
    palette: QPalette
    font: QFont
    images: dict[str, QImage]  # the lane's HBM heatmaps, ready to draw
    live: tuple[str, ...]  # tensors whose HBM contents change with the step (KV-outer)
    rects: dict[str, QRectF]  # where each HBM tensor is drawn
    number_min_px: float | None = None  # device px below which cell numbers are left out
    veils: object | None = None  # a view's hbm.VeilCache (exports make each veil afresh)
    sprites: object | None = None  # a view's sprites.Sprites (exports draw every stroke)
