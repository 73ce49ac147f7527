"""The harness's backward and training passes without a GPU: config, FLOPs, the CLI's flags,
and the report schema (version 3 reads older reports as forward ones)."""

from __future__ import annotations

import pytest

from compute.gpu import bench_cli, device
from compute.gpu.bench import BenchConfig
from compute.gpu.report import (
    VERSION,
    format_report,
    report_label,
    split_reports,
    sweep_for,
    tiled_order,
)


def test_backward_and_training_count_their_matmuls():
    fwd = BenchConfig(n=1000, n_keys=700, d=64, causal=True)
    bwd = BenchConfig(n=1000, n_keys=700, d=64, causal=True, pass_name="backward")
    train = BenchConfig(n=1000, n_keys=700, d=64, causal=True, pass_name="training")
    assert bwd.flops() == 2.5 * fwd.flops()
    assert train.flops() == 3.5 * fwd.flops()


def test_unknown_pass_and_flash_variants_outside_the_forward_are_refused():
    with pytest.raises(
        ValueError, match="^pass must be one of forward, backward, training, not 'x'.$"
    ):
        BenchConfig(pass_name="x")
    with pytest.raises(ValueError, match="forward kernels; leave them off for the backward"):
        BenchConfig(pass_name="backward", flash_specs=("wgmma:64:2:128:2",))
    # The block sweep runs in every pass now (the teaching kernel's backward at each tile).
    assert BenchConfig(pass_name="training", sweep_blocks=True).sweep_blocks


def test_tiled_order_per_pass():
    orders = [tiled_order(BenchConfig(order="q-outer", pass_name=p)) for p in
              ("forward", "backward", "training")]  # fmt: skip
    assert orders == ["q-outer", "kv-outer", "q-outer+kv-outer"]


def test_cli_takes_pass_and_peers(monkeypatch, capsys):
    parse = bench_cli.build_parser().parse_args
    assert parse(["--pass", "training"]).pass_name == "training"
    assert parse([]).pass_name == "forward" and not parse([]).peers
    usable = device.DeviceStatus(True, name="test GPU")
    monkeypatch.setattr(bench_cli, "status", lambda: usable)
    seen = {}

    def fake_run(cfg, progress=None):
        seen["cfg"] = cfg
        return _report("training", [_row("tiled"), {"kernel": "sdpa-cudnn", "error": "no torch"}])

    monkeypatch.setattr("compute.gpu.bench.run_bench", fake_run)
    monkeypatch.setattr(bench_cli, "fa4_refusal", lambda: "FA4 is absent")
    # Every path in the report was asked for: a peer that failed fails the command, with its
    # sentence on stderr (the row stays in the report). FA4 joins the peers only where it
    # imports; elsewhere one note says it was left out.
    assert bench_cli.main(["--pass", "training", "--peers", "--kernel", "tiled"]) == 1
    err = capsys.readouterr().err
    assert "flash-explorer bench: sdpa-cudnn failed: no torch" in err
    assert "flash-explorer bench: leaving out fa4: FA4 is absent" in err
    assert seen["cfg"].kernels == ("tiled", "sdpa-flash", "sdpa-cudnn")
    assert seen["cfg"].pass_name == "training"
    monkeypatch.setattr(bench_cli, "fa4_refusal", lambda: None)  # importable
    assert bench_cli.main(["--pass", "backward", "--peers", "--kernel", "tiled"]) == 1
    assert "leaving out fa4" not in capsys.readouterr().err
    assert seen["cfg"].kernels == ("tiled", "sdpa-flash", "sdpa-cudnn", "fa4")


def test_cli_dtype_default_choices_and_refusals(monkeypatch, capsys):
    parse = bench_cli.build_parser().parse_args
    assert parse([]).dtype == "float16"
    assert {parse(["--dtype", t]).dtype for t in ("float32", "float16", "bfloat16")} == {
        "float32", "float16", "bfloat16",
    }  # fmt: skip
    monkeypatch.setattr(bench_cli, "status", lambda: device.DeviceStatus(True, name="test GPU"))
    seen = {}

    def fake_run(cfg, progress=None):
        seen["cfg"] = cfg
        return _report("forward", [_row(k) for k in cfg.kernels])

    monkeypatch.setattr("compute.gpu.bench.run_bench", fake_run)
    # `all` in bfloat16: only the tensor-core kernel takes it; the others are left out, said so.
    assert bench_cli.main(["--dtype", "bfloat16", "--n", "256"]) == 0
    assert seen["cfg"].kernels == ("flash",) and seen["cfg"].dtype == "bfloat16"
    assert "leaving out tiled: the tiled path takes float32 or float16" in capsys.readouterr().err
    # A path asked for by name that cannot take the problem: refused before anything runs.
    seen.clear()
    assert bench_cli.main(["--kernel", "tiled", "--dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err
    assert err == "flash-explorer bench: the tiled path takes float32 or float16, not bfloat16.\n"
    assert bench_cli.main(["--kernel", "flash", "--d", "32"]) == 2
    assert "d = d_v = 64 or 128" in capsys.readouterr().err
    assert bench_cli.main(["--dtype", "float32", "--peers"]) == 2
    assert "SDPA is compared in float16 or bfloat16" in capsys.readouterr().err
    assert not seen


def test_fa4_peer_refusals():
    from compute.gpu import peers
    from compute.gpu.bench_rows import path_refusal

    assert (
        path_refusal("fa4", "float32", 64, 64)
        == "FA4 is compared in float16 or bfloat16, not float32"
    )
    assert (
        path_refusal("fa4", "bfloat16", 128, 64)
        == "FA4 is compared at d = d_v, not d = 128, d_v = 64"
    )
    assert path_refusal("fa4", "float16", 64, 64) is None
    reason = peers.fa4_refusal()
    if reason is None:
        pytest.skip("FA4 is installed here")
    assert reason.startswith("FA4 (flash_attn.cute) is not importable here (")
    with pytest.raises(ImportError, match="not importable"):
        peers.peer("fa4")
    with pytest.raises(ImportError, match="not importable"):
        peers.peer_backward("fa4")


def _row(kernel: str, **extra) -> dict:
    return {
        "kernel": kernel, "ms": 1.0, "tflops": 2.0, "ledger_gbs": None, "peak_bytes": 0,
        "extra_bytes": 0, "max_abs_err": None, "rel_err": None, **extra,
    }  # fmt: skip


def _report(pass_name: str | None, results: list, version: int = VERSION, sweep=None) -> dict:
    config = {"n": 64, "n_keys": 64, "d": 64, "d_v": 64, "dtype": "float16",
              "batch_heads": 1, "causal": False, "repeats": 20}  # fmt: skip
    if pass_name is not None:
        config["pass_name"] = pass_name
    return {"format": "flash-explorer-gpu-bench", "version": version, "config": config,
            "device": {"name": "H200", "compute_capability": [9, 0]}, "results": results,
            "rotated_input_sets": 2, "sweep": sweep}  # fmt: skip


def test_version_2_reports_read_as_forward_and_sweeps_match_their_pass():
    sweep = {"order": "q-outer", "block_q": [64], "block_k": [64], "ms": [[1.0]], "best": None}
    old = {**_report(None, [_row("flash")], version=2, sweep=sweep)}
    backward_sweep = {**sweep, "pass": "backward", "order": "kv-outer"}
    new = _report("backward", [_row("tiled", order="kv-outer", block_q=64, block_k=64)],
                  sweep=backward_sweep)  # fmt: skip
    bare = _report("backward", [_row("flash")])
    data = {"format": "flash-explorer-gpu-figures", "reports": [old, new, bare]}
    old_r, new_r, bare_r = split_reports(data)
    assert old_r["version"] == VERSION and old_r["config"]["pass_name"] == "forward"
    assert old_r["results"][0]["pass"] == "forward" and old_r["sweep"]["pass"] == "forward"
    assert new_r is new  # current version: as recorded
    assert sweep_for(bare_r, [old_r, new_r, bare_r]) is backward_sweep  # not the forward's
    assert report_label(bare_r) == "float16 N=64 d=64 backward: flash"
    assert report_label(old_r).startswith("float16 N=64 d=64: flash")
    text = format_report(new_r)
    assert "pass=backward" in text and "sweep of the tiled kernel (backward, kv-outer)" in text


def test_figures_add_backward_passes_to_kept_forward_reports(monkeypatch):
    from compute.gpu.lab import figures

    runs = []

    def fake_run(cfg):
        runs.append(cfg)
        sweep = None
        if cfg.sweep_blocks:
            sweep = {"pass": cfg.pass_name, "order": "kv-outer", "block_q": [32], "block_k": [64],
                     "ms": [[1.0]], "best": {"block_q": 32, "block_k": 64, "ms": 1.0}}  # fmt: skip
        results = [_row(k, pass_name=cfg.pass_name) for k in cfg.kernels]
        return _report(cfg.pass_name, results, sweep=sweep)

    monkeypatch.setattr(figures, "run_bench", fake_run)
    kept = [_report("forward", [_row("tiled")]), _report("backward", [_row("tiled")])]
    data = figures.figures(dtypes=("float16",), passes=("backward", "training"), keep=kept)
    assert data["reports"][0] is kept[0] and kept[1] not in data["reports"]  # replaced
    assert [(c.pass_name, c.causal) for c in runs[1:]] == [
        ("backward", False),
        ("backward", True),
        ("training", False),
        ("training", True),
    ]
    assert all((c.block_q, c.block_k) == (32, 64) for c in runs[1:])  # the sweep's best
    assert runs[1].kernels == ("tiled", "dense", "flash", "sdpa-flash", "sdpa-cudnn")
    assert len(data["summary"]) == 1 + 4 * 5
    assert data["summary"][-1][:5] == ["float16", "64", "False", "training", "sdpa-cudnn"]


def test_a_masked_reports_label_names_its_mask_not_plain_causal():
    """A window or packed run is named by its mask (it was named like a plain causal one)."""
    window = _report(None, [_row("tiled", order="q-outer", block_q=64, block_k=64)])
    window["config"] |= {"causal": True, "window": "256,0"}
    packed = _report(None, [_row("tiled", order="q-outer", block_q=64, block_k=64)])
    packed["config"] |= {"causal": False, "packed": "16,48"}
    plain = _report(None, [_row("flash")])
    plain["config"] |= {"causal": True}
    assert "window (256, 0)" in report_label(window) and "causal" in report_label(window)
    assert "packed 16+48" in report_label(packed)
    assert report_label(plain).startswith("float16 N=64 d=64 causal:")
