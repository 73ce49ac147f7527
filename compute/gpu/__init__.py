"""GPU backend: the tiled CUDA kernels at any tile sizes (forward and backward), the dense
paths, and their benchmark.

Importable with no CuPy, no GPU and no Qt: CuPy is imported only when a kernel runs.
`status()` says whether a device is usable (or why not). `flash_attention` is the
tensor-core kernel of `compute.gpu.flash` and `flash_attention_backward` its backward
(`compute.gpu.flash_backward`), loaded on first access; `torch_attention` the two as a
PyTorch autograd op (`compute.gpu.torch_op`), which imports torch only when called.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .device import DeviceStatus, status

_LAZY = {
    "torch_attention": ".torch_op",  # imports torch when called, never on import
    "tiled_attention_gpu": ".tiled",
    "compile_kernels": ".tiled",
    "TileTooLarge": ".tiled",
    "TileShape": ".tiled",
    "dense_attention_gpu": ".dense",
    "tiled_attention_backward_gpu": ".backward",
    "compile_backward": ".backward",
    "dense_attention_backward_gpu": ".dense_backward",
    "BenchConfig": ".bench",
    "run_bench": ".bench",
    "GpuUnavailable": ".bench",
    "BenchCancelled": ".bench",
    "flash_attention": ".flash",
    "flash_attention_backward": ".flash_backward",
}

__all__ = ["DeviceStatus", "status", *_LAZY]


def __getattr__(name: str) -> Any:
    # Lazy, so `import compute.gpu` stays free of CuPy (and of the flash module's imports).
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
