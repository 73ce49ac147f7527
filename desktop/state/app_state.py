"""AppState: the one place the GUI's state lives.

Holds the Config, the Trace built from it (with its precomputed images), the current
step and the selected query row. Views connect to its signals and read it; controls
write through its setters. A config change is a request: the Trace is rebuilt by a
TraceBuilder (off the GUI thread when large) and, on failure, the previous config
and Trace stay and `sigError` carries one sentence for a dialog.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from compute import Trace
from desktop.scene.render import LaneImages
from desktop.state.config import Config
from desktop.state.worker import TraceBuilder

PAINT_DUE_MS = 100  # after_paint's wait for a paint that may not come (a hidden window)


class AppState(QObject):
    sigConfigChanged = Signal(object)  # the Config the current Trace was built from
    sigRequested = Signal(object)  # the Config now asked for (controls show it at once)
    sigTraceChanged = Signal(object)  # the new Trace
    sigStepChanged = Signal(int)
    sigRowChanged = Signal(int)
    sigKeyChanged = Signal(int)  # the selected key row (the backward's dK, dV follow it)
    sigProgressChanged = Signal(float)  # how far the step's transfers have travelled
    sigError = Signal(str)  # one user-facing sentence
    sigBusy = Signal(bool)
    sigNotice = Signal(str)  # a passing remark for the status bar
    sigRefused = Signal(str)  # the config asked for is over the memory budget ('' = no longer)
    sigPartsChanged = Signal(object)  # the shown trace's pending parts (a frozenset) changed
    sigImagesChanged = Signal()  # the shown trace's second tier replaced its placeholders

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.config: Config | None = None
        self.requested: Config | None = None  # the newest config asked for (may be pending)
        self.trace: Trace | None = None
        self.images: LaneImages | None = None
        self.step = 0
        self.row = 0
        self.key = 0
        self.progress = 1.0  # 0 → 1 within a step while playing; 1 once transfers arrive
        self._row_hint = 0  # the row the user chose; kept when a smaller N clamps it
        self.refusal = ""  # why the config asked for cannot be built ('' when it can)
        self.refused = False  # the shown numbers are veiled by a refusal (see _refused)
        # What of the shown trace is still computing (worker.PARTS, or the curves alone);
        # views mark it ("computing") instead of showing numbers of another configuration.
        self.pending_parts: frozenset[str] = frozenset()
        self.part_at = 0.0  # perf_counter() when the last part began to be shown
        # Callbacks for after the window's next paint (after_paint); a window that
        # reports its paints (window_painted) sets paints_reported.
        self._after_paint: list[Callable[[], None]] = []
        self.paints_reported = False
        self._paint_due = QTimer(self)
        self._paint_due.setSingleShot(True)
        self._paint_due.timeout.connect(self.window_painted)
        self.builder = TraceBuilder(
            self._built,
            self._failed,
            self._refused,
            on_first=lambda *result: self._built(*result[:3], pending=result[3]),
            on_part=self._part,
            after_paint=self.after_paint,
        )
        self.builder.setParent(self)
        self.builder.sigBusy.connect(self.sigBusy)

    # ---- paints ---------------------------------------------------------------------
    def after_paint(self, fn: Callable[[], None]) -> None:
        """Run `fn` once the window has painted what is dirty now: a tier's next part is
        made after its paint, not beside it. Qt paints a window on a timer of its own
        (~5 ms after the first update), so a zero timer ran before the paint. Without a
        window that reports its paints, at the next turn of the event loop; if no paint
        comes (a hidden window), after PAINT_DUE_MS."""
        self._after_paint.append(fn)
        if not self._paint_due.isActive():
            self._paint_due.start(PAINT_DUE_MS if self.paints_reported else 0)

    def window_painted(self) -> None:
        """The window has painted (MainWindow, after each of its update requests)."""
        self._paint_due.stop()
        due, self._after_paint = self._after_paint, []
        for fn in due:
            fn()

    # ---- configuration -------------------------------------------------------------
    def set_config(self, config: Config) -> None:
        """Ask for a new configuration; the Trace follows when built."""
        if config == self.requested and not self.builder.busy and not self.refused:
            return
        self.refusal = ""  # the veil says "computing" until this one is built or refused
        self.requested = config
        self.sigRequested.emit(config)
        self.builder.request(config, row=self._row_hint, key=self.key)

    @property
    def current_config(self) -> Config:
        """The configuration the controls stand for: the newest asked for (maybe still
        computing), else the one shown, else the reference example. The one definition."""
        return self.requested or self.config or Config()

    def update_config(self, **changes: object) -> None:
        """Change some fields of the newest requested config."""
        self.set_config(self.current_config.replace(**changes))

    def _built(
        self,
        config: Config,
        trace: Trace,
        images: LaneImages,
        pending: frozenset[str] = frozenset(),
    ) -> None:
        # Keep the position in the timeline where it still exists. A first trace opens at
        # step 1, where the story starts; one viewed at its end stays at the end.
        if self.trace is None:
            step = 0
        elif self.step >= self.trace.n_steps - 1:
            step = trace.n_steps - 1
        else:
            step = min(self.step, trace.n_steps - 1)
        row = min(self._row_hint, trace.schedule.n_q - 1)
        row_changed = row != self.row
        # Step and row are valid for the new trace before anyone hears of it.
        self.config, self.trace, self.images = config, trace, images
        self.pending_parts = pending
        self._lift_refusal()
        self.requested, self.step, self.row = config, step, row
        self.key = min(self.key, trace.schedule.n_k - 1)
        self.sigConfigChanged.emit(config)
        self.sigTraceChanged.emit(trace)
        self.sigStepChanged.emit(step)
        if row_changed:
            self.sigRowChanged.emit(row)

    def _part(
        self, trace: Trace, images: LaneImages | None, done: frozenset[str] | None = None
    ) -> None:
        """A part of the shown trace: the plots (the row's curves, the ledger's sweep),
        or a streamed one's heatmaps and all-rows numbers with their images (None: the
        images are still to come). `done` names the parts it fills (None: every one)."""
        if trace is not self.trace:
            return  # (the builder delivers only the newest generation's parts)
        self.part_at = time.perf_counter()  # (bench-gui: the tier before was painted by now)
        new_images = images is not None and images is not self.images
        if new_images:
            self.images = images
        self.pending_parts = frozenset() if done is None else self.pending_parts - done
        self.sigPartsChanged.emit(self.pending_parts)
        if new_images:  # (a one-part build's plots come with the images it had)
            self.sigImagesChanged.emit()

    def adopt(self, other: AppState) -> None:
        """Show what `other` shows (its config, trace, step, row and key row) without a
        rebuild: an offscreen copy of the window, or of a panel, renders exports from it."""
        if other.trace is None or other.config is None:
            return
        self._row_hint, self.key = other.row, other.key
        images = other.images
        if other.pending_parts:  # a copy renders complete frames: fill the rest here
            from desktop.scene.render import prepare_images

            images = prepare_images(other.trace)
        self._built(other.config, other.trace, images)
        self.set_step(other.step)
        self.set_progress(other.progress)

    def _refused(self, message: str) -> None:
        """The config asked for is over the memory budget. The budget is checked on the
        configuration the user lands on, not on each one passed through (raising B_r
        before B_c at N = 4096 crosses one that does not fit): the controls keep what
        was asked, the shown numbers stay veiled (never beside controls they do not
        match) with the sentence, and the next request that fits lifts it. Nothing
        shown yet: as any failure (the reference example opens)."""
        if self.config is None:
            self._failed(message)
            return
        self.refusal, self.refused = message, True
        self.sigRefused.emit(message)
        self.sigNotice.emit(message)

    def _lift_refusal(self) -> None:
        self.refusal = ""
        if self.refused:
            self.refused = False
            self.sigRefused.emit("")

    def _failed(self, message: str) -> None:
        self._lift_refusal()
        failed, self.requested = self.requested, self.config
        self.sigError.emit(message)
        if self.config is not None:
            self.sigConfigChanged.emit(self.config)  # controls fall back to what is shown
        elif failed != Config():
            # Nothing shown yet (e.g. the saved file has gone): open on the reference example.
            self.set_config(Config())

    # ---- timeline and selection ----------------------------------------------------
    @property
    def n_steps(self) -> int:
        return self.trace.n_steps if self.trace is not None else 0

    def set_step(self, step: int) -> None:
        if self.trace is None:
            return
        step = max(0, min(int(step), self.trace.n_steps - 1))
        if step != self.step:
            self.step = step
            self.sigStepChanged.emit(step)

    def set_progress(self, progress: float) -> None:
        """Move the current step's transfer arrows; 1.0 means they have arrived."""
        progress = min(1.0, max(0.0, float(progress)))
        if progress != self.progress:
            self.progress = progress
            self.sigProgressChanged.emit(progress)

    def set_row(self, row: int) -> None:
        self._row_hint = max(0, int(row))
        if self.trace is None:
            return
        row = min(self._row_hint, self.trace.schedule.n_q - 1)
        if row != self.row:
            self.row = row
            self.sigRowChanged.emit(row)

    def set_key(self, key: int) -> None:
        """Select a key row (clamped to the trace's N_keys)."""
        n_k = self.trace.schedule.n_k if self.trace is not None else 1
        key = max(0, min(int(key), n_k - 1))
        if key != self.key:
            self.key = key
            self.sigKeyChanged.emit(key)
