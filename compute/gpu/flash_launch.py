"""Compiling and launching the tensor-core forward's kernels (CuPy, NVRTC, TMA).

`compiled(cfg, dt)` builds one variant's instantiation (cached); `launch(...)` runs it over
(batch, heads, N, d) arrays. The ws kernel takes its inputs as TMA tensor maps (tma.py)
and, when persistent, a ticket counter; `ws_arguments` prepares both. CuPy is imported on
first use, so the module imports without it.
"""

from __future__ import annotations

import functools

from .flash_plan import lpt_section
from .flash_variants import Config
from .sources import KERNEL_DIR, kernel_source

LOG2E = 1.4426950408889634


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


def launch(cfg: Config, dt: int, q, k, v, out, lse, scale: float, causal: bool) -> None:
    """Run variant cfg on contiguous q, k, v into out (and lse, or None)."""
    cp = cupy()
    b, h, n_q, _ = q.shape
    n_k = k.shape[2]
    grid = ((n_q + cfg.block_m - 1) // cfg.block_m, b * h, 1)
    inputs, extra, keep = (q, k, v), (), ()
    if cfg.kernel == "ws":
        # `inputs` point into `keep`, which this frame holds past the launch.
        grid, inputs, extra, keep = ws_arguments(cfg, grid, q, k, v, out)
    compiled(cfg, dt)(
        grid,
        (cfg.threads, 1, 1),
        (
            *inputs,
            out,
            lse if lse is not None else cp.uint64(0),
            cp.int32(n_q),
            cp.int32(n_k),
            cp.float32(scale * LOG2E),
            cp.int32(1 if causal else 0),
            *extra,
        ),
        shared_mem=cfg.smem_bytes(),
    )
    del keep


def ws_arguments(cfg: Config, grid, q, k, v, out) -> tuple[tuple, tuple, tuple, tuple]:
    """flash_fwd_ws's grid, inputs and trailing arguments, and what its inputs point into
    (the tensor maps of Q, K, V and O, then the ticket counter).

    Q, K, V and O go in as TMA tensor maps passed by value (copied at launch); the kernel also
    takes the query-block and head counts, the ticket counter of the persistent schedule
    and the heads per LPT section. O's map and the last three arguments (a workspace and two
    counts) are left from removed variants and unused by the kernel (kernels/flash_fwd_ws.cu)."""
    from . import tma

    cp = cupy()
    num_qb, heads = grid[0], grid[1]
    tickets = cp.zeros(1, dtype=cp.int32) if cfg.persistent else cp.uint64(0)
    if cfg.persistent:  # one CTA per SM, each drawing its next item from the counter
        grid = (min(grid[0] * grid[1], sm_count()), 1, 1)
    maps = (
        tma.tiled_map(q, cfg.block_m),
        tma.tiled_map(k, cfg.block_n),
        tma.tiled_map(v, cfg.block_n),
        tma.tiled_map(out, 64),
    )
    inputs = tuple(tma.kernel_arg(m) for m in maps)
    section = lpt_section(k.shape[2], cfg.d, heads, l2_bytes())
    extra = (
        cp.int32(num_qb), cp.int32(heads), tickets, cp.int32(section),
        cp.uint64(0), cp.int32(0), cp.int32(0),
    )  # fmt: skip
    return grid, inputs, extra, (*maps, tickets)
