"""The spread GQA backward's group sum alone: per-query-head dK, dV summed into the pair.

Run on the GPU machine (needs torch):

    python -m compute.gpu.lab.group_sum_bench [--json FILE] [--reps 50] [--rounds 15]

The Llama bench's two layers (batch 1, N 4096, GQA 4:1; d 128 with 4 K/V heads, d 64 with
8), dK and dV with transformers' strides ((batch, kv heads, N, d) views of (batch, N, kv
heads, d) memory) as halves of one tensor (torch_op._grad_pair). The per-query-head
gradients in two layouts, each summed by one ``torch.sum`` over the group: "group_inner"
(round 40's: memory (2, batch, N, kv heads, group, d), each output row's `group` inputs
side by side) and "group_outer" (torch_op._group_outer: `group` slabs, each in the pair's
own layout). GPU-event ms per call (reps back-to-back calls, interleaved rounds, median),
the bytes moved (inputs read once, output written once) per second, host ms per call.
The two must agree within bfloat16 rounding before anything is timed. Prints; JSON.
"""

from __future__ import annotations

from .torch_op_bench import _interleaved, timing_args, timing_record, write_json

CASES = ((1, 4, 4, 4096, 128), (1, 8, 4, 4096, 64))  # batch, kv heads, group, N, d


def _paths(torch, case) -> tuple[dict, int]:
    from compute.gpu import torch_op

    b, hk, group, n, d = case
    k = torch.empty(b, n, hk, d, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    pair, _ = torch_op._grad_pair(torch, k, n)
    h = hk * group
    s_b = n * h * d
    inner = torch.empty_strided(
        (2, b, hk, group, n, d), (b * s_b, s_b, group * d, d, h * d, 1),
        dtype=torch.bfloat16, device="cuda",
    )  # fmt: skip
    outer = torch.empty_strided(*torch_op._group_outer(torch, k, group), dtype=torch.bfloat16,
                                device="cuda")  # fmt: skip
    g = torch.Generator(device="cuda").manual_seed(n + d)
    inner.copy_(torch.randn(inner.shape, device="cuda", generator=g))
    outer.copy_(inner)
    want = torch.sum(inner.double(), 3)
    paths = {
        "group_inner": lambda: torch.sum(inner, 3, out=pair),
        "group_outer": lambda: torch.sum(outer, 3, out=pair),
    }
    errs = {name: float((fn().double() - want).norm() / want.norm()) for name, fn in paths.items()}
    if not max(errs.values()) < 1e-2:
        raise SystemExit(f"a layout sums wrong (against float64: {errs})")
    return paths, (inner.numel() + pair.numel()) * 2


def _row(torch, case, reps: int, rounds: int) -> dict:
    """One case's timings, printed as a line."""
    paths, moved = _paths(torch, case)
    timed = _interleaved(torch, paths, reps, rounds)
    for p in timed.values():
        p["tb_per_s"] = moved / (p["gpu_ms_per_call"] * 1e-3) / 1e12
    cells = ", ".join(
        f"{k} {p['gpu_ms_per_call'] * 1e3:.1f} us ({p['tb_per_s']:.2f} TB/s) "
        f"[host {p['host_ms_per_call'] * 1e3:.1f} us]"
        for k, p in timed.items()
    )
    print(f"{case} {moved / 1e6:.1f} MB: {cells}", flush=True)
    b, hk, group, n, d = case
    return {"batch": b, "kv_heads": hk, "group": group, "n": n, "d": d, "bytes": moved,
            "paths": timed}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parsed = timing_args("group_sum_bench", __doc__, argv, "group_sum_h200.json", 50, 15)
    if parsed is None:
        return 2
    args, torch = parsed
    rows = [_row(torch, case, args.reps, args.rounds) for case in CASES]
    what = "group sum GPU-event ms per call, bf16 (compute/gpu/lab/group_sum_bench.py)"
    write_json(args.json, timing_record(what, torch, args, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
