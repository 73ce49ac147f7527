"""The transport bar: first, back, play/pause, forward, last, a timeline scrubber, speed."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSlider, QStyle, QToolButton, QWidget

from .playback import SPEEDS, Playback
from .state import AppState


class PlaybackBar(QWidget):
    def __init__(self, state: AppState, playback: Playback, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state, self.playback = state, playback

        def button(icon: QStyle.StandardPixmap, tip: str, slot) -> QToolButton:
            b = QToolButton()
            b.setIcon(self.style().standardIcon(icon))
            b.setToolTip(tip)
            b.setAutoRaise(True)
            b.setMinimumWidth(30)
            b.clicked.connect(slot)
            return b

        self.first_button = button(
            QStyle.StandardPixmap.SP_MediaSkipBackward,
            "First step (Home)",
            lambda: playback.step_by(-state.n_steps),
        )
        self.back_button = button(
            QStyle.StandardPixmap.SP_MediaSeekBackward,
            "Step back (Left)",
            lambda: playback.step_by(-1),
        )
        self.play_button = button(
            QStyle.StandardPixmap.SP_MediaPlay, "Play / pause (Space)", playback.toggle
        )
        self.forward_button = button(
            QStyle.StandardPixmap.SP_MediaSeekForward,
            "Step forward (Right)",
            lambda: playback.step_by(1),
        )
        self.last_button = button(
            QStyle.StandardPixmap.SP_MediaSkipForward,
            "Last step (End)",
            lambda: playback.step_by(state.n_steps),
        )
        self.scrubber = QSlider(Qt.Orientation.Horizontal)
        self.scrubber.setToolTip(
            "Timeline: both lanes advance in lock-step, one action each per step"
        )
        self.scrubber.valueChanged.connect(self._scrubbed)
        self.step_label = QLabel()
        self.step_label.setMinimumWidth(110)
        self.speed_combo = QComboBox()
        for s in SPEEDS:
            self.speed_combo.addItem(f"{s:g} steps/s", s)
        self.speed_combo.setToolTip("Playback speed; slow frames skip steps rather than drift")
        self.speed_combo.currentIndexChanged.connect(
            lambda _i: playback.set_speed(self.speed_combo.currentData())
        )
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        for w in (
            self.first_button,
            self.back_button,
            self.play_button,
            self.forward_button,
            self.last_button,
        ):
            layout.addWidget(w)
        layout.addWidget(self.scrubber, 1)
        layout.addWidget(self.step_label)
        layout.addWidget(self.speed_combo)
        state.sigTraceChanged.connect(self._on_trace)
        state.sigStepChanged.connect(self._on_step)
        playback.sigPlaying.connect(self._show_playing)
        self.set_speed(playback.speed)

    def _show_playing(self, playing: bool) -> None:
        icon = (
            QStyle.StandardPixmap.SP_MediaPause if playing else QStyle.StandardPixmap.SP_MediaPlay
        )
        self.play_button.setIcon(self.style().standardIcon(icon))

    def set_speed(self, speed: float) -> None:
        index = self.speed_combo.findData(speed)
        self.speed_combo.setCurrentIndex(index if index >= 0 else 2)

    def _scrubbed(self, value: int) -> None:
        self.state.set_step(value)
        self.playback.sigProgress.emit(1.0)

    def _on_trace(self, _trace: object) -> None:
        with QSignalBlocker(self.scrubber):
            self.scrubber.setRange(0, max(0, self.state.n_steps - 1))
        self._on_step(self.state.step)

    def _on_step(self, step: int) -> None:
        with QSignalBlocker(self.scrubber):
            self.scrubber.setValue(step)
        self.step_label.setText(f"step {step + 1} / {self.state.n_steps}")
