"""`torch_attention`: this project's tensor-core attention as a PyTorch op with autograd.

``torch_attention(q, k, v, *, is_causal=False, scale=None, enable_gqa=False,
causal_align="top-left", deterministic=False, window=None)`` takes what
``torch.nn.functional.scaled_dot_product_attention`` takes for the common case: CUDA
tensors shaped (batch, heads, N, d), float16 or bfloat16, d in {64, 128}, the same
argument names. The forward is the tensor-core kernel of
``compute.gpu.flash`` (launched by ``torch_launch.forward`` with per-shape cached launch
plans); it saves Q, K, V, O and the row log-sum-exp L (float32), and the backward is
``compute.gpu.flash_backward.flash_attention_backward`` on them, which recomputes P from L.

The op is registered with ``torch.library`` (``fa_explorer::attention_forward`` and
``fa_explorer::attention_backward``, with fake implementations and registered autograd), so
``torch.compile(..., fullgraph=True)`` traces through it. In eager mode the call goes through
an ``autograd.Function`` instead, which runs the same functions with less Python dispatch
(the benchmark, ``lab/torch_op_bench.py``, times both), or, when no input needs a
gradient, straight to them. Host cost per eager call: the checks run once per signature
(shapes, strides, dtypes, devices, arguments; ``_Call``), later calls look their verdict
up and check only the base addresses, and the launch itself is ``torch_launch``'s cached
plan (one ``cuLaunchKernel``). Where every tensor is read in place the Function's forward
allocates O and LSE and launches, nothing more, and its backward is the signature's
``torch_backward.BackwardCall`` (the gradients allocated, the plan's launches queued on
addresses computed from the saved tensors', no view objects).

What is copied, and why: the forward copies nothing. Its kernels read Q, K, V and write O
at their batch, head and row strides (4-D tensor maps, strided pointers), so SDPA's (batch,
heads, N, d) views of (batch, N, heads, d) memory, as transformers passes them, are read in
place; only a tensor the kernels cannot address (a last dimension that is not unit, a
base or stride not in whole 16 bytes: ``flash_launch.readable``) is copied. O is allocated
with q's strides (``empty_like``, as SDPA's flash backend does), so the caller's
``transpose(1, 2)`` back to (batch, N, heads, d) is free. The backward does the same: its
kernels (``flash_attention_backward``'s default and deterministic modes) read Q, K, V, O
and dO at their strides and write dQ, dK, dV into tensors the op allocates with q's and
k's strides (``_empty_out``), so it copies only what the forward would (an upstream
gradient the kernels cannot address).

GQA / MQA (K and V with heads dividing q's, ``enable_gqa=True`` as in SDPA): the kernels read
K/V head h // group for query head h, and the backward kernel sums dK, dV over the group
itself (the CTA that owns a K/V tile streams all of its group's query heads), so nothing
is repeated or reduced afterwards; except for the causal backward on long sequences with
few K/V key blocks (``_spread_group``: a Llama layer at batch 1), where that CTA's work
would set the time: there (``_spread_backward``) the kernel sees each K/V head as a batch of
its group's query heads (views of q, O, dO, dQ and LSE), K and V broadcast over them by
tensor maps with a head stride of 0 (nothing repeated in memory;
``torch_launch.heads_broadcast_ok``), one CTA per query head's key block, and dK, dV are
summed over the group after it, in one reduction into halves of one tensor.

Masks: ``is_causal`` keeps SDPA's top-left meaning when N_q != N_k (query row r sees keys
c <= r); ``causal_align="bottom-right"`` selects FlashAttention's (c <= r + N_k - N_q, the
kernel's own; rows that see no key give zeros). Top-left with N_q < N_k runs the kernel on
the first N_q keys (views of those rows of K and V; dK, dV are zero past them); top-left
with N_q > N_k runs two launches on views of q and O (``_split``): the first N_k rows
causal, the rows after them full attention (they see every key); its backward is two calls
whose dK, dV are added. The two agree when N_q = N_k. Sliding windows (``window=``): the
ws kernel's band variant, each query block reading only the key tiles its rows' window
touches; with inputs that need a gradient only where the backward takes the band too
(``torch_launch.backward_takes_band``: issue 30's kernel), refused in one sentence
otherwise. No attn_mask or dropout.

torch is optional: importing this module (or ``compute.gpu``) never imports it; calling
``torch_attention`` without torch installed raises ImportError with one sentence.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ..mask import Mask
from . import torch_launch
from .flash import SUPPORTED_HEAD_DIMS
from .flash_launch import BAND_OPEN, readable

NO_TORCH = "torch_attention needs PyTorch: install torch (pip install torch) to use it."
ALIGNS = ("top-left", "bottom-right")
NAMESPACE = "fa_explorer"


def _torch() -> Any:
    if _TORCH:
        return _TORCH[0]
    try:
        import torch
    except ImportError as exc:
        raise ImportError(NO_TORCH) from exc
    _TORCH.append(torch)
    return torch


_TORCH: list = []  # the torch module, once imported


def _check(
    torch: Any, q: Any, k: Any, v: Any, is_causal: bool, gqa: bool, align: str,
    window: Any = None,
) -> None:  # fmt: skip
    """One sentence (ValueError / TypeError) for any input the kernels do not take."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"torch_attention takes torch tensors; {name} is a {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be shaped (batch, heads, N, d), not {tuple(t.shape)}")
    if not q.dtype == k.dtype == v.dtype or q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(
            f"q, k, v must all be float16 or all bfloat16, not {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not q.device == k.device == v.device:
        raise ValueError("q, k, v must be on one device")
    (b, h, _, d), (bk, hk, _, dk) = q.shape, k.shape
    if k.shape != v.shape or bk != b or dk != d:
        raise ValueError(
            f"shapes do not agree: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
            "(k and v alike, with q's batch and d)"
        )
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head dim d must be one of {SUPPORTED_HEAD_DIMS}, not {d}")
    if hk != h and not (gqa and hk > 0 and h % hk == 0):
        raise ValueError(
            f"q has {h} heads and k, v {hk}: pass enable_gqa=True with k/v heads dividing "
            "q's heads, or give k and v q's heads"
        )
    if align not in ALIGNS:
        raise ValueError(f"causal_align must be one of {ALIGNS}, not {align!r}")
    if window is not None:
        if not (isinstance(window, tuple | list) and len(window) == 2):
            raise ValueError(
                f"window must be a pair (left, right) of whole numbers, -1 for an unbounded "
                f"side, not {window!r}"
            )
        Mask(*window)  # its one sentence for a side that is not a whole number >= -1
    if b * h > 65535:
        raise ValueError(f"batch * heads ({b * h}) must be at most 65535 (one grid row per head)")


def _readable(t: Any) -> Any:
    """t itself when the forward kernels read it in place (flash_launch.readable), else one
    contiguous, aligned copy. (The common case, every stride positive and in whole 16
    bytes, is tested inline: this runs three times per call.)"""
    sb, sh, sr, sd = t.stride()
    ptr = t.data_ptr()
    if sd == 1 and not (ptr % 16 or sb % 8 or sh % 8 or sr % 8) and min(sb, sh, sr) > 0:
        return t
    if readable(t.shape, (sb, sh, sr, sd), ptr):
        return t
    return t.clone(memory_format=_torch().contiguous_format)


def _seen_keys(q: Any, k: Any, v: Any, causal: bool, align: str) -> tuple[Any, Any]:
    """K and V with top-left causal turned into the kernel's own mask: N_q < N_k keys past
    N_q are never seen, so K and V end there (views; then N_q = N_k)."""
    n_q = q.shape[2]
    if causal and align == "top-left" and n_q < k.shape[2]:
        return k[:, :, :n_q], v[:, :, :n_q]
    return k, v


def _mask(
    q: Any, k: Any, causal: bool, window: Any, align: str
) -> tuple[bool, tuple[int, int] | None]:  # fmt: skip
    """(causal, band) as the kernels take the mask: a sliding window `window` = (left, right)
    means what compute/mask.py's Mask(left, right) means (row r sees keys r + off - left <=
    c <= r + off + right, -1 unbounded, off = N_k - N_q bottom-right or 0 top-left; is_causal
    sets right = 0, as FlashAttention's window_size does), turned into the ws kernel's band
    (lo, hi) = (off - left, off + right); a window that is plain causal or none is not a band."""
    if window is None:
        return causal, None
    left, right = (int(x) for x in window)
    mask = Mask(left, 0 if causal else right, align == "top-left")
    if not mask.windowed:  # (-1, 0) is causal, (-1, -1) none
        return mask.causal, None
    off = mask.offset(q.shape[2], k.shape[2])
    lo = off - mask.left if mask.left >= 0 else -BAND_OPEN
    hi = off + mask.right if mask.right >= 0 else BAND_OPEN
    return False, (lo, hi)


def _split(q: Any, k: Any, causal: bool, align: str) -> int:
    """Top-left causal with N_q > N_k as the kernel's masks: the first N_k query rows are a
    square causal problem (where the two alignments agree) and the rows after them see
    every key (full attention), two launches on views of q and O; the number of rows of
    the first part, N_k, or 0 where no split is needed."""
    n_k = k.shape[2]
    return n_k if causal and align == "top-left" and q.shape[2] > n_k > 0 else 0


def _prepare(q: Any, k: Any, v: Any, causal: bool, align: str) -> tuple[Any, Any, Any]:
    """q, k, v as the kernels read them (_seen_keys, _readable). Idempotent, so the
    backward may call it on what the forward saved."""
    k, v = _seen_keys(q, k, v, causal, align)
    return _readable(q), _readable(k), _readable(v)


def _empty_out(torch: Any, q: Any) -> Any:
    """O's tensor: q's strides where they are dense with a unit last dimension (so that the
    caller's transpose back to (batch, N, heads, d) is free, as with SDPA), else contiguous.
    The fake implementation uses it too, so compiled graphs see the strides eager returns."""
    o = torch.empty_like(q)
    return o if o.stride(3) == 1 else torch.empty(q.shape, dtype=q.dtype, device=q.device)


def _forward(
    q: Any, k: Any, v: Any, causal: bool, scale: float, like: Any, split: int = 0,
    band: tuple[int, int] | None = None,
) -> tuple[Any, Any]:  # fmt: skip
    """(O, LSE) on prepared tensors, K/V heads dividing q's (the kernels take the group), O
    shaped after `like` (the caller's q); `split` rows (_split) run causal, the rest full;
    `band` (_mask) runs the ws kernel's band variant."""
    torch = _torch()
    b, h, n_q, _ = q.shape
    o = _empty_out(torch, like)
    if band is not None:
        lse = torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
        torch_launch.forward(q, k, v, False, scale, o, lse, band=band)
        return o, lse
    if not split:
        lse = torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
        torch_launch.forward(q, k, v, causal, scale, o, lse)
        return o, lse
    parts = []
    for rows, masked in ((slice(0, split), True), (slice(split, n_q), False)):
        lse = torch.empty((b, h, rows.stop - rows.start), dtype=torch.float32, device=q.device)
        torch_launch.forward(q[:, :, rows], k, v, masked, scale, o[:, :, rows], lse)
        parts.append(lse)
    return o, torch.cat(parts, 2)


def _key_grad(torch: Any, k: Any, n_k: int) -> tuple[Any, Any]:
    """(the gradient tensor of K or V with n_k rows, the view of it the kernel writes): k's
    strides when the kernel saw all n_k keys (_empty_out), else a contiguous tensor whose rows
    past the seen keys are zero (top-left causal with N_q < N_k)."""
    if k.shape[2] == n_k:
        g = _empty_out(torch, k)
        return g, g
    b, hk, seen, d = k.shape
    g = torch.empty((b, hk, n_k, d), dtype=k.dtype, device=k.device)
    g[:, :, seen:].zero_()
    return g, g[:, :, :seen]


def _backward(
    q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: bool, scale: float, n_k: int,
    deterministic: bool = False, split: int = 0, gqa: str | None = None,
    band: tuple[int, int] | None = None,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """(dQ, dK, dV) on prepared tensors (and O, LSE as _forward gave them): the kernels read
    them where they are and write into gradients allocated here, dK and dV of n_k rows;
    `deterministic` selects flash_attention_backward's bitwise repeatable mode; `split` as
    _forward's (two backward calls, the second's dK and dV added to the first's). GQA's
    group: `gqa` None chooses (_spread_group), "kernel" or "spread" forces one (benchmarks).
    `band`: the forward's sliding window (_mask; causal then False), for a backward that
    takes one (torch_launch.backward_takes_band)."""
    torch = _torch()
    dq = _empty_out(torch, q)
    if split:
        o, do = _readable(o), _readable(do)
        grads = [(_empty_out(torch, k), _empty_out(torch, v)) for _ in range(2)]
        n_q = q.shape[2]
        for (rows, masked), (dk, dv) in zip(
            ((slice(0, split), True), (slice(split, n_q), False)), grads, strict=True
        ):
            torch_launch.backward(
                q[:, :, rows], k, v, o[:, :, rows], do[:, :, rows],
                lse[:, :, rows].contiguous(), masked, scale,
                out=(dq[:, :, rows], dk, dv), deterministic=deterministic,
            )  # fmt: skip
        (dk, dv), (dk_rest, dv_rest) = grads
        return dq, dk.add_(dk_rest), dv.add_(dv_rest)
    o, do = _readable(o), _readable(do)
    if gqa == "spread" or (gqa is None and _spread_group(q, k, causal)):
        return _spread_backward(torch, q, k, v, o, lse, do, causal, scale, n_k, dq,
                                deterministic, band)  # fmt: skip
    (dk, dk_seen), (dv, dv_seen) = _key_grad(torch, k, n_k), _key_grad(torch, v, n_k)
    torch_launch.backward(q, k, v, o, do, lse, causal, scale, out=(dq, dk_seen, dv_seen),
                          deterministic=deterministic, **_band_kw(band))  # fmt: skip
    return dq, dk, dv


def _spread_backward(
    torch: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: bool, scale: float,
    n_k: int, dq: Any, deterministic: bool, band: tuple[int, int] | None,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """_backward's GQA with one CTA per query head's key block (_spread_group), batch by
    batch: the kernel sees each K/V head as a batch of `group` query heads (q, O, dO, dQ and
    LSE split along their head dimension: views), K and V broadcast over it (head stride 0,
    read by the copy engine, so nothing is repeated in memory where the driver takes such a
    map: torch_launch.heads_broadcast_ok), and writes per-query-head dK, dV into one buffer,
    summed over the group by one reduction into dK and dV, two views of one allocation."""
    b, h, n_q, d = q.shape
    hk, seen = k.shape[1], k.shape[2]
    group = h // hk
    per = torch.empty_strided(*_group_outer(torch, k, group), dtype=k.dtype, device=k.device)
    if _like_strides(torch, k.shape, k.stride()) == _like_strides(torch, v.shape, v.stride()):
        pair, pair_seen = _grad_pair(torch, k, n_k)
        sums = [(per, pair_seen)]
        dk, dv = pair[0], pair[1]
    else:  # dK and dV of different strides: two tensors, two sums
        (dk, dk_seen), (dv, dv_seen) = _key_grad(torch, k, n_k), _key_grad(torch, v, n_k)
        sums = [(per[0], dk_seen), (per[1], dv_seen)]
    broadcast = torch_launch.heads_broadcast_ok()
    for i in range(b):
        kv = [t[i][:, None].expand(hk, group, seen, d) for t in (k, v)]
        if not broadcast:
            kv = [t.contiguous() for t in kv]
        fold = [t[i].view(hk, group, *t.shape[2:]) for t in (q, o, do, dq)]
        qi, oi, doi, dqi = fold
        torch_launch.backward(qi, *kv, oi, doi, lse[i].view(hk, group, n_q), causal, scale,
                              out=(dqi, per[0, i], per[1, i]), deterministic=deterministic,
                              **_band_kw(band))  # fmt: skip
    for part, out in sums:
        torch.sum(part, part.dim() - 3, out=out)  # over the group
    return dq, dk, dv


def _group_outer(torch: Any, k: Any, group: int) -> tuple[tuple, tuple]:
    """(shape, strides) of the spread's per-query-head dK and dV, (2, batch, kv heads,
    group, N_k, d): in memory `group` slabs one after another, each laid out as the (dK,
    dV) pair of _grad_pair, so the sum over the group reads whole slabs in the layout it
    writes (a reduction over the outermost dimension, with wide loads along the rest)."""
    sk = _like_strides(torch, k.shape, k.stride())
    size = k.numel()
    return (2, *k.shape[:2], group, *k.shape[2:]), (size, sk[0], sk[1], 2 * size, *sk[2:])


def _grad_pair(torch: Any, k: Any, n_k: int) -> tuple[Any, Any]:
    """(dK and dV as one tensor (2, batch, kv_heads, n_k, d) whose halves have the strides
    _key_grad gives them, its view of the seen keys' rows): one allocation, so one
    reduction writes both; rows past the seen keys (top-left causal, N_q < N_k) are zero."""
    b, hk, seen, d = k.shape
    if seen != n_k:
        pair = torch.empty((2, b, hk, n_k, d), dtype=k.dtype, device=k.device)
        pair[:, :, :, seen:].zero_()
        return pair, pair[:, :, :, :seen]
    size = k.numel()
    base = torch.empty((2 * size,), dtype=k.dtype, device=k.device)
    pair = base.as_strided((2, *k.shape), (size, *_like_strides(torch, k.shape, k.stride())))
    return pair, pair


@functools.lru_cache(maxsize=256)
def _like_strides(torch: Any, shape: tuple, stride: tuple) -> tuple:
    """The strides empty_like gives a tensor of this shape and these strides (dense: the
    same; otherwise dense in their order), which is what _empty_out and the fakes give."""
    meta = torch.empty_strided(shape, stride, device="meta")
    return _empty_out(torch, meta).stride()


def _band_kw(band: tuple[int, int] | None) -> dict:
    """torch_launch.backward's band keyword, given only with a band (so a stand-in or a
    backward without windows sees the call it always saw)."""
    return {} if band is None else {"band": band}


def _grad_windows() -> bool:
    """Whether inputs that need a gradient may have a window: the backward takes a band."""
    from .torch_launch import backward_takes_band

    return backward_takes_band()


# Measured (TORCH_OP_NOTES.md, "The backward's GQA, two ways"): the spread won at N_k = 4096
# with the kernel's CTAs filling 0.97 and 1.94 waves (by 9-17%), lost at 3.88 waves (by 1-3%)
# and at N_k = 1024 even at 0.97 waves (the kernel's short CTAs are not unbalanced enough to
# pay for the repeat and the sum; the repeat is gone since, the sum is not).
SPREAD_BELOW_WAVES = 2.0
SPREAD_MIN_KEYS = 4096


def _spread_group(q: Any, k: Any, causal: bool) -> bool:
    """Whether the causal GQA backward runs one CTA per query head's key block
    (_spread_backward: K and V broadcast, dK and dV summed afterwards), instead of the
    kernel's own group loop. The kernel gives each K/V
    key block one CTA that streams its whole group's query heads, so with the causal mask
    the CTA of the first key block does `group` times the longest work of a query head's:
    when those CTAs fill fewer than SPREAD_BELOW_WAVES waves of the GPU and the keys are
    many (SPREAD_MIN_KEYS), the longest CTA sets the time and one CTA per query head (the
    sum costs a pass over the per-head gradients) balances it."""
    b, h = q.shape[:2]
    hk, n_k = k.shape[1], k.shape[2]
    if not causal or hk == h or n_k < SPREAD_MIN_KEYS or not q.is_cuda:
        return False
    ctas = b * hk * -(-n_k // 128)
    return ctas < SPREAD_BELOW_WAVES * _sm_count(q.device.index)


@functools.cache
def _sm_count(device: int) -> int:
    return _torch().cuda.get_device_properties(device).multi_processor_count


@functools.cache
def _function() -> Any:
    """The eager path's autograd Function, built on first use (its base class needs torch)."""
    torch = _torch()

    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, call: _Call, det: bool):
            if call.fast and not (q.data_ptr() % 16 or k.data_ptr() % 16 or v.data_ptr() % 16):
                o, lse = _launch_forward(torch, q, k, v, call)  # read in place, one launch
                qp, kp, vp = q, k, v
            else:
                qp, kp, vp = _prepare(q, k, v, call.causal, call.align)
                o, lse = _forward(qp, kp, vp, call.causal, call.scale, q, call.split, call.band)
            ctx.save_for_backward(qp, kp, vp, o, lse)
            ctx.call, ctx.det, ctx.n_k = call, det, k.shape[2]
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            call = ctx.call
            if call.fast and not do.data_ptr() % 16:
                fast = _backward_call(torch, call, ctx.det, q, k, v, o, lse, do)
                if fast is not None:
                    return (*fast.run(torch, q, k, v, o, lse, do), None, None)
            dq, dk, dv = _backward(q, k, v, o, lse, do, call.causal, call.scale, ctx.n_k,
                                   ctx.det, call.split, band=call.band)  # fmt: skip
            return dq, dk, dv, None, None

    return FlashAttention


@functools.cache
def _apply() -> Any:
    """The eager Function's apply without ``autograd.Function.apply``'s Python layer: that
    classmethod binds default arguments (there are none), checks for functorch transforms
    and unwraps dead functorch wrappers through a generator before it calls the C++ apply;
    here the transforms' check and the three unwraps are direct calls, so the C++ apply
    (``_C._FunctionBase.apply`` bound to the Function) sees the arguments it would have."""
    torch = _torch()
    fn = _function()
    try:
        c_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, fn)
        active = torch._C._are_functorch_transforms_active
        unwrap = torch._C._functorch.unwrap_if_dead
    except (AttributeError, KeyError):  # a torch without these internals: the public path
        return fn.apply

    def apply(q: Any, k: Any, v: Any, call: _Call, det: bool) -> Any:
        if active():  # vmap, grad, ...: the Function's own path (custom_function_call)
            return fn.apply(q, k, v, call, det)
        return c_apply(unwrap(q), unwrap(k), unwrap(v), call, det)

    return apply


def _backward_call(
    torch: Any, call: _Call, det: bool, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any
) -> Any:  # fmt: skip
    """The signature's torch_backward.BackwardCall (built on first use; None where the
    general path runs), keyed by the upstream gradient's strides and the deterministic flag."""
    key = (do.stride(), det)
    fast = call.bwd.get(key, False)
    if fast is False:
        from .torch_backward import BackwardCall

        fast = None
        if q.is_cuda and do.stride(3) == 1 and readable(do.shape, do.stride(), do.data_ptr()):
            fast = BackwardCall.build(torch, q, k, v, o, lse, do, call.causal, call.scale, det,
                                      call.band)  # fmt: skip
        call.bwd[key] = fast
    return fast


def _launch_forward(torch: Any, q: Any, k: Any, v: Any, call: _Call) -> tuple[Any, Any]:
    """(O, LSE) of one launch on tensors the kernels read in place (call.in_place, every key
    seen, no split): the outputs allocated as the call says, nothing else done."""
    o = torch.empty_strided(call.o_shape, call.o_stride, dtype=call.dtype, device=call.device)
    lse = torch.empty(call.lse_shape, dtype=torch.float32, device=call.device)
    plan = call.plan
    if plan is False:  # not looked up yet, or tensors off the GPU (the CPU tests' stand-ins)
        causal = call.causal and call.band is None
        if not q.is_cuda:
            torch_launch.forward(q, k, v, causal, call.scale, o, lse, **_band_kw(call.band))
            return o, lse
        plan = call.plan = torch_launch.forward_plan(q, k, v, o, causal, call.scale,
                                                     band=call.band)  # fmt: skip
    if plan is not None:  # None: nothing to compute
        torch_launch.run_forward(torch, plan, call.device_index, (q.data_ptr(), k.data_ptr(),
                                 v.data_ptr(), o.data_ptr(), lse.data_ptr()))  # fmt: skip
    return o, lse


def _register_ops() -> bool:
    """Define the torch.library ops once. Marked for Dynamo as torch.compiler's
    assume_constant_result does (below), so a first call under torch.compile runs it at
    trace time instead of tracing it."""
    global _OPS_READY
    if _OPS_READY:
        return True
    torch = _torch()
    lib = torch.library

    # Schemas spelled out: this module's annotations are strings (from __future__), which
    # custom_op's schema inference cannot resolve in a local scope.
    @lib.custom_op(
        f"{NAMESPACE}::attention_forward", mutates_args=(),
        schema="(Tensor q, Tensor k, Tensor v, bool is_causal, float scale, str causal_align,"
        " bool deterministic=False, int window_left=-1, int window_right=-1)"
        " -> (Tensor, Tensor)",
    )  # fmt: skip
    def attention_forward(q, k, v, is_causal, scale, causal_align, deterministic=False,
                          window_left=-1, window_right=-1):  # fmt: skip
        # deterministic is the backward's (setup_context keeps it); the forward always is
        window = None if window_left == window_right == -1 else (window_left, window_right)
        causal, band = _mask(q, k, is_causal, window, causal_align)
        split = _split(q, k, causal, causal_align)
        qp, kp, vp = _prepare(q, k, v, causal, causal_align)
        return _forward(qp, kp, vp, causal, scale, q, split, band)

    @attention_forward.register_fake
    def _(q, k, v, is_causal, scale, causal_align, deterministic=False, window_left=-1,
          window_right=-1):  # fmt: skip
        b, h, n_q, _ = q.shape
        return _empty_out(torch, q), q.new_empty((b, h, n_q), dtype=torch.float32)

    @lib.custom_op(
        f"{NAMESPACE}::attention_backward", mutates_args=(),
        schema="(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor do, bool is_causal,"
        " float scale, str causal_align, bool deterministic=False, int window_left=-1,"
        " int window_right=-1) -> (Tensor, Tensor, Tensor)",
    )  # fmt: skip
    def attention_backward(q, k, v, o, lse, do, is_causal, scale, causal_align,
                           deterministic=False, window_left=-1, window_right=-1):  # fmt: skip
        window = None if window_left == window_right == -1 else (window_left, window_right)
        causal, band = _mask(q, k, is_causal, window, causal_align)
        n_k, split = k.shape[2], _split(q, k, causal, causal_align)
        q, k, v = _prepare(q, k, v, causal, causal_align)
        return _backward(q, k, v, o, lse, do, causal, scale, n_k, deterministic, split,
                         band=band)  # fmt: skip

    @attention_backward.register_fake
    def _(q, k, v, o, lse, do, is_causal, scale, causal_align, deterministic=False,
          window_left=-1, window_right=-1):  # fmt: skip
        window = None if window_left == window_right == -1 else (window_left, window_right)
        causal = _mask(q, k, is_causal, window, causal_align)[0]
        n_k = k.shape[2]  # the same strides as the real gradients (_key_grad)
        k, v = _seen_keys(q, k, v, causal, causal_align)
        return _empty_out(torch, q), _key_grad(torch, k, n_k)[0], _key_grad(torch, v, n_k)[0]

    def setup_context(ctx, inputs, output):
        q, k, v, is_causal, scale, causal_align, *rest = inputs
        deterministic = bool(rest[0]) if rest else False
        window = tuple(rest[1:]) if len(rest) == 3 else (-1, -1)
        if window != (-1, -1) and _mask(q, k, is_causal, window, causal_align)[1]:
            if not _grad_windows():
                raise ValueError(_NO_WINDOW_GRAD)
        ctx.save_for_backward(q, k, v, *output)
        ctx.mark_non_differentiable(output[1])  # LSE: saved for the backward, not an output
        ctx.args = (is_causal, scale, causal_align, deterministic, *window)

    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        grads = attention_backward(q, k, v, o, lse, do, *ctx.args)
        return *grads, None, None, None, None, None, None

    attention_forward.register_autograd(backward, setup_context=setup_context)
    _OPS_READY = True
    return True


_OPS_READY = False
_register_ops._dynamo_marked_constant = True  # type: ignore[attr-defined]


def torch_attention(
    q: Any, k: Any, v: Any, *, is_causal: bool = False, scale: float | None = None,
    enable_gqa: bool = False, causal_align: str = "top-left", deterministic: bool = False,
    window: tuple[int, int] | None = None,
):  # fmt: skip
    """softmax(Q Kᵀ · scale [causal mask]) V on torch tensors, differentiable in q, k and v.

    q: (batch, heads, N_q, d); k, v: (batch, kv_heads, N_k, d) with kv_heads = heads, or
    dividing it with ``enable_gqa=True``; float16 or bfloat16 CUDA tensors, d ∈ {64, 128}.
    scale defaults to 1/sqrt(d), as SDPA's. ``causal_align`` places the causal mask when
    N_q != N_k (module docstring). ``deterministic=True`` runs the backward in
    flash_attention_backward's deterministic mode (dQ added in a fixed order: bitwise
    repeatable gradients, a little slower); the forward is deterministic either way.
    ``window=(left, right)`` is FlashAttention's ``window_size`` (-1 = unbounded; with
    is_causal, right = 0), aligned as ``causal_align`` says: query row r sees keys
    r + off - left <= c <= r + off + right (compute/mask.py's meaning); each query block
    reads only the key tiles its window touches. With an input that needs a gradient a
    window needs a backward that takes it (module docstring), else it is refused. Returns a
    tensor shaped (batch, heads, N_q, d), typed as q, with q's strides when they are dense
    (module docstring), else contiguous.
    """
    torch = _torch()
    if torch.compiler.is_compiling():  # traced: checks in Python, then the library op
        scale = _checked_scale(torch, q, k, v, is_causal, scale, enable_gqa, causal_align,
                               window)  # fmt: skip
        band = _mask(q, k, bool(is_causal), window, causal_align)[1]
        if band and _needs_grad(torch, q, k, v) and not _grad_windows():
            raise ValueError(_NO_WINDOW_GRAD)
        _register_ops()
        op = getattr(torch.ops, NAMESPACE).attention_forward
        left, right = window if window is not None else (-1, -1)
        return op(q, k, v, bool(is_causal), scale, causal_align, bool(deterministic),
                  int(left), int(right))[0]  # fmt: skip
    # Eager: the checks' verdict is cached per signature (shapes, strides, dtypes, devices,
    # arguments), so a repeated call costs a dictionary look-up, not the checks (_Call).
    try:
        sig = _signature(q, k, v, is_causal, scale, enable_gqa, causal_align, window)
        call = _CALLS.get(sig)
    except (AttributeError, TypeError):  # not tensors, or an argument that is not hashable
        sig, call = None, None
    if call is None:
        scale = _checked_scale(torch, q, k, v, is_causal, scale, enable_gqa, causal_align,
                               window)  # fmt: skip
        call = _Call.of(torch, q, k, v, bool(is_causal), scale, causal_align, window)
        if sig is not None and len(_CALLS) < _CALLS_MAX:
            _CALLS[sig] = call
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        if call.band is not None and not _grad_windows():
            raise ValueError(_NO_WINDOW_GRAD)
        return _apply()(q, k, v, call, bool(deterministic))
    if (
        call.split or not call.in_place
        or q.data_ptr() % 16 or k.data_ptr() % 16 or v.data_ptr() % 16
    ):  # fmt: skip
        # No graph to record (inference), but two launches or a tensor to copy first.
        qp, kp, vp = _prepare(q, k, v, call.causal, causal_align)
        return _forward(qp, kp, vp, call.causal, call.scale, q, call.split, call.band)[0]
    # No graph to record and every tensor read in place: the launch and the outputs only.
    if call.keys < k.shape[2]:
        k, v = k[:, :, : call.keys], v[:, :, : call.keys]
    return _launch_forward(torch, q, k, v, call)[0]


def _signature(
    q: Any, k: Any, v: Any, is_causal: Any, scale: Any, gqa: Any, align: Any, window: Any
) -> tuple:  # fmt: skip
    """The key of an eager call's _Call in _CALLS: what the checks' verdict depends on."""
    return (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype,
            v.dtype, q.get_device(), k.get_device(), v.get_device(), is_causal, scale, gqa,
            align, window)  # fmt: skip


_NO_WINDOW_GRAD = (
    "window= runs in the forward only for now (the backward kernel takes no window): call "
    "it under torch.no_grad() or on inputs that need no gradient, or leave window unset"
)


def _needs_grad(torch: Any, q: Any, k: Any, v: Any) -> bool:
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def _checked_scale(
    torch: Any, q: Any, k: Any, v: Any, is_causal: Any, scale: Any, gqa: bool, align: str,
    window: Any = None,
) -> float:  # fmt: skip
    """The softmax scale after every check of the inputs (one sentence each, _check)."""
    _check(torch, q, k, v, is_causal, gqa, align, window)
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, not {scale}")
    return 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)


class _Call:
    """What one signature of checked inputs resolves to: the mask, scale and seen keys, O's
    and LSE's allocation, and whether every tensor's strides are read in place (then only
    the base addresses are checked per call)."""

    __slots__ = ("align", "band", "bwd", "causal", "device", "device_index", "dtype", "fast",
                 "in_place", "keys", "lse_shape", "o_shape", "o_stride", "plan", "scale",
                 "split")  # fmt: skip

    @classmethod
    def of(
        cls, torch: Any, q: Any, k: Any, v: Any, causal: bool, scale: float, align: str,
        window: Any = None,
    ):  # fmt: skip
        call = cls()
        causal, call.band = _mask(q, k, causal, window, align)
        call.causal, call.scale = causal, scale
        call.keys = _seen_keys(q, k, v, causal, align)[0].shape[2]
        call.split = _split(q, k, causal, align)
        call.in_place = all(
            readable(t.shape, t.stride(), 0) for t in (q, *_seen_keys(q, k, v, causal, align))
        )
        o = _empty_out(torch, q)
        call.o_shape, call.o_stride = tuple(o.shape), o.stride()
        call.dtype, call.device, call.device_index = q.dtype, q.device, q.get_device()
        call.plan = False  # the forward's torch_launch plan, looked up on first launch
        call.lse_shape = tuple(q.shape[:3])
        call.align = align
        # One launch on the caller's tensors (the autograd Function's fast path) and, for
        # its backward, a torch_backward.BackwardCall per upstream gradient's strides.
        call.fast = call.in_place and not call.split and call.keys == k.shape[2]
        call.bwd = {}
        return call


_CALLS: dict[tuple, _Call] = {}
_CALLS_MAX = 4096  # signatures remembered (a model has a handful; a sweep may have many)


def register_ops() -> None:
    """Define ``torch.ops.fa_explorer.attention_forward`` / ``attention_backward`` now (a
    first traced call does it too); for callers that use the ops directly."""
    _register_ops()
