"""The main window's menus and their shortcuts (Space, arrows, Home/End, Ctrl+arrows)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QActionGroup, QKeySequence

from desktop.state.config import Config
from desktop.theme import THEMES


def build_menus(self) -> None:  # self: the MainWindow (keeps the lines as they read there)
    """File, Playback, View (docks, theme) and Help menus of a MainWindow."""
    mb = self.menuBar()
    # Public so other features (exports) can add their entries above Quit.
    self.file_menu = file_menu = mb.addMenu("&File")
    self._action(
        file_menu, "&Open Q, K, V…", self.controls.open_file, QKeySequence.StandardKey.Open
    )
    self._action(
        file_menu, "Back to the &reference example", lambda: self.state.set_config(Config())
    )
    self.quit_separator = file_menu.addSeparator()
    self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
    play = self.playback_menu = mb.addMenu("&Playback")
    pb = self.playback
    self.play_action = self._action(play, "Play / pause", pb.toggle, Qt.Key.Key_Space)
    self._action(play, "Step forward", lambda: pb.step_by(1), Qt.Key.Key_Right)
    self._action(play, "Step back", lambda: pb.step_by(-1), Qt.Key.Key_Left)
    self._action(play, "First step", lambda: pb.step_by(-self.state.n_steps), Qt.Key.Key_Home)
    self._action(play, "Last step", lambda: pb.step_by(self.state.n_steps), Qt.Key.Key_End)
    play.addSeparator()
    self._action(
        play,
        "Next key tile of the selected row",
        lambda: pb.row_tile(+1),
        "Ctrl+Right",
        "Jump to the next step that updates the selected row's m, ℓ and a",
    )
    self._action(
        play,
        "Previous key tile of the selected row",
        lambda: pb.row_tile(-1),
        "Ctrl+Left",
        "Jump back to the previous step that updated the selected row",
    )
    self._view_menu = mb.addMenu("&View")
    for dock in self.docks.values():
        self._view_menu.addAction(dock.toggleViewAction())
    # Panels added later (the GPU panel) go above this line, with the other panels.
    self.panels_separator = self._view_menu.addSeparator()
    theme_menu = self._view_menu.addMenu("Theme")
    group = QActionGroup(self)
    self._theme_actions = {}
    for theme in THEMES:
        act = self._action(
            theme_menu, theme.capitalize(), lambda _c=False, t=theme: self.set_theme(t)
        )
        act.setCheckable(True)
        group.addAction(act)
        self._theme_actions[theme] = act
    help_menu = mb.addMenu("&Help")
    self._action(help_menu, "&About FlashAttention Explorer", self.about)
