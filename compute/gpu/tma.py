"""Tensor maps for Hopper's bulk tensor copy engine (TMA), encoded on the host via the driver.

CuPy does not wrap ``cuTensorMapEncodeTiled``, so this module calls it in ``libcuda`` through
ctypes. ``tensor_map(ptr, shape, strides, box_rows)`` describes (batch, heads, N, D) memory
of 16-bit elements at any batch, head and row strides (SDPA's views of (batch, N, heads, D)
memory, GQA's K/V heads) as a 4-D tensor (D, N, heads, batch) read in boxes of 64 columns x
box_rows rows x 1 head x 1 batch with the 128-byte swizzle: one box is one 64-column panel of
the shared-memory layout wgmma reads, and rows past N of a head come back as zeros. ``kernel_arg(map)`` wraps
the 128 bytes for a CuPy launch, which copies them into the kernel's __grid_constant__
parameter. Nothing is imported or loaded until first use.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

MAP_BYTES = 128  # sizeof(CUtensorMap)
PANEL_COLS = 64  # 64 halves = 128 bytes, the widest row the 128-byte swizzle takes

# cuda.h enumerators (CUtensorMapDataType, ...Interleave, ...Swizzle, ...L2promotion, ...)
_UINT16 = 1  # the copy engine moves bytes; fp16 and bf16 are both 16-bit patterns to it
_INTERLEAVE_NONE = 0
_SWIZZLE_128B = 3
_L2_PROMOTION_128B = 2
_OOB_FILL_ZERO = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as zero


class _TensorMap(ctypes.Structure):
    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


@functools.cache
def _encode_fn() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.POINTER(_TensorMap),
        ctypes.c_int,  # data type
        ctypes.c_uint32,  # rank
        ctypes.c_void_p,  # global address
        ctypes.POINTER(ctypes.c_uint64),  # global dims (rank)
        ctypes.POINTER(ctypes.c_uint64),  # global strides in bytes (rank - 1)
        ctypes.POINTER(ctypes.c_uint32),  # box dims (rank)
        ctypes.POINTER(ctypes.c_uint32),  # element strides (rank)
        ctypes.c_int,  # interleave
        ctypes.c_int,  # swizzle
        ctypes.c_int,  # L2 promotion
        ctypes.c_int,  # out-of-bounds fill
    ]
    return fn


@functools.lru_cache(maxsize=256)
def _encode(
    ptr: int, d: int, n: int, heads: int, batch: int, strides: tuple[int, int, int], box_rows: int
) -> _TensorMap:
    # Keyed on the address, shape and strides only: the map holds nothing else, so a freed
    # and reused buffer of the same shape gets a correct map from the cache.
    out = _TensorMap()
    dims = (ctypes.c_uint64 * 4)(d, n, heads, batch)
    byte_strides = (ctypes.c_uint64 * 3)(*(2 * s for s in strides))
    box = (ctypes.c_uint32 * 4)(PANEL_COLS, box_rows, 1, 1)
    elem = (ctypes.c_uint32 * 4)(1, 1, 1, 1)
    rc = _encode_fn()(
        ctypes.byref(out), _UINT16, 4, ctypes.c_void_p(ptr), dims, byte_strides, box, elem,
        _INTERLEAVE_NONE, _SWIZZLE_128B, _L2_PROMOTION_128B, _OOB_FILL_ZERO,
    )  # fmt: skip
    if rc != 0:
        raise RuntimeError(
            f"cuTensorMapEncodeTiled failed with CUresult {rc} (batch={batch}, heads={heads}, "
            f"N={n}, d={d}, strides={strides}, box rows={box_rows})"
        )
    return out


def tensor_map(
    ptr: int, shape: tuple[int, int, int, int], strides: tuple[int, int, int], box_rows: int
) -> _TensorMap:
    """The tensor map of 16-bit (batch, heads, N, D) memory at `ptr` whose batch, head and row
    strides (in elements; the last dimension is unit) are `strides`: 4-D (D, N, heads,
    batch), read in boxes of 64 columns x box_rows rows. The copy engine takes strides that
    are multiples of 16 bytes and a 16-byte aligned base (flash_launch.readable checks both)."""
    batch, heads, n, d = shape
    if d % PANEL_COLS or not 1 <= box_rows <= 256:
        raise ValueError(f"d must be a multiple of {PANEL_COLS} and box rows in 1..256")
    if ptr % 16 or any(s % 8 or s <= 0 for s in strides):
        raise ValueError("TMA needs a 16-byte aligned base and strides of whole 16 bytes")
    sb, sh, sr = strides
    return _encode(int(ptr), d, n, heads, batch, (sr, sh, sb), box_rows)


def kernel_arg(tmap: _TensorMap) -> Any:
    """The map as a CuPy kernel argument (a pointer to its 128 bytes, copied at launch)."""
    from cupy.cuda.function import CPointer

    return CPointer(ctypes.addressof(tmap))
