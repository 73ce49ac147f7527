"""GUI latency benchmark: slider change → repaint finished, and per-frame playback time.

Run offscreen (a script, not a timed test):

    QT_QPA_PLATFORM=offscreen python -m desktop.cli.bench_gui [--out assets/benchmarks/gui_latency.json]

For each case it changes a control through its widget (the same signal path as a
user's drag), waits for the trace (inline or from the worker thread), then repaints the
whole window synchronously; and it times playback frames (step + transfer progress +
full repaint). Prints a table and writes JSON. Targets: under 16 ms per
frame at the reference example's size, under 50 ms per slider change at N = 256.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

CASES = (
    ("seed example (N=6, d=2, blocks 2)", dict()),
    (
        "N=256, d=64, blocks 32",
        dict(n=256, d=64, dv=64, block_q=32, block_k=32, input="random"),
    ),
)
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "assets" / "benchmarks" / "gui_latency.json"


def _ms(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "median_ms": round(statistics.median(s) * 1e3, 2),
        "p90_ms": round(s[int(0.9 * (len(s) - 1))] * 1e3, 2),
        "max_ms": round(s[-1] * 1e3, 2),
        "samples": len(s),
    }


def _settle(app, state) -> None:
    while state.builder.busy:
        app.processEvents()
    app.processEvents()


def measure(window, app, changes: dict, repeats: int) -> dict:
    from desktop.state.config import Config

    state, controls = window.state, window.controls
    state.set_config(Config().replace(**changes))
    _settle(app, state)
    window.repaint()
    cfg = state.config
    # Slider changes: alternate N and B_c between two neighbouring values.
    slider = []
    spins = (
        (controls.n_spin, cfg.n, max(1, cfg.n - 1)),
        (controls.bk_spin, cfg.block_k, cfg.block_k + 1),
    )
    for k in range(repeats):
        spin, a, b = spins[k % 2]
        t0 = time.perf_counter()
        spin.setValue(b if spin.value() == a else a)
        _settle(app, state)  # the trace arrives and every dirty widget repaints
        slider.append(time.perf_counter() - t0)
    # Playback frames: what one timer tick costs, step change + progress + repaint.
    frames = []
    n = state.n_steps
    for k in range(max(repeats * 3, 60)):
        t0 = time.perf_counter()
        state.set_step(k % n)
        state.set_progress((k % 8) / 8)  # arrows in flight, as during playback
        app.processEvents()  # paints whatever the step made dirty, as the event loop does
        frames.append(time.perf_counter() - t0)
    return {
        "n_steps": n,
        "slider_change_to_repaint": _ms(slider),
        "playback_frame": _ms(frames),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file to write")
    p.add_argument("--repeats", type=int, default=30, help="slider changes per case")
    args = p.parse_args(argv)

    import PySide6
    from PySide6.QtWidgets import QApplication

    from desktop.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    window = MainWindow(persist=False)
    window.resize(1600, 1000)
    window.show()
    app.processEvents()
    results = []
    for name, changes in CASES:
        r = measure(window, app, changes, args.repeats)
        r["case"] = name
        results.append(r)
    window.close()
    print(
        f"{'case':<38}{'steps':>7}{'slider→repaint ms (median/p90)':>34}{'frame ms (median/p90)':>26}"
    )
    for r in results:
        s, f = r["slider_change_to_repaint"], r["playback_frame"]
        print(
            f"{r['case']:<38}{r['n_steps']:>7}"
            f"{s['median_ms']:>22.1f} / {s['p90_ms']:<9.1f}{f['median_ms']:>16.1f} / {f['p90_ms']:<7.1f}"
        )
    payload = {
        "what": "offscreen GUI latency: slider change to finished repaint; one playback frame",
        "command": "QT_QPA_PLATFORM=offscreen python -m desktop.cli.bench_gui",
        "window": [1600, 1000],
        "machine": {
            "python": platform.python_version(),
            "pyside6": PySide6.__version__,
            "cpus": os.cpu_count(),
            "platform": os.environ.get("QT_QPA_PLATFORM"),
        },
        "targets_ms": {"frame_at_seed_size": 16, "slider_change_at_n256": 50},
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from desktop.export.atomic import write_text_atomic

    write_text_atomic(args.out, json.dumps(payload, indent=2) + "\n")  # checked, fsynced
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
