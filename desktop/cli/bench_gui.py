"""`flash-explorer bench-gui`: how fast the window answers a change, and how fast it plays.

A benchmark, not a test (tests never time anything). It opens the window offscreen on
the reference example, sets the configuration given by the flags through the real
widgets (found by objectName, as a user typing into the spin boxes would), then:

- change_ms: N is moved one position and back, `--repeats` times; each change is timed
  from setting the spin box until the event loop has painted the new configuration's
  numbers (the build, inline or on the worker thread, included);
- veil_ms: the same changes, until the event loop's first paint after the change (the
  new numbers for an inline build; the "computing N=…" veil for a threaded one);
- frame_ms: one playback frame: advance one frame's worth of steps, set the transfer
  progress, and let the event loop paint everything that changed.

Prints one line and, with --json FILE, writes {"config", "change_ms", "veil_ms",
"frame_ms", ...}. With --grid it runs the README's grid (N 6…4096 × blocks 2/16/64 ×
order × causal, d = d_v = 64) and writes every result to one JSON file.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from desktop.cli.args import (
    OneLineParser,
    add_config_arguments,
    add_pass_argument,
    config_from_args,
    fail,
)
from desktop.cli.session import SCREEN_SIZE

GRID_N = (6, 64, 256, 1024, 4096)
GRID_BLOCKS = (2, 16, 64)
GRID_D = 64


def _ms(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1e3
    return {
        "p50": round(float(np.percentile(a, 50)), 2),
        "p90": round(float(np.percentile(a, 90)), 2),
    }


def _settle(app, state, target=None, timeout_s: float = 120.0) -> None:
    """Process events until no build is outstanding (and the shown config is `target`)."""
    from PySide6.QtCore import QEventLoop

    end = time.perf_counter() + timeout_s
    while state.builder.busy or (target is not None and state.config != target):
        # Sleep until an event comes (the worker's result), as the real event loop does;
        # spinning here would take the GIL from the worker thread it is waiting for.
        app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents, 50)
        if time.perf_counter() > end:
            raise TimeoutError("the window did not settle on the configuration in time")
    app.processEvents()


def set_through_widgets(window, app, cfg) -> None:
    """Set `cfg` as a user would: one widget at a time, found by its objectName."""
    from PySide6.QtWidgets import QCheckBox, QComboBox, QSpinBox

    def spin(name, value):
        w = window.findChild(QSpinBox, name)
        w.setMaximum(max(w.maximum(), value))
        w.setValue(value)
        _settle(app, window.state)

    def combo(name, data):
        w = window.findChild(QComboBox, name)
        w.setCurrentIndex(w.findData(data))
        _settle(app, window.state)

    spin("d_spin", cfg.d)
    spin("dv_spin", cfg.dv)
    spin("block_q_spin", cfg.block_q)
    spin("block_k_spin", cfg.block_k)
    spin("n_spin", cfg.n)
    spin("n_keys_spin", cfg.n_keys or 0)
    combo("order_combo", cfg.order)
    combo("dtype_combo", cfg.dtype)
    combo("pass_combo", cfg.pass_name)
    window.findChild(QCheckBox, "causal_check").setChecked(cfg.causal)
    window.findChild(QCheckBox, "lse_check").setChecked(cfg.save_lse)
    _settle(app, window.state)


def measure(window, app, cfg, repeats: int, frames: int) -> dict:
    """One configuration: set it through the widgets, then time changes and frames."""
    from PySide6.QtWidgets import QSpinBox

    from desktop.scene.grouping import grouping_for

    state = window.state
    set_through_widgets(window, app, cfg)
    window.repaint()
    shown = state.config
    n_spin = window.findChild(QSpinBox, "n_spin")
    there, back = shown.n, (shown.n - 1 if shown.n > 1 else 2)
    change, veil = [], []
    for k in range(2 * repeats):  # there and back
        value = back if k % 2 == 0 else there
        target = shown.replace(n=value, input="random")
        t0 = time.perf_counter()
        n_spin.setValue(value)
        app.processEvents()  # paints what changed: the new numbers (inline) or the veil
        veil.append(time.perf_counter() - t0)
        _settle(app, state, target)  # the worker's result arrives and is painted
        change.append(time.perf_counter() - t0)
    _settle(app, state, shown.replace(input="random"))
    trace = state.trace
    stride = grouping_for(trace).stride
    state.set_step(0)
    app.processEvents()
    frame = []
    for k in range(1, frames + 1):  # frames wrap around a short timeline, as a replay does
        t0 = time.perf_counter()
        state.set_step((k * stride) % trace.n_steps)
        state.set_progress(0.5)
        app.processEvents()  # paints whatever the step made dirty, as the event loop does
        frame.append(time.perf_counter() - t0)
    return {
        "config": {k: v for k, v in state.config.to_dict().items() if k != "file"},
        "n_steps": trace.n_steps,
        "steps_per_frame": stride,
        "change_ms": _ms(change),
        "veil_ms": _ms(veil),
        "frame_ms": _ms(frame),
    }


def grid_configs(base):
    for n in GRID_N:
        for b in GRID_BLOCKS:
            for order in ("q-outer", "kv-outer"):
                for causal in (False, True):
                    yield base.replace(
                        n=n, n_keys=None, d=GRID_D, dv=GRID_D, block_q=b, block_k=b,
                        order=order, causal=causal, input="random",
                    )  # fmt: skip


def _line(r: dict) -> str:
    c = r["config"]
    return (
        f"N={c['n']:<5} d={c['d']:<4} blocks {c['block_q']}x{c['block_k']:<3} {c['order']:<9} "
        f"{'causal' if c['causal'] else '      '} steps {r['n_steps']:>10,}  "
        f"change p50/p90 {r['change_ms']['p50']:8.1f} /{r['change_ms']['p90']:8.1f} ms  "
        f"veil {r['veil_ms']['p50']:6.1f} /{r['veil_ms']['p90']:6.1f} ms  "
        f"frame {r['frame_ms']['p50']:5.1f} /{r['frame_ms']['p90']:5.1f} ms"
    )


def main(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="flash-explorer bench-gui",
        description="Time the window offscreen: change to repaint, and playback frames.",
    )
    add_config_arguments(parser, inputs=False)
    add_pass_argument(parser, "the pass shown")
    parser.add_argument("--repeats", type=int, default=10, help="changes each way (default 10)")
    parser.add_argument("--frames", type=int, default=60, help="playback frames timed")
    parser.add_argument("--json", type=Path, help="write the result(s) as JSON here")
    parser.add_argument(
        "--grid", action="store_true", help="run the README grid instead of one configuration"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.frames < 1:
        return fail("--repeats and --frames must be at least 1.", parser.prog)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import PySide6
    from PySide6.QtWidgets import QApplication

    from compute import InputError
    from desktop.window.main_window import MainWindow

    try:
        cfg = config_from_args(args).validated()
    except (InputError, ValueError) as exc:
        return fail(str(exc), parser.prog)
    app = QApplication.instance() or QApplication([])
    window = MainWindow(persist=False)
    window.resize(*SCREEN_SIZE)
    window.show()
    _settle(app, window.state)
    results = []
    for c in grid_configs(cfg) if args.grid else [cfg]:
        r = measure(window, app, c, args.repeats, args.frames)
        print(_line(r), flush=True)
        results.append(r)
    window.close()
    if args.json:
        machine = {
            "python": platform.python_version(),
            "pyside6": PySide6.__version__,
            "cpus": os.cpu_count(),
            "platform": os.environ.get("QT_QPA_PLATFORM"),
            "window": list(SCREEN_SIZE),
        }
        payload = results[0] if not args.grid else {"results": results}
        payload = {
            **payload,
            "machine": machine,
            "command": "flash-explorer bench-gui " + " ".join(argv),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        from desktop.export.atomic import ExportError, write_text_atomic

        try:
            write_text_atomic(args.json, json.dumps(payload, indent=2) + "\n")  # checked, fsynced
        except ExportError as exc:
            return fail(str(exc), parser.prog)
        print(f"wrote {args.json}")
    return 0
