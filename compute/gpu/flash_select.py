"""Which kernel variant the tensor-core forward runs: one table, one function.

`default_config(d, n_q, causal)` is the whole rule, like FA3's tile_size.h. Each rule
carries a one-line reason; the measurements behind it are in FLASH_NOTES.md under the
version named (v5 ... v13).
"""

from __future__ import annotations

from dataclasses import replace

from .flash_launch import is_hopper
from .flash_variants import Config

# Any GPU but Hopper: mma.sync, FA2's schedule (FLASH_NOTES "mma kernel").
MMA_CONFIGS: dict[int, Config] = {
    64: Config("mma", 64, 4, 64, 4),
    128: Config("mma", 128, 8, 128, 1),
}
# Hopper, short sequences (and no keys at all: a tensor map cannot describe an empty K).
WGMMA_CONFIGS: dict[int, Config] = {
    64: Config("wgmma", 64, 2, 128, 2),
    128: Config("wgmma", 128, 2, 64, 2),
}
# Hopper: TMA + warp specialisation, FA3's shapes (d = 64: three consumer warpgroups,
# d = 128: two); 128-key tiles, two stages, overlap and ping-pong (v5).
WS_CONFIGS: dict[int, Config] = {
    64: Config("ws", 64, 3, 128, 1, True, 2, True),
    128: Config("ws", 128, 2, 128, 1, True, 2, True),
}
# From this many query rows the ws kernel wins; d = 64's 192-row blocks leave too few below (v5).
WS_MIN_N: dict[int, int] = {64: 2048, 128: 1}
# Causal: the LPT order wins at 4096-8192 and loses at 16384 (v6).
WS_LPT_N = (4096, 8192)
# d = 128 from 4096 rows: 176-key tiles, fewer per-tile costs (v8).
WS_WIDE_N = 4096
WS_WIDE_D128 = replace(WS_CONFIGS[128], block_n=176)
# d = 128 causal in WS_LPT_N from WS_CAUSAL_MID_END: 176-key tiles on the persistent LPT
# grid, O staged a panel at a time so they fit (v10), Q released early (v12).
WS_CAUSAL_D128 = replace(WS_WIDE_D128, lpt=True, persistent=True, panel_o=True, early_q=True)
# d = 128 full attention at WS_WIDE_N <= N_q < WS_MID_END: 128-key persistent tiles with Q
# released early; 4096 keys fill 32 of them without padding (v12).
WS_MID_D128 = replace(WS_CONFIGS[128], persistent=True, early_q=True)
WS_MID_END = 8192
# d = 64 causal at WS_LPT_N[0] <= N_q < WS_CAUSAL_D64_END: persistent LPT grid, early Q and
# blocks ending at N_q, so the partial block sees one key tile, not all (v13).
WS_CAUSAL_D64 = replace(WS_CONFIGS[64], lpt=True, persistent=True, early_q=True, end_q=True)
WS_CAUSAL_D64_END = 8192
# d = 128 causal at WS_LPT_N[0] <= N_q < WS_CAUSAL_MID_END: 128-key persistent LPT tiles,
# Q in registers and released at the item's start (v13).
WS_CAUSAL_MID_D128 = replace(WS_CONFIGS[128], persistent=True, lpt=True, q_regs=True, early_q=True)
WS_CAUSAL_MID_END = 8192


# A band (sliding window, FlashAttention's window_size): the default tiles in the default work
# order, reading only the key tiles each query block's band touches (no LPT, no ENDQ).
BAND_CONFIGS: dict[int, Config] = {d: replace(cfg, band=True) for d, cfg in WS_CONFIGS.items()}


def default_config(d: int, n_q: int = 1 << 30, causal: bool = False) -> Config:
    """The kernel variant flash_attention uses for head dim d, n_q query rows and the mask."""
    if not is_hopper():
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


def launch_config(
    d: int, n_q: int, n_k: int, causal: bool, config: Config | None = None, band: bool = False
) -> Config:  # fmt: skip
    """The variant a launch runs: `config` or default_config (BAND_CONFIGS for a band), with
    the ws kernel replaced by the wgmma one when there is no key (a tensor map cannot describe
    an empty K; every row then sees nothing, band or not)."""
    cfg = config or (BAND_CONFIGS[d] if band else default_config(d, n_q, causal))
    if cfg.kernel == "ws" and n_k == 0:
        return WGMMA_CONFIGS[d]
    return cfg
