"""Interrupted exports: SIGINT, SIGTERM and kill -9 mid-export leave the good file intact.

SIGINT/SIGTERM: exit 130/143, one line on stderr, no temporary file. kill -9 cannot be
caught: its temporary file stays until the next export to the same path clears it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from faultkit import GOOD, REPO, leftovers

from desktop.export.atomic import TEMP_TAG, temp_prefix, write_bytes_atomic

# Long enough to be caught mid-export on any machine: 60 frames of a 40-position trace.
LONG_EXPORT = ["--n", "40", "--block-q", "8", "--block-k", "8", "--input", "random"]


def _start_export(target) -> subprocess.Popen:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "desktop.cli.main", "export", "--out", str(target), *LONG_EXPORT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def _wait_for_temp(folder, child, timeout=60.0) -> None:
    """Block until the export's temporary file exists (frames are then being rendered)."""
    deadline = time.monotonic() + timeout  # a guard against hanging, not a measurement
    while time.monotonic() < deadline:
        if any(TEMP_TAG in n for n in os.listdir(folder)):
            time.sleep(0.3)  # let it get into the frames
            return
        if child.poll() is not None:
            pytest.fail(f"the export ended before it could be interrupted: {child.stderr.read()}")
        time.sleep(0.05)
    child.kill()
    pytest.fail("the export never created its temporary file")


@pytest.mark.parametrize(
    ("name", "sig", "status", "word"),
    [
        ("a.gif", signal.SIGINT, 130, "interrupted"),
        ("a.mp4", signal.SIGINT, 130, "interrupted"),
        ("a.gif", signal.SIGTERM, 143, "terminated"),
    ],
)
def test_interrupt_mid_export(tmp_path, name, sig, status, word):
    target = tmp_path / name
    target.write_bytes(GOOD)
    child = _start_export(target)
    _wait_for_temp(tmp_path, child)
    child.send_signal(sig)
    _out, err = child.communicate(timeout=60)
    assert child.returncode == status  # not -11: no segfault from unwinding through Qt
    assert err.strip().splitlines() == [f"flash-explorer: {word}; no file was written or replaced."]
    assert target.read_bytes() == GOOD
    assert leftovers(tmp_path, (name,)) == []


def test_kill_9_leftovers_are_cleared_by_the_next_export(tmp_path):
    target = tmp_path / "a.gif"
    target.write_bytes(GOOD)
    child = _start_export(target)
    _wait_for_temp(tmp_path, child)
    child.kill()
    child.communicate(timeout=60)
    assert target.read_bytes() == GOOD
    stale = leftovers(tmp_path, ("a.gif",))
    assert len(stale) == 1 and stale[0].startswith(temp_prefix(target, child.pid))
    write_bytes_atomic(target, b"GIF89a next export")  # the same export, run again
    assert leftovers(tmp_path, ("a.gif",)) == []
    assert target.read_bytes() == b"GIF89a next export"


def test_other_targets_temp_files_are_left_alone(tmp_path):
    target = tmp_path / "a.png"
    other = tmp_path / f".b.png.999999999.0123abcd.{TEMP_TAG}.png"  # another target's temp
    other.write_bytes(b"x")
    write_bytes_atomic(target, b"png")
    assert other.exists()
