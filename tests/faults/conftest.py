"""Fixtures for the fault-injection suite: a real full disk, an injected one, a window.

A real full disk is a small tmpfs mounted for the test (CI runs as root on Linux); where
mounting is refused the real-disk cases skip with the reason, and the injected cases
(ENOSPC from the lowest write layer, `desktop.export.atomic._os_write`) still run.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path

import pytest

if importlib.util.find_spec("PySide6") is None or importlib.util.find_spec("pytestqt") is None:
    collect_ignore_glob = ["test_*.py"]

# Under --import-mode=importlib test folders are not on sys.path; the suite's helper
# module (faultkit) is, from here on, for this folder's tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from faultkit import Disk, try_mount, unmount  # noqa: E402


@pytest.fixture(params=["tmpfs", "injected"])
def disk(request, tmp_path, monkeypatch):
    """A real full tmpfs (skipped with the reason where mounting is refused) or ENOSPC
    injected at the lowest write layer."""
    if request.param == "injected":
        yield Disk("injected", tmp_path, monkeypatch)
        return
    folder = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    reason = try_mount(folder, "size=2m,mode=0777")
    if reason:
        pytest.skip(reason)
    try:
        yield Disk("tmpfs", folder, monkeypatch)
    finally:
        unmount(folder)


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path, monkeypatch):
    """Every test reads and writes its own QSettings directory, never the user's."""
    from PySide6.QtCore import QSettings

    folder = tmp_path / "settings"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(folder))
    return folder


@pytest.fixture(scope="session")
def window():
    """One headless window (random N = 24, d = 8, blocks 5 × 7) shared by the writers' cases."""
    from desktop.cli.session import headless_window
    from desktop.state.config import Config

    w = headless_window(
        Config(n=24, d=8, dv=8, block_q=5, block_k=7, input="random", seed=11), size=(900, 600)
    )
    yield w
    w.close()
