"""What sits at the target path: modes, links, fifos, devices, folders, unwritable places.

Replacing a file keeps its mode; a symlink is written through to its target; a hard
link, fifo, device or folder is refused with one sentence and left exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import uuid

import pytest
from faultkit import GOOD, leftovers, try_mount, unmount

from desktop.export.atomic import ExportError, write_bytes_atomic
from desktop.export.exporter import export_still

NEW = b"the new export\n"


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755])
def test_replacing_keeps_the_mode(tmp_path, mode):
    target = tmp_path / "x.png"
    target.write_bytes(GOOD)
    os.chmod(target, mode)
    write_bytes_atomic(target, NEW)
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert target.read_bytes() == NEW


def test_a_new_file_gets_the_umask_mode(tmp_path):
    umask = os.umask(0o027)
    try:
        write_bytes_atomic(tmp_path / "x.png", NEW)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "x.png").stat().st_mode) == 0o640


def test_a_symlink_is_written_through(tmp_path):
    real = tmp_path / "real" / "x.png"
    real.parent.mkdir()
    real.write_bytes(GOOD)
    os.chmod(real, 0o600)
    link = tmp_path / "link.png"
    link.symlink_to(real)
    write_bytes_atomic(link, NEW)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() == NEW and stat.S_IMODE(real.stat().st_mode) == 0o600
    assert (
        leftovers(real.parent, ("x.png",)) == [] and leftovers(tmp_path, ("real", "link.png")) == []
    )


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.png"
    link.symlink_to(tmp_path / "made.png")
    write_bytes_atomic(link, NEW)
    assert link.is_symlink() and (tmp_path / "made.png").read_bytes() == NEW


def test_a_hard_link_is_refused_not_split(tmp_path):
    target, other = tmp_path / "x.png", tmp_path / "other.png"
    target.write_bytes(GOOD)
    os.link(target, other)
    with pytest.raises(ExportError, match="other hard link"):
        write_bytes_atomic(target, NEW)
    assert os.path.samefile(target, other) and other.read_bytes() == GOOD


def test_a_fifo_target_is_refused(tmp_path):
    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    with pytest.raises(ExportError, match="not a regular file"):
        write_bytes_atomic(fifo, NEW)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert leftovers(tmp_path, ("x.png",)) == []


def test_a_device_target_is_refused(tmp_path):
    device = tmp_path / "x.png"
    try:
        os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
    except PermissionError as exc:
        pytest.skip(f"making a device node needs root ({exc})")
    with pytest.raises(ExportError, match="not a regular file"):
        write_bytes_atomic(device, NEW)
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_a_folder_target_is_refused(tmp_path):
    (tmp_path / "x.png").mkdir()
    with pytest.raises(ExportError, match="is a folder"):
        write_bytes_atomic(tmp_path / "x.png", NEW)


def test_a_path_under_a_regular_file(tmp_path):
    (tmp_path / "ok.png").write_bytes(GOOD)
    with pytest.raises(ExportError, match="ok.png is a file, not a folder"):
        write_bytes_atomic(tmp_path / "ok.png" / "s.png", NEW)


def test_proc_is_not_writable_even_as_root():
    with pytest.raises(ExportError, match=r"^/proc cannot be written to"):
        write_bytes_atomic("/proc/x.png", NEW)


def test_a_read_only_mount(tmp_path):
    folder = tmp_path / f"ro-{uuid.uuid4().hex[:6]}"
    reason = try_mount(folder, "size=1m,ro")
    if reason:
        pytest.skip(reason)
    try:
        with pytest.raises(ExportError, match="cannot be written to; choose a folder"):
            write_bytes_atomic(folder / "x.png", NEW)
    finally:
        unmount(folder)


def test_an_immutable_target(tmp_path):
    target = tmp_path / "x.png"
    target.write_bytes(GOOD)
    chattr = shutil.which("chattr")
    if (
        chattr is None
        or subprocess.run([chattr, "+i", str(target)], capture_output=True).returncode
    ):
        pytest.skip("this file system (or user) cannot set the immutable flag")
    try:
        with pytest.raises(ExportError, match="x.png cannot be replaced"):
            write_bytes_atomic(target, NEW)
        assert target.read_bytes() == GOOD
    finally:
        subprocess.run([chattr, "-i", str(target)], capture_output=True)
    assert leftovers(tmp_path, ("x.png",)) == []


def test_a_still_export_through_a_symlink(window, tmp_path):
    real = tmp_path / "real.png"
    real.write_bytes(GOOD)
    (tmp_path / "link.png").symlink_to(real)
    export_still(window, tmp_path / "link.png", target="dense", step=3)
    assert real.read_bytes().startswith(b"\x89PNG") and (tmp_path / "link.png").is_symlink()
