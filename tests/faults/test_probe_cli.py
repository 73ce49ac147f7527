"""The command line and the window from the second fault probe (issue 27 items 10, 11,
14, 15, 16): values the controls cannot hold, deeply nested saved settings, full
disks behind stdout, signals to the running window, settings that cannot be saved.

Real processes, real signals, real settings files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from faultkit import REPO, run_cli


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# ---- 10. values the window's controls cannot hold ------------------------------------
@pytest.mark.parametrize(
    "flags",
    [
        ["--sram", "1000000000000"],
        ["--block-q", "3000000000"],
        ["--input", "random", "--seed", "4000000000"],
    ],
    ids=["sram", "block-q", "seed"],
)
def test_a_value_past_the_controls_is_refused_in_one_sentence(tmp_path, flags):
    result = run_cli("--screenshot", "x.png", *flags, cwd=tmp_path)
    assert result.returncode == 2
    line = _one_line(result)
    assert f"{flags[-2]} {int(flags[-1]):,} is more than the window's controls hold" in line
    assert not (tmp_path / "x.png").exists()


def test_a_saved_configuration_past_the_controls_falls_back(isolated_settings, qtbot, capsys):
    from desktop.state.config import Config
    from desktop.window.main_window import MainWindow

    _write_settings(isolated_settings, 'config="{\\"sram\\": 1000000000000}"')
    window = MainWindow(build_inline=True)
    qtbot.addWidget(window)
    err = capsys.readouterr().err
    assert err.count("flash-explorer: warning:") == 1 and "config" in err
    assert window.state.config == Config()
    assert window.controls.sram_spin.value() == 0  # the controls show what the lanes show
    window.persist = False
    window.close()


# ---- 11. deeply nested JSON in the saved configuration -------------------------------
def _write_settings(folder, line: str) -> None:
    path = folder / "FlashAttentionExplorer" / "flash-explorer.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[General]\n{line}\n", encoding="utf-8")


def test_a_deeply_nested_saved_configuration_falls_back(isolated_settings, qtbot, capsys):
    from desktop.state.config import Config
    from desktop.window.main_window import MainWindow

    _write_settings(isolated_settings, "config=" + "[" * 100_000 + "]" * 100_000)
    window = MainWindow(build_inline=True)
    qtbot.addWidget(window)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flash-explorer: warning: the saved setting config")
    assert window.state.config == Config() and window.state.trace is not None
    window.persist = False
    window.close()


# ---- 14. stdout on a full disk ---------------------------------------------------------
def _to_dev_full(*args: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(REPO))
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "desktop.cli.main", *args],
            stdout=full, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, timeout=120,
        )  # fmt: skip


pytestmark_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


@pytestmark_full
def test_the_ledger_to_a_full_disk_is_one_sentence(tmp_path):
    result = _to_dev_full("ledger", "--n", "64", cwd=tmp_path)
    assert result.returncode == 1
    assert "the output could not be written (No space left on device)" in _one_line(result)


@pytestmark_full
def test_export_ledger_with_stdout_on_a_full_disk_still_succeeds(tmp_path):
    result = _to_dev_full("export-ledger", "--out", "c.csv", cwd=tmp_path)
    assert result.returncode == 0  # the file is written; only the notice was lost
    assert "stdout could not be written" in _one_line(result)
    assert (tmp_path / "c.csv").read_text().startswith("lane,tensor")


@pytestmark_full
@pytest.mark.parametrize("out", ["x.png", "x.gif"])
def test_export_with_stdout_on_a_full_disk_still_succeeds(tmp_path, out):
    result = _to_dev_full("export", "--out", out, "--steps", "1:2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in _one_line(result) and "stdout could not be written" in result.stderr
    assert (tmp_path / out).stat().st_size > 100


def test_bench_gui_json_to_dev_full_is_one_sentence(tmp_path):
    result = run_cli("bench-gui", "--repeats", "1", "--frames", "1", "--json", "/dev/full",
                     cwd=tmp_path, timeout=300)  # fmt: skip
    assert result.returncode == 1
    assert "/dev/full is not a regular file" in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr


def test_bench_memory_refuses_its_json_path_before_measuring(tmp_path):
    """The grid takes minutes: a path that cannot take the file is said at once."""
    result = run_cli("bench-memory", "--grid", "--json", "/dev/full", cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.endswith("/dev/full is not a regular file (it is a fifo, socket or device); "
                         "choose a file name.")  # fmt: skip
    assert "Traceback" not in result.stderr and not result.stdout.strip()


# ---- 15. SIGINT and SIGTERM to the window ------------------------------------------------
def _catches(pid: int, sig: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask >> (sig - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_quits_the_window_cleanly_and_saves(tmp_path, sig, status):
    config_home = tmp_path / "config"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(REPO),
               XDG_CONFIG_HOME=str(config_home))  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-m", "desktop.cli.main", "--n", "9", "--input", "random"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90  # a guard against hanging: the window is up once
        while not _catches(child.pid, signal.SIGTERM):  # it catches SIGTERM (before its loop)
            if child.poll() is not None or time.monotonic() > deadline:
                child.kill()
                pytest.fail(f"the window never took its signals: {child.communicate()[1][-500:]}")
            time.sleep(0.1)
        time.sleep(0.5)
        child.send_signal(sig)
        _out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == status, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    conf = (config_home / "FlashAttentionExplorer" / "flash-explorer.conf").read_text()
    saved = next(ln for ln in conf.splitlines() if ln.startswith("config="))
    assert json.loads(json.loads(saved[len("config=") :]))["n"] == 9


# ---- 16. settings that cannot be saved ---------------------------------------------------
def test_settings_that_cannot_be_saved_say_so_once(isolated_settings, qtbot, capsys):
    from desktop.window.main_window import MainWindow

    isolated_settings.mkdir(parents=True, exist_ok=True)
    (isolated_settings / "FlashAttentionExplorer").write_text("a file where the folder goes")
    for _ in range(2):
        window = MainWindow(build_inline=True)
        qtbot.addWidget(window)
        window.close()
    err = capsys.readouterr().err
    assert err.count("the settings could not be saved") == 1, err
