"""Compile and launch the tiled CUDA kernels (`kernels/tiled_attention.cu`) at any tile sizes.

Each (block_q, block_k, d, d_v, dtype, instrumented) combination is one `cupy.RawModule`
holding both loop orders as template instantiations; CuPy caches the compiled binary
on disk and this module caches the loaded module per process, reporting compile time
separately so benchmarks never include it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import ORDERS
from ..mask import Mask
from .dtypes import KERNEL_DTYPES
from .sources import kernel_source

KERNEL_PATH = Path(__file__).parent / "kernels" / "tiled_attention.cu"
LOG2E = 1.4426950408889634
_CTYPES = {"float32": "float", "float16": "unsigned short"}

# Counter slots in the kernel's `tiled::Slot` order -> (ledger tensor, direction).
COUNTER_SLOTS: tuple[tuple[str, str], ...] = (
    ("Q", "read"),
    ("K", "read"),
    ("V", "read"),
    ("O", "read"),
    ("O", "write"),
    ("m", "read"),
    ("m", "write"),
    ("l", "read"),
    ("l", "write"),
    ("L", "write"),
)
COUNTED_TENSORS = ("Q", "K", "V", "O", "S", "P", "m", "l", "L")


class TileTooLarge(ValueError):
    """The requested tiles' working set does not fit one block's shared memory."""


@dataclass(frozen=True)
class TileShape:
    """Mirror of `tiled::Shape` in the kernel: threads and shared memory of one block."""

    block_q: int
    block_k: int
    d: int
    d_v: int

    @property
    def threads(self) -> int:
        return 8 * (32 if self.block_q >= 128 else 16)

    @property
    def smem_bytes(self) -> int:
        ty = self.threads // 8
        bqp = math.ceil(self.block_q / ty) * ty
        bkp = math.ceil(self.block_k / 8) * 8
        d4 = math.ceil(self.d / 4) * 4
        dv4 = math.ceil(self.d_v / 4) * 4
        vld = math.ceil(dv4 / 4 / 8) * 8 * 4
        qld, pld = d4 + 4, bkp + 8
        return 4 * (bqp * qld + bkp * qld + bkp * vld + bqp * pld)


def fitting_blocks(
    smem_bytes: Callable[[int, int], int], block_qs: Iterable[int], limit: int
) -> str:
    """For each block_q, the largest block_k (a multiple of 8 up to 1024) whose tiles need at
    most `limit` bytes by `smem_bytes(bq, bk)`, as 'block_q=B with block_k<=K; ...'."""
    options = []
    for bq in block_qs:
        best = max((bk for bk in range(8, 1025, 8) if smem_bytes(bq, bk) <= limit), default=0)
        if best:
            options.append(f"block_q={bq} with block_k<={best}")
    return "; ".join(options) if options else "no block sizes (the head size is too large)"


def fits_message(shape: TileShape, limit: int) -> str:
    """One sentence saying the tiles do not fit, and which block sizes do."""
    fits = fitting_blocks(
        lambda bq, bk: TileShape(bq, bk, shape.d, shape.d_v).smem_bytes,
        (16, 32, 64, 128, 256),
        limit,
    )
    return (
        f"block_q={shape.block_q} x block_k={shape.block_k} with d={shape.d}, d_v={shape.d_v} "
        f"needs {shape.smem_bytes / 1024:.1f} KB of shared memory per block but this device "
        f"allows {limit / 1024:.0f} KB; these fit: {fits}."
    )


@dataclass
class Compiled:
    """Both loop orders of one tile shape, loaded."""

    q_outer: Any
    kv_outer: Any
    shape: TileShape
    compile_s: float


_CACHE: dict[tuple, Compiled] = {}


def _cupy():
    import cupy  # lazily: importing compute.gpu must work without CuPy

    return cupy


def _shared_limit() -> int:
    from .device import status

    st = status()
    if not st.usable:
        raise RuntimeError(st.reason)
    return st.shared_mem_per_block


def check_tile_request(block_q: int, block_k: int, d: int, d_v: int, dtype: str) -> None:
    """ValueError with one sentence if a tiled kernel cannot be built for these sizes."""
    if dtype not in KERNEL_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(KERNEL_DTYPES)}, not {dtype!r}.")
    if min(block_q, block_k, d, d_v) < 1:
        raise ValueError("block sizes and head sizes must be at least 1.")


def require_fit(shape: Any, message: Callable[[Any, int], str]) -> None:
    """TileTooLarge with `message(shape, limit)` if the shape's shared memory (smem_bytes)
    exceeds what one block may use on this device."""
    limit = _shared_limit()
    if shape.smem_bytes > limit:
        raise TileTooLarge(message(shape, limit))


def load_functions(
    kernel_path: Path, names: list[str], *, count_transfers: bool
) -> tuple[list[Any], float]:
    """Compile (or load from CuPy's cache) the template instantiations `names` of one tiled
    kernel file; returns the functions and the seconds compiling took."""
    cupy = _cupy()
    options = ("-std=c++17", "-I" + str(kernel_path.parent))  # tiled_common.cuh
    options += ("-DCOUNT_TRANSFERS",) if count_transfers else ()
    t0 = time.perf_counter()
    module = cupy.RawModule(
        code=kernel_source(kernel_path), options=options, name_expressions=names
    )
    functions = [module.get_function(n) for n in names]  # compiles (or loads the cache)
    return functions, time.perf_counter() - t0


def tally_counts(
    counts, slots: tuple[tuple[str, str], ...], tensors: Iterable[str]
) -> dict[str, dict[str, int]]:
    """The kernel's counter slots (a device array in `slots` order) as {tensor: {direction: n}}."""
    tally = {t: {"read": 0, "write": 0} for t in tensors}
    for (tensor, direction), n in zip(slots, counts.get().tolist(), strict=True):
        tally[tensor][direction] += int(n)
    return tally


def compile_kernels(
    block_q: int, block_k: int, d: int, d_v: int, dtype: str, *, count_transfers: bool = False
) -> Compiled:
    """Compile (or fetch) both kernels for this tile shape; raises TileTooLarge if it can't fit."""
    check_tile_request(block_q, block_k, d, d_v, dtype)
    key = (block_q, block_k, d, d_v, dtype, count_transfers)
    if key in _CACHE:
        return _CACHE[key]
    shape = TileShape(block_q, block_k, d, d_v)
    require_fit(shape, fits_message)
    args = f"{block_q},{block_k},{d},{d_v},{_CTYPES[dtype]}"
    names = [f"tiled_q_outer<{args}>", f"tiled_kv_outer<{args}>"]
    (q_outer, kv_outer), compile_s = load_functions(
        KERNEL_PATH, names, count_transfers=count_transfers
    )
    for fn in (q_outer, kv_outer):
        fn.max_dynamic_shared_size_bytes = shape.smem_bytes
    compiled = Compiled(q_outer, kv_outer, shape, compile_s)
    _CACHE[key] = compiled
    return compiled


def mask_arguments(causal: Mask | bool, n_q: int, n_k: int) -> tuple:
    """The kernels' MASK_PARAMS for a compute.mask.Mask (or the bool for bottom-right causal):
    window left, right, diagonal offset, the packed sequences' ends (a device array) and
    their count. ValueError (one sentence) when the mask does not fit N_q and N_k."""
    cupy = _cupy()
    mask = Mask.of(causal)
    mask.check(n_q, n_k)
    ends = np.cumsum(mask.lengths or (0,), dtype=np.int32)
    i32 = cupy.int32
    return (
        i32(mask.left), i32(mask.right), i32(mask.offset(n_q, n_k)),
        cupy.asarray(ends), i32(len(mask.lengths)),
    )  # fmt: skip


@dataclass
class TiledResult:
    """Output (device array), optional log-sum-exp rows, and kernel-counted transfers."""

    out: Any
    lse: Any = None
    counts: dict[str, dict[str, int]] | None = None
    compile_s: float = 0.0


def _check_inputs(q, k, v) -> str:
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError("q, k, v must have shape (batch*heads, N, d).")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError("q, k, v must have the same batch*heads.")
    if q.shape[2] != k.shape[2] or k.shape[1] != v.shape[1]:
        raise ValueError("q and k need the same d; k and v the same number of keys.")
    if min(q.shape[1], k.shape[1]) < 1:
        raise ValueError("need at least one query and one key.")
    dtype = str(q.dtype)
    if dtype not in KERNEL_DTYPES or str(k.dtype) != dtype or str(v.dtype) != dtype:
        raise ValueError("q, k, v must all be float32 or all float16.")
    return dtype


def tiled_attention_gpu(
    q,
    k,
    v,
    *,
    block_q: int,
    block_k: int,
    order: str = "q-outer",
    causal: bool | Mask = False,
    scale: float | None = None,
    save_lse: bool = False,
    count_transfers: bool = False,
    out=None,
) -> TiledResult:
    """Exact attention on (BH, N, d) device arrays by the tiled kernel of the given order.

    `causal` is a compute.mask.Mask (causal either way, a window, packed sequences) or the
    bool that means bottom-right causal; tiles no row of a block sees are never loaded."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {order!r}.")
    cupy = _cupy()
    q, k, v = (cupy.ascontiguousarray(cupy.asarray(x)) for x in (q, k, v))
    dtype = _check_inputs(q, k, v)
    bh, n_q, d = q.shape
    n_k, d_v = k.shape[1], v.shape[2]
    comp = compile_kernels(block_q, block_k, d, d_v, dtype, count_transfers=count_transfers)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if out is None:
        out = cupy.empty((bh, n_q, d_v), dtype=q.dtype)
    lse = cupy.empty((bh, n_q), dtype=cupy.float32) if save_lse else cupy.empty(1, cupy.float32)
    counts = cupy.zeros(len(COUNTER_SLOTS), dtype=cupy.uint64)
    i32, f32 = cupy.int32, cupy.float32  # scalar kernel arguments need exact C types
    masking = mask_arguments(causal, n_q, n_k)
    common = (i32(n_q), i32(n_k), f32(scale * LOG2E), *masking, i32(bool(save_lse)))
    threads, smem = comp.shape.threads, comp.shape.smem_bytes
    if order == "q-outer":
        grid = (math.ceil(n_q / block_q), bh)
        comp.q_outer(grid, (threads,), (q, k, v, out, lse, *common, counts), shared_mem=smem)
    else:
        m_buf = cupy.empty((bh, n_q), dtype=cupy.float32)
        l_buf = cupy.empty((bh, n_q), dtype=cupy.float32)
        args = (q, k, v, out, lse, m_buf, l_buf, *common, counts)
        comp.kv_outer((bh,), (threads,), args, shared_mem=smem)
    result = TiledResult(out, lse if save_lse else None, None, comp.compile_s)
    if count_transfers:
        result.counts = tally_counts(counts, COUNTER_SLOTS, COUNTED_TENSORS)
    return result
