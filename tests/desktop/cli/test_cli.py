"""The headless command line: `flash-explorer ledger` as text and JSON, and its errors."""

import json
import subprocess
import sys

import pytest

from compute import ledger, pass_ledger
from desktop.cli.main import main


def test_ledger_table_shows_the_seed_totals(capsys):
    assert main(["ledger"]) == 0
    out = capsys.readouterr().out
    assert "240" in out and "96" in out and "2.50x" in out


def test_ledger_json_is_the_core_ledger(capsys):
    args = ["--n", "37", "--n-keys", "20", "--d", "8", "--dv", "4", "--block-q", "5"]
    args += [
        "--block-k",
        "6",
        "--order",
        "kv-outer",
        "--causal",
        "--save-lse",
        "--dtype",
        "float16",
    ]
    assert main(["ledger", *args, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    expected = ledger(
        37,
        20,
        8,
        4,
        block_q=5,
        block_k=6,
        order="kv-outer",
        causal=True,
        save_lse=True,
        dtype="float16",
    ).to_dict()
    assert got == expected
    assert set(got["lanes"]["tiled"]) >= {"total_elements", "total_bytes", "by_tensor"}


@pytest.mark.parametrize(
    ("pass_name", "dense", "tiled", "ratio"),
    [("backward", "444", "270", "1.64x"), ("training", "684", "372", "1.84x")],
)
def test_ledger_table_of_the_seed_backward_and_training(capsys, pass_name, dense, tiled, ratio):
    assert main(["ledger", "--pass", pass_name]) == 0
    out = capsys.readouterr().out
    assert f"pass={pass_name}" in out and ratio in out
    assert f"dense {dense:>14}" in out and f"tiled {tiled:>14}" in out
    for tensor in ("dO", "dQ", "dK", "dV", "dP", "dS", "D"):
        assert any(line.split()[:1] == [tensor] for line in out.splitlines()), tensor


def test_forward_is_the_default_pass(capsys):
    assert main(["ledger", "--causal", "--json"]) == 0
    default = capsys.readouterr().out
    assert main(["ledger", "--causal", "--json", "--pass", "forward"]) == 0
    assert capsys.readouterr().out == default
    assert "pass" not in json.loads(default)["config"]


@pytest.mark.parametrize("pass_name", ["backward", "training"])
def test_ledger_json_of_a_pass_is_the_core_ledger(capsys, pass_name):
    args = ["--n", "37", "--n-keys", "20", "--d", "8", "--dv", "4", "--block-q", "5"]
    args += ["--block-k", "6", "--order", "kv-outer", "--causal", "--dtype", "float16"]
    assert main(["ledger", *args, "--pass", pass_name, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    kw = dict(block_q=5, block_k=6, order="kv-outer", causal=True, dtype="float16")
    assert got == pass_ledger(pass_name, 37, 20, 8, 4, **kw, counted=True).to_dict()
    assert got["config"]["pass"] == pass_name
    assert set(got["lanes"]["tiled"]["by_tensor"]) >= {"dO", "dQ", "dK", "dV", "dP", "dS", "L", "D"}


@pytest.mark.parametrize(
    "args",
    [
        ["--n", "0"],
        ["--block-k", "x"],
        ["--dtype", "int8"],
        ["--order", "sideways"],
        ["--bogus"],
        ["--pass", "sideways"],
        ["--pass", "backward", "--block-q", "0"],
    ],
)
def test_bad_arguments_give_one_line_and_nonzero_exit(args):
    proc = subprocess.run(
        [sys.executable, "-m", "desktop.cli.main", "ledger", *args], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_lists_subcommands(capsys):
    assert main(["--help"]) == 0
    assert "ledger" in capsys.readouterr().out


def test_gui_without_a_display_says_so_in_one_line():
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)
    proc = subprocess.run(
        [sys.executable, "-m", "desktop.cli.main"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "flash-explorer: error: no display was found; run it on a desktop, or use "
        "--screenshot or `flash-explorer export` for headless output."
    ]


def test_screenshot_without_a_display_goes_offscreen(tmp_path):
    import os

    pytest.importorskip("PySide6", reason="the screenshot needs PySide6")

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)
    out = tmp_path / "shot.png"
    proc = subprocess.run(
        [sys.executable, "-m", "desktop.cli.main", "--screenshot", str(out), "--step", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "step 3 of 27" in proc.stdout
    assert out.stat().st_size > 10_000


def test_ledger_json_at_n4096_tiny_blocks_equals_the_closed_form_and_the_timeline(capsys):
    from compute import build_trace, closed_form_ledger, random_inputs

    flags = ["--n", "4096", "--d", "2", "--block-q", "2", "--block-k", "2", "--json"]
    assert main(["ledger", *flags]) == 0
    printed = json.loads(capsys.readouterr().out)
    closed = closed_form_ledger(4096, 4096, 2, 2, block_q=2, block_k=2)
    assert printed == json.loads(json.dumps(closed.to_dict()))
    assert (printed["config"]["block_q"], printed["config"]["block_k"]) == (2, 2)
    # The trace's own running counts (the array timeline, summed by segment) agree.
    r = random_inputs(4096, 2, 2, seed=3)
    trace = build_trace(r.q, r.k, r.v, block_q=2, block_k=2)
    assert json.loads(json.dumps(trace.ledger().to_dict())) == printed


def test_bench_gui_writes_its_json(tmp_path, capsys):
    out = tmp_path / "gui.json"
    args = ["bench-gui", "--n", "12", "--block-q", "3", "--repeats", "1", "--frames", "2"]
    assert main([*args, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["n"] == 12 and data["config"]["block_q"] == 3
    for name in ("first_ms", "complete_ms", "floor_ms", "frame_ms", "frame_late_ms"):
        assert set(data[name]) == {"p50", "p90"}
        assert data[name]["p90"] >= data[name]["p50"] > 0
    assert set(data["changes"]) == {"inputs", "blocks"}
    for when in ("speed_before", "speed_after"):
        assert data["machine"][when]["matmul_ms"] > 0
    assert main(["bench-gui", "--repeats", "0"]) == 1
    assert "at least 1" in capsys.readouterr().err


def test_bench_gui_blocks_changes_keep_the_inputs(qapp, monkeypatch):
    """A blocks change is timed from the shown inputs: after the inputs changes the
    window is put back first, so each blocks change changes the blocks alone."""
    from desktop.cli import bench_gui
    from desktop.state.config import Config

    seen = []
    real = bench_gui._time_change

    def spy(window, app, target, dense):
        seen.append((window.state.config, target))
        return real(window, app, target, dense)

    monkeypatch.setattr(bench_gui, "_time_change", spy)
    app, window = bench_gui.bench_window()
    cfg = Config(n=12, d=2, dv=2, block_q=3, block_k=3, input="random", seed=5)
    bench_gui.measure(window, app, cfg, repeats=1, frames=1)
    window.close()
    blocks = [(before, target) for before, target in seen if target.seed == cfg.seed]
    assert len(blocks) == 2
    for before, target in blocks:
        assert before.seed == target.seed
        assert (before.block_q, target.block_q) in ((3, 6), (6, 3))


def test_version_and_the_gui_by_its_name(capsys):
    from desktop import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"flash-explorer {version()}\n"
    assert main(["--help"]) == 0
    assert "flash-explorer gui --help" in capsys.readouterr().out


def test_an_unreachable_x_display_is_one_sentence_not_an_abort():
    import os

    pytest.importorskip("PySide6", reason="the GUI needs PySide6")
    env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["DISPLAY"] = ":93"  # no X server there
    proc = subprocess.run(
        [sys.executable, "-m", "desktop.cli.main"], capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr  # not SIGABRT (-6)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("flash-explorer: error: ")
    assert "DISPLAY=:93" in line or "apt-get install" in line


def test_missing_xcb_libraries_are_named_with_their_packages(monkeypatch):
    from desktop.cli import x11_check

    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(
        x11_check, "missing_packages", lambda: ["libxcb-icccm4", "libxkbcommon-x11-0"]
    )
    text = x11_check.x11_problem()
    assert "libxcb-icccm4, libxkbcommon-x11-0" in text
    assert "apt-get install libxcb-icccm4 libxkbcommon-x11-0" in text
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert x11_check.x11_problem() is None  # offscreen needs no display


def test_input_reference_is_the_reference_example():
    from desktop.cli.args import requested_config
    from desktop.cli.gui import parser

    assert requested_config(parser().parse_args(["--input", "reference"])).input == "seed"
