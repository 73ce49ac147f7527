"""compute.problem: the one problem type and dtype, as build_trace and the ledgers take it."""

from __future__ import annotations

import numpy as np
import pytest

import compute
from compute import DType, Problem, build_trace, random_inputs
from compute.attention import DTYPE_BYTES, DTYPES


def test_dtype_knows_its_code_bytes_and_cupy_name():
    assert [DType.of(n).bytes for n in DTYPES] == [DTYPE_BYTES[n] for n in DTYPES] == [8, 4, 2, 2]
    assert (DType.of("float16").code, DType.of("bfloat16").code, DType.of("float32").code) == (
        0, 1, None,
    )  # fmt: skip
    assert DType.of("bfloat16").cupy == "uint16" and DType.of("float16").cupy == "float16"
    assert DType.of("float64").stats is np.float64 and DType.of("bfloat16").stats is np.float32
    with pytest.raises(ValueError, match="dtype must be one of"):
        DType.of("int8")


def test_problem_checks_its_fields():
    with pytest.raises(ValueError, match="block_q must be"):
        Problem(n=8, d=2, block_q=0, block_k=2)
    with pytest.raises(ValueError, match="order must be"):
        Problem(n=8, d=2, block_q=2, block_k=2, order="sideways")
    p = Problem(n=8, d=2, block_q=3, block_k=5, n_keys=11, dv=4, dtype="float16", causal=True)
    assert (p.n_k, p.d_v, p.t_r, p.t_c, p.mask) == (11, 4, 3, 3, "causal")
    assert p.schedule() == compute.schedule.Schedule(8, 11, 2, 4, 3, 5, "q-outer", True, False)


@pytest.mark.parametrize("pass_name", ["forward", "backward", "training"])
def test_build_trace_and_ledger_take_a_problem(pass_name):
    r = random_inputs(13, 3, 2, n_k=9, seed=4)
    p = Problem.of_shapes(r.q.shape, r.v.shape, block_q=4, block_k=5, dtype="float16", causal=True)
    by_problem = build_trace(r.q, r.k, r.v, p, pass_name=pass_name)
    by_keywords = build_trace(
        r.q, r.k, r.v, block_q=4, block_k=5, dtype="float16", causal=True, pass_name=pass_name
    )
    assert by_problem.problem.replace(save_lse=False) == p
    np.testing.assert_array_equal(by_problem.tiled_output, by_keywords.tiled_output)
    assert (
        by_problem.ledger().to_dict()
        == compute.problem_ledger(by_problem.problem, pass_name).to_dict()
    )
    with pytest.raises(ValueError, match="but the inputs are"):
        build_trace(r.q, r.k, r.v, p.replace(n=12))
