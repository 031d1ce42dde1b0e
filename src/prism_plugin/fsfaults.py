"""File-system faults as one line: the path, what went wrong, and what to do.

A full disk, a read-only or unwritable folder, a quota, a file-size limit or a name
too long end every write the same way: ``cannot write <path>: <reason>; <fix>``
(:class:`FileSystemError`, a :class:`~prism_plugin.errors.PrismError`, so the CLI
prints it as ``prism-run: error: ...`` with exit status 2).

* :func:`check_free_space` runs before a large write (the cache's merged feature
  array, a shard, the demo tiles): it refuses at once, naming the folder, the bytes
  needed and free, instead of failing (or, through a memory map, dying of SIGBUS)
  half-way.
* :func:`naming` wraps a write so that an ``OSError`` the OS raised without a file
  name (``write(2)`` on an open file reports ENOSPC with none) carries the path of
  the file being written, not of its temporary sibling.
* :func:`describe` turns any ``OSError`` into the one line; ``prism-run`` applies it
  to every ``OSError`` that reaches it, and the plugin host to a plugin's write that
  failed (the disk's fault, not the plugin's).
"""

from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from prism_plugin.errors import PrismError

#: errnos that are the file system's fault (space, permissions, limits, names), not a program's bug
FS_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EFBIG", "ENAMETOOLONG", "EISDIR", "ENOTDIR",
    "EEXIST", "ENOENT", "EMFILE", "ENFILE", "EIO", "ELOOP", "ETXTBSY", "EXDEV") if hasattr(errno, name))
#: errnos that a write hits when the storage, not the program, is the problem (the plugin host's test)
STORAGE_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EFBIG", "ENAMETOOLONG", "EIO") if hasattr(errno, name))

#: free space kept in reserve beyond what a write needs (metadata, the manifest, other files)
RESERVE_BYTES = 1 << 20

WHERE_FIX = "write elsewhere (--output DIR for results, --cache-dir DIR or $PRISM_CACHE_DIR for the cache)"


class FileSystemError(PrismError):
    """A write failed because of the file system; the message names the path and the fix."""

    def __init__(self, message: str, path: str | os.PathLike | None = None, errno_: int | None = None):
        super().__init__(message)
        self.path = None if path is None else str(path)
        self.errno = errno_


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


#: errno -> the reason in words (the system's own text for the rest)
REASONS = {
    errno.ENOSPC: "no space left on the device",
    getattr(errno, "EDQUOT", -1): "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EFBIG: "file too large (a file-size limit, e.g. `ulimit -f`, or the file system's maximum)",
    errno.ENAMETOOLONG: "file name too long",
    errno.EISDIR: "a folder is in the way of a file",
    errno.ENOTDIR: "a file is in the way of a folder on that path",
    errno.EEXIST: "something already exists in the way",
    errno.ENOENT: "no such file or folder (was it removed while running?)",
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files",
}


def _reason(exc: OSError) -> str:
    return REASONS.get(exc.errno) or exc.strerror or type(exc).__name__


def fix_for(exc: OSError, elsewhere: str = WHERE_FIX) -> str:
    """What to do about ``exc``; ``elsewhere`` names the option that moves the write (e.g. --cache-dir)."""
    code = exc.errno
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", -1), errno.EFBIG):
        return f"free space there or {elsewhere}"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"make the folder writable or {elsewhere}"
    if code == errno.ENAMETOOLONG:
        return "use shorter task, group or model names, or a shorter --output / --cache-dir path"
    if code in (errno.EISDIR, errno.ENOTDIR, errno.EEXIST):
        return f"move the file or folder in the way aside, or {elsewhere}"
    if code in (errno.EMFILE, errno.ENFILE):
        return "raise the open-file limit (`ulimit -n`) or use fewer --jobs / --num-workers"
    return f"check the disk and the folder, or {elsewhere}"


def path_of(exc: OSError) -> str | None:
    name = exc.filename if exc.filename is not None else None
    return None if name is None else os.fsdecode(name)


def describe(exc: OSError, *, path: str | os.PathLike | None = None, action: str = "write",
             fix: str | None = None, elsewhere: str = WHERE_FIX) -> str:
    """``cannot write <path>: <reason>; <fix>`` for ``exc`` (``path`` when the error names none)."""
    where = path_of(exc) or (None if path is None else os.fspath(path))
    target = where if where else "a file (the system did not say which)"
    if action == "write" and exc.errno in (errno.ENOENT, errno.ELOOP):
        action = "access"
    text = f"cannot {action} {target}: {_reason(exc)}"
    if exc.filename2 is not None and os.fsdecode(exc.filename2) != where and exc.errno in (errno.EXDEV, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
        text += f" (to {os.fsdecode(exc.filename2)})"
    return f"{text}; {fix or fix_for(exc, elsewhere)}"


def as_error(exc: OSError, *, path: str | os.PathLike | None = None, action: str = "write",
             fix: str | None = None, elsewhere: str = WHERE_FIX) -> FileSystemError:
    """:func:`describe` as a :class:`FileSystemError` (what ``prism-run`` prints with exit status 2)."""
    return FileSystemError(describe(exc, path=path, action=action, fix=fix, elsewhere=elsewhere),
                           path_of(exc) or path, exc.errno)


def is_storage_fault(exc: BaseException) -> bool:
    """An ``OSError`` that the storage caused (space, quota, read-only, permissions, size limit)."""
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def is_file_system_fault(exc: BaseException) -> bool:
    """An ``OSError`` about a path (any of :data:`FS_ERRNOS`, or one naming a file): reported as
    ``cannot write <path>: <reason>; <fix>`` rather than as a program's bug."""
    if not isinstance(exc, OSError) or isinstance(exc, (ConnectionError, TimeoutError)):
        return False
    return exc.errno in FS_ERRNOS or exc.filename is not None


@contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """Give an ``OSError`` raised inside the block the file name ``path`` when it has none (or
    names only a temporary sibling ``.<name>.*`` of ``path``)."""
    try:
        yield
    except OSError as exc:
        target = os.fspath(path)
        name = path_of(exc)
        if name is None or os.path.basename(name).startswith(f".{os.path.basename(target)}."):
            exc.filename = target
        raise


def _existing_parent(folder: Path) -> Path:
    folder = Path(folder)
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def free_bytes(folder: str | os.PathLike) -> int | None:
    """Free bytes on the file system of ``folder`` (its nearest existing parent); ``None`` if unknown."""
    try:
        return int(shutil.disk_usage(_existing_parent(Path(folder))).free)
    except OSError:
        return None


def check_free_space(folder: str | os.PathLike, needed: int, *, what: str, fix: str) -> None:
    """Refuse (:class:`FileSystemError`) when ``folder`` has less than ``needed`` bytes (+ a reserve) free.

    ``what`` says what would be written (``"the merged features of cache entry 1a2b..."``),
    ``fix`` what to do (``"free space there or pass --cache-dir DIR on another disk"``).
    """
    free = free_bytes(folder)
    if free is None or needed <= 0:
        return
    if free < needed + RESERVE_BYTES:
        raise FileSystemError(
            f"cannot write {folder}: not enough free space for {what} (needs {human_bytes(needed)}, "
            f"{human_bytes(free)} free); {fix}", folder, errno.ENOSPC)


__all__ = ["FileSystemError", "FS_ERRNOS", "STORAGE_ERRNOS", "as_error", "check_free_space", "describe",
           "fix_for", "free_bytes", "human_bytes", "is_file_system_fault", "is_storage_fault", "naming", "path_of"]
