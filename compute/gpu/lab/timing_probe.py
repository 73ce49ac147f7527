"""Why two timing schemes disagree: per-run event times of the flash kernel and SDPA cuDNN.

Run on the GPU machine (needs torch beside CuPy), ideally beside a clock log
(`nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active
--format=csv -lms 20`):

    python -m compute.gpu.lab.timing_probe [--n 8192] [--d 128] [--dtype float16]
        [--causal 0|1] [--json FILE]

One case (B·N = 16k, H·d = 2048, non-causal unless --causal 1), the same inputs and L2 flush as the harness
(`timing.time_cuda`). Phases, each printed with its wall-clock start so it can be lined up
with the clock log: A, each path in one block of 60 runs, flash / cuDNN / flash / cuDNN;
B, `timing.time_interleaved` as the comparison runs it (3 rounds of 20); C, 12 rounds of
60; D, the host time of one call of each path (no sync), which bounds how far the CPU can
fall behind the GPU. Every run's milliseconds go to the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from ..timing import rotation_count, time_cuda, time_interleaved
from .flash_vs_sdpa import MODEL_DIM, TOKENS


def case_inputs(n: int, d: int, dtype: str) -> tuple[int, int, list]:
    """One case's batch*heads (B·N = 16k, H·d = 2048), the L2 size, and its seeded (q, k, v)
    sets, each (batch*heads, n, d), rotated over more than L2."""
    import cupy

    from ..dtypes import device_array

    bh = (TOKENS // n) * (MODEL_DIM // d)
    l2 = int(cupy.cuda.Device().attributes["L2CacheSize"])
    rng = cupy.random.default_rng(0)
    shape = (bh, n, d)
    sets = []
    for _ in range(rotation_count(3 * bh * n * d * 2, l2)):
        sets.append(tuple(device_array(rng.standard_normal(shape, dtype=cupy.float32), dtype)
                          for _ in range(3)))  # fmt: skip
    return bh, l2, sets


def paths(n: int, d: int, dtype: str, specs: list[str], peer_names=("sdpa-cudnn",),
          causal: bool = False):  # fmt: skip
    """{name: (fn, rotated input sets)} of our default, each spec and each SDPA peer on one
    case (non-causal unless asked); with the L2 size and the case's FLOPs."""
    from .. import flash, peers

    bh, l2, sets = case_inputs(n, d, dtype)
    fns = {}
    for spec in ["default", *specs]:
        cfg = flash.default_config(d, n, causal) if spec == "default" else flash.Config.parse(spec)
        fns[f"flash[{cfg.spec()}]"] = lambda q, k, v, cfg=cfg: flash.flash_attention(
            q[None], k[None], v[None], causal=causal, config=cfg
        )
    for peer in peer_names:
        sdpa = peers.sdpa(peer)
        fns[peer] = lambda q, k, v, fn=sdpa: fn(q, k, v, causal=causal)
    flops = 4.0 * bh * n * n * d / (2 if causal else 1)
    return {name: (fn, sets) for name, fn in fns.items()}, l2, flops


def add_case_arguments(ap: argparse.ArgumentParser) -> None:
    """--n, --d, --dtype, --causal, --spec and --json: the one case a probe runs, and where
    it writes."""
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--causal", type=int, choices=[0, 1], default=0)
    ap.add_argument("--spec", nargs="*", default=[], help="flash variants beside the default")
    ap.add_argument("--json", type=Path)


def _host_us(fn, sets, calls: int = 50) -> float:
    import cupy

    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    t1 = time.perf_counter()
    cupy.cuda.Device().synchronize()
    return (t1 - t0) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_arguments(ap)
    args = ap.parse_args(argv)
    fns, l2, flops = paths(args.n, args.d, args.dtype, args.spec, causal=bool(args.causal))
    out: dict = {"case": vars(args) | {"json": None}, "phases": []}

    def report(phase: str, t0: float, times: dict[str, list[float]]) -> None:
        print(f"\n== {phase} (started {t0:.3f})")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:42s} median {flops / med / 1e9:6.1f} TFLOP/s  min {min(ts):.4f}"
                  f"  med {med:.4f}  max {max(ts):.4f} ms  runs " +
                  " ".join(f"{t:.3f}" for t in ts))  # fmt: skip
        out["phases"].append({"phase": phase, "t0": t0, "times_ms": times})

    for fn, sets in fns.values():  # compile, plan, handles: outside every phase
        time_cuda(fn, sets, warmup=3, repeats=3, l2_bytes=l2)
    t0 = time.time()
    blocks: dict[str, list[float]] = {}
    for rep in range(2):
        for name, (fn, sets) in fns.items():
            t = time_cuda(fn, sets, warmup=5, repeats=60, l2_bytes=l2)
            blocks[f"{name} block{rep}"] = list(t.times_ms)
    report("A: blocks of 60", t0, blocks)
    for label, rounds, repeats in (
        ("B: interleaved 3x20", 3, 20),
        ("C: interleaved 12x60", 12, 60),
    ):
        t0 = time.time()
        got = time_interleaved(fns, warmup=5, repeats=repeats, rounds=rounds, l2_bytes=l2)
        report(label, t0, {k: list(v.times_ms) for k, v in got.items()})
    host = {name: _host_us(fn, sets) for name, (fn, sets) in fns.items()}
    print(
        "\n== D: host microseconds per call: " + ", ".join(f"{k} {v:.0f}" for k, v in host.items())
    )
    out["host_us"] = host
    if args.json:
        args.json.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
