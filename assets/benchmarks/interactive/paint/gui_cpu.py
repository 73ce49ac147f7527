"""The GUI thread's own CPU time per change and per playback frame (a benchmark, not a test).

bench-gui's first_ms is wall time from a change until its first tier is painted: on a
shared 2-core machine it moves 2-5x with other processes' load and holds the worker's
time too. This script times what the window itself spends, as CPU time of the GUI
thread (time.thread_time), which load moves far less:

- arrival_ms: from the first tier's arrival (AppState._built) until the event loop has
  painted it (handlers, every view's paint), per change: 3 new seeds, then B_r = B_c
  moved and back twice;
- frame_ms: one playback frame (set_step, set_progress(0.5), the event loop's paint).

Run from the repository root (PYTHONPATH=. for another tree):
    python assets/benchmarks/interactive/paint/gui_cpu.py OUT.json PASS:N:D:B ...
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from desktop.cli import bench_gui as bg  # noqa: E402
from desktop.cli.session import SCREEN_SIZE  # noqa: E402
from desktop.scene.grouping import grouping_for  # noqa: E402
from desktop.state.app_state import AppState  # noqa: E402
from desktop.state.config import Config  # noqa: E402
from desktop.window.main_window import MainWindow  # noqa: E402

ARRIVED: list[float] = []
_built = AppState._built


def _timed_built(self, *args, **kwargs):
    ARRIVED.append(time.thread_time())
    return _built(self, *args, **kwargs)


AppState._built = _timed_built


def _pq(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples)
    return {
        "p50": round(float(np.percentile(a, 50)), 2),
        "p90": round(float(np.percentile(a, 90)), 2),
    }


def measure(window, app, spec: str, frames: int = 30) -> dict:
    pass_name, n, d, b = spec.split(":")
    n, d, b = int(n), int(d), int(b)
    cfg = Config(n=n, d=d, dv=d, block_q=b, block_k=b, input="random", pass_name=pass_name)
    state = window.state
    state.set_config(cfg)
    bg._settle(app, state)
    shown, other = state.config, bg._other_block(b)
    targets = [shown.replace(seed=shown.seed + 1 + k) for k in range(3)]
    targets += [shown.replace(block_q=other, block_k=other), shown] * 2
    arrival = []
    for target in targets:
        ARRIVED.clear()
        state.set_config(target)
        app.processEvents()
        bg._wait(app, state, lambda t=target: state.config == t)
        arrival.append((time.thread_time() - ARRIVED[-1]) * 1e3)
        bg._wait(app, state, lambda: bg._complete(state) and not state.builder.busy)
    trace = state.trace
    stride = grouping_for(trace).stride
    state.set_step(0)
    app.processEvents()
    frame = []
    for k in range(1, frames + 1):
        t0 = time.thread_time()
        state.set_step((k * stride) % trace.n_steps)
        state.set_progress(0.5)
        app.processEvents()
        frame.append((time.thread_time() - t0) * 1e3)
    return {"config": spec, "arrival_ms": _pq(arrival), "frame_ms": _pq(frame)}


def main(argv: list[str]) -> int:
    out, specs = argv[0], argv[1:]
    app = QApplication.instance() or QApplication([])
    window = MainWindow(persist=False)
    window.resize(*SCREEN_SIZE)
    window.state.sigError.disconnect(window.show_error)
    window.show()
    bg._settle(app, window.state)
    results = []
    for spec in specs:
        r = measure(window, app, spec)
        print(f"{spec:24s} arrival CPU {r['arrival_ms']}  frame CPU {r['frame_ms']}", flush=True)
        results.append(r)
    window.close()
    with open(out, "w") as f:
        json.dump({"results": results, "command": " ".join(["gui_cpu.py", *argv])}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
