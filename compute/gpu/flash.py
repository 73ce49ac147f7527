"""Tensor-core FlashAttention forward for CuPy arrays (CUDA C++ through ``cupy.RawModule``).

``flash_attention(q, k, v, causal=..., scale=..., return_lse=...)`` takes CuPy arrays shaped
(batch, heads, N, d) in float16, or bfloat16 passed as a ``uint16`` view of the bits (CuPy has
no bfloat16 dtype), and returns the output in the same dtype (bf16 again as ``uint16`` bits).
Accumulation and softmax statistics are float32. d must be 64 or 128; any N works (tails
are masked); N_q may differ from N_k, in which case causal masking is bottom-right aligned
(query row r sees key c iff c <= r + N_k - N_q). Rows that see no key return zeros and
LSE = -inf. With ``return_lse=True`` the row log-sum-exp of the scaled scores (natural log,
float32, shape (batch, heads, N_q)) is returned as well.

Two kernels live in ``kernels/``: ``flash_fwd_mma.cu`` (FA2 schedule with mma.sync, any
sm_80+ GPU) and ``flash_fwd_wgmma.cu`` (Hopper wgmma, sm_90a only). The module imports
without CuPy; CuPy is imported on first use.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

_KERNEL_DIR = Path(__file__).parent / "kernels"
_LOG2E = 1.4426950408889634

SUPPORTED_HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class Config:
    """One compiled kernel variant."""

    kernel: str  # "mma" or "wgmma"
    d: int
    warps: int  # mma: warps per CTA (16 query rows each); wgmma: warpgroups (64 rows each)
    block_n: int
    min_blocks: int = 1
    # wgmma, two warpgroups only: alternate the tensor cores between them with named barriers
    # (FA3's inter-warpgroup overlap); +4-10% at 1 CTA/SM, a loss at 2 (FLASH_NOTES.md).
    ping_pong: bool = False

    @property
    def block_m(self) -> int:
        return self.warps * (16 if self.kernel == "mma" else 64)

    @property
    def threads(self) -> int:
        return self.warps * (32 if self.kernel == "mma" else 128)

    def smem_bytes(self) -> int:
        if self.kernel == "mma":
            return (self.block_m + 4 * self.block_n) * self.d * 2
        # wgmma: Q + 2 stages of K and V, plus 1 KB so the base can be aligned to 1024 bytes.
        return (self.block_m + 4 * self.block_n) * self.d * 2 + 1024

    def name(self, dt: int) -> str:
        """The template instantiation NVRTC compiles for dtype code dt (0 fp16, 1 bf16)."""
        if self.kernel == "mma":
            return f"flash_fwd_mma<{dt},{self.d},{self.warps},{self.block_n},{self.min_blocks}>"
        return (
            f"flash_fwd_wgmma<{dt},{self.d},{self.warps},{self.block_n},{self.min_blocks},"
            f"{int(self.ping_pong)}>"
        )

    def spec(self) -> str:
        """'mma:D:WARPS:BN:MINB' or 'wgmma:D:WG:BN:MINB[:pingpong]' (parse() reads it back)."""
        text = f"{self.kernel}:{self.d}:{self.warps}:{self.block_n}:{self.min_blocks}"
        return text + (":pingpong" if self.ping_pong else "")

    @classmethod
    def parse(cls, spec: str) -> Config:
        """The variant a spec() string names; ValueError with one sentence if it names none."""
        parts = spec.split(":")
        ping_pong = parts[-1] == "pingpong"
        if ping_pong:
            parts = parts[:-1]
        if (
            parts[0] not in ("mma", "wgmma")
            or len(parts) != 5
            or not all(p.isdigit() for p in parts[1:])
        ):
            raise ValueError(f"{spec!r} is not a kernel spec like 'wgmma:128:2:64:2[:pingpong]'")
        d, warps, block_n, min_blocks = (int(p) for p in parts[1:])
        return cls(parts[0], d, warps, block_n, min_blocks, ping_pong)


# Defaults, chosen from the measurements recorded in FLASH_NOTES.md. Hopper (sm_90) gets the
# wgmma kernel; any other GPU the mma.sync kernel.
WGMMA_CONFIGS: dict[int, Config] = {
    64: Config("wgmma", 64, 2, 128, 2),
    128: Config("wgmma", 128, 2, 64, 2),
}
MMA_CONFIGS: dict[int, Config] = {
    64: Config("mma", 64, 4, 64, 4),
    128: Config("mma", 128, 8, 128, 1),
}


@functools.cache
def _is_hopper() -> bool:
    cp = _cupy()
    return cp.cuda.Device().compute_capability == "90"


def default_config(d: int) -> Config:
    """The kernel variant flash_attention uses for head dim d on the current device."""
    return (WGMMA_CONFIGS if _is_hopper() else MMA_CONFIGS)[d]


def _cupy():
    import cupy

    return cupy


@functools.cache
def _module(kernel: str, names: tuple[str, ...]):
    cp = _cupy()
    src = (_KERNEL_DIR / f"flash_fwd_{kernel}.cu").read_text()
    options = ("-std=c++17", "-I" + str(_KERNEL_DIR))  # common.cuh, wgmma_wrappers.cuh
    if kernel == "wgmma":  # wgmma needs the sm_90a target (NVRTC; see platform notes)
        options += ("-arch=sm_90a", "-DFA_FORCE_WGMMA")
    return cp.RawModule(code=src, options=options, name_expressions=list(names))


@functools.cache
def _function(cfg: Config, dt: int):
    name = cfg.name(dt)
    mod = _module(cfg.kernel, (name,))
    fn = mod.get_function(name)
    fn.max_dynamic_shared_size_bytes = cfg.smem_bytes()
    return fn


def _dtype_code(a) -> int:
    cp = _cupy()
    if a.dtype == cp.float16:
        return 0
    if a.dtype == cp.uint16:
        return 1  # bfloat16 bits
    raise TypeError(f"flash_attention takes float16 or bfloat16-as-uint16 arrays, not {a.dtype}")


def _check(q, k, v):
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


def flash_attention(q, k, v, *, causal=False, scale=None, return_lse=False, config=None, out=None):
    """softmax(Q Kᵀ · scale [causal mask]) V on the GPU; see the module docstring.

    ``config`` (a :class:`Config`) overrides the kernel variant (for benchmarking); ``out``
    (contiguous, q's shape and dtype) receives the result instead of a new array.
    """
    cp = _cupy()
    _check(q, k, v)
    dt = _dtype_code(q)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not scale > 0:
        raise ValueError("scale must be positive")
    cfg = config or default_config(d)
    if cfg.d != d:
        raise ValueError(f"config is for d={cfg.d}, inputs have d={d}")
    if cfg.kernel == "wgmma" and not _is_hopper():
        raise ValueError("the wgmma kernel needs an sm_90 (Hopper) GPU")
    q = cp.ascontiguousarray(q)
    k = cp.ascontiguousarray(k)
    v = cp.ascontiguousarray(v)
    if out is None:
        out = cp.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or not out.flags.c_contiguous:
        raise ValueError("out must be contiguous with q's shape and dtype")
    lse = cp.empty((b, h, n_q), dtype=cp.float32) if return_lse else None
    if b * h and n_q:
        fn = _function(cfg, dt)
        grid = ((n_q + cfg.block_m - 1) // cfg.block_m, b * h, 1)
        fn(
            grid,
            (cfg.threads, 1, 1),
            (
                q,
                k,
                v,
                out,
                lse if lse is not None else cp.uint64(0),
                cp.int32(n_q),
                cp.int32(n_k),
                cp.float32(scale * _LOG2E),
                cp.int32(1 if causal else 0),
            ),
            shared_mem=cfg.smem_bytes(),
        )
    return (out, lse) if return_lse else out
