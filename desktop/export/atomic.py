"""Atomic file output: write to a temporary name beside the target, rename at the end.

A failed, cancelled or interrupted export never leaves a partial file and never
overwrites a good one:

* the temporary file gets a random name (.NAME.PID.RANDOM.partial.EXT), is created
  O_EXCL|O_NOFOLLOW, locked while written, and written through its descriptor, never
  reopened by name; an encoder that must write by name (ffmpeg) writes in a private
  0700 folder made beside the target; no link the export did not create is followed;
* every byte goes through `write_all`, which checks each `os.write` (a short write or
  ENOSPC becomes one sentence); external encoders are judged by their exit status;
* the temporary file is flushed and fsynced before the rename, and the folder after it;
  the rename happens only if the folder is still where it was and the name still holds
  the export's own file; a second export to a path being written is refused;
* the target keeps its mode; a symlink is written through to its target; a target that
  is not a regular file (fifo, device, folder) or has other hard links is refused;
* SIGINT/SIGTERM remove the temporary files and child encoders, print one line and exit
  130/143; after a kill -9, the next export to the same path removes the leftovers
  (temporary names carry the writer's PID and live writers hold a lock, so only dead
  writers' files are removed).

OS errors become one-sentence `ExportError`s that say what to do.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TEMP_TAG = "partial"  # temporary names: .NAME.PID.RANDOM.partial.EXT


class ExportError(RuntimeError):
    """A user-facing export failure; str() is one complete sentence."""


class ExportCancelled(ExportError):
    """The user cancelled; nothing was written."""

    def __init__(self) -> None:
        super().__init__("The export was cancelled; no file was written.")


def _folder(path: Path) -> Path:
    # Name the real folder: "." in a message tells the user nothing, and a link's name
    # says nothing of the (perhaps missing) folder it points to.
    folder = Path(os.path.abspath(path)).parent
    return Path(os.path.realpath(folder)) if folder.is_symlink() else folder


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
_live_temps: set[TempFile] = set()
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
            tmp.remove()
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
def _name_error(exc: OSError, path: Path) -> ExportError:
    if exc.errno == errno.ENAMETOOLONG:
        size = len(os.fsencode(path.name))
        return ExportError(
            f"The file name {path.name[:32]}… is {size} bytes, longer than this file system "
            "allows (255); choose a shorter name."
        )
    return ExportError(describe_os_error(exc, path))


def resolve_target(path: str | Path) -> Path:
    """The file an export to `path` really writes: symlinks followed, non-files refused."""
    path = Path(path)
    try:
        real = Path(os.path.realpath(path)) if path.is_symlink() else path
        st = os.stat(real)
    except FileNotFoundError:
        return real
    except OSError as exc:
        raise _name_error(exc, path) from None
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


NAME_KEPT = 160  # bytes of the target's name in a temporary name (which must fit 255)


def temp_prefix(target: Path, pid: int | None = None) -> str:
    """The start of every temporary name of process `pid` (default: this one) for
    `target`: .NAME.PID. (NAME cut to NAME_KEPT bytes); a random part and
    .partial.EXT follow."""
    pid = os.getpid() if pid is None else pid
    name = os.fsencode(target.name)[:NAME_KEPT].decode("utf-8", "ignore")
    return f".{name}.{pid}."


def temp_ending(target: Path) -> str:
    return f".{TEMP_TAG}{target.suffix}"


def _temp_pid(target: Path, name: str) -> int | None:
    """The writer's PID in a temporary name of `target`, None if `name` is not one."""
    prefix, ending = temp_prefix(target, 0)[:-2], temp_ending(target)
    if not name.startswith(prefix) or not (name.endswith(ending) or name.endswith(".d")):
        return None
    pid_text = name[len(prefix) :].split(".", 1)[0]
    return int(pid_text) if pid_text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _locked(name: str, dir_fd: int) -> bool:
    """Whether a live writer holds its lock on the temporary file `name` (never follows a
    link; a file this user cannot open counts as held)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False
    finally:
        os.close(fd)


def _remove(name: str, dir_fd: int) -> None:
    """Remove a temporary file or private folder by name in `dir_fd`, never following links."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _other_writers(target: Path, dir_fd: int) -> tuple[list[str], int | None]:
    """Remove dead writers' temporary files for `target`; the live one's PID, if any."""
    removed, live = [], None
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return removed, live
    for name in names:
        pid = _temp_pid(target, name)
        if pid is None or pid == os.getpid():
            continue
        if name.endswith(".d"):  # a private encoder folder: its writer's file says if it lives
            if not _alive(pid):
                _remove(name, dir_fd)
                removed.append(name)
            continue
        if _alive(pid) and _locked(name, dir_fd):
            live = pid
            continue
        _remove(name, dir_fd)
        removed.append(name)
    return removed, live


def clear_stale_temps(target: Path) -> list[Path]:
    """Remove temporary files of earlier exports to `target` whose writer has died."""
    folder = target.parent if str(target.parent) else Path(".")
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return []
    try:
        return [target.with_name(n) for n in _other_writers(target, dir_fd)[0]]
    finally:
        os.close(dir_fd)


def _new_mode(target: Path) -> tuple[int, int | None, int | None]:
    try:
        st = os.stat(target)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask, None, None
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


class TempFile:
    """An export's temporary file: created O_EXCL with a random name beside the target,
    locked while it is written, written through `fd` (never reopened by name)."""

    def __init__(self, target: Path, dir_fd: int) -> None:
        self.target, self.dir_fd = target, dir_fd
        self.finished: str | None = None  # a file in `private_folder()` to install instead
        self._folder: str | None = None
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(100):
            name = temp_prefix(target) + secrets.token_hex(4) + temp_ending(target)
            try:
                self.fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name")
        self.name = name
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        _live_temps.add(self)

    @property
    def path(self) -> Path:
        return self.target.with_name(self.name)

    def private_folder(self) -> Path:
        """A folder only this user can enter (0700, made here), for an encoder that writes
        by name: nobody else can plant or swap a file inside it."""
        if self._folder is None:
            name = self.name[: -len(temp_ending(self.target))] + ".d"
            os.mkdir(name, 0o700, dir_fd=self.dir_fd)
            self._folder = name
        return self.target.with_name(self._folder)

    def _is_ours(self, name: str, fd: int) -> bool:
        try:
            st = os.lstat(name, dir_fd=self.dir_fd)
        except OSError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def install(self, mode: int, uid: int | None, gid: int | None) -> None:
        """fsync, give the target's mode, rename over the target, fsync the folder."""
        fd, name = self.fd, self.name
        if self.finished is not None:  # the encoder's file, in our private folder
            name = f"{self._folder}/{self.finished}"
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self.dir_fd)
        try:
            os.fsync(fd)
            os.fchmod(fd, mode)
            if uid is not None and os.geteuid() == 0:
                os.fchown(fd, uid, gid)  # root keeps the owner a user's file had
            if not self._is_ours(name, fd):
                raise ExportError(
                    f"The temporary file for {self.target.name} was replaced by someone else "
                    "during the export; nothing was written, so export again to a folder "
                    "only you can write to."
                )
            os.replace(name, self.target.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        finally:
            if fd != self.fd:
                os.close(fd)
        try:
            os.fsync(self.dir_fd)
        except OSError:
            pass  # the rename happened; some file systems cannot fsync a folder

    def remove(self) -> None:
        """Remove what is still ours (never a file someone put in its place) and close."""
        _live_temps.discard(self)
        if self.fd >= 0:
            if self._is_ours(self.name, self.fd):
                _remove(self.name, self.dir_fd)
            os.close(self.fd)
            self.fd = -1
        if self._folder is not None:
            _remove(self._folder, self.dir_fd)
            self._folder = None


def _same_folder(folder: Path, dir_fd: int) -> bool:
    try:
        st = os.stat(folder)
    except OSError:
        return False
    mine = os.fstat(dir_fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[TempFile]:
    """Yield a TempFile (same folder and extension) that becomes `path` on success.

    The writer inside writes through its descriptor (`write_all(tmp.fd, ...)`), or, for
    an encoder that needs a file name, into `tmp.private_folder()` naming the result in
    `tmp.finished`; the file is fsynced, given the target's mode and renamed over the
    target at the end, if the folder is still where it was.
    """
    path = Path(path)
    target = resolve_target(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ExportError(describe_os_error(exc, path)) from None
    try:
        with clean_interrupts():
            try:
                tmp = TempFile(target, dir_fd)
            except OSError as exc:
                raise _name_error(exc, path) from None
            try:
                _stale, live = _other_writers(target, dir_fd)
                if live is not None:
                    raise ExportError(
                        f"Another export (process {live}) is writing {path.name} now; wait for "
                        "it to finish or choose another name."
                    )
                yield tmp
                mode, uid, gid = _new_mode(target)
                if not _same_folder(folder, dir_fd):
                    raise ExportError(
                        f"The folder {_folder(path)} was moved or replaced during the export; "
                        "nothing was written, so export again."
                    )
                try:
                    tmp.install(mode, uid, gid)
                except OSError as exc:
                    raise ExportError(describe_os_error(exc, path, replacing=True)) from None
            except OSError as exc:
                raise ExportError(describe_os_error(exc, path)) from None
            finally:
                tmp.remove()
    finally:
        os.close(dir_fd)


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
    """A write-only file object over `write_all` on a copy of `fd`, for encoders that
    want .write()."""

    def __init__(self, fd: int) -> None:
        self.fd = os.dup(fd)

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
    with atomic_path(path) as tmp:
        write_all(tmp.fd, data)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))
