"""Output files from the second fault probe (issue 27 items 5, 12, 13, 20, 21): temporary
files nobody can predict or hijack, long names, folders moved or replaced mid-export,
links to missing folders, two exports to one path.

Real files, real links, real export processes.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest
from faultkit import GOOD, REPO, leftovers, run_cli

from desktop.export.atomic import TEMP_TAG, write_bytes_atomic

LONG_EXPORT = ["--n", "40", "--block-q", "8", "--block-k", "8", "--input", "random"]
NEW = b"\x89PNG new export"


def _start_export(target, *extra) -> subprocess.Popen:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "desktop.cli.main", "export", "--out", str(target)]
        + [*LONG_EXPORT, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def _temps(folder) -> list[str]:
    return [n for n in os.listdir(folder) if TEMP_TAG in n]


def _wait_for_temp(folder, child, timeout=60.0) -> list[str]:
    deadline = time.monotonic() + timeout  # a guard against hanging, not a measurement
    while time.monotonic() < deadline:
        names = _temps(folder)
        if names:
            time.sleep(0.3)
            return _temps(folder)
        if child.poll() is not None:
            pytest.fail(f"the export ended before the test could act: {child.stderr.read()}")
        time.sleep(0.05)
    child.kill()
    pytest.fail("the export never created its temporary file")


# ---- 5. predictable names, names swapped for links ------------------------------------
def test_a_pre_created_temp_name_is_not_written_into(tmp_path):
    target = tmp_path / "x.png"
    planted = tmp_path / f".x.png.{os.getpid()}.{TEMP_TAG}.png"  # the old, predictable name
    planted.write_bytes(b"another user's file")
    write_bytes_atomic(target, NEW)
    assert target.read_bytes() == NEW
    assert planted.read_bytes() == b"another user's file"
    assert os.stat(target).st_ino != os.stat(planted).st_ino


def test_a_planted_link_at_the_temp_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(GOOD)
    (tmp_path / f".x.png.{os.getpid()}.{TEMP_TAG}.png").symlink_to(victim)
    write_bytes_atomic(tmp_path / "x.png", NEW)  # refused (ELOOP) when the name was fixed
    assert (tmp_path / "x.png").read_bytes() == NEW and victim.read_bytes() == GOOD


@pytest.mark.parametrize("name", ["a.mp4", "a.gif"])
def test_a_temp_file_swapped_for_a_link_mid_export_leaves_the_link_target_alone(tmp_path, name):
    victim = tmp_path / "secret"
    victim.write_bytes(GOOD)
    victim.chmod(0o600)
    target = tmp_path / name
    child = _start_export(target)
    for temp in _wait_for_temp(tmp_path, child):
        path = tmp_path / temp
        if path.is_file():
            path.unlink()
            path.symlink_to(victim)
    _out, err = child.communicate(timeout=120)
    assert victim.read_bytes() == GOOD
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert "Traceback" not in err
    if child.returncode == 0:  # the encoder wrote in its private folder: a real file
        assert target.stat().st_size > 1000 and not target.is_symlink()
    else:
        assert len(err.strip().splitlines()) == 1 and "replaced by someone else" in err


# ---- 12. long names ---------------------------------------------------------------------
def test_a_250_byte_name_exports(tmp_path):
    name = "n" * 246 + ".png"
    result = run_cli("export", "--out", name, "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert leftovers(tmp_path, (name,)) == []


@pytest.mark.parametrize("command", ["export", "export-ledger", "--screenshot"])
def test_a_name_over_255_bytes_is_one_sentence(tmp_path, command):
    name = "n" * 296 + ".png"
    flag = [command] if command.startswith("--") else [command, "--out"]
    result = run_cli(*flag, name, cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "longer than this file system allows" in lines[0], result.stderr


# ---- 13. the folder moved or replaced mid-export ---------------------------------------
@pytest.mark.parametrize("replaced", [False, True], ids=["renamed", "replaced-by-a-file"])
def test_the_folder_moved_mid_export(tmp_path, replaced):
    folder = tmp_path / "out"
    folder.mkdir()
    child = _start_export(folder / "a.gif")
    _wait_for_temp(folder, child)
    moved = tmp_path / "moved"
    folder.rename(moved)
    if replaced:
        folder.write_bytes(b"a file where the folder was")
    _out, err = child.communicate(timeout=120)
    assert child.returncode == 1 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(folder) in lines[0] and ("moved or replaced" in lines[0] or replaced)
    assert leftovers(moved, ()) == []  # no orphaned partial file in the moved folder


# ---- 20. a link to a missing folder ----------------------------------------------------
def test_a_link_to_a_missing_folder_names_the_missing_folder(tmp_path):
    (tmp_path / "sl").symlink_to(tmp_path / "gone")
    result = run_cli("export", "--out", "sl/x.png", cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip().endswith(
        f"The folder {tmp_path / 'gone'} does not exist; create it or choose another folder."
    ), result.stderr


# ---- 21. two exports to one path --------------------------------------------------------
def test_a_second_export_to_the_same_path_is_refused_while_the_first_runs(tmp_path):
    target = tmp_path / "t.gif"
    first = _start_export(target)
    _wait_for_temp(tmp_path, first)
    second = run_cli("export", "--out", str(target), *LONG_EXPORT, cwd=tmp_path)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode == 1
    assert second.stderr.strip().endswith(
        "is writing t.gif now; wait for it to finish or choose another name."
    ), second.stderr
    assert leftovers(tmp_path, ("t.gif",)) == []
