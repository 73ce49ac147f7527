"""GPU tests of compute.gpu.fast.flash_attention against float64 attention.

Skipped unless CuPy is importable and a CUDA device is usable. Fresh random inputs per test,
outputs poisoned (NaN) before each launch, every element checked finite.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

try:
    import cupy as cp

    _GPU = bool(cp.is_available())
except Exception:  # noqa: BLE001 - no CuPy, no driver, no device
    cp = None
    _GPU = False

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _GPU, reason="needs CuPy and a usable CUDA device"),
]

ERR = {"float16": 2e-3, "bfloat16": 1e-2}


def _configs():
    """Kernel variants to test: the device default (None), the portable mma.sync kernel, and
    FLASH_TEST_CONFIGS specs if set (e.g. "wgmma:128:2:64:1:0 mma:64:8:64:2")."""
    from compute.gpu.bench_fast import parse_spec
    from compute.gpu.fast import MMA_CONFIGS

    extra = [parse_spec(s) for s in os.environ.get("FLASH_TEST_CONFIGS", "").split()]
    return [None, *MMA_CONFIGS.values(), *extra]


def _rand(shape, dtype, rng):
    """Random inputs as (kernel array, float64 CuPy copy of the exact same values)."""
    x = cp.asarray(rng.standard_normal(shape, dtype=np.float32))
    if dtype == "float16":
        h = x.astype(cp.float16)
        return h, h.astype(cp.float64)
    bits = x.view(cp.uint32)
    bits = (bits + cp.uint32(0x7FFF) + ((bits >> 16) & cp.uint32(1))) >> 16
    b16 = bits.astype(cp.uint16)
    return b16, (b16.astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)


def _to_f64(out, dtype):
    if dtype == "float16":
        return out.astype(cp.float64)
    return (out.astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)


def _reference(q, k, v, causal, scale):
    s = cp.matmul(q, k.transpose(0, 1, 3, 2)) * scale
    n_q, n_k = s.shape[-2:]
    if causal:
        r = cp.arange(n_q)[:, None]
        c = cp.arange(n_k)[None, :]
        s = cp.where(c <= r + (n_k - n_q), s, -cp.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = cp.where(cp.isfinite(m), m, 0.0)
    p = cp.exp(s - m_safe)
    l_sum = p.sum(axis=-1, keepdims=True)
    out = cp.matmul(p, v) / cp.where(l_sum > 0, l_sum, 1.0)
    lse = cp.where(l_sum[..., 0] > 0, cp.log(cp.maximum(l_sum[..., 0], 1e-300)), -cp.inf)
    lse = lse + m_safe[..., 0]
    return out, lse, l_sum[..., 0] > 0


def _poisoned(shape, dtype):
    if dtype == "float16":
        return cp.full(shape, cp.nan, dtype=cp.float16)
    return cp.full(shape, 0x7FC1, dtype=cp.uint16)  # a bf16 NaN


def _run_case(b, h, n_q, n_k, d, dtype, causal, seed, config=None, scale=None):
    from compute.gpu.fast import flash_attention

    rng = np.random.default_rng(seed)
    q, q64 = _rand((b, h, n_q, d), dtype, rng)
    k, k64 = _rand((b, h, n_k, d), dtype, rng)
    v, v64 = _rand((b, h, n_k, d), dtype, rng)
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    out = _poisoned((b, h, n_q, d), dtype)
    o, lse = flash_attention(
        q, k, v, causal=causal, scale=scale, return_lse=True, config=config, out=out
    )
    cp.cuda.Device().synchronize()
    assert o is out
    ref, ref_lse, visible = _reference(q64, k64, v64, causal, sc)
    got = _to_f64(o, dtype)
    assert bool(cp.isfinite(got).all()), "unwritten or non-finite output"
    err = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
    assert err <= ERR[dtype], f"rel err {err:.2e}"
    # Rows that see no key: exact zeros and LSE = -inf.
    hidden = ~visible
    if bool(hidden.any()):
        assert float(cp.abs(got[hidden]).max()) == 0.0
        assert bool(cp.isneginf(lse[hidden]).all())
    lse_err = float(cp.abs(lse[visible].astype(cp.float64) - ref_lse[visible]).max())
    assert lse_err <= 2e-3, f"LSE max abs err {lse_err:.2e}"
    return err


@pytest.mark.parametrize("config", _configs(), ids=lambda c: "default" if c is None else str(c))
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
    _run_case(
        2,
        3,
        n_q,
        n_k,
        d,
        dtype,
        causal,
        seed=hash((dtype, d, causal, n_q, n_k)) & 0xFFFF,
        config=config,
    )


@pytest.mark.parametrize("d", [64, 128])
def test_custom_scale_and_single_head(d):
    _run_case(1, 1, 333, 333, d, "float16", True, seed=7, scale=0.3)


def test_fully_masked_rows_are_zero_not_nan():
    # causal with n_q > n_k: the first n_q - n_k query rows see no key.
    _run_case(1, 2, 190, 60, 64, "float16", True, seed=11)
    _run_case(1, 2, 190, 60, 128, "bfloat16", True, seed=12)


def test_return_shapes_and_dtype():
    from compute.gpu.fast import flash_attention

    q = cp.random.standard_normal((1, 2, 64, 64)).astype(cp.float16)
    o = flash_attention(q, q, q)
    assert o.shape == q.shape and o.dtype == cp.float16
    o, lse = flash_attention(q, q, q, return_lse=True)
    assert lse.shape == (1, 2, 64) and lse.dtype == cp.float32


def test_rejects_bad_inputs():
    from compute.gpu.fast import flash_attention

    q = cp.zeros((1, 1, 16, 96), dtype=cp.float16)
    with pytest.raises(ValueError):
        flash_attention(q, q, q)
    q = cp.zeros((1, 1, 16, 64), dtype=cp.float32)
    with pytest.raises(TypeError):
        flash_attention(q, q, q)
