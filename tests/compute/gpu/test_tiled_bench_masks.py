"""`flash-explorer bench`'s mask flags, without a GPU: the flags reach the configuration's
mask, the paths that take only none or bottom-right causal are left out (with `all`) or
refused (by name) in one sentence, and the FLOPs count the visible pairs."""

from __future__ import annotations

import numpy as np
import pytest

from compute.gpu import bench_cli, device
from compute.gpu.bench import BenchConfig
from compute.mask import Mask


def _cfg(*argv: str) -> BenchConfig:
    args = bench_cli.build_parser().parse_args(list(argv))
    return bench_cli._config(args, bench_cli._kernels(args))


def test_the_mask_flags_reach_the_configuration(capsys):
    cfg = _cfg("--n", "96", "--mask", "causal-top-left", "--window", "16,-1", "--dtype", "float32")
    assert cfg.mask == Mask(16, 0, True) and cfg.causal and not cfg.plain_mask
    assert cfg.kernels == ("tiled",)  # dense and flash cannot take the window: left out
    err = capsys.readouterr().err
    assert "leaving out dense: the dense path takes no mask or bottom-right causal" in err
    packed = _cfg("--n", "12", "--packed", "1,5,6", "--kernel", "tiled")
    assert packed.mask == Mask(lengths=(1, 5, 6)) and packed.kernels == ("tiled",)
    # --window -1,0 is causal: every path takes it, and `causal` says so to them.
    causal = _cfg("--n", "64", "--window", "-1,0", "--dtype", "float16")
    assert causal.causal and causal.plain_mask and "dense" in causal.kernels
    square = _cfg("--n", "64", "--mask", "causal-top-left", "--dtype", "float16")
    assert square.plain_mask and "flash" in square.kernels  # N_q = N_k: the same mask
    wide = _cfg("--n", "64", "--n-keys", "80", "--mask", "causal-top-left", "--dtype", "float16")
    assert wide.kernels == ("tiled",)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--kernel", "dense", "--window", "8,0"], "the dense path takes no mask or bottom-right"),
        (["--n", "10", "--packed", "3,4"], "packed lengths sum to 7 but N is 10"),
        (["--causal", "--mask", "none"], "contradict each other"),
        (["--peers", "--kernel", "tiled", "--packed", "32,32", "--n", "64"], "(--peers)"),
        (["--dram", "--window", "4,4"], "--dram profiles unmasked or causal runs"),
    ],
)
def test_a_mask_a_path_cannot_take_is_one_sentence_and_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(bench_cli, "status", lambda: device.DeviceStatus(False, "no GPU here"))
    assert bench_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_flops_count_the_visible_pairs():
    mask = Mask(3, 1)
    cfg = BenchConfig(n=20, n_keys=30, d=8, batch_heads=2, window="3,1")
    assert cfg.mask == mask
    visible = mask.visible(np.arange(20), np.arange(30), 20, 30).sum()
    assert cfg.flops() == pytest.approx(2.0 * 2 * visible * 16)
    plain = BenchConfig(n=20, d=8, batch_heads=2, causal=True)
    assert plain.flops() == 2.0 * 2 * 20 * 20 * 16 / 2  # the causal convention is kept


@pytest.mark.gpu
@pytest.mark.parametrize("order", ["q-outer", "kv-outer"])
def test_a_masked_bench_run_counts_the_ledger_and_matches_float64(order):
    from compute.gpu import status

    st = status()
    if not st.usable:
        pytest.skip(st.reason)
    from compute.gpu.bench import run_bench

    cfg = BenchConfig(
        n=200, n_keys=300, d=32, block_q=32, block_k=32, order=order, top_left=True,
        causal=True, window="40,0", dtype="float32", batch_heads=3, kernels=("tiled",),
        repeats=20,
    )  # fmt: skip
    (row,) = run_bench(cfg)["results"]
    assert "error" not in row, row.get("error")
    assert row["counts_match"] and row["max_abs_err"] <= 2e-5
    # Keys 240..299 are seen by no row (top-left): never loaded in either order.
    assert row["counts_kernel"]["K"]["read"] < 300 * 32 * (1 if order == "kv-outer" else 7)
