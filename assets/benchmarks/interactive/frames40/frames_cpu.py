"""Playback frames as bench-gui times them, with the GUI thread's CPU time beside the wall.

Usage: JSON=OUT.json python assets/benchmarks/interactive/frames40/frames_cpu.py SPEC...
SPEC is `ref`, `ref-kv` or PASS:N:D:BLOCK[:WORD...] (d_v = d, square blocks, random
inputs; WORDs kv-outer, causal, float16, bfloat16, float32). Per SPEC, after the change
has settled: F (default 120) frames of bench-gui's steps (advance one frame's steps,
progress 0.5, process events), each timed by the wall clock and by time.thread_time.
PROFILE=DIR writes a cProfile of each SPEC's frames there. On a machine others load,
the CPU time moves less than the wall.
"""

from __future__ import annotations

import cProfile
import json
import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def config_of(spec: str):
    from desktop.state.config import Config

    if spec == "ref":
        return Config()
    if spec == "ref-kv":
        return Config(order="kv-outer")
    p, n, d, b, *rest = spec.split(":")
    n, d, b = int(n), int(d), int(b)
    extra = {}
    for word in rest:  # kv-outer, causal, float16, bfloat16, float32
        extra.update({"causal": True} if word == "causal" else {})
        extra.update({"order": word} if word.endswith("-outer") else {})
        extra.update({"dtype": word} if word.startswith(("float", "bfloat")) else {})
    return Config(n=n, d=d, dv=d, block_q=b, block_k=b, input="random", pass_name=p, **extra)


def main(specs: list[str]) -> None:
    import numpy as np

    from desktop.cli.bench_gui import _settle, bench_window
    from desktop.scene.grouping import grouping_for

    app, window = bench_window()
    frames = int(os.environ.get("F", "120"))
    prof_dir = os.environ.get("PROFILE")
    out = {}
    for spec in specs:
        cfg = config_of(spec)
        state = window.state
        state.set_config(cfg)
        _settle(app, state)
        trace = state.trace
        stride = grouping_for(trace).stride
        state.set_step(0)
        app.processEvents()
        wall, cpu = [], []
        prof = cProfile.Profile() if prof_dir else None
        for k in range(1, frames + 1):
            if prof:
                prof.enable()
            t0, c0 = time.perf_counter(), time.thread_time()
            state.set_step((k * stride) % trace.n_steps)
            state.set_progress(0.5)
            app.processEvents()
            cpu.append((time.thread_time() - c0) * 1e3)
            wall.append((time.perf_counter() - t0) * 1e3)
            if prof:
                prof.disable()
        if prof:
            prof.dump_stats(os.path.join(prof_dir, spec.replace(":", "_") + ".prof"))
        out[spec] = {"wall_ms": wall, "cpu_ms": cpu}
        print(
            f"{spec:28s} wall p50 {np.percentile(wall, 50):6.1f} p90 {np.percentile(wall, 90):6.1f}"
            f" | cpu p50 {np.percentile(cpu, 50):6.1f} p90 {np.percentile(cpu, 90):6.1f}",
            flush=True,
        )
    if os.environ.get("JSON"):
        with open(os.environ["JSON"], "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1:])
