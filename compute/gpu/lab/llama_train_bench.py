"""Training tokens/s of a transformers Llama with SDPA and with this project's attention backend.

Run on the GPU machine (needs torch, CuPy and transformers) for issue 31's bar:

    python -m compute.gpu.lab.llama_train_bench [--json FILE] [--steps 5] [--rounds 3]
        [--profile STEPS] [--variants]

A 4-layer Llama (random init, hidden 2048, MLP 5632, vocabulary 32000, GQA 4:1) in bfloat16,
head size 128 and 64, batch 1 x sequence 4096, AdamW: one model with
attn_implementation="sdpa" (torch's default backend choice), a copy of its weights with
SDPA pinned to cuDNN ("sdpa_cudnn": transformers' SDPA attention inside
``sdpa_kernel(CUDNN_ATTENTION)``; if cuDNN refuses GQA's enable_gqa, K and V are repeated
first and the JSON says so) and a copy with the backend of
``compute.gpu.transformers_backend``. All see the same seeded token batches in the same
order; after two untimed steps each, `rounds` rounds alternate `steps` timed steps of each
(synchronised wall clock per block), in one process. Prints tokens/s per block and the
loss of every step (the curves must agree within bf16 noise); writes JSON.

The ceiling: a fourth model ("zero_attention", ``_register_zero``) has an attention of no
cost: its forward returns zeros of the output's shape (one fill) and its backward preallocated
zero gradients of Q's, K's and V's shapes and strides (no kernel), so everything else of
the step (projections, RoPE, MLP, loss, AdamW, and their host work) runs as in the others.
Its tokens/s over SDPA's are the most any attention could give this model: if that is
under 1.05x, the issue's bar cannot be met by the attention. Each model is timed two ways,
interleaved: "sync" reads each step's loss back before the next step starts (the earlier
rounds' loop: the host queues a step only after the GPU finished the last) and "async"
reads the block's losses after it (a training loop that logs every few steps: the host
runs ahead). Per step it records GPU-event time (CUDA events between the steps) beside the
block's wall-clock tokens/s.

``--profile STEPS`` then runs STEPS more steps of each model under torch.profiler
(``step_profile``: GPU time per kernel family, GPU idle time and the gaps before each
family's kernels, the attention's host time, and every GPU item of each attention call:
``step_profile.attention_ops``) and adds the summary and a table.
``--variants`` adds copies of our model that run the op's earlier choices (VARIANTS), so
one run measures what each change bought.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time
from pathlib import Path

from .torch_op_bench import import_for_gpu, write_json

SEQ = 4096
VOCAB = 32000


CUDNN = "sdpa_cudnn"
ZERO = "zero_attention"  # the ceiling: an attention that costs nothing (_register_zero)
MODES = ("sync", "async")  # the loss read back every step, or after the block
# Our backend with an earlier choice of the op put back while its model trains: the
# backward's GQA by the kernel's group loop always ("kernel_gqa"), and the spread GQA
# backward with K and V repeated in memory instead of broadcast by the tensor maps
# ("repeat_kv").
VARIANTS = ("fa_kernel_gqa", "fa_repeat_kv")


@contextlib.contextmanager
def _variant(name: str):
    """The op as variant `name` (VARIANTS) had it, for the duration; nothing otherwise."""
    from compute.gpu import torch_launch, torch_op

    if name not in VARIANTS:
        yield
        return
    spread, broadcast = torch_op._spread_group, torch_launch.heads_broadcast_ok
    if name == "fa_kernel_gqa":
        torch_op._spread_group = lambda *a: False
    else:
        torch_launch.heads_broadcast_ok = lambda: False
    saved = [(cache, dict(cache)) for cache in (torch_launch._BWD_PLANS, torch_op._CALLS)]
    for cache, _ in saved:  # the plans and per-signature calls were built for the default
        cache.clear()
    try:
        yield
    finally:
        torch_op._spread_group, torch_launch.heads_broadcast_ok = spread, broadcast
        for cache, entries in saved:
            cache.clear()
            cache.update(entries)


def _register_cudnn(torch, transformers) -> str | None:
    """Register CUDNN: transformers' SDPA attention with SDPA pinned to cuDNN; returns how
    GQA reaches it ("enable_gqa", or "repeat_kv" where cuDNN refuses enable_gqa), or None
    where cuDNN's attention does not run at all (then no cuDNN model is trained)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    q = torch.randn(1, 8, 256, 128, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16)
    F = torch.nn.functional
    try:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        form = "enable_gqa"
    except RuntimeError:
        form = "repeat_kv"
        try:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                F.scaled_dot_product_attention(q, q, q, is_causal=True)
        except RuntimeError:
            return None

    def attention(module, query, key, value, attention_mask, **kwargs):
        if form == "repeat_kv":
            group = query.shape[1] // key.shape[1]
            key, value = repeat_kv(key, group), repeat_kv(value, group)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    transformers.AttentionInterface.register(CUDNN, attention)
    AttentionMaskInterface.register(CUDNN, sdpa_mask)
    return form


def _register_zero(torch, transformers) -> None:
    """Register ZERO: an attention whose forward returns zeros shaped as transformers wants
    the output, (batch, N, heads, d), and whose backward returns zero tensors of Q's, K's and
    V's shapes and strides made once per signature (so the projections' and RoPE's backward
    get gradients laid out as a real attention's and run as they would); the mask builder
    is the fa_explorer backend's (no mask for causal: nothing built)."""
    from transformers.masking_utils import AttentionMaskInterface

    from compute.gpu.transformers_backend import build_mask

    zeros: dict[tuple, object] = {}

    def zero_like(t):
        key = (t.shape, t.stride(), t.dtype, t.device)
        z = zeros.get(key)
        if z is None:
            z = zeros[key] = torch.zeros_like(t)  # keeps a dense view's strides
        return z

    class Zero(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.grads = (zero_like(q), zero_like(k), zero_like(v))
            b, h, n, d = q.shape
            return q.new_zeros((b, n, h, d))

        @staticmethod
        def backward(ctx, _do):
            return ctx.grads

    def attention(module, query, key, value, attention_mask, **kwargs):
        return Zero.apply(query, key, value), None

    transformers.AttentionInterface.register(ZERO, attention)
    AttentionMaskInterface.register(ZERO, build_mask)


def _medians(per_mode: dict) -> dict:
    """{mode: {model: median of its samples}}."""
    return {mode: {k: statistics.median(v) for k, v in t.items()} for mode, t in per_mode.items()}


def _models(torch, transformers, head_dim: int, impls: tuple[str, ...]) -> dict:
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
        num_attention_heads=2048 // head_dim, num_key_value_heads=2048 // head_dim // 4,
        head_dim=head_dim, max_position_embeddings=SEQ,
    )  # fmt: skip
    torch.manual_seed(0)
    build = transformers.LlamaForCausalLM._from_config  # each model its own config
    models = {
        impl: build(copy.deepcopy(cfg), attn_implementation=impl).to(torch.bfloat16).cuda()
        for impl in ("sdpa", *impls)
    }
    for impl in impls:
        models[impl].load_state_dict(models["sdpa"].state_dict())
    return models


def _compare(
    torch, transformers, head_dim: int, steps: int, rounds: int, cudnn: bool,
    profile: int = 0, variants: bool = False,
) -> dict:  # fmt: skip
    from compute.gpu.transformers_backend import register

    impls = (CUDNN, register()) if cudnn else (register(),)
    if variants:
        impls += tuple(register(name) for name in VARIANTS)
    impls += (ZERO,)
    models = _models(torch, transformers, head_dim, impls)
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    gen = torch.Generator(device="cuda").manual_seed(1)
    data = [torch.randint(0, VOCAB, (1, SEQ), device="cuda", generator=gen) for _ in range(8)]
    losses = {mode: {name: [] for name in models} for mode in MODES}
    tokens_s = {mode: {name: [] for name in models} for mode in MODES}
    step_ms = {mode: {name: [] for name in models} for mode in MODES}

    def one_step(name: str, ids, sync: bool = True):
        model, opt = models[name], opts[name]
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach()) if sync else loss.detach()

    def train(name: str, n: int, first: int, mode: str = "sync") -> float:
        sync = mode == "sync"
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        with _variant(name):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            got = []
            for i in range(n):
                events[i].record()
                got.append(one_step(name, data[(first + i) % len(data)], sync))
            events[n].record()
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        losses[mode][name].extend(float(x) for x in got)
        step_ms[mode][name].extend(
            a.elapsed_time(b) for a, b in zip(events[:-1], events[1:], strict=True)
        )
        return wall

    for name in models:  # untimed: kernels compiled, plans built, allocator warm
        for mode in MODES:
            train(name, 2, 0, mode)
    for per_mode in (losses, step_ms):
        for per_name in per_mode.values():
            for got in per_name.values():
                got.clear()
    for r in range(rounds):
        for mode in MODES:
            for name in models:
                tokens_s[mode][name].append(steps * SEQ / train(name, steps, steps * r, mode))
    gaps = {  # the zero attention trains another model: no curve to compare
        mode: {
            name: max(abs(a - b) / abs(b) for a, b in zip(got, got_mode["sdpa"], strict=True))
            for name, got in got_mode.items()
            if name not in ("sdpa", ZERO)
        }
        for mode, got_mode in losses.items()
    }
    med = _medians(tokens_s)
    ours = next(k for k in models if k not in ("sdpa", CUDNN, ZERO, *VARIANTS))
    ratios = {
        mode: {
            f"{name}_over_{base}": m[name] / m[base]
            for name in (ours, ZERO)
            for base in ("sdpa", CUDNN)
            if base in m
        }
        for mode, m in med.items()
    }
    profiles = {}
    if profile:
        from .step_profile import profile_steps

        for name in models:
            with _variant(name):
                profiles[name] = profile_steps(
                    torch, lambda i, name=name: one_step(name, data[i % len(data)]), profile
                )
    return {
        "head_dim": head_dim,
        "profile": profiles,
        "tokens_per_s": tokens_s,
        "median_tokens_per_s": med,
        "median_ratios": ratios,
        "gpu_event_ms_per_step": step_ms,
        "median_gpu_event_ms_per_step": _medians(step_ms),
        "losses": losses,
        "largest_relative_loss_gap_vs_sdpa": gaps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=Path("llama_train_h200.json"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--head-dims", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--profile", type=int, default=0, metavar="STEPS")
    ap.add_argument("--variants", action="store_true")
    args = ap.parse_args(argv)
    mods = import_for_gpu("llama_train_bench", "torch", "transformers")
    if mods is None:
        return 2
    torch, transformers = mods
    form = _register_cudnn(torch, transformers)
    _register_zero(torch, transformers)
    rows = []
    for head_dim in args.head_dims:
        row = _compare(torch, transformers, head_dim, args.steps, args.rounds, form is not None,
                       args.profile, args.variants)  # fmt: skip
        rows.append(row)
        for mode in MODES:
            med, gpu = row["median_tokens_per_s"][mode], row["median_gpu_event_ms_per_step"][mode]
            gaps = row["largest_relative_loss_gap_vs_sdpa"][mode]
            print(
                f"d={head_dim} {mode}: " + ", ".join(
                    f"{k} {v:.0f} tok/s {gpu[k]:.2f} ms" for k, v in med.items())
                + "; " + ", ".join(f"{k} {v:.3f}" for k, v in row["median_ratios"][mode].items())
                + "; largest loss gap vs sdpa: " + ", ".join(f"{k} {v:.1e}" for k, v in gaps.items())
            )  # fmt: skip
        if row["profile"]:
            from .step_profile import table

            print(table(row["profile"]), flush=True)
        torch.cuda.empty_cache()
    record = {
        "what": "transformers Llama training tokens/s and GPU-event ms per step: sdpa (default "
        "backend), sdpa pinned to cuDNN, the fa_explorer backend and a zero-cost attention "
        "(the ceiling), each with the loss read back per step (sync) and per block (async) "
        "(compute/gpu/lab/llama_train_bench.py)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cudnn_gqa_form": form,
        "rows": rows,
    }
    write_json(args.json, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
