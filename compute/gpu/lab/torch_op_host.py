"""Host time of the op's Python layers per eager call, the launches stubbed (runs on the CPU).

    python -m compute.gpu.lab.torch_op_host [--json FILE] [--reps 2000] [--rounds 7]

Needs torch only (a CPU build is enough). The eager autograd Function's fast path of
``torch_attention`` (the forward's cached launch, the backward's
``torch_backward.BackwardCall``, the Llama's spread GQA backward) runs on small bfloat16
CPU tensors, SDPA-shaped strided views, with the driver calls replaced by no-ops: the
forward plan's ``run``, the backward plan's ``run`` and the raw stream look-up. Beside it,
the floor: a bare ``autograd.Function`` with the same inputs and outputs whose forward and
backward only allocate them (the Python Function's own cost), and the parts alone. What it
does not see: the driver calls themselves and CUDA's allocator (torch_op_bench times those
on the GPU). Microseconds per call, median of `rounds` blocks of `reps` calls; JSON.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from .torch_op_bench import write_json

SHAPE = (1, 8, 2, 16, 64)  # batch, heads, kv heads, N, d: GQA 4:1 (few rows: CPU sums cheap)


class _Stub:
    """A plan whose run queues nothing (the forward's Launch and the backward's plan)."""

    needs_tickets = False

    def run(self, *_args) -> None:
        return None


def _setup(torch):
    """(q, k, v, dO) leaves and the op's caches filled with stub plans."""
    from compute.gpu import torch_launch, torch_op
    from compute.gpu.torch_backward import BackwardCall

    b, h, hk, n, d = SHAPE
    mem = [torch.randn(b, n, x, d, dtype=torch.bfloat16) for x in (h, hk, hk, h)]
    q, k, v, do = (t.transpose(1, 2) for t in mem)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    if not hasattr(torch._C, "_cuda_getCurrentRawStream"):
        torch._C._cuda_getCurrentRawStream = lambda _device: 0
    torch_launch.heads_broadcast_ok = lambda: True
    torch_launch.backward_plan = lambda *a, **kw: _Stub()
    torch_op._spread_group = lambda *a: True
    torch_launch.forward = lambda q, k, v, causal, scale, o, lse, **kw: (o, lse)
    with torch.no_grad():
        torch_op.torch_attention(q, k, v, is_causal=True, enable_gqa=True)
    (call,) = (c for c in torch_op._CALLS.values() if c.o_shape == tuple(q.shape))
    call.plan = _Stub()
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3])
    call.bwd[(do.stride(), False)] = BackwardCall.build(
        torch, q, k, v, o, lse, do, True, d**-0.5, False, None
    )
    return q, k, v, do, call, o, lse


def _bare(torch):
    """A Function with the op's inputs and outputs that only allocates them."""

    class Bare(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            o = torch.empty_like(q)
            lse = torch.empty(q.shape[:3])
            ctx.save_for_backward(q, k, v, o, lse)
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, _o, _lse = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    return Bare


def _paths(torch) -> dict:
    from compute.gpu import torch_op

    q, k, v, do, call, o, lse = _setup(torch)
    bare = _bare(torch)
    fast = next(iter(call.bwd.values()))

    def op():
        torch_op.torch_attention(q, k, v, is_causal=True, enable_gqa=True).backward(do)

    def floor():
        bare.apply(q, k, v).backward(do)

    qd, kd, vd = (t.detach() for t in (q, k, v))
    return {
        "op_fwd_bwd": op,
        "bare_function_fwd_bwd": floor,
        "op_forward_launch": lambda: torch_op._launch_forward(torch, qd, kd, vd, call),
        "op_backward_call_run": lambda: fast.run(torch, qd, kd, vd, o, lse, do),
    }


def _time(fn, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) * 1e6 / reps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=Path("torch_op_host_cpu.json"))
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    paths = _paths(torch)
    samples = {name: [] for name in paths}
    for fn in paths.values():
        _time(fn, 50)
    for _ in range(args.rounds):
        for name, fn in paths.items():
            samples[name].append(_time(fn, args.reps))
    us = {name: statistics.median(s) for name, s in samples.items()}
    for name, value in us.items():
        print(f"{name:24s} {value:7.1f} us per call")
    write_json(args.json, {
        "what": "host us per eager call of the op's Python layers, launches stubbed "
        "(compute/gpu/lab/torch_op_host.py)", "torch": torch.__version__, "shape": SHAPE,
        "reps": args.reps, "rounds": args.rounds, "us_per_call": us, "samples": samples,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
