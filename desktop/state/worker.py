"""Builds Traces off the GUI thread; the newest request always wins.

A one-thread QThreadPool runs at most one build at a time. A new request drops any
queued-but-unstarted build (`QThreadPool.clear`) and bumps a generation counter, so
a build that was already running when the user moved on is discarded on arrival.
A request starts at once when no build runs (no fixed delay); while one runs, only
the newest request waits and starts when it ends, so a drag runs at most two builds
and the last one is always the value the user left the control at. Results cross
back to the GUI thread through a queued signal.

Numbers come in two tiers (desktop.scene.render.prepare_first / complete_images): a
large forward's job delivers the trace with its first tier as soon as it has it (the veil
lifts; what is missing is marked "computing"), then the plots (the row's curves, the
ledger's sweep) as a part once that tier is painted, then the second tier. A newer
request cancels the job between chunks of its pass over S (compute.numbers.Cancelled),
so the newest request starts within a chunk, and a part of an old trace never arrives;
a job that comes in one part (a small or cached pass) is cancelled the same way, and its
all-rows numbers and a backward's key-row tile follow with the plots (LATE_PARTS). A
large backward (or training step) streams too: its first tier has the forward's O, L,
D and the selected rows' gradients, the second the whole gradients, dP and dS.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, QTimer, Signal

from compute import InputError
from compute.chunk_pool import run_all
from compute.numbers import Cancelled
from desktop.scene.render import (
    DISPLAY_CAP,
    LaneImages,
    complete_images,
    prepare_first,
    prepare_images,
    streams,
)
from desktop.scene.row_series import stats_curves
from desktop.state.config import BudgetError, Config, build

# What a streamed trace's first delivery leaves to follow (AppState.pending_parts): the
# heatmaps that need all of S (P, O, the tiled lane's O, m, ℓ, L), the all-rows numbers
# (the maximum error, the overflow check) and the plots: the statistics panel's curves of
# the selected row and the ledger's sweep. The plots need only that row and the shapes,
# but handing ~100 k vertices to pyqtgraph and painting them (and laying out the sweep's
# log axes) was a third of a first paint's GUI time at N = 1024, so every threaded build
# delivers them as a part of their own right after its first paint, before any pass over
# S: a one-part build has nothing else to follow.
PARTS = frozenset({"heatmaps", "errors", "plots"})
CURVES_PART = frozenset({"plots"})
# A threaded build whose passes over S are cached or small comes in one part with its
# heatmaps, and what it still needs of every row (the maximum error, the overflow
# check, in a backward the selected key's tile) follows with the plots, after the first
# paint (assets/benchmarks/interactive/NOTES.md, round 48).
LATE_PARTS = CURVES_PART | {"errors"}


class _Relay(QObject):
    """Lives in the GUI thread; worker threads emit through it (queued to the GUI)."""

    sigDone = Signal(int, object, object)  # generation, (config, trace, images) or None, error
    sigFirst = Signal(int, object, object)  # generation, (config, trace, first tier), Event
    # generation, (trace, complete images or None for the curves part, the parts done),
    # Event (set once the part is painted)
    sigPart = Signal(int, object, object)


class _BuildJob(QRunnable):
    def __init__(
        self, generation: int, config: Config, relay: _Relay, current: Callable[[], int]
    ) -> None:
        super().__init__()
        self.generation, self.config, self.relay = generation, config, relay
        self.current = current  # the builder's newest generation
        self.row = 0  # the selected query row (its block's history comes with the first tier)
        self.key = 0  # the selected key row (a backward's first tier has its tile)
        # Set by the GUI once the first tier (then the curves part) is painted: what
        # follows waits for it, as a worker running Python beside the paint takes the
        # GIL from it (the paint of a first tier took 3-4x as long beside a pass over S).
        self.painted = threading.Event()

    def check(self) -> None:
        if self.current() != self.generation:
            raise Cancelled

    def run(self) -> None:
        streamed = False

        def first(*result: object, pending: frozenset = PARTS) -> None:
            nonlocal streamed
            streamed = True
            self.relay.sigFirst.emit(self.generation, (*result, pending), self.painted)
            self.painted.wait(PAINT_WAIT_S)

        def plots(trace, images: LaneImages | None = None, done=CURVES_PART) -> None:
            """The plots' part; one that more parts follow (no images yet) waits for its paint."""
            self.check()
            _row_curves(trace, self.row)
            if images is not None:
                self.relay.sigPart.emit(self.generation, (trace, images, done), None)
                return
            self.painted.clear()
            self.relay.sigPart.emit(self.generation, (trace, None, CURVES_PART), self.painted)
            self.painted.wait(PAINT_WAIT_S)

        try:
            result = build_all(
                self.config,
                on_first=first,
                check=self.check,
                row=self.row,
                key=self.key,
                curves=False,
                on_curves=plots,
                late=True,
            )
            if streamed:  # the first tier and the curves came; now the rest
                self.relay.sigPart.emit(
                    self.generation, (result[1], result[2], PARTS - CURVES_PART), None
                )
            else:  # one part: shown now, the every-row numbers and the plots follow it
                trace = result[1]
                if trace.backward is not None:
                    trace.backward.key_tiles_deferred = True
                first(*result, pending=LATE_PARTS)
                try:
                    self.check()
                    _late_rows(trace, self.key)
                finally:  # (cancelled: the tiles are made where they are read, as before)
                    if trace.backward is not None:
                        trace.backward.key_tiles_deferred = False
                plots(trace, result[2], LATE_PARTS)
            result = trace = None
        except Cancelled:
            self.relay.sigDone.emit(self.generation, None, Cancelled())
        except BudgetError as exc:
            self.relay.sigDone.emit(self.generation, None, exc)  # told apart on arrival
        except InputError as exc:
            self.relay.sigDone.emit(self.generation, None, str(exc))
        except MemoryError:
            self.relay.sigDone.emit(
                self.generation, None, "This configuration needs more memory than is free."
            )
        except Exception as exc:  # noqa: BLE001 (a worker must always answer, or busy sticks)
            self.relay.sigDone.emit(
                self.generation,
                None,
                f"Building this configuration failed ({exc.__class__.__name__}: {exc}); "
                "the previous one is kept.",
            )
        else:
            self.relay.sigDone.emit(self.generation, result, None)  # None: parts came


def build_all(
    config: Config,
    on_first: Callable[[Config, object, LaneImages], None] | None = None,
    check: Callable[[], None] | None = None,
    row: int | None = None,
    key: int = 0,
    curves: bool = True,
    on_curves: Callable[[object], None] | None = None,
    late: bool = False,
) -> tuple[Config, object, LaneImages]:
    """The Trace and its precomputed heatmap images: everything a new trace needs. With
    `on_first`, a trace that streams (render.streams) is handed over with its first tier
    before the second is computed (`check` between chunks may raise Cancelled). Query
    row `row`'s block history (the statistics panel's series) is made here, streamed or
    not, and in a backward row `row`'s block and key row `key`'s tile (its L, D,
    dQ_row, dK, dV: exact from those rows and columns once the forward's O and L are
    in); the whole gradients and dP, dS come with the second tier. `curves=False`
    leaves the row's plotted curves to the caller (_row_curves); a streamed build then
    hands the trace to `on_curves` after its first tier and before its second, so the
    caller delivers them in between. With `late`, a build that does not stream leaves
    the every-row numbers and key row `key`'s tile to the caller (_late_rows)."""
    config, trace = build(config)
    if on_first is None or not streams(trace):
        if check is not None:  # the passes over S first, cancellable between chunks
            trace.forward.summary(DISPLAY_CAP, check)
            if trace.backward is not None:
                trace.backward.backward_summary(DISPLAY_CAP, check)
        # The selected rows' numbers here, not on the GUI thread, beside the images
        images = _beside_rows(trace, row, lambda: prepare_images(trace), curves)
        if not late:
            _late_rows(trace, key if row is not None else None)
        return config, trace, images
    # A backward's rows from those rows alone: no every-row pass first
    first = _beside_rows(trace, row, lambda: prepare_first(trace), curves)
    if check is not None:
        check()
    on_first(config, trace, first)
    if on_curves is not None:
        on_curves(trace)
    images = complete_images(trace, first, check)
    _all_rows(trace)
    if row is not None:  # every row's L and D are in now
        _selected_key(trace, key)
    return config, trace, images


def _late_rows(trace, key: int | None) -> None:
    """What a one-part build makes after its first paint: the all-rows numbers and,
    unless `key` is None, the selected key row's tile."""
    _all_rows(trace)
    if key is not None:
        _selected_key(trace, key)


def _all_rows(trace) -> None:
    """The all-rows numbers the window reads on arrival (the maximum error, the overflow
    sentence), made here once the tiled output is in, not on the GUI thread."""
    trace.forward.max_abs_error  # noqa: B018 (cached on first read)
    trace.forward.overflow  # noqa: B018


def _beside_rows(trace, row: int | None, images: Callable[[], LaneImages], curves: bool):
    """images() on both cores beside the statistics panel's row (unless `row` is None):
    its dense and tiled rows (their chunk's products), its block's history where the
    pass shows the forward (a loop over key tiles: a backward alone shows no
    online-softmax state), in a backward its block's gradients, and with `curves` its
    plotted curves (_row_curves), made once here, not on the GUI thread. The three
    share no number and each caches under its own name, so they run at once: the images
    and the chunk's products (each the longest in some pass) first, the history on the
    thread that frees first. Returns images()'s result."""
    if row is None:
        return images()
    s = trace.schedule
    row = min(row, s.n_q - 1)
    r0, r1 = s.rows(row // s.block_q)  # its block's chunks (they hold the row)

    def rows() -> None:
        trace.forward.dense_rows(r0, r1)
        trace.forward.tiled_output_rows(r0, r1)
        if trace.backward is not None:  # its L and D are the tiled rows'
            trace.backward.backward_block(row // s.block_q).make_all()

    def history() -> None:  # the read-outs' m, ℓ, α, a: from Q, K, V alone
        trace.forward.row_history(row)

    jobs = (rows, history) if trace.pass_name != "backward" else (rows,)
    made = run_all([images, *jobs])[0]
    if curves:
        _row_curves(trace, row)
    return made


def _row_curves(trace, row: int) -> None:
    """The statistics panel's curves of query row `row` (from its block's history)."""
    if trace.pass_name != "backward":
        stats_curves(trace, min(row, trace.schedule.n_q - 1))


def _selected_key(trace, key: int) -> None:
    """In a backward, key row `key`'s tile (dK, dV): it reads every row's L and D, so a
    streamed build makes it with the second tier."""
    if trace.backward is not None:
        s = trace.schedule
        trace.backward.key_tile(min(key, s.n_k - 1) // s.block_k).make_all()


# Above this much work (multiply-adds, Config.estimated_work) a build passes ~40 ms,
# so it goes to the worker thread; smaller builds are faster done inline.
THREAD_THRESHOLD_WORK = 16_000_000
# How long a threaded build may run before the views are veiled: about a first tier's
# time, so the veil shows only for changes whose first tier is late (a backward's).
VEIL_DELAY_MS = 50
PAINT_WAIT_S = 0.25  # the longest a second tier waits for the first tier's paint


class TraceBuilder(QObject):
    """Runs builds inline or on a worker thread and reports only the newest result."""

    sigBusy = Signal(bool)

    def __init__(
        self,
        on_done: Callable[..., None],
        on_error: Callable[[str], None],
        on_refused: Callable[[str], None] | None = None,
        on_first: Callable[[Config, object, LaneImages], None] | None = None,
        on_part: Callable[[object, LaneImages | None, frozenset], None] | None = None,
        after_paint: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        super().__init__()
        # Runs a callback once the window has painted (AppState.after_paint); without
        # one, at the next turn of the event loop.
        self._after_paint = after_paint or (lambda fn: QTimer.singleShot(0, fn))
        self._on_done, self._on_error = on_done, on_error
        # A streamed build: on_first(config, trace, first tier), then on_part(trace,
        # images or None, the parts it fills) for each part; without them, on_done gets
        # the complete result once its last part is in.
        self._on_first, self._on_part = on_first, on_part
        self._first_config: Config | None = None
        self._on_refused = on_refused  # a BudgetError: over the memory budget
        self._generation = 0
        self._busy = False  # a threaded build for the newest generation is outstanding
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._relay = _Relay(self)
        self._relay.sigDone.connect(self._finished)
        self._veil_timer = QTimer(self)
        self._veil_timer.setSingleShot(True)
        self._veil_timer.setInterval(VEIL_DELAY_MS)
        self._veil_timer.timeout.connect(self._veil_due)
        self._relay.sigFirst.connect(self._first)
        self._relay.sigPart.connect(self._part)
        self.force_inline = False  # screenshots and exports want the result now
        self._pending_row = 0  # the selected row when the newest request was made
        self._pending_key = 0  # and the selected key row
        self._pending_config: Config | None = None  # the newest, waiting for the running
        self._running = False  # a job is in the pool (its result not yet handled)

    @property
    def busy(self) -> bool:
        return self._busy

    def _set_busy(self, busy: bool) -> None:
        """`busy` changes at once; the signal (the veil) waits VEIL_DELAY_MS before saying
        so: a first tier arriving within it never veils and unveils the whole window,
        which cost two full repaints per change of every view beneath the veil."""
        if busy != self._busy:
            self._busy = busy
            if busy:
                self._veil_timer.start()
            elif self._veil_timer.isActive():
                self._veil_timer.stop()  # done before the veil showed: nothing to say
            else:
                self.sigBusy.emit(False)

    def _veil_due(self) -> None:
        if self._busy:
            self.sigBusy.emit(True)

    def request(self, config: Config, row: int = 0, key: int = 0) -> None:
        """Build `config`; `row` (the selected query row) has its block's history made
        on the worker with the first tier, not in a per-tile loop on the GUI thread."""
        self._generation += 1
        self._pending_row, self._pending_key = row, key
        if self.force_inline or config.estimated_work() <= THREAD_THRESHOLD_WORK:
            self._pending_config = None  # a running build's result will be discarded
            self._set_busy(False)
            generation = self._generation
            try:
                result = build_all(config)
            except BudgetError as exc:
                self._deliver(generation, None, exc)
            except InputError as exc:
                self._deliver(generation, None, str(exc))
            except MemoryError:  # never leave the request wedged on a config that cannot build
                self._deliver(
                    generation, None, "This configuration needs more memory than is free."
                )
            else:
                if self.force_inline or self._on_first is None:
                    self._deliver(generation, result, None)
                else:  # as a threaded build: the plots after this paint
                    self._on_first(*result, CURVES_PART)
                    self._after_paint(lambda: self._inline_curves(generation, result))
            return
        self._set_busy(True)
        # A running build cannot be interrupted: the newest request waits for it (and
        # replaces any request already waiting); otherwise it starts now. Only one job
        # is ever handed to the pool, so nothing queued can be lost.
        self._pending_config = config
        if not self._running:
            self._start_pending()

    def _inline_curves(self, generation: int, result: tuple) -> None:
        """An inline build's curves part, after the paint of its first delivery."""
        if generation == self._generation:
            _row_curves(result[1], self._pending_row)
            self._part(generation, (result[1], result[2], CURVES_PART), None)

    def _start_pending(self) -> None:
        config, self._pending_config = self._pending_config, None
        if config is not None:
            self._running = True
            job = _BuildJob(self._generation, config, self._relay, lambda: self._generation)
            job.row, job.key = self._pending_row, self._pending_key
            self._pool.start(job)

    def _first(self, generation: int, result: object, painted: threading.Event) -> None:
        """A job's first delivery: shown at once (the veil lifts); the rest follows
        once the window has painted it (after_paint)."""
        if generation != self._generation:
            painted.set()
            return
        self._first_config = result[0]
        if self._on_first is not None:
            self._set_busy(False)
            self._on_first(*result)
        self._after_paint(painted.set)

    def _part(self, generation: int, part: tuple, painted: threading.Event | None) -> None:
        """A part of a job's trace: (trace, its complete images, or None where they are
        still to come, the parts it fills). A part that more of the job follows waits
        for its paint (`painted`), as the first tier does."""
        if generation != self._generation:
            if painted is not None:
                painted.set()
            return
        trace, images, done = part
        if self._on_first is not None and self._on_part is not None:
            self._on_part(trace, images, done)
        elif images is not None:
            self._on_done(self._first_config, trace, images)
        if painted is not None:
            self._after_paint(painted.set)

    def _finished(self, generation: int, result: object, error: object) -> None:
        self._running = False
        if generation == self._generation:
            self._set_busy(False)
        if result is not None or error is not None:
            self._deliver(generation, result, error)
        if self._pending_config is not None:  # the newest request waited for this one
            self._start_pending()

    def _deliver(self, generation: int, result: object, error: object) -> None:
        if generation != self._generation or isinstance(error, Cancelled):
            return  # superseded by a newer request
        if isinstance(error, BudgetError) and self._on_refused is not None:
            self._on_refused(str(error))
        elif error is not None:
            self._on_error(str(error))
        else:
            self._on_done(*result)

    def wait(self, msecs: int = 30000) -> bool:
        """Block until queued builds finish (tests, shutdown); results still arrive queued."""
        done = self._pool.waitForDone(msecs)
        if self._pending_config is not None:
            self._start_pending()
            done = self._pool.waitForDone(msecs)
        return done

    def shutdown(self) -> None:
        self._generation += 1
        self._pending_config = None
        self._pool.waitForDone(30000)
