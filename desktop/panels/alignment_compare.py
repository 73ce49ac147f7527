"""Both causal alignments of one problem side by side: the question FlashAttention users ask.

With N_q ≠ N_k, FlashAttention ≥ 2.1 aligns the causal diagonal bottom-right (row r sees
keys c ≤ r + N_k − N_q: with more queries than keys the first rows see none, output 0,
L = −∞) and PyTorch SDPA's is_causal aligns it top-left (c ≤ r). This dialog draws the
tile classes of both (compute.mask, as the lanes draw them) at the current sizes, window
and blocks, with the transfers each costs by the closed-form ledger.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize
from PySide6.QtGui import QPainter, QPalette, QPen
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QVBoxLayout, QWidget

import compute
from compute.mask import Mask
from compute.schedule import Schedule
from desktop.lanes.masks import LEGEND, paint_mask
from desktop.state.config import Config


def alignment_summary(config: Config, top_left: bool) -> tuple[Schedule, str]:
    """The schedule of `config` with the diagonal aligned as asked, and its numbers in words."""
    mask = Mask(config.mask.left, 0, top_left)  # causal, keeping a window's left side
    s = Schedule(
        config.n, config.n_k, config.d, config.dv, config.block_q, config.block_k,
        config.order, False, config.save_lse, mask,
    )  # fmt: skip
    led = compute.closed_form_ledger(
        s.n_q, s.n_k, s.d, s.d_v, block_q=s.block_q, block_k=s.block_k, order=s.order,
        causal=mask, save_lse=s.save_lse, dtype=config.dtype,
    )  # fmt: skip
    empty = len(mask.empty_rows(s.n_q, s.n_k))
    lo, hi = s.row_span
    loaded = int((hi - lo).sum())
    text = (
        f"<b>{'top-left (PyTorch SDPA is_causal)' if top_left else 'bottom-right (FlashAttention)'}"
        f"</b><br>{loaded} of {s.t_r * s.t_c} tiles loaded; {empty} row(s) see no key"
        f"{' (output 0, L = −∞)' if empty else ''}<br>tiled transfers "
        f"{led.lanes['tiled'].total_elements:,} elements"
    )
    return s, text


class TileMap(QWidget):
    """An N_q × N_k outline with the schedule's tile classes drawn as the lanes draw them."""

    def __init__(self, schedule: Schedule, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.schedule = schedule
        self.setMinimumSize(200, 160)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(320, 260)

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        s = self.schedule
        p = QPainter(self)
        room_w, room_h = self.width() - 16, self.height() - 16
        cell = min(room_w / s.n_k, room_h / s.n_q)
        rect = QRectF(10, 8, s.n_k * cell, s.n_q * cell)
        p.setPen(QPen(self.palette().color(QPalette.ColorRole.Mid), 1))
        p.drawRect(rect)
        paint_mask(p, self.palette(), s, rect)
        p.end()


class AlignmentDialog(QDialog):
    """Bottom-right and top-left causal masks of the current config, side by side."""

    def __init__(self, config: Config, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Causal alignments side by side")
        layout = QVBoxLayout(self)
        row = QHBoxLayout()
        self.maps: list[TileMap] = []
        self.texts: list[QLabel] = []
        for top_left in (False, True):
            s, text = alignment_summary(config, top_left)
            column = QVBoxLayout()
            label = QLabel(text)
            label.setWordWrap(True)
            tile_map = TileMap(s)
            column.addWidget(label)
            column.addWidget(tile_map, 1)
            row.addLayout(column)
            self.maps.append(tile_map)
            self.texts.append(label)
        layout.addLayout(row, 1)
        note = QLabel(
            f"N = {config.n} queries, N_keys = {config.n_k} keys, blocks "
            f"{config.block_q}×{config.block_k}. {LEGEND}."
        )
        note.setWordWrap(True)
        layout.addWidget(note)
