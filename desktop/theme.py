"""Colours and palettes: read/write highlight colours, light and dark Fusion palettes.

Read and write colours are chosen away from the heatmap's blue–white–red scale (green
for HBM → SRAM reads, amber for SRAM → HBM writes) so a highlight never looks like a
value, and they differ in lightness for colour-blind readers.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import QApplication

READ = QColor("#1a9850")
WRITE = QColor("#e3a008")
THEMES: tuple[str, ...] = ("system", "light", "dark")


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def accent(palette: QPalette) -> QColor:
    """Text that stands out (the step's sentence, its recurrence): the highlight colour,
    or on a dark palette the lighter link colour (the highlight is a dim blue there)."""
    role = QPalette.ColorRole.Link if is_dark(palette) else QPalette.ColorRole.Highlight
    return palette.color(role)


def dark_palette() -> QPalette:
    """The dark theme's colours (also what a dark export is painted with)."""
    p = QPalette()
    role, group = QPalette.ColorRole, QPalette.ColorGroup
    colors = {
        role.Window: "#202326",
        role.WindowText: "#e6e6e6",
        role.Base: "#16181a",
        role.AlternateBase: "#26292c",
        role.ToolTipBase: "#2d3135",
        role.ToolTipText: "#e6e6e6",
        role.Text: "#e6e6e6",
        role.Button: "#2b2e31",
        role.ButtonText: "#e6e6e6",
        role.BrightText: "#ff6b6b",
        role.Highlight: "#3d7edb",
        role.HighlightedText: "#ffffff",
        role.Link: "#6aa8ff",
        role.Mid: "#55595e",
        role.Dark: "#141517",
        role.Light: "#3a3e42",
        role.PlaceholderText: "#8a8f94",
    }
    for r, c in colors.items():
        p.setColor(r, QColor(c))
    for r in (role.WindowText, role.Text, role.ButtonText):
        p.setColor(group.Disabled, r, QColor("#7a7f84"))
    return p


def apply_theme(app: QApplication, theme: str) -> None:
    """Fusion style with a light, dark or the platform's palette."""
    app.setStyle("Fusion")
    if theme == "dark":
        app.setPalette(dark_palette())
    elif theme == "light":
        app.setPalette(app.style().standardPalette())
    else:
        app.setPalette(QPalette())


def qimage(rgba: np.ndarray) -> QImage:
    """An owning QImage from an (h, w, 4) uint8 array."""
    rgba = np.ascontiguousarray(rgba)
    h, w = rgba.shape[:2]
    return QImage(rgba.data, w, h, 4 * w, QImage.Format.Format_RGBA8888).copy()


def settle_plot(view) -> None:
    """Run a pyqtgraph view's deferred range and axis updates now, before its paint: run
    in the paint, they dirtied the plots again and every change was painted twice (~8 ms
    each). Nothing for a view out of sight (a plot scrolled away is not painted)."""
    if in_sight(view):
        view.scene().prepareForPaint()


def in_sight(view) -> bool:
    """Whether any of a pyqtgraph view is on screen. Its viewport paints, and covers the
    view whole: the view's own visible region is always empty."""
    return not view.viewport().visibleRegion().isEmpty()


class FollowsPalette:
    """Mixin (before the Qt base) for a widget whose pyqtgraph plots keep the colours they
    were given: its restyle() runs on every palette change, which is the only way a theme
    switch reaches pyqtgraph."""

    def restyle(self) -> None:
        raise NotImplementedError

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.PaletteChange:
            self.restyle()
        super().changeEvent(event)  # type: ignore[misc]


def style_plot(widget, plot_items, palette: QPalette) -> None:
    """Give pyqtgraph widgets the window's colours (it defaults to black on any theme)."""
    bg = palette.color(QPalette.ColorRole.Base)
    fg = palette.color(QPalette.ColorRole.WindowText)
    widget.setBackground(bg)
    for item in plot_items:
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(fg)
            axis.setTextPen(fg)
        if item.titleLabel.text:
            item.titleLabel.setText(item.titleLabel.text, color=fg.name(), size="9pt")
        legend = item.legend
        if legend is not None:
            legend.setLabelTextColor(fg)
