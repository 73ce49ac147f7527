"""`compute.gpu.torch_attention`, the autograd op: against SDPA and float64, and in training.

The GPU tests need torch, CuPy and a CUDA device (skipped otherwise). Gradients are checked
against a float64 reference (SDPA's math backend on the upcast inputs) and beside SDPA's own
half-precision gradients on the same seeded inputs; a tiny model trained with the op and with
SDPA from one initialisation on one seeded data stream must follow the same loss curve.
The CPU tests hold torch optional: no import on `import compute.gpu`, one sentence without it.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import numpy as np
import pytest

from compute.gpu import status

try:
    import torch
    import torch.nn.functional as F

    _TORCH = torch.cuda.is_available()
except ImportError:
    torch = F = None
    _TORCH = False

_ST = status()
needs_gpu = pytest.mark.skipif(
    not (_ST.usable and _TORCH), reason=_ST.reason or "needs torch with CUDA"
)

ERR = {"float16": 2e-3, "bfloat16": 1e-2}  # relative to float64, as the kernel's own bar


def _inputs(b, h, n_q, n_k, d, dtype, seed):
    """Seeded q, k, v, dO (torch, on the GPU) in `dtype`."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, dtype)
    shapes = [(b, h, n_q, d), (b, h, n_k, d), (b, h, n_k, d), (b, h, n_q, d)]
    return [torch.randn(s, device="cuda", generator=g, dtype=torch.float32).to(dt) for s in shapes]


def _grads(attn, q, k, v, do, causal):
    """(O, dQ, dK, dV) of attn on leaf copies of q, k, v."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attn(*leaves, is_causal=causal)
    out.backward(do.to(out.dtype))
    return [out.detach(), *(t.grad for t in leaves)]


def _rel(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [77, 300])
@pytest.mark.gpu
@needs_gpu
def test_gradients_match_sdpa_and_float64(dtype, d, causal, n):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from compute.gpu import torch_attention

    q, k, v, do = _inputs(2, 3, n, n, d, dtype, seed=n + d)
    ref = _grads(F.scaled_dot_product_attention, *(t.double() for t in (q, k, v, do)), causal)
    ours = _grads(torch_attention, q, k, v, do, causal)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        theirs = _grads(F.scaled_dot_product_attention, q, k, v, do, causal)
    for name, o, t, r in zip(("O", "dQ", "dK", "dV"), ours, theirs, ref, strict=True):
        assert o.dtype == q.dtype and o.shape == t.shape
        err, sdpa_err = _rel(o, r), _rel(t, r)
        assert err < ERR[dtype], f"{name}: ours {err:.2e} vs float64 (SDPA's {sdpa_err:.2e})"
        assert _rel(o, t) < 2 * ERR[dtype], f"{name}: ours vs SDPA {_rel(o, t):.2e}"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_non_contiguous_inputs_and_unequal_lengths(dtype):
    """(batch, N, heads, d) tensors transposed to SDPA's layout, N_q != N_k, not causal."""
    from compute.gpu import torch_attention

    q, k, v, do = _inputs(2, 2, 130, 70, 64, dtype, seed=5)
    q, k, v, do = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v, do))
    assert not q.is_contiguous()
    ref = _grads(F.scaled_dot_product_attention, *(t.double() for t in (q, k, v, do)), False)
    ours = _grads(torch_attention, q, k, v, do, False)
    for o, r in zip(ours, ref, strict=True):
        assert _rel(o, r) < ERR[dtype]


@pytest.mark.gpu
@needs_gpu
def test_refusals_are_one_sentence():
    from compute.gpu import torch_attention

    q, k, v, _ = _inputs(1, 1, 64, 32, 64, "float16", seed=1)
    with pytest.raises(TypeError, match="float16 or all bfloat16"):
        torch_attention(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="CUDA tensors"):
        torch_attention(q.cpu(), k.cpu(), v.cpu())


def _dense_reference(q, k, v, do, causal, align):
    """(O, dQ, dK, dV) in float64: K/V repeated to q's heads, the causal mask top-left or
    bottom-right (rows that see no key give zeros, as the kernel's)."""
    from compute.gpu.torch_reference import attention_reference

    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out = attention_reference(*leaves, causal, q.shape[-1] ** -0.5, align)
    out.backward(do.double())
    return [out.detach(), *(t.grad for t in leaves)]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("h", "hk", "n_q", "n_k", "causal", "align"),
    [
        (8, 8, 77, 77, True, "top-left"),
        (8, 2, 130, 130, False, "top-left"),
        (8, 2, 130, 130, True, "top-left"),
        (8, 1, 100, 257, False, "top-left"),
        (8, 1, 97, 300, True, "top-left"),
        (8, 8, 97, 300, True, "top-left"),
        (8, 2, 300, 97, True, "bottom-right"),
        (8, 2, 300, 97, True, "top-left"),  # two launches: 97 causal rows, then full rows
        (8, 8, 1100, 1000, True, "top-left"),
        (8, 8, 97, 300, True, "bottom-right"),
    ],
)
def test_gqa_and_mask_alignments_match_float64(dtype, h, hk, n_q, n_k, causal, align):
    """GQA group sizes 1, 4, 8, SDPA's top-left and FlashAttention's bottom-right causal mask,
    odd lengths, SDPA-shaped views of (batch, N, heads, d) memory."""
    from compute.gpu import torch_attention

    g = torch.Generator(device="cuda").manual_seed(h * n_q + n_k)
    dt = getattr(torch, dtype)
    shapes = [(2, n_q, h, 64), (2, n_k, hk, 64), (2, n_k, hk, 64), (2, n_q, h, 64)]
    q, k, v, do = (
        torch.randn(s, device="cuda", generator=g).to(dt).transpose(1, 2) for s in shapes
    )
    ref = _dense_reference(q, k, v, do, causal, align)
    kw = dict(is_causal=causal, enable_gqa=hk != h, causal_align=align)
    ours = _grads(lambda *t, is_causal: torch_attention(*t, **kw), q, k, v, do, causal)
    for name, o, r in zip(("O", "dQ", "dK", "dV"), ours, ref, strict=True):
        assert o.shape == r.shape and o.dtype == q.dtype and torch.isfinite(o).all()
        assert _rel(o, r) < ERR[dtype], f"{name}: {_rel(o, r):.2e}"
    if align == "top-left":  # SDPA itself in half precision, where it takes the case
        with torch.no_grad():
            sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hk != h)
        assert _rel(ours[0], sdpa) < 2 * ERR[dtype]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("h", "hk", "n_q", "n_k", "d", "causal", "window", "align"),
    [
        (8, 2, 1000, 1000, 128, True, (200, -1), "top-left"),  # Mistral's: 200 back, causal
        (8, 8, 777, 900, 64, False, (100, 50), "bottom-right"),
        (8, 1, 900, 777, 64, False, (100, 50), "top-left"),
        (4, 4, 300, 2000, 128, False, (-1, 64), "top-left"),  # no left bound
        (4, 2, 2100, 600, 64, False, (3, 0), "bottom-right"),  # rows before the keys see none
        (4, 4, 200, 200, 128, False, (0, 0), "top-left"),  # the diagonal alone
    ],
)
def test_windows_match_float64_and_skip_nothing_they_need(dtype, h, hk, n_q, n_k, d, causal,
                                                          window, align):  # fmt: skip
    """window=(left, right) in the ws kernel's band variant against float64 under the
    explorer's Mask (compute/mask.py), SDPA-shaped views, GQA, odd lengths, both
    alignments, blocks whose band starts past the first key tile (the tiles it skips); rows
    that see no key give zeros and LSE = -inf."""
    from compute.gpu import torch_attention, torch_launch
    from compute.gpu.torch_op import _mask
    from compute.gpu.torch_reference import attention_reference

    g = torch.Generator(device="cuda").manual_seed(n_q + n_k + d)
    dt = getattr(torch, dtype)
    shapes = [(2, n_q, h, d), (2, n_k, hk, d), (2, n_k, hk, d)]
    q, k, v = (torch.randn(s, device="cuda", generator=g).to(dt).transpose(1, 2) for s in shapes)
    kw = dict(is_causal=causal, enable_gqa=hk != h, causal_align=align, window=window)
    with torch.no_grad():
        got = torch_attention(q, k, v, **kw)
    want = attention_reference(*(t.double() for t in (q, k, v)), causal, d**-0.5, align, window)
    assert got.stride() == q.stride() and torch.isfinite(got).all()
    assert _rel(got, want) < ERR[dtype], f"{_rel(got, want):.2e}"
    _, band = _mask(q, k, causal, window, align)
    o, lse = torch_launch.forward(q, k, v, False, d**-0.5, band=band)
    assert torch.equal(o, got)
    rows = torch.arange(n_q, device="cuda")
    empty = (rows + band[1] < 0) | (rows + band[0] >= n_k)  # rows whose band holds no key
    assert bool(torch.isneginf(lse[:, :, empty]).all()) and bool((o[:, :, empty] == 0).all())
    assert bool(torch.isfinite(lse[:, :, ~empty]).all())


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    ("b", "h", "n_q", "n_k", "d", "causal"),
    [
        (1, 3, 77, 77, 64, False),  # the plain wgmma kernel
        (2, 4, 1000, 1000, 128, True),  # ws, causal defaults
        (2, 16, 2048, 2048, 128, False),  # the ws grid, full attention
        (1, 16, 4096, 4096, 64, True),  # the persistent LPT grid (ticket counter)
        (3, 5, 700, 300, 128, False),
        (1, 2, 64, 0, 64, False),  # no key
    ],
)
def test_launch_plan_matches_flash_attention_bit_for_bit(b, h, n_q, n_k, d, causal):
    """torch_launch's cached plan launches what flash_attention launches: the same O and LSE,
    bit for bit, on its first call (building the plan) and on later calls (other tensors)."""
    import cupy

    from compute.gpu import torch_launch
    from compute.gpu.flash import flash_attention
    from compute.gpu.peers import cupy_view, torch_view

    for seed in (1, 2):
        q, k, v, _ = _inputs(b, h, n_q, n_k, d, "bfloat16", seed=seed)
        o, lse = torch_launch.forward(q, k, v, causal, d**-0.5)
        want_o, want_lse = flash_attention(
            *(cupy_view(torch, t) for t in (q, k, v)), causal=causal, return_lse=True
        )
        cupy.cuda.Device().synchronize()
        assert torch.equal(o, torch_view(torch, want_o))
        assert torch.equal(lse, torch.from_dlpack(want_lse))


@pytest.mark.gpu
@needs_gpu
def test_allocations_contiguous_and_strided():
    """The forward allocates O and LSE only (the persistent grid's ticket counters come from
    a pool per stream), on contiguous inputs and on SDPA-shaped strided views alike (the
    kernels read the views in place; test_torch_strides.py has GQA)."""
    from compute.gpu import torch_attention

    q, k, v, _ = _inputs(2, 16, 4096, 4096, 128, "bfloat16", seed=3)
    qs, ks, vs = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))

    def allocations(*args):
        torch_attention(*args, is_causal=True)  # builds the plan of these strides
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        torch_attention(*args, is_causal=True)
        return torch.cuda.memory_stats()["allocation.all.allocated"] - before

    assert allocations(q, k, v) == allocations(qs, ks, vs) == 2


def test_ticket_pool_hands_out_distinct_zeroed_slots_and_refills():
    """Each persistent launch gets a slot no earlier launch since the last fill used; the
    pool is filled again (zero_) on its stream when spent, and a CUDA graph capture gets a
    fresh counter instead."""
    from compute.gpu import torch_launch

    class Counters:
        def __init__(self):
            self.fills = 0

        def zero_(self):
            self.fills += 1

        def data_ptr(self):
            return 4096

    class Cuda:
        capturing = False

        def is_current_stream_capturing(self):
            return self.capturing

    class Torch:
        int32 = "int32"
        cuda = Cuda()

        def zeros(self, n, dtype, device):
            return Counters()

    fake = Torch()
    stream = -12345  # a handle no real stream has
    try:
        got = [torch_launch._ticket(fake, 0, stream)[0] for _ in range(torch_launch.TICKET_SLOTS)]
        assert got == [4096 + 4 * i for i in range(torch_launch.TICKET_SLOTS)]
        pool = torch_launch._TICKETS[0, stream][0]
        assert pool.fills == 0
        assert torch_launch._ticket(fake, 0, stream)[0] == 4096 and pool.fills == 1
        fake.cuda.capturing = True
        addr, owner = torch_launch._ticket(fake, 0, stream)
        assert isinstance(owner, Counters) and owner is not pool
    finally:
        torch_launch._TICKETS.pop((0, stream), None)


@pytest.mark.gpu
@needs_gpu
def test_deterministic_backward_is_bitwise_repeatable():
    """deterministic=True: ten backward passes of one problem (GQA 4:1, SDPA-shaped views,
    causal, N not a multiple of the tiles) give bit-identical dQ, dK, dV, equal to float64
    within the usual bound; the default mode's gradients agree with them within it too."""
    from compute.gpu import torch_attention
    from compute.gpu.torch_reference import attention_reference

    g = torch.Generator(device="cuda").manual_seed(9)
    n, d = 1000, 128
    base = [torch.randn(2, n, heads, d, device="cuda", generator=g).to(torch.bfloat16)
            for heads in (16, 4, 4)]  # fmt: skip
    q, k, v = (t.transpose(1, 2) for t in base)
    do = torch.randn(2, 16, n, d, device="cuda", generator=g).to(torch.bfloat16)

    def grads(deterministic):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = torch_attention(*leaves, is_causal=True, enable_gqa=True,
                              deterministic=deterministic)  # fmt: skip
        return torch.autograd.grad(out, leaves, do)

    runs = [grads(True) for _ in range(10)]
    for run in runs[1:]:
        for got, first in zip(run, runs[0], strict=True):
            assert torch.equal(got, first), "a deterministic backward differed between runs"
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_in, True, d**-0.5, "top-left")
    wants = torch.autograd.grad(ref, ref_in, do.double())
    for name, a, b, want in zip("QKV", runs[0], grads(False), wants, strict=True):
        for got in (a, b):
            err = float((got.double() - want).norm() / want.norm())
            assert err < ERR["bfloat16"], f"d{name}: {err:.2e} against float64"


@pytest.mark.gpu
@needs_gpu
def test_compile_fullgraph_gradients_equal_eager():
    """torch.compile(fullgraph=True, inductor) of a block around the op: the op runs as the
    torch.library op, with the output and gradients of eager mode."""
    from compute.gpu import torch_attention

    q, k, v, do = _inputs(2, 8, 256, 256, 64, "float16", seed=8)
    k, v = k[:, :2].contiguous(), v[:, :2].contiguous()

    def block(q, k, v):
        o = torch_attention(q * 0.5, k, v, is_causal=True, enable_gqa=True)
        return o.float().sin()

    eager = _grads(lambda *t, is_causal: block(*t), q, k, v, do, True)
    compiled_block = torch.compile(block, fullgraph=True)
    compiled = _grads(lambda *t, is_causal: compiled_block(*t), q, k, v, do, True)
    for e, c in zip(eager, compiled, strict=True):
        assert _rel(c, e) < 1e-3


def _model(attn, seed: int):
    """Two pre-norm attention blocks (bfloat16 inside the attention only, the first full,
    the second causal) and an MLP, seeded."""

    class Block(torch.nn.Module):
        def __init__(self, dim: int, heads: int, causal: bool) -> None:
            super().__init__()
            self.heads, self.causal, self.attn = heads, causal, attn
            self.norm = torch.nn.LayerNorm(dim)
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.proj = torch.nn.Linear(dim, dim)

        def forward(self, x):
            b, n, dim = x.shape
            qkv = self.qkv(self.norm(x)).view(b, n, 3, self.heads, dim // self.heads)
            q, k, v = (t.transpose(1, 2).to(torch.bfloat16) for t in qkv.unbind(2))
            o = self.attn(q, k, v, is_causal=self.causal).float()  # (b, heads, n, d)
            return x + self.proj(o.transpose(1, 2).reshape(b, n, dim))

    torch.manual_seed(seed)
    dim = 128
    return torch.nn.Sequential(
        Block(dim, 2, False),
        Block(dim, 2, True),
        torch.nn.LayerNorm(dim),
        torch.nn.Linear(dim, 4 * dim),
        torch.nn.GELU(),
        torch.nn.Linear(4 * dim, dim),
    ).cuda()


def _train(model, data, steps: int) -> np.ndarray:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for i in range(steps):
        x, y = data[i % len(data)]
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


def _smooth(a: np.ndarray, w: int = 20) -> np.ndarray:
    return np.convolve(a, np.ones(w) / w, mode="valid")


@pytest.mark.gpu
@needs_gpu
def test_tiny_model_trains_as_with_sdpa():
    """Two attention layers and an MLP regress a fixed random teacher's output; from one init
    on one seeded data stream, our op and SDPA give the same smoothed loss curve."""
    from compute.gpu import torch_attention

    sdpa = F.scaled_dot_product_attention
    teacher = _model(sdpa, seed=123)
    g = torch.Generator(device="cuda").manual_seed(7)
    data = []
    with torch.no_grad():
        for _ in range(50):
            x = torch.randn(8, 100, 128, device="cuda", generator=g)
            data.append((x, teacher(x)))
    student = _model(sdpa, seed=0)
    ours = copy.deepcopy(student)
    for block in ours[:2]:
        block.attn = torch_attention
    curve_sdpa = _smooth(_train(student, data, 300))
    curve_ours = _smooth(_train(ours, data, 300))
    assert curve_ours[-1] < 0.5 * curve_ours[0], f"loss did not fall: {curve_ours[[0, -1]]}"
    diff = np.abs(curve_ours - curve_sdpa) / curve_sdpa
    assert diff.max() < 0.05, f"curves part: max rel diff {diff.max():.3f} at step {diff.argmax()}"


def test_importing_compute_gpu_does_not_import_torch():
    code = (
        "import sys, compute.gpu, compute.gpu.torch_op; "
        "assert compute.gpu.torch_attention is compute.gpu.torch_op.torch_attention; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_torch_one_clear_sentence(monkeypatch):
    from compute.gpu import torch_op

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    monkeypatch.setattr(torch_op, "_TORCH", [])  # as in a process that never imported it
    with pytest.raises(ImportError) as info:
        torch_op.torch_attention(None, None, None)
    assert str(info.value) == torch_op.NO_TORCH
    assert "install torch" in str(info.value)


# ---- round 39: the backward's launch plans, GQA spread, windows compiled and in transformers


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    ("b", "h", "hk", "n_q", "n_k", "d", "causal"),
    [
        (2, 8, 2, 300, 333, 64, True),
        (1, 16, 4, 1024, 1024, 128, True),
        (2, 4, 4, 77, 203, 128, False),
        (3, 8, 1, 1100, 1000, 64, False),
    ],
)
def test_backward_plan_matches_flash_attention_backward_bit_for_bit(b, h, hk, n_q, n_k, d, causal):
    """torch_launch.backward's cached plan (three cuLaunchKernel calls, the stream's
    workspace) gives the bits of flash_attention_backward on CuPy aliases (deterministic
    mode, so dQ's order is fixed too), on SDPA-shaped views with GQA, on the call that builds
    the plan and on a later one with other tensors."""
    from compute.gpu import torch_launch
    from compute.gpu.flash_backward import flash_attention_backward

    for seed in (1, 2):
        g = torch.Generator(device="cuda").manual_seed(seed + n_q)
        mem = [torch.randn(b, n, heads, d, device="cuda", generator=g).to(torch.bfloat16)
               for n, heads in ((n_q, h), (n_k, hk), (n_k, hk), (n_q, h))]  # fmt: skip
        q, k, v, do = (t.transpose(1, 2) for t in mem)
        o, lse = torch_launch.forward(q, k, v, causal, d**-0.5)
        got = torch_launch.backward(q, k, v, o, do, lse, causal, d**-0.5, deterministic=True)
        want = [torch.empty_like(t) for t in got]
        with torch_launch._stream(torch, 0):
            flash_attention_backward(
                *(torch_launch.cupy_alias(torch, t) for t in (q, k, v, o, do, lse)),
                causal=causal, scale=d**-0.5, deterministic=True,
                out=tuple(torch_launch.cupy_alias(torch, t) for t in want),
            )  # fmt: skip
        torch.cuda.synchronize()
        for name, a, w in zip(("dQ", "dK", "dV"), got, want, strict=True):
            assert torch.equal(a, w), f"{name} differs from flash_attention_backward's"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(
    ("b", "h", "hk", "n_q", "n_k", "causal"),
    [
        (2, 4, 4, 77, 203, False),
        (1, 16, 4, 1024, 1000, False),
        (1, 2, 2, 300, 300, True),
        (1, 16, 4, 1000, 1024, True),
        (2, 4, 2, 300, 203, True),
    ],
)
def test_backward_plan_takes_the_default(monkeypatch, b, h, hk, n_q, n_k, causal, d):
    """The op's cached plan launches the default: at d = 128 the 80-row query blocks' mode
    23, masked or not (N_q != N_k both ways), at d = 64 mode 25; and gives
    flash_attention_backward's dK, dV bits on SDPA-shaped views with GQA; dQ (added in the
    key blocks' finishing order) within bf16 rounding of it."""
    from compute.gpu import torch_launch
    from compute.gpu.flash_backward import flash_attention_backward

    monkeypatch.setattr(torch_launch, "_BWD_PLANS", {})
    g = torch.Generator(device="cuda").manual_seed(n_q + hk)
    mem = [torch.randn(b, n, heads, d, device="cuda", generator=g).to(torch.bfloat16)
           for n, heads in ((n_q, h), (n_k, hk), (n_k, hk), (n_q, h))]  # fmt: skip
    q, k, v, do = (t.transpose(1, 2) for t in mem)
    o, lse = torch_launch.forward(q, k, v, causal, d**-0.5)
    got = torch_launch.backward(q, k, v, o, do, lse, causal, d**-0.5)
    (plan,) = torch_launch._BWD_PLANS.values()
    assert plan.mode == (23 if d == 128 else 25)
    want = [torch.empty_like(t) for t in got]
    with torch_launch._stream(torch, 0):
        flash_attention_backward(
            *(torch_launch.cupy_alias(torch, t) for t in (q, k, v, o, do, lse)),
            causal=causal, scale=d**-0.5, out=tuple(torch_launch.cupy_alias(torch, t) for t in want),
        )  # fmt: skip
    torch.cuda.synchronize()
    for name, a, w in zip(("dQ", "dK", "dV"), got, want, strict=True):
        if name == "dQ":
            assert _rel(a, w) < 5e-3, name
        else:
            assert torch.equal(a, w), f"{name} differs from flash_attention_backward's"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(("hk", "n", "d"), [(4, 1024, 128), (2, 777, 64), (1, 300, 64)])
def test_gqa_spread_and_kernel_group_agree_with_float64(hk, n, d):
    """The causal GQA backward both ways (the kernel's group loop, and K/V repeated with dK,
    dV summed afterwards) within the bar of float64 and close to each other."""
    from compute.gpu import torch_op
    from compute.gpu.torch_reference import attention_reference

    g = torch.Generator(device="cuda").manual_seed(n + hk)
    mem = [torch.randn(2, n, heads, d, device="cuda", generator=g).to(torch.bfloat16)
           for heads in (8, hk, hk, 8)]  # fmt: skip
    q, k, v, do = (t.transpose(1, 2) for t in mem)
    o, lse = torch_op._forward(q, k, v, True, d**-0.5, q)
    ways = {gqa: torch_op._backward(q, k, v, o, lse, do, True, d**-0.5, n, gqa=gqa)
            for gqa in ("kernel", "spread")}  # fmt: skip
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_in, True, d**-0.5, "top-left")
    wants = torch.autograd.grad(ref, ref_in, do.double())
    for gqa, grads in ways.items():
        assert [t.stride() for t in grads] == [t.stride() for t in (q, k, v)], gqa
        for name, got, want in zip(("dQ", "dK", "dV"), grads, wants, strict=True):
            err = _rel(got, want)
            assert err < ERR["bfloat16"], f"{gqa} {name}: {err:.2e} against float64"
    for a, b_ in zip(ways["kernel"], ways["spread"], strict=True):
        assert _rel(a, b_) < 5e-3


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    ("b", "hk", "n", "d"), [(2, 2, 1000, 128), (1, 4, 4096, 64), (1, 1, 300, 64)]
)
def test_spread_broadcast_kv_gives_the_bits_of_repeated_kv(monkeypatch, b, hk, n, d):
    """The spread GQA backward with K and V broadcast by the tensor maps (head stride 0)
    gives, in the deterministic mode, the bits of the same launches on K and V repeated in
    memory: the copy engine reads the K/V head each query head's CTA needs. Skipped where
    the driver refuses such maps (then the op repeats)."""
    from compute.gpu import torch_launch, torch_op

    if not torch_launch.heads_broadcast_ok():
        pytest.skip("this driver refuses tensor maps with a head stride of 0")
    g = torch.Generator(device="cuda").manual_seed(n + hk + d)
    mem = [torch.randn(b, n, heads, d, device="cuda", generator=g).to(torch.bfloat16)
           for heads in (8, hk, hk, 8)]  # fmt: skip
    q, k, v, do = (t.transpose(1, 2) for t in mem)
    o, lse = torch_op._forward(q, k, v, True, d**-0.5, q)
    ways = {}
    for broadcast in (True, False):
        monkeypatch.setattr(torch_launch, "heads_broadcast_ok", lambda b=broadcast: b)
        ways[broadcast] = torch_op._backward(q, k, v, o, lse, do, True, d**-0.5, n,
                                             deterministic=True, gqa="spread")  # fmt: skip
    torch.cuda.synchronize()
    for name, a, w in zip(("dQ", "dK", "dV"), ways[True], ways[False], strict=True):
        assert torch.equal(a, w), f"{name}: broadcast K/V differs from repeated K/V"
    kernel = torch_op._backward(q, k, v, o, lse, do, True, d**-0.5, n, gqa="kernel")
    for name, a, w in zip(("dQ", "dK", "dV"), ways[True], kernel, strict=True):
        assert _rel(a, w) < 5e-3, f"{name}: the spread and the kernel's group loop disagree"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    ("b", "h", "hk", "n", "d"),
    [(1, 16, 4, 4096, 128), (2, 16, 4, 4096, 64), (2, 8, 2, 1000, 64), (2, 8, 8, 300, 128)],
)
def test_fast_backward_gives_the_bits_of_the_general_path(b, h, hk, n, d):
    """The autograd Function's per-signature backward (torch_backward.BackwardCall: the
    spread's per-batch addresses computed, not viewed; the kernel's group loop) gives the
    bits and strides of torch_op._backward's general path on the same saved tensors
    (deterministic mode), on the call that builds it and on a later one."""
    from compute.gpu import torch_attention, torch_op

    g = torch.Generator(device="cuda").manual_seed(n + h + d)
    mem = [torch.randn(b, n, heads, d, device="cuda", generator=g).to(torch.bfloat16)
           for heads in (h, hk, hk, h)]  # fmt: skip
    leaves = [t.requires_grad_() for t in mem[:3]]
    q, k, v, do = (t.transpose(1, 2) for t in (*leaves, mem[3]))
    o, lse = torch_op._forward(q, k, v, True, d**-0.5, q)
    want = torch_op._backward(q, k, v, o, lse, do, True, d**-0.5, n, deterministic=True)
    for _ in range(2):
        out = torch_attention(q, k, v, is_causal=True, enable_gqa=hk != h, deterministic=True)
        got = torch.autograd.grad(out, (q, k, v), do)
        torch.cuda.synchronize()
        assert torch.equal(out, o)
        for name, a, w in zip(("dQ", "dK", "dV"), got, want, strict=True):
            assert a.stride() == w.stride(), name
            # the same launches, and the group sums on per-head gradients of one layout
            assert torch.equal(a, w), f"{name} differs from the general path's"
    built = [fast for c in torch_op._CALLS.values() for fast in c.bwd.values()]
    assert any(fast is not None for fast in built), "the fast backward never ran"


@pytest.mark.gpu
@needs_gpu
def test_compile_fullgraph_with_a_window_equals_eager():
    """A gradient-free block with a sliding window compiled with fullgraph=True (inductor)
    gives eager's output: the window check and the band reach the library op."""
    from compute.gpu import torch_attention

    q, k, v, _ = _inputs(2, 8, 1000, 1000, 128, "bfloat16", seed=21)
    k, v = k[:, :2].contiguous(), v[:, :2].contiguous()

    def block(q, k, v):
        o = torch_attention(q * 0.5, k, v, is_causal=True, enable_gqa=True, window=(100, 0))
        return o.float().sin()

    with torch.no_grad():
        eager = block(q, k, v)
        compiled = torch.compile(block, fullgraph=True)(q, k, v)
    assert torch.equal(eager, compiled) or _rel(compiled, eager) < 1e-6


@pytest.mark.gpu
@needs_gpu
def test_mistral_sliding_window_forward_matches_sdpa():
    """A 2-layer Mistral (GQA, sliding_window 64 over 300 tokens) with the backend: the
    window comes from the config through transformers' sliding_window keyword, no explicit
    mask is built, and the logits match SDPA's (which gets the explicit mask); training with
    the window is refused in one sentence."""
    transformers = pytest.importorskip("transformers")
    from compute.gpu.transformers_backend import register

    cfg = transformers.MistralConfig(
        vocab_size=128, hidden_size=512, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, sliding_window=64,
        max_position_embeddings=512,
    )  # fmt: skip
    torch.manual_seed(0)
    build = transformers.MistralForCausalLM._from_config
    ref = build(copy.deepcopy(cfg), attn_implementation="sdpa").to(torch.bfloat16).cuda()
    ours = build(copy.deepcopy(cfg), attn_implementation=register()).to(torch.bfloat16).cuda()
    ours.load_state_dict(ref.state_dict())
    g = torch.Generator(device="cuda").manual_seed(2)
    ids = torch.randint(0, 128, (2, 300), device="cuda", generator=g)
    outs = {}
    for name, model in (("sdpa", ref), ("ours", ours)):
        hook = model.model.layers[0].self_attn.register_forward_hook(
            lambda mod, args, out, name=name: outs.__setitem__(name, out[0].double())
        )
        with torch.no_grad():
            model(input_ids=ids)
        hook.remove()
    assert _rel(outs["ours"], outs["sdpa"]) < 2e-2  # the first layer's attention output
    from compute.gpu.torch_launch import backward_takes_band

    if not backward_takes_band():
        with pytest.raises(ValueError, match="^window= runs in the forward only"):
            ours(input_ids=ids, labels=ids)
        return
    losses = [float(m(input_ids=ids, labels=ids).loss) for m in (ref, ours)]
    assert abs(losses[0] - losses[1]) < 1e-2 * losses[0]  # bf16, one step


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    ("hk", "n_q", "n_k", "causal", "window", "align"),
    [
        (2, 1000, 1000, True, (100, 0), "top-left"),
        (8, 700, 900, False, (64, 32), "bottom-right"),
        (1, 1100, 1000, False, (300, 300), "top-left"),
    ],
)
def test_window_gradients_match_float64_where_the_backward_takes_a_band(
    hk, n_q, n_k, causal, window, align
):
    """Windows with gradients (a backward that takes a band, issue 30's): dQ, dK, dV of the
    op within the bar of float64 under the explorer's Mask, GQA and SDPA-shaped views."""
    from compute.gpu import torch_attention
    from compute.gpu.torch_launch import backward_takes_band
    from compute.gpu.torch_reference import attention_reference

    if not backward_takes_band():
        pytest.skip("the backward kernel takes no band yet (issue 30)")
    g = torch.Generator(device="cuda").manual_seed(n_q + hk)
    mem = [torch.randn(2, n, heads, 128, device="cuda", generator=g).to(torch.bfloat16)
           for n, heads in ((n_q, 8), (n_k, hk), (n_k, hk), (n_q, 8))]  # fmt: skip
    q, k, v, do = (t.transpose(1, 2) for t in mem)
    kw = dict(is_causal=causal, enable_gqa=hk != 8, causal_align=align, window=window)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    grads = torch.autograd.grad(torch_attention(*leaves, **kw), leaves, do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_in, causal, 128**-0.5, align, window)
    wants = torch.autograd.grad(ref, ref_in, do.double())
    for name, got, want in zip(("dQ", "dK", "dV"), grads, wants, strict=True):
        err = _rel(got, want)
        assert err < ERR["bfloat16"], f"{name}: {err:.2e} against float64"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(("h", "hk", "n", "d"), [(16, 4, 1000, 128), (8, 8, 300, 64)])
def test_the_kept_forward_plan_is_torch_launchs(h, hk, n, d):
    """The eager Function's forward launches the plan its signature keeps (_Call.plan),
    which must be torch_launch's cached plan of those tensors and give the bits of
    torch_launch.forward, on the call that looks it up and on a later one."""
    from compute.gpu import torch_attention, torch_launch, torch_op

    q, k, v, _ = _inputs(1, h, n, n, d, "bfloat16", seed=n + d)
    k, v = k[:, :hk].contiguous(), v[:, :hk].contiguous()
    scale = 1 / math.sqrt(d)  # the op's default, to the last bit (d**-0.5 may differ)
    want, _lse = torch_launch.forward(q, k, v, True, scale)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    for _ in range(2):
        out = torch_attention(*leaves, is_causal=True, enable_gqa=hk != h)
        assert torch.equal(out, want)
    plan = torch_launch.forward_plan(q, k, v, torch.empty_like(q), True, scale)
    assert any(c.plan is plan for c in torch_op._CALLS.values()), "another plan launched"
