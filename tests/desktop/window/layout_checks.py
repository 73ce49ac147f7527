"""Geometry checks of a laid-out window: what a person would see as cut or overlapping.

Imported by the screen-size tests (and usable from a script on a real window):
`problems(window)` lists, in words, every single-line label whose text is wider than
the label, every pair of visible sibling widgets that overlap, a menu entry whose text
and shortcut do not fit the menu's width, and a scrubber narrower than SCRUBBER_MIN.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QTextDocumentFragment
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractScrollArea,
    QComboBox,
    QLabel,
    QMainWindow,
    QMenu,
    QScrollBar,
    QSplitterHandle,
    QStackedWidget,
    QTableView,
    QWidget,
)

SCRUBBER_MIN = 200


def _name(w: QWidget) -> str:
    text = ""
    if isinstance(w, (QLabel, QAbstractButton)):
        text = w.text()
    elif isinstance(w, QComboBox):
        text = w.currentText()
    return f"{type(w).__name__}({w.objectName() or text!r})"


def _shown(w: QWidget, top: QWidget) -> bool:
    return w.isVisibleTo(top) and w.width() > 0 and w.height() > 0


def cut_texts(top: QWidget, skip=frozenset()) -> list[str]:
    """Single-line labels, buttons and combo boxes whose text does not fit their width."""
    out = []
    for w in top.findChildren(QWidget):
        if w in skip or not _shown(w, top):
            continue
        if isinstance(w, QLabel):
            if w.wordWrap() or not w.text() or w.textFormat() == Qt.TextFormat.RichText:
                continue
            text = w.text()
            if w.textFormat() != Qt.TextFormat.PlainText and "<" in text:
                text = QTextDocumentFragment.fromHtml(text).toPlainText()
            room = w.contentsRect().width() - 2 * w.margin() - 2 * max(0, w.indent())
            need = max(w.fontMetrics().horizontalAdvance(t) for t in text.split("\n"))
        elif isinstance(w, QComboBox):
            # The arrow and frame take about 24 px of the box.
            room, need = w.width() - 24, w.fontMetrics().horizontalAdvance(w.currentText())
            if w.property("elides"):
                need = w.fontMetrics().horizontalAdvance(w.shown_text())  # "…", and a tooltip
        elif isinstance(w, QAbstractButton) and w.text():
            room = w.width() - (w.iconSize().width() + 4 if not w.icon().isNull() else 0)
            need = w.fontMetrics().horizontalAdvance(w.text().replace("&", ""))
            if type(w).__name__ in ("QCheckBox", "QRadioButton"):
                room -= 20  # the indicator
            else:
                room -= 4
        else:
            continue
        if need > room:
            out.append(f"cut: {_name(w)} needs {need} px, has {room}")
    return out


# Children that a widget lays out over one another on purpose: a scroll area's viewport
# and bars, a stacked widget's pages, a splitter's handles, a main window's docks and
# separators (QMainWindow's own layout), and veils that cover a view while it builds.
_SKIP_PARENTS = (QAbstractScrollArea, QStackedWidget, QMainWindow)


def overlaps(top: QWidget, skip=frozenset()) -> list[str]:
    """Pairs of visible sibling widgets whose rectangles intersect."""
    out = []
    for parent in [top, *top.findChildren(QWidget)]:
        if parent in skip or isinstance(parent, _SKIP_PARENTS) or not _shown(parent, top):
            continue
        kids = [
            c
            for c in parent.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly)
            if _shown(c, top)
            and not c.isWindow()
            and not isinstance(c, (QScrollBar, QSplitterHandle))
            and type(c).__name__ not in ("BusyVeil", "QFocusFrame", "QRubberBand")
            and not type(c).__name__.startswith("Qt")
        ]
        for i, a in enumerate(kids):
            for b in kids[i + 1 :]:
                inter: QRect = a.geometry().intersected(b.geometry())
                if inter.width() > 0 and inter.height() > 0:
                    out.append(f"overlap in {_name(parent)}: {_name(a)} and {_name(b)}")
    return out


def cut_headers(top: QWidget, skip=frozenset()) -> list[str]:
    """Table column headers cut: a label wider than its section (unless the header elides
    it and the full name is its tooltip), or a section running past the table's right
    edge while the table scrolls to the left end (the header reads "peak Mi")."""
    out = []
    for table in top.findChildren(QTableView):
        if table in skip or not _shown(table, top):
            continue
        header, model = table.horizontalHeader(), table.model()
        fm, room = header.fontMetrics(), table.viewport().width()
        for col in range(model.columnCount()):
            if header.isSectionHidden(col):
                continue
            text = str(model.headerData(col, Qt.Orientation.Horizontal) or "")
            tip = model.headerData(col, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
            need = max(fm.horizontalAdvance(line) for line in text.split("\n")) + 8
            size = header.sectionSize(col)
            elides = header.textElideMode() != Qt.TextElideMode.ElideNone
            if need > size and not (elides and tip and text in str(tip)):
                out.append(f"cut: header {text!r} of {_name(table)} needs {need} px, has {size}")
            right = header.sectionPosition(col) + min(size, need)
            if header.sectionPosition(col) < room < right:
                out.append(f"cut: header {text!r} of {_name(table)} runs past the table's edge")
    return out


def cut_menus(top: QWidget) -> list[str]:
    """Menu entries whose text, a gap and the shortcut ("Ctrl+Right") are wider than the
    entry the menu lays out for them (as it pops up: its size hint, or a width it is
    held to)."""
    out = []
    menus = top.findChildren(QMenu)
    for menu in [top, *menus] if isinstance(top, QMenu) else menus:
        fm = menu.fontMetrics()
        gap = 2 * fm.averageCharWidth()  # between text and shortcut, and at the right edge
        for act in menu.actions():
            if act.isSeparator() or not act.isVisible() or not act.text():
                continue
            keys = act.shortcut().toString(act.shortcut().SequenceFormat.NativeText)
            text = act.text().replace("&&", "\0").replace("&", "").replace("\0", "&")
            need = fm.horizontalAdvance(text) + (gap + fm.horizontalAdvance(keys) if keys else 0)
            room = min(menu.actionGeometry(act).width(), menu.maximumWidth()) - gap
            if need > room:
                out.append(
                    f"cut: menu {menu.title()!r} entry {text!r} {keys} needs {need} px, has {room}"
                )
    return out


def problems(window, skip=frozenset()) -> list[str]:
    """Everything cut or overlapping in `window` (but in `skip`), its menus' entries,
    and a scrubber below SCRUBBER_MIN."""
    found = cut_texts(window, skip) + cut_headers(window, skip) + overlaps(window, skip)
    found += cut_menus(window)
    if window.bar.scrubber.width() < SCRUBBER_MIN:
        found.append(f"scrubber {window.bar.scrubber.width()} px wide (< {SCRUBBER_MIN})")
    return found
