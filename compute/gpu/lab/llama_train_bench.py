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
under 1.05x, the issue's bar cannot be met by the attention.

The best peer: where ``flash_attn.cute`` (FlashAttention-4, flash-attn-4's CuTe DSL kernels;
its sm90 path runs on the H200) imports, a fifth model ("fa4", ``_register_fa4``) runs its
attention through FA4's ``flash_attn_func`` (GQA by fewer K/V heads, no repeat), trained in
the same rounds. Before the models are built, FA4 runs once forward and backward on the
model's own shapes at each head size against SDPA ("probe" in the JSON); a head size where
it raises or disagrees trains no FA4 model. Its ratio to SDPA's default answers whether the
fastest attention there is reaches the bar. Each model is timed two ways,
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
# FlashAttention-4 (_register_fa4). Not "flash...": transformers takes names containing
# "flash" for its own FlashAttention integrations and checks for the flash_attn package.
FA4 = "fa4"
FA4_TOLERANCE = 5e-2  # relative error against SDPA in bf16 is ~5e-3; a wrong kernel's is ~1
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


def fa4_attention(flash_attn_func):
    """A transformers attention over FA4's `flash_attn_func`: transformers passes Q, K, V as
    (batch, heads, N, d); FA4 takes (batch, N, heads, d) contiguous (for Q and K usually
    no copy: their memory already is) and returns O in that layout, which transformers
    wants back. Causal, unpadded and dropout-free only: that is the bench's model."""

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        if attention_mask is not None or dropout:
            raise ValueError(f"{FA4}: causal attention without a mask or dropout only")
        q, k, v = (t.transpose(1, 2).contiguous() for t in (query, key, value))
        out, _lse = flash_attn_func(q, k, v, softmax_scale=scaling, causal=module.is_causal)
        return out, None

    return attention


def _rel_err(got, want) -> float:
    """||got - want|| / ||want|| in float32 (inf where got is not finite)."""
    got, want = got.detach().float(), want.detach().float()
    if not bool(got.isfinite().all()):
        return float("inf")
    return float((got - want).norm() / want.norm())


def _probe_fa4(torch, flash_attn_func, head_dim: int, seq: int, device: str) -> dict:
    """FA4 forward and backward once on the model's attention shapes (batch 1, `seq`, 2048 /
    head_dim heads, GQA 4:1, bf16, causal) against SDPA's: {"rel_err_vs_sdpa": {o, dq, dk,
    dv}} or {"skipped": why}. Also compiles FA4's kernels before the timed steps."""
    heads = 2048 // head_dim
    gen = torch.Generator(device=device).manual_seed(2)

    def rand(h):
        return torch.randn(1, seq, h, head_dim, device=device, dtype=torch.bfloat16,
                           generator=gen).requires_grad_()  # fmt: skip

    q, k, v = rand(heads), rand(heads // 4), rand(heads // 4)
    do = torch.randn(q.shape, device=device, dtype=torch.bfloat16, generator=gen)
    try:
        out, _lse = flash_attn_func(q, k, v, causal=True)
        got = (out, *torch.autograd.grad(out, (q, k, v), do))
    except Exception as exc:  # FA4's DSL raises its own types; any means no FA4 model here
        first = str(exc).splitlines()[:1]
        return {"skipped": ": ".join([type(exc).__name__, *first])}
    t = [x.transpose(1, 2) for x in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=True, enable_gqa=True)
    want = (ref, *torch.autograd.grad(ref, t, do.transpose(1, 2)))
    errs = {  # SDPA's are (batch, heads, N, d): back to FA4's layout
        name: _rel_err(g, w.transpose(1, 2))
        for name, g, w in zip(("o", "dq", "dk", "dv"), got, want, strict=True)
    }
    if not all(e <= FA4_TOLERANCE for e in errs.values()):
        return {"skipped": f"disagrees with SDPA (relative errors {errs})", "rel_err_vs_sdpa": errs}
    return {"rel_err_vs_sdpa": errs}


def _register_fa4(
    torch, transformers, head_dims: list[int], seq: int = SEQ, device: str = "cuda"
) -> dict:  # fmt: skip
    """Register FA4 (fa4_attention; the fa_explorer backend's mask builder: no mask for
    causal) where flash_attn.cute imports, and probe it at each head size (_probe_fa4).
    Returns {"version", "head_dims": {d: probe}} or {"skipped": why} (then not registered)."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as exc:  # ImportError, or the CuTe DSL failing to load its libraries
        return {"skipped": f"flash_attn.cute does not import ({type(exc).__name__}: {exc})"}
    from importlib.metadata import PackageNotFoundError, version

    from transformers.masking_utils import AttentionMaskInterface

    from compute.gpu.transformers_backend import build_mask

    try:
        got = version("flash-attn-4")
    except PackageNotFoundError:
        got = "unknown"
    transformers.AttentionInterface.register(FA4, fa4_attention(flash_attn_func))
    AttentionMaskInterface.register(FA4, build_mask)
    probes = {d: _probe_fa4(torch, flash_attn_func, d, seq, device) for d in head_dims}
    return {"version": got, "head_dims": probes}


def fa4_runs(fa4: dict, head_dim: int) -> bool:
    """Whether _register_fa4's record lets an FA4 model train at head_dim."""
    probe = fa4.get("head_dims", {}).get(head_dim)
    return probe is not None and "skipped" not in probe


def ratios(med: dict, names: tuple[str, ...], bases: tuple[str, ...]) -> dict:
    """{mode: {"<name>_over_<base>": tokens/s ratio}} of the medians `med` ({mode: {model:
    median}}), for each name and base that mode has."""
    return {
        mode: {
            f"{name}_over_{base}": m[name] / m[base]
            for name in names
            for base in bases
            if name in m and base in m
        }
        for mode, m in med.items()
    }


def loss_gaps(losses: dict, base: str = "sdpa") -> dict:
    """{mode: {model: largest |loss - base's| / |base's| over the steps}} for every model but
    the base and the zero attention (which trains another model: no curve to compare)."""
    return {
        mode: {
            name: max(abs(a - b) / abs(b) for a, b in zip(got, by_name[base], strict=True))
            for name, got in by_name.items()
            if name not in (base, ZERO)
        }
        for mode, by_name in losses.items()
    }


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
    profile: int = 0, variants: bool = False, fa4: bool = False,
) -> dict:  # fmt: skip
    from compute.gpu.transformers_backend import register

    ours = register()
    impls = (CUDNN, ours) if cudnn else (ours,)
    if variants:
        impls += tuple(register(name) for name in VARIANTS)
    impls += (FA4, ZERO) if fa4 else (ZERO,)
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
    med = _medians(tokens_s)
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
        "median_ratios": ratios(med, (ours, FA4, ZERO), ("sdpa", CUDNN)),
        "gpu_event_ms_per_step": step_ms,
        "median_gpu_event_ms_per_step": _medians(step_ms),
        "losses": losses,
        "largest_relative_loss_gap_vs_sdpa": loss_gaps(losses),
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
    fa4 = _register_fa4(torch, transformers, args.head_dims)
    print(f"{FA4}: {fa4}", flush=True)
    rows = []
    for head_dim in args.head_dims:
        row = _compare(torch, transformers, head_dim, args.steps, args.rounds, form is not None,
                       args.profile, args.variants, fa4_runs(fa4, head_dim))  # fmt: skip
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
        "backend), sdpa pinned to cuDNN, the fa_explorer backend, FlashAttention-4 (fa4, where "
        "it imports) and a zero-cost attention (the ceiling), each with the loss read back per step (sync) and per block (async) "
        "(compute/gpu/lab/llama_train_bench.py)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cudnn_gqa_form": form,
        "fa4": fa4,
        "rows": rows,
    }
    write_json(args.json, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
