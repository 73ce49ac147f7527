"""Tensor-core FlashAttention forward for CuPy arrays (CUDA C++ through ``cupy.RawModule``).

``flash_attention(q, k, v, causal=..., scale=..., return_lse=...)`` takes CuPy arrays shaped
(batch, heads, N, d) in float16, or bfloat16 passed as a ``uint16`` view of the bits (CuPy has
no bfloat16 dtype), and returns the output in the same dtype (bf16 again as ``uint16`` bits).
Accumulation and softmax statistics are float32. d must be 64 or 128; any N works (tails
are masked); N_q may differ from N_k, in which case causal masking is bottom-right aligned
(query row r sees key c iff c <= r + N_k - N_q). Rows that see no key return zeros and
LSE = -inf. With ``return_lse=True`` the row log-sum-exp of the scaled scores (natural log,
float32, shape (batch, heads, N_q)) is returned as well.

Three kernels live in ``kernels/``: ``flash_fwd_mma.cu`` (FA2 schedule with mma.sync, any
sm_80+ GPU), ``flash_fwd_wgmma.cu`` (Hopper wgmma, sm_90a only) and ``flash_fwd_ws.cu``
(Hopper wgmma fed by TMA from a producer warpgroup, with setmaxnreg and softmax overlapped
with the GEMMs; its tensor maps come from ``tma.py``). Which one a call gets is
``default_config(d, n_q)``; FLASH_NOTES.md records the measurements behind it. The module imports
without CuPy; CuPy is imported on first use.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from .sources import KERNEL_DIR, kernel_source

_LOG2E = 1.4426950408889634

SUPPORTED_HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class Config:
    """One compiled kernel variant."""

    kernel: str  # "mma", "wgmma" or "ws"
    d: int
    # mma: warps per CTA (16 query rows each); wgmma: warpgroups (64 rows each);
    # ws: consumer warpgroups (64 rows each; one producer warpgroup comes on top)
    warps: int
    block_n: int
    min_blocks: int = 1  # mma / wgmma: CTAs per SM asked of the compiler; ws: always 1
    # wgmma, two warpgroups only: alternate the tensor cores between them with named barriers
    # (FA3's inter-warpgroup overlap); +4-10% at 1 CTA/SM, a loss at 2 (FLASH_NOTES.md).
    # ws: the same idea for NC consumer warpgroups (a round-robin scheduler barrier).
    ping_pong: bool = False
    stages: int = 2  # ws: depth of the K and V rings in shared memory
    overlap: bool = True  # ws: issue S_{j+1} before the softmax of tile j (intra-warpgroup)
    persistent: bool = False  # ws: one CTA per SM drawing work items from a ticket counter
    lpt: bool = False  # ws, causal: heaviest query blocks of a few heads first (FLASH_NOTES v6)
    tma_store: bool = False  # ws: O leaves through a TMA store of the staged tile
    # ws, non-causal: the last wave's items cut along the keys into pieces that are combined
    # by the piece finishing last (FLASH_NOTES v7): 0 off, 1 as many pieces as tail_plan's
    # model picks, k >= 2 always k pieces (spec ':tailsplit', ':tailsplitK')
    tail_split: int = 0
    # ws, non-causal, an even number of query blocks: clusters of two CTAs (query blocks 2i,
    # 2i + 1 of one head) that multicast K and V, each CTA loading half of every tile
    # (FLASH_NOTES v8; spec ':mcast'); elsewhere the launch runs the same variant without it
    multicast: bool = False
    # ws: the running max m moves only when a score exceeds it by 2^8 (FLASH_NOTES v8; spec
    # ':lazy'), so most tiles skip O's rescale; exact, P stays <= 256
    lazy_rescale: bool = False
    # ws: Q's A fragments held in registers for the S GEMM (wgmma with A from registers)
    # instead of read from shared memory at every key tile (FLASH_NOTES v9; spec ':qreg');
    # spills beyond 128-key tiles at d = 128
    q_regs: bool = False
    # ws: a K or V stage is released by one arrival per consumer warpgroup (CUTLASS's
    # pipelines) instead of one per thread (FLASH_NOTES v9; spec ':wgrelease')
    warpgroup_release: bool = False
    # ws, grid only: the last key tile's S and P·V GEMMs only 64 or 128 keys wide when the
    # keys left before N_k fit, instead of BN wide over zero-filled rows (FLASH_NOTES v9;
    # spec ':narrowtail')
    narrow_tail: bool = False
    # ws, measurement only: with three consumers, warpgroups whose rows all lie past N_q
    # compute as before v9 instead of skipping their GEMMs (spec ':padrows')
    pad_rows: bool = False
    # ws, persistent at d = 128: O staged one 64-column panel at a time in a staging tile
    # half as wide, so the persistent grid fits 176-key tiles (FLASH_NOTES v10; spec
    # ':panelo'); the grid stages O in Q's rows and ignores it, as does d = 64 (one panel)
    panel_o: bool = False
    # ws, causal, three consumers (d = 64), measurement only: every consumer warpgroup
    # computes all of its query block's key tiles, as before v10, instead of stopping at its
    # own last row's diagonal (spec ':wgalltiles'; d = 128 always computes them all)
    wg_all_tiles: bool = False
    # ws, full attention on the grid: the first key tile holds the remainder of N_k over the
    # tile, so the last tile ends at N_k, and its S GEMM is only first_width (64 or 128) keys
    # wide, chosen at launch (narrow_first_launch); causal launches, and N_k whose
    # remainder is wider, run the variant without it (FLASH_NOTES v11; spec ':narrowfirst').
    # Two consumers, no ':persist' (ptxas serialises the wgmmas there), ':tailsplit',
    # ':mcast', ':qreg' or ':narrowtail'.
    narrow_first: bool = False
    first_width: int = 64  # set by narrow_first_launch; not part of the spec
    # ws, with ':narrowfirst': the first tile's P·V GEMM as narrow as its S GEMM, in a step
    # peeled out of the loop (FLASH_NOTES v11; spec ':narrowfirstpv')
    narrow_first_pv: bool = False
    # ws, persistent: each consumer warpgroup releases Q after its last S GEMM of an item
    # instead of after the item's last P·V, so the next item's Q and first K/V tiles load
    # under this item's tail (FLASH_NOTES v12; spec ':earlyq'); with ':qreg' right after
    # the item's Q fragments are loaded into registers, at its start (v13)
    early_q: bool = False
    # ws, causal: query blocks aligned to end at N_q, so the partial block (N_q not a multiple
    # of the block's rows) is the first, whose rows see the fewest keys, not the last, which
    # sees them all (FLASH_NOTES v13; spec ':endq'); no effect without a mask. Not with
    # ':tmastore' (it would write the rows before 0).
    end_q: bool = False
    # ws, measurement only: each consumer warpgroup records the SM and its clock at five
    # points of every item into the `trace` array of flash_attention (FLASH_NOTES v13;
    # spec ':trace'; lab/item_trace.py). Not with ':tailsplit'.
    trace: bool = False
    # ws, persistent: on drawing ticket t the producer prefetches into L2 the Q of ticket
    # t + the grid's size, which some SM draws about one item later, so the Q load an item
    # waits for reads L2 (FLASH_NOTES v13; spec ':qprefetch'). Not with ':tailsplit'.
    q_prefetch: bool = False
    # ws, persistent, non-causal: the last, partial wave's items run as one stream of key
    # tiles cut into one slot per CTA of nearly equal length (stream-K over the tail), each
    # slot at most two pieces combined like the tail split's, so every SM's share of the
    # launch differs by at most a tile (FLASH_NOTES v14; spec ':sktail'). Not with
    # ':tailsplit', ':trace' or ':qprefetch'; causal launches run it without the split.
    stream_k_tail: bool = False
    # ws: each item's ticket and the K/V ring counter shuffled from lane 0 at the item's
    # start, so the compiler sees them warp-uniform and keeps the key-tile loop's stage
    # addresses and wgmma descriptors on the uniform datapath (FLASH_NOTES v14; spec
    # ':uniform'; lab/sass_loop.py shows the difference). Always on with ':tailsplit' or
    # ':sktail'; not yet timed on a GPU.
    uniform_counters: bool = False

    @property
    def block_m(self) -> int:
        return self.warps * (16 if self.kernel == "mma" else 64)

    @property
    def threads(self) -> int:
        if self.kernel == "ws":
            return (self.warps + 1) * 128
        return self.warps * (32 if self.kernel == "mma" else 128)

    def smem_bytes(self) -> int:
        if self.kernel == "mma":
            return (self.block_m + 4 * self.block_n) * self.d * 2
        if self.kernel == "ws":
            # Q + `stages` of K and of V (+ an O staging tile when persistent, one 64-column
            # panel wide with ':panelo') + the mbarriers, the ticket slot and the tail split's
            # combine flags, plus 1 KB for the 1024-byte alignment.
            staging = 0
            if self.persistent:
                staging = self.block_m * (64 if self.panel_o else self.d) * 2
            rows = self.block_m + 2 * self.stages * self.block_n
            return rows * self.d * 2 + staging + 8 * (3 + 4 * self.stages) + 16 + 1024
        # wgmma: Q + 2 stages of K and V, plus 1 KB so the base can be aligned to 1024 bytes.
        return (self.block_m + 4 * self.block_n) * self.d * 2 + 1024

    def name(self, dt: int) -> str:
        """The template instantiation NVRTC compiles for dtype code dt (0 fp16, 1 bf16)."""
        if self.kernel == "mma":
            return f"flash_fwd_mma<{dt},{self.d},{self.warps},{self.block_n},{self.min_blocks}>"
        if self.kernel == "ws":
            mode = int(self.overlap) | (2 * int(self.ping_pong))
            mode |= sum(bit for _, field, bit in _WS_SWITCHES if getattr(self, field))
            mode |= 32768 if self.narrow_first and self.first_width == 128 else 0
            kernel = "flash_fwd_ws_mc" if self.multicast else "flash_fwd_ws"
            return f"{kernel}<{dt},{self.d},{self.warps},{self.block_n},{self.stages},{mode}>"
        return (
            f"flash_fwd_wgmma<{dt},{self.d},{self.warps},{self.block_n},{self.min_blocks},"
            f"{int(self.ping_pong)}>"
        )

    def spec(self) -> str:
        """'mma:D:WARPS:BN:MINB', 'wgmma:D:WG:BN:MINB[:pingpong]' or
        'ws:D:NC:BN:STAGES[:pingpong][:serial]' followed by the set switches of _WS_SWITCHES,
        in its order (parse() reads it back)."""
        fifth = self.stages if self.kernel == "ws" else self.min_blocks
        text = f"{self.kernel}:{self.d}:{self.warps}:{self.block_n}:{fifth}"
        text += ":pingpong" if self.ping_pong else ""
        text += ":serial" if self.kernel == "ws" and not self.overlap else ""
        for flag, field, _ in _WS_SWITCHES:
            value = getattr(self, field)
            if value:  # tail_split k >= 2 is written ':tailsplitK'
                text += f":{flag}" + (str(value) if flag == "tailsplit" and value > 1 else "")
        return text

    @classmethod
    def parse(cls, spec: str) -> Config:
        """The variant a spec() string names; ValueError with one sentence if it names none."""
        parts = spec.split(":")
        flags, split = set(), 0
        while parts and (parts[-1] in ("pingpong",) + _WS_FLAGS or _is_split_flag(parts[-1])):
            flag = parts.pop()
            if flag.startswith("tailsplit"):
                split = int(flag[len("tailsplit") :] or 1)
            flags.add(flag)
        if (
            parts[0] not in ("mma", "wgmma", "ws")
            or len(parts) != 5
            or not all(p.isdigit() for p in parts[1:])
            or (bool(split or flags & set(_WS_FLAGS)) and parts[0] != "ws")
        ):
            optional = "".join(
                "[:tailsplit[K]]" if flag == "tailsplit" else f"[:{flag}]"
                for flag, _, _ in _WS_SWITCHES
            )
            raise ValueError(
                f"{spec!r} is not a kernel spec like 'wgmma:128:2:64:2[:pingpong]' "
                f"or 'ws:128:2:128:2[:pingpong][:serial]{optional}'"
            )
        if "mcast" in flags and (split or "persist" in flags):
            raise ValueError(
                f"{spec!r}: ':mcast' pairs grid CTAs, so it takes no ':persist' or ':tailsplit'"
            )
        if "narrowtail" in flags and (split or "persist" in flags or "qreg" in flags):
            raise ValueError(
                f"{spec!r}: ':narrowtail' runs on the plain grid only, without ':persist', "
                "':tailsplit' or ':qreg'"
            )
        if "narrowfirst" in flags and (
            split or flags & {"persist", "mcast", "qreg", "narrowtail"} or parts[2:3] != ["2"]
        ):
            raise ValueError(
                f"{spec!r}: ':narrowfirst' needs two consumer warpgroups on the plain grid, "
                "so it takes no ':persist', ':tailsplit', ':mcast', ':qreg' or ':narrowtail'"
            )
        if "narrowfirstpv" in flags and "narrowfirst" not in flags:
            raise ValueError(f"{spec!r}: ':narrowfirstpv' narrows ':narrowfirst's P·V GEMM")
        if "earlyq" in flags and ("persist" not in flags or "serial" in flags):
            raise ValueError(
                f"{spec!r}: ':earlyq' releases Q early on the persistent grid, so it needs "
                "':persist' and the overlap, without ':serial'"
            )
        if "endq" in flags and "tmastore" in flags:
            raise ValueError(
                f"{spec!r}: ':endq' leaves rows before the first query row in the first block, "
                "which a TMA store would write, so it takes no ':tmastore'"
            )
        if "qprefetch" in flags and ("persist" not in flags or split):
            raise ValueError(
                f"{spec!r}: ':qprefetch' prefetches the next items' Q on the persistent grid, "
                "so it needs ':persist' and takes no ':tailsplit'"
            )
        if "sktail" in flags and (
            "persist" not in flags or split or flags & {"trace", "qprefetch", "mcast"}
        ):
            raise ValueError(
                f"{spec!r}: ':sktail' splits the persistent grid's last wave, so it needs "
                "':persist' and takes no ':tailsplit', ':trace', ':qprefetch' or ':mcast'"
            )
        if "trace" in flags and split:
            raise ValueError(f"{spec!r}: ':trace' records whole items, so it takes no ':tailsplit'")
        if "panelo" in flags and "tmastore" in flags:
            raise ValueError(f"{spec!r}: ':panelo' stages O for plain stores, not ':tmastore'")
        d, warps, block_n, fifth = (int(p) for p in parts[1:])
        if parts[0] == "ws":
            switches = {field: flag in flags for flag, field, _ in _WS_SWITCHES}
            return cls(
                "ws", d, warps, block_n, 1, "pingpong" in flags, fifth, "serial" not in flags,
                **{**switches, "tail_split": split},
            )  # fmt: skip
        return cls(parts[0], d, warps, block_n, fifth, "pingpong" in flags)


# The ws kernel's switches: spec flag, Config field and MODE bit (flash_fwd_ws.cu), in the
# order spec() writes them. tail_split holds a piece count (0 off); the others are bools.
_WS_SWITCHES = (
    ("persist", "persistent", 4),
    ("lpt", "lpt", 8),
    ("tmastore", "tma_store", 16),
    ("tailsplit", "tail_split", 32),
    ("mcast", "multicast", 64),
    ("lazy", "lazy_rescale", 128),
    ("qreg", "q_regs", 256),
    ("wgrelease", "warpgroup_release", 512),
    ("narrowtail", "narrow_tail", 1024),
    ("padrows", "pad_rows", 2048),
    ("panelo", "panel_o", 4096),
    ("wgalltiles", "wg_all_tiles", 8192),
    ("narrowfirst", "narrow_first", 16384),
    ("narrowfirstpv", "narrow_first_pv", 65536),
    ("earlyq", "early_q", 131072),
    ("endq", "end_q", 262144),
    ("trace", "trace", 524288),
    ("qprefetch", "q_prefetch", 1048576),
    ("sktail", "stream_k_tail", 2097152),
    ("uniform", "uniform_counters", 4194304),
)
# Spec flags of the ws kernel only ('tailsplit[K]' is matched by _is_split_flag).
_WS_FLAGS = ("serial", *(flag for flag, _, _ in _WS_SWITCHES if flag != "tailsplit"))


def _is_split_flag(flag: str) -> bool:
    """'tailsplit' (the model's piece count) or 'tailsplitK' with K >= 2 pieces."""
    rest = flag.removeprefix("tailsplit")
    return flag.startswith("tailsplit") and (rest == "" or (rest.isdigit() and int(rest) >= 2))


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
# The TMA + warp-specialised kernel (flash_fwd_ws.cu), FA3's shapes: d=64 three consumer
# warpgroups (BM = 192), d=128 two (BM = 128); 128-key tiles, two-stage K and V rings,
# intra-warpgroup overlap and the scheduler barrier.
WS_CONFIGS: dict[int, Config] = {
    64: Config("ws", 64, 3, 128, 1, True, 2, True),
    128: Config("ws", 128, 2, 128, 1, True, 2, True),
}
# Where default_config picks WS_CONFIGS on sm_90: from this many query rows on, per head dim
# (FLASH_NOTES.md v5). d=128: 1.21-1.61x the wgmma kernel at every N from 1024 to 16384.
# d=64: 1.0-1.3x from N = 2048 on, but at N = 1024 its 192-row query blocks leave too few
# blocks (0.97x full, 0.83x causal), so shorter sequences keep the wgmma kernel there.
WS_MIN_N: dict[int, int] = {64: 2048, 128: 1}
# Query lengths where the ws default walks causal work items longest first (`lpt`; the flag
# changes nothing without a causal mask). FLASH_NOTES.md v6: at N = 4096 and 8192 it gains
# over the head-major order (fewer, more unequal blocks: the schedule's tail counts); at
# N = 16384 it loses 2-11% (heads interleaved share L2 worse and the tail is short anyway);
# below 4096 it was not measured.
WS_LPT_N = (4096, 8192)
# d = 128 from this many query rows on: 176-key tiles (FA3's non-causal shape), fewer
# per-tile costs (barriers, max shuffles, O rescales) for the same work. FLASH_NOTES.md v8,
# timed at the power-capped clock: without a mask at N = 4096-16384, 0.98-1.10x the 128-key
# tiles over 30 same-run pairs (median 1.03); causal at N = 16384 1.00-1.10x over three
# calls; below 4096 not measured. (Since v12 full attention below WS_MID_END and causal
# attention in WS_LPT_N take the persistent variants below.)
WS_WIDE_N = 4096
WS_WIDE_D128 = replace(WS_CONFIGS[128], block_n=176)
# ... and causal where the LPT order is the rule (WS_LPT_N): 176-key tiles on the dynamic
# persistent grid, longest items first, O staged one panel at a time so that they fit
# (FLASH_NOTES v10). Against v9's rule (128-key tiles on the LPT grid at 4096, 176 from
# 8192; v8 call 6), fp16 / bf16: +3.6% / +0.2% at N = 4096 and +1.1% / +0.3% at 8192 in
# one call, +3.1% / +1.9% and +3.2% / +7.3% in the record after it.
WS_CAUSAL_D128 = replace(WS_WIDE_D128, lpt=True, persistent=True, panel_o=True, early_q=True)
# ... and without a mask below WS_MID_END (from WS_WIDE_N on): 128-key tiles on the dynamic
# persistent grid with Q released after each item's last S GEMM (FLASH_NOTES v12). 4096
# keys fill 32 of them exactly where 176-key tiles pad 128 keys (3%), and the next item's Q
# and first K/V tiles load under this item's tail: +2.6% to +6.4% over the 176-key grid at
# N = 4096 in eight same-run pairs over four calls; at 8192-16384 -2.1% to +2.0%, so the
# 176-key grid stays there. (`early_q` on the causal default, same-run pairs: -1.0% to
# +3.6% at N = 4096, -1.8% to +5.4% at 8192, 16 pairs over four calls, mean +1.5%.)
WS_MID_D128 = replace(WS_CONFIGS[128], persistent=True, early_q=True)
WS_MID_END = 8192
# d = 64 causal at WS_LPT_N[0] <= N_q < WS_CAUSAL_D64_END: the persistent LPT grid with early
# Q and end-aligned query blocks (FLASH_NOTES v13): 4096 rows leave a 64-row block, which
# now sees one key tile instead of all 32. Same-run pairs against the LPT grid at N = 4096,
# fp16 / bf16: +4.9% / +1.5% and +3.0% / +1.9% (without ':endq' the persistent grid loses
# 1-2%); at 8192 +0.6% / +0.5% and -0.4% / -1.7%, so the LPT grid stays there. (Equal LPT
# sections, lpt_section, added +2.9% / +3.8% at 4096 in call 8.)
WS_CAUSAL_D64 = replace(WS_CONFIGS[64], lpt=True, persistent=True, early_q=True, end_q=True)
WS_CAUSAL_D64_END = 8192
# d = 128 causal at WS_LPT_N[0] <= N_q < WS_CAUSAL_MID_END: 128-key tiles on the persistent
# LPT grid, Q's fragments in registers and its tile released at each item's start (FLASH_NOTES
# v13). In head order against WS_CAUSAL_D128 at N = 4096 in two calls, fp16 / bf16: +3.2% /
# +3.0% and +2.8% / +5.7% (at 8192 -0.8% / -3.9%, so WS_CAUSAL_D128 stays there); with the
# LPT order over balanced sections (lpt_section) +1.0% / +4.8% over head order (call 8).
WS_CAUSAL_MID_D128 = replace(WS_CONFIGS[128], persistent=True, lpt=True, q_regs=True, early_q=True)
WS_CAUSAL_MID_END = 8192


@functools.cache
def _sm_count() -> int:
    cp = _cupy()
    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


@functools.cache
def _is_hopper() -> bool:
    cp = _cupy()
    return cp.cuda.Device().compute_capability == "90"


def default_config(d: int, n_q: int = 1 << 30, causal: bool = False) -> Config:
    """The kernel variant flash_attention uses for head dim d, n_q query rows and the mask."""
    if not _is_hopper():
        return MMA_CONFIGS[d]
    if n_q < WS_MIN_N[d]:
        return WGMMA_CONFIGS[d]
    lo, hi = WS_LPT_N
    if causal and lo <= n_q <= hi:
        if d == 128:
            return WS_CAUSAL_MID_D128 if n_q < WS_CAUSAL_MID_END else WS_CAUSAL_D128
        return WS_CAUSAL_D64 if n_q < WS_CAUSAL_D64_END else replace(WS_CONFIGS[d], lpt=True)
    if d == 128 and WS_WIDE_N <= n_q < WS_MID_END:
        return WS_MID_D128
    if d == 128 and n_q >= WS_WIDE_N:
        return WS_WIDE_D128
    return WS_CONFIGS[d]


def _cupy():
    import cupy

    return cupy


@functools.cache
def _module(kernel: str, names: tuple[str, ...]):
    cp = _cupy()
    src = kernel_source(KERNEL_DIR / f"flash_fwd_{kernel}.cu")
    options = ("-std=c++17", "-I" + str(KERNEL_DIR))  # common.cuh, wgmma_wrappers.cuh
    if kernel in ("wgmma", "ws"):  # wgmma needs the sm_90a target (NVRTC; see platform notes)
        options += ("-arch=sm_90a", "-DFA_FORCE_WGMMA")
    return cp.RawModule(code=src, options=options, name_expressions=list(names))


@functools.cache
def _function(cfg: Config, dt: int):
    cp = _cupy()
    limit = int(cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"])
    if cfg.smem_bytes() > limit:  # e.g. 192-key tiles with ':persist' at d = 128
        raise ValueError(
            f"kernel variant {cfg.spec()!r} needs {cfg.smem_bytes()} bytes of shared memory "
            f"per block and this GPU allows {limit}: choose fewer key rows or stages, no "
            "':persist', or ':persist:panelo'."
        )
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


def resolve_scale(scale: float | None, d: int) -> float:
    """The softmax scale: 1/sqrt(d) by default; anything but a positive number is refused."""
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not scale > 0:
        raise ValueError("scale must be positive")
    return scale


def flash_attention(
    q, k, v, *, causal=False, scale=None, return_lse=False, config=None, out=None, trace=None
):
    """softmax(Q Kᵀ · scale [causal mask]) V on the GPU; see the module docstring.

    ``config`` (a :class:`Config`) overrides the kernel variant (for benchmarking); ``out``
    (contiguous, q's shape and dtype) receives the result instead of a new array; ``trace``
    (with a ':trace' config only) is a contiguous 64-bit integer array of at least
    trace_words(...) elements that the kernel fills (lab/item_trace.py reads it).
    """
    cp = _cupy()
    _check(q, k, v)
    dt = _dtype_code(q)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    scale = resolve_scale(scale, d)
    cfg = config or default_config(d, n_q, causal)
    if cfg.d != d:
        raise ValueError(f"config is for d={cfg.d}, inputs have d={d}")
    if cfg.kernel in ("wgmma", "ws") and not _is_hopper():
        raise ValueError(f"the {cfg.kernel} kernel needs an sm_90 (Hopper) GPU")
    if cfg.kernel == "ws" and n_k == 0:
        cfg = WGMMA_CONFIGS[d]  # a tensor map cannot describe an empty K; nothing to load
    if cfg.multicast and (causal or -(-n_q // cfg.block_m) % 2):
        cfg = replace(cfg, multicast=False)  # the pair's blocks would read different tiles
    if cfg.narrow_first:
        cfg = narrow_first_launch(cfg, n_k, causal)
    if cfg.trace != (trace is not None):
        raise ValueError("a ':trace' config needs a trace array, and only it takes one")
    if trace is not None and (
        trace.dtype.itemsize != 8 or not trace.flags.c_contiguous
        or trace.size < trace_words(cfg, b * h, n_q)
    ):  # fmt: skip
        raise ValueError(
            f"trace must be a contiguous 64-bit integer array of at least "
            f"{trace_words(cfg, b * h, n_q)} elements for these shapes"
        )
    q = cp.ascontiguousarray(q)
    k = cp.ascontiguousarray(k)
    v = cp.ascontiguousarray(v)
    if out is None:
        out = cp.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or not out.flags.c_contiguous:
        raise ValueError("out must be contiguous with q's shape and dtype")
    lse = cp.empty((b, h, n_q), dtype=cp.float32) if return_lse else None
    if b * h and n_q:
        grid = ((n_q + cfg.block_m - 1) // cfg.block_m, b * h, 1)
        inputs, extra, maps = (q, k, v), (), ()
        if cfg.kernel == "ws":
            # `inputs` are then pointers into `maps`, which this frame keeps alive past the launch.
            grid, inputs, extra, maps = _ws_launch(cfg, grid, q, k, v, out, causal, trace)
        _function(cfg, dt)(
            grid,
            (cfg.threads, 1, 1),
            (
                *inputs,
                out,
                lse if lse is not None else cp.uint64(0),
                cp.int32(n_q),
                cp.int32(n_k),
                cp.float32(scale * _LOG2E),
                cp.int32(1 if causal else 0),
                *extra,
            ),
            shared_mem=cfg.smem_bytes(),
        )
    return (out, lse) if return_lse else out


def narrow_first_launch(cfg: Config, n_k: int, causal: bool) -> Config:
    """The variant a ':narrowfirst' config launches: its first key tile 64 or 128 keys wide,
    the narrowest that holds the remainder of n_k over the tile (the kernel fixes the width
    at compile time, and one remainder serves every item only without a mask); the plain
    variant when causal or when the remainder needs the whole tile."""
    rest = (n_k - 1) % cfg.block_n + 1  # keys of the first tile, 1..BN
    if not causal:
        for width in (64, 128):
            if rest <= width < cfg.block_n:
                return replace(cfg, first_width=width)
    return replace(cfg, narrow_first=False, narrow_first_pv=False)


# 64-bit words per work item and consumer warpgroup of a ':trace' launch (FA_TRACE_WORDS in
# flash_fwd_ws.cu): SM, five clock readings, key tiles computed, one unused.
TRACE_WORDS = 8


def trace_words(cfg: Config, heads: int, n_q: int) -> int:
    """Length of the trace array a ':trace' launch of cfg over batch*heads `heads` and n_q
    query rows fills: one record per work item and consumer warpgroup."""
    return -(-n_q // cfg.block_m) * heads * cfg.warps * TRACE_WORDS


def _ws_launch(
    cfg: Config, grid, q, k, v, out, causal: bool, trace=None
) -> tuple[tuple, tuple, tuple, tuple]:
    """flash_fwd_ws's grid, inputs and trailing arguments, and the TMA tensor maps (tma.py)
    its inputs point into: Q, K, V (and O, for the TMA store) go in as those maps, passed by
    value (copied at launch); the kernel also takes the query-block and head counts, the
    ticket counter of the persistent schedule (and the tail split's combine counters behind
    it), the heads per LPT section, and the tail split's workspace and plan."""
    cp = _cupy()
    from . import tma

    num_qb, heads = grid[0], grid[1]
    items = num_qb * heads
    split_from, nsplit = items, 1
    if cfg.tail_split and not causal:  # causal items are unequal; LPT orders them instead
        split_from, nsplit = tail_plan(items, -(-k.shape[2] // cfg.block_n), _sm_count())
        tail = items % _sm_count()
        if cfg.tail_split > 1 and tail:  # a fixed piece count for the same tail (measurements)
            split_from, nsplit = items - tail, cfg.tail_split
    if cfg.stream_k_tail:  # causal items are unequal: the plain persistent schedule (no slots)
        tiles = -(-k.shape[2] // cfg.block_n)
        split_from, nsplit = (items, 0) if causal else stream_k_plan(items, tiles, _sm_count())
    slots = nsplit if cfg.stream_k_tail else 0
    tickets, ws = cp.uint64(0), cp.uint64(0)
    if cfg.persistent or split_from < items:  # zeroed: the ticket, then one counter per
        tickets = cp.zeros(1 + (items - split_from) * cfg.warps, dtype=cp.int32)  # piece's wg
    if trace is not None:  # the kernel writes its records where the split's partials go
        ws = trace
    per_piece = cfg.warps * 128 * (cfg.d // 2 + 4)  # per consumer thread: O, m and l (fp32)
    if slots:  # two pieces' partials per slot
        ws = cp.empty(2 * slots * per_piece, dtype=cp.float32)
    elif split_from < items:
        ws = cp.empty((items - split_from) * nsplit * per_piece, dtype=cp.float32)
        grid = (split_from + (items - split_from) * nsplit, 1, 1)  # one block per ticket
    if cfg.persistent:  # one CTA per SM, each drawing its next item from the counter
        grid = (min(grid[0] * grid[1], _sm_count()), 1, 1)
    maps = (
        tma.tiled_map(q, cfg.block_m),
        # multicast: each CTA of a pair loads half of every K and V tile's rows
        tma.tiled_map(k, cfg.block_n // (2 if cfg.multicast else 1)),
        tma.tiled_map(v, cfg.block_n // (2 if cfg.multicast else 1)),
        tma.tiled_map(out, 64),  # one box per consumer warpgroup's 64 rows and panel
    )
    inputs = tuple(tma.kernel_arg(m) for m in maps)
    section = lpt_section(k.shape[2], cfg.d, heads)
    extra = (
        cp.int32(num_qb), cp.int32(heads), tickets, cp.int32(section),
        ws, cp.int32(split_from), cp.int32(nsplit),
    )  # fmt: skip
    return grid, inputs, extra, (*maps, tickets, ws)


# The tail split's cost model (tail_plan), in key tiles (~1.7 us each at d = 128): a piece
# also pays about 1.5 tiles for its Q load, pipeline fill, epilogue and fp32 partial, and
# the combining piece reads every piece's 64 KB partial through L2 (about half a tile
# each). Rough, so a split must win by more than a tile.
_PIECE_OVERHEAD = 1.5
_COMBINE_PER_PIECE = 0.5
_MAX_PIECES = 5


@functools.cache
def tail_plan(items: int, tiles: int, sms: int) -> tuple[int, int]:
    """(split_from, pieces): cut the last items % sms items (the last, partial wave; all of
    them when fewer than sms) into `pieces` along the T = `tiles` key tiles, the count that a
    greedy-schedule model of equal items on `sms` SMs finishes first; (items, 1) when the
    last wave is full or no split wins by more than a tile."""
    tail = items % sms
    if tail == 0 or tiles < 2:
        return items, 1
    best, plan = _tail_makespan(tail, tiles, sms, 1) - 1.0, (items, 1)
    for pieces in range(2, _MAX_PIECES + 1):
        span = _tail_makespan(tail, tiles, sms, pieces)
        if span < best:
            best, plan = span, (items - tail, pieces)
    return plan


def _tail_makespan(tail: int, tiles: int, sms: int, pieces: int) -> float:
    """Modelled time (key tiles) for `tail` equal items, each cut into `pieces`, drawn in
    ticket order by `sms` SMs that all start at once (list scheduling)."""
    import heapq

    cost = [
        (p + 1) * tiles // pieces - p * tiles // pieces + _PIECE_OVERHEAD
        + (_COMBINE_PER_PIECE * pieces if pieces > 1 and p == pieces - 1 else 0.0)
        for p in range(pieces)
    ]  # fmt: skip
    free = [0.0] * min(sms, tail * pieces)
    for _ in range(tail):
        for c in cost:
            heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def stream_k_plan(items: int, tiles: int, sms: int) -> tuple[int, int]:
    """(split_from, slots) of the stream-K tail: the last items % sms items run as one stream
    of their tiles key tiles each, cut into `sms` slots (one per persistent CTA); (items, 0),
    no split, when the last wave is full, when there is no second wave for the slots to
    follow, when a slot would be shorter than one key tile, or past the kernel's 32-bit
    slot arithmetic."""
    tail = items % sms
    # (the kernel's slot arithmetic is 32-bit: slot * tail * tiles must stay below 2^31)
    if items <= sms or tail == 0 or tail * tiles < sms or sms * tail * tiles >= 2**31:
        return items, 0
    return items - tail, sms


def lpt_section_cap(n_k: int, d: int) -> int:
    """The most heads an LPT section may hold: as many as have their K and V (16-bit) in half
    of L2 together, so the blocks running at once re-read K and V from L2, not from HBM."""
    return max(1, (_l2_bytes() // 2) // max(1, 2 * n_k * d * 2))


def lpt_section(n_k: int, d: int, heads: int) -> int:
    """Heads per section of the LPT order over `heads` heads: the fewest sections of at most
    lpt_section_cap heads, made as equal as they can be. The schedule's tail is the last
    section's light blocks; a last section of a few heads (64 heads in sections of 15 leave
    4) has fewer blocks than SMs, so its heavy and light blocks run side by side and the
    SMs finish 5% apart (FLASH_NOTES v13, the item trace)."""
    cap = lpt_section_cap(n_k, d)
    sections = -(-max(1, heads) // cap)
    return -(-max(1, heads) // sections)


@functools.cache
def _l2_bytes() -> int:
    cp = _cupy()
    return int(cp.cuda.Device().attributes["L2CacheSize"])
