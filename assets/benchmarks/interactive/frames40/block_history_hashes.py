"""Hashes of every field of compute.recurrence.block_history, to compare two trees' bits.

Usage: python assets/benchmarks/interactive/frames40/block_history_hashes.py > OUT.txt
(PYTHONPATH at the tree), then diff two trees' OUT.txt. 9 shapes (N, N_k, d, B_r, B_c;
B_c under and over the scan's limit, blocks not dividing N), both orders, causal or not,
float64/float16/bfloat16/float32, and three group sizes (HISTORY_GROUP_ELEMENTS: one
group, and several), every query block: 432 lines.
"""

from __future__ import annotations

import hashlib
import itertools
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the app's BLAS threads

import numpy as np  # noqa: E402

import compute.recurrence as recurrence  # noqa: E402
from compute.schedule import Schedule  # noqa: E402

SHAPES = [
    (64, 64, 8, 4, 2), (96, 80, 16, 2, 2), (128, 128, 128, 2, 2), (256, 256, 64, 8, 4),
    (100, 100, 8, 3, 5), (64, 64, 4, 8, 8), (50, 70, 8, 4, 16), (300, 300, 16, 2, 3),
    (512, 512, 32, 4, 1),
]  # fmt: skip
ORDERS = ("q-outer", "kv-outer")
DTYPES = ("float64", "float16", "bfloat16", "float32")


def main() -> None:
    rng = np.random.default_rng(5)
    cases = list(itertools.product(SHAPES, ORDERS, (False, True), DTYPES))
    for group in (1 << 20, 8, 60):
        recurrence.HISTORY_GROUP_ELEMENTS = group
        for (n, nk, d, br, bc), order, causal, dtype in cases:
            q = rng.standard_normal((n, d)) * 2
            k = rng.standard_normal((nk, d)) * 2
            v = rng.standard_normal((nk, d))
            s = Schedule(
                n_q=n, n_k=nk, d=d, d_v=d, block_q=br, block_k=bc, order=order, causal=causal
            )
            h = hashlib.sha1()
            for block in range(s.t_r):
                hist = recurrence.block_history(q, k, v, s, block, scale=0.3, dtype=dtype)
                for x in (hist.m, hist.l, hist.a, hist.alpha, hist.p_tilde):
                    assert not x.flags.writeable
                    h.update(np.ascontiguousarray(x).tobytes())
                    h.update(f"{x.dtype}{x.shape}".encode())
            print(group, (n, nk, d, br, bc, order, causal, dtype), h.hexdigest())


if __name__ == "__main__":
    main()
