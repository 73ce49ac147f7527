"""Playback: a timer that moves AppState's step by elapsed time.

The position is start + elapsed × speed, so a slow frame skips steps instead of
drifting behind the clock. The fractional part drives the transfer animation
(AppState.progress: 0 → 1 within a step; 1 when paused, i.e. transfers have arrived).
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from desktop.scene.grouping import grouping_for
from desktop.state.app_state import AppState

# Steps per second; the fast end plays N = 1024 timelines (tens of thousands of steps).
SPEEDS: tuple[float, ...] = (0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096)
AUTO = 0.0  # a speed meaning "play the whole timeline in AUTO_SECONDS"
AUTO_SECONDS = 20.0


class Playback(QObject):
    sigPlaying = Signal(bool)

    def __init__(self, state: AppState, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.speed = 2.0
        self._timer = QTimer(self)
        self._timer.setInterval(16)
        self._timer.timeout.connect(self._tick)
        self._t0 = 0.0
        self._pos0 = 0.0
        self._own_step = -1  # the step the timer itself set last
        state.sigTraceChanged.connect(self._on_trace)
        state.sigStepChanged.connect(self._on_step)

    @property
    def playing(self) -> bool:
        return self._timer.isActive()

    def play(self) -> None:
        if self.state.trace is None or self.playing:
            return
        if self.state.step >= self.state.n_steps - 1:
            self.state.set_step(0)  # replay from the start
        self._rebase()
        self._timer.start()
        self.sigPlaying.emit(True)

    def pause(self) -> None:
        if not self.playing:
            return
        self._timer.stop()
        self.state.set_progress(1.0)
        self.sigPlaying.emit(False)

    def toggle(self) -> None:
        self.pause() if self.playing else self.play()

    @property
    def stride(self) -> int:
        """Steps per animation frame (1 unless the timeline is too fine to draw; see
        desktop.scene.grouping)."""
        trace = self.state.trace
        return grouping_for(trace).stride if trace is not None else 1

    @property
    def rate(self) -> float:
        """Steps per second now: `speed` frames, or for AUTO the whole timeline in AUTO_SECONDS."""
        if self.speed == AUTO:
            return max(1.0, self.state.n_steps / AUTO_SECONDS)
        return self.speed * self.stride

    def set_speed(self, steps_per_second: float) -> None:
        if self.playing:
            self._rebase()  # keep the current position; only the rate changes
        self.speed = float(steps_per_second)

    def _rebase(self) -> None:
        self._t0, self._pos0 = time.perf_counter(), float(self.state.step)

    def _tick(self) -> None:
        pos = self._pos0 + (time.perf_counter() - self._t0) * self.rate
        last = self.state.n_steps - 1
        if pos >= last + 1:
            self.state.set_step(last)
            self.pause()
            return
        step = int(pos)
        self._own_step = step
        self.state.set_step(step)
        self.state.set_progress(pos - step)

    def _on_step(self, step: int) -> None:
        if self.playing and step != self._own_step:
            self._rebase()  # the user scrubbed while playing: continue from there

    def _on_trace(self, _trace: object) -> None:
        if self.playing:
            self._rebase()

    def step_by(self, delta: int) -> None:
        """Step `delta` frames (a frame is `stride` steps on long timelines)."""
        self._jump(self.state.step + delta * self.stride)

    def _jump(self, step: int) -> None:
        """Manual stepping pauses playback first (the user takes over)."""
        self.pause()
        self.state.set_step(step)
        self.state.set_progress(1.0)

    def row_tile(self, direction: int) -> None:
        """Jump to the next (+1) or previous (−1) step that updates the selected row's
        m, ℓ, a: following one query through its key tiles, as the explainer suggests."""
        trace = self.state.trace
        if trace is None:
            return
        steps = trace.row_updates(self.state.row)[0].tolist()
        step = self.state.step
        later = [s for s in steps if s > step] if direction > 0 else [s for s in steps if s < step]
        if later:  # to that exact step: frames are not the unit here
            self._jump(later[0] if direction > 0 else later[-1])
