"""`run_bench` with pass_name="backward" on a GPU: rows, errors and counted transfers."""

from __future__ import annotations

import pytest

from compute.gpu import status

_ST = status()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _ST.usable, reason=_ST.reason)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_backward_rows(dtype):
    from compute.gpu.bench import BenchConfig, run_bench
    from compute.gpu.report import format_report

    cfg = BenchConfig(
        n=100, n_keys=70, d=32, block_q=16, block_k=24, causal=True, dtype=dtype,
        batch_heads=3, kernels=("tiled", "dense", "flash"), pass_name="backward",
        warmup=1, repeats=3,
    )  # fmt: skip
    report = run_bench(cfg)
    rows = {r["kernel"]: r for r in report["results"]}
    tol = 2e-5 if dtype == "float32" else 5e-3
    for kernel in ("tiled", "dense"):
        assert "error" not in rows[kernel], rows[kernel].get("error")
        assert rows[kernel]["rel_err"] < tol
        assert rows[kernel]["ms"] > 0
    assert rows["tiled"]["counts_match"]
    assert rows["tiled"]["counts_kernel"]["dQ"] == rows["tiled"]["counts_ledger"]["dQ"]
    assert "no backward" in rows["flash"]["error"]
    assert "pass=backward" in format_report(report)
