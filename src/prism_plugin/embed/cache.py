"""The content-addressed embedding cache.

An entry is keyed by the adapter fingerprint (architecture, weights, pooling,
preprocessing, normalisation), the dataset fingerprint and the split. Layout::

    <cache>/embeddings/<key[:2]>/<key>/
        shards/00000.features.npy ...   while extracting (each written atomically)
        features.npy  labels.npy        once complete
        manifest.json                   written last: the entry exists iff it does

The manifest records shape, dtype, BLAKE2 checksums and provenance. Loading
re-checks all of them; a corrupt, partial or mismatched entry is reported,
removed and recomputed, never silently used. A file lock serialises writers of
one entry, so two processes never extract the same shard twice.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from prism_plugin.errors import PrismError
from prism_plugin.paths import cache_root
from prism_plugin.results import atomic_write_text

FORMAT_VERSION = 1


def file_checksum(path: Path) -> str:
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.{time.time_ns()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
            fh.flush()
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def entry_key(adapter_fingerprint: str, dataset_fingerprint: str, split: str) -> str:
    payload = json.dumps({"adapter": adapter_fingerprint, "dataset": dataset_fingerprint, "split": split,
                          "format": FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class CacheEntry:
    root: Path
    key: str

    @property
    def dir(self) -> Path:
        return self.root / "embeddings" / self.key[:2] / self.key

    @property
    def manifest_path(self) -> Path:
        return self.dir / "manifest.json"

    @property
    def shard_dir(self) -> Path:
        return self.dir / "shards"

    def lock(self) -> FileLock:
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.dir) + ".lock")

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def manifest(self) -> dict[str, Any]:
        try:
            return json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise PrismError(f"cache entry {self.dir}: manifest unreadable ({exc})") from None

    def load(self, verify: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
        """Memory-mapped features and labels, or ``None`` (with a warning) when the entry is bad."""
        if not self.exists():
            return None
        try:
            m = self.manifest()
            fpath, lpath = self.dir / "features.npy", self.dir / "labels.npy"
            if verify:
                for path, field in ((fpath, "features_checksum"), (lpath, "labels_checksum")):
                    if file_checksum(path) != m[field]:
                        raise PrismError(f"{path.name} checksum mismatch")
            X = np.load(fpath, mmap_mode="r", allow_pickle=False)
            y = np.load(lpath, allow_pickle=False)
            if list(X.shape) != [m["n"], m["dim"]] or str(X.dtype) != m["dtype"] or y.shape != (m["n"],):
                raise PrismError(f"shape/dtype {X.shape} {X.dtype} differ from the manifest")
            return X, y
        except (PrismError, OSError, ValueError, KeyError) as exc:
            warnings.warn(f"cache entry {self.key[:12]} is corrupt ({exc}); recomputing it", stacklevel=2)
            self.remove()
            return None

    def remove(self) -> None:
        if self.manifest_path.exists():
            self.manifest_path.unlink(missing_ok=True)  # invalidate first, then delete
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- shards -------------------------------------------------------------
    def shard_paths(self, index: int) -> tuple[Path, Path]:
        return (self.shard_dir / f"{index:05d}.features.npy", self.shard_dir / f"{index:05d}.labels.npy")

    def shard_done(self, index: int, expected_rows: int) -> bool:
        fpath, lpath = self.shard_paths(index)
        if not (fpath.exists() and lpath.exists()):
            return False
        try:
            X = np.load(fpath, mmap_mode="r", allow_pickle=False)
            y = np.load(lpath, allow_pickle=False)
        except (OSError, ValueError):
            return False
        return X.shape[0] == expected_rows and y.shape[0] == expected_rows

    def write_shard(self, index: int, features: np.ndarray, labels: np.ndarray) -> None:
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        fpath, lpath = self.shard_paths(index)
        save_npy_atomic(lpath, labels.astype(np.int64))
        save_npy_atomic(fpath, features.astype(np.float32))

    def finalize(self, n_shards: int, dim: int, provenance: dict[str, Any]) -> None:
        """Concatenate shards into features.npy (streamed) and write the manifest last."""
        total = 0
        for i in range(n_shards):
            total += np.load(self.shard_paths(i)[1], allow_pickle=False).shape[0]
        ftmp = self.dir / ".features.npy.tmp"
        out = np.lib.format.open_memmap(ftmp, mode="w+", dtype=np.float32, shape=(total, dim))
        labels = np.empty(total, dtype=np.int64)
        pos = 0
        for i in range(n_shards):
            fpath, lpath = self.shard_paths(i)
            X = np.load(fpath, mmap_mode="r", allow_pickle=False)
            out[pos:pos + X.shape[0]] = X
            labels[pos:pos + X.shape[0]] = np.load(lpath, allow_pickle=False)
            pos += X.shape[0]
        out.flush()
        del out
        ftmp.replace(self.dir / "features.npy")
        save_npy_atomic(self.dir / "labels.npy", labels)
        manifest = {
            "key": self.key, "n": total, "dim": dim, "dtype": "float32", "format": FORMAT_VERSION,
            "features_checksum": file_checksum(self.dir / "features.npy"),
            "labels_checksum": file_checksum(self.dir / "labels.npy"),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "provenance": provenance,
        }
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2))
        shutil.rmtree(self.shard_dir, ignore_errors=True)


class EmbeddingCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else cache_root()

    def entry(self, adapter_fingerprint: str, dataset_fingerprint: str, split: str) -> CacheEntry:
        return CacheEntry(self.root, entry_key(adapter_fingerprint, dataset_fingerprint, split))

    def entries(self) -> list[CacheEntry]:
        base = self.root / "embeddings"
        if not base.is_dir():
            return []
        return [CacheEntry(self.root, d.name) for d in sorted(base.glob("*/*")) if d.is_dir()]
