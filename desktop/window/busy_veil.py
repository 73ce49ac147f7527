"""A veil over a view while the configuration it would show is still being computed.

Old numbers never sit beside new controls: while a threaded build runs, the lanes, the
ledger and the statistics are covered and say what is being computed ("computing N=934,
blocks 2×2…"); the veil lifts when the new trace arrives or the request fails.

The veil is opaque (desktop.panels.pending_cover): a translucent one made Qt repaint
every view beneath it (the lanes, the plots, the table) while the build ran, taking the
GIL from the build it waits for.
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from desktop.panels.pending_cover import PendingCover
from desktop.state.app_state import AppState


def computing_text(state: AppState) -> str:
    if state.refusal:  # over the memory budget: what to change, until a request fits
        return state.refusal
    c = state.current_config
    return f"computing N={c.n}, blocks {c.block_q}×{c.block_k}…"


class BusyVeil(PendingCover):
    """Shown while a threaded build runs (sigBusy) or the request is refused."""

    def __init__(self, state: AppState, target: QWidget) -> None:
        super().__init__(target)
        self.state = state
        self.setObjectName("busy_veil")
        state.sigBusy.connect(self._on_busy)
        state.sigRefused.connect(lambda _text: self._on_busy(state.builder.busy))

    def _on_busy(self, busy: bool) -> None:
        self.cover(busy or self.state.refused)

    def text(self) -> str:
        return computing_text(self.state)
