"""Atomic file output: write to a temporary name beside the target, rename at the end.

A failed or cancelled export never leaves a partial file and never overwrites a good
one. OS errors become one-sentence `ExportError`s that say what to do.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class ExportError(RuntimeError):
    """A user-facing export failure; str() is one complete sentence."""


class ExportCancelled(ExportError):
    """The user cancelled; nothing was written."""

    def __init__(self) -> None:
        super().__init__("The export was cancelled; no file was written.")


def describe_os_error(exc: OSError, path: Path) -> str:
    """One sentence naming the problem with `path` and what to do about it."""
    folder = path.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"The disk holding {folder} is full; free some space or choose another folder."
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{folder} cannot be written to; choose a folder you can write to."
    if exc.errno == errno.ENOENT:
        return f"The folder {folder} does not exist; create it or choose another folder."
    if exc.errno == errno.EISDIR:
        return f"{path} is a folder; choose a file name."
    return f"Writing {path.name} failed ({exc.strerror or exc}); choose another location."


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path (same folder and extension) that becomes `path` on success."""
    path = Path(path)
    if path.is_dir():
        raise ExportError(f"{path} is a folder; choose a file name.")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    except OSError as exc:
        raise ExportError(describe_os_error(exc, path)) from None
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp creates 0600; a finished export should get the usual umask-based mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as exc:
        raise ExportError(describe_os_error(exc, path)) from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp_path)`, then rename it to `path`; clean up on any failure."""
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
