"""The forward kernel launched on torch tensors with almost no host work per call.

``forward(q, k, v, causal, scale, o, lse) -> (o, lse)`` runs the kernel variant that
``compute.gpu.flash.flash_attention`` would run on the same shapes, on torch's current CUDA
stream. Its inputs are what the kernels read in place (``flash_launch.readable``: a unit
last dimension, 16-byte aligned, the other strides in whole 16 bytes; ``compute.gpu.torch_op``
copies anything else): (batch, heads, N, d) tensors at any such strides, so SDPA's views of
(batch, N, heads, d) memory are not copied, and K and V with heads dividing q's (GQA: query
head h reads K/V head h // group inside the kernel, nothing repeated).

Where the host time goes and what is cached: the first call of a shape (dtype, device,
batch, heads, K/V heads, N_q, N_k, d, the four tensors' strides, mask, scale) builds a
``flash_launch.Launch`` through the forward's internal API (``flash_select.launch_config``,
``flash_launch.prepare``: variant, grid, the strides' layout, the tensor maps, the
kernel's parameter block); every later call reads the tensors' addresses, takes a zeroed
ticket counter from the stream's pool when the variant wants one (``_ticket``), and calls
``Launch.run``, which re-points the maps (no re-encoding) and calls ``cuLaunchKernel`` on
torch's raw current stream: no CuPy stream object, no per-argument packing. A GPU test
checks the output bit for bit against flash_attention's on every branch.

Imports neither torch nor CuPy until the first call.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

_PLANS: dict[tuple, Any] = {}
_PLANS_LOCK = threading.Lock()
_DTYPE_CODES = {"torch.float16": 0, "torch.bfloat16": 1}
TICKET_SLOTS = 1024  # zeroed ticket counters per stream, handed out one per launch
_TICKETS: dict[int, list] = {}  # stream handle -> [int32 tensor of TICKET_SLOTS, next slot]
_TICKETS_LOCK = threading.Lock()
_TORCH: list = []  # the torch module, once imported


def _torch() -> Any:
    if not _TORCH:
        import torch

        _TORCH.append(torch)
    return _TORCH[0]


def forward(
    q: Any, k: Any, v: Any, causal: bool, scale: float, o: Any = None, lse: Any = None,
    config: Any = None, band: tuple[int, int] | None = None,
) -> tuple[Any, Any]:  # fmt: skip
    """(O, LSE) of the kernel on readable tensors (module docstring): O written into `o`
    (readable, q's shape; by default a new tensor with q's strides when they are dense),
    LSE float32 contiguous (batch, heads, N_q) into `lse`; `config` (a flash Config)
    overrides the variant, as flash_attention's does (for tests and benchmarks). `band`
    (lo, hi): query row r sees keys r + lo <= c <= r + hi (a sliding window with its
    alignment folded in, flash_launch.BAND_OPEN for an unbounded side; `causal` is then
    ignored), run by a ':band' variant of the ws kernel, which reads only the key tiles each
    query block's band touches."""
    torch = _torch()
    device = q.get_device()
    if device < 0:
        raise ValueError(f"torch_attention runs on CUDA tensors; q is on {q.device}")
    if o is None:
        o = torch.empty_like(q)
    if lse is None:
        b, h, n_q, _ = q.shape
        lse = torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), o.stride(), q.dtype, device,
           causal, scale, config, band)  # fmt: skip
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr())
    plan = _PLANS.get(key, False)
    if plan is False:
        plan = _make_plan(q, k, v, o, ptrs, causal, scale, config, band)
        with _PLANS_LOCK:
            _PLANS[key] = plan
    if plan is None:  # nothing to compute (no head or no query row)
        return o, lse
    stream = torch._C._cuda_getCurrentRawStream(device)
    if plan.needs_tickets:
        tickets, _held = _ticket(torch, device, stream)  # held until the launch is queued
        plan.run((*ptrs, o.data_ptr(), lse.data_ptr()), tickets, stream)
    else:
        plan.run((*ptrs, o.data_ptr(), lse.data_ptr()), 0, stream)
    return o, lse


def _ticket(torch: Any, device: int, stream: int) -> tuple[int, Any]:
    """(address, owner) of a zeroed int32 ticket counter for one persistent launch on
    `stream`: the next unused
    slot of the stream's pool, zeroed in one fill on the stream when the pool is spent (the
    fill runs after every kernel that used a slot, in stream order), so a launch queues no
    fill kernel of its own. While the stream is captured into a CUDA graph the counter is a
    fresh zeroed tensor instead (its fill is captured too, so each replay starts at zero)."""
    if torch.cuda.is_current_stream_capturing():
        fresh = torch.zeros(1, dtype=torch.int32, device=device)
        return fresh.data_ptr(), fresh
    with _TICKETS_LOCK:  # two threads on one stream never get one slot
        pool = _TICKETS.get(stream)
        if pool is None:
            counters = torch.zeros(TICKET_SLOTS, dtype=torch.int32, device=device)
            pool = _TICKETS[stream] = [counters, 0, counters.data_ptr()]
        elif pool[1] == TICKET_SLOTS:
            pool[0].zero_()
            pool[1] = 0
        slot = pool[1]
        pool[1] = slot + 1
    return pool[2] + 4 * slot, pool[0]


def _make_plan(
    q: Any, k: Any, v: Any, o: Any, ptrs: tuple, causal: bool, scale: float, config: Any,
    band: tuple[int, int] | None = None,
):  # fmt: skip
    """The Launch flash_attention would make on these shapes and strides (None when it
    launches nothing); with a band, the ':band' variant's."""
    import cupy as cp

    from .flash_launch import is_hopper, normal_strides, prepare
    from .flash_select import launch_config

    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    if not (b * h and n_q):
        return None
    with cp.cuda.Device(q.device.index):
        if band is not None and not is_hopper():
            raise ValueError(
                "sliding windows run on the ws kernel, which needs an sm_90 (Hopper) GPU; "
                "leave window unset on this GPU"
            )
        cfg = launch_config(d, n_q, n_k, causal, config, band=band is not None)
        if not cfg.band:  # no key at all (launch_config): every row sees nothing anyway
            band = None
        strides = tuple(normal_strides(t.shape, t.stride()) for t in (q, k, v, o))
        return prepare(
            cfg, _DTYPE_CODES[str(q.dtype)], (b, h, n_q, d), k.shape[1], n_k, strides, ptrs,
            scale, causal and band is None, band,
        )  # fmt: skip


def backward(
    q: Any, k: Any, v: Any, o: Any, do: Any, lse: Any, causal: bool, scale: float,
    out: tuple[Any, Any, Any] | None = None, deterministic: bool = False,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """(dQ, dK, dV) through ``flash_attention_backward`` on torch's current stream, on
    readable tensors (K/V heads dividing q's: the kernel takes the group) written into
    `out` (readable tensors of q's, k's and v's shapes; by default new contiguous ones).
    Tensors go in as CuPy aliases of their memory (cupy_alias), not through DLPack: torch's
    DLPack export spends about 30 us per tensor on stream bookkeeping (six of them took
    182 us of a 468 us backward call on the H200)."""
    torch = _torch()
    from .flash_backward import flash_attention_backward

    if not q.is_cuda:
        raise ValueError(f"torch_attention runs on CUDA tensors; q is on {q.device}")
    if out is None:
        out = (torch.empty(q.shape, dtype=q.dtype, device=q.device),
               *(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (k, v)))  # fmt: skip
    with _stream(torch, q.device.index):
        flash_attention_backward(
            *(cupy_alias(torch, t) for t in (q, k, v, o, do, lse)), causal=causal, scale=scale,
            deterministic=deterministic, out=tuple(cupy_alias(torch, t) for t in out),
        )  # fmt: skip
    return tuple(out)


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


_STREAMS: dict[int, Any] = {}


def _stream(torch: Any, device: int) -> Any:
    """A CuPy stream object for torch's current stream on `device`, made once per stream
    (the backward runs through CuPy's launches)."""
    ptr = torch._C._cuda_getCurrentRawStream(device)
    stream = _STREAMS.get(ptr)
    if stream is None:
        import cupy

        # CuPy 14 deprecates ExternalStream for Stream.from_external, which wants the CUDA
        # stream protocol that not every torch version's stream has; the pointer works with both.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = _STREAMS[ptr] = cupy.cuda.ExternalStream(ptr)
    return stream
