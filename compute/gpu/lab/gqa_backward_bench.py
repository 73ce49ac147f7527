"""The op's backward alone, GQA's two ways, beside SDPA's: where the kernel's group loop loses.

Run on the GPU machine (needs torch and CuPy):

    python -m compute.gpu.lab.gqa_backward_bench [--json FILE] [--reps 10] [--rounds 10]

bfloat16, SDPA-shaped strided views ((batch, heads, N, d) of (batch, N, heads, d) memory),
GQA 4:1 (and one 1:1 row), causal unless the row says otherwise. Paths, each the backward
only (the forward run once beforehand): "sdpa" (``torch.autograd.grad`` through SDPA with
enable_gqa, torch's default backend choice), "kernel" (``torch_op._backward`` with the
kernel's own group loop: one CTA per K/V key block streaming the group's query heads),
"spread" (``torch_op._spread_backward``: one CTA per query head's key block, K and V
broadcast to q's heads by the tensor maps, dK and dV summed over the group afterwards), and "cupy_path" ("kernel" through ``flash_attention_backward`` on
CuPy aliases, the launch path before torch_launch's backward plans). GPU-event time per call
over `reps` back-to-back calls, interleaved rounds, median; host time per call beside it.
Every path's gradients are checked against SDPA's first. Prints a table; writes JSON.
"""

from __future__ import annotations

from .torch_op_bench import _interleaved, timing_args, timing_record, write_json

# (batch, heads, kv_heads, N, d, causal): the Llama bench's two layers first (batch 1, 4096).
CASES = (
    (1, 16, 4, 4096, 128, True),
    (1, 32, 8, 4096, 64, True),
    (2, 16, 4, 4096, 128, True),
    (4, 16, 4, 4096, 128, True),
    (4, 16, 4, 1024, 128, True),
    (16, 16, 4, 1024, 128, True),
    (2, 32, 8, 4096, 64, True),
    (1, 16, 4, 16384, 128, True),
    (1, 16, 4, 4096, 128, False),
    (1, 16, 16, 4096, 128, True),
)


def _paths(torch, case):
    from compute.gpu import torch_launch, torch_op

    b, h, hk, n, d, causal = case
    g = torch.Generator(device="cuda").manual_seed(b + h + hk + n + d)
    mem = [torch.randn(b, n, heads, d, device="cuda", generator=g).to(torch.bfloat16)
           for heads in (h, hk, hk, h)]  # fmt: skip
    q, k, v, do = (t.transpose(1, 2) for t in mem)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(
        *leaves, is_causal=causal, enable_gqa=hk != h
    )
    scale = d**-0.5
    o, lse = torch_op._forward(q, k, v, causal, scale, q)

    def ours(gqa):
        return lambda: torch_op._backward(q, k, v, o, lse, do, causal, scale, n, gqa=gqa)

    def cupy_path():
        plans = dict(torch_launch._BWD_PLANS)
        make = torch_launch._backward_plan
        torch_launch._BWD_PLANS.clear()
        torch_launch._backward_plan = lambda *a: None
        try:
            return torch_op._backward(q, k, v, o, lse, do, causal, scale, n, gqa="kernel")
        finally:
            torch_launch._backward_plan = make
            torch_launch._BWD_PLANS.clear()
            torch_launch._BWD_PLANS.update(plans)

    paths = {
        "sdpa": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
        "kernel": ours("kernel"),
        "cupy_path": cupy_path,
    }
    if hk != h:
        paths["spread"] = ours("spread")
    return paths


def _check(torch, paths) -> dict[str, float]:
    want = [t.double() for t in paths["sdpa"]()]
    errs = {}
    for name, fn in paths.items():
        got = fn()
        err = max(float((a.double() - w).norm() / w.norm()) for a, w in zip(got, want, strict=True))
        if not err < 2e-2:
            raise SystemExit(f"{name} differs from SDPA by {err:.2e}: no timing of a wrong path.")
        errs[name] = err
    return errs


def main(argv: list[str] | None = None) -> int:
    parsed = timing_args("gqa_backward_bench", __doc__, argv, "gqa_backward_h200.json", 10, 10)
    if parsed is None:
        return 2
    args, torch = parsed
    from compute.gpu.flash_launch import sm_count

    rows = []
    for case in CASES:
        paths = _paths(torch, case)
        errs = _check(torch, paths)
        timed = _interleaved(torch, paths, args.reps, args.rounds)
        for name, err in errs.items():
            timed[name]["rel_err_vs_sdpa"] = err
        b, h, hk, n, d, causal = case
        ctas = b * hk * -(-n // 128)
        rows.append({"batch": b, "heads": h, "kv_heads": hk, "n": n, "d": d, "causal": causal,
                     "kernel_ctas": ctas, "waves": ctas / sm_count(), "paths": timed})  # fmt: skip
        cells = ", ".join(
            f"{k} {p['gpu_ms_per_call']:.4f} [{p['host_ms_per_call']:.4f}]"
            for k, p in timed.items()
        )
        print(f"{case} waves {ctas / sm_count():.2f}: {cells}", flush=True)
        torch.cuda.empty_cache()
    what = "backward GPU-event ms per call, bf16 strided (compute/gpu/lab/gqa_backward_bench.py)"
    record = timing_record(what, torch, args, rows)
    write_json(args.json, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
