"""The decode kernels (split-KV + combine, one-pass) against float64, and their counted
transfers against compute.decode's ledger.

Seeded inputs (a seed per case). The reference is compute.decode's float64 dense schedule on
the dtype-rounded inputs; tolerances are max |out - ref| as for the other teaching kernels:
float32 2e-5, float16 4e-3 (O rounded to half once), bfloat16 1e-2 (bf16 has 8 bits of
mantissa), each times max(1, max |ref|).
"""

from __future__ import annotations

import numpy as np
import pytest

from compute.decode import (
    DecodeProblem,
    closed_form_decode_ledger,
    decode_inputs,
    dense_decode,
    one_pass_decode,
    split_partials,
)
from compute.gpu import status

_ST = status()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]

TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 1e-2}
SCHEDULES = ("one-pass", "split-kv")

# (n_q, n_k, d, d_v, h_q, h_kv, block_k, splits, dtypes): N_k odd, splits not dividing the
# tiles, more splits than tiles, GQA groups 1, 4 and 8, block_k 1 and larger than N_k, head
# sizes that are not whole 16-byte rows (the element-load path), 128 resident rows. The 16-bit
# cases of at most 16 rows with d % 32 == 0, d_v % 64 == 0 run the tensor-core block (a full
# tile of 16 rows with N_q = 2 among them); the others, and float32, the general block.
CASES = [
    (1, 4097, 128, 128, 8, 1, 64, 13, ("float32", "float16", "bfloat16")),
    (2, 4099, 128, 128, 16, 2, 64, 21, ("float16", "bfloat16")),
    (3, 1001, 64, 64, 8, 2, 32, 7, ("float16", "bfloat16")),
    (16, 333, 128, 128, 2, 2, 64, 9, ("float16",)),
    (5, 77, 40, 24, 12, 3, 16, 100, ("float32", "float16")),
    (2, 9, 5, 3, 4, 1, 1, 4, ("float32", "float16")),
    (1, 1, 8, 8, 1, 1, 3, 2, ("bfloat16",)),
    (16, 2000, 64, 64, 8, 1, 128, 5, ("bfloat16",)),
    (4, 9, 8, 8, 2, 1, 1, 9, ("float32",)),  # late splits see no key for the first rows
]
PARAMS = [(c[:8], dt) for c in CASES for dt in c[8]]


def _ids(param) -> str:
    (n_q, n_k, d, d_v, h_q, h_kv, bk, s), dtype = param
    return f"nq{n_q}-nk{n_k}-d{d}-dv{d_v}-h{h_q}x{h_kv}-bk{bk}-s{s}-{dtype}"


def _problem(case, dtype: str) -> DecodeProblem:
    n_q, n_k, d, d_v, h_q, h_kv, bk, s = case
    return DecodeProblem(n_q, n_k, d, d_v, h_q, h_kv, block_k=bk, splits=s, dtype=dtype)


def _inputs(problem: DecodeProblem, seed):
    """Device arrays in the kernel's layout and the float64 values they hold."""
    import cupy

    from compute.gpu.dtypes import device_array, float64_values

    host = decode_inputs(_as64(problem), seed=np.random.default_rng(seed).integers(2**31))
    dev = [device_array(cupy.asarray(x.astype(np.float32)), problem.dtype) for x in host]
    values = [float64_values(x.get(), problem.dtype) for x in dev]
    return dev, values


def _as64(problem: DecodeProblem) -> DecodeProblem:
    from dataclasses import replace

    return replace(problem, dtype="float64")


def _poisoned(problem: DecodeProblem):
    import cupy

    from compute.gpu.decode import _STORAGE

    out = cupy.full((problem.h_q, problem.n_q, problem.d_v), np.nan, dtype=np.float32)
    if problem.dtype == "bfloat16":
        return cupy.full(out.shape, 0x7FC0, dtype=cupy.uint16)  # bf16 NaN
    return out.astype(_STORAGE[problem.dtype])


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("param", PARAMS, ids=_ids)
def test_matches_float64_reference(param, schedule):
    from compute.gpu.decode import decode_attention_gpu
    from compute.gpu.dtypes import float64_values

    case, dtype = param
    p = _problem(case, dtype)
    dev, values = _inputs(p, [*case, SCHEDULES.index(schedule), len(dtype)])
    res = decode_attention_gpu(p, *dev, schedule=schedule, out=_poisoned(p))
    got = float64_values(res.out.get(), dtype)
    assert np.all(np.isfinite(got)), "unwritten or NaN output"
    want = dense_decode(_as64(p), *values)[2]
    err = np.max(np.abs(got - want))
    assert err <= TOL[dtype] * max(1.0, np.max(np.abs(want))), f"max abs error {err:.3g}"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_log_sum_exp_rows(schedule):
    from compute.gpu.decode import decode_attention_gpu

    p = _problem((3, 1001, 64, 64, 8, 2, 32, 7), "float32")
    dev, values = _inputs(p, [7, SCHEDULES.index(schedule)])
    res = decode_attention_gpu(p, *dev, schedule=schedule, save_lse=True)
    want = one_pass_decode(_as64(p), *values)[1]
    np.testing.assert_allclose(res.lse.get(), want, rtol=0, atol=2e-5)


@pytest.mark.parametrize(
    "case", [(4, 9, 8, 8, 2, 1, 1, 9), (1, 4097, 128, 128, 8, 1, 64, 13)], ids=str
)
def test_split_partials_match_the_core(case):
    # Each split's O_s and L_s (−∞ where a split saw no key) as compute.decode computes them.
    from compute.gpu.decode import decode_attention_gpu

    p = _problem(case, "float32")
    dev, values = _inputs(p, [*case, 11])
    res = decode_attention_gpu(p, *dev, schedule="split-kv")
    parts = split_partials(_as64(p), *values)
    got_l, want_l = res.l_part.get(), parts.lse
    assert np.array_equal(np.isneginf(got_l), np.isneginf(want_l))
    finite = np.isfinite(want_l)
    np.testing.assert_allclose(got_l[finite], want_l[finite], rtol=0, atol=2e-5)
    np.testing.assert_allclose(res.o_part.get(), parts.o, rtol=0, atol=2e-5)


def test_repeat_runs_are_bitwise_equal():
    # A moving result on identical inputs would mean a race (a missing barrier).
    from compute.gpu.decode import decode_attention_gpu

    p = _problem((2, 5000, 128, 128, 8, 2, 64, 11), "float16")
    dev, _ = _inputs(p, [5])
    for schedule in SCHEDULES:
        runs = [decode_attention_gpu(p, *dev, schedule=schedule).out.get() for _ in range(3)]
        assert all(np.array_equal(runs[0], r) for r in runs[1:]), schedule


COUNT_CASES = [
    ((1, 4097, 64, 64, 8, 1, 64, 13), "bfloat16"),
    ((3, 1001, 64, 64, 8, 2, 32, 7), "bfloat16"),
    ((16, 333, 64, 64, 2, 2, 64, 9), "bfloat16"),  # more splits than tiles
    ((2, 9, 5, 3, 4, 1, 1, 4), "float32"),
    ((4, 9, 5, 3, 2, 1, 1, 9), "float32"),
    ((5, 77, 5, 3, 12, 3, 16, 100), "float32"),
]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("param", COUNT_CASES, ids=_ids)
def test_counted_transfers_equal_ledger(param, schedule):
    from compute.gpu.decode import decode_attention_gpu

    case, dtype = param
    p = _problem(case, dtype)
    dev, _ = _inputs(p, [*case, 3])
    res = decode_attention_gpu(p, *dev, schedule=schedule, count_transfers=True)
    want = closed_form_decode_ledger(p, schedule).counts
    assert {t: res.counts[t] for t in want} == {t: dict(c) for t, c in want.items()}
    assert res.counts["L"] == {"read": 0, "write": 0}


def test_both_streaming_blocks_run_in_these_cases():
    # The cases above must exercise both blocks, or one of them would go untested.
    from compute.gpu.decode import tensor_core_block

    picks = {
        tensor_core_block(p.d, p.d_v, p.dtype, p.block_rows, (p.d * 2) % 16 == 0)
        for p in (_problem(c, dt) for c, dt in PARAMS if dt != "float32")
    }
    assert picks == {True, False}


def test_too_many_resident_rows_is_refused():
    from compute.gpu.decode import DecodeTooLarge, decode_attention_gpu

    p = _problem((16, 100, 256, 256, 16, 1, 64, 2), "float32")
    dev, _ = _inputs(p, [1])
    with pytest.raises(DecodeTooLarge, match="shared memory"):
        decode_attention_gpu(p, *dev)


def test_wrong_inputs_are_refused_in_one_sentence():
    import cupy

    from compute.gpu.decode import decode_attention_gpu

    p = _problem((1, 64, 64, 64, 2, 1, 64, 2), "float16")
    dev, _ = _inputs(p, [2])
    with pytest.raises(ValueError, match="must be a float16 array of shape"):
        decode_attention_gpu(p, dev[0].astype(cupy.float32), *dev[1:])
    with pytest.raises(ValueError, match="run one-pass or split-kv"):
        decode_attention_gpu(p, *dev, schedule="dense")
