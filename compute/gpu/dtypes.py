"""The element types the GPU kernels take, and bfloat16 as 16-bit patterns on the device.

CuPy has no bfloat16 dtype, so the tensor-core kernel takes bfloat16 as a ``uint16`` view of
the bits. ``bfloat16_bits`` rounds exactly as ``compute.attention.round_to(x, "bfloat16")``
(round to nearest even on the upper half of the float32 pattern; a test holds the two equal)
and works on NumPy and CuPy arrays alike, so the harness, the tests and the peers' inputs
share one rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

KERNEL_DTYPES: tuple[str, ...] = ("float32", "float16")  # the tiled kernel and the dense path
FLASH_DTYPES: tuple[str, ...] = ("float16", "bfloat16")  # the tensor-core kernel (flash.py)
BENCH_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")  # what the harness measures


def bfloat16_bits(x: Any) -> Any:
    """float32 array (NumPy or CuPy) -> uint16 bfloat16 patterns, round to nearest even."""
    bits = x.astype(np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def bfloat16_values(bits: Any) -> Any:
    """uint16 bfloat16 patterns (NumPy or CuPy) -> the float32 values they hold, exactly."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def device_array(x: Any, dtype: str) -> Any:
    """A float32 array in the layout a kernel takes for `dtype` (bfloat16 as uint16 bits)."""
    if dtype == "bfloat16":
        return bfloat16_bits(x)
    if dtype not in BENCH_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(BENCH_DTYPES)}, not {dtype!r}.")
    return x.astype(dtype)


def float64_values(a: Any, dtype: str) -> Any:
    """The float64 values of a kernel-layout array (the inverse of device_array, exactly)."""
    if dtype == "bfloat16":
        return bfloat16_values(a).astype(np.float64)
    return a.astype(np.float64)
