"""The peers the tensor-core kernel is compared with: torch SDPA pinned to one backend, and
FlashAttention-4 where it is installed.

``sdpa(backend)`` returns ``fn(q, k, v, causal) -> out`` on the harness's CuPy arrays,
shaped (batch*heads, N, d), handed to torch through DLPack without a copy (bfloat16 as
its uint16 bits, viewed as torch.bfloat16) and the output handed back the same way. torch
is imported on first use only: the GPU machine has it, a desktop install need not.
``sdpa_backward(backend)`` is the same for the backward pass (torch autograd through SDPA).
``fa4()`` and ``fa4_backward()`` are the same for FA4 (``flash_attn.cute.flash_attn_func``,
its CuTe DSL sm90 path on Hopper), which takes (batch, N, heads, d): it gets (1, N, BH, d)
views of the same memory (strided, no copy; it reads any 16-byte aligned layout), and its
results come back as (BH, N, d) views. ``fa4_refusal()`` says why FA4 cannot run here, or
None; ``peer(name)`` / ``peer_backward(name)`` pick any of them by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

PEERS: dict[str, str] = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION"}
FA4 = "fa4"  # a peer where flash_attn.cute imports (bench --peers adds it then)


def torch_view(torch: Any, a: Any) -> Any:
    """The torch view of a CuPy array (uint16 bits as bfloat16), no copy."""
    import cupy

    if a.dtype == cupy.uint16:  # bfloat16 bits
        return torch.from_dlpack(a.view(cupy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


def cupy_view(torch: Any, t: Any) -> Any:
    """The CuPy view of a CUDA tensor (bfloat16 as uint16 bits), no copy; DLPack refuses a
    tensor that requires grad, so pass `t.detach()` (it shares the memory)."""
    import cupy

    if t.dtype == torch.bfloat16:
        return cupy.from_dlpack(t.view(torch.int16)).view(cupy.uint16)
    return cupy.from_dlpack(t)


def sdpa(name: str) -> Callable[..., Any]:
    """The SDPA backend `name` (a key of PEERS) as fn(q, k, v, causal) on (BH, N, d) arrays."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, PEERS[name])

    def fn(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
        if causal and q.shape[1] != k.shape[1]:
            raise ValueError(
                "SDPA aligns its causal mask top-left, this project bottom-right: "
                "peers are compared at N_q = N_k only."
            )
        tq, tk, tv = (torch_view(torch, x)[None] for x in (q, k, v))
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        return cupy_view(torch, out[0].contiguous())

    return fn


def sdpa_backward(name: str) -> Callable[..., Any]:
    """The SDPA backend `name`'s backward as fn(q, k, v, do, causal) -> (dq, dk, dv) on
    (BH, N, d) arrays. ``fn.prepare(q, k, v, do, causal)`` runs the forward once and returns
    a zero-argument callable that runs only the backward (``torch.autograd.grad`` with
    retain_graph, the graph built once) and returns torch's gradients: what a timer wraps."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, PEERS[name])

    def prepare(q: Any, k: Any, v: Any, do: Any, causal: bool = False) -> Callable[[], Any]:
        if causal and q.shape[1] != k.shape[1]:
            raise ValueError(
                "SDPA aligns its causal mask top-left, this project bottom-right: "
                "peers are compared at N_q = N_k only."
            )
        tq, tk, tv = (torch_view(torch, x)[None].detach().requires_grad_() for x in (q, k, v))
        tdo = torch_view(torch, do)[None]
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

        def run() -> Any:
            with sdpa_kernel([backend]):
                return torch.autograd.grad(out, (tq, tk, tv), tdo, retain_graph=True)

        return run

    def fn(q: Any, k: Any, v: Any, do: Any, causal: bool = False) -> tuple[Any, Any, Any]:
        grads = prepare(q, k, v, do, causal)()
        return tuple(cupy_view(torch, g[0].contiguous()) for g in grads)

    fn.prepare = prepare  # type: ignore[attr-defined]
    return fn


@functools.cache
def fa4_refusal() -> str | None:
    """Why FA4 cannot be timed here (one sentence), or None where flash_attn.cute imports."""
    try:
        from flash_attn.cute import flash_attn_func  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install raising anything on import
        first = (str(exc).splitlines() or [""])[0]
        return f"FA4 (flash_attn.cute) is not importable here ({type(exc).__name__}: {first})"
    return None


def _fa4_views(torch: Any, *arrays: Any) -> list[Any]:
    """(BH, N, d) CuPy arrays as FA4's (1, N, BH, d): views of the same memory."""
    return [torch_view(torch, a)[None].transpose(1, 2) for a in arrays]


def _from_fa4(torch: Any, t: Any) -> Any:
    """FA4's (1, N, BH, d) result as a (BH, N, d) CuPy view."""
    return cupy_view(torch, t.detach().transpose(1, 2)[0])


def _fa4_call(func: Any, tq: Any, tk: Any, tv: Any, causal: bool) -> Any:
    out = func(tq, tk, tv, causal=causal)
    return out[0] if isinstance(out, tuple) else out  # (out, lse) in some versions


def fa4() -> Callable[..., Any]:
    """FA4's forward as fn(q, k, v, causal) on (BH, N, d) arrays (its causal mask is
    bottom-right aligned, as ours); ImportError with fa4_refusal()'s sentence if absent."""
    reason = fa4_refusal()
    if reason is not None:
        raise ImportError(reason)
    import torch
    from flash_attn.cute import flash_attn_func

    def fn(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
        return _from_fa4(torch, _fa4_call(flash_attn_func, *_fa4_views(torch, q, k, v), causal))

    return fn


def fa4_backward() -> Callable[..., Any]:
    """FA4's backward as fn(q, k, v, do, causal) -> (dq, dk, dv) on (BH, N, d) arrays, with
    ``fn.prepare`` as sdpa_backward's (the graph built once, the backward alone timed)."""
    reason = fa4_refusal()
    if reason is not None:
        raise ImportError(reason)
    import torch
    from flash_attn.cute import flash_attn_func

    def prepare(q: Any, k: Any, v: Any, do: Any, causal: bool = False) -> Callable[[], Any]:
        tq, tk, tv = (t.detach().requires_grad_() for t in _fa4_views(torch, q, k, v))
        (tdo,) = _fa4_views(torch, do)
        out = _fa4_call(flash_attn_func, tq, tk, tv, causal)

        def run() -> Any:
            return torch.autograd.grad(out, (tq, tk, tv), tdo, retain_graph=True)

        return run

    def fn(q: Any, k: Any, v: Any, do: Any, causal: bool = False) -> tuple[Any, Any, Any]:
        return tuple(_from_fa4(torch, g) for g in prepare(q, k, v, do, causal)())

    fn.prepare = prepare  # type: ignore[attr-defined]
    return fn


def peer(name: str) -> Callable[..., Any]:
    """The forward of peer `name` (a key of PEERS, or FA4) as fn(q, k, v, causal)."""
    return fa4() if name == FA4 else sdpa(name)


def peer_backward(name: str) -> Callable[..., Any]:
    """The backward of peer `name` (a key of PEERS, or FA4), as sdpa_backward's."""
    return fa4_backward() if name == FA4 else sdpa_backward(name)


def peak_torch_bytes(fn: Callable[[], Any]) -> tuple[int, int]:
    """(peak bytes torch's allocator held during fn(), bytes of its result), like peak_pool_bytes."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    out_bytes = int(out.nbytes)
    del out
    return int(peak), out_bytes
