"""GPU tests of compute.gpu.flash.flash_attention against the float64 reference.

Skipped unless CuPy is importable and a CUDA device is usable. Inputs are seeded random
draws (bfloat16 rounded by compute.gpu.dtypes, the harness's one rounding); the reference
is compute.attention.dense_lane in float64 on those rounded values; outputs are poisoned
(NaN) before each launch and every element checked finite.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import replace

import numpy as np
import pytest

from compute.attention import dense_lane
from compute.gpu import flash, status
from compute.gpu.dtypes import device_array, float64_values

_ST = status()
cp = importlib.import_module("cupy") if _ST.usable else None
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]

ERR = {"float16": 2e-3, "bfloat16": 1e-2}
DTYPE_CODE = {"float16": 0, "bfloat16": 1}


def _configs():
    """Kernel variants to test: the device default (None), the portable mma.sync kernel, the
    Hopper kernels (TMA + warp-specialised, and the plain wgmma fallback), and
    FLASH_TEST_CONFIGS specs if set (e.g. "wgmma:128:2:64:1:pingpong ws:64:3:128:2:serial")."""
    extra = [flash.Config.parse(s) for s in os.environ.get("FLASH_TEST_CONFIGS", "").split()]
    hopper = [*flash.WS_CONFIGS.values(), flash.WS_WIDE_D128, flash.WS_MID_D128]
    hopper += [flash.WS_CAUSAL_D128, flash.WS_CAUSAL_MID_D128, flash.WS_CAUSAL_D64]
    hopper += [*flash.WGMMA_CONFIGS.values()]
    return [None, *flash.MMA_CONFIGS.values(), *hopper, *extra]


def _needs_hopper(config) -> bool:
    if config is None or config.kernel == "mma":
        return False
    return cp.cuda.Device().compute_capability != "90"


def _hopper_only(cfg):
    """`cfg` (None: the device default), with the test skipped where this GPU cannot run
    it (not an sm_90)."""
    if _needs_hopper(cfg):
        pytest.skip("this kernel needs an sm_90 GPU")
    return cfg


def _rand(shape, dtype, rng):
    """Seeded inputs as (kernel-layout device array, float64 host copy of the same values)."""
    host = device_array(rng.standard_normal(shape, dtype=np.float32), dtype)
    return cp.asarray(host), float64_values(host, dtype)


def _reference(q, k, v, causal, scale):
    """Float64 O and row log-sum-exp per head (LSE = -inf where a row sees no key)."""
    b, h, n_q, _ = q.shape
    out = np.empty((b, h, n_q, v.shape[-1]))
    lse = np.empty((b, h, n_q))
    for i in range(b):
        for j in range(h):
            s, _, out[i, j] = dense_lane(q[i, j], k[i, j], v[i, j], causal=causal, scale=scale)
            m = np.max(s, axis=1, initial=-np.inf)
            safe = np.where(np.isfinite(m), m, 0.0)
            with np.errstate(divide="ignore"):
                lse[i, j] = safe + np.log(np.exp(s - safe[:, None]).sum(axis=1))
    return out, lse, np.isfinite(lse)


def _poisoned(shape, dtype):
    if dtype == "float16":
        return cp.full(shape, cp.nan, dtype=cp.float16)
    return cp.full(shape, 0x7FC1, dtype=cp.uint16)  # a bf16 NaN


def _run_case(b, h, n_q, n_k, d, dtype, causal, seed, config=None, scale=None):
    rng = np.random.default_rng(seed)
    q, q64 = _rand((b, h, n_q, d), dtype, rng)
    k, k64 = _rand((b, h, n_k, d), dtype, rng)
    v, v64 = _rand((b, h, n_k, d), dtype, rng)
    out = _poisoned((b, h, n_q, d), dtype)
    o, lse = flash.flash_attention(
        q, k, v, causal=causal, scale=scale, return_lse=True, config=config, out=out
    )
    cp.cuda.Device().synchronize()
    assert o is out
    ref, ref_lse, visible = _reference(q64, k64, v64, causal, scale)
    got = float64_values(o.get(), dtype)
    assert np.all(np.isfinite(got)), "unwritten or non-finite output"
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    assert err <= ERR[dtype], f"rel err {err:.2e}"
    # Rows that see no key: exact zeros and LSE = -inf.
    lse = lse.get()
    hidden = ~visible
    if hidden.any():
        assert float(np.abs(got[hidden]).max()) == 0.0
        assert np.all(np.isneginf(lse[hidden]))
    lse_err = float(np.abs(lse[visible].astype(np.float64) - ref_lse[visible]).max())
    assert lse_err <= 2e-3, f"LSE max abs err {lse_err:.2e}"
    return err


@pytest.mark.parametrize("config", _configs(), ids=lambda c: "default" if c is None else c.spec())
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "n_q,n_k",
    [(256, 256), (200, 200), (77, 300), (300, 77), (1, 513), (1000, 1000)],
)
def test_matches_float64(config, dtype, d, causal, n_q, n_k):
    if config is not None and config.d != d:
        pytest.skip("config is for another d")
    _hopper_only(config)
    _run_case(
        2,
        3,
        n_q,
        n_k,
        d,
        dtype,
        causal,
        seed=[DTYPE_CODE[dtype], d, int(causal), n_q, n_k],  # stable across processes
        config=config,
    )


@pytest.mark.parametrize("d", [64, 128])
def test_custom_scale_and_single_head(d):
    _run_case(1, 1, 333, 333, d, "float16", True, seed=7, scale=0.3)


def test_fully_masked_rows_are_zero_not_nan():
    # causal with n_q > n_k: the first n_q - n_k query rows see no key.
    _run_case(1, 2, 190, 60, 64, "float16", True, seed=11)
    _run_case(1, 2, 190, 60, 128, "bfloat16", True, seed=12)


# Switches of the ws kernel (FLASH_NOTES v5-v12), each on top of the default, over long runs.
WS_SWITCHES = {
    "grid": {},
    "persistent": {"persistent": True},
    "lpt": {"lpt": True},
    "tmastore": {"tma_store": True},
    "persistent-lpt-tmastore": {"persistent": True, "lpt": True, "tma_store": True},
    "tailsplit": {"tail_split": 1},
    "persistent-tailsplit": {"persistent": True, "tail_split": 1},
    "multicast": {"multicast": True},
    "lazy": {"lazy_rescale": True},
    "qreg": {"q_regs": True},
    "keys192": {"block_n": 192},
    "keys176-qreg": {"block_n": 176, "q_regs": True},
    "wgrelease": {"warpgroup_release": True},
    "persistent-wgrelease": {"persistent": True, "warpgroup_release": True},
    "keys192-lpt": {"block_n": 192, "lpt": True},
    "narrowtail": {"narrow_tail": True},
    "keys176-narrowtail-lpt": {"block_n": 176, "narrow_tail": True, "lpt": True},
    "persistent-earlyq": {"persistent": True, "early_q": True},
    "persistent-lpt-earlyq-keys176": {
        "persistent": True,
        "lpt": True,
        "early_q": True,
        "block_n": 176,
        "panel_o": True,
    },
    "persistent-tailsplit-earlyq": {"persistent": True, "tail_split": 1, "early_q": True},
    "persistent-earlyq-sktail": {"persistent": True, "early_q": True, "stream_k_tail": True},
    "persistent-lpt-earlyq-endq-uniform": {
        "persistent": True,
        "lpt": True,
        "early_q": True,
        "end_q": True,
        "uniform_counters": True,
    },
    "lpt-endq": {"lpt": True, "end_q": True},
    "persistent-lpt-earlyq-endq": {"persistent": True, "lpt": True, "early_q": True, "end_q": True},
    "persistent-qprefetch": {"persistent": True, "q_prefetch": True},
    "persistent-lpt-qreg-earlyq": {
        "persistent": True,
        "lpt": True,
        "q_regs": True,
        "early_q": True,
    },
    "persistent-lpt-earlyq-endq-qprefetch": {
        "persistent": True,
        "lpt": True,
        "early_q": True,
        "end_q": True,
        "q_prefetch": True,
    },
}


@pytest.mark.parametrize("switches", list(WS_SWITCHES))
@pytest.mark.parametrize("d", [64, 128])
def test_ws_kernel_on_many_tiles_and_masked_blocks(d, switches, monkeypatch):
    # Long enough that the K/V rings wrap several times (mbarrier phases flip), with a tail,
    # N_q != N_k, and causal blocks whose warpgroups see different numbers of keys; the last
    # case has more work items than SMs, so a persistent CTA draws several (some see no
    # key), and LPT sections of 3 heads leave a last section of 2 (80 heads).
    cfg = _hopper_only(replace(flash.WS_CONFIGS[d], **WS_SWITCHES[switches]))
    monkeypatch.setattr(flash, "lpt_section", lambda n_k, d, heads: 3)
    _run_case(1, 2, 1500, 1700, d, "float16", False, seed=21, config=cfg)
    _run_case(1, 2, 1700, 1500, d, "bfloat16", True, seed=22, config=cfg)
    _run_case(1, 1, 700, 5, d, "float16", True, seed=23, config=cfg)  # most rows see no key
    _run_case(2, 40, 1000, 900, d, "bfloat16", True, seed=24, config=cfg)


@pytest.mark.parametrize("switches", ["grid", "persistent-lpt", "tailsplit", "padrows"])
def test_ws_padded_warpgroups_skip_exactly(switches):
    # d = 64, three consumers (192-row query blocks): N_q = 192 k + 64 leaves two warpgroups of
    # the last block with rows past N_q only, 192 k + 128 one; they skip their GEMMs (v9)
    # unless ':padrows'. Causal and not, N_k != N_q, more items than SMs in the last case.
    extra = {"grid": {}, "persistent-lpt": {"persistent": True, "lpt": True},
             "tailsplit": {"tail_split": 3}, "padrows": {"pad_rows": True}}[switches]  # fmt: skip
    cfg = _hopper_only(replace(flash.WS_CONFIGS[64], **extra))
    seed = [71, len(switches)]
    _run_case(1, 2, 256, 300, 64, "float16", False, seed=seed + [0], config=cfg)
    _run_case(1, 2, 320, 320, 64, "bfloat16", True, seed=seed + [1], config=cfg)
    _run_case(1, 3, 4 * 192 + 64, 900, 64, "float16", True, seed=seed + [2], config=cfg)
    _run_case(2, 80, 448, 448, 64, "bfloat16", False, seed=seed + [3], config=cfg)


@pytest.mark.parametrize(
    "extra",
    [{"block_n": 176}, {"block_n": 176, "lpt": True}, {"block_n": 128, "tail_split": 3}],
    ids=["keys176", "keys176-lpt", "keys128-tailsplit"],
)
def test_ws_persistent_panel_staged_o_exact(extra):
    # ':persist:panelo' at d = 128 (FLASH_NOTES v10): O leaves one 64-column panel at a time
    # through a staging tile one panel wide (176-key tiles fit beside it); the second panel
    # must not overwrite the first before its rows are read. More items than SMs, so the
    # next item's epilogue reuses the tile; tails in N_q and N_k, causal, N_q != N_k.
    cfg = _hopper_only(replace(flash.WS_CONFIGS[128], persistent=True, panel_o=True, **extra))
    seed = [83, len(extra), extra["block_n"]]
    _run_case(1, 2, 300, 517, 128, "float16", False, seed=seed + [0], config=cfg)
    _run_case(1, 3, 333, 333, 128, "bfloat16", True, seed=seed + [1], config=cfg)
    _run_case(1, 2, 200, 700, 128, "float16", True, seed=seed + [2], config=cfg)
    _run_case(2, 80, 260, 260, 128, "bfloat16", False, seed=seed + [3], config=cfg)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("switches", ["default", "grid-lpt", "persistent", "alltiles"])
def test_ws_causal_warpgroups_stop_at_their_diagonal(d, switches):
    # Causal, three consumers (FLASH_NOTES v10): each consumer warpgroup computes key tiles
    # up to its own last row's diagonal and keeps only the protocol for the block's later
    # tiles (none of them when its rows see no key, N_q > N_k); ':wgalltiles' computes them
    # all as before, and so does d = 128 (two consumers) with or without it.
    # Blocks whose warpgroups stop at different tiles, N_q != N_k both ways, tails, and more
    # items than SMs in the last case.
    base = flash.WS_CAUSAL_D128 if d == 128 else flash.WS_CAUSAL_D64
    cfg = {
        "default": base,
        "grid-lpt": replace(flash.WS_CONFIGS[d], lpt=True),
        "persistent": replace(flash.WS_CONFIGS[d], persistent=True),
        "alltiles": replace(base, wg_all_tiles=True),
    }[switches]
    _hopper_only(cfg)
    seed = [89, d, len(switches)]
    _run_case(1, 2, 1000, 1000, d, "float16", True, seed=seed + [0], config=cfg)
    _run_case(1, 3, 700, 300, d, "bfloat16", True, seed=seed + [1], config=cfg)
    _run_case(1, 2, 300, 900, d, "float16", True, seed=seed + [2], config=cfg)
    _run_case(2, 80, 450, 450, d, "bfloat16", True, seed=seed + [3], config=cfg)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("switches", ["grid-lpt", "persistent-earlyq", "keys176-persistent"])
def test_ws_end_aligned_blocks_exact(d, switches):
    # ':endq' (FLASH_NOTES v13): causal query blocks end at N_q, so the first block holds
    # rows before 0 (masked, never stored: they would land in the previous head's rows).
    # N_q leaving 24, 64, 152 and 128 such rows (warpgroups wholly and partly before 0),
    # N_q != N_k both ways (rows that see no key), several heads, more items than SMs in the
    # last case, and full attention, where it changes nothing.
    extra = {"grid-lpt": {"lpt": True},
             "persistent-earlyq": {"persistent": True, "lpt": True, "early_q": True},
             "keys176-persistent": {"persistent": True, "block_n": 176, "panel_o": True}}[switches]  # fmt: skip
    cfg = _hopper_only(replace(flash.WS_CONFIGS[d], end_q=True, **extra))
    seed = [97, d, len(switches)]
    _run_case(1, 3, 1000, 1000, d, "float16", True, seed=seed + [0], config=cfg)
    _run_case(1, 2, 4 * 192 + 64, 700, d, "bfloat16", True, seed=seed + [1], config=cfg)
    _run_case(1, 2, 500, 1300, d, "float16", True, seed=seed + [2], config=cfg)
    _run_case(2, 80, 448, 448, d, "bfloat16", True, seed=seed + [3], config=cfg)
    _run_case(1, 2, 1000, 900, d, "float16", False, seed=seed + [4], config=cfg)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
def test_ws_trace_records_every_item_and_leaves_o_unchanged(d, persistent):
    # ':trace' (FLASH_NOTES v13, lab/item_trace.py): one record per item and consumer
    # warpgroup, its clocks in order, its key tiles those the warpgroup computes; O and LSE
    # bit-identical to the variant without the trace. Causal, N_q != N_k, more items than
    # SMs; no LPT, so ticket t is query block num_qb - 1 - t % num_qb.
    cfg = _hopper_only(replace(flash.WS_CONFIGS[d], persistent=persistent))
    traced = replace(cfg, trace=True)
    b, h, n_q, n_k = 2, 40, 700, 900
    rng = np.random.default_rng([101, d, int(persistent)])
    q, _ = _rand((b, h, n_q, d), "float16", rng)
    k, _ = _rand((b, h, n_k, d), "float16", rng)
    v, _ = _rand((b, h, n_k, d), "float16", rng)
    want, want_lse = flash.flash_attention(q, k, v, causal=True, return_lse=True, config=cfg)
    buf = cp.zeros(flash.trace_words(traced, b * h, n_q), dtype=cp.uint64)
    got, got_lse = flash.flash_attention(
        q, k, v, causal=True, return_lse=True, config=traced, trace=buf
    )
    assert cp.array_equal(got, want) and cp.array_equal(got_lse, want_lse)
    rec = buf.get().reshape(-1, cfg.warps, flash.TRACE_WORDS).astype(np.int64)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    assert np.all(rec[..., 0] < sms) and np.all(rec[..., 1] > 0)
    first_s = np.where(rec[..., 3] > 0, rec[..., 3], rec[..., 2])
    for a, z in ((1, 2), (2, 4), (4, 5)):
        assert np.all(rec[..., a] <= rec[..., z])
    assert np.all(rec[..., 2] <= first_s) and np.all(first_s <= rec[..., 4])
    num_qb = -(-n_q // cfg.block_m)
    q0 = (num_qb - 1 - np.arange(len(rec)) % num_qb) * cfg.block_m
    for c in range(cfg.warps):  # d = 64: each warpgroup up to its own diagonal (v10)
        rows_end = q0 + (c + 1) * 64 if d == 64 else q0 + cfg.block_m
        kv_end = np.minimum(n_k, rows_end + n_k - n_q)
        tiles = np.maximum(0, -(-kv_end // cfg.block_n))
        if d == 64:
            tiles = np.where(q0 + c * 64 >= n_q, 0, tiles)
        assert np.array_equal(rec[:, c, 6], tiles), c
        assert np.all((rec[:, c, 3] > 0) == (tiles > 0))


@pytest.mark.parametrize("block_n", [128, 176, 192])
def test_ws_narrow_last_tile_exact(block_n):
    # ':narrowtail' (FLASH_NOTES v9): N_k just past a multiple of the tile and at the 64- and
    # 128-key widths' edges, a single short tile (the first step narrow), and a causal case.
    cfg = _hopper_only(replace(flash.WS_CONFIGS[128], block_n=block_n, narrow_tail=True))
    for i, extra in enumerate((1, 63, 64, 65, 128, 129, block_n - 1)):
        n_k = 3 * block_n + extra
        _run_case(1, 2, 200, n_k, 128, "float16", False, seed=[61, block_n, i], config=cfg)
    _run_case(1, 2, 300, 50, 128, "bfloat16", False, seed=[62, block_n], config=cfg)
    _run_case(1, 2, 300, 100, 128, "float16", False, seed=[65, block_n], config=cfg)
    _run_case(1, 2, 500, 3 * block_n + 40, 128, "bfloat16", True, seed=[63, block_n], config=cfg)


@pytest.mark.parametrize(
    "extra",
    [{}, {"block_n": 128}, {"narrow_first_pv": True},
     {"block_n": 128, "narrow_first_pv": True}],
    ids=["keys176", "keys128", "keys176-pv", "keys128-pv"],
)  # fmt: skip
def test_ws_narrow_first_tile_exact(extra):
    # ':narrowfirst' (FLASH_NOTES v11): the first key tile holds the remainder of N_k over
    # the tile and its S GEMM is 64 or 128 keys wide when that fits; the later tiles start
    # at j BN - shift; with ':narrowfirstpv' its P·V GEMM too, in a peeled step 1 (or the
    # last P·V when it is the only tile). N_k at every width's edges (remainder 1, 63, 64,
    # 65, 128, 129, BN - 1 and none), a single tile, more items than SMs; causal launches
    # (N_q != N_k both ways) run the plain variant.
    cfg = replace(flash.WS_WIDE_D128, narrow_first=True, **extra)
    assert flash.narrow_first_launch(cfg, 2 * cfg.block_n + 1, False).narrow_first
    _hopper_only(cfg)
    bn = cfg.block_n
    seed = [97, bn, len(extra)]
    for i, rest in enumerate((1, 63, 64, 65, 128, 129, bn - 1, bn)):
        n_k = 2 * bn + rest
        dtype = ("float16", "bfloat16")[i % 2]
        _run_case(1, 2, 200, n_k, 128, dtype, False, seed=seed + [i], config=cfg)
    _run_case(1, 2, 300, 50, 128, "bfloat16", False, seed=seed + [20], config=cfg)
    _run_case(2, 80, 450, 4096, 128, "float16", False, seed=seed + [21], config=cfg)
    _run_case(1, 2, 700, 300, 128, "bfloat16", True, seed=seed + [22], config=cfg)
    _run_case(1, 2, 300, 900, 128, "float16", True, seed=seed + [23], config=cfg)


def test_ws_refuses_a_variant_past_the_shared_memory_limit():
    # 192-key tiles with ':persist' at d = 128: Q's staging tile beside 4 x 48 KB of K/V
    # rings is past the 227 KB a block may have; one sentence, not a driver error.
    cfg = _hopper_only(replace(flash.WS_CONFIGS[128], block_n=192, persistent=True))
    with pytest.raises(ValueError, match="shared memory per block"):
        _run_case(1, 1, 64, 64, 128, "float16", False, seed=0, config=cfg)


# The tail split (FLASH_NOTES v7) with forced plans: (b, h, n_q, n_k, dtype, plan), plan
# None for tail_plan's own choice, else (whole items kept, pieces per split item). The
# forced plans reach the cases the model rarely picks: every item split, pieces with no key
# tile (T = 1 or 2 key tiles cut in 2-5), tails in N_q and N_k, N_q != N_k.
TAIL_CASES = {
    "one-tile-halves": (1, 3, 300, 100, "float16", lambda items: (0, 2)),
    "two-tiles-in-five": (2, 2, 200, 200, "bfloat16", lambda items: (items // 2, 5)),
    "tails-nq-ne-nk": (1, 2, 333, 517, "bfloat16", lambda items: (1, 3)),
    "many-tiles-in-four": (1, 2, 250, 1700, "float16", lambda items: (0, 4)),
    "more-items-than-sms": (1, 150, 130, 1100, "bfloat16", None),
}


@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("case", list(TAIL_CASES))
@pytest.mark.parametrize("d", [64, 128])
def test_ws_tail_split_pieces_combine_exactly(d, case, persistent, monkeypatch):
    cfg = _hopper_only(replace(flash.WS_CONFIGS[d], tail_split=1, persistent=persistent))
    b, h, n_q, n_k, dtype, plan = TAIL_CASES[case]
    items = -(-n_q // cfg.block_m) * b * h
    if plan is not None:
        monkeypatch.setattr(flash, "tail_plan", lambda it, tiles, sms: plan(it))
    else:  # the model's own plan must split here, or this case tests nothing new
        tiles = -(-n_k // cfg.block_n)
        assert flash.tail_plan(items, tiles, flash._sm_count())[1] > 1
    seed = [d, n_q, n_k, int(persistent), len(case)]
    _run_case(b, h, n_q, n_k, d, dtype, False, seed=seed, config=cfg)
    # causal with the switch on: no split (the host keeps causal items whole)
    _run_case(b, h, n_q, n_k, d, dtype, True, seed=seed + [1], config=cfg)


# The stream-K tail (FLASH_NOTES v14): (b, h, n_q, n_k, dtype) as functions of the SM count,
# each with a partial last wave behind a full one. The slots run from one key tile (an item
# cut into as many pieces as it has tiles, most slots crossing an item boundary) to nearly a
# whole item; tails in N_q and N_k, N_q != N_k, both head sizes' block heights.
STREAM_K_CASES = {
    "one-tile-slots": lambda sms: (1, sms + 2, 100, 128 * (sms // 2), "float16"),
    "short-slots-key-tail": lambda sms: (2, (sms + 12) // 2, 1000, 1333, "bfloat16"),
    "many-pieces": lambda sms: (1, sms // 4 + 3, 700, 1500, "float16"),
    "long-slots": lambda sms: (2, 32, 1024, 2000, "bfloat16"),
}


@pytest.mark.parametrize("early_q", [False, True], ids=["persistent", "persistent-earlyq"])
@pytest.mark.parametrize("case", list(STREAM_K_CASES))
@pytest.mark.parametrize("d", [64, 128])
def test_ws_stream_k_tail_pieces_combine_exactly(d, case, early_q):
    base = flash.WS_CONFIGS[d]
    cfg = _hopper_only(replace(base, persistent=True, early_q=early_q, stream_k_tail=True))
    sms = flash._sm_count()
    b, h, n_q, n_k, dtype = STREAM_K_CASES[case](sms)
    items = -(-n_q // cfg.block_m) * b * h
    split_from, slots = flash.stream_k_plan(items, -(-n_k // cfg.block_n), sms)
    assert slots == sms and split_from < items, "the case must cut a tail, or it tests nothing"
    seed = [61, d, n_q, n_k, int(early_q)]
    _run_case(b, h, n_q, n_k, d, dtype, False, seed=seed, config=cfg)
    # causal with the switch on: no split (the host keeps causal items whole)
    _run_case(b, h, n_q, n_k, d, dtype, True, seed=seed + [1], config=cfg)


def test_ws_stream_k_tail_full_last_wave_is_not_split():
    cfg = _hopper_only(replace(flash.WS_CONFIGS[128], persistent=True, stream_k_tail=True))
    sms = flash._sm_count()
    assert flash.stream_k_plan(2 * sms, 3, sms) == (2 * sms, 0)
    _run_case(2, sms, cfg.block_m, 300, 128, "float16", False, seed=[62], config=cfg)


# K/V multicast in clusters of two (FLASH_NOTES v8): (b, h, n_q, n_k, dtype); every case
# non-causal with an even number of 128-row query blocks unless noted.
MULTICAST_CASES = {
    "key-tail-in-second-half": (1, 3, 512, 1000, "float16"),
    "second-half-all-past-nk": (2, 2, 256, 64, "bfloat16"),  # rank 1 loads only zeros
    "query-tail": (1, 2, 1000, 700, "bfloat16"),  # 8 blocks, the last one partly past N_q
    "odd-blocks-fall-back": (1, 2, 300, 500, "float16"),  # 3 blocks: launched without it
    "many-pairs": (1, 70, 256, 352, "float16"),  # more clusters than SMs hold at once
}


@pytest.mark.parametrize("block_n", [128, 176])
@pytest.mark.parametrize("case", list(MULTICAST_CASES))
def test_ws_multicast_pairs_share_key_tiles_exactly(case, block_n):
    cfg = _hopper_only(replace(flash.WS_CONFIGS[128], block_n=block_n, multicast=True))
    b, h, n_q, n_k, dtype = MULTICAST_CASES[case]
    seed = [41, block_n, n_q, n_k]
    _run_case(b, h, n_q, n_k, 128, dtype, False, seed=seed, config=cfg)
    _run_case(b, h, n_q, n_k, 128, dtype, True, seed=seed + [1], config=cfg)  # no multicast


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
def test_ws_lazy_rescale_exact_when_scores_climb(d, dtype):
    # Scores that rise along the keys (0.05 log2 units per key after the scale, 6.4 per
    # 128-key tile, 35 over the row): the running max moves every other tile and between
    # moves P climbs towards its 2^8 ceiling; against float64 at the usual bars.
    cfg = _hopper_only(replace(flash.WS_CONFIGS[d], lazy_rescale=True))
    rng = np.random.default_rng([51, d])
    n_q, n_k = 300, 700
    q = 1.0 + 0.05 * rng.standard_normal((1, 2, n_q, d))
    ramp = 0.05 / np.log2(np.e) * np.arange(n_k)[:, None] / np.sqrt(d)  # q.k / sqrt(d) climbs
    k = ramp + 0.02 * rng.standard_normal((1, 2, n_k, d))
    v = rng.standard_normal((1, 2, n_k, d))
    arrays = [device_array(x.astype(np.float32), dtype) for x in (q, k, v)]
    q64, k64, v64 = (float64_values(a, dtype) for a in arrays)
    for causal in (False, True):
        o, lse = flash.flash_attention(
            *(cp.asarray(a) for a in arrays), causal=causal, return_lse=True, config=cfg
        )
        ref, ref_lse, visible = _reference(q64, k64, v64, causal, None)
        got = float64_values(o.get(), dtype)
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        assert err <= ERR[dtype], f"rel err {err:.2e}"
        lse = lse.get()
        assert float(np.abs(lse[visible] - ref_lse[visible]).max()) <= 2e-3


@pytest.mark.parametrize("d", [64, 128])
def test_ws_tail_split_full_last_wave_is_not_split(d):
    # items = the SM count exactly (R = 0): tail_plan keeps every item whole.
    cfg = _hopper_only(replace(flash.WS_CONFIGS[d], tail_split=1))
    sms = flash._sm_count()
    assert flash.tail_plan(sms, 3, sms) == (sms, 1)
    _run_case(1, sms, cfg.block_m, 300, d, "float16", False, seed=[31, d], config=cfg)


def test_return_shapes_and_dtype():
    q = cp.random.default_rng(5).standard_normal((1, 2, 64, 64), dtype=cp.float32)
    q = q.astype(cp.float16)
    o = flash.flash_attention(q, q, q)
    assert o.shape == q.shape and o.dtype == cp.float16
    o, lse = flash.flash_attention(q, q, q, return_lse=True)
    assert lse.shape == (1, 2, 64) and lse.dtype == cp.float32


def test_rejects_bad_inputs():
    q = cp.zeros((1, 1, 16, 96), dtype=cp.float16)
    with pytest.raises(ValueError):
        flash.flash_attention(q, q, q)
    q = cp.zeros((1, 1, 16, 64), dtype=cp.float32)
    with pytest.raises(TypeError):
        flash.flash_attention(q, q, q)
