"""The content-addressed embedding cache.

An entry is keyed by the adapter fingerprint (architecture, weights, pooling, preprocessing, normalisation), the
dataset fingerprint and the split. Layout::

    <cache>/embeddings/<key[:2]>/<key>/
        shards/00000.features.npy ...   while extracting (each written atomically)
        shards/00000.json               per shard, written last: rows, start, checksums
        features.npy  labels.npy        once complete
        manifest.json                   written last: the entry exists iff it does
    <cache>/embeddings/<key[:2]>/<key>.lock   the entry's file lock (never deleted)

The manifest records shape, dtype, BLAKE2 checksums and provenance. Loading re-checks all of them; a corrupt,
partial or mismatched entry is reported, removed and recomputed, never silently used. Shards carry their own
checksums, so an interrupted extraction resumes from the shards that are intact and re-extracts the rest.

Concurrency: one file lock per entry serialises its writers (two processes never extract the same shard twice) and
its removal. Readers take no lock: they only ever see a complete entry (the manifest is renamed into place last) or
none. Removal renames the entry folder away before deleting it, so a reader that raced with ``prism-run cache rm``
sees the entry vanish (and recomputes it) rather than a half-deleted folder; arrays it already memory-mapped stay
valid. Every array is read with ``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from prism_plugin.errors import PrismError, positive_int_env
from prism_plugin.storage import as_error, atomic_write_text, check_free_space, file_digest, naming
from prism_plugin.paths import cache_root

FORMAT_VERSION = 1
SHARD_ENV = "PRISM_SHARD_SIZE"
DEFAULT_SHARD_SIZE = 2048
TRASH = ".trash"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")

# One FileLock object per lock file and process, so that a thread that already
# holds an entry's lock can take it again (FileLock counts re-entries per
# object; two objects on one file would deadlock against each other).
_LOCKS: dict[str, FileLock] = {}
_LOCKS_GUARD = threading.Lock()


def shard_size(default: int = DEFAULT_SHARD_SIZE) -> int:
    """Tiles per extraction shard: ``$PRISM_SHARD_SIZE`` or ``default``.

    Smaller shards lose less work when a run is killed, larger ones write fewer files. The size is recorded with
    every shard; shards written with another size are re-extracted, never mixed.
    """
    return positive_int_env(SHARD_ENV, default, f"expected a positive number of tiles per shard (default "
                            f"{DEFAULT_SHARD_SIZE}); unset it or set e.g. {SHARD_ENV}=512")


def file_checksum(path: Path) -> str:
    """blake2b (20 bytes) of the file: the manifest's ``features_checksum`` / ``labels_checksum`` format."""
    return file_digest(path, digest_size=20)


#: how to move the cache's writes elsewhere (the second half of every cache fault's fix)
CACHE_ELSEWHERE = "pass --cache-dir DIR (or set PRISM_CACHE_DIR) to another folder"
#: what to do when the cache is too full for a write
CACHE_FIX = "free space there, or pass --cache-dir DIR (or set PRISM_CACHE_DIR) to a folder on another disk"


def _cache_fault(exc: OSError, path: Path) -> PrismError:
    """The one line for an ``OSError`` writing ``path`` in the cache (names the file and the fix)."""
    return as_error(exc, path=path, elsewhere=CACHE_ELSEWHERE)


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    """``np.save`` (no pickle) to a temporary name in the same folder, fsync, rename.

    A failed write (full disk, quota, read-only) removes the temporary file and raises one
    :class:`~prism_plugin.errors.PrismError` naming ``path``.
    """
    path = Path(path)
    array = np.asarray(array)
    check_free_space(path.parent, int(array.nbytes), what=f"{path.name} ({array.shape})", fix=CACHE_FIX)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.time_ns()}.tmp")
    try:
        with naming(path):
            with open(tmp, "wb") as fh:
                np.save(fh, array, allow_pickle=False)
                fh.flush()
                os.fsync(fh.fileno())
            tmp.replace(path)
    except OSError as exc:
        raise _cache_fault(exc, path) from None
    finally:
        tmp.unlink(missing_ok=True)


def load_npy(path: Path, mmap: bool = False) -> np.ndarray:
    """Read an ``.npy`` array without ever unpickling (object arrays raise ValueError)."""
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def entry_key(adapter_fingerprint: str, dataset_fingerprint: str, split: str) -> str:
    payload = json.dumps({"adapter": adapter_fingerprint, "dataset": dataset_fingerprint, "split": split,
                          "format": FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed meanwhile
                pass
    return total


class _Vanished(Exception):
    """The entry was removed or replaced by another process while we read it."""


@dataclass
class CacheEntry:
    root: Path
    key: str
    #: the manifest of the last successful :meth:`load` (checksums, provenance)
    last_manifest: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def dir(self) -> Path:
        return self.root / "embeddings" / self.key[:2] / self.key

    @property
    def manifest_path(self) -> Path:
        return self.dir / "manifest.json"

    @property
    def shard_dir(self) -> Path:
        return self.dir / "shards"

    @property
    def lock_path(self) -> Path:
        return Path(str(self.dir) + ".lock")

    def lock(self) -> FileLock:
        """The entry's inter-process lock (re-entrant within one thread)."""
        path = str(self.lock_path)
        try:
            self.dir.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o666))  # what FileLock does, failing here in words
        except OSError as exc:
            raise as_error(exc, path=path, elsewhere=CACHE_ELSEWHERE) from None
        with _LOCKS_GUARD:
            lock = _LOCKS.get(path)
            if lock is None:
                lock = _LOCKS[path] = FileLock(path)
        return lock

    def locked_elsewhere(self) -> bool:
        """True when another process holds the lock (an extraction or removal is under way)."""
        if not self.lock_path.exists():
            return False
        lock = self.lock()
        if lock.is_locked:  # held by this process
            return False
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return True
        lock.release()
        return False

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def manifest(self) -> dict[str, Any]:
        try:
            return json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise PrismError(f"cache entry {self.dir}: manifest unreadable ({exc})") from None

    # -- reading --------------------------------------------------------------
    def _read(self, raw: bytes, verify: bool) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """Arrays of the entry whose manifest bytes are ``raw``; raises on any inconsistency."""
        try:
            m = json.loads(raw)
        except ValueError:
            raise PrismError("manifest.json is not valid JSON") from None
        if not isinstance(m, dict):
            raise PrismError("manifest.json is not a mapping")
        if m.get("key") != self.key or m.get("format") != FORMAT_VERSION:
            raise PrismError(f"manifest describes key {str(m.get('key'))[:12]} format {m.get('format')}")
        fpath, lpath = self.dir / "features.npy", self.dir / "labels.npy"
        try:
            if verify:
                for path, name in ((fpath, "features_checksum"), (lpath, "labels_checksum")):
                    if file_checksum(path) != m[name]:
                        raise PrismError(f"{path.name} checksum mismatch")
            X = load_npy(fpath, mmap=True)
            y = load_npy(lpath)
        except FileNotFoundError:
            if not self.manifest_path.exists():
                raise _Vanished() from None
            raise
        if list(X.shape) != [m["n"], m["dim"]] or str(X.dtype) != m["dtype"] or y.shape != (m["n"],):
            raise PrismError(f"shape/dtype {X.shape} {X.dtype} differ from the manifest")
        if y.dtype.kind not in "iu":
            raise PrismError(f"labels have dtype {y.dtype}")
        return X, y, m

    def _read_manifest_bytes(self) -> bytes | None:
        try:
            return self.manifest_path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def check(self) -> str | None:
        """Re-verify checksums, shape and dtype; ``None`` when intact, else the problem (nothing removed)."""
        raw = self._read_manifest_bytes()
        if raw is None:
            return "incomplete (no manifest)"
        try:
            self._read(raw, verify=True)
        except _Vanished:
            return "removed while being checked"
        except (PrismError, OSError, ValueError, KeyError, TypeError, EOFError) as exc:
            return str(exc) or type(exc).__name__
        return None

    def load(self, verify: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
        """Memory-mapped features and labels, or ``None``.

        ``None`` without a word when the entry does not exist (or another process removed it while we read);
        ``None`` with a warning, after removing the entry, when it is corrupt.
        """
        problem: Exception | None = None
        for _attempt in range(3):
            raw = self._read_manifest_bytes()
            if raw is None:
                return None
            try:
                X, y, m = self._read(raw, verify)
                self.last_manifest = m
                self._tidy_leftover_shards()
                return X, y
            except _Vanished:
                return None
            except (PrismError, OSError, ValueError, KeyError, TypeError, EOFError) as exc:
                problem = exc
            # A concurrent writer may have replaced the entry between our reads:
            # only a manifest that is still the one we checked proves corruption.
            now = self._read_manifest_bytes()
            if now is None:
                return None
            if now == raw:
                break
        warnings.warn(f"cache entry {self.key[:12]} is corrupt ({problem}); recomputing it", stacklevel=2)
        self._discard(raw)
        return None

    def _tidy_leftover_shards(self) -> None:
        """Remove the shard folder of a complete entry. It is left behind when the writer was killed
        between writing the manifest (the last step that matters) and the cleanup. Best effort: skipped
        when another process holds the lock or the cache is read-only (a shared cache)."""
        if not self.shard_dir.is_dir():
            return
        try:
            lock = self.lock()
            lock.acquire(timeout=0)
        except (Timeout, PrismError, OSError):
            return
        try:
            if self.manifest_path.exists():
                self._remove_shards()
        except OSError:
            pass
        finally:
            lock.release()

    def _discard(self, raw: bytes) -> None:
        """Remove the entry if its manifest is still ``raw`` (under the lock)."""
        with self.lock():
            if self._read_manifest_bytes() == raw:
                self.remove()

    # -- removal --------------------------------------------------------------
    def remove(self, timeout: float = -1) -> bool:
        """Delete the entry safely; ``False`` if another process held the lock past ``timeout`` s.

        The manifest goes first (the entry stops existing), then the folder is renamed into ``embeddings/.trash``
        and deleted there, so nobody ever sees a half-deleted entry under its key.
        """
        lock = self.lock()
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            return False
        try:
            self.manifest_path.unlink(missing_ok=True)
            if self.dir.exists():
                trash = self.root / "embeddings" / TRASH
                trash.mkdir(parents=True, exist_ok=True)
                dest = trash / f"{self.key}.{os.getpid()}.{time.time_ns()}"
                try:
                    os.replace(self.dir, dest)
                except OSError:
                    dest = self.dir
                shutil.rmtree(dest, ignore_errors=True)
        finally:
            lock.release()
        return True

    # -- shards -------------------------------------------------------------
    def shard_paths(self, index: int) -> tuple[Path, Path]:
        return (self.shard_dir / f"{index:05d}.features.npy", self.shard_dir / f"{index:05d}.labels.npy")

    def shard_meta_path(self, index: int) -> Path:
        return self.shard_dir / f"{index:05d}.json"

    def shard_record(self, index: int) -> dict[str, Any] | None:
        try:
            meta = json.loads(self.shard_meta_path(index).read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def drop_shard(self, index: int) -> None:
        for p in (self.shard_meta_path(index), *self.shard_paths(index)):
            p.unlink(missing_ok=True)

    def shard_done(self, index: int, expected_rows: int, start: int | None = None) -> bool:
        """Whether shard ``index`` is on disk, complete and intact (its checksums match).

        A shard written for another layout (other ``start`` or size) or whose files do not match their checksums is
        deleted and reported as not done.
        """
        fpath, lpath = self.shard_paths(index)
        meta = self.shard_record(index)
        if meta is None:
            return False  # never finished (killed before its record was written)
        try:
            ok_layout = meta["rows"] == expected_rows and (start is None or meta.get("start") == start)
            if not ok_layout:
                self.drop_shard(index)
                return False
            if (file_checksum(fpath) != meta["features_checksum"]
                    or file_checksum(lpath) != meta["labels_checksum"]):
                raise PrismError("checksum mismatch")
            X = load_npy(fpath, mmap=True)
            y = load_npy(lpath)
            if X.ndim != 2 or X.shape[0] != expected_rows or y.shape != (expected_rows,):
                raise PrismError(f"shape {X.shape}")
        except (PrismError, OSError, ValueError, KeyError, TypeError, EOFError) as exc:
            warnings.warn(f"cache entry {self.key[:12]}: shard {index} is corrupt ({exc}); re-extracting it",
                          stacklevel=2)
            self.drop_shard(index)
            return False
        return True

    def write_shard(self, index: int, features: np.ndarray, labels: np.ndarray, start: int | None = None) -> None:
        """Write one shard's arrays atomically, then its record (rows, start, checksums)."""
        fpath, lpath = self.shard_paths(index)
        try:
            with naming(self.shard_dir):
                self.shard_dir.mkdir(parents=True, exist_ok=True)
            self.shard_meta_path(index).unlink(missing_ok=True)
            save_npy_atomic(lpath, np.asarray(labels).astype(np.int64))
            save_npy_atomic(fpath, np.asarray(features).astype(np.float32))
            meta = {"index": index, "start": start, "rows": int(len(labels)), "dim": int(features.shape[1]),
                    "features_checksum": file_checksum(fpath), "labels_checksum": file_checksum(lpath)}
            with naming(self.shard_meta_path(index)):
                atomic_write_text(self.shard_meta_path(index), json.dumps(meta))
        except OSError as exc:
            raise _cache_fault(exc, self.shard_meta_path(index)) from None

    def shards_on_disk(self) -> list[int]:
        """Indices of shards with a record (finished shards of an interrupted extraction)."""
        if not self.shard_dir.is_dir():
            return []
        out = []
        for p in self.shard_dir.glob("*.json"):
            if p.stem.isdigit():
                out.append(int(p.stem))
        return sorted(out)

    def finalize(self, n_shards: int, dim: int, provenance: dict[str, Any]) -> None:
        """Concatenate shards into features.npy (streamed) and write the manifest last."""
        total = 0
        for i in range(n_shards):
            meta = self.shard_record(i)
            if meta is None:
                raise PrismError(f"cache entry {self.dir}: shard {i} is missing; rerun to extract it")
            total += int(meta["rows"])
        final = self.dir / "features.npy"
        # Ordinary writes, never a memory map: on a full disk a store into a mapped page kills the
        # process with SIGBUS; write(2) fails with ENOSPC, which is reported with the path.
        check_free_space(self.dir, total * dim * 4 + total * 8,
                         what=f"the merged embeddings of cache entry {self.key[:12]} ({total} x {dim} float32)",
                         fix=CACHE_FIX)
        ftmp = self.dir / f".features.npy.{os.getpid()}.tmp"
        try:
            labels = np.empty(total, dtype=np.int64)
            pos = 0
            with naming(final), open(ftmp, "wb") as fh:
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                          "shape": (total, dim)}
                np.lib.format.write_array_header_1_0(fh, header)  # the header np.save / open_memmap write
                for i in range(n_shards):
                    fpath, lpath = self.shard_paths(i)
                    X = load_npy(fpath, mmap=True)
                    if X.ndim != 2 or X.shape[1] != dim:
                        raise PrismError(f"cache entry {self.dir}: shard {i} has shape {X.shape}, expected (*, {dim})")
                    fh.write(np.ascontiguousarray(X, dtype=np.float32).tobytes())
                    labels[pos:pos + X.shape[0]] = load_npy(lpath)
                    pos += X.shape[0]
                if pos != total:
                    raise PrismError(f"cache entry {self.dir}: shards hold {pos} rows, their records {total}; "
                                     "rerun to re-extract them")
                fh.flush()
                os.fsync(fh.fileno())
            ftmp.replace(final)
        except OSError as exc:
            raise _cache_fault(exc, final) from None
        finally:
            ftmp.unlink(missing_ok=True)
        save_npy_atomic(self.dir / "labels.npy", labels)
        manifest = {
            "key": self.key, "n": total, "dim": dim, "dtype": "float32", "format": FORMAT_VERSION,
            "features_checksum": file_checksum(self.dir / "features.npy"),
            "labels_checksum": file_checksum(self.dir / "labels.npy"),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "n_shards": n_shards,
            "provenance": provenance,
        }
        for stale in self.dir.glob(".*.tmp"):  # left by an extraction killed mid-write (we hold the lock)
            stale.unlink(missing_ok=True)
        try:
            with naming(self.manifest_path):
                atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2))
        except OSError as exc:
            raise _cache_fault(exc, self.manifest_path) from None
        self._remove_shards()

    def _remove_shards(self) -> None:
        """Delete the shard folder; tolerant of files vanishing under a concurrent remover."""
        for _ in range(3):
            try:
                entries = list(self.shard_dir.iterdir())
            except FileNotFoundError:
                return
            for path in entries:
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
                except IsADirectoryError:
                    shutil.rmtree(path, ignore_errors=True)
            try:
                self.shard_dir.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # a file appeared meanwhile: list again
                continue

    # -- listing ------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """What ``prism-run cache ls`` shows: state, size, shape and provenance (no checksum work)."""
        out: dict[str, Any] = {"key": self.key, "path": str(self.dir), "size_bytes": _dir_size(self.dir)}
        raw = self._read_manifest_bytes()
        if raw is None:
            out["state"] = "extracting" if self.locked_elsewhere() else "partial"
            out["shards"] = len(self.shards_on_disk())
            try:
                out["modified"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.dir.stat().st_mtime))
            except OSError:
                pass
            return out
        try:
            m = json.loads(raw)
            prov = m.get("provenance") or {}
            adapter = prov.get("adapter") or {}
            out.update({
                "state": "complete", "n": m.get("n"), "dim": m.get("dim"), "created": m.get("created"),
                "task": prov.get("task"), "dataset": prov.get("dataset"), "split": prov.get("split"),
                "adapter": adapter.get("display_name") or adapter.get("name"),
                "adapter_name": adapter.get("name"),
            })
        except (ValueError, AttributeError, TypeError):
            out["state"] = "corrupt manifest"
        return out


class EmbeddingCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else cache_root()
        if self.root.exists() and not self.root.is_dir():
            raise PrismError(f"embedding cache {self.root} is a file, not a folder; "
                             "pass --cache-dir DIR or set PRISM_CACHE_DIR")

    def entry(self, adapter_fingerprint: str, dataset_fingerprint: str, split: str) -> CacheEntry:
        return CacheEntry(self.root, entry_key(adapter_fingerprint, dataset_fingerprint, split))

    def entries(self) -> list[CacheEntry]:
        """Every entry folder (complete or partial), sorted by key."""
        base = self.root / "embeddings"
        if not base.is_dir():
            return []
        out = []
        for d in sorted(base.glob("*/*")):
            if _KEY_RE.match(d.name) and d.parent.name == d.name[:2] and d.is_dir():
                out.append(CacheEntry(self.root, d.name))
        return out

    def find(self, prefix: str) -> list[CacheEntry]:
        prefix = prefix.strip().lower()
        return [e for e in self.entries() if e.key.startswith(prefix)]

    def empty_trash(self) -> None:
        """Delete leftovers of removals that were interrupted."""
        shutil.rmtree(self.root / "embeddings" / TRASH, ignore_errors=True)
