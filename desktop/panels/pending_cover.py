"""An opaque cover with one line of text over a view whose numbers are not in yet.

Old numbers never sit beside new controls: a view still waiting for its part is
covered and says so. The cover is opaque, so Qt does not paint what lies beneath it
(a translucent one repainted the covered plots on every change).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPalette
from PySide6.QtWidgets import QWidget


class PendingCover(QWidget):
    """Kept the size of the widget it covers; hidden until `cover()`."""

    def __init__(self, target: QWidget, text: str = "computing…") -> None:
        super().__init__(target)
        self.target, self._text = target, text
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.hide()
        target.installEventFilter(self)

    def cover(self, shown: bool = True) -> None:
        if shown:
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
