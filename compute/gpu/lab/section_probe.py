"""Balanced LPT sections against sections filled to the L2 cap, in one run (FLASH_NOTES v13).

Run on the GPU machine (needs torch beside CuPy):

    python -m compute.gpu.lab.section_probe [--n 4096] [--d 128] [--dtype float16]
        [--causal 0|1] [--spec SPEC ...] [--json FILE]

One case (B·N = 16k, H·d = 2048, as flash_vs_sdpa), our default and each spec launched
twice, with `flash.lpt_section` (sections made equal under the cap) and with the cap
itself (`flash.lpt_section_cap`, the rule before v13), beside SDPA cuDNN; all paths
interleaved, preheated and settled as the peer comparison times them. Only variants with
the LPT order (`:lpt`) and a causal mask differ between the two.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from .timing_probe import add_case_arguments, paths


def capped(fn):
    """fn, launched with each LPT section holding as many heads as the L2 cap allows."""
    from .. import flash

    def run(*args):
        balanced = flash.lpt_section
        flash.lpt_section = lambda n_k, d, heads: flash.lpt_section_cap(n_k, d)
        try:
            return fn(*args)
        finally:
            flash.lpt_section = balanced

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_arguments(ap)
    args = ap.parse_args(argv)

    from ..gpu_identity import identity
    from ..timing import time_interleaved

    card = identity()  # which H200 (the JSON says; v13's call 8 predates this)
    fns, l2, flops = paths(args.n, args.d, args.dtype, args.spec, causal=bool(args.causal))
    timed = {}
    for name, (fn, sets) in fns.items():
        if name.startswith("flash"):
            timed[f"{name} balanced"] = (fn, sets)
            timed[f"{name} capped"] = (capped(fn), sets)
        else:
            timed[name] = (fn, sets)
    got = time_interleaved(
        timed, warmup=5, repeats=20, rounds=3, l2_bytes=l2, preheat_s=1.0, settle_s=0.25
    )
    tflops = {name: flops / statistics.median(t.times_ms) / 1e9 for name, t in got.items()}
    print(f"N={args.n} d={args.d} {args.dtype} causal={bool(args.causal)}")
    for name, value in tflops.items():
        print(f"  {name:60s} {value:7.1f} TFLOP/s")
    for name in fns:
        if name.startswith("flash"):
            gain = tflops[f"{name} balanced"] / tflops[f"{name} capped"] - 1
            print(f"  balanced against capped, {name}: {100 * gain:+.1f}%")
    if args.json:
        case = vars(args) | {"json": None}
        times = {name: list(t.times_ms) for name, t in got.items()}
        record = {"case": case, "gpu": card, "tflops": tflops, "times_ms": times}
        args.json.write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
