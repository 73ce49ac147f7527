"""The forward kernels on strided tensors and GQA, read in place (issue 31).

Every forward kernel (mma.sync, wgmma, and the ws kernel's shipped variants) runs on SDPA's
(batch, heads, N, d) views of (batch, N, heads, d) memory, on views sliced from a fused QKV
projection, and with K and V of a quarter (or one) of q's heads, through
``torch_launch.forward``. Each result must equal, bit for bit, the same kernel's on
contiguous copies with K and V repeated to q's heads (the same arithmetic on the same
values: anything read or written at a wrong address shows), and a float64 reference within
the kernel's bar; O must keep q's strides. The op itself must allocate nothing on such
inputs but O, LSE and the ticket counter (torch.cuda.memory_stats). The backward likewise:
the same bits on every layout (deterministic mode), gradients within the bar of float64
with K, V repeated, and the op's backward allocating only dQ, dK and dV.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from compute.gpu import status

try:
    import torch

    _TORCH = torch.cuda.is_available()
except ImportError:
    torch = None
    _TORCH = False

_ST = status()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (_ST.usable and _TORCH), reason=_ST.reason or "needs torch with CUDA"),
]

ERR = {"float16": 2e-3, "bfloat16": 1e-2}  # relative to float64, as the kernels' own bar


def _variants() -> dict:
    from compute.gpu import flash

    return {
        "mma-64": flash.MMA_CONFIGS[64],
        "mma-128": flash.MMA_CONFIGS[128],
        "wgmma-64": flash.WGMMA_CONFIGS[64],
        "wgmma-128": flash.WGMMA_CONFIGS[128],
        "ws-64": flash.WS_CONFIGS[64],
        "ws-128": flash.WS_CONFIGS[128],
        "ws-causal-64": flash.WS_CAUSAL_D64,  # persistent LPT, early Q, blocks ending at N_q
        "ws-causal-mid-128": flash.WS_CAUSAL_MID_D128,  # persistent LPT, Q in registers
        "ws-causal-128": flash.WS_CAUSAL_D128,  # 176-key tiles, O a panel at a time
        "ws-mid-128": flash.WS_MID_D128,  # persistent, full attention
    }


VARIANTS = list(_variants()) if _TORCH else []


def _layouts(b, h, hk, n_q, n_k, d, dt, seed):
    """{name: (q, k, v)} of one set of seeded values in three memory layouts."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, n_q, h, d, device="cuda", generator=g).to(dt)
    k, v = (torch.randn(b, n_k, hk, d, device="cuda", generator=g).to(dt) for _ in "kv")
    sdpa = tuple(t.transpose(1, 2) for t in (q, k, v))  # transformers' views
    # A fused projection: (b, N, 3 slots, heads, d), each tensor a slice of it (not dense).
    fused = []
    for t in (q, k, v):
        mem = torch.empty(b, t.shape[1], 3, t.shape[2], d, device="cuda", dtype=dt)
        mem[:, :, 1] = t
        fused.append(mem[:, :, 1].transpose(1, 2))
    return {"contiguous": tuple(t.contiguous() for t in sdpa), "sdpa": sdpa, "fused": tuple(fused)}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("hk", "causal"), [(2, True), (2, False), (1, True), (8, False)])
def test_strided_and_gqa_inputs_read_in_place_bit_for_bit(variant, hk, causal):
    from compute.gpu import torch_launch
    from compute.gpu.flash_select import is_hopper
    from compute.gpu.torch_reference import attention_reference

    cfg = _variants()[variant]
    if cfg.kernel != "mma" and not is_hopper():
        pytest.skip("the wgmma and ws kernels need an sm_90 GPU")
    b, h, d = 2, 8, cfg.d
    n_q, n_k = (300, 333) if cfg.kernel != "ws" or not cfg.persistent else (1100, 1000)
    dt, dtype = torch.bfloat16, "bfloat16"
    inputs = _layouts(b, h, hk, n_q, n_k, d, dt, seed=hk * 7 + causal + d)
    q, k, v = inputs["contiguous"]
    group = h // hk
    reps = [t.repeat_interleave(group, 1) for t in (k, v)]
    want_o, want_lse = torch_launch.forward(q, *reps, causal, d**-0.5, config=cfg)
    ref = attention_reference(q.double(), k.double(), v.double(), causal, d**-0.5, "bottom-right")
    err = float((want_o.double() - ref).norm() / ref.norm())
    assert err < ERR[dtype], f"{variant}: {err:.2e} against float64"
    for name in ("contiguous", "sdpa", "fused"):
        qs, ks, vs = inputs[name]
        o, lse = torch_launch.forward(qs, ks, vs, causal, d**-0.5, config=cfg)
        if name != "fused":  # dense: O takes q's strides (fused slices are not dense)
            assert o.stride() == qs.stride()
        assert torch.equal(o, want_o), f"{variant}, {name} layout: O differs"
        assert torch.equal(lse, want_lse), f"{variant}, {name} layout: LSE differs"


@pytest.mark.parametrize(
    ("n", "d", "causal"), [(1024, 128, True), (4096, 64, True), (700, 64, False), (128, 128, True)]
)
def test_op_allocates_only_its_outputs_on_strided_gqa_inputs(n, d, causal):
    """SDPA-shaped views, GQA 4:1, causal and not: the op's forward allocates O and LSE,
    nothing else: no copy, no repeat, and on the persistent grid no ticket counter either
    (torch_launch._ticket hands out slots of a pool made on the stream's first such call)."""
    from compute.gpu import torch_attention

    inputs = _layouts(2, 16, 4, n, n, d, torch.bfloat16, seed=n + d)
    q, k, v = inputs["sdpa"]
    out = torch_attention(q, k, v, is_causal=causal, enable_gqa=True)  # builds the plan
    assert out.stride() == q.stride() and out.transpose(1, 2).is_contiguous()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    torch_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 2


def test_misaligned_input_is_copied_not_misread():
    """A view starting 8 bytes into its storage cannot go to the copy engine: the op copies
    it (the one case it does) and the result is still right."""
    from compute.gpu import torch_attention
    from compute.gpu.torch_reference import attention_reference

    g = torch.Generator(device="cuda").manual_seed(4)
    flat = torch.randn(2 * 4 * 256 * 128 + 4, device="cuda", generator=g).to(torch.float16)
    q = flat[4:].view(2, 4, 256, 128)
    k, v = (torch.randn(2, 4, 256, 128, device="cuda", generator=g).half() for _ in "kv")
    o = torch_attention(q, k, v, is_causal=True)
    ref = attention_reference(q.double(), k.double(), v.double(), True, 128**-0.5, "top-left")
    assert float((o.double() - ref).norm() / ref.norm()) < ERR["float16"]


def test_flash_attention_cupy_takes_strided_arrays():
    """The CuPy API reads strided arrays in place too: the same bits as contiguous copies."""
    import cupy

    from compute.gpu.flash import flash_attention
    from compute.gpu.peers import cupy_view

    inputs = _layouts(2, 4, 4, 500, 500, 128, torch.float16, seed=9)
    want = flash_attention(*(cupy_view(torch, t) for t in inputs["contiguous"]), causal=True)
    for name in ("sdpa", "fused"):
        views = [cupy_view(torch, t) for t in inputs[name]]
        assert not views[0].flags.c_contiguous
        got = flash_attention(*views, causal=True)
        assert bool(cupy.array_equal(got, want)), name


@pytest.mark.parametrize("d", [64, 128])
def test_persistent_grid_with_gqa_and_many_items(d):
    """More work items than SMs on the persistent LPT grid, GQA 8:1, LPT sections of 3 heads
    (a short last one): K/V heads chosen per item, not per CTA."""
    from unittest import mock

    from compute.gpu import flash, flash_launch, torch_launch
    from compute.gpu.torch_reference import attention_reference

    cfg = replace(flash.WS_CONFIGS[d], persistent=True, lpt=True, early_q=True)
    inputs = _layouts(2, 40, 5, 900, 900, d, torch.bfloat16, seed=d)
    q, k, v = inputs["sdpa"]
    with mock.patch.object(flash_launch, "lpt_section", lambda n_k, d, heads, l2: 3):
        o, _ = torch_launch.forward(q, k, v, True, d**-0.5, config=cfg)
    ref = attention_reference(q.double(), k.double(), v.double(), True, d**-0.5, "bottom-right")
    assert float((o.double() - ref).norm() / ref.norm()) < ERR["bfloat16"]


# ---- the backward (flash_bwd_ws.cu at its strides, GQA summed in the kernel) ----


@pytest.mark.parametrize(
    ("n", "d", "causal"), [(1024, 128, True), (4096, 64, True), (700, 64, False), (128, 128, True)]
)
def test_op_backward_allocates_only_the_gradients_on_strided_gqa_inputs(n, d, causal):
    """SDPA-shaped views, GQA 4:1, the upstream gradient a view too: the op's backward
    allocates dQ, dK and dV (with q's and k's strides), nothing else: no copy of Q, K, V, O
    or dO, and no repeat of K, V where the kernel's group loop balances the GPU."""
    from compute.gpu import torch_attention, torch_launch, torch_op

    g = torch.Generator(device="cuda").manual_seed(n + d + 1)
    base = [torch.randn(2, n, heads, d, device="cuda", generator=g).to(torch.bfloat16)
            for heads in (16, 4, 4)]  # fmt: skip
    for t in base:
        t.requires_grad_()
    q, k, v = (t.transpose(1, 2) for t in base)
    do = torch.randn(2, n, 16, d, device="cuda", generator=g).to(torch.bfloat16).transpose(1, 2)
    for _ in range(2):  # the first builds the plans and compiles
        out = torch_attention(q, k, v, is_causal=causal, enable_gqa=True)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        grads = torch.autograd.grad(out, (q, k, v), do)
        torch.cuda.synchronize()
        allocated = torch.cuda.memory_stats()["allocation.all.allocated"] - before
    # Where the kernel's group loop would leave the GPU unbalanced (torch_op._spread_group),
    # dK and dV are one block and the per-query-head gradients one more; K and V are
    # broadcast by the tensor maps, or repeated (two blocks per batch) where the driver
    # refuses those maps.
    spread = torch_op._spread_group(q, k, causal)
    want = 3 + (0 if not spread or torch_launch.heads_broadcast_ok() else 2 * q.shape[0])
    assert allocated == want, f"the backward allocated {allocated} blocks, not {want}"
    assert [t.stride() for t in grads] == [t.stride() for t in (q, k, v)]
    ref_in = [t.detach().double() for t in (q, k, v)]
    ref_in = [t.requires_grad_() for t in ref_in]
    from compute.gpu.torch_reference import attention_reference

    ref = attention_reference(*ref_in, causal, d**-0.5, "top-left")
    wants = torch.autograd.grad(ref, ref_in, do.double())
    for name, got, want in zip(("dQ", "dK", "dV"), grads, wants, strict=True):
        err = float((got.double() - want).norm() / want.norm())
        assert err < ERR["bfloat16"], f"{name}: {err:.2e} against float64"


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(("hk", "causal"), [(2, True), (2, False), (1, True), (8, False)])
@pytest.mark.parametrize(("n_q", "n_k"), [(300, 333), (113, 203), (1023, 1024)])
def test_backward_strided_and_gqa_bit_for_bit(d, hk, causal, n_q, n_k):
    """torch_launch.backward (deterministic) on SDPA views and fused-projection slices with
    K/V of hk heads: the same bits as on contiguous tensors, and within the bar of float64
    gradients computed with K and V repeated to q's heads and summed over the group."""
    from compute.gpu import torch_launch
    from compute.gpu.torch_reference import attention_reference

    b, h = 2, 8
    inputs = _layouts(b, h, hk, n_q, n_k, d, torch.bfloat16, seed=hk * 11 + causal + d + n_q)
    g = torch.Generator(device="cuda").manual_seed(n_k + d)
    do_mem = torch.randn(b, n_q, h, d, device="cuda", generator=g).to(torch.bfloat16)
    dos = {"contiguous": do_mem.transpose(1, 2).contiguous(), "sdpa": do_mem.transpose(1, 2)}
    dos["fused"] = dos["sdpa"]
    q, k, v = inputs["contiguous"]
    o, lse = torch_launch.forward(q, k, v, causal, d**-0.5)
    want = torch_launch.backward(q, k, v, o, dos["contiguous"], lse, causal, d**-0.5,
                                 deterministic=True)  # fmt: skip
    for name in ("sdpa", "fused"):
        qs, ks, vs = inputs[name]
        os_ = torch.empty_like(qs) if name == "sdpa" else torch.empty_like(o)
        os_.copy_(o)
        out = tuple(torch.empty_like(t).transpose(1, 2).contiguous().transpose(1, 2)
                    for t in (qs, ks, vs))  # fmt: skip
        got = torch_launch.backward(qs, ks, vs, os_, dos[name], lse, causal, d**-0.5,
                                    out=out, deterministic=True)  # fmt: skip
        for gname, a, w in zip(("dQ", "dK", "dV"), got, want, strict=True):
            assert torch.equal(a, w), f"{name} layout: {gname} differs"
    group = h // hk
    ref_in = [t.double().requires_grad_() for t in (q, k.repeat_interleave(group, 1),
                                                    v.repeat_interleave(group, 1))]  # fmt: skip
    ref = attention_reference(*ref_in, causal, d**-0.5, "bottom-right")
    rq, rk, rv = torch.autograd.grad(ref, ref_in, dos["contiguous"].double())
    refs = [rq, *(t.view(b, hk, group, n_k, d).sum(2) for t in (rk, rv))]
    for gname, a, r in zip(("dQ", "dK", "dV"), want, refs, strict=True):
        err = float((a.double() - r).norm() / r.norm())
        assert err < ERR["bfloat16"], f"{gname}: {err:.2e} against float64"
