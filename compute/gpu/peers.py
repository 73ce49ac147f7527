"""The peers the tensor-core kernel is compared with: torch SDPA pinned to one backend.

``sdpa(backend)`` returns ``fn(q, k, v, causal) -> out`` on the harness's CuPy arrays,
shaped (batch*heads, N, d), handed to torch through DLPack without a copy (bfloat16 as
its uint16 bits, viewed as torch.bfloat16) and the output handed back the same way. torch
is imported on first use only: the GPU machine has it, a desktop install need not.
``sdpa_backward(backend)`` is the same for the backward pass (torch autograd through SDPA).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PEERS: dict[str, str] = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION"}


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
