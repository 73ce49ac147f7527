"""An opaque cover with one line of text over a view whose numbers are not in yet.

Old numbers never sit beside new controls: a view still waiting for its part is
covered and says so. The cover is opaque, so Qt does not paint what lies beneath it
(a translucent one repainted the covered plots on every change).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPalette
from PySide6.QtWidgets import QSplitter, QWidget


class PendingCover(QWidget):
    """Kept the size of the widget it covers; hidden until `cover()`."""

    def __init__(self, target: QWidget, text: str = "computing…") -> None:
        # A splitter takes every child widget it shows as one more pane: over a splitter
        # the cover is its parent's child (shown as a pane, it squeezed the lanes to make
        # room and then gave the room back, two relayouts and repaints of every lane).
        self._beside = isinstance(target, QSplitter)
        super().__init__(target.parentWidget() if self._beside else target)
        self.target, self._text = target, text
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.hide()
        target.installEventFilter(self)

    def _place(self) -> None:
        self.setGeometry(self.target.geometry() if self._beside else self.target.rect())

    def cover(self, shown: bool = True) -> None:
        if shown:
            self._place()
            self.raise_()
            self.show()
            self.update()
        else:
            self.hide()

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        if obj is self.target and event.type() in (QEvent.Type.Resize, QEvent.Type.Move):
            self._place()
        return False

    def text(self) -> str:
        return self._text

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
