"""Trace.dense_partial_output: the dense lane's O accumulator, tile by tile."""

import numpy as np

import compute


def test_dense_partial_output_sums_tiles_and_ends_at_the_reference():
    inp = compute.random_inputs(7, 3, 2, n_k=10, seed=5)
    for causal in (False, True):
        tr = compute.build_trace(inp.q, inp.k, inp.v, block_q=3, block_k=4, causal=causal)
        s = tr.schedule
        for i in range(s.t_r):
            r0, r1 = s.rows(i)
            acc = np.zeros((r1 - r0, s.d_v))
            for j in range(s.t_c):
                c0, c1 = s.cols(j)
                acc += tr.probs[r0:r1, c0:c1] @ tr.v[c0:c1]
                np.testing.assert_allclose(tr.dense_partial_output(i, j), acc, atol=1e-12)
            np.testing.assert_allclose(acc, tr.reference[r0:r1], atol=1e-12)
