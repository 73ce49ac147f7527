"""Where a training step's time goes: torch.profiler's trace of a few steps, summarised.

``profile_steps(torch, step, steps)`` runs ``step(i)`` `steps` times under torch.profiler
(CPU and CUDA activities, each step inside a ``record_function("train_step")`` range that
must end in a synchronisation, as the Llama bench's loss read-back does) and returns, per
step (means): the wall time of the step range, the GPU's busy time (the union of its
kernel, memset and memcpy intervals), the idle time (wall - busy: host gaps, launch
latency), GPU time and count per kernel family (`family`), the idle gaps summed by the
family of the kernel that ends them (a gap before the attention backward's kernels is its
host path), the largest single gaps, the host (CPU) time of the attention's own
operator ranges, and every GPU item each attention call launched (``attention_ops``).
Used by ``llama_train_bench --profile``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import defaultdict

_SDPA_BWD = r"pytorch_flash.*bwd|flash_bwd_(dot_do_o|convert|dq)|cudnn.*(bprop|dgrad|bwd|backward)"
# (family, pattern on the kernel's name), first match wins.
FAMILIES = (
    ("attn_sdpa_bwd", re.compile(_SDPA_BWD, re.I)),
    ("attn_sdpa_fwd", re.compile(r"pytorch_flash|cudnn|fmha|sdpa", re.I)),
    ("attn_ours_bwd", re.compile(r"flash_bwd")),
    ("attn_ours_fwd", re.compile(r"flash_fwd")),
    ("gemm", re.compile(r"gemm|cutlass|nvjet|xmma|cublas|sm90_|Kernel2", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam|foreach", re.I)),
    ("softmax_loss", re.compile(r"softmax|cross_entropy|nll_loss", re.I)),
    ("reduce", re.compile(r"reduce", re.I)),
    ("cat_copy", re.compile(r"CatArray|copy|Copy|memcpy|index", re.I)),
    ("fill", re.compile(r"fill|memset|zero", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled", re.I)),
)
GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")
GAP_LIST_US = 20.0  # single gaps longer than this are listed


def family(name: str) -> str:
    """The kernel family of a kernel's name (FAMILIES), "other" if none matches."""
    for fam, pattern in FAMILIES:
        if pattern.search(name):
            return fam
    return "other"


def profile_steps(torch, step, steps: int) -> dict:
    """The summary of `steps` profiled calls of step(i) (module docstring)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts) as prof:
        for i in range(steps):
            with record_function("train_step"):
                step(i)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        os.unlink(path)
    return summarise(trace.get("traceEvents", trace), steps)


def summarise(events: list, steps: int) -> dict:
    """The per-step summary of a chrome trace's events (module docstring)."""
    xs = [e for e in events if e.get("ph") == "X" and "dur" in e]
    ranges = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in xs
        if e.get("name") == "train_step" and e.get("cat") == "user_annotation"
    )
    gpu = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("name", ""), e.get("cat"))
        for e in xs
        if e.get("cat") in GPU_CATS
    )
    fam_us: dict[str, float] = defaultdict(float)
    fam_n: dict[str, int] = defaultdict(int)
    gap_by_next: dict[str, float] = defaultdict(float)
    gaps = []
    busy = wall = 0.0
    for lo, hi in ranges:
        wall += hi - lo
        inside = [g for g in gpu if lo <= g[0] < hi]
        end = lo
        prev = "(step start)"
        for start, stop, name, cat in inside:
            fam = family(name) if cat == "kernel" else cat
            fam_us[fam] += stop - start
            fam_n[fam] += 1
            if start > end:
                gap_by_next[fam] += start - end
                if start - end > GAP_LIST_US:
                    gaps.append((start - end, prev[:60], name[:60]))
            busy += max(0.0, stop - max(start, end))
            end = max(end, stop)
            prev = name
    n = max(1, len(ranges))
    host = defaultdict(lambda: [0.0, 0])
    for e in xs:
        name = e.get("name", "")
        if e.get("cat") == "cpu_op" and re.search(r"attention", name, re.I):
            host[name][0] += float(e["dur"])
            host[name][1] += 1
    gaps.sort(reverse=True)
    ops = attention_ops(xs, ranges, gpu)
    return {
        "steps": len(ranges),
        "wall_ms_per_step": wall / n / 1e3,
        "gpu_busy_ms_per_step": busy / n / 1e3,
        "gpu_idle_ms_per_step": (wall - busy) / n / 1e3,
        "family_ms_per_step": {k: v / n / 1e3 for k, v in sorted(fam_us.items())},
        "family_calls_per_step": {k: v / n for k, v in sorted(fam_n.items())},
        "idle_ms_per_step_by_next_family": {k: v / n / 1e3 for k, v in sorted(gap_by_next.items())},
        "largest_gaps_us": [{"us": round(g, 1), "after": a, "before": b} for g, a, b in gaps[:8]],
        "attention_host_ops": {
            name: {"calls_per_step": c / n, "host_us_per_call": t / max(1, c)}
            for name, (t, c) in sorted(host.items())
        },
        "attention_ops": ops,
    }


# The outermost host ranges of an attention call, forward or backward: ours (the autograd
# Function and its backward node) and SDPA's (the aten op and its backward node).
ATTENTION_OP = re.compile(r"^(FlashAttention|aten::scaled_dot_product_attention$|"
                          r"autograd::engine::evaluate_function: .*(FlashAttention|DotProduct))")  # fmt: skip


def attention_ops(xs: list, ranges: list, gpu: list) -> dict:
    """Everything the GPU does for each attention call, found through the launches made
    inside the call's outermost host range (ATTENTION_OP; launch and GPU item joined by
    their correlation id), per step and per range name: host time per call, each kernel's
    (or memset's, memcpy's) GPU time and count, the GPU's idle time between the call's first
    and last item (its own host gaps), and the idle time just before its first item (the
    GPU waiting for the call's host work)."""
    n = max(1, len(ranges))
    launches = {}
    for e in xs:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launches[corr] = float(e["ts"])
    by_corr = {}
    for e in xs:
        if e.get("cat") in GPU_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                by_corr[corr] = (
                    float(e["ts"]),
                    float(e["ts"]) + float(e["dur"]),
                    e.get("name", ""),
                )
    items = sorted((launches[c], *by_corr[c]) for c in by_corr if c in launches)
    spans = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"])
        for e in xs
        if e.get("cat") == "cpu_op"
        and ATTENTION_OP.search(e.get("name", ""))
        and any(lo <= float(e["ts"]) < hi for lo, hi in ranges)
    )
    outer, end = [], -1.0
    for lo, hi, name in spans:  # nested matches belong to the range around them
        if lo >= end:
            outer.append((lo, hi, name))
            end = hi
    ends = sorted(g[1] for g in gpu)
    out: dict = {}
    for lo, hi, name in outer:
        mine = sorted((start, stop, kname) for t, start, stop, kname in items if lo <= t < hi)
        key = name.replace("autograd::engine::evaluate_function: ", "")
        rec = out.setdefault(key, {"calls": 0, "host_us": 0.0, "idle_inside_us": 0.0,
                                   "wait_before_us": 0.0, "items": {}})  # fmt: skip
        rec["calls"] += 1
        rec["host_us"] += hi - lo
        if not mine:
            continue
        reach = mine[0][0]
        for start, stop, kname in mine:
            it = rec["items"].setdefault(kname[:90], [0, 0.0])
            it[0] += 1
            it[1] += stop - start
            rec["idle_inside_us"] += max(0.0, start - reach)
            reach = max(reach, stop)
        before = [e for e in ends if e <= mine[0][0]]
        if before:
            rec["wait_before_us"] += mine[0][0] - before[-1]
    for rec in out.values():
        calls = rec["calls"]
        rec["host_us_per_call"] = rec.pop("host_us") / calls
        rec["idle_inside_us_per_step"] = rec.pop("idle_inside_us") / n
        rec["wait_before_us_per_step"] = rec.pop("wait_before_us") / n
        rec["calls_per_step"] = calls / n
        del rec["calls"]
        rec["items"] = {k: {"per_step": c / n, "us_per_step": t / n}
                        for k, (c, t) in sorted(rec["items"].items(), key=lambda kv: -kv[1][1])}  # fmt: skip
    return out


def table(summaries: dict[str, dict]) -> str:
    """A text table: one column per model, rows of families, busy, idle and wall."""
    names = list(summaries)
    fams = sorted({f for s in summaries.values() for f in s["family_ms_per_step"]})
    lines = ["ms per step".ljust(22) + "".join(n[:16].rjust(18) for n in names)]
    for key in ("wall_ms_per_step", "gpu_busy_ms_per_step", "gpu_idle_ms_per_step"):
        lines.append(key.replace("_ms_per_step", "").ljust(22)
                     + "".join(f"{summaries[n][key]:.3f}".rjust(18) for n in names))  # fmt: skip
    for fam in fams:
        cells = "".join(
            f"{summaries[n]['family_ms_per_step'].get(fam, 0.0):.3f}"
            f" ({summaries[n]['family_calls_per_step'].get(fam, 0):.0f})".rjust(18)
            for n in names
        )
        lines.append(fam.ljust(22) + cells)
    for n in names:
        idle = summaries[n]["idle_ms_per_step_by_next_family"]
        top = sorted(idle.items(), key=lambda kv: -kv[1])[:5]
        lines.append(f"{n}: idle before " + ", ".join(f"{k} {v:.3f}" for k, v in top))
        for name, h in summaries[n]["attention_host_ops"].items():
            lines.append(f"  host {name[:70]}: {h['host_us_per_call']:.1f} us x "
                         f"{h['calls_per_step']:.0f}")  # fmt: skip
        for name, op in summaries[n].get("attention_ops", {}).items():
            lines.append(
                f"  op {name[:60]}: {op['calls_per_step']:.0f}/step, host "
                f"{op['host_us_per_call']:.0f} us/call, GPU idle inside "
                f"{op['idle_inside_us_per_step']:.0f} us/step, before "
                f"{op['wait_before_us_per_step']:.0f} us/step"
            )
            for kname, it in op["items"].items():
                lines.append(f"    {it['us_per_step']:8.1f} us/step x{it['per_step']:.0f}  {kname}")
    return "\n".join(lines)
