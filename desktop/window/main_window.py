"""The main window: two lanes in the middle, controls left, statistics and ledger right.

Owns the AppState, the Playback and the docks; wires menus, shortcuts, the status bar,
QSettings persistence and error dialogs. Side panels (the GPU panel) join through
`add_side_panel`; exporters render frames through `render_frame`.
"""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QEvent, QPoint, QRect, QSettings, Qt
from PySide6.QtGui import QAction, QCloseEvent, QFont, QImage, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFrame,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from desktop import version
from desktop.decode.view import DecodeView
from desktop.lanes.legend import Legend
from desktop.lanes.view import LaneView
from desktop.panels.controls import ControlsPanel
from desktop.panels.gpu.panel import attach_gpu_panel
from desktop.panels.ledger import LedgerPanel
from desktop.panels.stats import StatsPanel
from desktop.state.app_state import AppState
from desktop.state.config import Config
from desktop.state.playback import Playback
from desktop.theme import THEMES, apply_theme
from desktop.window.busy_veil import BusyVeil, computing_text
from desktop.window.export_dialogs import Exports
from desktop.window.menus import build_menus
from desktop.window.playback_bar import PlaybackBar
from desktop.window.saved_settings import (
    check_saved,
    parse_bytes,
    parse_config_json,
    parse_row,
    parse_speed,
    parse_theme,
    read_value,
)

LEDGER_HEIGHT = 290  # the bottom dock: table and sweep; the lanes keep the rest
STATS_BAR_W = 16  # the statistics dock's scroll bar beside its rows
DESIGN_SIZE = (1600, 1000)  # the window's size where the screen allows it
COMPACT_HEIGHT = 960  # below this available height the bottom dock joins the right one
SCREEN_MARGIN = (16, 48)  # room for the window manager's frame and title bar
HINT = "Space plays · click a row to follow it"
ORGANISATION, APPLICATION = "FlashAttentionExplorer", "flash-explorer"
ABOUT = (
    "<h3>FlashAttention Explorer {version}</h3>"
    "<p>Two lanes compute the same exact attention on the same inputs. The dense lane writes "
    "the N×N scores S and probabilities P to HBM and reads them back; the tiled lane streams "
    "K/V tiles through SRAM and carries a running max m, denominator ℓ and numerator a per "
    "query row, so S and P never leave the chip.</p>"
    "<p>Where the numbers come from: every value is computed by the NumPy core on the inputs "
    "shown and checked against a float64 dense reference; transfer counts are for the "
    "declared schedules (FlashAttention-2's Q-outer order, or Algorithm 1's KV-outer order), "
    "not measurements of a GPU; the GPU panel's timings are recorded or live CuPy runs.</p>"
    "<p>References: Tri Dao, Daniel Y. Fu, Stefano Ermon, Atri Rudra, Christopher Ré, "
    "<i>FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness</i> "
    "(NeurIPS 2022, arXiv:2205.14135): Algorithm 1 and Theorem 2. Tri Dao, "
    "<i>FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning</i> "
    "(2023, arXiv:2307.08691).</p>"
    "<p><b>Keyboard</b></p><table>{keys}</table>"
    "<p>A click on a row in either lane follows that row in the statistics panel.</p>"
)


def app_version() -> str:
    """The installed package's version (what a bug report should quote)."""
    return version()


def initial_geometry(available: QRect) -> QRect:
    """The first-launch geometry: the designed size, shrunk to fit `available` (the
    screen less its panels and frame), centred in it."""
    w = min(DESIGN_SIZE[0], available.width() - SCREEN_MARGIN[0])
    h = min(DESIGN_SIZE[1], available.height() - SCREEN_MARGIN[1])
    rect = QRect(0, 0, max(w, 320), max(h, 240))
    rect.moveCenter(available.center())
    # Never above or left of the available area (a title bar out of reach).
    rect.moveTopLeft(QPoint(max(rect.left(), available.left()), max(rect.top(), available.top())))
    return rect


def saved_config() -> Config | None:
    """The configuration the last session closed with, if any."""
    return read_value(QSettings(ORGANISATION, APPLICATION), "config", parse_config_json, None)


class MainWindow(QMainWindow):
    def __init__(
        self,
        config: Config | None = None,
        *,
        persist: bool = True,
        build_inline: bool = False,
        adopt: AppState | None = None,
    ) -> None:
        super().__init__()
        self.persist = persist  # screenshots and tests neither read nor write settings
        self.setWindowTitle("")  # the application's display name is the title until a config
        self.setAcceptDrops(True)
        self.state = AppState(self)
        self.state.builder.force_inline = build_inline
        self.state.paints_reported = True  # (event(): after each update request)
        self.playback = Playback(self.state, self)
        splitter = self._build_centre()
        self._build_docks()
        self._build_status_bar()
        self.theme = "system"
        self._build_menus()
        self.exports = Exports(self)
        self.exports.add_actions(self.file_menu, before=self.quit_separator)
        self.gpu_panel = attach_gpu_panel(self)
        self._connect()
        # While a build runs, the views that would show old numbers are veiled.
        self.veils = [
            BusyVeil(self.state, w) for w in (splitter, self.ledger_panel, self.stats_panel)
        ]
        self._fit_screen()
        if adopt is not None:
            self._theme_actions["system"].setChecked(True)
            self.state.adopt(adopt)  # a copy: shows what another window shows, no rebuild
        else:
            self._restore(config)

    def event(self, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        handled = super().event(event)
        if event.type() == QEvent.Type.UpdateRequest:  # the window's dirty widgets painted
            self.state.window_painted()
        return handled

    def _build_centre(self) -> QSplitter:
        """The two lanes (HBM above SRAM each); the legend and the playback bar below all."""
        self.lanes = {lane: LaneView(self.state, lane) for lane in ("dense", "tiled")}
        self.legend = Legend(self.state)
        self.bar = PlaybackBar(self.state, self.playback)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setChildrenCollapsible(False)  # a lane is never squeezed to nothing
        for lane in self.lanes.values():
            splitter.addWidget(lane)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(splitter, 1)
        # Pass -> Decode swaps the lanes for the decode view (its own controls and numbers).
        self.lanes_splitter, self.decode_view = splitter, DecodeView()
        self.decode_view.hide()
        layout.addWidget(self.decode_view, 1)
        self.setCentralWidget(central)
        # The bar spans the window's whole width, under the docks: between them the lanes
        # are about 550 px wide on a 1280 x 720 screen, which left the scrubber, the main
        # control of an animation, a few pixels once the buttons and read-outs had theirs.
        bar = QToolBar("Playback")
        bar.setObjectName("playback_bar")  # saveState needs stable names
        bar.setMovable(False)
        bar.setFloatable(False)
        bar.toggleViewAction().setVisible(False)  # never hidden by a stray right click
        bar.addWidget(self.bar)
        # The legend too: between the docks it wrapped onto four lines at 1280 x 720,
        # taken from the lanes' height.
        legend = QToolBar("Legend")
        legend.setObjectName("legend_bar")
        legend.setMovable(False)
        legend.setFloatable(False)
        legend.toggleViewAction().setVisible(False)
        legend.addWidget(self.legend)
        self.addToolBar(Qt.ToolBarArea.BottomToolBarArea, legend)
        self.addToolBarBreak(Qt.ToolBarArea.BottomToolBarArea)
        self.addToolBar(Qt.ToolBarArea.BottomToolBarArea, bar)
        return splitter

    def show_decode(self, on: bool) -> None:
        """The decode view in place of the two lanes (on), or the lanes back. The lanes'
        playback bar, the selected row's statistics and the lanes' ledger belong to the
        lanes: paused and greyed while the decode view (its own play, step and ledger) is
        shown."""
        if on:
            self.playback.pause()
        self.lanes_splitter.setVisible(not on)
        self.decode_view.setVisible(on)
        self.bar.setEnabled(not on)
        self.stats_panel.setEnabled(not on)
        self.ledger_panel.setEnabled(not on)
        for action in self.playback_menu.actions():  # Space and the arrows with them
            action.setEnabled(not on)
        self.exports.decode_shown(on)

    def _build_docks(self) -> None:
        """Controls left, the selected row's statistics right, the ledger below."""
        self.controls = ControlsPanel(self.state)
        self.controls.decode_toggled.connect(self.show_decode)
        self.stats_panel = StatsPanel(self.state)
        self.ledger_panel = LedgerPanel(self.state)
        scroll = QScrollArea()
        scroll.setWidget(self.controls)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(self.controls.sizeHint().width() + 24)
        self.docks: dict[str, QDockWidget] = {}
        self._dock("controls", "Configuration", scroll, Qt.DockWidgetArea.LeftDockWidgetArea)
        # The statistics scroll when the dock is shorter than their plots need (a training
        # step shows the forward's plots and the backward's); never squeezed flat.
        stats_scroll = QScrollArea()
        stats_scroll.setWidget(self.stats_panel)
        stats_scroll.setWidgetResizable(True)
        stats_scroll.setFrameShape(QFrame.Shape.NoFrame)
        stats_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Always on: a bar that comes and goes re-lays the rows out at two widths, and the
        # first layout (without it) left the row's last control under it.
        stats_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        self._dock(
            "stats",
            "Selected row: online softmax",
            stats_scroll,
            Qt.DockWidgetArea.RightDockWidgetArea,
        )
        # The ledger scrolls too: its table and sweep wanted 250 px (400 stacked in the
        # narrow right column), which made the window taller than a 1280 x 720 screen.
        ledger_scroll = QScrollArea()
        ledger_scroll.setWidget(self.ledger_panel)
        ledger_scroll.setWidgetResizable(True)
        ledger_scroll.setFrameShape(QFrame.Shape.NoFrame)
        ledger_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._dock("ledger", "HBM ledger", ledger_scroll, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.setCorner(Qt.Corner.BottomLeftCorner, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)

    def _build_status_bar(self) -> None:
        """The step in words, what is computing, and the first-launch hint."""
        self.status_label = QLabel()
        self.busy_label = QLabel()
        self.hint_label = QLabel(HINT)
        self.hint_label.setObjectName("first_hint")
        italic = QFont(self.hint_label.font())
        italic.setItalic(True)
        self.hint_label.setFont(italic)  # a font, not a style sheet: keeps the theme's colour
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.busy_label)
        # Overflow of the tiled dtype stays visible while that trace is shown.
        self.overflow_label = QLabel()
        self.overflow_label.setStyleSheet("color: #b2182b; font-weight: bold;")
        self.overflow_label.setWordWrap(True)
        self.statusBar().addPermanentWidget(self.overflow_label)
        self.statusBar().addPermanentWidget(self.hint_label)

    def _connect(self) -> None:
        self.stats_panel.sigTileJump.connect(self.playback.row_tile)
        self.state.sigStepChanged.connect(self._show_status)
        self.state.sigTraceChanged.connect(lambda _t: self._show_status(self.state.step))
        self.state.sigTraceChanged.connect(self._show_overflow)
        self.state.sigPartsChanged.connect(self._show_overflow)
        self.state.sigError.connect(self.show_error)
        self.state.sigConfigChanged.connect(self._show_title)
        self.state.sigNotice.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.state.sigBusy.connect(
            lambda busy: self.busy_label.setText(computing_text(self.state) if busy else "")
        )
        # The hint goes once what it says has been used: playing, or following a row.
        self.playback.sigPlaying.connect(lambda playing: playing and self.hide_hint())
        self.state.sigRowChanged.connect(lambda _row: self.hide_hint())

    def hide_hint(self) -> None:
        self.hint_label.hide()

    def _fit_screen(self) -> None:
        """Open at the designed size where it fits, else at the screen's available size,
        with the docks arranged to match. Offscreen (screenshots, exports, tests) there
        is no real screen: the designed size and layout."""
        screen = self.screen() or QApplication.primaryScreen()
        if screen is None or QApplication.platformName() == "offscreen":
            self.resize(*DESIGN_SIZE)
            self.arrange_docks(compact=False)
            return
        self.fit_to(screen.availableGeometry())

    def fit_to(self, available: QRect) -> None:
        """Size the window and arrange the docks for a screen's available area."""
        self.setGeometry(initial_geometry(available))
        self.arrange_docks(compact=available.height() < COMPACT_HEIGHT)

    def arrange_docks(self, compact: bool) -> None:
        """Compact (a short screen): the ledger is a tab beside the statistics, so the
        lanes keep the whole height. Otherwise the ledger is a strip below the lanes."""
        ledger, right = self.docks["ledger"], Qt.DockWidgetArea.RightDockWidgetArea
        if compact:
            if self.dockWidgetArea(ledger) != right:
                self.addDockWidget(right, ledger)
                self.tabifyDockWidget(self.docks["stats"], ledger)
            self.docks["stats"].raise_()
            widths = [250, 420 + STATS_BAR_W]
        else:
            if self.dockWidgetArea(ledger) != Qt.DockWidgetArea.BottomDockWidgetArea:
                self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, ledger)
            self.resizeDocks([ledger], [LEDGER_HEIGHT], Qt.Orientation.Vertical)
            widths = [270, 440 + STATS_BAR_W]
        self.resizeDocks(
            [self.docks["controls"], self.docks["stats"]], widths, Qt.Orientation.Horizontal
        )

    # ---- construction ----------------------------------------------------------------
    def _dock(self, key: str, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock_{key}")  # saveState needs stable names
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        self.docks[key] = dock
        return dock

    def add_side_panel(
        self, widget: QWidget, title: str, key: str | None = None, beside: str = "ledger"
    ) -> QDockWidget:
        """Add a panel (e.g. the GPU panel) as a dock tabbed with another ('ledger' below
        the lanes, or 'stats' on the right).

        The panel sits in a scroll area: a tall panel must not force its dock area, and
        with it the lanes, to its own minimum height.
        """
        scroll = QScrollArea()
        scroll.setWidget(widget)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        dock = self._dock(
            key or title.lower().replace(" ", "_"),
            title,
            scroll,
            self.dockWidgetArea(self.docks[beside]),
        )
        self.tabifyDockWidget(self.docks[beside], dock)
        self.docks[beside].raise_()
        self._view_menu.insertAction(self.panels_separator, dock.toggleViewAction())
        return dock

    def _action(self, menu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        act.setStatusTip(tip)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _build_menus(self) -> None:
        build_menus(self)

    # ---- drag and drop: a .npy/.npz dropped on the window opens it ----------------------
    @staticmethod
    def _dropped_file(mime) -> str | None:
        urls = mime.urls() if mime.hasUrls() else []
        paths = [u.toLocalFile() for u in urls if u.isLocalFile()]
        ok = [p for p in paths if p.lower().endswith((".npy", ".npz"))]
        return ok[0] if len(ok) == 1 else None

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if self._dropped_file(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt override)
        path = self._dropped_file(event.mimeData())
        if path:
            event.acceptProposedAction()
            self.state.update_config(input="file", file=path)

    # ---- behaviour -----------------------------------------------------------------
    def _show_title(self, cfg: Config) -> None:
        source = {"seed": "reference example", "random": f"random (seed {cfg.seed})"}.get(
            cfg.input, Path(cfg.file).name
        )
        # Qt appends the application's display name ("— FlashAttention Explorer").
        self.setWindowTitle(
            f"{source}, N = {cfg.n}, d = {cfg.d}, blocks {cfg.block_q}×{cfg.block_k}"
        )

    def overflow_text(self) -> str:
        """The overflow sentence for the shown trace ('' when its dtype held every value)."""
        t = self.state.trace
        if t is None or "errors" in self.state.pending_parts:
            return ""  # checked once the pass over S has the tiled output
        return t.overflow or ""

    def _show_overflow(self, _trace: object) -> None:
        text = self.overflow_text()
        self.overflow_label.setText(f"⚠ {text}" if text else "")
        self.overflow_label.setToolTip(text)

    def _show_status(self, step: int) -> None:
        trace = self.state.trace
        if trace is not None:
            self.status_label.setText(trace.steps[step].describe())

    def show_error(self, message: str) -> None:
        QMessageBox.warning(self, "FlashAttention Explorer", message)

    def shortcuts(self) -> list[tuple[str, str]]:
        """(keys, what they do) for every action of the window that has a shortcut."""
        found = []
        for act in self.findChildren(QAction):
            keys = act.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
            if keys:
                found.append((keys, act.text().replace("&", "").rstrip("…")))
        return found

    def about_text(self) -> str:
        keys = "".join(
            f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{what}</td></tr>"
            for k, what in self.shortcuts()
        )
        return ABOUT.format(version=app_version(), keys=keys)

    def about(self) -> None:
        QMessageBox.about(self, "About FlashAttention Explorer", self.about_text())

    def set_theme(self, theme: str) -> None:
        self.theme = theme if theme in THEMES else "system"
        apply_theme(QApplication.instance(), self.theme)
        self._theme_actions[self.theme].setChecked(True)
        for w in (*self.lanes.values(), self.legend):
            w.update()
        # The plots restyle themselves on the PaletteChange the new palette sends them.

    def offscreen_copy(self) -> MainWindow:
        """A hidden window showing what this one shows, laid out the same: exports
        render through it, so the user's view never moves behind the progress dialog."""
        twin = MainWindow(persist=False, build_inline=True, adopt=self.state)
        twin.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
        twin.set_theme(self.theme)
        twin.stats_panel.whole_run.setChecked(self.stats_panel.whole_run.isChecked())
        twin.resize(self.size())
        twin.restoreState(self.saveState())
        twin.show()
        QApplication.processEvents()
        return twin

    def render_frame(self, step: int | None = None, target: str = "window") -> QImage:
        """The window, one lane ('dense', 'tiled'), 'stats' or 'ledger' at a step, as a QImage."""
        if step is not None:
            self.state.set_step(step)
        self.state.set_progress(1.0)
        widget = {"window": self, "stats": self.stats_panel, "ledger": self.ledger_panel}.get(
            target
        )
        widget = widget or self.lanes[target]
        QApplication.processEvents()
        return widget.grab().toImage()

    # ---- settings ------------------------------------------------------------------
    def _settings(self) -> QSettings:
        return QSettings(ORGANISATION, APPLICATION)

    def _restore(self, config: Config | None) -> None:
        saved = None
        if self.persist:
            s = self._settings()
            if read_value(s, "hint_used", lambda v: str(v).lower() == "true", False):
                self.hide_hint()
            geometry = read_value(s, "geometry", parse_bytes, None)
            if geometry is not None:
                self.restoreGeometry(geometry)
                state = read_value(s, "windowState", parse_bytes, None)
                if state is not None:
                    self.restoreState(state)
            saved = saved_config() if config is None else None  # read (and warn) once
            self.state.set_row(read_value(s, "row", parse_row, 0))
            self.bar.set_speed(read_value(s, "speed", parse_speed, 2.0))
            self.set_theme(read_value(s, "theme", parse_theme, "system"))
        else:
            self._theme_actions["system"].setChecked(True)
        self.state.set_config(config or saved or Config())

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt override)
        self.playback.pause()
        self.state.builder.shutdown()
        if self.persist:
            s = self._settings()
            s.setValue("geometry", self.saveGeometry())
            s.setValue("windowState", self.saveState())
            if self.state.config is not None:
                s.setValue("config", json.dumps(self.state.config.to_dict()))
            s.setValue("row", self.state.row)
            s.setValue("speed", self.playback.speed)
            s.setValue("theme", self.theme)
            s.setValue("hint_used", self.hint_label.isHidden())
            check_saved(s)
        super().closeEvent(event)
