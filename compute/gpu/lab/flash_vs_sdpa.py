"""The tensor-core kernel against torch SDPA (FA2 and cuDNN backends) and the dense path.

Run on the GPU machine after changing `kernels/flash_fwd_*.cu` or `flash.py`'s defaults, to
re-measure the README's "Tensor-core kernel" table (needs torch beside CuPy):

    python -m compute.gpu.lab.flash_vs_sdpa [--quick] [--json FILE] [--tune SPEC ...]
        [--pass forward backward training]

Setup as the FlashAttention papers: batch*N = 16384 tokens, heads*d = 2048; every case is
one `compute.gpu.bench.run_bench` call (same inputs, timer, float64 reference and dense path
as the CLI and the panel), with paths `flash` (its default variant per d, plus each --tune
spec), `sdpa-flash`, `sdpa-cudnn`, and `dense` in float16 up to --dense-max-n. Writes one
figures-format JSON holding every report and prints one line per case, then a summary.
With --pass backward (or training) the same paths time their backward alone (from what
their forward saved) or forward + backward together; TFLOP/s then count 2.5 (3.5) forwards.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from ... import PASSES
from ..bench import BenchConfig, GpuUnavailable, run_bench
from ..dtypes import FLASH_DTYPES
from ..gpu_identity import identity
from ..report import FIGURES_FORMAT, VERSION

TOKENS = 16384
MODEL_DIM = 2048
ERR_BAR = {"float16": 2e-3, "bfloat16": 1e-2}  # rel err vs float64 (FA2 / cuDNN sit at 1/7 of it)
PEERS = ("sdpa-flash", "sdpa-cudnn")


def add_timing_arguments(ap: argparse.ArgumentParser, timed: str = "case") -> None:
    """--preheat and --settle, as both peer comparisons take them (timing.time_interleaved);
    `timed` names what is preheated."""
    ap.add_argument(
        "--preheat", type=float, default=1.0,
        help=f"seconds each {timed} runs untimed first, so every path is timed at the clock "
        "the GPU holds under sustained load (its power cap; default 1)",
    )  # fmt: skip
    ap.add_argument(
        "--settle", type=float, default=0.25,
        help="seconds each path runs untimed on its own before each of its timed slices, so "
        "no slice inherits the clock of the path before it (default 0.25)",
    )  # fmt: skip


def cases(ns, ds, dtypes, causals, dense_max_n: int, warmup: int, repeats: int, tune,
          passes=("forward",), preheat_s: float = 0.0, settle_s: float = 0.0):  # fmt: skip
    """One BenchConfig per (pass, dtype, d, N, causal), batch*heads = (16384 / N) * (2048 / d)."""
    for pass_name in passes:
        for cfg in _forward_cases(ns, ds, dtypes, causals, dense_max_n, warmup, repeats, tune):
            if pass_name == "forward":
                yield replace(cfg, preheat_s=preheat_s, settle_s=settle_s)
            else:  # the flash variants are forward kernels
                yield replace(cfg, pass_name=pass_name, flash_specs=())


def _forward_cases(ns, ds, dtypes, causals, dense_max_n, warmup, repeats, tune):
    for dtype in dtypes:
        for d in ds:
            for n in ns:
                dense = ("dense",) if dtype == "float16" and n <= dense_max_n else ()
                base = BenchConfig(
                    n=n, d=d, dtype=dtype, batch_heads=(TOKENS // n) * (MODEL_DIM // d),
                    kernels=("flash", *PEERS, *dense), count_transfers=False,
                    warmup=warmup, repeats=repeats,
                    flash_specs=tuple(s for s in tune if s.split(":")[1] == str(d)),
                )  # fmt: skip
                for causal in causals:
                    yield replace(base, causal=causal)


def _line(report: dict) -> str:
    c = report["config"]
    by = {r["kernel"]: r for r in report["results"]}
    head = f"{c.get('pass_name', 'forward'):8s} {c['dtype']:8s} d={c['d']:3d} N={c['n']:5d} "
    head += "causal" if c["causal"] else "full  "
    parts = []
    for name, r in by.items():
        if "error" in r:
            parts.append(f"{name}=fail [{r['error'][:100]}]")
        else:
            parts.append(f"{name}={r['tflops']:6.1f} ({r['rel_err']:.1e})")
    flash = by.get("flash", {})
    for peer, label in zip(PEERS, ("FA2", "cuDNN"), strict=True):
        if "tflops" in flash and "tflops" in by.get(peer, {}):
            parts.append(f"x{flash['tflops'] / by[peer]['tflops']:.2f} {label}")
    return head + "  " + "  ".join(parts)


def summary(reports: list[dict]) -> list[str]:
    """The bar per case (N >= 4096, fp16 and bf16: flash >= 1.0x SDPA cuDNN in the forward,
    >= 1.0x SDPA FA2 in the backward and training; the other peer beside it) and the worst
    error per path and pass."""
    lines, worst = [], {}
    for rep in reports:
        c = rep["config"]
        pass_name = c.get("pass_name", "forward")
        by = {r["kernel"]: r for r in rep["results"]}
        for name, r in by.items():
            if r.get("rel_err") is not None:
                key = (pass_name, name, c["dtype"])
                worst[key] = max(worst.get(key, 0.0), r["rel_err"])
        flash, fa2, cudnn = (by.get(k, {}) for k in ("flash", *PEERS))
        if c["n"] >= 4096 and all("tflops" in r for r in (flash, fa2, cudnn)):
            # The forward's bar is cuDNN (issue 16), the backward's FA2 (issue 15).
            bar = cudnn if pass_name == "forward" else fa2
            ratio = flash["tflops"] / bar["tflops"]
            lines.append(
                f"  {'MET ' if ratio >= 1.0 else 'MISS'} {pass_name:8s} {c['dtype']:8s} "
                f"d={c['d']} N={c['n']} causal={c['causal']}: flash {flash['tflops']:.1f}, "
                f"cuDNN {cudnn['tflops']:.1f} (x{flash['tflops'] / cudnn['tflops']:.3f}), "
                f"FA2 {fa2['tflops']:.1f} (x{flash['tflops'] / fa2['tflops']:.2f})"
            )
    for (pass_name, name, dtype), err in sorted(worst.items()):
        bar = ERR_BAR.get(dtype, 1e-4)
        lines.append(
            f"  worst rel err {pass_name:8s} {name:24s} {dtype:8s} {err:.2e} "
            f"{'ok' if err <= bar else 'OVER BAR'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N in {1024, 4096, 16384} only")
    ap.add_argument("--json", type=Path, help="write the reports here")
    ap.add_argument("--n", type=int, nargs="*", help="sequence lengths (default 1024 .. 16384)")
    ap.add_argument("--d", type=int, nargs="*", help="head dims (default 64 128)")
    ap.add_argument("--dtype", nargs="*", choices=FLASH_DTYPES)
    ap.add_argument("--causal", choices=["0", "1"], help="only non-causal (0) or causal (1)")
    ap.add_argument("--tune", nargs="*", default=[], help="variants, e.g. wgmma:128:2:64:2")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dense-max-n", type=int, default=8192)
    add_timing_arguments(ap, "forward case")
    ap.add_argument(
        "--pass", dest="passes", nargs="*", choices=PASSES,
        default=["forward"], help="passes to time (default: the forward)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    ns = args.n or ([1024, 4096, 16384] if args.quick else [1024, 2048, 4096, 8192, 16384])
    causals = [False, True] if args.causal is None else [args.causal == "1"]
    data = {
        "format": FIGURES_FORMAT,
        "version": VERSION,
        "command": "python -m compute.gpu.lab.flash_vs_sdpa " + " ".join(sys.argv[1:]),
        "flops_formula": "4*B*H*N^2*d (x0.5 causal; x2.5 backward, x3.5 training)",
        "gpu_before": identity(),
        "reports": [],
    }
    t0 = time.time()
    try:
        for cfg in cases(ns, args.d or [64, 128], args.dtype or list(FLASH_DTYPES), causals,
                         args.dense_max_n, args.warmup, args.reps, args.tune,
                         args.passes, args.preheat, args.settle):  # fmt: skip
            report = run_bench(cfg)
            data["reports"].append(report)
            print(_line(report), flush=True)
            if args.json:  # rewritten after every case, so a run cut short keeps its data
                data["seconds"] = round(time.time() - t0, 1)
                args.json.write_text(json.dumps(data, indent=1))
    except GpuUnavailable as exc:
        print(f"flash_vs_sdpa: {exc}", file=sys.stderr)
        return 1
    data["gpu_after"] = identity()  # the clocks and temperature the timed cases left
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    print(
        "\nsummary (bar: flash >= 1.0x SDPA cuDNN in the forward, >= 1.0x SDPA FA2 in the "
        "backward and training, for N >= 4096; errors vs float64)"
    )
    print("\n".join(summary(data["reports"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
