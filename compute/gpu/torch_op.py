"""`torch_attention`: this project's tensor-core attention as a PyTorch op with autograd.

``torch_attention(q, k, v, *, is_causal=False, scale=None)`` takes what
``torch.nn.functional.scaled_dot_product_attention`` takes for the common case: CUDA tensors
shaped (batch, heads, N, d), float16 or bfloat16, d in {64, 128}, the same argument names.
The forward is ``compute.gpu.flash.flash_attention(..., return_lse=True)``; it saves Q, K, V,
O and the row log-sum-exp L (float32, batch × heads × N_q), and the backward is
``compute.gpu.flash_backward.flash_attention_backward`` on them, so the backward recomputes
P from L as FlashAttention does instead of storing it.

Tensors cross between torch and CuPy through DLPack: no copy, the same device memory
(bfloat16 as its 16-bit patterns, since CuPy has no bfloat16 dtype). Copies happen in one
place only: an input or upstream gradient that is not contiguous is made contiguous first
(``Tensor.contiguous()``, one copy of that tensor), since the kernels read row-major
(batch, heads, N, d) memory. The kernels run on torch's current CUDA stream.

Where SDPA differs: only 4-D inputs, d = d_v ∈ {64, 128}, no attn_mask, dropout or GQA; and
``is_causal`` is refused when N_q ≠ N_k, because SDPA aligns that mask top-left and this
kernel bottom-right (they agree when N_q = N_k).

torch is optional: importing this module (or ``compute.gpu``) never imports it; calling
``torch_attention`` without torch installed raises ImportError with one sentence.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

NO_TORCH = "torch_attention needs PyTorch: install torch (pip install torch) to use it."


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError(NO_TORCH) from exc
    return torch


def _check(torch: Any, q: Any, k: Any, v: Any, is_causal: bool) -> None:
    """One sentence (ValueError / TypeError) for any input the kernels do not take."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"torch_attention takes torch tensors; {name} is a {type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"torch_attention runs on CUDA tensors; {name} is on {t.device}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be shaped (batch, heads, N, d), not {tuple(t.shape)}")
    if not q.dtype == k.dtype == v.dtype or q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(
            f"q, k, v must all be float16 or all bfloat16, not {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not q.device == k.device == v.device:
        raise ValueError("q, k, v must be on one device")
    if is_causal and q.shape[2] != k.shape[2]:
        raise ValueError(
            "is_causal with N_q != N_k is refused: SDPA aligns that mask top-left, this kernel "
            "bottom-right (they agree only when N_q = N_k)"
        )


@functools.cache
def _function() -> Any:
    """The autograd Function, built on first use (its base class needs torch)."""
    torch = _torch()
    import cupy

    from .flash import flash_attention
    from .peers import cupy_view, torch_view

    def stream() -> Any:
        # The kernels join torch's current stream, so they order after the ops that made
        # their inputs and before those that read their outputs. CuPy 14 deprecates
        # ExternalStream for Stream.from_external, which wants the CUDA stream protocol that
        # not every torch version's stream has; the pointer works with both.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, is_causal: bool, scale: float | None):
            q, k, v = (t.contiguous() for t in (q, k, v))  # a copy only where not contiguous
            with cupy.cuda.Device(q.device.index), stream():
                o, lse = flash_attention(
                    *(cupy_view(torch, t.detach()) for t in (q, k, v)),
                    causal=is_causal, scale=scale, return_lse=True,
                )  # fmt: skip
            o_t, lse_t = torch_view(torch, o), torch.from_dlpack(lse)
            ctx.save_for_backward(q, k, v, o_t, lse_t)
            ctx.is_causal, ctx.scale = is_causal, scale
            return o_t

        @staticmethod
        def backward(ctx, do):
            from .flash_backward import flash_attention_backward

            q, k, v, o, lse = ctx.saved_tensors
            do = do.contiguous()  # e.g. the gradient of a transpose: one copy
            with cupy.cuda.Device(q.device.index), stream():
                grads = flash_attention_backward(
                    *(cupy_view(torch, t.detach()) for t in (q, k, v, o, do, lse)),
                    causal=ctx.is_causal, scale=ctx.scale,
                )  # fmt: skip
            dq, dk, dv = (torch_view(torch, g) for g in grads)
            return dq, dk, dv, None, None

    return FlashAttention


def torch_attention(q: Any, k: Any, v: Any, *, is_causal: bool = False, scale: float | None = None):
    """softmax(Q Kᵀ · scale [causal mask]) V on torch tensors, differentiable in q, k and v.

    q: (batch, heads, N_q, d); k, v: (batch, heads, N_k, d); float16 or bfloat16 CUDA
    tensors, d ∈ {64, 128}. scale defaults to 1/sqrt(d), as SDPA's. Returns a tensor shaped
    and typed as q. No copies except ``contiguous()`` of non-contiguous inputs (and of a
    non-contiguous upstream gradient in the backward).
    """
    torch = _torch()
    _check(torch, q, k, v, is_causal)
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, not {scale}")
    return _function().apply(q, k, v, bool(is_causal), scale)
