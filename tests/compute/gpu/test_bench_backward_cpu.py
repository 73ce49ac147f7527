"""The harness's backward pass without a GPU: its config, FLOPs and the CLI's refusals."""

from __future__ import annotations

import pytest

from compute.gpu import bench_cli, device
from compute.gpu.bench import BenchConfig


def test_backward_counts_two_and_a_half_forwards():
    fwd = BenchConfig(n=1000, n_keys=700, d=64, causal=True)
    bwd = BenchConfig(n=1000, n_keys=700, d=64, causal=True, pass_name="backward")
    assert bwd.flops() == 2.5 * fwd.flops()


def test_unknown_pass_and_backward_sweep_are_refused_in_one_sentence():
    with pytest.raises(ValueError, match="^pass must be one of forward, backward, not 'x'.$"):
        BenchConfig(pass_name="x")
    with pytest.raises(ValueError, match="block sweep times the forward only"):
        BenchConfig(pass_name="backward", sweep_blocks=True)


def test_cli_takes_pass(monkeypatch, capsys):
    assert bench_cli.build_parser().parse_args(["--pass", "backward"]).pass_name == "backward"
    assert bench_cli.build_parser().parse_args([]).pass_name == "forward"
    usable = device.DeviceStatus(True, name="test GPU")
    monkeypatch.setattr(bench_cli, "status", lambda: usable)
    assert bench_cli.main(["--pass", "backward", "--sweep-blocks"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("flash-explorer bench: The block sweep")
