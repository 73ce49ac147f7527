"""Tensor-core FlashAttention forward for CuPy arrays (CUDA C++ through ``cupy.RawModule``).

``flash_attention(q, k, v, causal=..., scale=..., return_lse=...)`` takes CuPy arrays shaped
(batch, heads, N, d) in float16, or bfloat16 passed as a ``uint16`` view of the bits (CuPy has
no bfloat16 dtype), at any strides the kernels read in place (a unit last dimension, the
others and the base address in whole 16 bytes: ``flash_launch.readable``; other arrays are
copied first), and returns the output in the same dtype (bf16 again as ``uint16`` bits).
Accumulation and softmax statistics are float32. d must be 64 or 128; any N works (tails
are masked); N_q may differ from N_k, in which case causal masking is bottom-right aligned
(query row r sees key c iff c <= r + N_k - N_q). Rows that see no key return zeros and
LSE = -inf. With ``return_lse=True`` the row log-sum-exp of the scaled scores (natural log,
float32, shape (batch, heads, N_q)) is returned as well.

Three kernels live in ``kernels/``: ``flash_fwd_mma.cu`` (FA2 schedule with mma.sync, any
sm_80+ GPU), ``flash_fwd_wgmma.cu`` (Hopper wgmma, sm_90a only) and ``flash_fwd_ws.cu``
(Hopper wgmma fed by TMA from a producer warpgroup). The parts of this backend:

* ``flash_variants.py``: ``Config``, one compiled variant, and its spec strings;
* ``flash_select.py``: ``default_config``, which variant a call gets (FLASH_NOTES.md has
  the measurements behind each rule);
* ``flash_launch.py``: compiling (NVRTC) and launching (``prepare`` / ``Launch.run``, the
  internal API torch_launch.py shares), the strides, the ws kernel's tensor maps;
* ``flash_plan.py``: host-side planning models (the LPT order's sections).

The module imports without CuPy; CuPy is imported on first use.
"""

from __future__ import annotations

import math

from .flash_launch import LOG2E as _LOG2E
from .flash_launch import cupy as _cupy
from .flash_launch import is_hopper as _is_hopper
from .flash_launch import normal_strides, prepare, readable
from .flash_plan import lpt_section, lpt_section_cap
from .flash_select import (
    MMA_CONFIGS,
    WGMMA_CONFIGS,
    WS_CAUSAL_D64,
    WS_CAUSAL_D128,
    WS_CAUSAL_MID_D128,
    WS_CONFIGS,
    WS_MID_D128,
    WS_WIDE_D128,
    default_config,
    launch_config,
)
from .flash_variants import Config

SUPPORTED_HEAD_DIMS = (64, 128)

__all__ = [
    "MMA_CONFIGS", "SUPPORTED_HEAD_DIMS", "WGMMA_CONFIGS", "WS_CAUSAL_D128", "WS_CAUSAL_D64",
    "WS_CAUSAL_MID_D128", "WS_CONFIGS", "WS_MID_D128", "WS_WIDE_D128", "Config",
    "default_config", "flash_attention", "lpt_section", "lpt_section_cap", "resolve_scale",
    # for flash_backward.py
    "_LOG2E", "_check", "_cupy", "_dtype_code", "_is_hopper",
]  # fmt: skip


def _dtype_code(a) -> int:
    cp = _cupy()
    if a.dtype == cp.float16:
        return 0
    if a.dtype == cp.uint16:
        return 1  # bfloat16 bits
    raise TypeError(f"flash_attention takes float16 or bfloat16-as-uint16 arrays, not {a.dtype}")


def _check(q, k, v) -> None:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("q, k, v must be shaped (batch, heads, N, d)")
    b, h, _, d = q.shape
    if k.shape != v.shape or k.shape[:2] != (b, h) or k.shape[3] != d:
        raise ValueError(f"shapes do not agree: q {q.shape}, k {k.shape}, v {v.shape}")
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head dim d must be one of {SUPPORTED_HEAD_DIMS}, not {d}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError("q, k, v must share one dtype")
    if b * h > 65535:
        raise ValueError("batch * heads must be at most 65535 (one grid row per head)")


def resolve_scale(scale: float | None, d: int) -> float:
    """The softmax scale: 1/sqrt(d) by default; anything but a positive number is refused."""
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not scale > 0:
        raise ValueError("scale must be positive")
    return scale


def flash_attention(
    q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False,
    config: Config | None = None, out=None,
):  # fmt: skip
    """softmax(Q Kᵀ · scale [causal mask]) V on the GPU; see the module docstring.

    ``config`` (a :class:`Config`) overrides the kernel variant (for benchmarking); ``out``
    (q's shape and dtype, strides as the inputs may have) receives the result instead of a
    new array.
    """
    cp = _cupy()
    _check(q, k, v)
    dt = _dtype_code(q)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    scale = resolve_scale(scale, d)
    if config is not None and config.d != d:
        raise ValueError(f"config is for d={config.d}, inputs have d={d}")
    cfg = launch_config(d, n_q, n_k, causal, config)
    if cfg.kernel in ("wgmma", "ws") and not _is_hopper():
        raise ValueError(f"the {cfg.kernel} kernel needs an sm_90 (Hopper) GPU")
    q, k, v = (x if readable(x.shape, _strides(x), x.data.ptr) else cp.ascontiguousarray(x)
               for x in (q, k, v))  # fmt: skip
    if out is None:
        out = cp.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype:
        raise ValueError("out must have q's shape and dtype")
    elif not readable(out.shape, _strides(out), out.data.ptr):
        raise ValueError("out must have a unit last stride and the others in whole 16 bytes")
    lse = cp.empty((b, h, n_q), dtype=cp.float32) if return_lse else None
    if b * h and n_q:
        strides = tuple(normal_strides(x.shape, _strides(x)) for x in (q, k, v, out))
        ptrs = (q.data.ptr, k.data.ptr, v.data.ptr)
        launch = prepare(cfg, dt, q.shape, h, n_k, strides, ptrs, scale, causal)
        tickets = cp.zeros(1, dtype=cp.int32) if launch.needs_tickets else None
        lse_ptr = lse.data.ptr if lse is not None else 0
        launch.run((*ptrs, out.data.ptr, lse_ptr), tickets.data.ptr if tickets is not None else 0)
    return (out, lse) if return_lse else out


def _strides(a) -> tuple[int, ...]:
    """A CuPy array's strides in elements."""
    return tuple(s // a.itemsize for s in a.strides)
