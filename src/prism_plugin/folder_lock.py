"""One writer per results folder: an exclusive inter-process lock, as the embedding cache has per entry.

Every command that writes into a folder (the main run: each results folder and each group folder; ``report``;
``audit``, ``diff``, ``findings``, ``sensitivity``, ``geometry``, ``reference`` with their ``--output``) holds
``<folder>/.prism-run.lock`` while it writes. The file holds the holder as JSON (``pid``, ``command``,
``started``, ``host``); the lock itself is the kernel's (``flock``), so:

* a second writer stops at once with one line naming the holder (:class:`FolderBusy`, exit status 2), or, asked
  to (``--wait``), waits until the holder is done;
* a holder that is killed (``kill -9``, a lost node) loses the lock with its process; the next writer finds the
  leftover holder file, says in one line that it takes it over, and goes on;
* the lock is re-entrant within a process (the run writes its report under the lock it already holds);
* on release the lock file is removed, and so is a folder the lock itself created if nothing was written into
  it (a run refused before its first write leaves no empty folder behind).

Readers never lock. A folder that cannot be created, or a lock file that cannot be opened (a read-only place, a
file in the way), is not locked: the command's own write then fails with its own one-line error.

Ground floor: imports only :mod:`prism_plugin.errors` (and, where ``fcntl`` is missing, the ``filelock``
library, whose native lock has the same kernel semantics but keeps no holder record).
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import socket
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from prism_plugin.errors import PrismError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: filelock's native lock, without a holder record
    fcntl = None  # type: ignore[assignment]

#: the lock file in a folder being written (hidden; not part of :data:`prism_plugin.results.LAYOUT`)
LOCK_NAME = ".prism-run.lock"
#: what the busy message tells the user to do
WAIT_HINT = "wait for it, or pass --wait"
_COMMAND: str | None = None
_GUARD = threading.RLock()
_HELD: dict[str, "_Held"] = {}
_SCOPES: list[list[str]] = []


class FolderBusy(PrismError):
    """Another process holds the folder's lock: one line naming it (PID, command, start time)."""

    def __init__(self, folder: str | os.PathLike, holder: dict[str, Any] | None):
        super().__init__(f"{os.fspath(folder)}: another prism-run is writing here ({describe_holder(holder)}); "
                         f"{WAIT_HINT}")
        self.folder, self.holder = Path(folder), holder


def set_command(text: str) -> None:
    """The command line a holder record names (``prism-run`` sets it from its argv)."""
    global _COMMAND
    _COMMAND = text


def command_line() -> str:
    """The command line of this process as the holder record names it."""
    if _COMMAND is not None:
        return _COMMAND
    argv = list(sys.argv) or ["python"]
    return shlex.join([os.path.basename(argv[0]) or "python", *argv[1:]])


def describe_holder(holder: dict[str, Any] | None, *, holding: bool = True) -> str:
    """``PID 1234, `prism-run --task ...`, started 2026-12-02 01:23:45`` (plus the host when it is another;
    ``holding``: the lock is held now, so a holder that has ended left a child process holding it)."""
    if not holder or not isinstance(holder, dict) or "pid" not in holder:
        return "its holder has not recorded itself yet"
    command = str(holder.get("command") or "?")
    if len(command) > 160:
        command = command[:157] + "..."
    text = f"PID {holder.get('pid')}"
    host = holder.get("host")
    if host and host != socket.gethostname():
        text += f" on {host}"
    elif holding and not _alive(holder.get("pid")):
        text += " (ended; a process it started still holds the lock)"
    return f"{text}, `{command}`, started {holder.get('started', '?')}"


def holder(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The holder record in ``folder``'s lock file, or ``None`` (no lock file, or none recorded yet). A record
    whose process has ended is stale: only the kernel lock says whether someone holds the folder now."""
    try:
        with open(os.path.join(os.fspath(folder), LOCK_NAME), "rb") as fh:
            return _parse(fh.read(65536))
    except OSError:
        return None


def held(folder: str | os.PathLike) -> bool:
    """True when this process holds ``folder``'s lock."""
    with _GUARD:
        return _key(folder) in _HELD


# --------------------------------------------------------------------------- the public ways to hold it
@contextmanager
def writing(folder: str | os.PathLike, *, wait: bool = False) -> Iterator[Path]:
    """Hold ``folder``'s lock for the block (re-entrant in one process); :class:`FolderBusy` when another process
    holds it, unless ``wait``."""
    key = acquire(folder, wait=wait)
    try:
        yield Path(folder)
    finally:
        if key is not None:
            _release(key)


@contextmanager
def scope() -> Iterator[None]:
    """The locks :func:`take` takes inside the block are released when it ends (``prism-run`` runs every
    command inside one)."""
    with _GUARD:
        _SCOPES.append([])
    try:
        yield
    finally:
        with _GUARD:
            keys = _SCOPES.pop()
        for key in reversed(keys):
            _release(key)


def take(folders: str | os.PathLike | Iterable[str | os.PathLike], *, wait: bool = False) -> None:
    """Lock each folder (in a fixed order, so two waiting commands cannot deadlock) until the enclosing
    :func:`scope` ends (outside one: until the process exits). A command calls it once it knows where it writes,
    before its first write; all or none: when one is busy the others taken here are released."""
    items = [folders] if isinstance(folders, (str, os.PathLike)) else list(folders)
    ordered = sorted({_key(f): f for f in items}.items())
    taken: list[str] = []
    try:
        for _, folder in ordered:
            key = acquire(folder, wait=wait)
            if key is not None:
                taken.append(key)
    except BaseException:
        for key in reversed(taken):
            _release(key)
        raise
    with _GUARD:
        if _SCOPES:
            _SCOPES[-1].extend(taken)


def acquire(folder: str | os.PathLike, *, wait: bool = False) -> str | None:
    """Take ``folder``'s lock (or count one more hold of this process's); its key for :func:`release`, or
    ``None`` when the folder cannot be locked (it cannot be created or the lock file opened: see above)."""
    key = _key(folder)
    with _GUARD:  # one acquisition at a time in this process: two threads never race for one folder
        hold = _HELD.get(key)
        if hold is not None:
            hold.count += 1
            return key
        hold = _lock(key, folder, wait)
        if hold is None:
            return None
        _HELD[key] = hold
        return key


def release(key: str) -> None:
    """Undo one :func:`acquire` (the key it returned)."""
    _release(key)


# --------------------------------------------------------------------------- the mechanism
@dataclass
class _Held:
    fd: int | None
    path: str
    created: list[str] = field(default_factory=list)  # folders the lock made, outermost first
    fallback: Any = None
    count: int = 1


def _key(folder: str | os.PathLike) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(folder)))


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError, OverflowError):
        return False
    except (PermissionError, OSError):
        return True
    return True


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) and "pid" in value else None


def _read(fd: int, settle: bool = False) -> dict[str, Any] | None:
    """The holder record behind ``fd``; ``settle``: give a holder that has just taken the lock a moment to
    write its record (a busy message names it rather than saying nothing)."""
    record = None
    for _ in range(40 if settle else 1):
        try:
            record = _parse(os.pread(fd, 65536, 0))
        except OSError:
            return None
        if not settle or (record is not None and (record.get("host") != socket.gethostname()
                                                  or _alive(record.get("pid")))):
            return record
        time.sleep(0.025)  # none yet, or the record of an ended holder that its successor is replacing
    return record


def _record() -> bytes:
    return (json.dumps({"pid": os.getpid(), "command": command_line(),
                        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": socket.gethostname()},
                       indent=1) + "\n").encode("utf-8")


def _make_folder(folder: str) -> list[str] | None:
    """Create ``folder`` and its missing parents; the ones made (outermost first), ``None`` when it cannot be."""
    missing, p = [], folder
    while not os.path.isdir(p):
        if os.path.lexists(p):
            return None  # a file (or a broken link) in the way: the command names it
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent
    created: list[str] = []
    for d in reversed(missing):
        try:
            os.mkdir(d)
            created.append(d)
        except FileExistsError:
            if not os.path.isdir(d):
                _remove_folders(created)
                return None
        except OSError:
            _remove_folders(created)
            return None
    return created


def _remove_folders(created: list[str]) -> None:
    for d in reversed(created):  # innermost first; one that holds anything stays, and so do its parents
        try:
            os.rmdir(d)
        except OSError:
            return


def _open(path: str) -> int | None:
    flags = os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(path, os.O_RDWR | flags, 0o666)
    except PermissionError:  # another account's lock file in a shared folder: flock needs no write access
        try:
            return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PrismError(f"{path}: is a link, not prism-run's lock file; remove it") from None
        if isinstance(exc, FileNotFoundError):
            raise
        return None


def _same_file(fd: int, path: str) -> bool:
    """Still the file at ``path`` (a holder removes it on release; a waiter that locked the removed one retries)."""
    try:
        st, own = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _lock(key: str, folder: str | os.PathLike, wait: bool) -> _Held | None:
    path = os.path.join(key, LOCK_NAME)
    if fcntl is None:  # pragma: no cover - not POSIX
        return _lock_fallback(key, folder, path, wait)
    created: list[str] = []
    announced = False
    while True:
        made = _make_folder(key)
        if made is None:
            _remove_folders(created)
            return None
        created += made
        try:
            fd = _open(path)
        except FileNotFoundError:  # the folder was just removed by a releasing holder: make it again
            continue
        if fd is None:
            _remove_folders(created)
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise FolderBusy(folder, _read(fd, settle=True)) from None
                if not announced:
                    announced = True
                    print(f"prism-run: {os.fspath(folder)}: waiting for {describe_holder(_read(fd, settle=True))} "
                          "to finish writing here (--wait)", file=sys.stderr, flush=True)
                fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C / SIGTERM interrupt the wait
            if not _same_file(fd, path):
                os.close(fd)
                continue
            _take_over(fd, folder)
        except BaseException:
            os.close(fd)
            _remove_folders(created)
            raise
        return _Held(fd, path, created)


def _take_over(fd: int, folder: str | os.PathLike) -> None:
    """Write this process's record, saying so when the file still names a holder that has ended."""
    previous = _read(fd)
    if previous is not None and previous.get("pid") != os.getpid():
        left = describe_holder(previous, holding=False)
        warnings.warn(f"{os.fspath(folder)}: taking over the lock left by {left}, which ended without releasing "
                      "it (killed?)", stacklevel=4)
    data = _record()
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except OSError:  # opened read-only (another account's file) or the disk refused: the kernel lock still holds
        pass


def _lock_fallback(key: str, folder, path: str, wait: bool) -> _Held | None:  # pragma: no cover - not POSIX
    from filelock import FileLock, Timeout

    created = _make_folder(key)
    if created is None:
        return None
    lock = FileLock(path, thread_local=False)
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        _remove_folders(created)
        raise FolderBusy(folder, None) from None
    except OSError:
        _remove_folders(created)
        return None
    return _Held(None, path, created, fallback=lock)


def _release(key: str) -> None:
    with _GUARD:
        hold = _HELD.get(key)
        if hold is None:
            return
        hold.count -= 1
        if hold.count > 0:
            return
        del _HELD[key]
        _let_go(hold)


def _let_go(hold: _Held) -> None:
    if hold.fallback is not None:  # pragma: no cover - not POSIX
        hold.fallback.release()
        _remove_folders(hold.created)
        return
    try:
        try:
            os.unlink(hold.path)  # while still holding it: a waiter that locked this file then retries on a new one
        except OSError:
            pass
        _remove_folders(hold.created)  # only where nothing was written
    finally:
        os.close(hold.fd)


def _forget_in_child() -> None:  # pragma: no cover - runs in forked children
    """A forked child (a pool worker) does not hold its parent's locks: close its copies (closing, unlike
    unlocking, leaves the parent's lock in place)."""
    global _GUARD
    _GUARD = threading.RLock()  # a thread of the parent may have held it at the fork
    for hold in list(_HELD.values()):
        if hold.fd is not None:
            try:
                os.close(hold.fd)
            except OSError:
                pass
    _HELD.clear()
    _SCOPES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


__all__ = ["LOCK_NAME", "FolderBusy", "acquire", "command_line", "describe_holder", "held", "holder", "release",
           "scope", "set_command", "take", "writing"]
