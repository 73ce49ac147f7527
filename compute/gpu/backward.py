"""Compile and launch the tiled backward kernels (`kernels/tiled_backward.cu`) at any tile sizes.

FlashAttention-2's backward, the schedule of the core's tiled lane: a preprocessing kernel
forms D = rowsum(dO ∘ O) and zeroes the float32 dQ accumulator; then one thread block per
(key tile j, batch·head) keeps K_j, V_j, dK_j, dV_j on chip while the query blocks that see
the tile stream past, recomputing S and P from the forward's saved L, and adds its share of
dQ_i into global memory with atomics. With `count_transfers=True` the instrumented build
reports its global transfers per tensor, equal to `compute.pass_ledger("backward", ...)`.
Each (block_q, block_k, d, d_v, dtype, instrumented) combination is one cached RawModule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backward_schedule import PASS_TENSORS
from ..mask import Mask
from .tiled import (
    _CTYPES,
    _check_inputs,
    _cupy,
    check_tile_request,
    fitting_blocks,
    load_functions,
    mask_arguments,
    require_fit,
    tally_counts,
)

KERNEL_PATH = Path(__file__).parent / "kernels" / "tiled_backward.cu"
THREADS = 256  # tiled_bwd::BwdShape::NT
ROWS_PER_PREPROCESS_BLOCK = 8  # one warp per query row

# Counter slots in the kernel's `tiled_bwd::Slot` order -> (ledger tensor, direction).
COUNTER_SLOTS: tuple[tuple[str, str], ...] = (
    ("Q", "read"),
    ("K", "read"),
    ("V", "read"),
    ("O", "read"),
    ("dO", "read"),
    ("L", "read"),
    ("D", "read"),
    ("D", "write"),
    ("dQ", "read"),
    ("dQ", "write"),
    ("dK", "write"),
    ("dV", "write"),
)


@dataclass(frozen=True)
class BackwardShape:
    """Mirror of `tiled_bwd::BwdShape`: shared memory of one main-loop block."""

    block_q: int
    block_k: int
    d: int
    d_v: int

    @property
    def smem_bytes(self) -> int:
        bq, bk, d, dv = self.block_q, self.block_k, self.d, self.d_v
        # K_j, V_j (rows padded by one float), dK_j, dV_j; Q_i, dO_i; P/dS tile; L_i, D_i.
        floats = bk * (d + 1) + bk * (dv + 1) + bk * d + bk * dv
        floats += bq * (d + 1) + bq * (dv + 1) + bq * bk + 2 * bq
        return 4 * floats


def fits_message(shape: BackwardShape, limit: int) -> str:
    """One sentence saying the backward's tiles do not fit, and which block sizes do."""
    fits = fitting_blocks(
        lambda bq, bk: BackwardShape(bq, bk, shape.d, shape.d_v).smem_bytes,
        (16, 32, 64, 128),
        limit,
    )
    return (
        f"The backward at block_q={shape.block_q} x block_k={shape.block_k} with d={shape.d}, "
        f"d_v={shape.d_v} needs {shape.smem_bytes / 1024:.1f} KB of shared memory per block but "
        f"this device allows {limit / 1024:.0f} KB; these fit: {fits}."
    )


@dataclass
class CompiledBackward:
    """The preprocessing and main-loop kernels of one tile shape, loaded."""

    preprocess: Any
    main: Any
    shape: BackwardShape
    compile_s: float


_CACHE: dict[tuple, CompiledBackward] = {}


def compile_backward(
    block_q: int, block_k: int, d: int, d_v: int, dtype: str, *, count_transfers: bool = False
) -> CompiledBackward:
    """Compile (or fetch) the backward kernels for this tile shape; TileTooLarge if they can't fit."""
    check_tile_request(block_q, block_k, d, d_v, dtype)
    key = (block_q, block_k, d, d_v, dtype, count_transfers)
    if key in _CACHE:
        return _CACHE[key]
    shape = BackwardShape(block_q, block_k, d, d_v)
    require_fit(shape, fits_message)
    ctype = _CTYPES[dtype]
    names = [
        f"bwd_preprocess<{d},{d_v},{ctype}>",
        f"bwd_kv_outer<{block_q},{block_k},{d},{d_v},{ctype}>",
    ]
    (preprocess, main), compile_s = load_functions(
        KERNEL_PATH, names, count_transfers=count_transfers
    )
    main.max_dynamic_shared_size_bytes = shape.smem_bytes
    compiled = CompiledBackward(preprocess, main, shape, compile_s)
    _CACHE[key] = compiled
    return compiled


@dataclass
class BackwardResult:
    """Gradients (device arrays in the input dtype) and kernel-counted transfers per head·batch."""

    dq: Any
    dk: Any
    dv: Any
    counts: dict[str, dict[str, int]] | None = None
    compile_s: float = 0.0


def _check_saved(q, v, o, do, lse) -> None:
    bh, n_q = q.shape[:2]
    if o.shape != (bh, n_q, v.shape[2]) or do.shape != o.shape:
        raise ValueError(
            f"o and do must have the output's shape {(bh, n_q, v.shape[2])}, "
            f"not {tuple(o.shape)} and {tuple(do.shape)}."
        )
    if str(o.dtype) != str(q.dtype) or str(do.dtype) != str(q.dtype):
        raise ValueError("o and do must have the same dtype as q, k and v.")
    if lse.shape != (bh, n_q):
        raise ValueError(f"lse must have shape {(bh, n_q)} (one L per query row), not {lse.shape}.")


def tiled_attention_backward_gpu(
    q,
    k,
    v,
    o,
    do,
    lse,
    *,
    block_q: int,
    block_k: int,
    causal: bool | Mask = False,
    scale: float | None = None,
    count_transfers: bool = False,
) -> BackwardResult:
    """(dQ, dK, dV) of attention on (BH, N, d) device arrays by FlashAttention-2's backward.

    o and lse are what the forward saved (`tiled_attention_gpu(..., save_lse=True)`): the
    output O and L = m + log ℓ per query row (float32, −∞ for rows that see no key). dQ is
    accumulated in float32 and, for float16 inputs, cast to float16 at the end (one pass
    over dQ that the ledger, like the core's model, does not count).
    """
    cupy = _cupy()
    q, k, v, o, do = (cupy.ascontiguousarray(cupy.asarray(x)) for x in (q, k, v, o, do))
    lse = cupy.ascontiguousarray(cupy.asarray(lse, dtype=cupy.float32))
    dtype = _check_inputs(q, k, v)
    _check_saved(q, v, o, do, lse)
    bh, n_q, d = q.shape
    n_k, d_v = k.shape[1], v.shape[2]
    comp = compile_backward(block_q, block_k, d, d_v, dtype, count_transfers=count_transfers)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    d_row = cupy.empty((bh, n_q), dtype=cupy.float32)  # D, written by the preprocessing
    dq_acc = cupy.empty((bh, n_q, d), dtype=cupy.float32)  # zeroed by the preprocessing
    dk = cupy.empty((bh, n_k, d), dtype=q.dtype)
    dv = cupy.empty((bh, n_k, d_v), dtype=q.dtype)
    counts = cupy.zeros(len(COUNTER_SLOTS), dtype=cupy.uint64)
    i32, f32 = cupy.int32, cupy.float32  # scalar kernel arguments need exact C types
    pre_grid = (math.ceil(n_q / ROWS_PER_PREPROCESS_BLOCK), bh)
    comp.preprocess(pre_grid, (THREADS,), (o, do, d_row, dq_acc, i32(n_q), counts))
    args = (q, k, v, do, lse, d_row, dq_acc, dk, dv, i32(n_q), i32(n_k), f32(scale),
            *mask_arguments(causal, n_q, n_k), counts)  # fmt: skip
    main_grid = (math.ceil(n_k / block_k), bh)
    comp.main(main_grid, (THREADS,), args, shared_mem=comp.shape.smem_bytes)
    dq = dq_acc if dtype == "float32" else dq_acc.astype(q.dtype)
    result = BackwardResult(dq, dk, dv, None, comp.compile_s)
    if count_transfers:
        result.counts = tally_counts(counts, COUNTER_SLOTS, PASS_TENSORS)
    return result
