"""Compile and launch the decode kernels (`kernels/decode_attention.cu`): split-KV with its
combine, and the one-pass kernel, for one decode step of compute.decode.DecodeProblem.

Inputs are device arrays q (H_q, N_q, d), k (H_kv, N_k, d), v (H_kv, N_k, d_v) in the
problem's dtype: float32, float16, or bfloat16 as its uint16 bit patterns
(compute.gpu.dtypes). Each (d, d_v, dtype, vectorised, instrumented) combination is one
`cupy.RawModule`; compile time is reported separately so benchmarks never include it.
Two streaming blocks: the tensor-core one (`kernels/decode_mma.cuh`) where the group has at
most 16 resident rows and the head sizes suit it (`tensor_core_block`), else the general
one; both feed the same combine and count the same transfers. `prepare_decode` binds one
step's launches once, so a timed loop or a per-token loop pays only the launches.
With count_transfers the kernels count every element they move; the tally's tensors are
compute.decode.ledger's (plus "L", the optional log-sum-exp output, which no ledger counts).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..decode import DecodeProblem
from ..decode.walk import TENSORS
from .tiled import LOG2E, load_functions, tally_counts

KERNEL_PATH = Path(__file__).parent / "kernels" / "decode_attention.cu"
DECODE_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
_DT = {"float32": 0, "float16": 1, "bfloat16": 2}
_STORAGE = {"float32": "float32", "float16": "float16", "bfloat16": "uint16"}
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
THREADS = 128  # decode::NT
WARPS = THREADS // 32  # decode::NW
REGISTER_ROWS = 8  # decode::RB
COMBINE_THREADS = 1024  # decode::CNT
STAGES = 3  # K/V chunks in the ring: two in flight while one is used (2 when 3 do not fit)
MMA_THREADS = 128  # decode::MNT
MMA_STAGES = 3  # decode::MST: 16-key steps in each warp's ring
MMA_ROWS = 16  # decode::MROWS: rows of the mma tile

# Counter slots in the kernel's `decode::Slot` order -> (tensor, direction).
COUNTER_SLOTS: tuple[tuple[str, str], ...] = (
    ("Q", "read"),
    ("K", "read"),
    ("V", "read"),
    ("O", "write"),
    ("O_s", "read"),
    ("O_s", "write"),
    ("L_s", "read"),
    ("L_s", "write"),
    ("L", "write"),
)
COUNTED_TENSORS = (*TENSORS, "L")


class DecodeTooLarge(ValueError):
    """The group's resident rows and the K/V chunks do not fit one block's shared memory."""


@dataclass(frozen=True)
class StreamShape:
    """Mirror of `decode::Shape`: keys per chunk and shared memory of one streaming block with
    a ring of `stages` K + V chunks, the float Q rows and each warp's float state."""

    d: int
    d_v: int
    dtype: str
    rows: int
    stages: int = STAGES

    @property
    def chunk_keys(self) -> int:
        return 32 if self.dtype == "float32" else 64

    @property
    def ring_bytes(self) -> int:
        sz, ve = _BYTES[self.dtype], 16 // _BYTES[self.dtype]
        return self.stages * self.chunk_keys * ((self.d + ve) + (self.d_v + ve)) * sz

    @property
    def smem_bytes(self) -> int:
        q = 4 * self.rows * self.d
        state = 4 * WARPS * self.rows * (self.d_v + 2)
        if self.rows <= REGISTER_ROWS and state <= self.ring_bytes:
            return self.ring_bytes + q  # the state takes the ring's bytes after the loop
        return self.ring_bytes + q + state


def stream_shape(d: int, d_v: int, dtype: str, rows: int, limit: int) -> StreamShape:
    """The deepest ring (STAGES, else 2) whose block fits `limit` bytes of shared memory."""
    shape = StreamShape(d, d_v, dtype, rows)
    if shape.smem_bytes > limit:
        shape = StreamShape(d, d_v, dtype, rows, stages=2)
    return shape


def tensor_core_block(d: int, d_v: int, dtype: str, rows: int, vec: bool) -> bool:
    """Whether the tensor-core streaming block runs this step: 16-bit dtypes, 16-byte rows,
    d a multiple of 32 and d_v of 64 (each at most 128, so its fragments stay in registers),
    and at most 16 resident rows (one mma tile)."""
    return (
        dtype in ("float16", "bfloat16")
        and vec
        and d % 32 == 0
        and d_v % 64 == 0
        and d <= 128
        and d_v <= 128
        and rows <= MMA_ROWS
    )


def mma_smem_bytes(d: int, d_v: int) -> int:
    """Mirror of decode::MmaShape::SMEM: each warp's ring (or, after the loop, the warps'
    float states), then the 16 zero-padded Q rows in the input dtype."""
    warps = MMA_THREADS // 32
    slots = 2 * (d // 32) + 4 * (d_v // 64)
    ring = warps * MMA_STAGES * slots * 32 * 16
    state = 4 * warps * MMA_ROWS * (d_v + 2)
    return max(ring, state) + MMA_ROWS * d * 2


def combine_smem_bytes(d_v: int, splits: int) -> int:
    """Mirror of decode_combine's shared memory: the slices' partial sums, then the weights."""
    cw = 4 if d_v % 4 == 0 else 1
    colt = min(d_v // cw, COMBINE_THREADS)
    return 4 * ((COMBINE_THREADS // colt) * colt * cw + splits)


def vectorised(d: int, d_v: int, dtype: str, *arrays: Any) -> bool:
    """Whether the 16-byte loads apply: whole 16-byte rows and 16-byte aligned data."""
    sz = _BYTES[dtype]
    return (d * sz) % 16 == 0 and (d_v * sz) % 16 == 0 and all(a.data.ptr % 16 == 0 for a in arrays)


@dataclass
class Compiled:
    """The kernels of one (d, d_v, dtype, vec) combination, loaded (the tensor-core pair
    None where the head sizes do not suit it)."""

    split: Any
    one_pass: Any
    combine: Any
    compile_s: float
    split_mma: Any = None
    one_pass_mma: Any = None
    unused_lse: Any = None  # stand-ins for the arguments a launch does not use
    unused_counts: Any = None
    smem_opted: dict[int, int] = field(default_factory=dict)  # id(kernel) -> opted-in bytes


_CACHE: dict[tuple, Compiled] = {}


def _cupy():
    import cupy  # lazily: importing compute.gpu must work without CuPy

    return cupy


def compile_decode(
    d: int, d_v: int, dtype: str, *, vec: bool, count_transfers: bool = False
) -> Compiled:
    """Compile (or fetch) the split, one-pass and combine kernels for these head sizes."""
    key = (d, d_v, dtype, vec, count_transfers)
    if key in _CACHE:
        return _CACHE[key]
    args = f"{d},{d_v},{_DT[dtype]},{'true' if vec else 'false'}"
    names = [
        f"decode_split<{args}>",
        f"decode_one_pass<{args}>",
        f"decode_combine<{d_v},{_DT[dtype]}>",
    ]
    mma = tensor_core_block(d, d_v, dtype, 1, vec)
    if mma:
        names += [
            f"decode_split_mma<{d},{d_v},{_DT[dtype]}>",
            f"decode_one_pass_mma<{d},{d_v},{_DT[dtype]}>",
        ]
    functions, compile_s = load_functions(KERNEL_PATH, names, count_transfers=count_transfers)
    cupy = _cupy()
    compiled = Compiled(*functions[:3], compile_s, *functions[3:])
    compiled.unused_lse = cupy.empty(1, cupy.float32)
    compiled.unused_counts = cupy.empty(len(COUNTER_SLOTS), cupy.uint64)
    _CACHE[key] = compiled
    return compiled


@dataclass
class DecodeResult:
    """O (H_q, N_q, d_v) on the device, optional L (H_q, N_q), the split-KV partials
    O_s (S', H_q, N_q, d_v) and L_s (S', H_q, N_q) (None for one-pass), counted transfers."""

    out: Any
    lse: Any = None
    o_part: Any = None
    l_part: Any = None
    counts: dict[str, dict[str, int]] | None = None
    compile_s: float = 0.0


def _check(problem: DecodeProblem, schedule: str, q, k, v) -> None:
    if schedule not in ("one-pass", "split-kv"):
        raise ValueError(f"The decode kernels run one-pass or split-kv, not {schedule!r}.")
    if problem.dtype not in DECODE_DTYPES:
        raise ValueError(
            f"The decode kernels take {', '.join(DECODE_DTYPES)}, not {problem.dtype}."
        )
    want = _STORAGE[problem.dtype]
    for name, x, shape in zip("qkv", (q, k, v), problem.input_shapes(), strict=True):
        if tuple(x.shape) != shape or str(x.dtype) != want:
            raise ValueError(
                f"{name} must be a {want} array of shape {shape} for this decode problem, "
                f"not {x.dtype} {tuple(x.shape)}."
            )


@functools.cache
def _shared_limit() -> int:
    # Cached: the device query costs more host time than a short decode step takes.
    from .device import status

    st = status()
    if not st.usable:
        raise RuntimeError(st.reason)
    return st.shared_mem_per_block


@dataclass
class DecodeLaunch:
    """One decode step's launches, bound once: `run()` enqueues them and returns O."""

    launches: list[tuple[Any, tuple, tuple, tuple, int]]  # kernel, grid, block, args, smem
    result: DecodeResult
    counts: Any = None

    def run(self) -> Any:
        for fn, grid, block, args, smem in self.launches:
            fn(grid, block, args, shared_mem=smem)
        return self.result.out


def _opt_in(comp: Compiled, fn: Any, smem: int) -> None:
    # A driver call: made only when the kernel's dynamic shared memory must grow.
    if smem > comp.smem_opted.get(id(fn), 0):
        fn.max_dynamic_shared_size_bytes = smem
        comp.smem_opted[id(fn)] = smem


def prepare_decode(
    problem: DecodeProblem,
    q: Any,
    k: Any,
    v: Any,
    *,
    schedule: str = "split-kv",
    scale: float | None = None,
    save_lse: bool = False,
    count_transfers: bool = False,
    out: Any = None,
    workspace: tuple[Any, Any] | None = None,
) -> DecodeLaunch:
    """Check the inputs, compile, allocate and bind the launches of one decode step by the
    split-KV kernel and its combine (problem.splits splits), or by the one-pass kernel.
    `workspace` (O_s, L_s) buffers may be passed to share them between steps."""
    cupy = _cupy()
    _check(problem, schedule, q, k, v)
    p = problem
    vec = vectorised(p.d, p.d_v, p.dtype, q, k, v)
    comp = compile_decode(p.d, p.d_v, p.dtype, vec=vec, count_transfers=count_transfers)
    limit = _shared_limit()
    mma = tensor_core_block(p.d, p.d_v, p.dtype, p.block_rows, vec)
    if mma:
        smem, threads, tail = mma_smem_bytes(p.d, p.d_v), MMA_THREADS, ()
        split_fn, one_pass_fn = comp.split_mma, comp.one_pass_mma
    else:
        shape = stream_shape(p.d, p.d_v, p.dtype, p.block_rows, limit)
        smem, threads, tail = shape.smem_bytes, THREADS, (_cupy().int32(shape.stages),)
        split_fn, one_pass_fn = comp.split, comp.one_pass
    if smem > limit:
        raise DecodeTooLarge(
            f"{p.block_rows} resident query rows (G = {p.group} heads x {p.n_q} new tokens) "
            f"with d = {p.d}, d_v = {p.d_v} need {smem / 1024:.0f} KB of shared "
            f"memory per block but this device allows {limit / 1024:.0f} KB: use fewer new "
            "tokens or a smaller group."
        )
    scale = 1.0 / math.sqrt(p.d) if scale is None else float(scale)
    rows_total = p.h_q * p.n_q
    if out is None:
        out = cupy.empty((p.h_q, p.n_q, p.d_v), dtype=_STORAGE[p.dtype])
    lse = cupy.empty((p.h_q, p.n_q), cupy.float32) if save_lse else comp.unused_lse
    # Only the instrumented build touches the counters; zeroing them otherwise would put a
    # fill kernel into every timed step.
    counts = cupy.zeros(len(COUNTER_SLOTS), cupy.uint64) if count_transfers else comp.unused_counts
    i32, f32 = cupy.int32, cupy.float32
    sizes = (i32(p.n_q), i32(p.n_k), i32(p.block_rows), i32(p.block_k), i32(p.t_c))
    result = DecodeResult(out, lse if save_lse else None, compile_s=comp.compile_s)
    launch = DecodeLaunch([], result, counts if count_transfers else None)
    if schedule == "one-pass":
        _opt_in(comp, one_pass_fn, smem)
        args = (q, k, v, out, lse, *sizes, f32(scale * LOG2E), i32(save_lse), *tail, counts)
        launch.launches.append((one_pass_fn, (1, p.h_kv), (threads,), args, smem))
    else:
        s = p.splits_used
        if workspace is None:
            workspace = (
                cupy.empty((s, p.h_q, p.n_q, p.d_v), cupy.float32),
                cupy.empty((s, p.h_q, p.n_q), cupy.float32),
            )
        o_part, l_part = workspace
        _opt_in(comp, split_fn, smem)
        args = (q, k, v, o_part, l_part, *sizes, i32(s), f32(scale * LOG2E), *tail, counts)
        launch.launches.append((split_fn, (s, p.h_kv), (threads,), args, smem))
        c_smem = combine_smem_bytes(p.d_v, s)
        _opt_in(comp, comp.combine, c_smem)
        args = (o_part, l_part, out, lse, i32(rows_total), i32(s), i32(save_lse), counts)
        launch.launches.append((comp.combine, (rows_total,), (COMBINE_THREADS,), args, c_smem))
        result.o_part, result.l_part = o_part, l_part
    return launch


def decode_attention_gpu(
    problem: DecodeProblem, q: Any, k: Any, v: Any, **options: Any
) -> DecodeResult:
    """One decode step: prepare_decode(problem, q, k, v, **options) (schedule, scale,
    save_lse, count_transfers, out, workspace), then its launches; with count_transfers the
    result carries the counted transfers."""
    launch = prepare_decode(problem, q, k, v, **options)
    launch.run()
    result = launch.result
    if launch.counts is not None:
        result.counts = tally_counts(launch.counts, COUNTER_SLOTS, COUNTED_TENSORS)
    return result
