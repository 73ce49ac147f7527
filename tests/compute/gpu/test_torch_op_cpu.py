"""`compute.gpu.torch_attention`'s own logic on the CPU, with a float64 stand-in for the kernels.

The stand-ins have the kernels' contracts and assert them: the forward reads any tensor
flash_launch.readable takes (strided views, K/V heads dividing q's: GQA inside the kernel),
and so does the backward, which writes into readable gradient tensors it is given; the
causal mask bottom-right aligned, rows that see no key give zeros. So these tests check what
the op adds on top: SDPA's top-left causal mask with N_q != N_k, strided inputs, which
tensors are passed without a copy or repeat, the torch.library registration (opcheck, fake tensors) and
torch.compile(fullgraph=True) against eager. Results are compared with SDPA's math
backend in float64 on fresh seeded inputs. Needs torch (CPU build is enough).
"""

from __future__ import annotations

import copy
import gc
import subprocess
import sys
import weakref

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from compute.gpu import torch_launch, torch_op  # noqa: E402
from compute.gpu.torch_reference import attention_reference as _reference  # noqa: E402


def _kernel_forward(q, k, v, causal, scale, o, lse, band=None):
    from compute.gpu.flash_launch import readable

    for t in (q, k, v, o):
        assert readable(t.shape, t.stride(), t.data_ptr()), "a tensor the kernels cannot read"
    assert k.shape == v.shape and q.shape[1] % k.shape[1] == 0 and o.shape == q.shape
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32 and lse.is_contiguous()
    assert band is None or not causal
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    want_o, want_lse = _stand_in_forward(q, k, v, causal, scale, band)
    o.copy_(want_o)
    lse.copy_(want_lse)


def _stand_in_forward(q, k, v, causal, scale, band=None):
    """The kernels' masks: causal bottom-right, or the band (lo, hi): row r sees keys
    r + lo <= c <= r + hi."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    n_q, n_k = q.shape[2], k.shape[2]
    rows, cols = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
    if band is not None:
        s = s.masked_fill((cols < rows + band[0]) | (cols > rows + band[1]), float("-inf"))
    if causal:
        s = s.masked_fill(cols > rows + n_k - n_q, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return (p @ v.double()).to(q.dtype), lse.float()


def _kernel_backward(q, k, v, o, do, lse, causal, scale, out, deterministic=False, band=None):
    """FlashAttention's backward from the saved LSE (no autograd: the op's backward runs
    below the autograd dispatch), GQA's dK, dV summed over the group, written into out;
    `band` (lo, hi) as the forward's (causal then False)."""
    assert band is None or not causal
    _assert_contract(q, k, v, o, do, *out)
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert out[0].shape == q.shape and out[1].shape == out[2].shape == k.shape
    b, hk, n_k, d = k.shape
    group = q.shape[1] // hk
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    q, k, v, o, do = (t.double() for t in (q, k, v, o, do))
    s = (q @ k.transpose(-1, -2)) * scale
    n_q, n_k = q.shape[2], k.shape[2]
    rows, cols = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
    if causal:
        s = s.masked_fill(cols > rows + n_k - n_q, float("-inf"))
    if band is not None:
        s = s.masked_fill((cols < rows + band[0]) | (cols > rows + band[1]), float("-inf"))
    p = torch.exp(s - lse.double()[..., None]).nan_to_num(0.0)
    ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
    dq, dk, dv = ds @ k * scale, ds.transpose(-1, -2) @ q * scale, p.transpose(-1, -2) @ do
    dk, dv = (g.view(b, hk, group, n_k, d).sum(2) for g in (dk, dv))
    for dst, g in zip(out, (dq, dk, dv), strict=True):
        dst.copy_(g)
    return out


def _assert_contract(*ts):
    from compute.gpu.flash_launch import readable

    q = ts[0]
    for i, t in enumerate(ts):
        strides = t.stride()
        if i in (1, 2) and strides[1] == 0:  # K, V heads broadcast (torch_launch._kv_readable)
            strides = (strides[0], 8, *strides[2:])
        assert readable(t.shape, strides, t.data_ptr()), "a tensor the kernels cannot address"
        assert t.shape[0] == q.shape[0] and q.shape[1] % t.shape[1] == 0
        assert t.shape[3] == q.shape[3]


@pytest.fixture
def stand_in(monkeypatch):
    """The kernels replaced by the float64 stand-in; records what each launch was given."""
    seen = []

    def fwd(*args, **kw):
        seen.append(("forward", (*args, kw["band"]) if "band" in kw else args))  # band last
        return _kernel_forward(*args, **kw)

    def bwd(*args, **kw):
        seen.append(("backward", (*args, *kw["out"])))
        return _kernel_backward(*args, **kw)

    monkeypatch.setattr(torch_launch, "forward", fwd)
    monkeypatch.setattr(torch_launch, "backward", bwd)
    return seen


def _inputs(b, h, hk, n_q, n_k, d, seed, layout="bhnd"):
    """Seeded float32 q, k, v and dO; layout 'bnhd' gives SDPA-shaped views of
    (batch, N, heads, d) memory, as transformer code passes them."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(b, n_q, h, d), (b, n_k, hk, d), (b, n_k, hk, d), (b, n_q, h, d)]
    ts = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    ts = [t.transpose(1, 2) for t in ts]
    return ts if layout == "bnhd" else [t.contiguous() for t in ts]


def _run(q, k, v, do, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = torch_op.torch_attention(*leaves, **kw)
    out.backward(do)
    return [out.detach(), *(t.grad for t in leaves)]


def _rel(got, want):
    return float((got - want).norm() / want.norm().clamp_min(1e-300))


# The stand-in computes in float64 and returns q's dtype: run these in float64 so the only
# error left is the op's logic. (The public function refuses float64; call the inner path.)
@pytest.fixture
def float64_ok(monkeypatch):
    real = torch_op._check

    def check(torch_, q, k, v, *rest):
        real(torch_, q.half(), k.half(), v.half(), *rest)

    monkeypatch.setattr(torch_op, "_check", check)


CASES = [
    # (heads, kv heads, N_q, N_k, causal, align)
    (4, 4, 77, 77, False, "top-left"),
    (4, 4, 77, 77, True, "top-left"),
    (8, 2, 50, 90, False, "top-left"),
    (8, 1, 64, 64, True, "top-left"),
    (8, 8, 33, 100, True, "top-left"),
    (8, 2, 33, 100, True, "top-left"),
    (8, 2, 100, 33, True, "bottom-right"),
    (8, 2, 100, 33, True, "top-left"),  # two launches: 33 causal rows, then full rows
    (4, 4, 77, 76, True, "top-left"),
    (8, 8, 33, 100, True, "bottom-right"),
    (8, 1, 40, 70, False, "bottom-right"),
]


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize(("h", "hk", "n_q", "n_k", "causal", "align"), CASES)
def test_matches_float64_sdpa_semantics(
    stand_in, float64_ok, layout, h, hk, n_q, n_k, causal, align
):
    q, k, v, do = _inputs(2, h, hk, n_q, n_k, 64, seed=h * n_q + n_k, layout=layout)
    kw = dict(is_causal=causal, enable_gqa=hk != h, causal_align=align)
    got = _run(q, k, v, do, **kw)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    want = _reference(*leaves, causal, 64**-0.5, align)
    want.backward(do)
    if align == "top-left" and hk == h:  # SDPA itself, where it takes the case
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert _rel(want.detach(), sdpa) < 1e-12
    wants = [want.detach(), *(t.grad for t in leaves)]
    for name, g, w in zip("O dQ dK dV".split(), got, wants, strict=True):
        assert g.shape == w.shape, name
        tol = 1e-12 if name == "O" else 1e-6  # the backward reads the float32 LSE
        assert _rel(g, w) < tol, f"{name}: {_rel(g, w):.2e}"
    assert got[0].stride() == torch.empty_like(q).stride()  # O keeps q's (dense) strides
    assert torch.equal(torch_op.torch_attention(q, k, v, **kw), got[0])  # no-grad path


def test_no_copies_where_the_kernels_read_the_tensors(stand_in, float64_ok):
    """Forward and backward get q, k and v themselves: contiguous, GQA (K/V heads as they
    are, with the causal mask or without) and SDPA-shaped strided views alike; the backward
    also O as the forward wrote it and the upstream gradient as given, and writes dQ, dK, dV
    into tensors of q's and k's strides."""
    for seed, layout, causal in ((3, "bhnd", False), (4, "bnhd", True), (5, "bnhd", False)):
        stand_in.clear()
        q, k, v, do = _inputs(1, 8, 2, 40, 40, 64, seed=seed, layout=layout)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = torch_op.torch_attention(*leaves, is_causal=causal, enable_gqa=True)
        assert out.stride() == leaves[0].stride()
        if layout == "bnhd":
            assert out.transpose(1, 2).is_contiguous()
        grads = torch.autograd.grad(out, leaves, do)
        (kind_f, (fq, fk, fv, *_)), (kind_b, (bq, bk, bv, bo, bdo, _, *rest)) = stand_in
        assert (kind_f, kind_b) == ("forward", "backward")
        ptrs = [t.data_ptr() for t in leaves]
        assert [t.data_ptr() for t in (fq, fk, fv)] == ptrs
        assert [t.data_ptr() for t in (bq, bk, bv)] == ptrs  # no copy, no repeat of K, V
        assert bk.shape[1] == 2 and bo.data_ptr() == out.data_ptr()
        assert bdo.data_ptr() == do.data_ptr()  # the upstream gradient is not copied
        dq, dk, dv = rest[-3:]
        assert [t.data_ptr() for t in grads] == [t.data_ptr() for t in (dq, dk, dv)]
        assert [g.stride() for g in grads] == [t.stride() for t in leaves]


def test_top_left_with_fewer_queries_writes_into_zero_padded_gradients(stand_in, float64_ok):
    """Top-left causal with N_q < N_k: the kernel sees the first N_q keys (views of K, V)
    and writes dK, dV into the first N_q rows of the n_k-row gradients, whose other rows are
    zero (no pad, no copy)."""
    q, k, v, do = _inputs(1, 4, 4, 30, 70, 64, seed=6, layout="bnhd")
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = torch_op.torch_attention(*leaves, is_causal=True)
    grads = torch.autograd.grad(out, leaves, do)
    (_, args), *_ = [e for e in stand_in if e[0] == "backward"]
    bk, dk = args[1], args[-2]
    assert bk.shape[2] == 30 and bk.data_ptr() == leaves[1].data_ptr()
    assert dk.shape[2] == 30 and dk.data_ptr() == grads[1].data_ptr()
    assert grads[1].shape == k.shape and grads[2].shape == v.shape
    assert bool((grads[1][:, :, 30:] == 0).all()) and bool((grads[2][:, :, 30:] == 0).all())
    refs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    want = _reference(*refs, True, 64**-0.5, "top-left")
    wants = torch.autograd.grad(want, refs, do)
    for name, g, w in zip(("dQ", "dK", "dV"), grads, wants, strict=True):
        assert _rel(g, w) < 1e-6, name


def test_refusals_are_one_sentence():
    q = torch.randn(1, 4, 64, 64, dtype=torch.float16)
    k = torch.randn(1, 2, 32, 64, dtype=torch.float16)
    attn = torch_op.torch_attention
    with pytest.raises(ValueError, match="^q has 4 heads and k, v 2: pass enable_gqa=True"):
        attn(q, k, k)
    with pytest.raises(ValueError, match="^causal_align must be one of"):
        attn(q, q, q, is_causal=True, causal_align="centre")
    with pytest.raises(ValueError, match="^head dim d must be one of"):
        attn(q[..., :32], q[..., :32], q[..., :32])
    with pytest.raises(TypeError, match="float16 or all bfloat16"):
        attn(q.float(), q.float(), q.float())
    with pytest.raises(ValueError, match="^shapes do not agree"):
        attn(q, q, k, enable_gqa=True)
    with pytest.raises(ValueError, match="CUDA tensors"):
        attn(q, q, q)  # the launcher's own check, first thing it does


def test_library_op_passes_opcheck(stand_in, float64_ok):
    torch_op.register_ops()
    op = torch.ops.fa_explorer.attention_forward
    for n_q, n_k in ((40, 56), (56, 40)):
        q, k, v, do = _inputs(1, 4, 2, n_q, n_k, 64, seed=9)
        leaves = (q.requires_grad_(), k.requires_grad_(), v.requires_grad_())
        for causal, align in ((False, "top-left"), (True, "top-left"), (True, "bottom-right")):
            torch.library.opcheck(op, (*leaves, causal, 0.125, align, causal))


def test_compile_fullgraph_matches_eager(stand_in, float64_ok):
    """A small attention block compiled with fullgraph=True: same output and gradients."""
    q, k, v, do = _inputs(2, 8, 2, 48, 48, 64, seed=11, layout="bnhd")

    def block(q, k, v):
        o = torch_op.torch_attention(q * 1.5, k, v, is_causal=True, enable_gqa=True)
        return o.transpose(1, 2).sin()

    eager = _run_fn(block, q, k, v, do)
    compiled = _run_fn(torch.compile(block, fullgraph=True, backend="aot_eager"), q, k, v, do)
    for e, c in zip(eager, compiled, strict=True):
        assert _rel(c, e) < 1e-12


def _run_fn(fn, q, k, v, do):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(do.transpose(1, 2))
    return [out.detach(), *(t.grad for t in leaves)]


def test_compile_first_registers_the_ops():
    """torch.compile(fullgraph=True) before any eager call: the registration runs at trace
    time (fake tensors, so no kernel is needed)."""
    code = (
        "import torch\n"
        "from compute.gpu import torch_launch, torch_op\n"
        "torch_launch.forward = lambda q, k, v, c, s, o, lse: (o.copy_(q * 2), lse.zero_())\n"
        "f = torch.compile(lambda q: torch_op.torch_attention(q, q, q, is_causal=True),"
        " fullgraph=True, backend='aot_eager')\n"
        "q = torch.ones(1, 2, 64, 64, dtype=torch.float16)\n"
        "print(torch_op._OPS_READY, bool((f(q) == 2).all()), torch_op._OPS_READY)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "False True True"


def test_transformers_llama_with_the_backend_matches_sdpa(stand_in, float64_ok):
    """A 2-layer Llama with GQA (4 query heads, 2 K/V heads) through the registered backend:
    the loss and every parameter's gradient equal those with attn_implementation='sdpa'."""
    transformers = pytest.importorskip("transformers")
    from compute.gpu.transformers_backend import register

    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    build = transformers.LlamaForCausalLM._from_config  # each model its own config (it sets it)
    ref = build(copy.deepcopy(cfg), attn_implementation="sdpa").double()
    ours = build(copy.deepcopy(cfg), attn_implementation=register()).double()
    ours.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))
    losses = []
    for model in (ref, ours):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(loss.detach())
    assert [kind for kind, _ in stand_in] == ["forward"] * 2 + ["backward"] * 2  # ours ran
    assert abs(float(losses[0] - losses[1])) < 1e-9 * float(losses[0])
    for (name, p), q in zip(ref.named_parameters(), ours.parameters(), strict=True):
        assert _rel(q.grad, p.grad) < 1e-6, name
    padded = torch.ones_like(ids)
    padded[0, :5] = 0
    with pytest.raises(ValueError, match="^the fa_explorer attention takes no explicit mask"):
        ours(input_ids=ids, attention_mask=padded)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_cupy_alias_describes_the_tensor_memory(dtype):
    """The backward's CuPy alias of a tensor: its address, shape, strides in bytes, bf16 as
    uint16 bits, and the memory extent the strides reach (CuPy needs no GPU to build it; the
    address is made up, nothing reads it here)."""
    cupy = pytest.importorskip("cupy")
    from types import SimpleNamespace

    t = torch.zeros(2, 5, 4, 64, dtype=getattr(torch, dtype)).transpose(1, 2)[:, :3]

    class Fake(SimpleNamespace):  # a tensor's attributes, weak-referenceable
        pass

    fake = Fake(
        dtype=t.dtype, shape=t.shape, stride=t.stride, element_size=t.element_size,
        numel=t.numel, data_ptr=lambda: 1 << 20, device=SimpleNamespace(index=0),
    )  # fmt: skip
    a = torch_launch.cupy_alias(torch, fake)
    alive = weakref.ref(fake)
    del fake
    size = t.element_size()
    assert a.shape == tuple(t.shape) and a.data.ptr == 1 << 20
    assert a.dtype == (cupy.uint16 if dtype == "bfloat16" else getattr(cupy, dtype))
    assert a.strides == tuple(s * size for s in t.stride())
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    assert a.data.mem.size == (last + 1) * size
    assert alive() is not None  # the alias holds the tensor
    del a
    gc.collect()
    assert alive() is None


def test_torch_export_records_the_library_op(stand_in, float64_ok):
    """torch.export of a module calling the op: one fa_explorer node, and the exported
    program computes what eager mode does."""

    class Block(torch.nn.Module):
        def forward(self, q, k, v):
            return torch_op.torch_attention(q, k, v, is_causal=True, enable_gqa=True)

    q, k, v, _ = _inputs(1, 4, 2, 48, 48, 64, seed=12)
    program = torch.export.export(Block(), (q, k, v))
    ops = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert torch.ops.fa_explorer.attention_forward.default in ops
    assert torch.equal(program.module()(q, k, v), Block()(q, k, v))


def test_a_cached_signature_still_checks_the_address(stand_in, float64_ok):
    """The second call of a signature skips the checks but not the base address: a view of
    the same shape and strides starting 8 bytes off 16 is copied before the kernel sees it
    (the stand-in asserts it gets only readable tensors), and the result stays right."""
    n = 1 * 4 * 40 * 64
    g = torch.Generator().manual_seed(13)
    store = torch.randn(3, n + 2, generator=g, dtype=torch.float64)  # rows 16-byte aligned
    aligned = [store[i, :n].view(1, 4, 40, 64) for i in range(3)]
    shifted = [store[i, 1 : n + 1].view(1, 4, 40, 64) for i in range(3)]
    assert all(t.data_ptr() % 16 == 0 for t in aligned)
    assert shifted[0].stride() == aligned[0].stride() and shifted[0].data_ptr() % 16 == 8
    with torch.no_grad():
        for q, k, v in (aligned, shifted):
            got = torch_op.torch_attention(q, k, v, is_causal=True)
            want = _reference(q, k, v, True, 64**-0.5, "top-left")
            assert _rel(got, want) < 1e-12
    fed = [args[0] for kind, args in stand_in if kind == "forward"]
    assert fed[0].data_ptr() == aligned[0].data_ptr()  # read in place
    assert fed[1].data_ptr() % 16 == 0  # a copy


def test_deterministic_reaches_the_backward(stand_in, float64_ok, monkeypatch):
    """deterministic= goes to torch_launch.backward (flash_attention_backward's mode), eager
    and through the library op that torch.compile traces."""
    seen = []
    stand_in_backward = torch_launch.backward

    def backward(*args, **kw):
        seen.append(kw["deterministic"])
        return stand_in_backward(*args, **kw)

    monkeypatch.setattr(torch_launch, "backward", backward)
    q, k, v, do = _inputs(1, 4, 2, 40, 40, 64, seed=14)
    for det in (False, True):
        _run(q, k, v, do, is_causal=True, enable_gqa=True, deterministic=det)

    def block(q, k, v):
        return torch_op.torch_attention(q, k, v, is_causal=True, enable_gqa=True,
                                        deterministic=True)  # fmt: skip

    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    compiled(*leaves).backward(do)
    assert seen == [False, True, True]


WINDOWS = [
    # (heads, kv heads, N_q, N_k, is_causal, window, align)
    (4, 4, 77, 77, False, (8, 8), "top-left"),
    (8, 2, 50, 90, True, (10, -1), "bottom-right"),  # causal: right = 0
    (8, 2, 90, 50, False, (-1, 5), "top-left"),  # no left bound; leading rows see keys
    (4, 1, 64, 64, False, (0, 0), "bottom-right"),  # the diagonal alone
    (4, 4, 70, 40, False, (3, 2), "bottom-right"),  # rows past the keys' band see none
    (4, 4, 40, 70, False, (-1, 0), "top-left"),  # plain causal, spelt as a window
]


@pytest.mark.parametrize(("h", "hk", "n_q", "n_k", "causal", "window", "align"), WINDOWS)
def test_windows_match_the_explorer_mask(stand_in, float64_ok, h, hk, n_q, n_k, causal, window,
                                         align):  # fmt: skip
    """window=(left, right) means what compute/mask.py's Mask means, on both alignments,
    with is_causal setting right = 0; the kernels get a band (or plain causal) and the
    tensors in place."""
    q, k, v, _ = _inputs(2, h, hk, n_q, n_k, 64, seed=n_q * 7 + n_k, layout="bnhd")
    kw = dict(is_causal=causal, enable_gqa=hk != h, causal_align=align, window=window)
    with torch.no_grad():
        got = torch_op.torch_attention(q, k, v, **kw)
        again = torch_op.torch_attention(q, k, v, **kw)  # the cached signature's path
    want = _reference(q, k, v, causal, 64**-0.5, align, window)
    assert _rel(got, want) < 1e-12 and torch.equal(got, again)
    (_, args), *_ = stand_in
    assert args[0].data_ptr() == q.data_ptr() and args[1].data_ptr() == k.data_ptr()


def test_window_refusals_are_one_sentence(stand_in, float64_ok, monkeypatch):
    monkeypatch.setattr(torch_launch, "backward_takes_band", lambda: False)  # (as on main)
    q, k, v, _ = _inputs(1, 4, 4, 40, 40, 64, seed=15)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    with pytest.raises(ValueError, match="^window= runs in the forward only"):
        torch_op.torch_attention(*leaves, window=(8, 0))
    with pytest.raises(ValueError, match="^window must be a pair"):
        torch_op.torch_attention(q, k, v, window=8)
    with pytest.raises(ValueError, match="^The window's left size must be a whole number"):
        torch_op.torch_attention(q, k, v, window=(-2, 0))
    out = torch_op.torch_attention(*leaves, window=(-1, 0))  # plain causal: differentiable
    out.sum().backward()
    assert leaves[0].grad is not None


def test_compile_fullgraph_with_a_window_matches_eager(stand_in, float64_ok):
    """A gradient-free block with a sliding window compiled with fullgraph=True: the window
    check traces and the library op gets the band eager gives the kernels."""
    q, k, v, _ = _inputs(2, 8, 2, 48, 48, 64, seed=12, layout="bnhd")

    def block(q, k, v):
        o = torch_op.torch_attention(q * 1.5, k, v, is_causal=True, enable_gqa=True, window=(7, 0))
        return o.transpose(1, 2).sin()

    with torch.no_grad():
        eager = block(q, k, v)
        compiled = torch.compile(block, fullgraph=True, backend="aot_eager")(q, k, v)
    want = _reference(q * 1.5, k, v, True, 64**-0.5, "top-left", (7, 0)).transpose(1, 2).sin()
    assert _rel(eager, want) < 1e-12 and _rel(compiled, eager) < 1e-12
    bands = [args[7] if len(args) > 7 else None for kind, args in stand_in]
    assert [kind for kind, _ in stand_in] == ["forward"] * 2
    assert bands == [(-7, 0)] * 2  # eager's and the compiled op's: top-left, 7 keys back


@pytest.mark.parametrize("broadcast", [True, False])
def test_gqa_spread_backward_folds_heads_and_sums(stand_in, float64_ok, monkeypatch, broadcast):
    """Causal GQA where the kernel's group loop would leave the GPU unbalanced
    (torch_op._spread_group): each batch's backward sees the K/V heads as a batch of group
    query heads (views of q, dO, dQ), K and V broadcast over them (head stride 0, nothing
    repeated) or, where the driver refuses such maps, repeated; the per-head gradients are
    summed into dK, dV of k's strides, views of one allocation."""
    monkeypatch.setattr(torch_op, "_spread_group", lambda q, k, causal: True)
    monkeypatch.setattr(torch_launch, "heads_broadcast_ok", lambda: broadcast)
    q, k, v, do = _inputs(2, 8, 2, 40, 40, 64, seed=13, layout="bnhd")
    got = _run(q, k, v, do, is_causal=True, enable_gqa=True)
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    want_o = _reference(*ref, True, 64**-0.5, "top-left")
    want = [want_o.detach(), *torch.autograd.grad(want_o, ref, do)]
    for name, a, w in zip("O dQ dK dV".split(), got, want, strict=True):
        assert _rel(a, w) < (1e-12 if name == "O" else 1e-6), name  # the float32 LSE
    assert [g.stride() for g in got[1:]] == [t.stride() for t in (q, k, v)]
    assert got[2].untyped_storage().data_ptr() == got[3].untyped_storage().data_ptr()
    calls = [args for kind, args in stand_in if kind == "backward"]
    assert len(calls) == 2  # one per batch
    for i, (bq, bk, bv, *_rest) in enumerate(calls):
        assert bq.shape == bk.shape == bv.shape == (2, 4, 40, 64)  # (kv heads, group, N, d)
        # views of this batch's q (the caller's layout, head dimension split), no copies
        assert bq.stride() == (4 * q.stride(1), q.stride(1), q.stride(2), 1)
        if broadcast:
            assert bk.stride() == bv.stride() == (k.stride(1), 0, k.stride(2), 1)
        assert torch.equal(bk[1, 0], k[i, 1]) and torch.equal(bk[1, 3], k[i, 1])  # h // group


def test_spread_is_chosen_by_the_kernel_grid_only_where_causal_gqa():
    from compute.gpu.torch_op import _spread_group

    q = torch.empty(1, 16, 64, 64)
    k = torch.empty(1, 4, 64, 64)
    assert not _spread_group(q, k, True)  # CPU tensors: the kernel path (the stand-in's)
    assert not _spread_group(q, q, True)


def _mistral(register_name, sliding_window):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MistralConfig(
        vocab_size=64, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=sliding_window,
        max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    build = transformers.MistralForCausalLM._from_config
    ref = build(copy.deepcopy(cfg), attn_implementation="sdpa").double()
    ours = build(copy.deepcopy(cfg), attn_implementation=register_name).double()
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def test_transformers_mistral_sliding_window_forward_matches_sdpa(
    stand_in, float64_ok, monkeypatch
):
    """A Mistral with sliding_window = 8 over 40 tokens through the backend: no explicit mask
    is built, the op gets the window (7, 0) bottom-right from the sliding_window keyword, the
    logits equal SDPA's (which gets transformers' explicit sliding mask), and training with
    the window is refused in one sentence; with padding the mask is SDPA's and refused."""
    pytest.importorskip("transformers")  # the backend imports it
    from compute.gpu.transformers_backend import register

    monkeypatch.setattr(torch_launch, "backward_takes_band", lambda: False)  # the refusal
    ref, ours = _mistral(register(), 8)
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(input_ids=ids).logits
        got = ours(input_ids=ids).logits
        _, no_window = _mistral(register(), None)
        other = no_window(input_ids=ids).logits
    assert _rel(got, want) < 1e-9
    assert [args[7] for _, args in stand_in[:2]] == [(-7, 0)] * 2  # bottom-right, N_q = N_k
    assert _rel(other, want) > 1e-3  # the window changes the answer: it was applied
    with pytest.raises(ValueError, match="^window= runs in the forward only"):
        ours(input_ids=ids, labels=ids)
    padded = torch.ones_like(ids)
    padded[0, :5] = 0
    with torch.no_grad(), pytest.raises(ValueError, match="^the fa_explorer attention takes no"):
        ours(input_ids=ids, attention_mask=padded)


def test_transformers_window_wider_than_the_keys_is_plain_causal(stand_in, float64_ok):
    """sliding_window >= N_k hides nothing: the op runs plain causal (no band), and the model
    trains through it (the backward needs no window)."""
    pytest.importorskip("transformers")  # the backend imports it
    from compute.gpu.transformers_backend import register

    _train_both_alike(*_mistral(register(), 64), seed=3)
    forwards = [args for kind, args in stand_in if kind == "forward"]
    assert len(forwards) == 2 and all(len(args) == 7 for args in forwards)  # no band


def test_build_mask_skips_only_what_the_kernels_apply():
    """The mask builder returns None for plain causal and sliding-window causal masks with no
    padding and the keys ending at the last query; a chunked mask, padding, or keys that do
    not end there get SDPA's explicit mask."""
    pytest.importorskip("transformers")
    from transformers import masking_utils as mu

    from compute.gpu.transformers_backend import build_mask

    kw = dict(batch_size=2, q_length=16, kv_length=16, q_offset=0, kv_offset=0)
    sliding = mu.sliding_window_causal_mask_function(4)
    assert build_mask(**kw, mask_function=mu.causal_mask_function) is None
    assert build_mask(**kw, mask_function=sliding, local_size=4) is None
    decode = dict(kw, q_length=1, q_offset=15)
    assert build_mask(**decode, mask_function=sliding, local_size=4) is None
    chunked = mu.chunked_causal_mask_function(4, torch.zeros(2, dtype=torch.long))
    assert build_mask(**kw, mask_function=chunked, local_size=4) is not None
    padding = torch.ones(2, 16, dtype=torch.bool)
    assert build_mask(**kw, mask_function=sliding, attention_mask=padding) is None
    padding[1, 0] = False
    assert build_mask(**kw, mask_function=sliding, attention_mask=padding) is not None
    assert build_mask(**dict(kw, kv_length=20), mask_function=sliding) is not None
    no_skip = build_mask(**kw, mask_function=sliding, allow_is_causal_skip=False)
    assert no_skip is not None


@pytest.mark.parametrize(("h", "hk", "n_q", "n_k", "causal", "window", "align"), WINDOWS)
def test_window_gradients_where_the_backward_takes_a_band(
    stand_in, float64_ok, monkeypatch, h, hk, n_q, n_k, causal, window, align
):
    """With a backward that takes a band (torch_launch.backward_takes_band), windows train:
    eager and compiled (fullgraph, the library ops) gradients equal float64's under the
    explorer's Mask, and the backward gets the forward's band."""
    monkeypatch.setattr(torch_launch, "backward_takes_band", lambda: True)
    q, k, v, do = _inputs(2, h, hk, n_q, n_k, 64, seed=n_q * 3 + n_k, layout="bnhd")
    kw = dict(is_causal=causal, enable_gqa=hk != h, causal_align=align, window=window)
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    want_o = _reference(*ref, causal, 64**-0.5, align, window)
    wants = [want_o.detach(), *torch.autograd.grad(want_o, ref, do)]

    bands, stand_in_backward = [], torch_launch.backward

    def backward(*args, **kw):
        bands.append(kw.get("band"))
        return stand_in_backward(*args, **kw)

    monkeypatch.setattr(torch_launch, "backward", backward)

    def block(q, k, v):
        return torch_op.torch_attention(q, k, v, **kw)

    for fn in (block, torch.compile(block, fullgraph=True, backend="aot_eager")):
        bands.clear()
        got = _run_fn(lambda q, k, v, fn=fn: fn(q, k, v).transpose(1, 2), q, k, v, do)
        for name, a, w in zip("O dQ dK dV".split(), got, wants, strict=True):
            a = a.transpose(1, 2) if name == "O" else a
            tol = 1e-12 if name == "O" else 1e-6  # the backward reads the float32 LSE
            # (relative, or absolute on unit scale where the gradient is zero: the diagonal)
            assert float((a - w).norm()) <= tol * max(float(w.norm()), 1.0), name
        assert bands == [torch_op._mask(q, k, causal, window, align)[1]]


def test_transformers_mistral_sliding_window_trains_where_the_backward_takes_a_band(
    stand_in, float64_ok, monkeypatch
):
    """With a backward that takes a band, the windowed Mistral trains through the backend
    with SDPA's loss and gradients (SDPA given transformers' explicit sliding mask)."""
    pytest.importorskip("transformers")  # the backend imports it
    from compute.gpu.transformers_backend import register

    monkeypatch.setattr(torch_launch, "backward_takes_band", lambda: True)
    _train_both_alike(*_mistral(register(), 8), seed=4)


def _train_both_alike(ref, ours, seed: int) -> None:
    """One training step of each model on the same tokens: equal losses and gradients."""
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(seed))
    losses = [m(input_ids=ids, labels=ids).loss for m in (ref, ours)]
    for loss in losses:
        loss.backward()
    a, b = (float(loss.detach()) for loss in losses)
    assert abs(a - b) < 1e-9 * a
    for (name, p), q in zip(ref.named_parameters(), ours.parameters(), strict=True):
        assert _rel(q.grad, p.grad) < 1e-6, name


@pytest.mark.parametrize("spread", [True, False])
def test_fast_backward_launches_on_the_general_paths_addresses(monkeypatch, spread):
    """torch_backward.BackwardCall (the eager Function's backward per signature) computes
    each launch's nine addresses instead of making views: they must be those of the views the
    general path gives the kernels (each batch's q, O, dO, dQ split by K/V head, K and V
    broadcast, the per-head gradients' halves), and its plan must be built on tensors of
    those views' strides; dQ, dK, dV keep q's and k's strides."""
    from compute.gpu.torch_backward import BackwardCall

    built, launched, made = [], [], []

    class Plan:
        def run(self, _torch, ptrs):
            launched.append(list(ptrs))

    monkeypatch.setattr(torch_launch, "backward_plan", lambda *a, **kw: built.append(a) or Plan())
    monkeypatch.setattr(torch_launch, "heads_broadcast_ok", lambda: True)
    monkeypatch.setattr(torch_op, "_spread_group", lambda q, k, causal: spread)
    b, h, hk, n, d = 3, 8, 2, 40, 64
    mem = [torch.randn(b, n, x, d, dtype=torch.bfloat16) for x in (h, hk, hk, h, h)]
    q, k, v, o, do = (t.transpose(1, 2) for t in mem)
    lse = torch.randn(b, h, n)
    call = BackwardCall.build(torch, q, k, v, o, lse, do, True, 0.125, False, None)

    class Recording:  # torch, with the tensors run() allocates kept
        def __getattr__(self, name):
            return getattr(torch, name)

        def empty_strided(self, *args, **kw):
            made.append(torch.empty_strided(*args, **kw))
            return made[-1]

    dq, dk, dv = call.run(Recording(), q, k, v, o, lse, do)
    assert (dq.stride(), dk.stride(), dv.stride()) == (q.stride(), k.stride(), v.stride())
    if not spread:
        assert launched == [[t.data_ptr() for t in (q, k, v, o, do, lse, *made)]]
        return
    g = h // hk
    dq_t, pair, per = made
    # the group outermost: `g` slabs, each laid out as the pair the sum writes
    assert per.stride(3) == pair.numel() and per[:, :, :, 0].stride() == pair.stride()
    assert len(launched) == b
    for i, ptrs in enumerate(launched):
        views = [q[i].view(hk, g, n, d), k[i], v[i], o[i].view(hk, g, n, d),
                 do[i].view(hk, g, n, d), lse[i], dq_t[i], per[0, i], per[1, i]]  # fmt: skip
        assert ptrs == [t.data_ptr() for t in views], f"batch {i}"
    bq, bk, _bv, _bo, _bdo, _blse, (_bdq, bdk, _bdv) = built[0][:7]
    assert bq.stride() == q[0].view(hk, g, n, d).stride()
    assert bk.stride() == (k.stride(1), 0, k.stride(2), 1)
    assert bdk.shape == (hk, g, n, d) and bdk.stride() == per[0, 1].stride()


def test_functorch_transforms_still_reach_the_functions_apply(stand_in, float64_ok):
    """The eager apply skips autograd.Function.apply's Python layer only where no functorch
    transform is active: under torch.func the call goes through Function.apply, which says
    (as it always did) that the Function needs a setup_context for transforms; outside them
    the C++ apply gives the gradients autograd.Function.apply gives."""
    q, k, v, do = _inputs(1, 4, 2, 24, 24, 64, seed=9)
    kw = dict(is_causal=True, enable_gqa=True)
    torch_op._CALLS.clear()  # so the one signature below is this test's
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.vjp(lambda *t: torch_op.torch_attention(*t, **kw), q, k, v)
    got = _run(q, k, v, do, **kw)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    (call,) = (c for c in torch_op._CALLS.values() if c.o_shape == tuple(q.shape))
    out = torch_op._function().apply(*leaves, call, False)
    out.backward(do)
    for g, w in zip(got, [out.detach(), *(t.grad for t in leaves)], strict=True):
        assert torch.equal(g, w)


def test_a_torch_without_the_c_apply_internals_takes_functions_apply(monkeypatch):
    """Where torch lacks the internals the eager apply reaches for, it is Function.apply."""
    monkeypatch.delattr(torch._C._functorch, "unwrap_if_dead")
    torch_op._apply.cache_clear()
    try:
        assert torch_op._apply() == torch_op._function().apply
    finally:
        torch_op._apply.cache_clear()
