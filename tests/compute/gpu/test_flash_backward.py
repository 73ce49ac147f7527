"""GPU tests of compute.gpu.flash_backward.flash_attention_backward against float64.

Skipped unless CuPy is importable and a CUDA device is usable (the kernel needs sm_90; on
another GPU the call must raise its one-sentence ValueError). Inputs are seeded random draws
(bfloat16 rounded by compute.gpu.dtypes); O and LSE come from our forward on those inputs;
the reference is compute.attention_backward(method="dense", dtype="float64") per head on the
same rounded values. Error = max |g - ref| / max |ref| per gradient.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from compute import attention_backward
from compute.gpu import status
from compute.gpu.dtypes import device_array, float64_values

_ST = status()
cp = importlib.import_module("cupy") if _ST.usable else None
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]

ERR = {"float16": 2e-3, "bfloat16": 1e-2}
CODE = {"float16": 0, "bfloat16": 1}


def _hopper() -> bool:
    return cp.cuda.Device().compute_capability == "90"


def _inputs(b, h, n_q, n_k, d, dtype, seed):
    """(device arrays q, k, v, do; float64 host copies of the same values)."""
    rng = np.random.default_rng(seed)
    dev, host = [], []
    for n in (n_q, n_k, n_k, n_q):
        x = device_array(rng.standard_normal((b, h, n, d), dtype=np.float32), dtype)
        dev.append(cp.asarray(x))
        host.append(float64_values(x, dtype))
    return dev, host


def _reference(host, causal, scale, mask=None):
    """float64 gradients per head; `mask` (a compute.mask.Mask) instead of `causal`'s."""
    q, k, v, do = host
    b, h = q.shape[:2]
    grads = [np.empty_like(q), np.empty_like(k), np.empty_like(v)]
    for i in range(b):
        for j in range(h):
            got = attention_backward(
                q[i, j], k[i, j], v[i, j], do[i, j], causal=causal, scale=scale,
                method="dense", dtype="float64", mask=mask,
            )  # fmt: skip
            for g, r in zip(grads, got, strict=True):
                g[i, j] = r
    return grads


def _rel(got, ref) -> float:
    top = float(np.abs(ref).max()) if ref.size else 0.0
    diff = float(np.abs(got - ref).max()) if ref.size else 0.0
    return diff / top if top > 0 else diff


def _run(b, h, n_q, n_k, d, dtype, causal, seed, scale=None, mode=None):
    """Our gradients' errors (dq, dk, dv) vs float64, after the finiteness and zero checks."""
    from compute.gpu.flash import flash_attention
    from compute.gpu.flash_backward import backward_mode

    (q, k, v, do), host = _inputs(b, h, n_q, n_k, d, dtype, seed)
    o, lse = flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    if mode is None:  # the public entry point, at its default mode
        from compute.gpu.flash_backward import flash_attention_backward

        grads = flash_attention_backward(q, k, v, o, do, lse, causal=causal, scale=scale)
    else:
        grads = backward_mode(q, k, v, o, do, lse, causal=causal, scale=scale, mode=mode)
    cp.cuda.Device().synchronize()
    refs = _reference(host, causal, scale)
    errs = []
    for name, g, r, x in zip(("dq", "dk", "dv"), grads, refs, (q, k, v), strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype, name
        got = float64_values(g.get(), dtype)
        assert np.all(np.isfinite(got)), f"{name}: non-finite gradient"
        errs.append(_rel(got, r))
    hidden = ~np.isfinite(lse.get())  # rows that see no key: dQ exactly zero
    if hidden.any():
        dq = float64_values(grads[0].get(), dtype)
        assert float(np.abs(dq[hidden]).max()) == 0.0
    for name, e in zip(("dq", "dk", "dv"), errs, strict=True):
        assert e <= ERR[dtype], f"{name} rel err {e:.2e} (bar {ERR[dtype]:.0e})"
    return errs, grads, refs, (q, k, v, do)


@pytest.fixture(autouse=True)
def _needs_hopper():
    if not _hopper():
        pytest.skip("the tensor-core backward needs an sm_90 GPU")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "n_q,n_k", [(1, 1), (63, 63), (200, 200), (77, 300), (300, 77), (1000, 1000), (1, 513)]
)
def test_matches_float64(dtype, d, causal, n_q, n_k):
    seed = [CODE[dtype], d, int(causal), n_q, n_k]
    _run(2, 3, n_q, n_k, d, dtype, causal, seed)


@pytest.mark.parametrize("d", [64, 128])
def test_fully_masked_rows_and_custom_scale(d):
    # causal with n_q > n_k: the first n_q - n_k rows see no key (dQ = 0, nothing to dK, dV).
    _run(1, 2, 190, 60, d, "float16", True, seed=[31, d])
    _run(1, 1, 333, 333, d, "bfloat16", True, seed=[32, d], scale=0.3)
    _run(1, 2, 700, 5, d, "float16", True, seed=[33, d])  # most rows see no key


@pytest.mark.parametrize("d", [64, 128])
def test_many_blocks_and_heads(d):
    # Several key blocks per head and query blocks streaming through the two-stage ring.
    _run(2, 5, 1500, 1700, d, "float16", False, seed=[41, d])
    _run(2, 5, 1700, 1500, d, "bfloat16", True, seed=[42, d])


OTHER_MODES = [(m, d) for m in (0, 4, 5, 7, 9, 16) for d in (64, 128)]


@pytest.mark.parametrize("mode,d", OTHER_MODES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_other_dq_modes_match_float64(dtype, mode, d):
    # The modes that are not a default: the wgmma kernel's 0 (per-thread atomics), 4 (an
    # accumulator-ordered dQ tile, one bulk reduction each) and 5 (4 in a fixed key-block
    # order), the warp-specialised kernel's 7 (d = 64's default before mode 25) and 9 (its
    # 5).
    _run(2, 3, 77, 300, d, dtype, True, seed=[61, CODE[dtype], mode], mode=mode)
    _run(2, 3, 1000, 900, d, dtype, True, seed=[62, CODE[dtype], mode], mode=mode)
    _run(1, 2, 1500, 1700, d, dtype, False, seed=[63, CODE[dtype], mode], mode=mode)
    _run(1, 2, 190, 60, d, dtype, True, seed=[64, CODE[dtype], mode], mode=mode)  # hidden rows
    _run(1, 2, 1, 513, d, dtype, False, seed=[65, CODE[dtype], mode], mode=mode)  # one row


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_80_row_mode_matches_float64(dtype, causal):
    # Mode 13 (80-row query blocks, d = 128): tails in N_q not a multiple of 80 nor 64, key
    # tails, N_q < 80, a single row, GQA-free heads and batches; causal (bottom-right): N_q
    # < N_k (key blocks no query block's diagonal crosses at first), N_q > N_k (rows that see
    # no key, skipped query blocks, 700 x 5 most of them), N_q = N_k with a diagonal through
    # 80-row blocks that are not 128-key aligned (333), many key blocks both ways; the causal
    # blocks end at N_q, so N_q mod 80 (77, 40, 60, 1, 0, 1; 30, 13, 60, 20, 60) sets the
    # partial first block and the rows the pre / post kernels shift.
    for i, (b, h, n_q, n_k) in enumerate(_q80_shapes(causal)):
        _run(b, h, n_q, n_k, 128, dtype, causal, seed=[66, CODE[dtype], i, int(causal)], mode=13)


def _q80_shapes(causal):
    shapes = [(2, 3, 77, 300), (2, 3, 1000, 900), (1, 2, 1500, 1700), (1, 2, 1, 513),
              (1, 3, 240, 128), (2, 2, 81, 1)]  # fmt: skip
    if causal:
        shapes += [(1, 2, 190, 60), (1, 1, 333, 333), (1, 2, 700, 5), (2, 2, 1700, 1500),
                   (1, 2, 300, 1300)]  # fmt: skip
    return shapes


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dq_first_mode_matches_float64_and_mode_13(dtype, causal):
    # Mode 23 (mode 13 with dQ issued before dK, its tile stored under dK) on mode 13's
    # shapes and seeds: against float64, and dK, dV bit for bit mode 13's (the same GEMMs
    # into the same registers in the same order; only dQ's additions land in another order).
    from compute.gpu.flash import flash_attention
    from compute.gpu.flash_backward import backward_mode

    for i, (b, h, n_q, n_k) in enumerate(_q80_shapes(causal)):
        seed = [66, CODE[dtype], i, int(causal)]
        _, got, _, (q, k, v, do) = _run(b, h, n_q, n_k, 128, dtype, causal, seed=seed, mode=23)
        o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
        want = backward_mode(q, k, v, o, do, lse, causal=causal, mode=13)
        for name, g, w in zip(("dk", "dv"), got[1:], want[1:], strict=True):
            assert bool(cp.array_equal(g, w)), f"{name} differs from mode 13 at {n_q} x {n_k}"


def test_80_row_mode_refuses_what_it_does_not_serve():
    from compute.gpu.flash_backward import backward_mode

    for mode in (13, 23):
        for d, causal, band in ((64, False, None), (64, True, None), (128, False, (-4, 0))):
            (q, k, v, do), _ = _inputs(1, 1, 16, 16, d, "float16", [67, d])
            lse = cp.zeros((1, 1, 16), dtype=cp.float32)
            with pytest.raises(ValueError, match=f"^backward mode {mode} is for d = 128 without"):
                backward_mode(q, k, v, q, do, lse, causal=causal, band=band, mode=mode)


@pytest.mark.parametrize("mode", [5, 9, 16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(
    "n_q,n_k,causal",
    [(1000, 1100, False), (1000, 1100, True), (300, 1300, True), (700, 260, True)],
)
def test_deterministic_is_bitwise_repeatable(d, n_q, n_k, causal, mode):
    # Many key blocks add into each dQ tile (1100 keys: 9 blocks; causal 300 x 1300: all 11
    # into the first block, in descending order); ten runs must agree bit for bit, and be right.
    # Mode 5 is the wgmma kernel's deterministic mode, 9 the warp-specialised kernel's (the
    # one deterministic=True selects).
    from compute.gpu.flash import flash_attention
    from compute.gpu.flash_backward import backward_mode

    (q, k, v, do), host = _inputs(2, 3, n_q, n_k, d, "bfloat16", [71, d, n_q, n_k, int(causal)])
    o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    runs = [
        [g.get() for g in backward_mode(q, k, v, o, do, lse, causal=causal, mode=mode)]
        for _ in range(10)
    ]  # fmt: skip
    for other in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), runs[0], other, strict=True):
            assert np.array_equal(a, b), f"{name} differs between deterministic runs"
    refs = _reference(host, causal, None)
    for name, g, r in zip(("dq", "dk", "dv"), runs[0], refs, strict=True):
        assert _rel(float64_values(g, "bfloat16"), r) <= ERR["bfloat16"], name


def _torch_low(torch, host, dtype, causal, visible=None):
    """PyTorch's attention gradients computed in the low dtype (FlashAttention's tests' "pt"),
    bottom-right causal mask (or `visible`, (N_q, N_k) booleans), as float64 arrays."""
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    q, k, v, do = (torch.tensor(x, device="cuda").to(tdt) for x in host)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if visible is not None:
        s = s.masked_fill(~torch.tensor(visible, device="cuda"), float("-inf"))
    elif causal:
        n_q, n_k = q.shape[-2], k.shape[-2]
        rows = torch.arange(n_q, device="cuda")[:, None]
        cols = torch.arange(n_k, device="cuda")[None, :]
        s = s.masked_fill(cols > rows + n_k - n_q, float("-inf"))
    p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(tdt)
    grads = torch.autograd.grad(p @ v, (q, k, v), do)
    return [g.double().cpu().numpy() for g in grads]


def _rounding(ref, dtype) -> float:
    """max |round_dtype(ref) - ref|: what storing the exact gradient in the dtype costs."""
    rounded = float64_values(device_array(ref.astype(np.float32), dtype), dtype)
    return float(np.abs(rounded - ref).max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "n_q,n_k", [(113, 203), (128, 217), (108, 256), (1023, 1024), (2048, 2048)]
)
@pytest.mark.parametrize("variant", ["default", "det", 0, 4, 5, 7, 13, 23])
def test_flashattention_rule(dtype, causal, n_q, n_k, variant):
    # FlashAttention's tests' bar: max |dX - ref| <= 2 max |dX_pt - ref| + rounding, ref float64,
    # pt PyTorch's attention computed in the low dtype, on their sequence-length pairs; for
    # the public entry point (default and deterministic) and the wgmma kernel's modes.
    torch = pytest.importorskip("torch")
    from compute.gpu.flash import flash_attention
    from compute.gpu.flash_backward import backward_mode, flash_attention_backward

    d = 128 if (n_q < 1000 or variant in (13, 23)) and variant != 7 else 64  # 7: at d = 64
    (q, k, v, do), host = _inputs(1, 2, n_q, n_k, d, dtype, [81, CODE[dtype], n_q, n_k])
    o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    if isinstance(variant, int):
        ours = backward_mode(q, k, v, o, do, lse, causal=causal, mode=variant)
    else:
        ours = flash_attention_backward(q, k, v, o, do, lse, causal=causal,
                                        deterministic=variant == "det")  # fmt: skip
    refs = _reference(host, causal, None)
    pts = _torch_low(torch, host, dtype, causal)
    for name, g, r, pt in zip(("dq", "dk", "dv"), ours, refs, pts, strict=True):
        got = float64_values(g.get(), dtype)
        err, pt_err = float(np.abs(got - r).max()), float(np.abs(pt - r).max())
        assert err <= 2 * pt_err + 2 * _rounding(r, dtype), f"{name}: {err:.3e} vs pt {pt_err:.3e}"


def test_error_is_of_sdpas_order():
    # SDPA (FLASH backend) on the same rounded inputs: our error may not be far above its own.
    torch = pytest.importorskip("torch")
    from compute.gpu.peers import sdpa_backward

    for dtype in ("float16", "bfloat16"):
        for causal in (False, True):
            errs, _, refs, (q, k, v, do) = _run(
                1, 4, 1024, 1024, 128, dtype, causal, seed=[51, CODE[dtype], int(causal)]
            )
            flat = [x.reshape(4, 1024, 128) for x in (q, k, v, do)]
            theirs = sdpa_backward("sdpa-flash")(*flat, causal)
            torch.cuda.synchronize()
            for name, ours, g, r in zip(("dq", "dk", "dv"), errs, theirs, refs, strict=True):
                their = _rel(float64_values(g.get(), dtype).reshape(r.shape), r)
                assert ours <= 3 * their + 1e-4, (
                    f"{dtype} {name}: ours {ours:.2e}, SDPA {their:.2e}"
                )


def test_rejects_bad_inputs():
    from compute.gpu.flash_backward import flash_attention_backward

    q = cp.zeros((1, 1, 16, 64), dtype=cp.float16)
    lse = cp.zeros((1, 1, 16), dtype=cp.float32)
    with pytest.raises(ValueError, match="shape"):
        flash_attention_backward(q, q, q, q[:, :, :8], q, lse)
    with pytest.raises(TypeError, match="dtype"):
        flash_attention_backward(q, q, q, q, q.astype(cp.float32), lse)
    with pytest.raises(TypeError, match="float32"):
        flash_attention_backward(q, q, q, q, q, lse.astype(cp.float16))
    with pytest.raises(ValueError, match="lse"):
        flash_attention_backward(q, q, q, q, q, lse[:, :, :3])
    q96 = cp.zeros((1, 1, 16, 96), dtype=cp.float16)
    with pytest.raises(ValueError, match="head dim"):
        flash_attention_backward(q96, q96, q96, q96, q96, lse)
    from compute.gpu.flash_backward import backward_mode

    with pytest.raises(ValueError, match="mode"):
        backward_mode(q, q, q, q, q, lse, mode=6)  # the retired ws modes are gone
    k3 = cp.zeros((1, 3, 16, 64), dtype=cp.float16)
    q6, lse6 = cp.zeros((1, 6, 16, 64), dtype=cp.float16), cp.zeros((1, 6, 16), dtype=cp.float32)
    with pytest.raises(ValueError, match="divide"):
        flash_attention_backward(q6[:, :4], k3, k3, q6[:, :4], q6[:, :4], lse6[:, :4])
    with pytest.raises(ValueError, match="no GQA"):
        backward_mode(q6, k3, k3, q6, q6, lse6, mode=4)
    with pytest.raises(ValueError, match="out's dk"):
        flash_attention_backward(q6, k3, k3, q6, q6, lse6, out=(q6, q6, k3))


# ---- strided inputs and outputs, GQA (modes 7 and 9: flash_bwd_ws.cu at its strides) ----


def _sdpa_view(x):
    """The same values as a (batch, heads, N, d) view of (batch, N, heads, d) memory."""
    return cp.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)


def _empty_sdpa(like):
    b, h, n, d = like.shape
    return cp.empty((b, n, h, d), dtype=like.dtype).transpose(0, 2, 1, 3)


def _forward_gqa(q, k, v, causal):
    """O and LSE of q against K/V heads repeated to q's (the forward's CuPy API takes no GQA;
    the same arithmetic as reading head h // group)."""
    from compute.gpu.flash import flash_attention

    group = q.shape[1] // k.shape[1]
    kr, vr = (cp.repeat(x, group, axis=1) for x in (k, v))
    return flash_attention(q, kr, vr, causal=causal, return_lse=True)


def _gqa_inputs(b, h, hk, n_q, n_k, d, dtype, seed):
    """(q, k, v, do) device arrays with K/V of hk heads; float64 host copies of the same."""
    rng = np.random.default_rng(seed)
    dev, host = [], []
    for heads, n in ((h, n_q), (hk, n_k), (hk, n_k), (h, n_q)):
        x = device_array(rng.standard_normal((b, heads, n, d), dtype=np.float32), dtype)
        dev.append(cp.asarray(x))
        host.append(float64_values(x, dtype))
    return dev, host


@pytest.mark.parametrize("mode", [7, 9, 13, 16, 23, 25])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_q,n_k", [(113, 203), (1023, 1024), (300, 77)])
def test_strided_inputs_and_outputs_bit_for_bit(mode, d, causal, n_q, n_k):
    # Q, K, V, O, dO as SDPA's views of (batch, N, heads, d) memory and the gradients written
    # into such views: the same bits as on contiguous arrays (any wrong address shows). Mode 7
    # adds dQ in whichever order the key blocks finish, so there dQ is compared to float64
    # only; dK, dV are summed inside one CTA and always equal.
    from compute.gpu.flash import flash_attention
    from compute.gpu.flash_backward import backward_mode

    if mode in (13, 23) and d != 128:
        pytest.skip(f"mode {mode} (80-row query blocks) is d = 128 only")
    if mode == 25 and d != 64:
        pytest.skip("mode 25 (dV by k-step) is d = 64 only")
    (q, k, v, do), host = _inputs(2, 3, n_q, n_k, d, "bfloat16", [91, d, n_q, n_k, int(causal)])
    o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    want = backward_mode(q, k, v, o, do, lse, causal=causal, mode=mode)
    views = [_sdpa_view(x) for x in (q, k, v, o, do)]
    assert not views[0].flags.c_contiguous
    out = tuple(_empty_sdpa(x) for x in (q, k, v))
    got = backward_mode(*views, lse, causal=causal, mode=mode, out=out)
    assert all(g is x for g, x in zip(got, out, strict=True))  # written where asked
    names = ("dq", "dk", "dv")
    for name, g, w in zip(names, got, want, strict=True):
        if name != "dq" or mode == 9:
            assert bool(cp.array_equal(g, w)), f"mode {mode}: strided {name} differs"
    refs = _reference(host, causal, None)
    for name, g, r in zip(names, got, refs, strict=True):
        assert (
            _rel(float64_values(cp.ascontiguousarray(g).get(), "bfloat16"), r) <= ERR["bfloat16"]
        ), name


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [4, 8])
def test_gqa_equals_the_folded_problem_bit_for_bit(d, group):
    # Without a mask, GQA's query heads of one K/V head are one problem of group x N_q rows
    # (what the op used to launch): with N_q a multiple of 64 the kernel streams the same
    # query blocks in the same order, so the deterministic mode must give the same bits.
    from compute.gpu.flash_backward import flash_attention_backward

    b, hk, n_q, n_k = 2, 2, 192, 333
    h = hk * group
    (q, k, v, do), _ = _gqa_inputs(b, h, hk, n_q, n_k, d, "float16", [92, d, group])
    o, lse = _forward_gqa(q, k, v, False)
    got = flash_attention_backward(q, k, v, o, do, lse, deterministic=True)
    fold = (b, hk, group * n_q, d)
    want = flash_attention_backward(
        *(x.reshape(fold) for x in (q,)), k, v, *(x.reshape(fold) for x in (o, do)),
        lse.reshape(fold[:3]), deterministic=True,
    )  # fmt: skip
    assert bool(cp.array_equal(got[0], want[0].reshape(q.shape))), "dq"
    assert bool(cp.array_equal(got[1], want[1])), "dk"
    assert bool(cp.array_equal(got[2], want[2])), "dv"


def _gqa_reference(host, group, causal):
    """float64 gradients with K/V repeated to q's heads, dK and dV summed over each group."""
    q, k, v, do = host
    kr, vr = (np.repeat(x, group, axis=1) for x in (k, v))
    dq, dk, dv = _reference((q, kr, vr, do), causal, None)
    b, hk, n_k, d = k.shape
    return [dq, *(g.reshape(b, hk, group, n_k, d).sum(2) for g in (dk, dv))]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_q,n_k", [(113, 203), (1023, 1024), (203, 113)])
@pytest.mark.parametrize("mode", [None, 7, 13, 23])
def test_gqa_flashattention_rule(dtype, group, causal, n_q, n_k, mode):
    # GQA at group sizes 1, 4, 8 on SDPA-shaped views (dK, dV summed over the group inside
    # the kernel): FlashAttention's tests' bar against float64 with K/V repeated, pt being
    # PyTorch's low-dtype attention on the repeated K/V with its dK, dV summed over the group;
    # the deterministic mode (on bfloat16): a second run gives the same bits. Mode 13 (80-row
    # query blocks, d = 128) on the same views, causal included.
    torch = pytest.importorskip("torch")
    from compute.gpu.flash_backward import backward_mode, flash_attention_backward

    d = 128 if n_q < 1000 and mode != 7 else 64  # mode 7: at d = 64 (the default is 25)
    if mode in (13, 23) and d != 128:
        pytest.skip(f"mode {mode} (80-row query blocks) is d = 128 only")
    hk = 2 if group < 8 else 1  # at most 8 query heads for the float64 reference on the host
    deterministic = dtype == "bfloat16" and mode is None  # both modes, each on one dtype
    seed = [93, CODE[dtype], group, int(causal), n_q, n_k]
    (q, k, v, do), host = _gqa_inputs(1, hk * group, hk, n_q, n_k, d, dtype, seed)
    o, lse = _forward_gqa(q, k, v, causal)
    views = [_sdpa_view(x) for x in (q, k, v, o, do)]
    if mode is None:
        ours = flash_attention_backward(*views, lse, causal=causal, deterministic=deterministic)
    else:
        ours = backward_mode(*views, lse, causal=causal, mode=mode)
    if deterministic:
        again = flash_attention_backward(*views, lse, causal=causal, deterministic=True)
        for name, a, b in zip(("dq", "dk", "dv"), ours, again, strict=True):
            assert bool(cp.array_equal(a, b)), f"{name} differs between deterministic runs"
    refs = _gqa_reference(host, group, causal)
    qh, kh, vh, doh = host
    reps = [np.repeat(x, group, axis=1) for x in (kh, vh)]
    pts = _torch_low(torch, (qh, *reps, doh), dtype, causal)
    pts = [pts[0], *(g.reshape(1, hk, group, n_k, d).sum(2) for g in pts[1:])]
    for name, g, r, pt in zip(("dq", "dk", "dv"), ours, refs, pts, strict=True):
        assert g.shape == r.shape, name
        got = float64_values(cp.ascontiguousarray(g).get(), dtype)
        err, pt_err = float(np.abs(got - r).max()), float(np.abs(pt - r).max())
        assert err <= 2 * pt_err + 2 * _rounding(r, dtype), f"{name}: {err:.3e} vs pt {pt_err:.3e}"


# ---- sliding windows (band=(lo, hi), the forward's band) against float64 under the Mask ----


def _band_of(mask, n_q, n_k):
    """The kernels' band (lo, hi) of a windowed compute.mask.Mask, as torch_op._mask makes it."""
    from compute.gpu.flash_launch import BAND_OPEN

    off = mask.offset(n_q, n_k)
    lo = off - mask.left if mask.left >= 0 else -BAND_OPEN
    hi = off + mask.right if mask.right >= 0 else BAND_OPEN
    return lo, hi


def _masked_forward(host, visible, dtype):
    """O (device, in dtype) and LSE (device float32, -inf on rows that see no key) of the
    float64 attention under `visible`: what the forward's band variant hands the backward."""
    q, k, v, _ = host
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    seen = np.isfinite(m)
    p = np.where(seen, np.exp(s - np.where(seen, m, 0.0)), 0.0)
    total = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhqk,bhkd->bhqd", p / np.where(seen, total, 1.0), v)
    lse = np.where(seen, m + np.log(np.where(seen, total, 1.0)), -np.inf)[..., 0]
    o_dev = cp.asarray(device_array(o.astype(np.float32), dtype))
    return o_dev, cp.asarray(lse.astype(np.float32))


# (N_q, N_k, left, right, top_left): both alignments, N_q < N_k and > N_k, one-sided
# windows, bands narrower than a block and wider than one, rows that see no key.
WINDOWS = [
    (300, 300, 64, 0, False),
    (113, 203, 100, 30, True),
    (203, 113, 40, 10, False),  # bottom-right with N_q > N_k: the first rows see nothing
    (1000, 900, 257, 0, False),
    (777, 1024, -1, 50, True),
    (640, 640, 200, -1, False),
    (1100, 1100, 5, 5, True),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(("n_q", "n_k", "left", "right", "top_left"), WINDOWS)
def test_band_matches_float64_under_the_mask(dtype, d, n_q, n_k, left, right, top_left):
    from compute import Mask
    from compute.gpu.flash_backward import flash_attention_backward

    mask = Mask(left, right, top_left)
    visible = mask.visible(np.arange(n_q), np.arange(n_k), n_q, n_k)
    (q, k, v, do), host = _inputs(1, 2, n_q, n_k, d, dtype, [91, CODE[dtype], n_q, n_k, d])
    o, lse = _masked_forward(host, visible, dtype)
    band = _band_of(mask, n_q, n_k)
    runs = [
        flash_attention_backward(q, k, v, o, do, lse, band=band, deterministic=det)
        for det in (False, True, True)
    ]
    cp.cuda.Device().synchronize()
    refs = _reference(host, False, None, mask)
    hidden = mask.empty_rows(n_q, n_k)
    for run in runs:
        for name, g, r in zip(("dq", "dk", "dv"), run, refs, strict=True):
            got = float64_values(g.get(), dtype)
            assert np.all(np.isfinite(got)), f"{name}: non-finite gradient"
            assert _rel(got, r) <= ERR[dtype], f"{name} rel err {_rel(got, r):.2e}"
        if hidden.size:  # rows whose band holds no key: dQ exactly zero
            assert float(np.abs(float64_values(run[0].get(), dtype)[:, :, hidden]).max()) == 0.0
    for a, b in zip(runs[1], runs[2], strict=True):  # deterministic: bitwise repeatable
        assert np.array_equal(a.get(), b.get())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("n_q", "n_k", "left", "right"), [(1023, 1024, 256, 0), (2048, 2048, 300, 77)]
)
def test_band_flashattention_rule(dtype, n_q, n_k, left, right):
    # FlashAttention's tests' bar (see test_flashattention_rule) for a window.
    torch = pytest.importorskip("torch")
    from compute import Mask
    from compute.gpu.flash_backward import flash_attention_backward

    mask = Mask(left, right)
    visible = mask.visible(np.arange(n_q), np.arange(n_k), n_q, n_k)
    (q, k, v, do), host = _inputs(1, 2, n_q, n_k, 64, dtype, [93, CODE[dtype], n_q, left])
    o, lse = _masked_forward(host, visible, dtype)
    ours = flash_attention_backward(q, k, v, o, do, lse, band=_band_of(mask, n_q, n_k))
    refs = _reference(host, False, None, mask)
    pts = _torch_low(torch, host, dtype, False, visible)
    for name, g, r, pt in zip(("dq", "dk", "dv"), ours, refs, pts, strict=True):
        got = float64_values(g.get(), dtype)
        err, pt_err = float(np.abs(got - r).max()), float(np.abs(pt - r).max())
        assert err <= 2 * pt_err + 2 * _rounding(r, dtype), f"{name}: {err:.3e} vs pt {pt_err:.3e}"


def test_band_refusals_are_one_sentence():
    from compute.gpu.flash_backward import backward_mode, flash_attention_backward

    q = cp.zeros((1, 1, 16, 64), dtype=cp.float16)
    lse = cp.zeros((1, 1, 16), dtype=cp.float32)
    with pytest.raises(ValueError, match="^band and causal do not go together"):
        flash_attention_backward(q, q, q, q, q, lse, causal=True, band=(-4, 0))
    with pytest.raises(ValueError, match="^backward mode 4 takes no band"):
        backward_mode(q, q, q, q, q, lse, mode=4, band=(-4, 0))
    with pytest.raises(ValueError, match="^band must be a pair"):
        flash_attention_backward(q, q, q, q, q, lse, band=(1, 2, 3))
    with pytest.raises(ValueError, match="^band bounds must lie within"):
        flash_attention_backward(q, q, q, q, q, lse, band=(-(1 << 31), 0))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(
    "n_q,n_k,causal,band",
    [(77, 300, True, None), (1000, 900, True, None), (1500, 1700, False, None),
     (190, 60, False, None), (1100, 1100, False, (-5, 5)), (1000, 900, False, (-357, -100))],
)  # fmt: skip
def test_drained_deterministic_mode_equals_mode_9_bit_for_bit(d, n_q, n_k, causal, band):
    # Mode 16 makes mode 9's additions in mode 9's order, only from another warp.
    from compute.gpu.flash import flash_attention
    from compute.gpu.flash_backward import backward_mode

    (q, k, v, do), _ = _inputs(2, 3, n_q, n_k, d, "bfloat16", [97, n_q, n_k, d])
    o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    nine, sixteen = (
        [g.get() for g in backward_mode(q, k, v, o, do, lse, causal=causal, mode=m, band=band)]
        for m in (9, 16)
    )
    for name, a, b in zip(("dq", "dk", "dv"), nine, sixteen, strict=True):
        assert np.array_equal(a, b), f"{name}: mode 16 differs from mode 9"


@pytest.mark.parametrize(
    "b,h,hk,n_q,n_k,causal,window",
    [(2, 3, 3, 77, 300, True, None), (2, 3, 3, 1000, 900, True, None),
     (1, 2, 2, 1500, 1700, False, None), (1, 2, 2, 190, 60, True, None),
     (1, 2, 2, 1, 513, False, None), (1, 4, 1, 300, 203, True, None),
     (1, 8, 2, 203, 300, False, None), (1, 2, 2, 1100, 1100, False, (5, 5, True)),
     (1, 2, 2, 1000, 900, False, (257, 0, False))],
)  # fmt: skip
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", [25])
def test_dv_by_k_step_gives_mode_7s_dk_dv_bit_for_bit(
    b, h, hk, n_q, n_k, causal, window, dtype, mode
):
    # Mode 25 (d = 64) computes Pᵀ and dSᵀ as mode 7 does, element for element, and runs
    # dV's four k-steps on the same fragments in the same order into the same accumulator,
    # only in two commit groups instead of one, so dK and dV must equal mode 7's bit for bit
    # (odd shapes, a single query row, GQA groups 2 and 4, windows: masked and unmasked
    # tiles); dQ (added in whichever order the key blocks finish) against float64.
    from compute import Mask
    from compute.gpu.flash_backward import backward_mode

    (q, k, v, do), host = _gqa_inputs(b, h, hk, n_q, n_k, 64, dtype, [98, n_q, n_k, hk])
    band, mask = None, None
    if window is None:
        o, lse = _forward_gqa(q, k, v, causal)
    else:  # hk == h here
        mask = Mask(*window)
        o, lse = _masked_forward(host, mask.visible(np.arange(n_q), np.arange(n_k), n_q, n_k),
                                 dtype)  # fmt: skip
        band = _band_of(mask, n_q, n_k)
    seven, dvk = (
        backward_mode(q, k, v, o, do, lse, causal=causal, mode=m, band=band) for m in (7, mode)
    )
    for name, a, c in zip(("dk", "dv"), seven[1:], dvk[1:], strict=True):
        assert bool(cp.array_equal(a, c)), f"{name}: mode {mode} differs from mode 7"
    if mask is None:
        ref = _gqa_reference(host, h // hk, causal)[0]
    else:
        ref = _reference(host, False, None, mask)[0]
    err = _rel(float64_values(dvk[0].get(), dtype), ref)
    assert err <= ERR[dtype], f"dq rel err {err:.2e}"


@pytest.mark.parametrize("mode", [25])
def test_dv_by_k_step_mode_refuses_d_128(mode):
    from compute.gpu.flash_backward import backward_mode

    (q, k, v, do), _ = _inputs(1, 1, 16, 16, 128, "float16", [99])
    lse = cp.zeros((1, 1, 16), dtype=cp.float32)
    with pytest.raises(ValueError, match=f"^backward mode {mode} is for d = 64$"):
        backward_mode(q, k, v, q, do, lse, mode=mode)
