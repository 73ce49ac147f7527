"""Hashes of the whole window at playback frames, to compare two trees' pictures.

Usage: python assets/benchmarks/interactive/frames40/shots.py OUT.json [PNG_DIR] SPEC...
SPEC as frames_cpu.py's. Per SPEC, after the change has settled: F (default 40) frames
of bench-gui's steps at progress 0.5 (every 7th also at 0 and 1), then 8 with another
selected row; each a window.grab() (lanes, plots, read-outs, bars), hashed. With
PNG_DIR, each shot is saved there too (to look at the ones that differ).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).parent))


def main(out: str, args: list[str]) -> None:
    from frames_cpu import config_of

    from desktop.cli.bench_gui import _settle, bench_window
    from desktop.scene.grouping import grouping_for

    png = Path(args.pop(0)) if args and not (":" in args[0] or args[0].startswith("ref")) else None
    app, window = bench_window()
    frames = int(os.environ.get("F", "40"))
    shots: dict[str, str] = {}

    def shoot(name: str) -> None:
        app.processEvents()
        image = window.grab().toImage()
        bits = image.constBits()
        shots[name] = hashlib.sha1(bytes(bits)).hexdigest()
        if png is not None:
            png.mkdir(parents=True, exist_ok=True)
            image.save(str(png / f"{name.replace(':', '_')}.png"))

    for spec in args:
        state = window.state
        state.set_config(config_of(spec))
        _settle(app, state)
        trace = state.trace
        stride = grouping_for(trace).stride
        for k in range(1, frames + 1):
            step = (k * stride) % trace.n_steps
            state.set_step(step)
            for progress in (0.5, 0.0, 1.0) if k % 7 == 0 else (0.5,):
                state.set_progress(progress)
                shoot(f"{spec}@{step}p{progress}")
        row = min(trace.schedule.n_q - 1, trace.schedule.block_q * 3 + 1)
        state.set_row(row)
        _settle(app, state)
        for k in range(1, 9):
            step = (k * stride * 5) % trace.n_steps
            state.set_step(step)
            state.set_progress(0.5)
            shoot(f"{spec}@{step}r{row}")
    Path(out).write_text(json.dumps(shots, indent=1) + "\n")
    print(f"{len(shots)} shots")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
