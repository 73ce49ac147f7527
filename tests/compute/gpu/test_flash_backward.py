"""GPU tests of compute.gpu.flash_backward.flash_attention_backward against float64.

Skipped unless CuPy is importable and a CUDA device is usable (the kernel needs sm_90; on
another GPU the call must raise its one-sentence ValueError). Inputs are seeded random draws
(bfloat16 rounded by compute.gpu.dtypes); O and LSE come from our forward on those inputs;
the reference is compute.attention_backward(method="dense", dtype="float64") per head on the
same rounded values. Error = max |g - ref| / max |ref| per gradient.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from compute import attention_backward
from compute.gpu import status
from compute.gpu.dtypes import device_array, float64_values

_ST = status()
cp = importlib.import_module("cupy") if _ST.usable else None
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]

ERR = {"float16": 2e-3, "bfloat16": 1e-2}
CODE = {"float16": 0, "bfloat16": 1}


def _hopper() -> bool:
    return cp.cuda.Device().compute_capability == "90"


def _inputs(b, h, n_q, n_k, d, dtype, seed):
    """(device arrays q, k, v, do; float64 host copies of the same values)."""
    rng = np.random.default_rng(seed)
    dev, host = [], []
    for n in (n_q, n_k, n_k, n_q):
        x = device_array(rng.standard_normal((b, h, n, d), dtype=np.float32), dtype)
        dev.append(cp.asarray(x))
        host.append(float64_values(x, dtype))
    return dev, host


def _reference(host, causal, scale):
    q, k, v, do = host
    b, h = q.shape[:2]
    grads = [np.empty_like(q), np.empty_like(k), np.empty_like(v)]
    for i in range(b):
        for j in range(h):
            got = attention_backward(
                q[i, j], k[i, j], v[i, j], do[i, j], causal=causal, scale=scale,
                method="dense", dtype="float64",
            )  # fmt: skip
            for g, r in zip(grads, got, strict=True):
                g[i, j] = r
    return grads


def _rel(got, ref) -> float:
    top = float(np.abs(ref).max()) if ref.size else 0.0
    diff = float(np.abs(got - ref).max()) if ref.size else 0.0
    return diff / top if top > 0 else diff


def _run(b, h, n_q, n_k, d, dtype, causal, seed, scale=None, mode=None):
    """Our gradients' errors (dq, dk, dv) vs float64, after the finiteness and zero checks."""
    from compute.gpu.flash import flash_attention
    from compute.gpu.flash_backward import backward_mode

    (q, k, v, do), host = _inputs(b, h, n_q, n_k, d, dtype, seed)
    o, lse = flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    if mode is None:  # the public entry point, at its default mode
        from compute.gpu.flash_backward import flash_attention_backward

        grads = flash_attention_backward(q, k, v, o, do, lse, causal=causal, scale=scale)
    else:
        grads = backward_mode(q, k, v, o, do, lse, causal=causal, scale=scale, mode=mode)
    cp.cuda.Device().synchronize()
    refs = _reference(host, causal, scale)
    errs = []
    for name, g, r, x in zip(("dq", "dk", "dv"), grads, refs, (q, k, v), strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype, name
        got = float64_values(g.get(), dtype)
        assert np.all(np.isfinite(got)), f"{name}: non-finite gradient"
        errs.append(_rel(got, r))
    hidden = ~np.isfinite(lse.get())  # rows that see no key: dQ exactly zero
    if hidden.any():
        dq = float64_values(grads[0].get(), dtype)
        assert float(np.abs(dq[hidden]).max()) == 0.0
    for name, e in zip(("dq", "dk", "dv"), errs, strict=True):
        assert e <= ERR[dtype], f"{name} rel err {e:.2e} (bar {ERR[dtype]:.0e})"
    return errs, grads, refs, (q, k, v, do)


@pytest.fixture(autouse=True)
def _needs_hopper():
    if not _hopper():
        pytest.skip("the tensor-core backward needs an sm_90 GPU")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "n_q,n_k", [(1, 1), (63, 63), (200, 200), (77, 300), (300, 77), (1000, 1000), (1, 513)]
)
def test_matches_float64(dtype, d, causal, n_q, n_k):
    seed = [CODE[dtype], d, int(causal), n_q, n_k]
    _run(2, 3, n_q, n_k, d, dtype, causal, seed)


@pytest.mark.parametrize("d", [64, 128])
def test_fully_masked_rows_and_custom_scale(d):
    # causal with n_q > n_k: the first n_q - n_k rows see no key (dQ = 0, nothing to dK, dV).
    _run(1, 2, 190, 60, d, "float16", True, seed=[31, d])
    _run(1, 1, 333, 333, d, "bfloat16", True, seed=[32, d], scale=0.3)
    _run(1, 2, 700, 5, d, "float16", True, seed=[33, d])  # most rows see no key


@pytest.mark.parametrize("d", [64, 128])
def test_many_blocks_and_heads(d):
    # Several key blocks per head and query blocks streaming through the two-stage ring.
    _run(2, 5, 1500, 1700, d, "float16", False, seed=[41, d])
    _run(2, 5, 1700, 1500, d, "bfloat16", True, seed=[42, d])


@pytest.mark.parametrize("mode,d", [(3, 64), (3, 128), (2, 64)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_other_dq_modes_match_float64(dtype, mode, d):
    # The modes timed against the default (0): 3 (bulk-reduced dQ tile), 2 (d=64 k-split dQ).
    _run(2, 3, 77, 300, d, dtype, True, seed=[61, CODE[dtype], mode], mode=mode)
    _run(2, 3, 1000, 900, d, dtype, True, seed=[62, CODE[dtype], mode], mode=mode)
    _run(1, 2, 1500, 1700, d, dtype, False, seed=[63, CODE[dtype], mode], mode=mode)


def test_error_is_of_sdpas_order():
    # SDPA (FLASH backend) on the same rounded inputs: our error may not be far above its own.
    torch = pytest.importorskip("torch")
    from compute.gpu.peers import sdpa_backward

    for dtype in ("float16", "bfloat16"):
        for causal in (False, True):
            errs, _, refs, (q, k, v, do) = _run(
                1, 4, 1024, 1024, 128, dtype, causal, seed=[51, CODE[dtype], int(causal)]
            )
            flat = [x.reshape(4, 1024, 128) for x in (q, k, v, do)]
            theirs = sdpa_backward("sdpa-flash")(*flat, causal)
            torch.cuda.synchronize()
            for name, ours, g, r in zip(("dq", "dk", "dv"), errs, theirs, refs, strict=True):
                their = _rel(float64_values(g.get(), dtype).reshape(r.shape), r)
                assert ours <= 3 * their + 1e-4, (
                    f"{dtype} {name}: ours {ours:.2e}, SDPA {their:.2e}"
                )


def test_rejects_bad_inputs():
    from compute.gpu.flash_backward import flash_attention_backward

    q = cp.zeros((1, 1, 16, 64), dtype=cp.float16)
    lse = cp.zeros((1, 1, 16), dtype=cp.float32)
    with pytest.raises(ValueError, match="shape"):
        flash_attention_backward(q, q, q, q[:, :, :8], q, lse)
    with pytest.raises(TypeError, match="dtype"):
        flash_attention_backward(q, q, q, q, q.astype(cp.float32), lse)
    with pytest.raises(TypeError, match="float32"):
        flash_attention_backward(q, q, q, q, q, lse.astype(cp.float16))
    with pytest.raises(ValueError, match="lse"):
        flash_attention_backward(q, q, q, q, q, lse[:, :, :3])
    q96 = cp.zeros((1, 1, 16, 96), dtype=cp.float16)
    with pytest.raises(ValueError, match="head dim"):
        flash_attention_backward(q96, q96, q96, q96, q96, lse)
    from compute.gpu.flash_backward import backward_mode

    with pytest.raises(ValueError, match="mode"):
        backward_mode(q, q, q, q, q, lse, mode=7)
