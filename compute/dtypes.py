"""The one element type: name, bytes per element, tensor-core kernel code, CuPy dtype.

`DType` knows the bytes an element takes in HBM, the tensor-core kernel's code for it
and the CuPy dtype a device array of it has (bfloat16 travels as uint16 bit patterns,
as compute.gpu.dtypes makes them). No CuPy import here: a name is enough. Imports
nothing of compute, so the maths (compute.attention) and the problem type share it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """One element type: name, bytes per element, kernel code and CuPy dtype name."""

    name: str
    bytes: int
    code: int | None  # the tensor-core kernel's dtype code; None when it does not take it
    cupy: str  # the CuPy dtype of a device array in this type (bfloat16: its bits)

    @property
    def stats(self) -> type[np.floating]:
        """Statistics and accumulators: float64 for float64, float32 otherwise (as GPUs)."""
        return np.float64 if self.name == "float64" else np.float32

    @classmethod
    def of(cls, value: str | DType) -> DType:
        """The DType named `value` (a DType passes through); one sentence if unknown."""
        if isinstance(value, DType):
            return value
        try:
            return _DTYPES[value]
        except (KeyError, TypeError):
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, not {value!r}.") from None

    def __str__(self) -> str:
        return self.name


_DTYPES = {
    t.name: t
    for t in (
        DType("float64", 8, None, "float64"),
        DType("float32", 4, None, "float32"),
        DType("float16", 2, 0, "float16"),
        DType("bfloat16", 2, 1, "uint16"),
    )
}
DTYPE_NAMES: tuple[str, ...] = tuple(_DTYPES)
