"""Unit checks of the results directory and the shard records (no subprocess, no model)."""

from __future__ import annotations

import json
import os
import time
import warnings

import numpy as np
import pandas as pd
import pytest

from prism_plugin.embed.cache import EmbeddingCache
from prism_plugin.results import ResultsDir, explain_change
from prism_plugin.storage import atomic_write_text


def test_atomic_write_leaves_old_file_when_interrupted(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old\n")

    def boom(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # the temporary file is gone too


def test_cell_round_trip_and_reasons(tmp_path):
    rd = ResultsDir(tmp_path)
    parts = {"task": {"probe": "a", "ece_bins": "b"}, "adapter": "x", "embeddings": {"train": "1", "test": "2"},
             "versions": {"numpy": "2.0"}, "plugins": {"calibration": "v1"}}
    row = {"fraction": 0.1, "seed": 42, "auroc": float("nan"), "ece_fixed": 0.1234567890123456789}
    rd.save_cell("task", "f0.1-s42", "fp1", row, parts)
    got, why = rd.load_cell("task", "f0.1-s42", "fp1", parts, expect={"fraction": 0.1, "seed": 42})
    assert why is None and got["ece_fixed"] == row["ece_fixed"] and np.isnan(got["auroc"])
    assert rd.load_cell("task", "f0.5-s42", "fp1") == (None, None)
    changed = {**parts, "task": {"probe": "A", "ece_bins": "b"}, "versions": {"numpy": "2.1"},
               "embeddings": {"train": "1", "test": "3"}, "plugins": {}}
    got, why = rd.load_cell("task", "f0.1-s42", "fp2", changed)
    assert got is None
    assert "task config changed (probe)" in why and "numpy 2.0 -> 2.1" in why
    assert "embeddings of test changed" in why and "disabled/removed calibration" in why
    got, why = rd.load_cell("task", "f0.1-s42", "fp1", parts, expect={"fraction": 0.1000001})
    assert got is None and "computed for fraction" in why
    assert "predates" in explain_change(None, parts)


def test_cell_names_are_safe_and_bounded(tmp_path):
    rd = ResultsDir(tmp_path)
    p = rd.cell_path("../../etc/" + "x" * 400, "f0.1-s42")
    assert p.parent == rd.cells_dir and len(p.name) < 230 and "/" not in p.name
    # two scopes that sanitise to the same name: the payload says whose it is
    rd.save_cell("a/b", "r", "fp", {"x": 1})
    assert rd.load_cell("a_b", "r", "fp")[1].endswith("belongs to another run (a/b r)")


def test_write_runs_sweeps_stale_temporary_files(tmp_path):
    rd = ResultsDir(tmp_path)
    rd.cells_dir.mkdir(parents=True)
    old, fresh = rd.cells_dir / ".x.json.abc.tmp", tmp_path / ".runs.csv.def.tmp"
    old.write_text("half")
    fresh.write_text("in flight")
    past = time.time() - 3600
    os.utime(old, (past, past))
    rd.write_runs(pd.DataFrame({"fraction": [0.1], "seed": [1]}))
    assert not old.exists() and fresh.exists()


def test_shard_records_detect_damage_and_other_layouts(tmp_path):
    entry = EmbeddingCache(tmp_path).entry("a", "b", "train")
    X, y = np.arange(24, dtype=np.float32).reshape(8, 3), np.arange(8) % 2
    entry.write_shard(0, X[:4], y[:4], start=0)
    entry.write_shard(1, X[4:], y[4:], start=4)
    assert entry.shard_done(0, 4, start=0) and entry.shard_done(1, 4, start=4)
    # same row count, other start: a shard from another shard size is never mixed in
    assert not entry.shard_done(1, 4, start=2) and entry.shards_on_disk() == [0]
    entry.write_shard(1, X[4:], y[4:], start=4)
    f = entry.shard_paths(1)[0]
    f.write_bytes(f.read_bytes()[:-4] + b"\x01\x02\x03\x04")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not entry.shard_done(1, 4, start=4)
    assert any("shard 1 is corrupt" in str(w.message) for w in caught)
    entry.write_shard(1, X[4:], y[4:], start=4)
    (entry.dir / ".features.npy.999.tmp").write_bytes(b"left by a killed finalize")
    entry.finalize(2, 3, {"split": "train"})
    got = entry.load()
    assert got is not None and np.array_equal(np.asarray(got[0]), X) and np.array_equal(got[1], y)
    assert not entry.shard_dir.exists() and not list(entry.dir.glob(".*.tmp"))
    assert json.loads(entry.manifest_path.read_text())["n_shards"] == 2
