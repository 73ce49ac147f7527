"""In-process A/B of a lane frame's first paint: another tree's desktop/lanes against this one.

Usage (from this tree, PYTHONPATH at it):
    python assets/benchmarks/interactive/frames39/lane_ab.py BASE_TREE OUT.json SPEC...
SPEC is `ref` (the reference example) or PASS:N:D:BLOCK (d_v = d, square blocks, random
inputs). BASE_TREE is a `git archive` of the other commit; its desktop/lanes is copied as
a package of another name. Per SPEC, per playback frame (bench-gui's steps), the window
paints the step (so the trace's numbers are made), then one fresh lane view pair of each
tree paints it once (their caches see each step once, as a playback does), the order of
the two trees alternating frame by frame. The machine's load moves both alike: the
per-frame ratio new / base is the figure; the GUI thread's CPU time (thread_time).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
FRAMES = int(os.environ.get("FRAMES", "80"))


def _base_package(tree: Path) -> Path:
    """BASE_TREE/desktop/lanes as the package `baselanes` in a temporary folder."""
    root = Path(tempfile.mkdtemp(prefix="lane_ab_"))
    shutil.copytree(tree / "desktop" / "lanes", root / "baselanes")
    for f in (root / "baselanes").glob("*.py"):
        text = f.read_text()
        text = re.sub(r"from desktop\.lanes(\.| import)", r"from baselanes\1", text)
        f.write_text(text)
    return root


def _config(spec: str):
    from desktop.state.config import Config

    if spec == "ref":
        return Config()
    p, n, d, b = spec.split(":")
    n, d, b = int(n), int(d), int(b)
    return Config(n=n, d=d, dv=d, block_q=b, block_k=b, input="random", pass_name=p)


def main(base_tree: str, out: str, specs: list[str]) -> None:
    import numpy as np

    sys.path.insert(0, str(_base_package(Path(base_tree))))
    import baselanes.view as base_view
    from PySide6.QtGui import QPixmap

    from desktop.cli.bench_gui import _settle, bench_window
    from desktop.lanes.view import LaneView
    from desktop.scene.grouping import grouping_for

    app, window = bench_window()
    shown = {v.lane: v for v in window.findChildren(LaneView)}
    views = {
        "base": {lane: base_view.LaneView(window.state, lane) for lane in shown},
        "new": {lane: LaneView(window.state, lane) for lane in shown},
    }
    results = {}
    for spec in specs:
        state = window.state
        state.set_config(_config(spec))
        _settle(app, state)
        for tree in views.values():
            for lane, v in tree.items():
                v.resize(shown[lane].size())
                v._on_trace(state.trace)
        trace = state.trace
        stride = grouping_for(trace).stride
        pix = {lane: QPixmap(v.size()) for lane, v in shown.items()}
        ms: dict[str, list[float]] = {"base": [], "new": []}
        for k in range(1, FRAMES + 1):
            state.set_step((k * stride) % trace.n_steps)
            state.set_progress(0.5)
            app.processEvents()
            for name in ("base", "new") if k % 2 else ("new", "base"):
                t0 = time.thread_time()
                for lane, v in views[name].items():
                    v._paint_frame(pix[lane])
                ms[name].append((time.thread_time() - t0) * 1e3)
        b, n = np.array(ms["base"]), np.array(ms["new"])
        results[spec] = {
            "base_ms": ms["base"],
            "new_ms": ms["new"],
            "base_p50": float(np.median(b)),
            "new_p50": float(np.median(n)),
            "median_ratio": float(np.median(n / b)),
        }
        print(
            f"{spec:22s} both lanes, CPU ms p50: base {np.median(b):6.2f} new {np.median(n):6.2f}"
            f"  median new/base {np.median(n / b):.3f}",
            flush=True,
        )
    Path(out).write_text(json.dumps({"frames": FRAMES, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
