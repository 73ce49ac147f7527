"""`flash-explorer bench-gui`: how fast the window answers a change, and how fast it plays.

A benchmark, not a test (tests never time anything). It opens the window offscreen on
the reference example and lands on each configuration at once (AppState.set_config, the
path every control writes through: no intermediate configuration is built, so none can
be refused on the way), then times changes of two kinds, `--repeats` each way:

- "inputs": a new seed each time (new inputs of the same sizes: nothing can be reused);
- "blocks": B_r and B_c moved to another size and back (the inputs stay; going back
  finds what the first visit computed, as a drag back and forth does).

For each change: first_ms, from the change until the event loop has painted the new
configuration's first tier (its timeline, ledger and the numbers shown at once);
complete_ms, until the last panel is filled (AppState.pending_parts is empty); floor_ms,
the unavoidable exact work of that change (compute.floor), timed in the same process
right after it, so complete_ms / floor_ms is honest on a noisy machine. Then frame_ms:
one playback frame (advance one frame's steps, set the transfer progress, paint) from the
run's first step, and frame_late_ms: the same from its middle step. The
JSON's "machine" holds the machine's speed before and after (machine_speed): figures
from two sittings compare only where those agree.

Never opens a modal dialog: a configuration the app refuses is recorded with its
sentence under "refused". Prints one line per configuration and, with --json FILE,
writes them all; --grid runs the grid of issue 28 (every pass, N 256-4096, d 64 and 128,
blocks 2 and 64, and the q/kv-outer, causal and float16 variants at N = 1024).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator, Sequence
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

GRID_PASSES = ("forward", "backward", "training")
GRID_N = (256, 1024, 4096)
GRID_SHAPES = ((64, 64), (128, 2))  # (d = d_v, blocks): the defaults, and tiny tiles


def _ms(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1e3
    return {
        "p50": round(float(np.percentile(a, 50)), 2),
        "p90": round(float(np.percentile(a, 90)), 2),
    }


def _complete(state) -> bool:
    return not getattr(state, "pending_parts", ())


def _wait(app, state, done, timeout_s: float = 300.0) -> float:
    """Process events until done() holds, sleeping until an event comes (the worker's
    result), as the real event loop does: spinning would take the GIL from the worker.
    processEvents(flags, maxtime) ignores WaitForMoreEvents and returns at once when
    nothing is pending (about 500,000 times a second), so the one-argument form blocks
    here, and a 20 ms timer bounds each sleep. Returns when the state done() waited for
    was painted (_painted)."""
    from PySide6.QtCore import QEventLoop, QTimer

    end = time.perf_counter() + timeout_s
    tick = QTimer()
    tick.setInterval(20)
    tick.start()
    try:
        while not done():
            app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
            if time.perf_counter() > end:
                raise TimeoutError("the window did not settle on the configuration in time")
    finally:
        tick.stop()
    return _painted(app, state)


_SETTLE_ROUNDS = 8


def _painted(app, state) -> float:
    """Process events until a round paints nothing: what the last event made dirty, and
    the repaints a paint leaves behind (pyqtgraph defers a view's range and axes to the
    paint, which dirties the plot again); one round missed those, and the next change's
    time held them. Returns when this tier was painted: the end of the last round, or
    when another part of the trace began to be shown (events run posted paints before
    timers and the worker's results, so that part came after this tier's paint)."""
    from PySide6.QtCore import QEvent, QObject

    class Paints(QObject):
        seen = 0

        def eventFilter(self, _obj, event) -> bool:  # noqa: N802 (Qt override)
            if event.type() in (QEvent.Type.Paint, QEvent.Type.UpdateRequest):
                self.seen += 1
            return False

    paints, since = Paints(), state.part_at
    app.installEventFilter(paints)
    try:
        for _ in range(_SETTLE_ROUNDS):
            before = paints.seen
            app.processEvents()
            if state.part_at != since:
                return state.part_at
            if paints.seen == before:
                break
    finally:
        app.removeEventFilter(paints)
    return time.perf_counter()


def _settle(app, state, target=None, timeout_s: float = 300.0) -> None:
    """Until no build is outstanding, every part is filled (and `target` is shown)."""
    _wait(
        app,
        state,
        lambda: (
            not state.builder.busy
            and _complete(state)
            and (target is None or state.config == target)
        ),
        timeout_s,
    )


def bench_window():
    """(app, window): the window offscreen at the benchmark's screen size, shown and
    settled on the reference example. A refusal is a result, never a modal dialog
    waiting offscreen for a click: its sentences collect in window.bench_refusals."""
    from PySide6.QtWidgets import QApplication

    from desktop.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    window = MainWindow(persist=False)
    window.resize(*SCREEN_SIZE)
    window.state.sigError.disconnect(window.show_error)
    window.bench_refusals = []
    window.state.sigError.connect(window.bench_refusals.append)
    window.state.sigRefused.connect(lambda text: text and window.bench_refusals.append(text))
    window.show()
    _settle(app, window.state)
    return app, window


def _floor(config, dense: bool) -> float:
    from compute.floor import floor_seconds
    from desktop.state.config import make_inputs

    inputs = make_inputs(config)
    return floor_seconds(
        inputs.q,
        inputs.k,
        inputs.v,
        dtype=config.dtype,
        backward=config.pass_name != "forward",
        dense=dense,
    )


def _time_change(window, app, target, dense: bool) -> tuple[float, float, float]:
    """(first, complete, floor) seconds of one change to `target`."""
    state = window.state
    t0 = time.perf_counter()
    state.set_config(target)
    first = _wait(app, state, lambda: state.config == target) - t0
    complete = _wait(app, state, lambda: _complete(state) and not state.builder.busy) - t0
    return first, complete, _floor(target, dense)


def _other_block(b: int) -> int:
    return b * 2 if b < 64 else b // 2


def measure(window, app, cfg, repeats: int, frames: int) -> dict:
    """One configuration: land on it, then time both kinds of change, then frames."""
    from desktop.scene.grouping import grouping_for

    state = window.state
    refused: list[str] = window.bench_refusals
    refused.clear()
    state.set_config(cfg)
    _settle(app, state)
    if refused or state.config is None:
        return {"config": cfg.to_dict(), "refused": refused[-1] if refused else "not shown"}
    shown = state.config
    other = _other_block(shown.block_q)
    kinds = {
        "inputs": ([shown.replace(seed=shown.seed + 1 + k) for k in range(2 * repeats)], True),
        "blocks": ([shown.replace(block_q=other, block_k=other), shown] * repeats, False),
    }
    result: dict = {"config": {k: v for k, v in shown.to_dict().items() if k != "file"}}
    every = {"first_ms": [], "complete_ms": [], "floor_ms": []}
    result["changes"] = {}
    for kind, (targets, dense) in kinds.items():
        # Each kind starts from the shown configuration: after the inputs changes the
        # window holds other inputs, and a first blocks change from there would change
        # the inputs too.
        state.set_config(shown)
        _settle(app, state, shown)
        samples = {"first_ms": [], "complete_ms": [], "floor_ms": []}
        for target in targets:
            for name, value in zip(samples, _time_change(window, app, target, dense), strict=True):
                samples[name].append(value)
                every[name].append(value)
        result["changes"][kind] = {name: _ms(values) for name, values in samples.items()}
        if refused:
            return {"config": cfg.to_dict(), "refused": refused[-1]}
    result.update({name: _ms(values) for name, values in every.items()})
    state.set_config(shown)
    _settle(app, state, shown)
    trace = state.trace
    stride = grouping_for(trace).stride
    result.update(n_steps=trace.n_steps, steps_per_frame=stride)
    # From the start, and from the middle of the run (a playback's frames are not all
    # its first: a lane may have ended, the selected row's block be long done)
    for name, start in (("frame_ms", 0), ("frame_late_ms", trace.n_steps // 2)):
        state.set_step(start)
        app.processEvents()
        frame = []
        for k in range(1, frames + 1):  # frames wrap around a short timeline, as a replay does
            t0 = time.perf_counter()
            state.set_step((start + k * stride) % trace.n_steps)
            state.set_progress(0.5)
            app.processEvents()  # paints whatever the step made dirty, as the event loop does
            frame.append(time.perf_counter() - t0)
        result[name] = _ms(frame)
    return result


def grid_configs(base) -> Iterator:
    """Every pass at N 256-4096 with d 64 / 64×64 and d 128 / 2×2 (q-outer, float64, not
    causal); at N = 1024 also kv-outer, causal and float16 each."""
    for pass_name in GRID_PASSES:
        for n in GRID_N:
            for d, b in GRID_SHAPES:
                c = base.replace(
                    n=n, n_keys=None, d=d, dv=d, block_q=b, block_k=b, order="q-outer",
                    causal=False, dtype="float64", input="random", pass_name=pass_name,
                )  # fmt: skip
                yield c
                if n == 1024:
                    yield c.replace(order="kv-outer")
                    yield c.replace(causal=True)
                    yield c.replace(dtype="float16")


def _line(r: dict) -> str:
    c = r["config"]
    head = (
        f"{c['pass_name']:<8} N={c['n']:<5} d={c['d']:<4} blocks {c['block_q']}x{c['block_k']:<3} "
        f"{c['order']:<9} {'causal' if c['causal'] else '      '} {c['dtype']:<8}"
    )
    if "refused" in r:
        return f"{head} refused: {r['refused']}"

    def pq(name: str, part: dict) -> str:
        return f"{part[name]['p50']:7.1f}/{part[name]['p90']:7.1f}"

    kinds = "  ".join(
        f"{kind}: first {pq('first_ms', p)} complete {pq('complete_ms', p)} "
        f"floor {pq('floor_ms', p)}"
        for kind, p in r["changes"].items()
    )
    return f"{head} {kinds}  frame {pq('frame_ms', r)} mid-run {pq('frame_late_ms', r)} ms"


SPEED_SIZE = 1024  # the calibration product: a SPEED_SIZE² float64 matmul


def machine_speed() -> dict[str, float | None]:
    """How fast this machine is right now: the median of five SPEED_SIZE² float64
    matmuls (NumPy's BLAS, as the app runs it) and the load average. Sittings differ by
    up to 2× on shared machines; figures from two sittings compare only beside these."""
    a = np.random.default_rng(0).standard_normal((SPEED_SIZE, SPEED_SIZE))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        a @ a  # noqa: B018 (timed)
        times.append(time.perf_counter() - t0)
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None  # not on Windows
    return {"matmul_ms": round(float(np.median(times)) * 1e3, 2), "load_1min": load}


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
        "--grid", action="store_true", help="run the grid of issue 28 instead of one configuration"
    )
    parser.add_argument(
        "--grid-max-n", type=int, default=0, help="with --grid: only configurations with N <= this"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.frames < 1:
        return fail("--repeats and --frames must be at least 1.", parser.prog)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import PySide6

    from compute import InputError

    try:
        cfg = config_from_args(args).validated()
    except (InputError, ValueError) as exc:
        return fail(str(exc), parser.prog)
    app, window = bench_window()
    before = machine_speed() if args.json else None  # only the JSON records it
    results = []
    configs = list(grid_configs(cfg)) if args.grid else [cfg]
    if args.grid_max_n:
        configs = [c for c in configs if c.n <= args.grid_max_n]
    for c in configs:
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
            "speed_before": before,
            "speed_after": machine_speed(),
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
