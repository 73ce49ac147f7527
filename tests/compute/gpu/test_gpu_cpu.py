"""CPU-side tests of the GPU backend: status() reasons, bench CLI exit, tile arithmetic."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

from compute import dense_attention
from compute.gpu import device
from compute.gpu.reference import error_stats, reference_rows, sample_indices
from compute.gpu.tiled import TileShape, fits_message


def _fake_cupy(monkeypatch, runtime):
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake)


def test_status_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    st = device.status()
    assert not st.usable
    assert st.reason == (
        "CuPy is not installed, so the GPU backend is off (pip install cupy-cuda13x)."
    )
    assert st.describe() == st.reason


def test_status_without_driver(monkeypatch):
    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    _fake_cupy(monkeypatch, types.SimpleNamespace(getDeviceCount=no_driver))
    st = device.status()
    assert not st.usable
    assert st.reason.startswith("No usable NVIDIA driver was found (cudaErrorInsufficientDriver")
    assert "\n" not in st.reason


def test_status_without_device(monkeypatch):
    _fake_cupy(monkeypatch, types.SimpleNamespace(getDeviceCount=lambda: 0))
    assert device.status().reason == "No CUDA device was found."


def test_status_with_device(monkeypatch):
    props = {
        "name": b"NVIDIA H200",
        "major": 9,
        "minor": 0,
        "sharedMemPerBlockOptin": 232448,
        "multiProcessorCount": 132,
        "l2CacheSize": 62914560,
        "totalGlobalMem": 150 * 2**30,
    }
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, getDeviceProperties=lambda i: props)
    _fake_cupy(monkeypatch, runtime)
    st = device.status()
    assert st.usable and st.name == "NVIDIA H200" and st.compute_capability == (9, 0)
    assert st.shared_mem_per_block == 232448
    assert "227 KB shared/block" in st.describe()


def test_bench_cli_without_gpu_exits_1_with_one_line(monkeypatch, capsys):
    from compute.gpu import bench_cli

    monkeypatch.setattr(
        bench_cli, "status", lambda: device.DeviceStatus(False, "No CUDA device was found.")
    )
    assert bench_cli.main(["--n", "128"]) == 1
    err = capsys.readouterr().err
    assert err == "flash-explorer bench: No CUDA device was found.\n"


def test_bench_cli_module_runs_without_gpu():
    if device.status().usable:
        pytest.skip("this machine has a GPU; the no-GPU exit is tested above")
    proc = subprocess.run(
        [sys.executable, "-m", "compute.gpu.bench_cli", "--n", "64"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("flash-explorer bench: ")


def test_bench_cli_rejects_bad_sizes():
    from compute.gpu.bench_cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--block-q", "0"])


def test_tile_shape_shared_memory():
    # 64x64 tiles, d = 64: Q, K, P~ rows padded (68, 68, 72 floats), V 64 floats.
    assert TileShape(64, 64, 64, 64).smem_bytes == 4 * (64 * 68 + 64 * 68 + 64 * 64 + 64 * 72)
    assert TileShape(64, 64, 64, 64).threads == 128
    assert TileShape(128, 64, 64, 64).threads == 256
    assert TileShape(7, 1, 20, 12).smem_bytes > 0


def test_fits_message_names_fitting_sizes():
    msg = fits_message(TileShape(512, 512, 64, 64), 227 * 1024)
    assert msg.startswith("block_q=512 x block_k=512 with d=64, d_v=64 needs ")
    assert "this device allows 227 KB" in msg and "block_q=64 with block_k<=" in msg
    for part in msg.split("these fit: ")[1].rstrip(".").split("; "):
        bq, bk = (int(x.split("=")[1].lstrip("<")) for x in part.split(" with "))
        assert TileShape(bq, bk, 64, 64).smem_bytes <= 227 * 1024
        assert TileShape(bq, bk + 8, 64, 64).smem_bytes > 227 * 1024


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q,n_k", [(40, 40), (50, 30), (30, 50)])
def test_sampled_reference_rows_equal_dense(n_q, n_k, causal):
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((n, 8)) for n in (n_q, n_k, n_k))
    rows = np.array([0, 3, n_q - 1])
    want = dense_attention(q, k, v, causal=causal)[rows]
    np.testing.assert_allclose(reference_rows(q, k, v, rows, causal=causal), want, atol=1e-12)


def test_sample_indices_and_error_stats():
    heads, rows = sample_indices(32, 16384, max_heads=2, max_rows=512)
    assert len(heads) == 2 and len(rows) == 512 and rows[-1] == 16383
    heads, rows = sample_indices(2, 100)
    assert heads.tolist() == [0, 1] and rows.tolist() == list(range(100))
    ref = np.ones((2, 3))
    assert error_stats(ref + 0.5, ref)["max_abs"] == 0.5
    assert error_stats(np.full((2, 3), np.nan), ref)["rel"] == float("inf")
