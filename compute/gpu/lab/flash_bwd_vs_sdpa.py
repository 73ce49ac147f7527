"""The tensor-core backward against torch SDPA's backward (FLASH and CUDNN backends).

Run on the GPU machine after changing a backward kernel (`kernels/flash_bwd_ws.cu`, the default,
or `flash_bwd_wgmma.cu`, the fallback; needs torch beside CuPy):

    python -m compute.gpu.lab.flash_bwd_vs_sdpa [--n 4096 16384] [--json FILE]

Setup as flash_vs_sdpa (batch*N = 16384 tokens, heads*d = 2048; its `TOKENS`, `MODEL_DIM`,
`ERR_BAR`, `PEERS`). Per case the three paths are timed by `timing.time_cuda` (CUDA events,
L2 flushed, inputs rotated, median) in interleaved rounds (`timing.time_interleaved`) after
`--preheat` seconds untimed (default 1: timed at the power-capped clock, as the forward's
comparison since FLASH_NOTES v8), each slice after `--settle` seconds of its own path
(default 0.25, FLASH_NOTES v9), on the same inputs: ours
(`flash_attention_backward` given our forward's O and LSE: preprocessing, main kernel and dQ
conversion all inside the events) and each SDPA backend's backward alone (graph built once,
`torch.autograd.grad` timed; `peers.sdpa_backward`). TFLOP/s = 2.5 x the forward's
4*B*H*N^2*d, halved for causal. Errors: max |g - ref| / max |ref| per gradient on head 0,
against `dense_attention_backward_gpu` on float64 copies of the inputs (its S and softmax
are float32, everything after float64), for ours and for each peer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..dtypes import FLASH_DTYPES
from ..gpu_identity import identity
from ..report import BWD_COMPARISON_FORMAT, VERSION
from .flash_vs_sdpa import ERR_BAR, MODEL_DIM, PEERS, TOKENS, add_timing_arguments


def _inputs(cp, bh: int, n: int, d: int, dtype: str, causal: bool, sets: int, seed: int):
    """`sets` rotations of (q, k, v, o, do, lse) shaped (1, bh, n, d), O and LSE our forward's."""
    from ..dtypes import device_array
    from ..flash import flash_attention

    rng = cp.random.default_rng(seed)
    out = []
    for _ in range(sets):
        q, k, v, do = (
            device_array(rng.standard_normal((1, bh, n, d), dtype=cp.float32), dtype)
            for _ in range(4)
        )
        o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
        out.append((q, k, v, o, do, lse))
    return out


def _errors(cp, grads, ref, dtype: str) -> dict[str, float]:
    from ..dtypes import float64_values

    errs = {}
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref, strict=True):
        got = float64_values(g.reshape(r.shape), dtype)
        top = float(cp.abs(r).max())
        errs[name] = float(cp.abs(got - r).max()) / top if top > 0 else float("nan")
        # Frobenius too: the max-abs measure is set by the last rounding, which all share.
        errs[name + "_fro"] = float(cp.linalg.norm(got - r) / cp.linalg.norm(r))
    errs["max"] = max(errs[n] for n in ("dq", "dk", "dv"))
    return errs


def run_case(n: int, d: int, dtype: str, causal: bool, warmup: int, repeats: int, modes=(),
             preheat_s: float = 0.0, settle_s: float = 0.0) -> dict:  # fmt: skip
    """One (N, d, dtype, causal) report: per path median ms, TFLOP/s and errors; `modes` adds
    rows `flash-bwd:mMODE` for flash_bwd_main's measurement variants (flash_backward.MODES);
    the paths first run untimed for `preheat_s` seconds (timing.preheat), and each slice after
    `settle_s` seconds of its own path untimed (timing.time_interleaved)."""
    import cupy as cp

    from ..dense_backward import dense_attention_backward_gpu
    from ..device import status
    from ..dtypes import float64_values
    from ..flash_backward import DEFAULT_MODE, backward_mode
    from ..peers import sdpa_backward
    from ..timing import rotation_count, time_interleaved

    bh = (TOKENS // n) * (MODEL_DIM // d)
    l2 = status().l2_bytes
    set_bytes = 5 * bh * n * d * 2
    sets = _inputs(cp, bh, n, d, dtype, causal, rotation_count(set_bytes, l2), seed=n + d)
    flops = 2.5 * 4 * bh * n * n * d * (0.5 if causal else 1.0)

    def variant(mode: int):
        def fn(q, k, v, o, do, lse):
            return backward_mode(q, k, v, o, do, lse, causal=causal, mode=mode)

        return fn

    ours = variant(DEFAULT_MODE)
    paths = {"flash-bwd": (ours, sets)}
    for m in modes:
        if m != DEFAULT_MODE and (m != 2 or d == 64):  # MODE 2 differs from 0 at d=64 only
            paths[f"flash-bwd:m{m}"] = (variant(m), sets)
    for name in PEERS:
        peer = sdpa_backward(name)
        flat = [tuple(x.reshape(bh, n, d) for x in (s[0], s[1], s[2], s[4])) for s in sets]
        paths[name] = (lambda run: run(), [(peer.prepare(*f, causal),) for f in flat])

    timings = time_interleaved(
        paths, warmup=warmup, repeats=repeats, l2_bytes=l2, preheat_s=preheat_s, settle_s=settle_s
    )

    q, k, v, _, do, _ = sets[0]
    head = [float64_values(x[0, :1], dtype) for x in (q, k, v, do)]
    ref = dense_attention_backward_gpu(*head, causal=causal)
    grads = {
        name: tuple(g[:, :1] for g in fn(*sets[0]))
        for name, (fn, _) in paths.items()
        if name.startswith("flash-bwd")
    }
    for name in PEERS:
        got = sdpa_backward(name)(*(x[0, :1] for x in (q, k, v, do)), causal)
        grads[name] = got
    results = []
    for name in paths:
        ms = timings[name].median_ms
        results.append({
            "kernel": name, "median_ms": ms, "tflops": flops / (ms * 1e-3) / 1e12,
            "rel_err": _errors(cp, grads[name], ref, dtype),
        })  # fmt: skip
    del sets, paths
    cp.get_default_memory_pool().free_all_blocks()
    config = {"n": n, "d": d, "dtype": dtype, "causal": causal, "batch_heads": bh}
    return {"config": config, "results": results}


def line(report: dict) -> str:
    """One table row: TFLOP/s (worst relative error) per path, then our ratio to each peer."""
    c = report["config"]
    by = {r["kernel"]: r for r in report["results"]}
    head = f"{c['dtype']:8s} d={c['d']:3d} N={c['n']:5d} {'causal' if c['causal'] else 'full  '}"
    parts = [f"{k}={r['tflops']:6.1f} ({r['rel_err']['max']:.1e})" for k, r in by.items()]
    ours = by["flash-bwd"]["tflops"]
    parts += [f"x{ours / by[p]['tflops']:.2f} {p}" for p in PEERS]
    return head + "  " + "  ".join(parts)


def summary(reports: list[dict]) -> list[str]:
    """The bar (N >= 4096: >= 1.0x SDPA FLASH; stretch >= 0.8x CUDNN) and errors per case."""
    lines = []
    for rep in reports:
        c = rep["config"]
        by = {r["kernel"]: r for r in rep["results"]}
        ratio = by["flash-bwd"]["tflops"] / by["sdpa-flash"]["tflops"]
        cud = by["flash-bwd"]["tflops"] / by["sdpa-cudnn"]["tflops"]
        err = by["flash-bwd"]["rel_err"]["max"]
        ok = "ok" if err <= ERR_BAR[c["dtype"]] else "OVER BAR"
        if c["n"] >= 4096:
            lines.append(
                f"  {'MET ' if ratio >= 1.0 else 'MISS'} {c['dtype']} d={c['d']} N={c['n']} "
                f"causal={c['causal']}: x{ratio:.2f} FLASH, x{cud:.2f} CUDNN, err {err:.1e} {ok}"
            )
    return lines


def _default_mode() -> int:
    from ..flash_backward import DEFAULT_MODE

    return DEFAULT_MODE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[4096, 16384])
    ap.add_argument("--d", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--dtype", nargs="*", choices=FLASH_DTYPES, default=list(FLASH_DTYPES))
    ap.add_argument("--causal", choices=["0", "1"], help="only non-causal (0) or causal (1)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--json", type=Path, help="write the reports here")
    ap.add_argument("--modes", type=int, nargs="*", default=[], help="also time these MODEs")
    add_timing_arguments(ap)
    args = ap.parse_args(argv)
    causals = [False, True] if args.causal is None else [args.causal == "1"]
    data = {
        "format": BWD_COMPARISON_FORMAT,
        "version": VERSION,
        "command": "python -m compute.gpu.lab.flash_bwd_vs_sdpa " + " ".join(sys.argv[1:]),
        "flops_formula": "2.5 * 4*B*H*N^2*d (x0.5 causal)",
        "default_mode": _default_mode(),
        "gpu_before": identity(),
        "reports": [],
    }
    t0 = time.time()
    try:
        for dtype in args.dtype:
            for d in args.d:
                for n in args.n:
                    for causal in causals:
                        rep = run_case(n, d, dtype, causal, args.warmup, args.reps, args.modes,
                                       args.preheat, args.settle)  # fmt: skip
                        data["reports"].append(rep)
                        print(line(rep), flush=True)
                        if args.json:  # rewritten after every case: a cut-short run keeps its data
                            data["seconds"] = round(time.time() - t0, 1)
                            args.json.write_text(json.dumps(data, indent=1))
    except (ImportError, RuntimeError, ValueError) as exc:
        print(f"flash_bwd_vs_sdpa: {exc}", file=sys.stderr)
        return 1
    data["gpu_after"] = identity()  # the clocks and temperature the timed cases left
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    print("\nsummary (bar: ours >= 1.0x SDPA FLASH for N >= 4096; stretch >= 0.8x CUDNN)")
    print("\n".join(summary(data["reports"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
