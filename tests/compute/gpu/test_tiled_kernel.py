"""The tiled CUDA kernel against float64 NumPy, and its counted transfers against the ledger.

Seeded random inputs (a seed per case, the same in every process). Tolerances are max |out - ref| against float64 attention
on the same (dtype-rounded) inputs: float32 2e-5; float16 4e-3 for Q-outer (P~ and O are
rounded to half once) and 1e-2 for KV-outer, which rounds O to half on every visit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from compute import ORDERS, dense_attention, ledger
from compute.gpu import status

_ST = status()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]

TOL = {("float32", "q-outer"): 2e-5, ("float32", "kv-outer"): 2e-5,
       ("float16", "q-outer"): 4e-3, ("float16", "kv-outer"): 1e-2}  # fmt: skip

# (n_q, n_k, d, d_v, block_q, block_k): block sizes 1, 7, 16, 64, larger than N; N_q != N_k;
# tails everywhere; odd head sizes; N_q > N_k so causal leaves some rows with no key.
CASES = [
    (37, 37, 64, 64, 1, 7),
    (37, 53, 64, 64, 7, 1),
    (100, 70, 32, 32, 16, 16),
    (150, 200, 64, 64, 64, 64),
    (50, 40, 64, 64, 128, 96),
    (70, 45, 20, 12, 16, 64),
]
BH = 3


def _inputs(rng, n_q, n_k, d, d_v, dtype, bh=BH):
    host = [
        rng.standard_normal((bh, n, w)).astype(dtype) for n, w in ((n_q, d), (n_k, d), (n_k, d_v))
    ]
    import cupy

    return host, [cupy.asarray(x) for x in host]


def _reference(host, causal):
    q, k, v = host
    return np.stack([dense_attention(q[h], k[h], v[h], causal=causal) for h in range(len(q))])


def _poisoned(cupy, shape, dtype):
    return cupy.full(shape, np.nan, dtype=dtype)  # every element must be written


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("order", ["q-outer", "kv-outer"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "nq{}-nk{}-d{}-dv{}-bq{}-bk{}".format(*c))
def test_matches_float64_reference(case, causal, order, dtype):
    import cupy

    from compute.gpu import tiled_attention_gpu

    n_q, n_k, d, d_v, bq, bk = case
    rng = np.random.default_rng([*case, int(causal), ORDERS.index(order), dtype == "float16"])
    host, dev = _inputs(rng, n_q, n_k, d, d_v, dtype)
    out = _poisoned(cupy, (BH, n_q, d_v), dtype)
    res = tiled_attention_gpu(*dev, block_q=bq, block_k=bk, order=order, causal=causal, out=out)
    got = res.out.get().astype(np.float64)
    assert np.all(np.isfinite(got)), "unwritten or NaN output"
    err = np.max(np.abs(got - _reference(host, causal)))
    assert err <= TOL[(dtype, order)], f"max abs error {err:.3g}"


@pytest.mark.parametrize("order", ["q-outer", "kv-outer"])
def test_log_sum_exp_rows(order):
    from compute.gpu import tiled_attention_gpu

    n_q, n_k, d = 70, 45, 32  # causal with N_q > N_k: the first rows see no key (L = -inf)
    host, dev = _inputs(np.random.default_rng(ORDERS.index(order)), n_q, n_k, d, d, "float32")
    res = tiled_attention_gpu(*dev, block_q=16, block_k=8, order=order, causal=True, save_lse=True)
    q, k = (x.astype(np.float64) for x in host[:2])
    s = np.einsum("hqd,hkd->hqk", q, k) / math.sqrt(d)
    visible = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=2, initial=-np.inf)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        want = safe + np.log(np.exp(s - safe[..., None]).sum(axis=2))
    got = res.lse.get()
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=2e-5)


def test_repeat_runs_are_bitwise_equal():
    # A moving result on identical inputs would mean a race (missing barrier).
    from compute.gpu import tiled_attention_gpu

    _, dev = _inputs(np.random.default_rng(3), 300, 260, 64, 64, "float32")
    runs = [
        tiled_attention_gpu(*dev, block_q=64, block_k=32, causal=True).out.get() for _ in range(3)
    ]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


COUNT_CASES = [
    (37, 53, 64, 64, 7, 16),
    (70, 45, 20, 12, 16, 64),
    (150, 200, 64, 64, 64, 64),
    (50, 40, 16, 8, 128, 96),
    (33, 33, 8, 8, 1, 1),
]


@pytest.mark.parametrize("save_lse", [False, True])
@pytest.mark.parametrize("order", ["q-outer", "kv-outer"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "case", COUNT_CASES, ids=lambda c: "nq{}-nk{}-d{}-dv{}-bq{}-bk{}".format(*c)
)
def test_counted_transfers_equal_ledger(case, causal, order, save_lse):
    from compute.gpu import tiled_attention_gpu

    n_q, n_k, d, d_v, bq, bk = case
    bh = 2
    rng = np.random.default_rng([*case, int(causal), ORDERS.index(order), int(save_lse)])
    _, dev = _inputs(rng, n_q, n_k, d, d_v, "float32", bh=bh)
    res = tiled_attention_gpu(
        *dev, block_q=bq, block_k=bk, order=order, causal=causal, save_lse=save_lse,
        count_transfers=True,
    )  # fmt: skip
    per_head = {t: {k: n // bh for k, n in rw.items()} for t, rw in res.counts.items()}
    assert all(n % bh == 0 for rw in res.counts.values() for n in rw.values())
    want = ledger(
        n_q, n_k, d, d_v, block_q=bq, block_k=bk, order=order, causal=causal,
        save_lse=save_lse, dtype="float32",
    ).lanes["tiled"].counts  # fmt: skip
    assert per_head == {t: dict(want[t]) for t in per_head}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_dense_gpu_path(dtype, causal):
    from compute.gpu import dense_attention_gpu

    host, dev = _inputs(
        np.random.default_rng([int(causal), dtype == "float16"]), 70, 45, 32, 24, dtype
    )
    got = dense_attention_gpu(*dev, causal=causal).get().astype(np.float64)
    assert np.all(np.isfinite(got))
    tol = 2e-5 if dtype == "float32" else 4e-3
    assert np.max(np.abs(got - _reference(host, causal))) <= tol


def test_tiles_too_large_for_shared_memory_say_what_fits():
    import cupy

    from compute.gpu import TileTooLarge, tiled_attention_gpu

    q = cupy.zeros((1, 8, 64), dtype=cupy.float32)
    with pytest.raises(TileTooLarge, match="these fit: block_q=16"):
        tiled_attention_gpu(q, q, q, block_q=512, block_k=512)
