"""Benchmark one decode step: the split-KV and one-pass kernels against torch SDPA and FA4.

    python -m compute.gpu.decode_bench [--out assets/benchmarks/decode/decode_h200.json]

Every contender runs in this one process, interleaved (compute.gpu.timing.time_interleaved,
inputs rotated past the L2, L2 flushed before each run), on the same q, k, v values:
SDPA gets the arrays themselves through DLPack ((1, H, N, d), `enable_gqa=True`, torch's
own backend choice); FA4 (`flash_attn.cute.flash_attn_func`, seqlen_q = 1, its own split
heuristic num_splits=0) takes (1, N, H, d), so it gets copies in that layout. FA4 is
skipped, with the reason in the JSON, where it cannot be imported.
Our kernels are timed through `prepare_decode` (bound once per input set, so each timed
step is its two launches, not the Python that checks and allocates); split-kv runs one
block per SM (S = SMs // H_kv splits), "split-kv x2" twice as many splits (two blocks per
SM), and "stream only" is split-kv's streaming kernel without its combine.
Bandwidth is the one-pass ledger's bytes (Q, K, V read once, O written: what any schedule
must move) over the median time, as a fraction of the device-to-device copy bandwidth
measured here in the same process; each of our rows also carries its own ledger's bytes.
Every contender's output is checked against the float64 dense reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..decode import DecodeProblem, decode_inputs, decode_ledger, dense_decode
from .decode import prepare_decode
from .device import status
from .dtypes import device_array, float64_values
from .peers import cupy_view, torch_view
from .timing import rotation_count, time_cuda, time_interleaved

DEFAULT_OUT = Path("assets/benchmarks/decode/decode_h200.json")
CASES = (
    (8, 8, 8192),
    (8, 8, 65536),
    (8, 1, 8192),
    (8, 1, 65536),
    (32, 8, 16384),
    (32, 8, 65536),
    (64, 8, 65536),
)
# (H_q, H_kv, N_k): 8 heads without GQA; one K/V head with a group of 8; Llama-3-8B's 32 / 8
# (group 4); Llama-3-70B's 64 / 8 (group 8 with eight K/V heads)
D, DTYPE, BLOCK_K = 128, "bfloat16", 64
OURS = ("split-kv", "split-kv x2", "stream only", "one-pass")


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Bytes per second of a device-to-device copy (read plus write), median of 10."""
    import cupy

    a = cupy.zeros(nbytes, dtype=cupy.uint8)
    b = cupy.empty_like(a)
    t = time_cuda(lambda: cupy.copyto(b, a), [()], warmup=2, repeats=10)
    return 2 * nbytes / (t.median_ms * 1e-3)


def _fa4() -> tuple[Any, str]:
    try:
        from flash_attn.cute import flash_attn_func

        return flash_attn_func, ""
    except Exception as exc:  # not installed here, or its CuTe DSL failed to load
        return None, f"FA4 not available: {type(exc).__name__}: {str(exc).splitlines()[0]}"


def _ours(p: DecodeProblem, schedule: str, sets: list[tuple]) -> tuple[Any, list[tuple]]:
    """One of our schedules as (run, arg_sets): each input set's launches bound once."""
    launches = [(prepare_decode(p, *x, schedule=schedule),) for x in sets]
    return (lambda launch: launch.run()), launches


def _paths(p: DecodeProblem, sets: list[tuple], fa4: Any) -> dict:
    """{name: (fn, arg_sets)} of every contender on the rotated input sets."""
    import torch
    import torch.nn.functional as F

    def sdpa(q, k, v):
        tq, tk, tv = (torch_view(torch, x)[None] for x in (q, k, v))
        out = F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
        return cupy_view(torch, out[0])

    double = replace(p, splits=2 * p.splits)
    split_fn, split_sets = _ours(p, "split-kv", sets)

    def stream_only(launch):
        fn, grid, block, args, smem = launch.launches[0]
        fn(grid, block, args, shared_mem=smem)

    paths = {
        "split-kv": (split_fn, split_sets),
        "split-kv x2": _ours(double, "split-kv", sets),
        "stream only": (stream_only, split_sets),
        "one-pass": _ours(p, "one-pass", sets),
        "sdpa": (sdpa, sets),
    }
    if fa4 is not None:

        def fa4_fn(tq, tk, tv):
            out = fa4(tq, tk, tv, num_splits=0)
            return out[0] if isinstance(out, tuple) else out

        fa4_sets = [
            tuple(torch_view(torch, x).permute(1, 0, 2).contiguous()[None] for x in (q, k, v))
            for q, k, v in sets
        ]
        paths["fa4"] = (fa4_fn, fa4_sets)
    return paths


def _kernel_facts(launch: Any) -> list[dict]:
    """Registers, spilled bytes and resident blocks per SM (the driver's occupancy answer)
    of each kernel a prepared launch enqueues."""
    import cupy

    facts = []
    for fn, _grid, block, _args, smem in launch.launches:
        try:
            blocks = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                getattr(fn, "kernel", fn).ptr, block[0], smem
            )
        except Exception as exc:  # an older CuPy without the binding: say so in the JSON
            blocks = f"{type(exc).__name__}: {exc}"
        facts.append(
            {
                "threads": block[0],
                "registers": fn.num_regs,
                "local_bytes": fn.local_size_bytes,
                "dynamic_smem": smem,
                "blocks_per_sm": blocks,
            }
        )
    return facts


def _as_ours(name: str, out: Any, p: DecodeProblem) -> np.ndarray:
    """A contender's output as float64 (H_q, N_q, d_v)."""
    import torch

    if name == "fa4":  # (1, N_q, H_q, d_v)
        out = cupy_view(torch, out[0].permute(1, 0, 2).contiguous())
    return float64_values(out.get(), p.dtype).reshape(p.h_q, p.n_q, p.d_v)


def bench_case(h_q: int, h_kv: int, n_k: int, fa4: Any, copy_bw: float, l2: int, sms: int) -> dict:
    """Time every contender on one decode configuration; one JSON-ready row."""
    import cupy

    t_c = -(-n_k // BLOCK_K)
    splits = max(1, min(t_c, sms // h_kv))  # one block per SM
    p = DecodeProblem(1, n_k, D, D, h_q, h_kv, block_k=BLOCK_K, splits=splits, dtype=DTYPE)
    host = decode_inputs(DecodeProblem(1, n_k, D, D, h_q, h_kv, dtype="float64"), seed=n_k + h_q)
    base = [device_array(cupy.asarray(x.astype(np.float32)), DTYPE) for x in host]
    useful = decode_ledger(p, "one-pass").total_bytes
    copies = rotation_count(useful, l2)
    sets = [tuple(x.copy() for x in base) for _ in range(copies)]
    paths = _paths(p, sets, fa4)
    values = (float64_values(x.get(), DTYPE) for x in base)
    want = dense_decode(replace(p, dtype="float64"), *values)[2]
    errors, skipped = {}, {}
    for name, (fn, arg_sets) in list(paths.items()):
        if name == "stream only":  # no O of its own: the partials are split-kv's
            continue
        try:
            errors[name] = float(np.max(np.abs(_as_ours(name, fn(*arg_sets[0]), p) - want)))
        except Exception as exc:  # a peer that refuses this configuration is reported, not timed
            if name in OURS:
                raise
            skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            del paths[name]
    kernels = {n: _kernel_facts(paths[n][1][0][0]) for n in OURS}
    timings = time_interleaved(paths, warmup=3, repeats=21, l2_bytes=l2, preheat_s=0.2)
    rows = {}
    for name, t in timings.items():
        seconds = t.median_ms * 1e-3
        row = {
            "median_ms": t.median_ms,
            "min_ms": t.min_ms,
            "max_abs_err": errors.get(name),
            "bandwidth": useful / seconds,
            "copy_fraction": useful / seconds / copy_bw,
        }
        if name in OURS:
            schedule = "one-pass" if name == "one-pass" else "split-kv"
            q = replace(p, splits=2 * p.splits) if name == "split-kv x2" else p
            led = decode_ledger(q, schedule)
            row |= {
                "ledger_bytes": led.total_bytes,
                "blocks": led.blocks,
                "splits": q.splits_used,
                "kernels": kernels[name],
            }
        rows[name] = row
    return {
        "h_q": h_q,
        "h_kv": h_kv,
        "n_q": 1,
        "n_k": n_k,
        "d": D,
        "dtype": DTYPE,
        "block_k": BLOCK_K,
        "splits": splits,
        "splits_used": p.splits_used,
        "useful_bytes": useful,
        "rotated_copies": copies,
        "paths": rows,
        "skipped": skipped,
    }


def format_table(report: dict) -> str:
    names = [*OURS, "sdpa", "fa4"]
    head = f"{'H_q/H_kv':>9} {'N_k':>6} {'S':>4} " + " ".join(f"{n:>17}" for n in names)
    lines = [
        f"copy bandwidth {report['copy_bandwidth'] / 1e12:.2f} TB/s; "
        "each cell: median us (fraction of copy bandwidth)",
        head,
    ]
    for c in report["cases"]:
        cells = []
        for n in names:
            r = c["paths"].get(n)
            cells.append(
                f"{r['median_ms'] * 1e3:9.1f} ({r['copy_fraction']:4.0%})" if r else " " * 17
            )
        lines.append(
            f"{c['h_q']:>4}/{c['h_kv']:<4} {c['n_k']:>6} {c['splits_used']:>4} " + " ".join(cells)
        )
    return "\n".join(lines)


class DecodeBenchUnavailable(RuntimeError):
    """No usable CUDA device, or no PyTorch for the SDPA peer: the sentence says which."""


def measure(
    cases: tuple[tuple[int, int, int], ...] = CASES,
    *,
    progress: Callable[[int, int, str], None] | None = None,
    on_case: Callable[[dict], None] | None = None,
) -> dict:
    """The report of every (H_q, H_kv, N_k) case; progress(i, n, what) before each case and
    on_case(report so far) after it (the CLI rewrites its JSON there)."""
    st = status()
    if not st.usable:
        raise DecodeBenchUnavailable(st.reason)
    try:
        import torch
    except ImportError as exc:
        raise DecodeBenchUnavailable(
            "The decode benchmark times PyTorch's SDPA beside our kernels, but torch is not "
            "installed here: install it, or read the bundled measurement."
        ) from exc
    fa4, fa4_reason = _fa4()
    copy_bw = copy_bandwidth()
    report = {
        "device": st.to_dict(),
        "torch": torch.__version__,
        "fa4": "flash_attn.cute.flash_attn_func, num_splits=0" if fa4 else fa4_reason,
        "copy_bandwidth": copy_bw,
        "timing": "time_interleaved: 3 rounds, 21 runs, 0.2 s preheat, L2 flushed, median",
        "cases": [],
    }
    for i, (hq, hkv, n) in enumerate(cases):
        if progress is not None:
            progress(i, len(cases), f"H_q/H_kv = {hq}/{hkv}, N_k = {n}")
        report["cases"].append(bench_case(hq, hkv, n, fa4, copy_bw, st.l2_bytes, st.sm_count))
        if on_case is not None:
            on_case(report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write(report: dict) -> None:  # after each case: a cut run keeps its rows
        args.out.write_text(json.dumps(report, indent=1) + "\n")

    try:
        report = measure(on_case=write)
    except DecodeBenchUnavailable as exc:
        print(f"decode_bench: {exc}", file=sys.stderr)
        return 2
    print(format_table(report))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
