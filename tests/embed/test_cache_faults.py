"""Cache writes on a full, size-limited or read-only disk: one line naming the path and the fix,
no temporary file left behind, no memory map that could die of SIGBUS, bytes as np.save writes."""

from __future__ import annotations

import errno
import io
import os
import resource
import signal

import numpy as np
import pytest

from prism_plugin import storage
from prism_plugin.embed import cache as cache_mod
from prism_plugin.embed.cache import CacheEntry
from prism_plugin.errors import PrismError

KEY = "ab" * 32
DIM = 64


def _entry_with_shards(root, n=(300, 200)):
    rng = np.random.default_rng(0)
    entry = CacheEntry(root, KEY)
    X = rng.normal(size=(sum(n), DIM)).astype(np.float32)
    y = rng.integers(0, 3, sum(n))
    start = 0
    for i, rows in enumerate(n):
        entry.write_shard(i, X[start:start + rows], y[start:start + rows], start=start)
        start += rows
    return entry, X, y


def _leftovers(entry):
    return sorted(p.name for p in entry.dir.rglob(".*") if p.is_file())


def test_merged_features_are_the_bytes_np_save_writes(tmp_path):
    entry, X, y = _entry_with_shards(tmp_path)
    entry.finalize(2, DIM, {})
    buf = io.BytesIO()
    np.save(buf, X, allow_pickle=False)
    assert (entry.dir / "features.npy").read_bytes() == buf.getvalue()
    Xl, yl = entry.load()
    np.testing.assert_array_equal(Xl, X)
    np.testing.assert_array_equal(yl, y)
    assert _leftovers(entry) == []


def test_too_little_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    entry, X, _ = _entry_with_shards(tmp_path)
    monkeypatch.setattr(storage, "free_bytes", lambda folder: 4096)
    with pytest.raises(storage.FileSystemError) as info:
        entry.finalize(2, DIM, {})
    msg = str(info.value)
    assert str(entry.dir) in msg and "needs 128.9 KiB" in msg and "4.0 KiB free" in msg
    assert "--cache-dir" in msg and "\n" not in msg
    assert not (entry.dir / "features.npy").exists() and _leftovers(entry) == []
    monkeypatch.undo()  # space freed: the shards are intact and the entry completes
    entry.finalize(2, DIM, {})
    np.testing.assert_array_equal(entry.load()[0], X)


class _FullDisk:
    """A file whose writes fail as write(2) does on a full disk: ENOSPC, no file name."""

    def __init__(self, fh, budget):
        self.fh, self.budget = fh, budget

    def write(self, data):
        self.budget -= len(data)
        if self.budget < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.fh.write(data)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def test_enospc_mid_write_names_the_file_and_removes_the_temporary(tmp_path, monkeypatch):
    entry, _, _ = _entry_with_shards(tmp_path)
    monkeypatch.setattr(cache_mod, "open", lambda path, mode="r", *a, **k: _FullDisk(open(path, mode, *a, **k), 50_000),
                        raising=False)
    with pytest.raises(PrismError) as info:
        entry.finalize(2, DIM, {})
    msg = str(info.value)
    assert msg.startswith(f"cannot write {entry.dir / 'features.npy'}: no space left on the device; free space")
    assert "--cache-dir" in msg
    assert _leftovers(entry) == [] and not entry.exists()
    # a shard write on the full disk: the shard's file is named, nothing half-written stays
    with pytest.raises(PrismError, match=r"cannot write .*00005\.features\.npy: no space left"):
        entry.write_shard(5, np.zeros((1000, DIM), np.float32), np.zeros(1000, np.int64), start=0)
    assert not any(p.name.startswith(".") for p in entry.shard_dir.iterdir())
    assert not entry.shard_meta_path(5).exists()


def test_a_real_file_size_limit_fails_in_words_not_by_a_signal(tmp_path):
    """RLIMIT_FSIZE makes the kernel fail the write itself (EFBIG; SIGXFSZ is ignored by Python)."""
    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
    entry, _, _ = _entry_with_shards(tmp_path)  # shards of 77 and 51 KiB, merged 128 KiB
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
    try:
        with pytest.raises(PrismError) as info:
            entry.finalize(2, DIM, {})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert f"cannot write {entry.dir / 'features.npy'}: file too large" in str(info.value)
    assert _leftovers(entry) == [] and not entry.exists()


def test_unwritable_cache_folder_is_one_line_naming_it(tmp_path, monkeypatch):
    entry = CacheEntry(tmp_path / "cache", KEY)
    real_open = os.open

    def read_only(path, flags, *a, **k):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(cache_mod.os, "open", read_only)
    with pytest.raises(PrismError) as info:
        entry.lock()
    msg = str(info.value)
    assert msg.startswith(f"cannot write {entry.lock_path}: the file system is read-only; make the folder writable")
    assert "--cache-dir" in msg


def test_os_errors_become_one_line_with_a_path_and_a_fix():
    cases = {
        errno.ENOSPC: "no space left", errno.EACCES: "permission denied", errno.EROFS: "read-only",
        errno.EDQUOT: "quota", errno.ENAMETOOLONG: "name too long", errno.ENOTDIR: "a file is in the way",
        errno.EISDIR: "a folder is in the way", errno.EFBIG: "file too large",
    }
    for code, words in cases.items():
        line = storage.describe(OSError(code, os.strerror(code), "/out/x/runs.csv"))
        assert line.startswith("cannot write /out/x/runs.csv: ") and words in line, line
        assert "; " in line and "\n" not in line
    # no file name from the OS: the write site names it
    with pytest.raises(OSError) as info, storage.naming("/out/runs.csv"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.filename == "/out/runs.csv"
    with pytest.raises(OSError) as info, storage.naming("/out/runs.csv"):  # a temporary sibling: the target
        raise OSError(errno.ENOSPC, "No space left on device", "/out/.runs.csv.x1y2.tmp")
    assert info.value.filename == "/out/runs.csv"
    assert not storage.is_file_system_fault(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert not storage.is_file_system_fault(OSError("no errno, no file"))


def test_shards_left_by_a_writer_killed_after_the_manifest_are_removed_on_load(tmp_path):
    """A writer killed between the manifest and the shard cleanup leaves a complete entry with a shard
    folder; the next load keeps the entry (it is complete and verified) and removes the folder."""
    entry, X, y = _entry_with_shards(tmp_path)
    entry.finalize(2, DIM, {})
    assert not entry.shard_dir.exists()
    again, _, _ = _entry_with_shards(tmp_path / "other")  # shard files as the killed cleanup left them
    entry.shard_dir.mkdir()
    for src in again.shard_dir.iterdir():
        (entry.shard_dir / src.name).write_bytes(src.read_bytes())
    (entry.shard_dir / "00000.features.npy").unlink()  # the cleanup had got this far
    Xl, yl = entry.load()
    np.testing.assert_array_equal(Xl, X)
    np.testing.assert_array_equal(yl, y)
    assert entry.exists() and entry.check() is None and not entry.shard_dir.exists()
