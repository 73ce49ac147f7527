"""Compiling and launching the tensor-core forward's kernels (CuPy, NVRTC, TMA).

The internal API of the forward, shared by ``flash.flash_attention`` (CuPy arrays) and
``torch_launch`` (torch tensors):

* `compiled(cfg, dt)`: one variant's instantiation (cached);
* `readable(shape, strides, ptr)`: whether the kernels read or write a (batch, heads, N, d)
  tensor of these element strides in place (otherwise the caller copies it);
* `prepare(cfg, dt, ...)`: a `Launch`, everything one launch of one shape needs except the
  tensors' addresses: grid, the `FaFwdLayout` of the strides (kernels/flash_fwd_layout.cuh)
  and, for the ws kernel, the tensor maps of Q, K and V (tma.py);
* `Launch.run(ptrs, tickets)`: points the maps at this call's tensors
  (``cuTensorMapReplaceAddress``, no re-encoding) and launches on the current stream.

CuPy is imported on first use, so the module imports without it.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass, field
from typing import Any

from .flash_plan import lpt_section
from .flash_variants import Config
from .sources import KERNEL_DIR, kernel_source

LOG2E = 1.4426950408889634
# An unbounded side of a band: far past any row (r + lo and r + hi stay in int32 for N < 2^30).
BAND_OPEN = 1 << 30


def cupy():
    """The cupy module (imported on first use)."""
    import cupy

    return cupy


@functools.cache
def sm_count() -> int:
    return int(cupy().cuda.Device().attributes["MultiProcessorCount"])


@functools.cache
def l2_bytes() -> int:
    return int(cupy().cuda.Device().attributes["L2CacheSize"])


@functools.cache
def is_hopper() -> bool:
    return cupy().cuda.Device().compute_capability == "90"


@functools.cache
def _module(kernel: str, names: tuple[str, ...]):
    src = kernel_source(KERNEL_DIR / f"flash_fwd_{kernel}.cu")
    options = ("-std=c++17", "-I" + str(KERNEL_DIR))  # the kernels' headers
    if kernel in ("wgmma", "ws"):  # wgmma needs the sm_90a target (NVRTC; see platform notes)
        options += ("-arch=sm_90a", "-DFA_FORCE_WGMMA")
    return cupy().RawModule(code=src, options=options, name_expressions=list(names))


@functools.cache
def compiled(cfg: Config, dt: int):
    """The compiled kernel of variant cfg for dtype code dt (ValueError if it cannot fit)."""
    limit = int(cupy().cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"])
    if cfg.smem_bytes() > limit:  # e.g. 192-key tiles with ':persist' at d = 128
        raise ValueError(
            f"kernel variant {cfg.spec()!r} needs {cfg.smem_bytes()} bytes of shared memory "
            f"per block and this GPU allows {limit}: choose fewer key rows or stages, no "
            "':persist', or ':persist:panelo'."
        )
    name = cfg.name(dt)
    fn = _module(cfg.kernel, (name,)).get_function(name)
    fn.max_dynamic_shared_size_bytes = cfg.smem_bytes()
    return fn


Strides = tuple[int, int, int]  # batch, head and row strides in elements (the last is unit)


class _Layout(ctypes.Structure):
    """kernels/flash_fwd_layout.cuh's FaFwdLayout, passed to the kernels by value."""

    _fields_ = [
        ("strides", ctypes.c_longlong * 12),
        ("heads", ctypes.c_int),
        ("group", ctypes.c_int),
        ("lo", ctypes.c_int),  # the band of ':band' variants: row r sees r + lo <= c <= r + hi
        ("hi", ctypes.c_int),
    ]


def readable(shape: tuple[int, ...], strides: tuple[int, ...], ptr: int) -> bool:
    """Whether a (batch, heads, N, d) tensor of these element strides at address ptr is read
    (or written) in place: a unit last dimension, a 16-byte aligned base and, on every other
    dimension longer than one, a positive stride of whole 16 bytes (the copy engine's rule
    and the pointer kernels' 16-byte accesses)."""
    if ptr % 16 or (shape[3] > 1 and strides[3] != 1):
        return False
    return all(
        n <= 1 or (s > 0 and s % 8 == 0) for n, s in zip(shape[:3], strides[:3], strict=True)
    )


def normal_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> Strides:
    """(batch, head, row) strides with those of dimensions of length one (never stepped, but
    checked by the copy engine) replaced by the packed value above the next one."""
    b, h, n, d = shape
    sr = strides[2] if n > 1 else d
    sh = strides[1] if h > 1 else max(1, n) * sr
    sb = strides[0] if b > 1 else max(1, h) * sh
    return (sb, sh, sr)


@dataclass
class Launch:
    """One variant launched on one geometry, all but the tensors' addresses (prepare).

    The kernel's parameters live in ctypes storage made once (`bind`): run() writes this
    call's addresses into it and calls ``cuLaunchKernel`` with the parameter array, so a
    launch costs one driver call and a few stores, not CuPy's per-argument packing."""

    cfg: Config
    fn: Any  # the CuPy kernel (RawKernel); its CUfunction is fn.kernel.ptr
    grid: tuple[int, int, int]
    layout: _Layout
    scalars: tuple  # N_q, N_k, scale·log2(e), causal as ctypes values
    # ws only: Q's, K's and V's tensor maps and their addresses, and the trailing scalars:
    # query blocks and batch·heads (before the ticket counter), heads per LPT section (after)
    maps: tuple = ()
    map_ptrs: tuple = ()
    ws_scalars: tuple = ()
    section: Any = None
    slots: Any = None  # c_uint64 x 6: Q, K, V, O, LSE, tickets, rewritten by each run
    params: Any = None  # the void* array of cuLaunchKernel (addresses into the above)
    call: Any = None  # cuLaunchKernel with all but the stream and the parameters bound
    device: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def needs_tickets(self) -> bool:
        """Whether run() wants a zeroed int32 ticket counter (the persistent grid)."""
        return self.cfg.kernel == "ws" and self.cfg.persistent

    def bind(self) -> None:
        """The parameter array, in the kernels' order (flash_fwd_*.cu): Q, K, V (the ws
        kernel: their tensor maps), O, LSE, N_q, N_k, scale, causal, [query blocks,
        batch·heads, tickets, section,] layout."""
        slots = self.slots = (ctypes.c_uint64 * 6)()
        at = ctypes.addressof
        size = ctypes.sizeof(ctypes.c_uint64)
        slot = [at(slots) + i * size for i in range(6)]
        if self.maps:
            refs = [at(m) for m in self.maps] + slot[3:5] + [at(c) for c in self.scalars]
            refs += [at(c) for c in self.ws_scalars] + [slot[5], at(self.section)]
        else:
            refs = slot[:5] + [at(c) for c in self.scalars]
        refs.append(at(self.layout))
        self.params = (ctypes.c_void_p * len(refs))(*refs)
        cfg = self.cfg
        self.call = functools.partial(
            _launch_fn(), int(self.fn.kernel.ptr), *self.grid, cfg.threads, 1, 1, cfg.smem_bytes()
        )
        self.device = int(cupy().cuda.runtime.getDevice())

    def run(self, ptrs: tuple[int, int, int, int, int], tickets: int = 0, stream: Any = None):
        """Launch on Q, K, V, O, LSE at these addresses (LSE 0: not written) and the ticket
        counter (needs_tickets), on `stream`: a raw CUDA stream handle, a CuPy stream, or
        None for CuPy's current stream."""
        if stream is None:
            stream = cupy().cuda.get_current_stream().ptr
        elif not isinstance(stream, int):
            stream = stream.ptr
        with self.lock:  # the maps and slots are this launch's: point them here, launch
            for m, p in zip(self.map_ptrs, ptrs[:3], strict=False):
                rc = _replace_address_fn()(m, p)
                if rc != 0:
                    raise RuntimeError(f"cuTensorMapReplaceAddress failed with CUresult {rc}")
            self.slots[:] = (*ptrs, tickets)
            rc = self.call(stream, self.params, None)
            if rc == _INVALID_CONTEXT:  # a thread that never made the device current
                cupy().cuda.runtime.setDevice(self.device)
                rc = self.call(stream, self.params, None)
        if rc != 0:
            raise RuntimeError(f"cuLaunchKernel of {self.cfg.spec()!r} failed with CUresult {rc}")


_INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT


def prepare(
    cfg: Config, dt: int, shape: tuple[int, int, int, int], kv_heads: int, n_k: int,
    strides: tuple[Strides, Strides, Strides, Strides], ptrs: tuple[int, int, int],
    scale: float, causal: bool, band: tuple[int, int] | None = None,
) -> Launch:  # fmt: skip
    """The launch of variant cfg (dtype code dt) on Q of `shape` (batch, heads, N_q, d), K and
    V of kv_heads heads (dividing heads: GQA) and n_k rows, at the element strides of Q, K,
    V and O (normal_strides of readable tensors); ptrs are Q's, K's and V's addresses now (the
    ws kernel's maps are encoded on them; run() re-points them). `band` (lo, hi): query row r
    sees keys r + lo <= c <= r + hi, for a ':band' variant (`causal` then False)."""
    if (band is not None) != cfg.band:
        raise ValueError(f"variant {cfg.spec()!r} and band {band} do not go together")
    from . import tma

    b, h, n_q, d = shape
    num_qb = -(-n_q // cfg.block_m)
    grid = (num_qb, b * h, 1)
    scalars = (ctypes.c_int32(n_q), ctypes.c_int32(n_k), ctypes.c_float(scale * LOG2E),
               ctypes.c_int32(int(causal)))  # fmt: skip
    layout = _Layout()
    layout.strides[:] = [s for st in strides for s in st]
    layout.heads, layout.group = h, h // kv_heads
    layout.lo, layout.hi = band if band is not None else (-BAND_OPEN, BAND_OPEN)
    launch = Launch(cfg, compiled(cfg, dt), grid, layout, scalars)
    if cfg.kernel != "ws":
        launch.bind()
        return launch
    if cfg.persistent:  # one CTA per SM, each drawing its next item from the counter
        launch.grid = (min(num_qb * b * h, sm_count()), 1, 1)
    shapes = ((b, h, n_q, d), (b, kv_heads, n_k, d), (b, kv_heads, n_k, d))
    rows = (cfg.block_m, cfg.block_n, cfg.block_n)
    maps = (
        tma.tensor_map(p, s, st, r)
        for p, s, st, r in zip(ptrs, shapes, strides, rows, strict=False)
    )
    # Copies of the (cached, shared) encoded maps: run() re-points these, not the cache's.
    copies = []
    for m in maps:
        copy = tma._TensorMap()
        ctypes.memmove(ctypes.addressof(copy), ctypes.addressof(m), ctypes.sizeof(copy))
        copies.append(copy)
    launch.maps = tuple(copies)
    launch.map_ptrs = tuple(ctypes.addressof(m) for m in copies)
    launch.ws_scalars = (ctypes.c_int32(num_qb), ctypes.c_int32(b * h))
    launch.section = ctypes.c_int32(lpt_section(n_k, cfg.d, b * h, l2_bytes()))
    launch.bind()
    return launch


@functools.cache
def _replace_address_fn() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapReplaceAddress
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return fn


@functools.cache
def _launch_fn() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    u32 = ctypes.c_uint
    fn.argtypes = [ctypes.c_void_p, u32, u32, u32, u32, u32, u32, u32, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p]  # fmt: skip
    return fn
