"""The tensor-core backward against SDPA (cuDNN, FA2) and FlashAttention-4, one process.

Run on the GPU machine (needs torch; FA4 where ``flash_attn.cute`` imports, see
``../shared/peers/fa4/README.md``):

    python -m compute.gpu.lab.backward_vs_fa4 [--n 4096 16384] [--json FILE]

Setup as ``tools/flash_bwd_vs_sdpa`` (its inputs, error measure and timing: B*N = 16384
tokens, H*d = 2048, inputs rotated past L2, `timing.time_interleaved` after a preheat, median).
Paths, each the backward alone on an autograd graph built once per input set (what the issue's
bar times): "ours" through ``torch_attention`` (the shipped default mode), SDPA cuDNN and SDPA
FA2 (``--peers``), FA4 (``flash_attn_func``, inputs (batch, N, heads, d) copies of the same
values); each ``--modes`` MODE of ``flash_backward.backward_mode`` called directly on
CuPy arrays with our forward's O and LSE (the deterministic mode, the wgmma fallback); and
each ``--plan-modes`` MODE as "plan-mMODE": the op's cached plan (``torch_launch``'s three
launches, its workspace) built for that mode, without autograd, so two ws modes compare by
the path "ours" takes.
TFLOP/s = 2.5 x 4*B*H*N^2*d, halved for causal. Errors: max |g - ref| / max |ref| on head 0
against float64. ``--budget-s`` starts no case after that many seconds (JSON is rewritten
after every case, so a run cut short keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..dtypes import FLASH_DTYPES
from ..gpu_identity import identity

# The names of the recorded JSON (assets/benchmarks/backward/): "ours-*" the wgmma kernel,
# "ws-*" the warp-specialised one (6 "ws-red" and 8 "ws-red3" lost and were removed).
MODE_NAMES = {
    0: "ours-red",
    4: "ours-bulk",
    5: "ours-det",
    7: "ws-bulk",
    9: "ws-det",
    13: "ws-q80",
    16: "ws-drain-det",
    23: "ws-q80-dqfirst",
    25: "ws-dvk2",
}


def _fa4() -> Any | None:
    """FA4's flash_attn_func, or None where it is not installed."""
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError:
        return None
    return flash_attn_func


def _fa4_prepare(func: Any, q: Any, k: Any, v: Any, do: Any, causal: bool):
    """FA4's backward alone on (1, BH, N, d) CuPy arrays: a zero-argument callable."""
    import torch

    from ..peers import torch_view

    tq, tk, tv = (
        torch_view(torch, x)[0].transpose(0, 1).contiguous()[None].requires_grad_()
        for x in (q, k, v)
    )
    tdo = torch_view(torch, do)[0].transpose(0, 1).contiguous()[None]
    out = func(tq, tk, tv, causal=causal)
    out = out[0] if isinstance(out, tuple) else out

    def run() -> Any:
        return torch.autograd.grad(out, (tq, tk, tv), tdo, retain_graph=True)

    return run


def _fa4_grads(func: Any, q: Any, k: Any, v: Any, do: Any, causal: bool):
    """FA4's (dq, dk, dv) for (1, 1, N, d) inputs, as CuPy arrays shaped like ours."""
    import torch

    from ..peers import cupy_view

    grads = _fa4_prepare(func, q, k, v, do, causal)()
    return tuple(cupy_view(torch, g[0].transpose(0, 1).contiguous())[None] for g in grads)


PEER_NAMES = ("sdpa-cudnn", "sdpa-flash", "fa4")


def _ours_prepare(q: Any, k: Any, v: Any, do: Any, causal: bool):
    """torch_attention's backward alone on (1, BH, N, d) CuPy arrays: a zero-argument callable."""
    import torch

    from .. import torch_attention
    from ..peers import torch_view

    tq, tk, tv = (torch_view(torch, x).detach().requires_grad_() for x in (q, k, v))
    tdo = torch_view(torch, do)
    out = torch_attention(tq, tk, tv, is_causal=causal)

    def run() -> Any:
        return torch.autograd.grad(out, (tq, tk, tv), tdo, retain_graph=True)

    return run


def _plan_prepare(q: Any, k: Any, v: Any, o: Any, do: Any, lse: Any, causal: bool, mode: int):
    """torch_launch's backward plan for `mode` alone on (1, BH, N, d) CuPy arrays (the launches
    and workspace 'ours' runs, without autograd): a zero-argument callable returning (dq, dk,
    dv) as tensors."""
    import torch

    from .. import torch_launch
    from ..peers import torch_view

    ts = [torch_view(torch, x) for x in (q, k, v, o, do, lse)]
    out = [torch.empty_like(t) for t in ts[:3]]
    plan = torch_launch._BackwardPlan(*ts[:5], out, causal, q.shape[3] ** -0.5, mode)
    ptrs = [t.data_ptr() for t in (*ts, *out)]  # Q K V O dO LSE dQ dK dV

    def run() -> list:
        plan.run(torch, list(ptrs))  # run appends its workspace's addresses to the list
        return out

    return run


def _torch_grads(prepared) -> tuple:
    """A prepared path's (dq, dk, dv) as CuPy arrays."""
    import torch

    from ..peers import cupy_view

    return tuple(cupy_view(torch, g.contiguous()) for g in prepared())


def run_case(n: int, d: int, dtype: str, causal: bool, modes, reps: int, preheat_s: float,
             settle_s: float, peers=PEER_NAMES, plan_modes=()) -> dict:  # fmt: skip
    """One case: per path median ms, TFLOP/s and errors vs float64."""
    import cupy as cp

    from ..dense_backward import dense_attention_backward_gpu
    from ..device import status
    from ..dtypes import float64_values
    from ..flash_backward import DVK_MODES, Q80_MODES, backward_mode
    from ..peers import sdpa_backward
    from ..timing import rotation_count, time_interleaved
    from .flash_bwd_vs_sdpa import _errors, _inputs
    from .flash_vs_sdpa import MODEL_DIM, TOKENS

    # The 80-row modes serve d = 128 only, the DVK ones d = 64; the other cases time the rest.
    def serves(m: int) -> bool:
        return (m not in Q80_MODES or d == 128) and (m not in DVK_MODES or d == 64)

    modes, plan_modes = [m for m in modes if serves(m)], [m for m in plan_modes if serves(m)]
    bh = (TOKENS // n) * (MODEL_DIM // d)
    l2 = status().l2_bytes
    sets = _inputs(cp, bh, n, d, dtype, causal, rotation_count(5 * bh * n * d * 2, l2), n + d)
    flops = 2.5 * 4 * bh * n * n * d * (0.5 if causal else 1.0)

    def ours(mode: int):
        return lambda q, k, v, o, do, lse: backward_mode(q, k, v, o, do, lse, causal=causal,
                                                         mode=mode)  # fmt: skip

    def call(run):
        return run()

    paths = {"ours": (call, [(_ours_prepare(s[0], s[1], s[2], s[4], causal),) for s in sets])}
    paths.update({MODE_NAMES[m]: (ours(m), sets) for m in modes})
    for m in plan_modes:
        paths[f"plan-m{m}"] = (call, [(_plan_prepare(*s, causal, m),) for s in sets])
    flat = [tuple(x.reshape(bh, n, d) for x in (s[0], s[1], s[2], s[4])) for s in sets]
    sdpas = {p: sdpa_backward(p) for p in peers if p.startswith("sdpa-")}
    for name, fn in sdpas.items():
        paths[name] = (call, [(fn.prepare(*f, causal),) for f in flat])
    fa4 = _fa4() if "fa4" in peers else None
    if fa4 is not None:
        preps = [(_fa4_prepare(fa4, s[0], s[1], s[2], s[4], causal),) for s in sets]
        paths["fa4"] = (call, preps)
    timings = time_interleaved(paths, warmup=3, repeats=reps, l2_bytes=l2, preheat_s=preheat_s,
                               settle_s=settle_s)  # fmt: skip

    q, k, v, _, do, _ = sets[0]
    head = [float64_values(x[0, :1], dtype) for x in (q, k, v, do)]
    ref = dense_attention_backward_gpu(*head, causal=causal)
    one = [x[:, :1] for x in (q, k, v, do)]
    grads = {"ours": _torch_grads(_ours_prepare(*one, causal))}
    grads.update({MODE_NAMES[m]: tuple(g[:, :1] for g in ours(m)(*sets[0])) for m in modes})
    for m in plan_modes:
        prepared = _plan_prepare(*sets[0], causal, m)
        grads[f"plan-m{m}"] = tuple(g[:, :1] for g in _torch_grads(prepared))
    for name, fn in sdpas.items():
        grads[name] = fn(*(x[0] for x in one), causal)
    if fa4 is not None:
        grads["fa4"] = _fa4_grads(fa4, *one, causal)
    results = [
        {"kernel": name, "median_ms": timings[name].median_ms,
         "tflops": flops / (timings[name].median_ms * 1e-3) / 1e12,
         "rel_err": _errors(cp, grads[name], ref, dtype)}
        for name in paths
    ]  # fmt: skip
    del sets, paths
    cp.get_default_memory_pool().free_all_blocks()
    return {"config": {"n": n, "d": d, "dtype": dtype, "causal": causal, "batch_heads": bh},
            "results": results}  # fmt: skip


def line(rep: dict) -> str:
    """One table row: TFLOP/s (worst error) per path; each of our modes over cuDNN and FA4."""
    c = rep["config"]
    by = {r["kernel"]: r for r in rep["results"]}
    head = f"{c['dtype']:8s} d={c['d']:3d} N={c['n']:5d} {'causal' if c['causal'] else 'full  '}"
    parts = [f"{k}={r['tflops']:6.1f} ({r['rel_err']['max']:.1e})" for k, r in by.items()]
    for name in ("ours", *MODE_NAMES.values()):
        for peer in ("sdpa-cudnn", "fa4"):
            if name in by and peer in by:
                parts.append(f"{name}/{peer}={by[name]['tflops'] / by[peer]['tflops']:.2f}")
    return head + "  " + "  ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[4096, 16384])
    ap.add_argument("--d", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--dtype", nargs="*", choices=FLASH_DTYPES, default=list(FLASH_DTYPES))
    ap.add_argument("--causal", choices=["0", "1"], help="only non-causal (0) or causal (1)")
    ap.add_argument(
        "--modes",
        type=int,
        nargs="*",
        default=[4, 9],
        help="backward_mode MODEs timed directly beside the op (default: 4 9)",
    )
    ap.add_argument(
        "--peers",
        nargs="*",
        choices=PEER_NAMES,
        default=list(PEER_NAMES),
        help="peers timed beside ours (fa4 where flash_attn.cute imports)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no case after this many seconds (0: no limit)",
    )
    ap.add_argument(
        "--plan-modes",
        type=int,
        nargs="*",
        default=[],
        help="ws MODEs timed through the op's backward plan without autograd (plan-mMODE)",
    )
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--preheat", type=float, default=1.0)
    ap.add_argument("--settle", type=float, default=0.25)
    ap.add_argument("--json", type=Path, help="write the reports here")
    args = ap.parse_args(argv)
    bad = [m for m in (*args.modes, *args.plan_modes) if m not in MODE_NAMES]
    if bad:
        print(f"backward_vs_fa4: --modes takes {sorted(MODE_NAMES)}, not {bad}", file=sys.stderr)
        return 2
    causals = [False, True] if args.causal is None else [args.causal == "1"]
    data = {
        "command": "python -m compute.gpu.lab.backward_vs_fa4 " + " ".join(sys.argv[1:]),
        "flops_formula": "2.5 * 4*B*H*N^2*d (x0.5 causal)",
        "ours": "torch_attention autograd, flash_attention_backward's default mode",
        "modes": {MODE_NAMES[m]: m for m in args.modes},
        "plan_modes": args.plan_modes,
        "peers": args.peers,
        "fa4": _fa4() is not None,
        "gpu_before": identity(),
        "reports": [],
    }
    t0 = time.time()
    try:
        for dtype in args.dtype:
            for d in args.d:
                for n in args.n:
                    for causal in causals:
                        if args.budget_s and time.time() - t0 > args.budget_s:
                            print("backward_vs_fa4: --budget-s spent; stopping", file=sys.stderr)
                            raise StopIteration
                        rep = run_case(n, d, dtype, causal, args.modes, args.reps, args.preheat,
                                       args.settle, args.peers, args.plan_modes)  # fmt: skip
                        data["reports"].append(rep)
                        print(line(rep), flush=True)
                        if args.json:  # rewritten after every case: a cut-short run keeps its data
                            data["seconds"] = round(time.time() - t0, 1)
                            args.json.write_text(json.dumps(data, indent=1))
    except StopIteration:
        pass
    except (ImportError, RuntimeError, ValueError) as exc:
        print(f"backward_vs_fa4: {exc}", file=sys.stderr)
        return 1
    data["gpu_after"] = identity()
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
