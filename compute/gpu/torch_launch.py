"""The forward kernel launched on torch tensors with almost no host work per call.

``forward(q, k, v, causal, scale) -> (o, lse)`` runs the kernel variant that
``compute.gpu.flash.flash_attention`` would run on the same shapes, on torch's current CUDA
stream, and returns the output and the row log-sum-exp as torch tensors allocated by torch's
caching allocator. Its inputs are what the kernels read: contiguous (batch, heads, N, d)
CUDA tensors, float16 or bfloat16, 16-byte aligned, K and V with q's heads
(``compute.gpu.torch_op`` makes them so).

Where the host time goes and what is cached: flash_attention, called on CuPy views, does per
call the shape checks, the variant choice, three DLPack views and two back, CuPy allocations,
the TMA tensor maps and a CuPy stream object. Here the first call of a shape (dtype, device,
batch·heads, N_q, N_k, d, mask, scale) builds a plan through flash.py's own functions
(variant, grid, the tensor maps, the workspaces' sizes) and every later call only reads the
tensors' addresses, points the plan's four tensor-map copies at them
(``cuTensorMapReplaceAddress``, no re-encoding), allocates O, LSE and the zeroed
workspaces (ticket counters) through torch and launches on a cached stream object. A GPU test
checks the output bit for bit against flash_attention's on every branch the plan mirrors.

Imports neither torch nor CuPy until the first call.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class _Plan:
    """Everything a launch of one shape needs except the tensors' addresses."""

    fn: Any  # the CuPy kernel function
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    consts: tuple  # N_q, N_k, scale·log2(e), causal (numpy scalars, packed by CuPy)
    # ws only: the addresses of the plan's copies of the tensor maps of Q, K, V and O, and the
    # trailing arguments, each a numpy scalar or ("work", numel, torch dtype): a zeroed workspace
    maps: tuple = ()
    map_args: tuple = ()  # the maps as kernel arguments (pointers to the plan's copies)
    extra: tuple = ()
    keep: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


_PLANS: dict[tuple, _Plan | None] = {}
_STREAMS: dict[int, Any] = {}


def forward(
    q: Any, k: Any, v: Any, causal: bool, scale: float, o: Any = None, lse: Any = None
) -> tuple[Any, Any]:
    """(O, LSE) of the kernel on prepared tensors (module docstring): O contiguous like q,
    LSE float32 (batch, heads, N_q), written into `o` and `lse` when given (contiguous, of
    those shapes' sizes: the caller's own shapes, so that it returns no view)."""
    import torch

    if not q.is_cuda:
        raise ValueError(f"torch_attention runs on CUDA tensors; q is on {q.device}")
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    if o is None:
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if lse is None:
        lse = torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
    key = (q.dtype, q.device.index, b * h, n_q, n_k, d, causal, scale)
    plan = _PLANS.get(key, False)
    if plan is False:
        plan = _PLANS[key] = _make_plan(q, k, v, o, lse, causal, scale)
    if plan is None:  # nothing to compute (no head or no query row)
        return o, lse
    stream = _stream(torch, q.device.index)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())
    if not plan.maps:
        args = (*(np.uint64(p) for p in ptrs), np.uint64(lse.data_ptr()), *plan.consts)
        plan.fn(plan.grid, plan.block, args, shared_mem=plan.smem, stream=stream)
        return o, lse
    # Zeroed workspaces from torch's pool, held until the launch is queued; freed after, their
    # blocks go only to later work on this stream, which runs after the kernel.
    work = [torch.zeros(x[1], dtype=x[2], device=q.device) for x in plan.extra if type(x) is tuple]
    it = iter(work)
    extra = tuple(np.uint64(next(it).data_ptr()) if type(x) is tuple else x for x in plan.extra)
    replace_address = _replace_address_fn()
    with plan.lock:  # the maps are the plan's: point them at this call's tensors, launch
        for m, p in zip(plan.maps, ptrs, strict=True):
            rc = replace_address(m, p)
            if rc != 0:
                raise RuntimeError(f"cuTensorMapReplaceAddress failed with CUresult {rc}")
        args = (
            *plan.map_args, np.uint64(ptrs[3]), np.uint64(lse.data_ptr()), *plan.consts, *extra,
        )  # fmt: skip
        plan.fn(plan.grid, plan.block, args, shared_mem=plan.smem, stream=stream)
    return o, lse


def backward(
    q: Any, k: Any, v: Any, o: Any, do: Any, lse: Any, causal: bool, scale: float
) -> tuple[Any, Any, Any]:
    """(dQ, dK, dV) on prepared tensors through ``flash_attention_backward`` (its public
    function, whose launches the backward-kernel work is changing), on torch's current
    stream. The inputs go in as CuPy aliases of their memory (cupy_alias), not through
    DLPack: torch's DLPack export spends about 30 us per tensor on stream bookkeeping (six
    of them took 182 us of a 468 us backward call on the H200). The gradients, which CuPy
    allocates, come back through DLPack while CuPy's current stream is torch's, so that no
    cross-stream event is recorded."""
    import torch

    from .flash_backward import flash_attention_backward
    from .peers import torch_view

    if not q.is_cuda:
        raise ValueError(f"torch_attention runs on CUDA tensors; q is on {q.device}")
    with _stream(torch, q.device.index):
        grads = flash_attention_backward(
            *(cupy_alias(torch, t) for t in (q, k, v, o, do, lse)), causal=causal, scale=scale
        )
        return tuple(torch_view(torch, g) for g in grads)


def cupy_alias(torch: Any, t: Any) -> Any:
    """A CuPy array over a torch tensor's memory, no copy and no DLPack: the same shape and
    strides, bfloat16 as uint16 bits, the tensor kept alive by the array."""
    import cupy as cp

    dtype = _CUPY_DTYPES[str(t.dtype)]
    size = t.element_size()
    extent = (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))) * size
    mem = cp.cuda.UnownedMemory(t.data_ptr(), extent if t.numel() else 0, t, t.device.index)
    base = cp.cuda.MemoryPointer(mem, 0)
    return cp.ndarray(tuple(t.shape), dtype, base, strides=tuple(s * size for s in t.stride()))


_CUPY_DTYPES = {"torch.bfloat16": "uint16", "torch.float16": "float16", "torch.float32": "float32"}


def _stream(torch: Any, device: int) -> Any:
    """A CuPy stream object for torch's current stream on `device`, made once per stream."""
    get_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    ptr = get_raw(device) if get_raw else torch.cuda.current_stream(device).cuda_stream
    stream = _STREAMS.get(ptr)
    if stream is None:
        import cupy

        with warnings.catch_warnings():  # CuPy 14 prefers Stream.from_external (see torch_op)
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = _STREAMS[ptr] = cupy.cuda.ExternalStream(ptr)
    return stream


def _make_plan(q: Any, k: Any, v: Any, o: Any, lse: Any, causal: bool, scale: float):
    """The plan of flash_attention's launch on these shapes (None when it launches nothing),
    built by flash.py's own variant choice and _ws_launch on CuPy views of the tensors."""
    import cupy as cp
    import torch

    from . import flash
    from .peers import cupy_view

    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    if not (b * h and n_q):
        return None
    qc, kc, vc, oc = (cupy_view(torch, t.detach()) for t in (q, k, v, o))
    dt = flash._dtype_code(qc)
    # The variant adjustments of flash.flash_attention, in its order.
    cfg = flash.default_config(d, n_q, causal)
    if cfg.kernel == "ws" and n_k == 0:
        cfg = flash.WGMMA_CONFIGS[d]
    grid = (-(-n_q // cfg.block_m), b * h, 1)
    consts = (
        np.int32(n_q), np.int32(n_k), np.float32(scale * flash._LOG2E), np.int32(int(causal)),
    )  # fmt: skip
    fn = flash._function(cfg, dt)
    plan = _Plan(fn, grid, (cfg.threads, 1, 1), cfg.smem_bytes(), consts)
    if cfg.kernel != "ws":
        return plan
    with cp.cuda.Device(q.device.index):
        grid, _, extra, maps = flash._ws_launch(cfg, grid, qc, kc, vc, oc, causal)
    from .tma import _TensorMap, kernel_arg

    plan.grid = tuple(int(g) for g in grid)
    copies = []
    for m in maps[:4]:  # Q, K, V, O
        copy = _TensorMap()
        ctypes.memmove(ctypes.addressof(copy), ctypes.addressof(m), ctypes.sizeof(copy))
        copies.append(copy)
    plan.maps = tuple(ctypes.addressof(m) for m in copies)
    plan.map_args = tuple(kernel_arg(m) for m in copies)
    plan.keep = copies  # the maps' storage, which map_args point into
    dtypes = {"int32": torch.int32, "float32": torch.float32}
    plan.extra = tuple(
        ("work", int(x.size), dtypes[str(x.dtype)]) if isinstance(x, cp.ndarray) else x
        for x in extra
    )
    return plan


@functools.cache
def _replace_address_fn() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapReplaceAddress
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return fn
