"""A full disk never replaces a good file, never leaves a partial one, and says so once.

Every writer (PNG, SVG, GIF, MP4, ledger PNG/CSV/JSON, --screenshot) runs against a real
full tmpfs and against ENOSPC injected at the lowest write layer, with a write that
fails partway (a few KiB are still free) and with no space at all.
"""

from __future__ import annotations

import pytest
from faultkit import GOOD, leftovers, run_cli

from desktop.export.atomic import ExportError
from desktop.export.exporter import export_animation, export_still
from desktop.export.frames import FramePlan
from desktop.export.ledger_export import export_ledger


def _png(w, p):
    export_still(w, p, target="dense", step=5)


def _svg(w, p):
    export_still(w, p, target="tiled", step=5)


def _gif(w, p):
    export_animation(w, p, plan=FramePlan(range(0, 8)), fps=6, target="dense")


def _mp4(w, p):
    export_animation(w, p, plan=FramePlan(range(0, 8)), fps=6, target="dense")


def _ledger(w, p):
    export_ledger(w.state.trace.ledger(), p)


WRITERS = {
    "shot.png": _png,
    "view.svg": _svg,
    "anim.gif": _gif,
    "anim.mp4": _mp4,
    "ledger.csv": _ledger,
    "ledger.json": _ledger,
    "ledger.png": _ledger,
}


# Bytes still free when the export starts: none, or enough for part of the file (tmpfs
# frees whole 4 KiB pages; the ledger's CSV and JSON are about 1 KiB).
PARTWAY = {"tmpfs": 3 * 4096, "injected": 200}


@pytest.mark.parametrize("partway", [False, True], ids=["no-space", "fails-partway"])
@pytest.mark.parametrize("name", list(WRITERS))
def test_full_disk_keeps_the_good_file(window, disk, name, partway):
    if name.endswith(".mp4") and disk.kind == "injected":
        pytest.skip("ffmpeg writes the MP4 itself; only a real full disk reaches it")
    if partway and disk.kind == "tmpfs" and name in ("ledger.csv", "ledger.json"):
        pytest.skip("the 1 KiB ledger fits in the free pages; the no-space case covers it")
    target = disk.folder / name
    target.write_bytes(GOOD)
    disk.fill(PARTWAY[disk.kind] if partway else 0)
    with pytest.raises(ExportError, match="is full; free some space"):
        WRITERS[name](window, target)
    assert target.read_bytes() == GOOD
    assert leftovers(disk.folder, (name, *disk.keep)) == []


@pytest.mark.parametrize("name", ["shot.png", "anim.gif", "ledger.json"])
def test_full_disk_creates_no_file(window, disk, name):
    disk.fill(0)
    with pytest.raises(ExportError, match="is full"):
        WRITERS[name](window, disk.folder / name)
    assert leftovers(disk.folder, disk.keep) == []


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["export-mp4", "screenshot"])
def test_full_disk_from_the_command_line(disk, command):
    """The issue's cases 1 and 2: non-zero exit, one line, the good file intact."""
    if disk.kind == "injected":
        pytest.skip("a subprocess cannot be injected into; a real full disk is needed")
    name = "out.mp4" if command == "export-mp4" else "shot.png"
    target = disk.folder / name
    target.write_bytes(GOOD)
    disk.fill(PARTWAY[disk.kind])
    if command == "export-mp4":
        result = run_cli("export", "--out", str(target), "--steps", "1:6", "--quiet")
    else:
        result = run_cli("--screenshot", str(target))
    assert result.returncode != 0
    assert "is full" in _one_error_line(result)
    assert target.read_bytes() == GOOD
    assert leftovers(disk.folder, (name, *disk.keep)) == []
