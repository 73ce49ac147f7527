"""One GPU benchmark run off the GUI thread, for the GPU side panel."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QThread, Signal

from compute.gpu.bench import BenchCancelled, BenchConfig, GpuUnavailable

Runner = Callable[..., dict]


class BenchThread(QThread):
    """Runs one benchmark off the GUI thread; cancel() stops it between steps."""

    sigProgress = Signal(int, int, str)
    sigDone = Signal(object)  # the report dict
    sigFailed = Signal(str, str)  # one-sentence message, full detail (e.g. the NVRTC log)

    def __init__(self, config: BenchConfig, runner: Runner, parent=None) -> None:
        super().__init__(parent)
        self.config, self._runner, self._cancel = config, runner, False

    def cancel(self) -> None:
        self._cancel = True

    def run(self) -> None:
        try:
            report = self._runner(
                self.config, progress=self.sigProgress.emit, should_stop=lambda: self._cancel
            )
        except BenchCancelled:
            self.sigFailed.emit("Benchmark cancelled.", "")
        except GpuUnavailable as exc:
            self.sigFailed.emit(str(exc), "")
        except Exception as exc:  # the edge: anything else is shown, never raised into Qt
            text = str(exc).strip() or type(exc).__name__
            self.sigFailed.emit(f"The benchmark failed: {text.splitlines()[0]}", text)
        else:
            self.sigDone.emit(report)
