"""Builds Traces off the GUI thread; the newest request always wins.

A one-thread QThreadPool runs at most one build at a time. A new request drops any
queued-but-unstarted build (`QThreadPool.clear`) and bumps a generation counter, so
a build that was already running when the user moved on is discarded on arrival;
long builds start only after requests pause briefly, so a drag starts one build.
Results cross back to the GUI thread through a queued signal.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, QTimer, Signal

from compute import InputError
from desktop.scene.render import LaneImages, prepare_images
from desktop.state.config import Config, build


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


# Above this many timeline steps a build can pass 50 ms (about 0.1 ms per step), so
# it goes to the worker thread; smaller builds are faster done inline.
THREAD_THRESHOLD_STEPS = 400
DEBOUNCE_MS = 120


class TraceBuilder(QObject):
    """Runs builds inline or on a worker thread and reports only the newest result."""

    sigBusy = Signal(bool)

    def __init__(
        self, on_done: Callable[[Config, object, LaneImages], None], on_error: Callable[[str], None]
    ) -> None:
        super().__init__()
        self._on_done, self._on_error = on_done, on_error
        self._generation = 0
        self._busy = False  # a threaded build for the newest generation is outstanding
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._relay = _Relay(self)
        self._relay.sigDone.connect(self._finished)
        self.force_inline = False  # screenshots and exports want the result now
        self._pending_config: Config | None = None
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self._start_pending)

    @property
    def busy(self) -> bool:
        return self._busy

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self.sigBusy.emit(busy)

    def request(self, config: Config) -> None:
        self._generation += 1
        if self.force_inline or config.estimated_steps() <= THREAD_THRESHOLD_STEPS:
            self._debounce.stop()
            self._pending_config = None
            self._pool.clear()
            self._set_busy(False)
            generation = self._generation
            try:
                result = build_all(config)
            except InputError as exc:
                self._deliver(generation, None, str(exc))
            except MemoryError:  # never leave the request wedged on a config that cannot build
                self._deliver(
                    generation, None, "This configuration needs more memory than is free."
                )
            else:
                self._deliver(generation, result, None)
            return
        self._pool.clear()  # an older queued build is now pointless
        self._set_busy(True)
        # Start a long build only once requests pause for DEBOUNCE_MS: a drag across N
        # would otherwise start builds for values already left behind, and a running
        # build cannot be interrupted (the newest would wait behind it).
        self._pending_config = config
        self._debounce.start()

    def _start_pending(self) -> None:
        config, self._pending_config = self._pending_config, None
        if config is not None:
            self._pool.start(_BuildJob(self._generation, config, self._relay))

    def _finished(self, generation: int, result: object, error: object) -> None:
        if generation == self._generation:
            self._set_busy(False)
        self._deliver(generation, result, error)

    def _deliver(self, generation: int, result: object, error: object) -> None:
        if generation != self._generation:
            return  # superseded by a newer request
        if error is not None:
            self._on_error(str(error))
        else:
            self._on_done(*result)

    def wait(self, msecs: int = 30000) -> bool:
        """Block until queued builds finish (tests, shutdown); results still arrive queued."""
        if self._debounce.isActive():
            self._debounce.stop()
            self._start_pending()
        return self._pool.waitForDone(msecs)

    def shutdown(self) -> None:
        self._generation += 1
        self._debounce.stop()
        self._pending_config = None
        self._pool.clear()
        self._pool.waitForDone(30000)
