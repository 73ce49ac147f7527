"""The transport bar: first, back, play/pause, forward, last, a timeline scrubber, speed."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, QRectF, QSignalBlocker, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPalette, QPixmap, QPolygonF
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSlider, QToolButton, QWidget

from desktop.scene.grouping import grouping_for
from desktop.state.app_state import AppState
from desktop.state.playback import AUTO, AUTO_SECONDS, SPEEDS, Playback


def transport_icon(kind: str, color: QColor, dpr: float = 1.0) -> QIcon:
    """A 16 px media glyph: triangles and bars."""
    size = 16
    pix = QPixmap(int(size * dpr), int(size * dpr))
    pix.setDevicePixelRatio(dpr)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(color)

    def tri(x0: float, x1: float) -> None:  # pointing from x0 to x1
        p.drawPolygon(QPolygonF([QPointF(x0, 3), QPointF(x1, 8), QPointF(x0, 13)]))

    if kind == "play":
        tri(4, 13)
    elif kind == "pause":
        p.drawRect(QRectF(4, 3, 3, 10))
        p.drawRect(QRectF(9, 3, 3, 10))
    elif kind == "forward":
        tri(3, 10)
        p.drawRect(QRectF(11, 3, 2, 10))
    elif kind == "back":
        tri(13, 6)
        p.drawRect(QRectF(3, 3, 2, 10))
    elif kind == "last":
        tri(2, 8)
        tri(8, 14)
        p.drawRect(QRectF(13, 3, 2, 10))
    elif kind == "first":
        tri(14, 8)
        tri(8, 2)
        p.drawRect(QRectF(1, 3, 2, 10))
    p.end()
    return QIcon(pix)


def speed_text(speed: float, stride: int) -> str:
    """A speed in what it plays: steps, or frames where a frame groups `stride` steps
    (the bar's read-out says what a frame holds)."""
    return f"{speed:g} steps/s" if stride <= 1 else f"{speed:g} frames/s"


class PlaybackBar(QWidget):
    def __init__(self, state: AppState, playback: Playback, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state, self.playback = state, playback
        self._build_buttons()
        self._build_timeline()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        for w in self._buttons:
            layout.addWidget(w)
        layout.addWidget(self.scrubber, 1)
        layout.addWidget(self.step_label)
        layout.addWidget(self.speed_combo)
        state.sigTraceChanged.connect(self._on_trace)
        state.sigStepChanged.connect(self._on_step)
        playback.sigPlaying.connect(self._show_playing)
        self.set_speed(playback.speed)

    # ---- construction ----------------------------------------------------------------
    def _build_buttons(self) -> None:
        """First, back, play/pause, forward, last: icons drawn in the palette's colour."""
        state, playback = self.state, self.playback

        def button(kind: str, tip: str, slot) -> QToolButton:
            b = QToolButton()
            b.setProperty("icon_kind", kind)
            b.setToolTip(tip)
            b.setAutoRaise(True)
            b.setMinimumWidth(30)
            b.clicked.connect(slot)
            return b

        self.first_button = button(
            "first", "First step (Home)", lambda: playback.step_by(-state.n_steps)
        )
        self.back_button = button("back", "Step back (Left)", lambda: playback.step_by(-1))
        self.play_button = button("play", "Play / pause (Space)", playback.toggle)
        self.forward_button = button("forward", "Step forward (Right)", lambda: playback.step_by(1))
        self.last_button = button(
            "last", "Last step (End)", lambda: playback.step_by(state.n_steps)
        )
        self._buttons = (
            self.first_button,
            self.back_button,
            self.play_button,
            self.forward_button,
            self.last_button,
        )
        self._paint_icons()

    def _build_timeline(self) -> None:
        """The scrubber, the step read-out and the speed choice."""
        self.scrubber = QSlider(Qt.Orientation.Horizontal)
        self.scrubber.setToolTip(
            "Timeline: both lanes advance in lock-step, one action each per step"
        )
        self.scrubber.valueChanged.connect(self._scrubbed)
        self.step_label = QLabel()
        self.step_label.setMinimumWidth(110)
        self.speed_combo = QComboBox()
        self.speed_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.speed_combo.addItem(f"whole run in {AUTO_SECONDS:g} s", AUTO)
        for s in SPEEDS:
            self.speed_combo.addItem(speed_text(s, 1), s)
        self.speed_combo.setToolTip("Playback speed; slow frames skip steps rather than drift")
        self.speed_combo.currentIndexChanged.connect(
            lambda _i: self.playback.set_speed(self.speed_combo.currentData())
        )

    def _show_playing(self, playing: bool) -> None:
        self.play_button.setProperty("icon_kind", "pause" if playing else "play")
        self._paint_icons()

    def _paint_icons(self) -> None:
        """Icons drawn in the palette's text colour, so they read on light and dark themes
        (the style's stock media icons are dark glyphs that vanish on a dark palette)."""
        color = self.palette().color(QPalette.ColorRole.ButtonText)
        for b in self._buttons:
            b.setIcon(transport_icon(b.property("icon_kind"), color, self.devicePixelRatioF()))

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.PaletteChange:
            self._paint_icons()
        super().changeEvent(event)

    def set_speed(self, speed: float) -> None:
        index = self.speed_combo.findData(speed)
        self.speed_combo.setCurrentIndex(index if index >= 0 else self.speed_combo.findData(2.0))

    def _scrubbed(self, value: int) -> None:
        self.state.set_step(value)
        self.state.set_progress(1.0)

    def _on_trace(self, _trace: object) -> None:
        with QSignalBlocker(self.scrubber):
            self.scrubber.setRange(0, max(0, self.state.n_steps - 1))
        trace = self.state.trace
        stride = grouping_for(trace).stride if trace is not None else 1
        for i in range(self.speed_combo.count()):
            speed = self.speed_combo.itemData(i)
            if speed != AUTO:
                self.speed_combo.setItemText(i, speed_text(speed, stride))
        # Wide enough for the longest read-out of this trace, so the scrubber keeps one
        # width while the step's digits grow.
        n = self.state.n_steps
        self.step_label.setMinimumWidth(
            self.step_label.fontMetrics().horizontalAdvance(self._text(n - 1)) + 8
        )
        self._on_step(self.state.step)

    def _text(self, step: int) -> str:
        text = f"step {step + 1:,} / {self.state.n_steps:,}"
        trace = self.state.trace
        group = grouping_for(trace).describe() if trace is not None else ""
        return f"{text} · {group}" if group else text

    def _on_step(self, step: int) -> None:
        with QSignalBlocker(self.scrubber):
            self.scrubber.setValue(step)
        self.step_label.setText(self._text(step))
