"""Helpers of the fault-injection suite: the CLI in a subprocess, leftovers, full disks."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOOD = b"a good file that must survive byte-identical\n" * 200


def run_cli(*args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    """`python -m desktop.cli.main ARGS` offscreen, from the repository root."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "desktop.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=kwargs.pop("cwd", REPO),
        **kwargs,
    )


PEAK_TAG = "faultkit-peak-kb "


def run_cli_peak(
    *args: str, timeout: float = 60, cwd=REPO
) -> tuple[subprocess.CompletedProcess, int]:
    """run_cli's result and the command's own peak RSS in kB. A fresh parent process runs
    it, so the figure is that command's alone: RUSAGE_CHILDREN of a test worker holds the
    largest child any earlier test of that worker ran."""
    code = (
        "import resource, subprocess, sys;"
        "p = subprocess.run(sys.argv[1:]);"
        f"sys.stderr.write('{PEAK_TAG}%d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
        "sys.exit(p.returncode)"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "desktop.cli.main", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
    )  # fmt: skip
    err, _, peak = done.stderr.rpartition(PEAK_TAG)
    done.stderr = err
    return done, int(peak)


def leftovers(folder: Path, keep: tuple[str, ...]) -> list[str]:
    """Names in `folder` other than `keep` (temporary files an export left behind)."""
    return sorted(n for n in os.listdir(folder) if n not in keep)


def try_mount(folder: Path, options: str) -> str | None:
    """Mount a tmpfs at `folder`; None on success, else the reason it was refused."""
    folder.mkdir(parents=True, exist_ok=True)
    if sys.platform != "linux":
        return "tmpfs mounts need Linux"
    try:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mount could not run ({exc})"
    if result.returncode != 0:
        return f"mounting a tmpfs was refused ({result.stderr.strip() or result.returncode})"
    return None


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=10)


class Disk:
    """A folder that can be made full: `fill(leave)` leaves about `leave` bytes free."""

    def __init__(self, kind: str, folder: Path, monkeypatch) -> None:
        self.kind, self.folder, self._mp = kind, folder, monkeypatch

    def fill(self, leave: int = 0) -> None:
        if self.kind == "tmpfs":
            filler = self.folder / "filler"
            with open(filler, "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
            size = filler.stat().st_size
            os.truncate(filler, max(0, size - leave))
            return
        # Injected: the lowest write layer accepts `leave` more bytes, then ENOSPC.
        import desktop.export.atomic as atomic

        budget = [leave]

        def write(fd: int, data) -> int:
            if budget[0] <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = os.write(fd, data[: budget[0]])
            budget[0] -= n
            return n

        self._mp.setattr(atomic, "_os_write", write)

    @property
    def keep(self) -> tuple[str, ...]:
        return ("filler",) if self.kind == "tmpfs" else ()
