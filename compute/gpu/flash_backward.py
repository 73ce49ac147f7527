"""Tensor-core FlashAttention backward for CuPy arrays (Hopper, `kernels/flash_bwd_ws.cu`).

``flash_attention_backward(q, k, v, o, do, lse, causal=..., scale=...) -> (dq, dk, dv)`` takes
what ``flash.flash_attention(q, k, v, ..., return_lse=True)`` took and returned (``o``, ``lse``)
plus the output gradient ``do``: CuPy arrays shaped (batch, heads, N, d) in float16, or bfloat16
as ``uint16`` bits, d in {64, 128}, any N, N_q != N_k (causal masking bottom-right aligned),
and ``lse`` float32 (batch, heads, N_q). Accumulation is float32; the gradients come back in
the input dtype. Query rows that see no key (LSE = -inf) get dQ = 0 and add nothing to dK, dV.

Strides and GQA (the default and deterministic kernel, modes 7 and 9): q, k, v, o, do are
read at their own (batch, head, row) strides when the kernels can address them
(``flash_launch.readable``: a unit last dimension, 16-byte base and strides), so SDPA's views
of (batch, N, heads, d) memory are not copied; k and v may have fewer heads than q, dividing
them (GQA / MQA: query head h reads K/V head h // group, and dK, dV are summed over the group
inside the kernel). ``out=(dq, dk, dv)`` writes the gradients into readable arrays of q's and
k's shapes instead of new contiguous ones. The fallback modes (0, 4, 5) read contiguous
copies and take no GQA.

A sliding window (the forward's band, ``flash_launch``'s ``band``): ``band=(lo, hi)`` means
query row r sees keys r + lo <= c <= r + hi (``flash_launch.BAND_OPEN`` for an unbounded
side; ``causal`` then False: causal is the band (-BAND_OPEN, N_k - N_q)). Each key block
streams only the query blocks whose band reaches it, and masks only the tiles the band's
edges (or the key tail) cross; rows whose band holds no key (LSE = -inf) get dQ = 0.

Three launches: a preprocessing kernel (D = rowsum(dO o O), LSE in the exp2 domain, both
padded to whole 64-row query blocks; it also zeroes the dQ accumulator and tickets), the main kernel (one CTA per 128-key block and head: a
producer warpgroup streams the query blocks in by TMA, two consumer warpgroups keep dK and dV
in registers and add dQ into a float32 accumulator by one bulk reduction per 64 x 64 tile)
and a conversion of dQ to the input dtype, times the scale. At d = 128 without a band the
query blocks are 80 rows (FlashAttention-4's non-causal tile; dQ computed transposed, one
bulk reduction per 64-column x 80-query tile, rows padded to a multiple of 320; causal, the
blocks end at N_q). ``deterministic=True`` makes the
key blocks add each dQ tile in a fixed order (bitwise repeatable gradients, at a cost
BACKWARD_NOTES.md records). ``backward_mode`` also runs the earlier wgmma kernel
(`kernels/flash_bwd_wgmma.cu`, consumers loading by cp.async), kept as the fallback.
BACKWARD_NOTES.md ("Tensor-core backward" and after) records the design and its measurements.

Hopper (sm_90) only: on another GPU the call raises ValueError saying so (the portable
backward is ``compute.gpu.tiled_attention_backward_gpu``). Imports without CuPy.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from .flash import _LOG2E, _check, _cupy, _dtype_code, _is_hopper, resolve_scale
from .flash_launch import BAND_OPEN
from .sources import KERNEL_DIR, kernel_source

BLOCK_KEYS = 128  # keys per CTA (flash_bwd_wgmma.cu's FB_BN)
BLOCK_QUERIES = 64  # rows per streamed query block (FB_BM)
THREADS = 256  # two warpgroups


# Modes 0, 4, 5 are flash_bwd_main's MODE (kernels/flash_bwd_wgmma.cu, the fallback): dQ by
# per-thread red atomics (0), by one bulk reduction per warpgroup's 64 x 64 tile kept in
# accumulator order (4), or 4 in a fixed key-block order (5). Modes 7 and 9 are 4 and 5 in the
# warp-specialised kernel (kernels/flash_bwd_ws.cu: a TMA producer warpgroup and mbarrier rings
# instead of cp.async by the consumers), WS_MODES giving its DET argument. BACKWARD_NOTES.md has
# 7 1.28-1.38x the wgmma kernel's best mode and 9 1.04-1.10x 5 (bf16, N 4096 and 16384), hence
# the defaults (6 and 8, the ws kernel with atomics and with three stages, lost and are gone).
# Mode 16 is 9 with each consumer's dQ tiles added (and their tickets waited for) by a warp of
# the producer warpgroup instead of the consumer itself (DRAIN): the same additions in the same
# order, so bitwise mode 9's results; measured 1.45-1.74x mode 9 (BACKWARD_NOTES.md), hence
# the deterministic default (its GPU tests, mode 9's bits included, passed on the merged tree).
# Mode 13 is 7 at d = 128 with 80-row query blocks (kernels/flash_bwd_ws80.cuh, FlashAttention-4's
# non-causal d = 128 tile; causal with blocks that end at N_q; no band or fixed order): faster
# than mode 7 in all twelve d = 128 cases of the bar (BACKWARD_NOTES.md, rounds 46 and 47; the
# causal ones through the op's launch path), hence the 80-row kernel there (default_mode, now
# as mode 23); mode 7 stays the default under a band at d = 128. Mode 23 is 13 with FlashAttention-4's order after
# the hand-off: dQ issued before dK, its tile stored while dK runs; faster than mode 13 in
# every non-causal d = 128 case (round 48) and, by every causal case's mean over four timings,
# under the causal mask too (BACKWARD_NOTES.md, round 49), hence the d = 128 default. Mode 25
# is 7 with dV's k-steps issued two to a commit group as their rows' exponentials finish
# (flash_bwd_ws's DVK): at or above mode 7 in every d = 64 case's mean over four timings
# (BACKWARD_NOTES.md, round 49), hence the d = 64 default.
# DEFAULT_MODE = None means "the default for the call" (default_mode).
MODES = (0, 4, 5, 7, 9, 13, 16, 23, 25)
WS_MODES = {7: False, 9: True, 13: False, 16: True, 23: False, 25: False}
DVK_MODES = {25: 2}  # d = 64: flash_bwd_ws's DVK (dV under the exponentials)
Q80_MODES = (13, 23)
DQ_FIRST_MODES = (23,)  # flash_bwd_ws80's DQ_FIRST
Q80_ROWS = 80  # rows per streamed query block in Q80_MODES
Q80_PAD = 320  # their rows padded to a multiple of 64 (the preprocess's blocks) and 80
DRAIN_MODES = (16,)  # the dQ tiles added by producer-warpgroup warps (flash_bwd_ws's DRAIN)
WS_THREADS = 384  # producer warpgroup + two consumer warpgroups
WS_STAGES = 2  # flash_bwd_ws.cu's FBW_ST
DEFAULT_MODES = {64: 25, 128: 7}
DEFAULT_MODE = None
# dQ in accumulator order, one bulk reduction per 64 x 64 tile
FRAG_MODES = (4, 5, 7, 9, 16, 25)
DETERMINISTIC_MODE = 16
TICKET_MODES = (5, 9, 16)  # a ticket per (head, query block, 64-column chunk)
DQ_BUFFERS_BYTES = 4 * 64 * 64 * 4  # FRAG: two 64 x 64 fp32 buffers per warpgroup


def default_mode(d: int, causal: bool, band: tuple[int, int] | None = None) -> int:
    """The mode a call that names none gets: at d = 128 without a band mode 23 (causal
    or not); else DEFAULT_MODES' for d (d = 64: mode 25)."""
    if query_rows(d, causal, band) != Q80_ROWS:
        return DEFAULT_MODES[d]
    return 23


def query_rows(d: int, causal: bool, band: tuple[int, int] | None = None) -> int:
    """Rows per streamed query block of the default kernel for such a call (its tile is
    that many queries x BLOCK_KEYS keys): 80 at d = 128 without a band, else 64."""
    return Q80_ROWS if d == 128 and band is None else BLOCK_QUERIES


def ws_rows(mode: int, n_q: int) -> tuple[int, int]:
    """(padded query rows, rows per streamed query block) of a ws mode's launch."""
    pad, rows = (Q80_PAD, Q80_ROWS) if mode in Q80_MODES else (BLOCK_QUERIES, BLOCK_QUERIES)
    return -(-n_q // pad) * pad, rows


def post_launch(mode: int, bh: int, n_q: int, n_pad: int, d: int) -> tuple[int, int]:
    """(blocks, the accumulator's query blocks per head) of a ws mode's dQ postprocess: one
    block per 64 x 64 chunk, or per 64-column x 80-query chunk the rows reach (Q80_MODES)."""
    if mode in Q80_MODES:
        return bh * -(-n_q // Q80_ROWS) * 2, n_pad // Q80_ROWS
    return bh * (n_pad // BLOCK_QUERIES) * (d // 64), n_pad // BLOCK_QUERIES


def smem_bytes(d: int, mode: int = 0) -> int:
    """Shared memory of one main-kernel CTA: K, V, two stages of Q and dO, dS^T, L and D
    (+ the four fp32 dQ buffers in MODES 4, 5), plus 1 KB for the 1024-byte alignment."""
    tiles = (2 * BLOCK_KEYS * d + 4 * BLOCK_QUERIES * d + BLOCK_KEYS * BLOCK_QUERIES) * 2
    dq_tile = DQ_BUFFERS_BYTES if mode in FRAG_MODES else 0
    if mode in Q80_MODES:  # flash_bwd_ws80.cuh's Fbw80Smem (d = 128)
        tiles = (2 * BLOCK_KEYS + 4 * Q80_ROWS) * d * 2 + 2 * Q80_ROWS * BLOCK_KEYS * 2
        return tiles + 2 * Q80_ROWS * 64 * 4 + 2 * 2 * Q80_ROWS * 4 + 8 * 7 + 1024
    if mode in WS_MODES:  # flash_bwd_ws.cu's FbwSmem: two dS^T tiles, L2 / D, mbarriers
        tiles = (2 * BLOCK_KEYS * d + 2 * WS_STAGES * BLOCK_QUERIES * d) * 2
        tiles += 2 * BLOCK_KEYS * BLOCK_QUERIES * 2
        return tiles + dq_tile + WS_STAGES * 512 + 8 * (1 + 3 * WS_STAGES) + 1024
    return tiles + 1024 + dq_tile + 1024


def _functions(dt: int, d: int, mode: int, causal: bool = False) -> tuple[Any, Any, Any]:
    """(pre, main, post) of a mode; `causal` picks Q80_MODES' causal kernels (their query
    blocks end at N_q, so their pre / post kernels shift the rows), the same for the rest."""
    return _module_functions(dt, d, mode, causal and mode in Q80_MODES)


@functools.cache
def _module_functions(dt: int, d: int, mode: int, endq: bool) -> tuple[Any, Any, Any]:
    return _compile(*kernel_names(dt, d, mode, endq), d, mode)[:3]


def kernel_names(dt: int, d: int, mode: int, endq: bool) -> tuple[list[str], str]:
    """([pre, main, post] kernel name expressions of a mode, the source: "ws" or "wgmma"
    for kernels/flash_bwd_{source}.cu); endq as _module_functions'."""
    if mode in Q80_MODES:
        e, first = str(endq).lower(), str(mode in DQ_FIRST_MODES).lower()
        names = [f"flash_bwd_pre80_s<{dt}>" if endq else f"flash_bwd_pre_s<{dt},{d}>",
                 f"flash_bwd_ws80<{dt},{e},{first}>", f"flash_bwd_post_t80_s<{dt},{e}>"]  # fmt: skip
        source = "ws"
    elif mode in WS_MODES:  # the strided pre / post of flash_bwd_layout.cuh
        det = str(WS_MODES[mode]).lower()
        tail = ",true" if mode in DRAIN_MODES else ""  # DRAIN, then DVK
        tail = f",false,{DVK_MODES[mode]}" if mode in DVK_MODES else tail
        names = [f"flash_bwd_pre_s<{dt},{d}>", f"flash_bwd_ws<{dt},{d},{det}{tail}>",
                 f"flash_bwd_post_frag_s<{dt},{d}>"]  # fmt: skip
        source = "ws"
    else:
        names = [
            f"flash_bwd_pre<{dt},{d}>",
            f"flash_bwd_main<{dt},{d},{mode}>",
            f"flash_bwd_post_frag<{dt},{d}>" if mode in FRAG_MODES else f"flash_bwd_post<{dt},{d}>",
        ]
        source = "wgmma"
    return names, source


def _compile(names: list[str], source: str, d: int, mode: int, defines: tuple = ()):
    """(pre, main, post, the module) compiled from kernels/flash_bwd_{source}.cu; `defines`:
    extra -D options (the lab's timeline build, FBW_TIMELINE)."""
    cp = _cupy()
    mod = cp.RawModule(
        code=kernel_source(KERNEL_DIR / f"flash_bwd_{source}.cu"),
        options=(
            "-std=c++17",
            "-I" + str(KERNEL_DIR),
            "-arch=sm_90a",
            "-DFA_FORCE_WGMMA",
            *(f"-D{x}" for x in defines),
        ),  # fmt: skip
        name_expressions=names,
    )
    pre, main, post = (mod.get_function(n) for n in names)
    main.max_dynamic_shared_size_bytes = smem_bytes(d, mode)
    return pre, main, post, mod


def _check_backward(q, k, v, o, do, lse) -> None:
    """flash.py's checks on q, k, v (K/V heads may divide q's: GQA), then o, do and lse
    against them; one sentence each."""
    if q.ndim == 4 and k.ndim == 4 and k.shape[0] == q.shape[0] and 0 < k.shape[1] < q.shape[1]:
        if q.shape[1] % k.shape[1]:
            raise ValueError(
                f"k and v have {k.shape[1]} heads, which must divide q's {q.shape[1]} (GQA)"
            )
        _check(q[:, : k.shape[1]], k, v)  # the same checks at K/V's head count
        if q.shape[0] * q.shape[1] > 65535:
            raise ValueError("batch * heads must be at most 65535 (one grid row per head)")
    else:
        _check(q, k, v)
    for name, x in (("o", o), ("do", do)):
        if x.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {q.shape}, not {x.shape}")
        if x.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, not {x.dtype}")
    if lse.shape != q.shape[:3]:
        raise ValueError(f"lse must be shaped (batch, heads, N_q) = {q.shape[:3]}, not {lse.shape}")
    if lse.dtype != _cupy().float32:
        raise TypeError(f"lse must be float32 (flash_attention's return_lse), not {lse.dtype}")


def flash_attention_backward(
    q, k, v, o, do, lse, *, causal: bool = False, scale=None, deterministic: bool = False,
    out=None, band: tuple[int, int] | None = None,
):  # fmt: skip
    """(dQ, dK, dV) of softmax(Q Kᵀ · scale [causal mask | band]) V given dO; see the module
    docstring.

    ``deterministic=True`` adds each dQ tile in a fixed (key-block) order, so two calls on the
    same inputs return bitwise equal gradients (dK and dV always are). ``out=(dq, dk, dv)``:
    arrays (q's, k's, v's shapes and dtype, strides the kernels can write) to write into.
    ``band=(lo, hi)``: a sliding window, query row r seeing keys r + lo <= c <= r + hi (what
    the forward's band variant computed o and lse with)."""
    mode = DETERMINISTIC_MODE if deterministic else DEFAULT_MODE
    return backward_mode(q, k, v, o, do, lse, causal=causal, scale=scale, mode=mode, out=out,
                         band=band)  # fmt: skip


def _check_band(band, causal: bool, mode: int) -> tuple[int, int]:
    """A band's (lo, hi) as ints, or ValueError in one sentence."""
    if causal:
        raise ValueError(
            "band and causal do not go together: pass causal=False with the band "
            "(causal is the band (-BAND_OPEN, N_k - N_q))"
        )
    if mode not in WS_MODES:
        raise ValueError(f"backward mode {mode} takes no band: use the default, or mode 7, 9 or 16")
    try:
        lo, hi = (int(x) for x in band)
    except (TypeError, ValueError):
        raise ValueError(f"band must be a pair of whole numbers (lo, hi), not {band!r}") from None
    if not (-BAND_OPEN <= lo <= BAND_OPEN and -BAND_OPEN <= hi <= BAND_OPEN):
        raise ValueError(f"band bounds must lie within +-BAND_OPEN (2**30), not {band!r}")
    return lo, hi


def backward_mode(
    q, k, v, o, do, lse, *, causal: bool = False, scale=None, mode: int | None = DEFAULT_MODE,
    out=None, band: tuple[int, int] | None = None,
):  # fmt: skip
    """flash_attention_backward with the main kernel's MODE chosen (None: d's default)."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} or None, not {mode!r}")
    cp = _cupy()
    _check_backward(q, k, v, o, do, lse)
    if mode is None:
        mode = default_mode(q.shape[3], causal, band)
    dt = _dtype_code(q)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    scale = resolve_scale(scale, d)
    if not _is_hopper():
        raise ValueError(
            "flash_attention_backward needs an sm_90 (Hopper) GPU; "
            "use tiled_attention_backward_gpu elsewhere"
        )
    if out is not None:
        _check_out(out, q, k)
    if band is not None:
        band = _check_band(band, causal, mode)
    if mode in Q80_MODES and (d != 128 or band is not None):
        raise ValueError(f"backward mode {mode} is for d = 128 without a band")
    if mode in DVK_MODES and d != 64:
        raise ValueError(f"backward mode {mode} is for d = 64")
    if mode in WS_MODES:
        return _backward_ws(mode, q, k, v, o, do, lse, causal, scale, out, band)
    if k.shape[1] != h:
        raise ValueError(f"backward mode {mode} takes no GQA: use the default, or mode 7 or 9")
    if out is not None:  # the fallback writes contiguous gradients; copy them over
        for dst, src in zip(out, backward_mode(q, k, v, o, do, lse, causal=causal, scale=scale,
                                               mode=mode), strict=True):  # fmt: skip
            dst[...] = src
        return tuple(out)
    q, k, v, o, do = (cp.ascontiguousarray(x) for x in (q, k, v, o, do))
    lse = cp.ascontiguousarray(lse)
    dq, dk, dv = cp.empty_like(q), cp.empty_like(k), cp.empty_like(v)
    bh = b * h
    if bh == 0 or (n_q == 0 and n_k == 0):
        return dq, dk, dv
    if n_q == 0:  # no query: nothing flows back to the keys
        dk.fill(0)
        dv.fill(0)
        return dq, dk, dv
    pre, main, post = _functions(dt, d, mode)
    n_pad = -(-n_q // BLOCK_QUERIES) * BLOCK_QUERIES
    l2 = cp.empty((bh, n_pad), dtype=cp.float32)
    dsum = cp.empty((bh, n_pad), dtype=cp.float32)
    dq_acc = cp.zeros((bh, n_pad, d), dtype=cp.float32)
    frag = mode in FRAG_MODES
    n_tickets = bh * (n_pad // BLOCK_QUERIES) * (d // 64) if mode in TICKET_MODES else 1
    tickets = cp.zeros((n_tickets,), dtype=cp.int32)
    rows = bh * n_pad
    pre(
        (-(-rows // 8),),
        (256,),
        (o, do, lse, l2, dsum, cp.int32(n_q), cp.int32(n_pad), cp.int32(rows)),
    )
    if n_k:
        main(
            (-(-n_k // BLOCK_KEYS), bh, 1),
            (THREADS, 1, 1),
            (
                q,
                k,
                v,
                do,
                l2,
                dsum,
                dq_acc,
                dk,
                dv,
                tickets,
                cp.int32(n_q),
                cp.int32(n_k),
                cp.int32(n_pad),
                cp.float32(scale),
                cp.float32(scale * _LOG2E),
                cp.int32(1 if causal else 0),
            ),  # fmt: skip
            shared_mem=smem_bytes(d, mode),
        )
    if frag:
        quads = bh * n_pad * d // 4
        args = (dq_acc, dq, cp.int32(n_q), cp.int32(n_pad // BLOCK_QUERIES), cp.int64(quads),
                cp.float32(scale))  # fmt: skip
        post((-(-quads // 256),), (256,), args)
        return dq, dk, dv
    pairs = bh * n_q * d // 2
    post(
        (-(-pairs // 256),),
        (256,),
        (dq_acc, dq, cp.int32(n_q), cp.int32(n_pad), cp.int64(pairs), cp.float32(scale)),
    )
    return dq, dk, dv


class _Layout(ctypes.Structure):
    """kernels/flash_bwd_layout.cuh's FbwLayout, passed to the ws kernels by value."""

    _fields_ = [
        ("strides", ctypes.c_longlong * 15),
        ("heads", ctypes.c_int),
        ("group", ctypes.c_int),
        ("lo", ctypes.c_int),  # the band: query row r sees keys r + lo <= c <= r + hi
        ("hi", ctypes.c_int),
    ]


def _strides(a) -> tuple[int, int, int]:
    """(batch, head, row) element strides of a readable array, flash_launch.normal_strides'."""
    from .flash_launch import normal_strides

    return normal_strides(a.shape, tuple(s // a.itemsize for s in a.strides))


def _in_place(a) -> bool:
    from .flash_launch import readable

    return readable(a.shape, tuple(s // a.itemsize for s in a.strides), a.data.ptr)


def _check_out(out, q, k) -> None:
    """out=(dq, dk, dv): the gradients' shapes and dtype, strides the kernels write."""
    if len(out) != 3:
        raise ValueError("out must be three arrays (dq, dk, dv)")
    for name, x, like in zip(("dq", "dk", "dv"), out, (q, k, k), strict=True):
        if x.shape != like.shape or x.dtype != like.dtype:
            raise ValueError(f"out's {name} must be shaped {like.shape} of {like.dtype}")
        if not _in_place(x):
            raise ValueError(
                f"out's {name} must have a unit last stride and 16-byte aligned base and strides"
            )


def _backward_ws(mode, q, k, v, o, do, lse, causal, scale, out, band=None):
    """Modes 7, 9: flash_bwd_ws on the arrays at their strides (copies only of what the
    kernels cannot address), K/V heads dividing q's, into `out` or new contiguous arrays;
    `band` (lo, hi) a checked band (causal False), else causal's or no bound."""
    from cupy.cuda.function import CPointer

    from . import tma

    cp = _cupy()
    q, k, v, o, do = (x if _in_place(x) else cp.ascontiguousarray(x) for x in (q, k, v, o, do))
    lse = cp.ascontiguousarray(lse)
    dq, dk, dv = out if out is not None else (cp.empty(x.shape, x.dtype) for x in (q, k, v))
    b, h, n_q, d = q.shape
    hk, n_k = k.shape[1], k.shape[2]
    if b * h == 0 or (n_q == 0 and n_k == 0):
        return dq, dk, dv
    if n_q == 0:  # no query: nothing flows back to the keys
        dk.fill(0)
        dv.fill(0)
        return dq, dk, dv
    pre, main, post = _functions(_dtype_code(q), d, mode, causal)
    n_pad, rows = ws_rows(mode, n_q)
    nblk = n_pad // BLOCK_QUERIES
    bh = b * h
    layout = _Layout()
    layout.strides[:] = [s for x in (o, do, dq, dk, dv) for s in _strides(x)]
    layout.heads, layout.group = h, h // hk
    if band is None:
        band = (-BAND_OPEN, n_k - n_q if causal else BAND_OPEN)
    layout.lo, layout.hi = band
    lay = CPointer(ctypes.addressof(layout))
    l2 = cp.empty((bh, n_pad), dtype=cp.float32)
    dsum = cp.empty((bh, n_pad), dtype=cp.float32)
    # The preprocess zeroes the accumulator and the tickets (one block per query block).
    dq_acc = cp.empty((bh, n_pad, d), dtype=cp.float32)
    tickets = cp.empty((bh * nblk * (d // 64) if mode in TICKET_MODES else 1,), dtype=cp.int32)
    zero_tickets = tickets if mode in TICKET_MODES else cp.uint64(0)
    pre((bh * nblk,), (256,),
        (o, do, lse, l2, dsum, dq_acc, zero_tickets, cp.int32(n_q), cp.int32(n_pad), lay))  # fmt: skip
    if n_k:
        maps = [
            tma.tensor_map(x.data.ptr, x.shape, _strides(x), r)
            for x, r in ((q, rows), (k, BLOCK_KEYS), (v, BLOCK_KEYS), (do, rows))
        ]
        args = (
            *(tma.kernel_arg(m) for m in maps), l2, dsum, dq_acc, dk, dv, tickets,
            cp.int32(n_q), cp.int32(n_k), cp.int32(n_pad), cp.float32(scale),
            cp.float32(scale * _LOG2E), cp.int32(1 if causal else 0), lay,
        )  # fmt: skip
        grid = (-(-n_k // BLOCK_KEYS), b * hk, 1)
        main(grid, (WS_THREADS, 1, 1), args, shared_mem=smem_bytes(d, mode))
    # (No key: every row sees nothing, and dQ is the postprocess of the zeroed accumulator.)
    blocks, post_nblk = post_launch(mode, bh, n_q, n_pad, d)
    post((blocks,), (256,), (dq_acc, dq, cp.int32(n_q), cp.int32(post_nblk), cp.float32(scale),
                             lay))  # fmt: skip
    return dq, dk, dv
