"""Widgets that elide, with the whole text in a tooltip, where a narrow dock would cut.

A report picker in a 420 px side dock cannot show "float16 N=4096 d=64 backward: tiled
kv-outer, dense, flash, sdpa-flash, sdpa-cudnn", and a table of five paths cannot show
every column at its natural width: cut at the edge ("…tiled q-", "peak Mi") they read as
broken. These end in "…" instead and say the rest on hover.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHeaderView,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QTableWidget,
    QWidget,
)


class ElidedCombo(QComboBox):
    """A combo box whose current text is elided to the box; its tooltip is the whole."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setProperty("elides", True)  # layout checks: an elided text is not cut

    def event(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:  # the whole of what is shown, even when the
            self.setToolTip(self.currentText())  # items were set with signals blocked
        return super().event(event)

    def shown_text(self) -> str:
        """The current text as painted: elided to the edit field's width."""
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        field = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, opt, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        return self.fontMetrics().elidedText(
            self.currentText(), Qt.TextElideMode.ElideRight, field.width()
        )

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        opt.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)


class FitTable(QTableWidget):
    """A table whose columns take their contents' width while they fit its width, and
    share it when they do not (cells then end in "…"; give the header items tooltips and
    labels short enough, on two lines if need be, for a shared column)."""

    hint_rows = 6  # the height it asks for: this many rows; past them it scrolls

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        hint = super().sizeHint()
        rows = sum(self.rowHeight(r) for r in range(min(self.rowCount(), self.hint_rows)))
        header = self.horizontalHeader().sizeHint().height()
        return QSize(hint.width(), min(self.maximumHeight(), header + rows + 6))

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self.fit_columns()

    def fit_columns(self) -> None:
        header = self.horizontalHeader()
        want = sum(
            max(self.sizeHintForColumn(c), header.sectionSizeHint(c))
            for c in range(self.columnCount())
        )
        fits = want <= self.viewport().width()
        mode = QHeaderView.ResizeMode.ResizeToContents if fits else QHeaderView.ResizeMode.Stretch
        header.setSectionResizeMode(mode)
