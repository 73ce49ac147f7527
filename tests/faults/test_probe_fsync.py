"""Every CLI writer fsyncs a file before renaming it into place (issue 27 item 23):
after a crash or power loss the name holds the old file or the whole new one.

Each writer runs in a real process under strace, which records its fsync and rename
calls; the file's descriptor must be fsynced before the rename that installs it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from faultkit import REPO

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")

WRITE_REPORT = (
    "import sys; from pathlib import Path; from compute.gpu.report import bundled_report; "
    "from compute.gpu.bench_cli import _finish; "
    "_finish(bundled_report()['reports'][0], Path(sys.argv[1]))"
)


def _traced(tmp_path, *argv: str) -> list[str]:
    log = tmp_path / "trace.txt"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(REPO))
    calls = "trace=openat,fsync,fdatasync,rename,renameat,renameat2"
    result = subprocess.run(
        ["strace", "-f", "-qq", "-e", calls, "-o", str(log), sys.executable, *argv],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    if "PTRACE" in result.stderr or "Operation not permitted" in result.stderr:
        pytest.skip(f"strace cannot trace here ({result.stderr.strip()[:80]})")
    return log.read_text().splitlines()


def _fsynced_before_rename(lines: list[str], name: str) -> bool:
    """Whether the temporary file renamed to `name` had its descriptor fsynced first."""
    fds: dict[str, str] = {}  # fd -> path, per the openat calls
    synced: set[str] = set()
    for line in lines:
        opened = re.search(r'openat\([^,]+, "([^"]+)", [^)]*\)\s+=\s+(\d+)', line)
        if opened:
            fds[opened[2]] = opened[1]
        synced_fd = re.search(r"f(?:data)?sync\((\d+)\)\s+=\s+0", line)
        if synced_fd and synced_fd[1] in fds:
            synced.add(os.path.basename(fds[synced_fd[1]]))
        moved = re.search(r'rename\w*\((?:[^,]+, )?"([^"]+)", (?:[^,]+, )?"([^"]+)"', line)
        if moved and os.path.basename(moved[2]) == name:
            return os.path.basename(moved[1]) in synced
    raise AssertionError(f"{name} was never renamed into place")


@pytest.mark.parametrize(
    "argv",
    [
        ["-c", WRITE_REPORT, "r.json"],
        ["-m", "desktop.cli.main", "export-ledger", "--out", "r.json"],
        ["-m", "desktop.cli.main", "export", "--out", "r.json".replace(".json", ".png")],
    ],
    ids=["bench --json", "export-ledger", "export"],
)
def test_each_writer_fsyncs_before_the_rename(tmp_path, argv):
    name = argv[-1]
    lines = _traced(tmp_path, *argv)
    assert (tmp_path / name).exists()
    assert _fsynced_before_rename(lines, name), "\n".join(lines[-30:])
