"""`run_bench` with pass_name "backward" and "training" on a GPU: rows, errors, counted
transfers, the block sweep, and the tensor-core and SDPA rows."""

from __future__ import annotations

import importlib.util

import pytest

from compute.gpu import status

_ST = status()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]
_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("pass_name", ["backward", "training"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_teaching_and_dense_rows(dtype, pass_name):
    from compute.gpu.bench import BenchConfig, run_bench
    from compute.gpu.report import format_report

    cfg = BenchConfig(
        n=100, n_keys=70, d=32, block_q=16, block_k=24, causal=True, dtype=dtype,
        batch_heads=3, kernels=("tiled", "dense", "flash"), pass_name=pass_name,
        warmup=1, repeats=3, sweep_blocks=True, sweep_q=(16, 32), sweep_k=(16, 64),
    )  # fmt: skip
    report = run_bench(cfg)
    rows = {r["kernel"]: r for r in report["results"]}
    tol = 2e-5 if dtype == "float32" else 5e-3
    for kernel in ("tiled", "dense"):
        assert "error" not in rows[kernel], rows[kernel].get("error")
        assert rows[kernel]["rel_err"] < tol
        assert rows[kernel]["ms"] > 0 and rows[kernel]["pass"] == pass_name
    if pass_name == "backward":  # the counting build is the backward's
        assert rows["tiled"]["counts_match"]
        assert rows["tiled"]["counts_kernel"]["dQ"] == rows["tiled"]["counts_ledger"]["dQ"]
    assert "d = d_v = 64 or 128" in rows["flash"]["error"]  # d = 32: one sentence, a row
    sweep = report["sweep"]
    assert sweep["pass"] == pass_name and len(sweep["ms"]) == 2
    assert all(ms is not None and ms > 0 for line in sweep["ms"] for ms in line)
    assert f"pass={pass_name}" in format_report(report)


@pytest.mark.parametrize("pass_name", ["backward", "training"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensor_core_and_sdpa_rows(dtype, pass_name):
    from compute.gpu.bench import BenchConfig, run_bench
    from compute.gpu.peers import fa4_refusal

    peers = ("sdpa-flash", "sdpa-cudnn") if _TORCH else ()
    peers += ("fa4",) if fa4_refusal() is None else ()  # where FA4 is installed
    cfg = BenchConfig(
        n=333, d=64, dtype=dtype, batch_heads=4, kernels=("flash", *peers),
        pass_name=pass_name, warmup=1, repeats=3,
    )  # fmt: skip
    rows = {r["kernel"]: r for r in run_bench(cfg)["results"]}
    bar = {"float16": 2e-3, "bfloat16": 1e-2}[dtype]
    assert "error" not in rows["flash"], rows["flash"].get("error")
    assert rows["flash"]["rel_err"] < bar and rows["flash"]["ms"] > 0
    for name in peers:  # cuDNN may refuse a shape: then one sentence, not a crash
        r = rows[name]
        assert ("error" in r and r["error"]) or r["rel_err"] < bar, r
