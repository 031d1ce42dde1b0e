"""The ground floor of storage: atomic writes, JSON/CSV text, checksums, file-system faults.

Imports nothing of prism-plugin but :mod:`prism_plugin.errors` (and no numpy or pandas), so any layer, and a
spawned extraction worker, may use it.

* Writes: every file goes to a unique temporary name beside its target, is fsynced and renamed over it
  (:func:`atomic_write_bytes`), so a reader sees the old complete file or the new one; it gets the permissions the
  umask gives, not the temporary file's 0600.
* Checksums: every content digest of a file reads it through :func:`update_from_file`, each caller with the
  algorithm and size its stored format has always used (the embedding cache's manifest: blake2b-20; precomputed
  folders and sources: blake2b-16; reference files, ``runs.csv`` and cells: SHA-256), so stored values never
  change.
* Faults: a full disk, a read-only or unwritable folder, a quota, a file-size limit or a name too long end every
  write the same way: ``cannot write <path>: <reason>; <fix>`` (:class:`FileSystemError`, printed by ``prism-run``
  with exit status 2). :func:`check_free_space` refuses a large write at once; :func:`naming` gives an ``OSError``
  without a file name the path being written.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from prism_plugin.errors import PrismError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd

# --------------------------------------------------------------------------- file-system faults
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
    """Refuse (:class:`FileSystemError`) when ``folder`` has less than ``needed`` bytes plus
    :data:`RESERVE_BYTES` free; the message gives both parts, their sum and what is free (never a need
    that reads as smaller than what is free).

    ``what`` says what would be written (``"the merged features of cache entry 1a2b..."``),
    ``fix`` what to do (``"free space there or pass --cache-dir DIR on another disk"``).
    """
    free = free_bytes(folder)
    if free is None or needed <= 0:
        return
    if free < needed + RESERVE_BYTES:  # the reserve is part of what is needed: the message says so
        total, left = human_bytes(needed + RESERVE_BYTES), human_bytes(free)
        if total == left:  # rounded alike: exact bytes, so the need never reads as what is free
            total, left = f"{needed + RESERVE_BYTES:,} bytes", f"{free:,} bytes"
        raise FileSystemError(
            f"cannot write {folder}: not enough free space for {what} (needs {human_bytes(needed)} plus "
            f"{human_bytes(RESERVE_BYTES)} kept free for the files written beside it, {total} in all; {left} free); "
            f"{fix}", folder, errno.ENOSPC)


# --------------------------------------------------------------------------- checksums
DEFAULT_CHUNK = 1 << 22  # 4 MiB

_MEMO: dict[tuple[str, int, int, int], str] = {}


def update_from_file(h: Any, path: str | os.PathLike, chunk: int = DEFAULT_CHUNK) -> Any:
    """Feed the file's bytes into the hash object ``h`` (anything with ``update``), ``chunk`` bytes at a
    time; returns ``h``."""
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h


def file_digest(path: str | os.PathLike, digest_size: int = 16, chunk: int = DEFAULT_CHUNK) -> str:
    """Hex blake2b (``digest_size`` bytes) of the file's contents."""
    return update_from_file(hashlib.blake2b(digest_size=digest_size), path, chunk).hexdigest()


def memoised_file_digest(path: str | os.PathLike, digest_size: int) -> str:
    """:func:`file_digest`, remembered per (resolved path, size, mtime) for this process.

    For large files hashed repeatedly (model weights): a file rewritten in place gets a new size or
    modification time and is hashed again.
    """
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, int(digest_size))
    if key not in _MEMO:
        _MEMO[key] = file_digest(path, digest_size)
    return _MEMO[key]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- atomic writes
def _fsync_dir(folder: Path) -> None:
    """Make a rename durable (best effort; not every filesystem supports it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask (read from ``/proc`` where it can be, else set and restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def honour_umask(target: int | str | os.PathLike, mode: int = 0o666) -> None:
    """Give a file (descriptor or path) made by :mod:`tempfile` (always 0600, 0700 for a folder)
    the permissions an ordinary ``open`` would: ``mode & ~umask``. Folders: pass ``mode=0o777``.
    Best effort: a file system that refuses ``chmod`` keeps the private mode."""
    wanted = mode & ~current_umask()
    try:
        if isinstance(target, int):
            os.fchmod(target, wanted)
        else:
            os.chmod(target, wanted)
    except (OSError, NotImplementedError):
        pass


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a unique temporary name beside ``path``, fsync, rename over ``path``.

    A reader (or a process killed at any instant) sees the old complete file or the new complete one, never a
    mixture; concurrent writers of the same path each rename a complete file and the last one wins. The file gets
    the permissions the umask gives (``0o666 & ~umask``). An ``OSError`` names ``path`` (not its temporary
    sibling).
    """
    path = Path(path)
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            honour_umask(fd)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
    _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def json_default(obj: Any):
    """numpy scalars, paths, sets and tuples as JSON gives them back (``json.dumps(default=...)``)."""
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _clean(obj: Any):
    """NaN/inf -> None so the JSON is standard."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(_clean(obj), indent=2, default=json_default, sort_keys=False) + "\n"


def csv_text(df: pd.DataFrame, index: bool = False) -> str:
    """The exact text :func:`write_csv` writes (``runs.csv`` bytes are compared and hashed)."""
    return df.to_csv(index=index, lineterminator="\n")


def write_csv(path: Path, df: pd.DataFrame, index: bool = False) -> None:
    atomic_write_text(path, csv_text(df, index))
