"""`flash-explorer bench-memory`: the window's peak memory against the estimate it is
refused by.

A benchmark, not a test. For one configuration it opens the window offscreen, lands on
it, and then does what fills every cache the window keeps to capacity, as a user moving
through the views would: new inputs of the same sizes (the shared number cache keeps
several configurations per kind), the selected query row moved through more query blocks
than the histories keep, the selected key through more key tiles, and the timeline
scrubbed end to end. It then reports the process's peak RSS beside
`config_memory(config, "window")` (the figure the memory budget checks), their ratio,
and how full each cache got, so a ratio is only read as tight when the caches were full.

`--grid` runs each configuration of the issue's table in a fresh process (so each peak is
that configuration's alone) and prints one line per configuration; `--json FILE` writes
them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from desktop.cli.args import (
    OneLineParser,
    add_config_arguments,
    config_from_args,
    fail,
)
from desktop.cli.session import SCREEN_SIZE

MIB = 2**20

# (N, d, blocks, pass): the window's own limits (issue 27 item 7) and the budget's rows.
GRID = (
    (4096, 256, 1, "backward"),
    (4096, 64, 2, "backward"),
    (2048, 64, 1, "training"),
    (4096, 128, 64, "training"),
    (4096, 64, 64, "forward"),
    (2048, 64, 2, "forward"),
)


def _spread(count: int, parts: int) -> list[int]:
    """`parts` indices spread over range(count), distinct, first and last included."""
    return sorted({int(x) for x in np.linspace(0, count - 1, min(count, parts))})


def fill_caches(window, app, cfg) -> dict[str, int]:
    """Drive the window through what fills its caches; return how many values each holds."""
    from compute.inputs import HISTORY_BLOCKS, HISTORY_KEY_TILES
    from compute.numbers import ENTRIES, SHARED
    from desktop.cli.bench_gui import _settle

    state = window.state
    for k in range(ENTRIES + 1):  # the shared cache's configurations, then back
        state.set_config(cfg.replace(seed=cfg.seed + 1 + k))
        _settle(app, state)
    state.set_config(cfg)
    _settle(app, state, cfg)
    trace = state.trace
    sched = trace.schedule
    t_r = -(-sched.n_q // sched.block_q)
    t_c = -(-sched.n_k // sched.block_k)
    for block in _spread(t_r, HISTORY_BLOCKS + 2):
        state.set_row(block * sched.block_q)
        _settle(app, state)
    if cfg.pass_name != "forward":
        for tile in _spread(t_c, HISTORY_KEY_TILES + 2):
            state.set_key(tile * sched.block_k)
            _settle(app, state)
    for step in _spread(trace.n_steps, 32):
        state.set_step(step)
        app.processEvents()
    _settle(app, state)
    held = {f"shared:{kind}": SHARED.held(kind) for kind in SHARED.kinds()}
    held["forward:blocks"] = trace.forward.cached("blocks")
    backward = getattr(trace, "backward", None)
    if backward is not None:
        held["backward:bwd_blocks"] = backward.cached("bwd_blocks")
        held["backward:key_tiles"] = backward.cached("key_tiles")
    return held


def measure(cfg) -> dict:
    """One configuration in this process: the session, then peak RSS against the estimate."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from desktop.cli.bench_gui import bench_window
    from desktop.state.config import config_memory

    app, window = bench_window()
    refused: list[str] = window.bench_refusals
    config = {k: v for k, v in cfg.to_dict().items() if k != "file"}
    estimate = config_memory(cfg, "window")
    held = fill_caches(window, app, cfg)
    window.close()
    if refused:
        return {"config": config, "refused": refused[-1], "estimate_mib": estimate / MIB}
    peak = peak_rss()
    return {
        "config": config,
        "peak_mib": round(peak / MIB, 1),
        "estimate_mib": round(estimate / MIB, 1),
        "estimate_over_peak": round(estimate / peak, 3),
        "held": held,
    }


def peak_rss() -> int:
    """This process's peak resident set in bytes. Linux's VmHWM starts afresh at exec;
    getrusage's ru_maxrss (the fallback elsewhere) keeps the peak of whatever forked us,
    so under a large parent (a test runner) it would report the parent's."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _line(r: dict) -> str:
    c = r["config"]
    head = (
        f"{c['pass_name']:<8} N={c['n']:<5} d={c['d']:<4} blocks {c['block_q']}x{c['block_k']:<3}"
    )
    if "refused" in r:
        return f"{head} refused: {r['refused']}"
    return (
        f"{head} peak {r['peak_mib']:8.1f} MiB  estimate {r['estimate_mib']:8.1f} MiB  "
        f"estimate/peak {r['estimate_over_peak']:.2f}"
    )


def _grid(argv_tail: Sequence[str]) -> list[dict]:
    results = []
    for n, d, b, pass_name in GRID:
        flags = ["--n", str(n), "--d", str(d), "--block-q", str(b), "--block-k", str(b),
                 "--pass", pass_name, "--input", "random", "--one-json"]  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "desktop.cli.main", "bench-memory", *flags, *argv_tail],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(_line(r), flush=True)
        results.append(r)
    return results


def main(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="flash-explorer bench-memory",
        description="The window's peak RSS, its caches filled, against the memory estimate.",
    )
    add_config_arguments(parser)  # with --input and --pass
    parser.add_argument("--json", type=Path, help="write the result(s) as JSON here")
    parser.add_argument(
        "--grid", action="store_true", help="run the window-limit grid, one process each"
    )
    parser.add_argument("--one-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from compute import InputError
    from desktop.export.atomic import ExportError, resolve_target

    if args.json:
        try:  # before minutes of measuring: a path that cannot take the file is said now
            resolve_target(args.json)
        except ExportError as exc:
            return fail(str(exc), parser.prog)

    if args.grid:
        try:
            results = _grid([])
        except RuntimeError as exc:
            return fail(str(exc), parser.prog)
    else:
        try:
            cfg = config_from_args(args).validated()
        except (InputError, ValueError) as exc:
            return fail(str(exc), parser.prog)
        results = [measure(cfg)]
        print(json.dumps(results[0]) if args.one_json else _line(results[0]), flush=True)
    if args.json:
        from desktop.export.atomic import write_text_atomic

        payload = {
            "results": results,
            "window": list(SCREEN_SIZE),
            "cpus": os.cpu_count(),
            "command": "flash-explorer bench-memory " + " ".join(argv),
        }
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(args.json, json.dumps(payload, indent=2) + "\n")
        except ExportError as exc:
            return fail(str(exc), parser.prog)
        except OSError as exc:
            return fail(f"{args.json} could not be written ({exc.strerror}).", parser.prog)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
