"""Energy per FLOP of the forward paths under sustained load: clock and power beside the rate.

Run on the GPU machine (needs torch beside CuPy and nvidia-smi on PATH):

    python -m compute.gpu.lab.energy_probe [--n 8192] [--d 128] [--dtype float16]
        [--causal 0|1] [--spec SPEC ...] [--seconds 2] [--json FILE]

Why (FLASH_NOTES.md v8, v9): these kernels hold the H200 at its power cap, where the SM clock
follows the power each cycle draws, so a kernel that does the same work per cycle but draws
more power runs slower. Each path (the default, every --spec, SDPA cuDNN and FA2) runs back
to back for --seconds after a 1 s untimed preheat, while nvidia-smi samples the SM clock and
board power every 20 ms; the table gives the sustained TFLOP/s, the mean clock and power of
the samples inside the timed window, FLOP per SM cycle (work per cycle, independent of the
clock) and picojoules per FLOP (what the cap rations).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time

from .timing_probe import add_case_arguments, paths

SAMPLE_MS = 20


def _run_for(fn, sets, seconds: float) -> tuple[int, float]:
    """Launch fn over the input sets back to back for about `seconds`; (runs, GPU ms)."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    runs, t_end = 0, time.time() + seconds
    start.record()
    while time.time() < t_end:
        for _ in range(4):  # a few launches between clock reads keep the queue full
            fn(*sets[runs % len(sets)])
            runs += 1
        if runs % 64 == 0:
            end.record()
            end.synchronize()  # bound the queue so the window is the wall-clock window
    end.record()
    end.synchronize()
    return runs, cupy.cuda.get_elapsed_time(start, end)


def _samples(text: str) -> list[tuple[float, float, float]]:
    """(unix time, SM MHz, watts) per line of nvidia-smi's csv,noheader,nounits output."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            when = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((when, float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    from ..timing import preheat

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_arguments(ap)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args(argv)
    peers = ("sdpa-cudnn", "sdpa-flash")
    fns, _, flops = paths(args.n, args.d, args.dtype, args.spec, peers, bool(args.causal))
    import cupy

    sms = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
         "--format=csv,noheader,nounits", "-lms", str(SAMPLE_MS)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    windows = {}
    try:
        for name, (fn, sets) in fns.items():
            preheat({name: (fn, sets)}, seconds=1.0)
            t0 = time.time()
            runs, ms = _run_for(fn, sets, args.seconds)
            windows[name] = (t0, time.time(), runs, ms)
    finally:
        smi.terminate()
        text, _ = smi.communicate(timeout=10)
    samples = _samples(text)
    rows = []
    print(f"{'path':44s} TFLOP/s   MHz  watts  FLOP/SM-cycle  pJ/FLOP  samples")
    for name, (t0, t1, runs, ms) in windows.items():
        inside = [(c, w) for when, c, w in samples if t0 + 0.1 <= when <= t1 - 0.05]
        tflops = flops * runs / (ms * 1e-3) / 1e12
        mhz = sum(c for c, _ in inside) / len(inside) if inside else float("nan")
        watts = sum(w for _, w in inside) / len(inside) if inside else float("nan")
        per_cycle = tflops * 1e12 / (mhz * 1e6 * sms)
        pj = watts / (tflops * 1e12) * 1e12
        rows.append({"path": name, "tflops": tflops, "mhz": mhz, "watts": watts,
                     "flop_per_sm_cycle": per_cycle, "pj_per_flop": pj, "runs": runs,
                     "samples": len(inside)})  # fmt: skip
        print(f"{name:44s} {tflops:7.1f} {mhz:5.0f} {watts:6.1f} {per_cycle:14.0f} "
              f"{pj:8.3f} {len(inside):8d}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"case": vars(args) | {"json": None}, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
