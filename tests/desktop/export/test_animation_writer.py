"""GIF/MP4 writing and atomic output, read back from disk (no Qt needed)."""

import errno
import os

import imageio.v3 as iio
import numpy as np
import pytest
from PIL import Image

from desktop.export.animation_writer import write_animation
from desktop.export.atomic import ExportCancelled, ExportError, describe_os_error, write_text_atomic


def frames(n, h=48, w=64):
    rng = np.random.default_rng(1)
    base = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
    for i in range(n):
        f = base.copy()
        f[:, (i * 7) % w] = 255  # a moving line, so frames differ
        yield f


def test_gif_loops_with_every_frame(tmp_path):
    path = write_animation(tmp_path / "a.gif", frames(12), total=12, fps=10)
    with Image.open(path) as im:
        assert im.n_frames == 12
        assert im.info.get("loop") == 0
        assert im.size == (64, 48)
        assert im.info["duration"] == 100
    assert [p.name for p in tmp_path.iterdir()] == ["a.gif"]


def test_mp4_decodes_with_expected_frame_count(tmp_path):
    path = write_animation(tmp_path / "a.mp4", frames(15, 49, 63), total=15, fps=12)
    decoded = list(iio.imiter(path))
    assert len(decoded) == 15
    assert decoded[0].shape[:2] == (50, 64)  # padded to even sizes for yuv420p


def test_cancel_leaves_no_file_and_keeps_the_old_one(tmp_path):
    target = tmp_path / "a.gif"
    target.write_bytes(b"old good file")
    seen = []

    def progress(done, total):
        seen.append(done)
        return done < 3  # cancel at the third frame

    with pytest.raises(ExportCancelled):
        write_animation(target, frames(10), total=10, fps=10, progress=progress)
    assert seen == [1, 2, 3]
    assert target.read_bytes() == b"old good file"
    assert [p.name for p in tmp_path.iterdir()] == ["a.gif"]


def test_encoder_failure_leaves_no_partial_file(tmp_path):
    def broken():
        yield np.zeros((8, 8, 3), np.uint8) + 3
        raise RuntimeError("renderer crashed")

    with pytest.raises(ExportError, match="Encoding b.mp4 failed"):
        write_animation(tmp_path / "b.mp4", broken(), total=2, fps=5)
    assert list(tmp_path.iterdir()) == []


def test_unknown_extension_and_bad_fps(tmp_path):
    with pytest.raises(ExportError, match="use .gif or .mp4"):
        write_animation(tmp_path / "a.avi", frames(2), total=2, fps=5)
    with pytest.raises(ExportError, match="frame rate 0 is outside 0.1 to 100"):
        write_animation(tmp_path / "a.gif", frames(2), total=2, fps=0)


def test_missing_folder_is_one_sentence(tmp_path):
    with pytest.raises(ExportError, match="does not exist; create it or choose another folder"):
        write_text_atomic(tmp_path / "nope" / "x.json", "{}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only folders")
def test_unwritable_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(ExportError, match="cannot be written to"):
        write_text_atomic(ro / "x.json", "{}")


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (errno.ENOSPC, "is full; free some space"),
        (errno.EACCES, "cannot be written to; choose a folder you can write to"),
        (errno.EROFS, "cannot be written to"),
        (errno.EIO, "Writing x.gif failed"),
    ],
)
def test_os_error_sentences(tmp_path, code, message):
    text = describe_os_error(OSError(code, os.strerror(code)), tmp_path / "x.gif")
    assert message in text and text.endswith(".")


def test_write_failure_midway_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "x.json"
    target.write_text("good")

    def fail_replace(src, dst, **_dirs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", fail_replace)
    with pytest.raises(ExportError, match="is full"):
        write_text_atomic(target, "new")
    assert target.read_text() == "good"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
