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
from compute.gpu import flash, flash_launch, status
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


# Traits of the ws kernel (FLASH_NOTES v5-v13), each on top of the default, over long runs.
WS_SWITCHES = {
    "grid": {},
    "persistent": {"persistent": True},
    "lpt": {"lpt": True},
    "qreg": {"q_regs": True},
    "keys192": {"block_n": 192},
    "keys176-qreg": {"block_n": 176, "q_regs": True},
    "keys192-lpt": {"block_n": 192, "lpt": True},
    "persistent-earlyq": {"persistent": True, "early_q": True},
    "persistent-lpt-earlyq-keys176": {
        "persistent": True,
        "lpt": True,
        "early_q": True,
        "block_n": 176,
        "panel_o": True,
    },
    "lpt-endq": {"lpt": True, "end_q": True},
    "persistent-lpt-earlyq-endq": {"persistent": True, "lpt": True, "early_q": True, "end_q": True},
    "persistent-lpt-qreg-earlyq": {
        "persistent": True,
        "lpt": True,
        "q_regs": True,
        "early_q": True,
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
    monkeypatch.setattr(flash_launch, "lpt_section", lambda n_k, d, heads, l2: 3)
    _run_case(1, 2, 1500, 1700, d, "float16", False, seed=21, config=cfg)
    _run_case(1, 2, 1700, 1500, d, "bfloat16", True, seed=22, config=cfg)
    _run_case(1, 1, 700, 5, d, "float16", True, seed=23, config=cfg)  # most rows see no key
    _run_case(2, 40, 1000, 900, d, "bfloat16", True, seed=24, config=cfg)


@pytest.mark.parametrize("switches", ["grid", "persistent-lpt"])
def test_ws_padded_warpgroups_skip_exactly(switches):
    # d = 64, three consumers (192-row query blocks): N_q = 192 k + 64 leaves two warpgroups of
    # the last block with rows past N_q only, 192 k + 128 one; they skip their GEMMs (v9).
    # Causal and not, N_k != N_q, more items than SMs in the last case.
    extra = {"grid": {}, "persistent-lpt": {"persistent": True, "lpt": True}}[switches]
    cfg = _hopper_only(replace(flash.WS_CONFIGS[64], **extra))
    seed = [71, len(switches)]
    _run_case(1, 2, 256, 300, 64, "float16", False, seed=seed + [0], config=cfg)
    _run_case(1, 2, 320, 320, 64, "bfloat16", True, seed=seed + [1], config=cfg)
    _run_case(1, 3, 4 * 192 + 64, 900, 64, "float16", True, seed=seed + [2], config=cfg)
    _run_case(2, 80, 448, 448, 64, "bfloat16", False, seed=seed + [3], config=cfg)


@pytest.mark.parametrize(
    "extra",
    [{"block_n": 176}, {"block_n": 176, "lpt": True}, {"block_n": 128, "early_q": True}],
    ids=["keys176", "keys176-lpt", "keys128-earlyq"],
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
@pytest.mark.parametrize("switches", ["default", "grid-lpt", "persistent"])
def test_ws_causal_warpgroups_stop_at_their_diagonal(d, switches):
    # Causal, three consumers (FLASH_NOTES v10): each consumer warpgroup computes key tiles
    # up to its own last row's diagonal and keeps only the protocol for the block's later
    # tiles (none of them when its rows see no key, N_q > N_k); d = 128 (two consumers)
    # computes them all.
    # Blocks whose warpgroups stop at different tiles, N_q != N_k both ways, tails, and more
    # items than SMs in the last case.
    base = flash.WS_CAUSAL_D128 if d == 128 else flash.WS_CAUSAL_D64
    cfg = {
        "default": base,
        "grid-lpt": replace(flash.WS_CONFIGS[d], lpt=True),
        "persistent": replace(flash.WS_CONFIGS[d], persistent=True),
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


def test_ws_refuses_a_variant_past_the_shared_memory_limit():
    # 192-key tiles with ':persist' at d = 128: Q's staging tile beside 4 x 48 KB of K/V
    # rings is past the 227 KB a block may have; one sentence, not a driver error.
    cfg = _hopper_only(replace(flash.WS_CONFIGS[128], block_n=192, persistent=True))
    with pytest.raises(ValueError, match="shared memory per block"):
        _run_case(1, 1, 64, 64, 128, "float16", False, seed=0, config=cfg)


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
