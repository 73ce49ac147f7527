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

import ctypes
import functools
import threading
import warnings
from typing import Any

_PLANS: dict[tuple, Any] = {}
_PLANS_LOCK = threading.Lock()
_DTYPE_CODES = {"torch.float16": 0, "torch.bfloat16": 1}
TICKET_SLOTS = 1024  # zeroed ticket counters per stream, handed out one per launch
# (device, stream handle) -> [int32 tensor of TICKET_SLOTS, next slot, its address]; the
# device too, since the legacy default stream's handle is 0 on every device
_TICKETS: dict[tuple, list] = {}
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
    plan = forward_plan(q, k, v, o, causal, scale, config, band)
    if plan is not None:  # None: nothing to compute (no head or no query row)
        run_forward(torch, plan, device, (q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                          o.data_ptr(), lse.data_ptr()))  # fmt: skip
    return o, lse


def forward_plan(
    q: Any, k: Any, v: Any, o: Any, causal: bool, scale: float, config: Any = None,
    band: tuple[int, int] | None = None,
) -> Any:  # fmt: skip
    """The cached ``flash_launch.Launch`` of ``forward``'s arguments' signature (built on
    first use), or None where it launches nothing; for a caller that keeps it per signature
    of its own (torch_op's eager calls) and launches it with ``run_forward``."""
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), o.stride(), q.dtype,
           q.get_device(), causal, scale, config, band)  # fmt: skip
    plan = _PLANS.get(key, False)
    if plan is False:
        ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr())
        plan = _make_plan(q, k, v, o, ptrs, causal, scale, config, band)
        with _PLANS_LOCK:
            _PLANS[key] = plan
    return plan


def run_forward(torch: Any, plan: Any, device: int, ptrs: tuple) -> None:
    """One launch of `plan` (forward_plan's) on Q, K, V, O, LSE at these addresses, on
    torch's current stream of `device`, with a ticket counter where the variant wants one."""
    stream = torch._C._cuda_getCurrentRawStream(device)
    if plan.needs_tickets:
        tickets, _held = _ticket(torch, device, stream)  # held until the launch is queued
        plan.run(ptrs, tickets, stream)
    else:
        plan.run(ptrs, 0, stream)


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
        pool = _TICKETS.get((device, stream))
        if pool is None:
            counters = torch.zeros(TICKET_SLOTS, dtype=torch.int32, device=device)
            pool = _TICKETS[device, stream] = [counters, 0, counters.data_ptr()]
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
    band: tuple[int, int] | None = None,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """(dQ, dK, dV) of ``flash_attention_backward``'s kernels on torch's current stream, on
    readable tensors (K/V heads dividing q's: the kernel takes the group) written into
    `out` (readable tensors of q's, k's and v's shapes; by default new contiguous ones).
    `band` (lo, hi): the forward's sliding window (``forward``'s band; `causal` then False),
    for a backward that takes one (``backward_takes_band``).

    The first call of a signature (shapes, strides, dtype, device, mask, scale, mode) builds
    a `_BackwardPlan`: the three kernels of the ws backward (preprocess, main, dQ
    postprocess), their grids, the strides' layout, the tensor maps of Q, K, V and dO (K
    and V may have a head stride of 0, one K/V head broadcast over a group of query heads:
    _kv_readable) and the kernels' parameter blocks in ctypes storage; a later call
    re-points the maps into the stream's cached workspace (_workspace; the preprocess
    zeroes its dQ accumulator and tickets) and queues three ``cuLaunchKernel`` calls: nothing allocated but what torch allocates for the
    gradients, no CuPy objects, no synchronisation. What the plan does not take (no query
    or key rows, a GPU that is not Hopper, a backward mode set by hand, a tensor the kernels
    cannot address) goes through ``flash_attention_backward`` on CuPy aliases of the
    tensors (cupy_alias), which says what is wrong in one sentence."""
    torch = _torch()
    if not q.is_cuda:
        raise ValueError(f"torch_attention runs on CUDA tensors; q is on {q.device}")
    if out is None:
        out = (torch.empty(q.shape, dtype=q.dtype, device=q.device),
               *(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (k, v)))  # fmt: skip
    dq, dk, dv = out
    plan = backward_plan(q, k, v, o, do, lse, out, causal, scale, deterministic, band)
    if plan is not None:
        ptrs = [t.data_ptr() for t in (q, k, v, o, do, lse, dq, dk, dv)]
        if not any(p % 16 for p in ptrs):  # the plan's tensors are 16-byte aligned
            plan.run(torch, ptrs)
            return tuple(out)
    from .flash_backward import flash_attention_backward

    # CuPy's path takes no broadcast heads: K and V repeated (only where the plan cannot run).
    k, v = (t.contiguous() if t.shape[1] > 1 and t.stride(1) == 0 else t for t in (k, v))
    extra = {} if band is None else {"band": band}  # (a backward without bands takes none)
    with _stream(torch, q.device.index):
        flash_attention_backward(
            *(cupy_alias(torch, t) for t in (q, k, v, o, do, lse)), causal=causal, scale=scale,
            deterministic=deterministic, out=tuple(cupy_alias(torch, t) for t in out), **extra,
        )  # fmt: skip
    return tuple(out)


def backward_plan(
    q: Any, k: Any, v: Any, o: Any, do: Any, lse: Any, out: tuple[Any, Any, Any],
    causal: bool, scale: float, deterministic: bool = False,
    band: tuple[int, int] | None = None,
) -> Any:  # fmt: skip
    """The cached `_BackwardPlan` of these tensors' signature (``backward``'s arguments),
    built on first use; None where flash_attention_backward's own path must run. Its
    ``run(torch, ptrs)`` takes the nine tensors' addresses (Q K V O dO LSE dQ dK dV) of any
    tensors of the same signature, 16-byte aligned."""
    torch = _torch()
    dq, dk, dv = out
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), o.stride(), do.stride(),
           lse.stride(), dq.stride(), dk.stride(), dv.stride(), q.dtype, q.device.index,
           causal, scale, deterministic, band)  # fmt: skip
    plan = _BWD_PLANS.get(key, False)
    if plan is False:
        plan = _backward_plan(torch, q, k, v, o, do, lse, out, causal, scale, deterministic, band)
        with _PLANS_LOCK:
            _BWD_PLANS[key] = plan
    return plan


_BWD_PLANS: dict[tuple, Any] = {}


@functools.cache
def backward_takes_band() -> bool:
    """Whether ``flash_attention_backward`` takes a sliding window (``band=``; issue 30)."""
    import inspect

    from .flash_backward import flash_attention_backward

    return "band" in inspect.signature(flash_attention_backward).parameters


def _backward_plan(torch, q, k, v, o, do, lse, out, causal, scale, deterministic, band=None):
    """The `_BackwardPlan` of these tensors, or None where flash_attention_backward's own
    path must run (it handles, or refuses in one sentence, what the plan does not take)."""
    from . import flash_backward as fb
    from .flash_launch import is_hopper, readable

    d = q.shape[3]
    if deterministic:
        mode = fb.DETERMINISTIC_MODE
    else:
        mode = fb.default_mode(d, causal, band) if d in fb.DEFAULT_MODES else None
    if fb.DEFAULT_MODE is not None or mode not in fb.WS_MODES:  # a mode chosen by hand
        return None
    if band is not None and (causal or not hasattr(fb._Layout, "lo")):
        return None  # flash_attention_backward says what is wrong
    b, h, n_q, d = q.shape
    ts = (q, k, v, o, do, *out)
    if not (b * h and n_q and k.shape[2]) or lse.dtype != torch.float32:
        return None
    if not lse.is_contiguous() or any(t.dtype != q.dtype for t in ts):
        return None
    if str(q.dtype) not in _DTYPE_CODES or d not in (64, 128) or h % k.shape[1]:
        return None
    if not all(readable(t.shape, t.stride(), t.data_ptr()) for t in (q, o, do, *out)):
        return None
    if not all(_kv_readable(t) for t in (k, v)):
        return None
    import cupy as cp

    # Built in the backward, on autograd's device thread, where no CUDA context need be
    # current yet (the first backward of a process, if ours is its first kernel): encoding
    # the tensor maps then fails with CUDA_ERROR_INVALID_CONTEXT. cupy's Device() does not
    # make it current when the thread's device number already matches; setDevice does.
    cp.cuda.runtime.setDevice(q.device.index)
    with cp.cuda.Device(q.device.index):
        if not is_hopper():
            return None
        return _BackwardPlan(q, k, v, o, do, out, causal, scale, mode, band)


def _kv_readable(t: Any) -> bool:
    """Whether the plan's tensor maps read K or V in place: readable (flash_launch), or a
    head stride of 0 (one K/V head broadcast over a group of query heads, torch_op's spread
    GQA backward) with the other strides readable, where the driver encodes such a map
    (heads_broadcast_ok)."""
    from .flash_launch import readable

    sb, sh, sr, sd = t.stride()
    if readable(t.shape, (sb, sh, sr, sd), t.data_ptr()):
        return True
    return sh == 0 and readable(t.shape, (sb, 8, sr, sd), t.data_ptr()) and heads_broadcast_ok()


@functools.cache
def heads_broadcast_ok() -> bool:
    """Whether cuTensorMapEncodeTiled takes a head stride of 0 (K/V heads broadcast by the
    copy engine instead of repeated in memory); probed once on a map that is never read."""
    torch = _torch()
    if not torch.cuda.is_available():
        return False
    torch.cuda.init()  # the driver initialised, so a refusal is the stride's
    try:
        from .tma import _encode

        _encode(1 << 20, 128, 256, 4, 2, (128, 0, 256 * 128), 64)
    except (OSError, RuntimeError):  # no driver, or a driver that refuses the stride
        return False
    return True


class _BackwardPlan:
    """One signature's three ws-backward launches (flash_backward._backward_ws's, without
    CuPy per call): parameters in ctypes storage made once, addresses rewritten per call."""

    def __init__(self, q, k, v, o, do, out, causal, scale, mode, band=None) -> None:
        from . import flash_backward as fb
        from .flash_launch import (
            _INVALID_CONTEXT,
            LOG2E,
            _launch_fn,
            _replace_address_fn,
            normal_strides,
        )
        from .tma import _encode, _TensorMap, tensor_map

        b, h, n_q, d = q.shape
        hk, n_k = k.shape[1], k.shape[2]
        self.mode = mode  # a ws mode (_backward_plan's choice)
        pre, main, post = fb._functions(_DTYPE_CODES[str(q.dtype)], d, mode, causal)
        n_pad, q_rows = fb.ws_rows(mode, n_q)
        self.n_pad = n_pad
        nblk = n_pad // fb.BLOCK_QUERIES
        tickets = b * h * nblk * (d // 64) if mode in fb.TICKET_MODES else 1
        self.acc_floats = b * h * n_pad * d  # the dQ accumulator, then the int32 tickets
        # L2 and D after them, each at a 256-byte boundary: the main kernel bulk-copies them
        # (16-byte aligned sources), and n_pad is a whole number of 64-row blocks.
        self.zeroed = self.acc_floats + -(-tickets // 64) * 64
        self.rows = b * h * n_pad
        self.work_floats = self.zeroed + 2 * self.rows
        layout = self.layout = fb._Layout()
        strided = (o, do, *out)
        layout.strides[:] = [s for t in strided for s in normal_strides(t.shape, t.stride())]
        layout.heads, layout.group = h, h // hk
        if hasattr(layout, "lo"):  # a layout that carries the mask as a band (issue 30's)
            from .flash_launch import BAND_OPEN

            open_ = (-BAND_OPEN, n_k - n_q if causal else BAND_OPEN)
            layout.lo, layout.hi = band if band is not None else open_
        u64, i32, f32 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_float
        # Pointer slots, rewritten per call: Q K V O dO LSE dQ dK dV L2 D dQacc tickets.
        self.slots = slots = [u64() for _ in range(13)]
        maps = []
        for t, rows in ((q, q_rows), (k, fb.BLOCK_KEYS), (v, fb.BLOCK_KEYS),
                        (do, q_rows)):  # fmt: skip
            if t.shape[1] > 1 and t.stride(1) == 0:  # K/V heads broadcast (_kv_readable)
                sb = t.stride(0) if t.shape[0] > 1 else t.shape[2] * t.stride(2)
                m = _encode(t.data_ptr(), d, t.shape[2], t.shape[1], t.shape[0],
                            (t.stride(2), 0, sb), rows)  # fmt: skip
            else:
                m = tensor_map(t.data_ptr(), t.shape, normal_strides(t.shape, t.stride()), rows)
            copy = _TensorMap()  # the cache's maps are shared: re-point a copy of its own
            ctypes.memmove(ctypes.addressof(copy), ctypes.addressof(m), ctypes.sizeof(copy))
            maps.append(copy)
        self.maps = maps
        self.map_ptrs = tuple(ctypes.addressof(m) for m in maps)
        rows = self.rows
        post_blocks, post_nblk = fb.post_launch(mode, b * h, n_q, n_pad, d)
        s = slots
        # The preprocess zeroes the accumulator and (DET) the tickets: no memset before it.
        self.no_tickets = ctypes.c_uint64(0)
        zero_tickets = s[12] if mode in fb.TICKET_MODES else self.no_tickets
        pre_args = (s[3], s[4], s[5], s[9], s[10], s[11], zero_tickets, i32(n_q), i32(n_pad),
                    layout)  # fmt: skip
        main_args = (*maps, s[9], s[10], s[11], s[7], s[8], s[12], i32(n_q), i32(n_k),
                     i32(n_pad), f32(scale), f32(scale * LOG2E), i32(int(causal)), layout)  # fmt: skip
        post_args = (s[11], s[6], i32(n_q), i32(post_nblk), f32(scale), layout)
        launch = _launch_fn()
        # Looked up here, not per call: an import statement in run() costs about a us.
        self.replace, self.invalid_context = _replace_address_fn(), _INVALID_CONTEXT
        self.launches = []
        for fn, grid, block, smem, args in (
            (pre, (rows // fb.BLOCK_QUERIES, 1, 1), 256, 0, pre_args),
            (main, (-(-n_k // fb.BLOCK_KEYS), b * hk, 1), fb.WS_THREADS, fb.smem_bytes(d, mode),
             main_args),
            (post, (post_blocks, 1, 1), 256, 0, post_args),  # a block per accumulator chunk
        ):  # fmt: skip
            params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
            call = functools.partial(launch, int(fn.kernel.ptr), *grid, block, 1, 1, smem)
            self.launches.append((call, params, args))
        self.device = q.device.index

    def run(self, torch: Any, ptrs: list[int]) -> None:
        """The three launches on tensors at these addresses (Q K V O dO LSE dQ dK dV) on
        torch's current stream, with the stream's workspace (_workspace): the dQ accumulator
        and tickets, then L2 and D (all written whole by the preprocess)."""
        device = self.device
        stream = torch._C._cuda_getCurrentRawStream(device)
        replace = self.replace
        with _WORK_LOCK:  # one stream's workspace: its launches queued together
            work = _workspace(torch, device, stream, self.work_floats)
            base = work.data_ptr()
            l2, dsum = base + 4 * self.zeroed, base + 4 * (self.zeroed + self.rows)
            ptrs += [l2, dsum, base, base + 4 * self.acc_floats]  # dQacc, then the tickets
            for m, p in zip(self.map_ptrs, (ptrs[0], ptrs[1], ptrs[2], ptrs[4]), strict=True):
                if replace(m, p) != 0:
                    raise RuntimeError("cuTensorMapReplaceAddress failed on the backward's maps")
            for slot, p in zip(self.slots, ptrs, strict=True):
                slot.value = p
            for call, params, _args in self.launches:
                rc = call(stream, params, None)
                if rc == self.invalid_context:  # a thread that never made the device current
                    import cupy

                    cupy.cuda.runtime.setDevice(device)
                    rc = call(stream, params, None)
                if rc != 0:
                    raise RuntimeError(f"cuLaunchKernel of the backward failed with CUresult {rc}")


_WORK: dict[tuple, Any] = {}  # (device, stream) -> float32 workspace (grown, never shrunk)
_WORK_LOCK = threading.Lock()


def _workspace(torch: Any, device: int, stream: int, floats: int) -> Any:
    """A float32 tensor of at least `floats` elements for one backward on `stream`: the
    stream's cached buffer (kernels on one stream run in order, so one call's use of it ends
    before the next call's zeroing starts), or a fresh one while the stream is captured
    into a CUDA graph (the graph then owns its own)."""
    if torch.cuda.is_current_stream_capturing():
        return torch.empty((floats,), dtype=torch.float32, device=device)
    work = _WORK.get((device, stream))
    if work is None or work.numel() < floats:
        work = torch.empty((floats,), dtype=torch.float32, device=device)
        _WORK[device, stream] = work
    return work


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
