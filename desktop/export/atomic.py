"""Atomic file output: write to a temporary name beside the target, rename at the end.

A failed, cancelled or interrupted export never leaves a partial file and never
overwrites a good one:

* every byte goes through `write_all`, which checks each `os.write` (a short write or
  ENOSPC becomes one sentence); external encoders are judged by their exit status;
* the temporary file is flushed and fsynced before the rename, and the folder after it;
* the target keeps its mode; a symlink is written through to its target; a target that
  is not a regular file (fifo, device, folder) or has other hard links is refused;
* SIGINT/SIGTERM remove the temporary files and child encoders, print one line and exit
  130/143; after a kill -9, the next export to the same path removes the leftovers
  (temporary names carry the writer's PID, so only dead writers' files are removed).

OS errors become one-sentence `ExportError`s that say what to do.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

TEMP_TAG = "partial"  # temporary names: .NAME.PID.partial.EXT (the encoder sees EXT)


class ExportError(RuntimeError):
    """A user-facing export failure; str() is one complete sentence."""


class ExportCancelled(ExportError):
    """The user cancelled; nothing was written."""

    def __init__(self) -> None:
        super().__init__("The export was cancelled; no file was written.")


def _folder(path: Path) -> Path:
    # Name the real folder: "." in a message tells the user nothing.
    return Path(os.path.abspath(path)).parent


def _file_in_the_way(folder: Path) -> Path | None:
    """The nearest existing ancestor of `folder` if it is not a folder (ok.png/s.png)."""
    for p in (folder, *folder.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def describe_os_error(exc: OSError, path: Path, *, replacing: bool = False) -> str:
    """One sentence naming the problem with `path` and what to do about it."""
    folder = _folder(path)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"The disk holding {folder} is full; free some space or choose another folder."
    if exc.errno == errno.EFBIG:
        return f"{path.name} grew past the largest file this system allows; choose a smaller size."
    if replacing and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.EBUSY):
        return (
            f"{path} cannot be replaced ({exc.strerror}); it may be read-only or immutable, "
            "so choose another name."
        )
    blocking = _file_in_the_way(folder)
    if blocking is not None:
        return f"{blocking} is a file, not a folder; choose another folder."
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{folder} cannot be written to; choose a folder you can write to."
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        if folder.is_dir():
            return f"{folder} cannot be written to; choose a folder you can write to."
        return f"The folder {folder} does not exist; create it or choose another folder."
    if exc.errno == errno.EISDIR:
        return f"{path} is a folder; choose a file name."
    return f"Writing {path.name} failed ({exc.strerror or exc}); choose another location."


# ---- interrupts: remove what is in flight, say so in one line, exit ------------------
_live_temps: set[Path] = set()
_live_children: set[subprocess.Popen] = set()
_handler_depth = 0
_saved_handlers: dict[int, object] = {}
_lock = threading.Lock()


def _on_signal(signum: int, _frame) -> None:
    for child in list(_live_children):
        try:
            child.kill()
        except OSError:
            pass
    for tmp in list(_live_temps):
        try:
            tmp.unlink()
        except OSError:
            pass
    name = "interrupted" if signum == signal.SIGINT else "terminated"
    try:
        os.write(2, f"flash-explorer: {name}; no file was written or replaced.\n".encode())
    except OSError:
        pass
    # os._exit: unwinding through Qt from a signal handler is what segfaulted (defect 9).
    os._exit(128 + signum)


@contextmanager
def clean_interrupts() -> Iterator[None]:
    """While inside, SIGINT/SIGTERM clean up temporary files and exit 130/143 with one line.

    Re-entrant; does nothing outside the main thread (Python only signals the main one).
    """
    global _handler_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _lock:
        if _handler_depth == 0:
            for sig in (signal.SIGINT, signal.SIGTERM):
                _saved_handlers[sig] = signal.signal(sig, _on_signal)
        _handler_depth += 1
    try:
        yield
    finally:
        with _lock:
            _handler_depth -= 1
            if _handler_depth == 0:
                for sig, old in _saved_handlers.items():
                    signal.signal(sig, old)
                _saved_handlers.clear()


def track_child(child: subprocess.Popen | None) -> None:
    """Register (or with None, nothing) an encoder process to kill on an interrupt."""
    if child is not None:
        _live_children.add(child)


def untrack_child(child: subprocess.Popen) -> None:
    _live_children.discard(child)


# ---- the target ----------------------------------------------------------------------
def resolve_target(path: str | Path) -> Path:
    """The file an export to `path` really writes: symlinks followed, non-files refused."""
    path = Path(path)
    real = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real
    except OSError as exc:
        raise ExportError(describe_os_error(exc, path)) from None
    if stat.S_ISDIR(st.st_mode):
        raise ExportError(f"{path} is a folder; choose a file name.")
    if not stat.S_ISREG(st.st_mode):
        raise ExportError(
            f"{path} is not a regular file (it is a fifo, socket or device); choose a file name."
        )
    if st.st_nlink > 1:
        raise ExportError(
            f"{path} has {st.st_nlink - 1} other hard link(s) that replacing it would split; "
            "choose another name or remove the other links."
        )
    return real


def temp_path(target: Path, pid: int | None = None) -> Path:
    """The temporary name for `target` used by process `pid` (default: this one)."""
    pid = os.getpid() if pid is None else pid
    return target.with_name(f".{target.name}.{pid}.{TEMP_TAG}{target.suffix}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_stale_temps(target: Path) -> list[Path]:
    """Remove temporary files of earlier exports to `target` whose writer has died."""
    removed = []
    prefix, ending = f".{target.name}.", f".{TEMP_TAG}{target.suffix}"
    try:
        names = os.listdir(target.parent if str(target.parent) else ".")
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(prefix) and name.endswith(ending)):
            continue
        pid_text = name[len(prefix) : len(name) - len(ending)]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        stale = target.with_name(name)
        try:
            stale.unlink()
            removed.append(stale)
        except OSError:
            pass
    return removed


def _fsync_path(path: Path, *, folder: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if folder else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _new_mode(target: Path) -> tuple[int, int | None, int | None]:
    try:
        st = os.stat(target)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask, None, None
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path (same folder and extension) that becomes `path` on success.

    The writer inside may create the file itself (an encoder) or use `write_all`; the
    file is fsynced, given the target's mode, and renamed over the target at the end.
    """
    path = Path(path)
    target = resolve_target(path)
    clear_stale_temps(target)
    tmp = temp_path(target)
    mode, uid, gid = _new_mode(target)
    with clean_interrupts():
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise ExportError(describe_os_error(exc, path)) from None
        os.close(fd)
        _live_temps.add(tmp)
        try:
            yield tmp
            try:
                _fsync_path(tmp)
                os.chmod(tmp, mode)
                if uid is not None and os.geteuid() == 0:
                    os.chown(tmp, uid, gid)  # root keeps the owner a user's file had
            except OSError as exc:
                raise ExportError(describe_os_error(exc, path)) from None
            try:
                os.replace(tmp, target)
            except OSError as exc:
                raise ExportError(describe_os_error(exc, path, replacing=True)) from None
            try:
                _fsync_path(target.parent if str(target.parent) else Path("."), folder=True)
            except OSError:
                pass  # the rename happened; some file systems cannot fsync a folder
        except OSError as exc:
            raise ExportError(describe_os_error(exc, path)) from None
        finally:
            _live_temps.discard(tmp)
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass


def _os_write(fd: int, data: memoryview) -> int:
    # The lowest write layer: the fault tests replace this to inject ENOSPC mid-file.
    return os.write(fd, data)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of `data` to `fd`, retrying short writes; OSError on failure."""
    view = memoryview(data).cast("B")
    while view:
        written = _os_write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "the write made no progress")
        view = view[written:]


class ChunkFile:
    """A write-only file object over `write_all`, for encoders that want .write()."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_TRUNC)

    def write(self, data) -> int:
        write_all(self.fd, data)
        return len(data)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> ChunkFile:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically (every write checked, fsynced, mode kept)."""
    with atomic_path(path) as tmp, ChunkFile(tmp) as f:
        f.write(data)
    return Path(path)


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp_path)`, then rename it to `path`; clean up on any failure."""
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))
