"""The teaching kernels under every mask (compute.mask): forward in both orders and the
backward against float64 NumPy, and their counted transfers against the closed-form ledger.

Masks chosen to look hidden: causal top-left and bottom-right with N_q ≠ N_k both ways,
windows wider than N and of width one, a causal window, packed sequences with one-row
sequences and blocks larger than a sequence; several leave whole key tiles that no row
sees, which the K/V-outer loops (forward and backward) must not load. Tolerances as test_tiled_kernel.py and
test_backward_kernel.py state them (float32).
"""

from __future__ import annotations

import numpy as np
import pytest

from compute import ORDERS, attention_backward, closed_form_ledger, dense_attention, pass_ledger
from compute.gpu import status
from compute.mask import Mask

_ST = status()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]

BH = 2
# (n_q, n_k, mask); every case runs at blocks (7, 16) and (32, 32): tails, blocks past a sequence.
CASES = [
    (37, 53, Mask.causal_mask(top_left=True)),
    (53, 37, Mask.causal_mask(top_left=True)),
    (53, 37, Mask(5, 3)),  # bottom-right window, N_q > N_k: leading rows see no key
    (40, 40, Mask(100, 100)),  # wider than N: no mask at all
    (31, 45, Mask(0, 0, top_left=True)),  # the diagonal alone
    (45, 31, Mask(0, 0, top_left=True)),  # rows 31.. see no key
    (60, 60, Mask(8, 0)),  # causal sliding window
    (20, 60, Mask(4, 0)),  # bottom-right, N_q < N_k: the leading key tiles are never loaded
    (40, 40, Mask(-1, 0, False, (1, 5, 1, 13, 20))),  # packed, causal, one-row sequences
    (40, 40, Mask(2, 2, False, (7, 1, 32))),  # packed with a window
]
BLOCKS = [(7, 16), (32, 32)]
_ids = [f"nq{a}-nk{b}-{m.label.replace(' ', '')}" for a, b, m in CASES]


def _inputs(seed, n_q, n_k, d=32, d_v=24):
    import cupy

    rng = np.random.default_rng(seed)
    shapes = ((n_q, d), (n_k, d), (n_k, d_v), (n_q, d_v))
    host = [rng.standard_normal((BH, n, w)).astype(np.float32) for n, w in shapes]
    return host, [cupy.asarray(x) for x in host]


@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: f"bq{b[0]}-bk{b[1]}")
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_masked_kernels_match_float64_and_count_the_ledger(case, blocks):
    from compute.gpu import tiled_attention_backward_gpu, tiled_attention_gpu

    n_q, n_k, mask = case
    bq, bk = blocks
    host, dev = _inputs(CASES.index(case), n_q, n_k)
    q, k, v, do = (x.astype(np.float64) for x in host)
    d, d_v = q.shape[2], v.shape[2]
    want = np.stack([dense_attention(q[h], k[h], v[h], mask=mask) for h in range(BH)])
    empty = mask.empty_rows(n_q, n_k)
    for order in ORDERS:
        res = tiled_attention_gpu(
            *dev[:3], block_q=bq, block_k=bk, order=order, causal=mask, save_lse=True,
            count_transfers=True,
        )  # fmt: skip
        got = res.out.get().astype(np.float64)
        assert np.max(np.abs(got - want)) <= 2e-5, order
        assert np.all(got[:, empty] == 0) and np.all(np.isneginf(res.lse.get()[:, empty]))
        per_head = {t: {x: n // BH for x, n in rw.items()} for t, rw in res.counts.items()}
        ledger = closed_form_ledger(
            n_q, n_k, d, d_v, block_q=bq, block_k=bk, order=order, causal=mask, save_lse=True,
            dtype="float32",
        ).lanes["tiled"].counts  # fmt: skip
        assert per_head == {t: dict(ledger[t]) for t in per_head}, order
    fwd = tiled_attention_gpu(*dev[:3], block_q=bq, block_k=bk, causal=mask, save_lse=True)
    bwd = tiled_attention_backward_gpu(
        *dev[:3], fwd.out, dev[3], fwd.lse, block_q=bq, block_k=bk, causal=mask,
        count_transfers=True,
    )  # fmt: skip
    grads = [
        attention_backward(q[h], k[h], v[h], do[h], mask=mask, method="dense") for h in range(BH)
    ]
    for i, (name, g) in enumerate(zip(("dQ", "dK", "dV"), (bwd.dq, bwd.dk, bwd.dv), strict=True)):
        ref = np.stack([x[i] for x in grads])
        err = np.max(np.abs(g.get().astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1.0)
        assert err <= 2e-5, f"{name}: {err:.3g}"
    per_head = {t: {x: n // BH for x, n in rw.items()} for t, rw in bwd.counts.items()}
    ledger = (
        pass_ledger(
            "backward", n_q, n_k, d, d_v, block_q=bq, block_k=bk, causal=mask, dtype="float32"
        )
        .lanes["tiled"]
        .counts
    )
    assert per_head == {t: dict(ledger[t]) for t in per_head}


def test_a_packed_mask_that_does_not_fit_is_one_sentence():
    import cupy

    from compute.gpu import tiled_attention_gpu

    q = cupy.zeros((1, 8, 16), dtype=cupy.float32)
    with pytest.raises(ValueError, match="sum to 7 but N is 8"):
        tiled_attention_gpu(q, q, q, block_q=4, block_k=4, causal=Mask(lengths=(3, 4)))
