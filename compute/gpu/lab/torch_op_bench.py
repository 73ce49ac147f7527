"""The op as models call it: GPU-event time per call of `torch_attention` beside SDPA.

Run on the GPU machine (needs torch and CuPy) to re-measure issue 31's table:

    python -m compute.gpu.lab.torch_op_bench [--json FILE] [--reps 50] [--rounds 15]

bfloat16, causal, at (batch, heads, N, d) = (1, 8, 128, 64), (1, 8, 128, 128), (4, 16, 1024,
128), (2, 16, 4096, 128).
Inputs as transformer code passes them: (batch, heads, N, d) views of (batch, N, heads, d)
memory ("strided"), and the same values made contiguous beforehand ("contiguous"). Paths:
SDPA (torch's default backend choice) on both; ours through `torch_attention` (the eager
autograd.Function) on both; ours through the torch.library op called directly (the path
torch.compile traces; eager dispatch through it costs more); `torch_launch.forward`, the
cached-plan launch with nothing around it (the kernel alone, "launch_plan"), on both; and
`flash_attention` on CuPy views made beforehand (the kernel as the CuPy API launches it).
GQA 4:1 (K and V with a quarter of the heads, strided): SDPA with enable_gqa, ours, and the
launch plan alone. A sliding window of 256 keys back (window=(256, 0), causal, top-left):
ours, against SDPA given the same mask as a boolean attn_mask (its kernels then read every
tile), so the window's skipped tiles show beside the causal rows. Each time is CUDA events around `reps`
back-to-back calls, divided by reps (so host cost shows wherever it exceeds the kernel's);
the paths run interleaved, one block of reps each per round, and the median over rounds is
reported, with the host time per call of the same blocks (perf_counter around the issue
loop, before the end event). Forward + backward per call (autograd, upstream gradient
contiguous) for SDPA and ours on strided inputs, MHA and GQA 4:1, comes last, beside the
same forward and backward of ours with no autograd around them ("kernels_alone": the
signature's kept forward plan and backward call, allocations included), so the difference
is the autograd Function's own host cost. Every path's output is checked
against SDPA's first (relative error under 1e-2). Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

SHAPES = ((1, 8, 128, 64), (1, 8, 128, 128), (4, 16, 1024, 128), (2, 16, 4096, 128))
WINDOW = (256, 0)  # (left, right): 256 keys back, causal


def _paths(torch, F, shape):
    from compute.gpu import torch_attention, torch_launch
    from compute.gpu.flash import flash_attention
    from compute.gpu.peers import cupy_view
    from compute.gpu.torch_op import register_ops

    register_ops()
    b, h, n, d = shape
    g = torch.Generator(device="cuda").manual_seed(b * h + n + d)
    mem = [torch.randn(b, n, h, d, device="cuda", generator=g).to(torch.bfloat16) for _ in "qkv"]
    strided = [t.transpose(1, 2) for t in mem]
    contig = [t.contiguous() for t in strided]
    gqa = [strided[0], *(t[:, : h // 4] for t in strided[1:])]  # K, V: h / 4 heads, strided
    views = [cupy_view(torch, t) for t in contig]
    scale = 1.0 / math.sqrt(d)
    op = torch.ops.fa_explorer.attention_forward

    def flash_cupy():
        import cupy

        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            return flash_attention(*views, causal=True)

    from compute.mask import Mask

    visible = Mask(WINDOW[0], WINDOW[1], True).visible(range(n), range(n), n, n)
    band = torch.from_numpy(visible).to("cuda")
    paths = {
        "sdpa_strided": lambda: F.scaled_dot_product_attention(*strided, is_causal=True),
        "sdpa_contiguous": lambda: F.scaled_dot_product_attention(*contig, is_causal=True),
        "ours_strided": lambda: torch_attention(*strided, is_causal=True),
        "ours_contiguous": lambda: torch_attention(*contig, is_causal=True),
        "ours_library_op_contiguous": lambda: op(*contig, True, scale, "top-left")[0],
        "launch_plan_strided": lambda: torch_launch.forward(*strided, True, scale)[0],
        "launch_plan_contiguous": lambda: torch_launch.forward(*contig, True, scale)[0],
        "flash_attention_cupy": flash_cupy,
        "sdpa_gqa_strided": lambda: F.scaled_dot_product_attention(
            *gqa, is_causal=True, enable_gqa=True
        ),
        "ours_gqa_strided": lambda: torch_attention(*gqa, is_causal=True, enable_gqa=True),
        "launch_plan_gqa_strided": lambda: torch_launch.forward(*gqa, True, scale)[0],
        "sdpa_window_mask_strided": lambda: F.scaled_dot_product_attention(
            *strided, attn_mask=band
        ),
        "ours_window_strided": lambda: torch_attention(*strided, window=WINDOW, is_causal=True),
    }
    return paths, strided


def _check(torch, paths) -> dict[str, float]:
    from compute.gpu.peers import torch_view

    refs = {
        "causal": paths["sdpa_contiguous"]().double(),
        "gqa": paths["sdpa_gqa_strided"]().double(),
        "window": paths["sdpa_window_mask_strided"]().double(),
    }
    errs = {}
    for name, fn in paths.items():
        ref = refs[next((kind for kind in ("gqa", "window") if kind in name), "causal")]
        out = fn()
        if not isinstance(out, torch.Tensor):
            out = torch_view(torch, out)
        err = float((out.double() - ref).norm() / ref.norm())
        if not err < 1e-2:
            raise SystemExit(f"{name} differs from SDPA by {err:.2e}: no timing of a wrong path.")
        errs[name] = err
    return errs


def _time_block(torch, fn, reps: int) -> tuple[float, float]:
    """(GPU-event ms per call, host ms per call) over reps back-to-back calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    host = (time.perf_counter() - t0) * 1e3 / reps
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps, host


def _interleaved(torch, paths, reps: int, rounds: int) -> dict[str, dict[str, float]]:
    for fn in paths.values():  # warm-up: compiles, plans, allocator caches
        for _ in range(3):
            fn()
    samples = {name: [] for name in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            samples[name].append(_time_block(torch, fn, reps))
    return {
        name: {
            "gpu_ms_per_call": statistics.median(s[0] for s in got),
            "gpu_ms_min": min(s[0] for s in got),
            "gpu_ms_max": max(s[0] for s in got),
            "host_ms_per_call": statistics.median(s[1] for s in got),
        }
        for name, got in samples.items()
    }


def _training_paths(torch, F, strided):
    from compute.gpu import torch_attention

    leaves = [t.detach().clone().requires_grad_() for t in strided]
    kv = strided[0].shape[1] // 4  # GQA 4:1: K and V with a quarter of the heads
    gqa = [leaves[0], *(t[:, :kv].detach().clone().requires_grad_() for t in strided[1:])]
    do = torch.randn_like(strided[0].contiguous())

    def step(attn, inputs, **kw):
        def run():
            out = attn(*inputs, is_causal=True, **kw)
            out.backward(do)

        return run

    paths = {
        "sdpa_strided_fwd_bwd": step(F.scaled_dot_product_attention, leaves),
        "ours_strided_fwd_bwd": step(torch_attention, leaves),
        "sdpa_gqa_strided_fwd_bwd": step(F.scaled_dot_product_attention, gqa, enable_gqa=True),
        "ours_gqa_strided_fwd_bwd": step(torch_attention, gqa, enable_gqa=True),
    }
    for name, inputs in (("strided", leaves), ("gqa_strided", gqa)):
        alone = _kernels_alone(torch, inputs, do)
        if alone is not None:
            paths[f"kernels_alone_{name}_fwd_bwd"] = alone
    return paths


def _kernels_alone(torch, inputs, do):
    """The op's forward and backward with no autograd around them: the signature's kept
    forward plan (O and LSE allocated, one launch) and its torch_backward.BackwardCall
    (gradients allocated, the plan's launches, the group sum), as the eager Function runs
    them; None where the op's backward takes the general path here. The op's fwd + bwd
    minus this is what autograd and the Python Function add."""
    from compute.gpu import torch_attention, torch_op

    gqa = inputs[1].shape[1] != inputs[0].shape[1]
    torch_attention(*inputs, is_causal=True, enable_gqa=gqa).backward(do)  # builds both
    for t in inputs:
        t.grad = None
    call = torch_op._CALLS[torch_op._signature(*inputs, True, None, gqa, "top-left", None)]
    fast = call.bwd.get((do.stride(), False))
    if not call.fast or fast is None:
        return None
    q, k, v = (t.detach() for t in inputs)

    def run():
        o, lse = torch_op._launch_forward(torch, q, k, v, call)
        fast.run(torch, q, k, v, o, lse, do)

    return run


def import_for_gpu(tool: str, *names: str) -> tuple | None:
    """The modules `names` (torch first), or None after one sentence on stderr saying what
    is missing: a module, or a visible CUDA GPU."""
    import importlib

    try:
        mods = tuple(importlib.import_module(name) for name in names)
    except ImportError as exc:
        print(f"{tool} needs {', '.join(names)} installed ({exc.name} is not).", file=sys.stderr)
        return None
    if not mods[0].cuda.is_available():
        print(f"{tool} needs a CUDA GPU; none is visible.", file=sys.stderr)
        return None
    return mods


def timing_args(
    tool: str, doc: str, argv: list[str] | None, json_name: str, reps: int, rounds: int
) -> tuple | None:  # fmt: skip
    """(parsed --json / --reps / --rounds, torch) for a timing tool, or None after one
    sentence on stderr (import_for_gpu)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--json", type=Path, default=Path(json_name))
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--rounds", type=int, default=rounds)
    args = ap.parse_args(argv)
    mods = import_for_gpu(tool, "torch")
    return None if mods is None else (args, mods[0])


def timing_record(what: str, torch, args, rows: list) -> dict:
    """A timing tool's JSON record: what, the GPU, torch's version, reps, rounds, rows."""
    from compute.gpu.gpu_identity import identity

    return {"what": what, "gpu": identity(), "torch": torch.__version__, "reps": args.reps,
            "rounds": args.rounds, "rows": rows}  # fmt: skip


def write_json(path: Path, record: dict) -> None:
    """The record as indented JSON at path (its folder made), and a line saying so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parsed = timing_args("torch_op_bench", __doc__, argv, "torch_op_h200.json", 50, 15)
    if parsed is None:
        return 2
    args, torch = parsed
    F = torch.nn.functional

    rows = []
    for shape in SHAPES:
        paths, strided = _paths(torch, F, shape)
        errs = _check(torch, paths)
        timed = _interleaved(torch, paths, args.reps, args.rounds)
        timed.update(_interleaved(torch, _training_paths(torch, F, strided), 10, args.rounds))
        for name, err in errs.items():
            timed[name]["rel_err_vs_sdpa"] = err
        b, h, n, d = shape
        ms = {name: p["gpu_ms_per_call"] for name, p in timed.items()}
        bar = {  # the bar: the op against the kernel's own launch (launch_plan)
            f"{kind}_op_minus_plan_us": 1e3 * (ms[f"ours_{kind}"] - ms[f"launch_plan_{kind}"])
            for kind in ("strided", "contiguous", "gqa_strided")
        }
        bar.update(
            {
                f"{kind}_op_over_plan": ms[f"ours_{kind}"] / ms[f"launch_plan_{kind}"]
                for kind in ("strided", "contiguous", "gqa_strided")
            }
        )
        # the window's share of causal's time (its tiles: about (256 + block) / (N / 2) of them)
        bar["window_over_causal"] = ms["ours_window_strided"] / ms["ours_strided"]
        for kind in ("strided", "gqa_strided"):  # fwd + bwd: what autograd's layer adds
            alone = ms.get(f"kernels_alone_{kind}_fwd_bwd")
            if alone is not None:
                bar[f"{kind}_fwd_bwd_op_minus_kernels_us"] = 1e3 * (
                    ms[f"ours_{kind}_fwd_bwd"] - alone
                )
        rows.append({"batch": b, "heads": h, "n": n, "d": d, "bar": bar, "paths": timed})
    what = "GPU-event time per call, bf16 causal (compute/gpu/lab/torch_op_bench.py)"
    write_json(args.json, timing_record(what, torch, args, rows))
    names = list(rows[0]["paths"])
    print("ms per call (GPU events; host ms in brackets)")
    print("B,H,N,d".ljust(14) + "".join(n[:26].rjust(28) for n in names))
    for row in rows:
        cells = "".join(
            f"{p['gpu_ms_per_call']:.4f} [{p['host_ms_per_call']:.4f}]".rjust(28)
            for p in row["paths"].values()
        )
        print(f"{row['batch']},{row['heads']},{row['n']},{row['d']}".ljust(14) + cells)
    for row in rows:
        print(f"{row['batch']},{row['heads']},{row['n']},{row['d']}: " + ", ".join(
            f"{k} {v:.3f}" for k, v in row["bar"].items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
