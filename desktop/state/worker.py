"""Builds Traces off the GUI thread; the newest request always wins.

A one-thread QThreadPool runs at most one build at a time. A new request drops any
queued-but-unstarted build (`QThreadPool.clear`) and bumps a generation counter, so
a build that was already running when the user moved on is discarded on arrival.
A request starts at once when no build runs (no fixed delay); while one runs, only
the newest request waits and starts when it ends, so a drag runs at most two builds
and the last one is always the value the user left the control at. Results cross
back to the GUI thread through a queued signal.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from compute import InputError
from desktop.scene.render import LaneImages, prepare_images
from desktop.state.config import BudgetError, Config, build


class _Relay(QObject):
    """Lives in the GUI thread; worker threads emit through it (queued to the GUI)."""

    sigDone = Signal(int, object, object)  # generation, (config, trace, images) or None, error


class _BuildJob(QRunnable):
    def __init__(self, generation: int, config: Config, relay: _Relay) -> None:
        super().__init__()
        self.generation, self.config, self.relay = generation, config, relay

    def run(self) -> None:
        try:
            result = build_all(self.config)
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
            self.relay.sigDone.emit(self.generation, result, None)


def build_all(config: Config) -> tuple[Config, object, LaneImages]:
    """The Trace and its precomputed heatmap images: everything a new trace needs."""
    config, trace = build(config)
    return config, trace, prepare_images(trace)


# Above this much work (multiply-adds, Config.estimated_work) a build passes ~40 ms,
# so it goes to the worker thread; smaller builds are faster done inline.
THREAD_THRESHOLD_WORK = 16_000_000


class TraceBuilder(QObject):
    """Runs builds inline or on a worker thread and reports only the newest result."""

    sigBusy = Signal(bool)

    def __init__(
        self,
        on_done: Callable[[Config, object, LaneImages], None],
        on_error: Callable[[str], None],
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self._on_done, self._on_error = on_done, on_error
        self._on_refused = on_refused  # a BudgetError: over the memory budget
        self._generation = 0
        self._busy = False  # a threaded build for the newest generation is outstanding
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._relay = _Relay(self)
        self._relay.sigDone.connect(self._finished)
        self.force_inline = False  # screenshots and exports want the result now
        self._pending_config: Config | None = None  # the newest, waiting for the running
        self._running = False  # a job is in the pool (its result not yet handled)

    @property
    def busy(self) -> bool:
        return self._busy

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self.sigBusy.emit(busy)

    def request(self, config: Config) -> None:
        self._generation += 1
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
                self._deliver(generation, result, None)
            return
        self._set_busy(True)
        # A running build cannot be interrupted: the newest request waits for it (and
        # replaces any request already waiting); otherwise it starts now. Only one job
        # is ever handed to the pool, so nothing queued can be lost.
        self._pending_config = config
        if not self._running:
            self._start_pending()

    def _start_pending(self) -> None:
        config, self._pending_config = self._pending_config, None
        if config is not None:
            self._running = True
            self._pool.start(_BuildJob(self._generation, config, self._relay))

    def _finished(self, generation: int, result: object, error: object) -> None:
        self._running = False
        if generation == self._generation:
            self._set_busy(False)
        self._deliver(generation, result, error)
        if self._pending_config is not None:  # the newest request waited for this one
            self._start_pending()

    def _deliver(self, generation: int, result: object, error: object) -> None:
        if generation != self._generation:
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
