"""The tiled backward kernel and the dense GPU backward against float64, and counted transfers.

Seeded random inputs. The gradients are compared with `compute.attention_backward`'s dense
float64 reference on the same (dtype-rounded) inputs, by max |error| over max(|reference|, 1),
the measure of the core's backward tests: float32 2e-5, float16 5e-3 (the core's stated
float16 tolerance: P̃, dS and the saved O are rounded to half). The instrumented build's
per-tensor transfers must equal `compute.pass_ledger("backward", ...)`'s tiled lane exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from compute import attention_backward, pass_ledger
from compute.gpu import status

_ST = status()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]

TOL = {"float32": 2e-5, "float16": 5e-3}

# (n_q, n_k, d, d_v, block_q, block_k): blocks 1, 7, 16, 64, larger than N; N_q != N_k both
# ways; tails everywhere; odd head sizes; N_q > N_k so causal leaves rows that see no key.
CASES = [
    (37, 37, 64, 64, 1, 7),
    (37, 53, 64, 64, 7, 1),
    (100, 70, 32, 32, 16, 16),
    (150, 200, 64, 64, 64, 64),
    (50, 40, 64, 64, 128, 96),
    (70, 45, 20, 12, 16, 64),
]
BH = 2
_ids = "nq{}-nk{}-d{}-dv{}-bq{}-bk{}".format


def _inputs(seed, n_q, n_k, d, d_v, dtype, bh=BH):
    """Host arrays (q, k, v, dO) in the dtype, and their device copies."""
    import cupy

    rng = np.random.default_rng(seed)
    shapes = ((n_q, d), (n_k, d), (n_k, d_v), (n_q, d_v))
    host = [rng.standard_normal((bh, n, w)).astype(dtype) for n, w in shapes]
    return host, [cupy.asarray(x) for x in host]


def _reference(host, causal):
    """float64 dense gradients per head, on the dtype-rounded inputs."""
    q, k, v, do = (x.astype(np.float64) for x in host)
    grads = [
        attention_backward(q[h], k[h], v[h], do[h], causal=causal, method="dense", dtype="float64")
        for h in range(len(q))
    ]
    return [np.stack([g[i] for g in grads]) for i in range(3)]


def _relative_max_error(got, ref) -> float:
    got = got.get().astype(np.float64)
    assert np.all(np.isfinite(got)), "unwritten or NaN gradient"
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1.0))


def _tiled(dev, bq, bk, causal, **kw):
    """The forward kernel saves O and L; the backward kernel runs from them."""
    from compute.gpu import tiled_attention_backward_gpu, tiled_attention_gpu

    q, k, v, do = dev
    fwd = tiled_attention_gpu(q, k, v, block_q=bq, block_k=bk, causal=causal, save_lse=True)
    return tiled_attention_backward_gpu(
        q, k, v, fwd.out, do, fwd.lse, block_q=bq, block_k=bk, causal=causal, **kw
    )


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: _ids(*c))
def test_tiled_backward_matches_float64_reference(case, causal, dtype):
    n_q, n_k, d, d_v, bq, bk = case
    seed = 4 * CASES.index(case) + 2 * causal + (dtype == "float16")
    host, dev = _inputs(seed, n_q, n_k, d, d_v, dtype)
    res = _tiled(dev, bq, bk, causal)
    for name, got, ref in zip(("dQ", "dK", "dV"), (res.dq, res.dk, res.dv), _reference(host, causal), strict=True):  # fmt: skip
        assert str(got.dtype) == dtype
        err = _relative_max_error(got, ref)
        assert err <= TOL[dtype], f"{name}: max error {err:.3g} over max |ref|"


def test_rows_that_see_no_key_get_zero_dq():
    n_q, n_k = 70, 45  # causal, bottom-right: rows 0 .. 24 see no key, row 25 key 0 alone
    _, dev = _inputs(1, n_q, n_k, 32, 32, "float32")
    res = _tiled(dev, 16, 8, True)
    dq = res.dq.get()
    assert np.all(dq[:, : n_q - n_k] == 0.0)
    # A row that sees a single key has P = 1 whatever its score: dS = P ∘ (dP − D) = 0 there
    # too. Every row that sees two keys or more gets a nonzero dQ.
    assert np.all(np.abs(dq[:, n_q - n_k + 1 :]).sum(axis=-1) > 0)


def test_repeat_runs_agree():
    # dK and dV are owned by one block each: bitwise equal. dQ sums atomics from several blocks
    # in whatever order they land (as FA2's): equal to rounding, never more.
    _, dev = _inputs(2, 300, 260, 64, 64, "float32")
    runs = [_tiled(dev, 64, 32, True) for _ in range(3)]
    for r in runs[1:]:
        assert np.array_equal(runs[0].dk.get(), r.dk.get())
        assert np.array_equal(runs[0].dv.get(), r.dv.get())
        np.testing.assert_allclose(r.dq.get(), runs[0].dq.get(), rtol=0, atol=1e-5)


COUNT_CASES = [
    (37, 53, 64, 64, 7, 16),
    (70, 45, 20, 12, 16, 64),
    (150, 200, 64, 64, 64, 64),
    (50, 40, 16, 8, 128, 96),
    (33, 33, 8, 8, 1, 1),
    (129, 65, 32, 32, 32, 17),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", COUNT_CASES, ids=lambda c: _ids(*c))
def test_counted_transfers_equal_backward_ledger(case, causal, dtype):
    n_q, n_k, d, d_v, bq, bk = case
    bh = 3
    _, dev = _inputs(3, n_q, n_k, d, d_v, dtype, bh=bh)
    res = _tiled(dev, bq, bk, causal, count_transfers=True)
    assert all(n % bh == 0 for rw in res.counts.values() for n in rw.values())
    per_head = {t: {k: n // bh for k, n in rw.items()} for t, rw in res.counts.items()}
    want = (
        pass_ledger(
            "backward", n_q, n_k, d, d_v, block_q=bq, block_k=bk, causal=causal, dtype=dtype
        )
        .lanes["tiled"]
        .counts
    )
    # Every tensor of the backward ledger, including S, P, dP, dS at zero (never off chip).
    assert per_head == {t: dict(want[t]) for t in want}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_dense_gpu_backward(dtype, causal):
    from compute.gpu import dense_attention_backward_gpu

    host, dev = _inputs(4, 70, 45, 32, 24, dtype)
    grads = dense_attention_backward_gpu(*dev, causal=causal)
    for name, got, ref in zip(("dQ", "dK", "dV"), grads, _reference(host, causal), strict=True):
        err = _relative_max_error(got, ref)
        assert err <= TOL[dtype], f"{name}: max error {err:.3g} over max |ref|"


def test_tiles_too_large_for_shared_memory_say_what_fits():
    import cupy

    from compute.gpu import TileTooLarge, tiled_attention_backward_gpu

    x = cupy.ones((1, 8, 64), dtype=cupy.float32)
    lse = cupy.zeros((1, 8), dtype=cupy.float32)
    with pytest.raises(TileTooLarge, match="these fit: block_q=16"):
        tiled_attention_backward_gpu(x, x, x, x, x, lse, block_q=512, block_k=512)


def test_saved_tensors_of_the_wrong_shape_are_refused():
    import cupy

    from compute.gpu import tiled_attention_backward_gpu

    x = cupy.ones((1, 8, 16), dtype=cupy.float32)
    with pytest.raises(ValueError, match="lse must have shape"):
        tiled_attention_backward_gpu(x, x, x, x, x, cupy.zeros((1, 7)), block_q=4, block_k=4)
