"""A veil over a view while the configuration it would show is still being computed.

Old numbers never sit beside new controls: while a threaded build runs, the lanes, the
ledger and the statistics are covered and say what is being computed ("computing N=934,
blocks 2×2…"); the veil lifts when the new trace arrives or the request fails.

The veil is opaque: a translucent one made Qt repaint every view beneath it (the lanes,
the plots, the table) while the build ran, taking the GIL from the build it waits for.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPalette
from PySide6.QtWidgets import QWidget

from desktop.state.app_state import AppState


def computing_text(state: AppState) -> str:
    if state.refusal:  # over the memory budget: what to change, until a request fits
        return state.refusal
    c = state.current_config
    return f"computing N={c.n}, blocks {c.block_q}×{c.block_k}…"


class BusyVeil(QWidget):
    """An opaque cover with one line of text, kept the size of the widget it covers."""

    def __init__(self, state: AppState, target: QWidget) -> None:
        super().__init__(target)
        self.state, self.target = state, target
        self.setObjectName("busy_veil")
        # Nothing beneath shows through, so Qt does not repaint what the veil covers.
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.hide()
        target.installEventFilter(self)
        state.sigBusy.connect(self._on_busy)
        state.sigRefused.connect(lambda _text: self._on_busy(state.builder.busy))

    def _on_busy(self, busy: bool) -> None:
        if busy or self.state.refused:
            self.setGeometry(self.target.rect())
            self.raise_()
            self.show()
            self.update()
        else:
            self.hide()

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        if obj is self.target and event.type() == QEvent.Type.Resize:
            self.setGeometry(self.target.rect())
        return False

    def text(self) -> str:
        return computing_text(self.state)

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(self.palette().color(QPalette.ColorRole.Window)))
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        p.setFont(font)
        p.setPen(self.palette().color(QPalette.ColorRole.WindowText))
        flags = Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap  # a refusal is long
        p.drawText(self.rect().adjusted(24, 0, -24, 0), flags, self.text())
        p.end()
