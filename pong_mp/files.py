"""Safe file I/O: atomic, durable writes, and one clear error for any OSError.

A write goes to a temp file named after its writer's pid, is fsynced, renamed into place and
its directory fsynced, so a reader sees the old file or the new one, never half. Every OSError
becomes a `FileError` that names the file and the cause, in one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO


class FileError(RuntimeError):
    """A file could not be read or written (a full disk, no permission, ...); the message
    names the file and the cause, `errno` the OSError's code where one caused it."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        """The error `message`, from an OSError of code `errno`."""
        super().__init__(message)
        self.errno = errno


DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
"""OSError codes of a disk that refused a write: the machine's state, not bad input."""


def file_error(path: Path, action: str, exc: OSError) -> FileError:
    """The FileError for an OSError raised while `action`-ing `path`."""
    cause = exc.strerror or str(exc) or type(exc).__name__
    return FileError(f"cannot {action} {path}: {cause}", exc.errno)


def path_too_long(exc: OSError) -> FileError:
    """The FileError for a path the system refused for its length (ENAMETOOLONG), shortened."""
    name = str(exc.filename)
    shown = name if len(name) <= 80 else f"{name[:40]}...{name[-30:]}"
    return FileError(f"{shown}: path too long for the file system ({len(name)} characters)",
                     exc.errno)  # fmt: skip


def on_disk(path: Path) -> bool:
    """Whether something is at `path`, a link that leads nowhere or in a loop included (it is
    named as it is read, not taken for a file never written). A path too long raises, as for
    Path.exists."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a loop on the way to it: nothing there to name
            return False
        raise
    return True


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists in this pid namespace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True


@contextlib.contextmanager
def file_io(path: Path, action: str) -> Iterator[None]:
    """Turn an OSError inside the block into a FileError naming `path`."""
    try:
        yield
    except OSError as exc:
        raise file_error(path, action, exc) from None


MAX_READ_BYTES = 2**30
"""The most bytes of a file pong-mp reads whole (a config, a metrics log, packed or not):
a run's metrics.jsonl grows about 1 kB an update."""


def read_file(path: Path) -> bytes:
    """The bytes of the regular file `path`. Anything else is an OSError: a FIFO would block
    the read until a writer comes, a device may never end, and a stop signal does not
    interrupt a read (it is only noted)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's open would block too
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO or a device)", str(path))
        size = os.fstat(fd).st_size
        if size > MAX_READ_BYTES:  # read whole, it would take the memory first
            raise OSError(errno.EFBIG, f"{size:,} bytes, more than pong-mp writes", str(path))
        return fh.read()


def through_link(path: Path) -> Path:
    """What a write to `path` replaces: a symlink's target (written through, as `cp` does;
    a rename would replace the link itself), else `path`. FileError for a loop of links."""
    if not os.path.islink(path):
        return Path(path)
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:  # a link to a file still to be made, as `cp` writes it
        return Path(os.path.realpath(path))
    except OSError as exc:
        raise file_error(Path(path), "write", exc) from None


def write_atomic(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write `path` (through a symlink) by `write(file)` atomically and durably: a reader sees
    the old file or the new, never half; on failure no temp file is left. Raises FileError."""
    path = through_link(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the pid marks the writer
    with file_io(path, "write"):
        try:
            with open(tmp, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
    # The rename made durable; not every platform lets a directory be opened.
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """`write_atomic` for a text file (UTF-8)."""
    write_atomic(path, lambda fh: fh.write(text.encode()))


def check_writable(path: Path, wanted: str) -> None:
    """Raise FileError unless `path` can be written as a new or replaced file (`wanted` names
    what it should be, e.g. "a .png file"): checked before any work. A link is written
    through only to a regular file of its own suffix: not onto a FIFO or a device (which a
    rename would replace), nor a run's checkpoint.npz behind a link named x.png."""
    named, path = Path(path), through_link(path)
    if path.is_dir():
        raise FileError(f"{path} is a directory; name {wanted}")
    if path.exists() and not path.is_file():
        raise FileError(f"{path} is not a regular file (a FIFO or a device); name {wanted}")
    if path.suffix.lower() != named.suffix.lower():
        raise FileError(f"{named} leads to {path}, which is not {wanted}: refusing to write it")
    if not path.parent.is_dir():
        raise FileError(f"{path}: no directory {path.parent}")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        read_only = os.statvfs(path.parent).f_flag & os.ST_RDONLY
        why = "read-only file system" if read_only else "permission denied"
        raise FileError(f"cannot write {path}: {why}")
