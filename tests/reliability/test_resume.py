"""Kill -9 at random points, restart with the same arguments: same bytes, only unfinished work redone.

Also: inputs that changed between two runs invalidate exactly the affected cells
(and say why), and truncated or corrupt files are detected and recomputed.
"""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest

from prism_plugin import cli
from prism_plugin.embed.cache import CacheEntry, EmbeddingCache
from prism_plugin.results import cell_checksum
from tests.conftest import write_precomputed
from tests.reliability.conftest import (
    LIMIT,
    N_CELLS,
    N_SHARDS,
    N_TILES,
    SMALL_ARGS,
    SHARD,
    cell_progress,
    kill_when,
    run_env,
    shard_progress,
    start,
    summary,
)


def intact_rows(cache: Path) -> tuple[int, list[tuple[CacheEntry, int]]]:
    """Tiles already embedded (complete entries + intact shards) and the shards on disk."""
    done, shards = 0, []
    for entry in EmbeddingCache(cache).entries():
        if entry.exists():
            done += int(entry.manifest()["n"])
            continue
        for index in entry.shards_on_disk():
            meta = json.loads(entry.shard_meta_path(index).read_text())
            shards.append((entry, index))
            done += int(meta["rows"])
    return done, shards


def valid_cells(out: Path) -> set[str]:
    ids = set()
    for p in (out / "cells").glob("*.json"):
        ids.add(json.loads(p.read_text())["run_id"])  # atomic writes: every file present is whole
    return ids


def partial_shards(cache: Path) -> int:
    """Shards of entries still being extracted (a kill there leaves them for the restart to keep)."""
    return sum(len(e.shards_on_disk()) for e in EmbeddingCache(cache).entries() if not e.exists())


def resume_in_process(cache: Path, out: Path, capsys, monkeypatch) -> tuple[str, str]:
    """The restart with the same arguments, in this process (the kill -9 is what needs a process); one torch
    and one BLAS thread, as the subprocess runs (OMP_NUM_THREADS=1), so re-extracted rows and refitted cells
    are the same bits."""
    import torch
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings(record=True) as caught, threadpool_limits(1, user_api="blas"):
            warnings.simplefilter("always")
            rc, stdout, err = main_in_process(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output",
                                                            str(out)], capsys, monkeypatch)
    finally:
        torch.set_num_threads(threads)
    assert rc == 0, err
    assert "Traceback" not in err, err
    return stdout, err + " ".join(str(w.message) for w in caught)


def test_kill_during_extraction_resumes_at_shard_granularity(tmp_path, ref, copy_cache, capsys, monkeypatch):
    """SIGKILL mid-split (finished entries and shards of a partial one on disk); one of those shards is then
    damaged: the restart keeps every intact shard, re-extracts the damaged one and the missing ones only."""
    rng = random.Random(11)
    cache, out = copy_cache(embeddings=False), tmp_path / "out"  # a cold embedding cache
    kill_at = rng.randint(1, N_SHARDS - 1)
    proc = start(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out)], tmp_path / "run1.log")
    assert kill_when(proc, lambda: shard_progress(cache) >= kill_at and partial_shards(cache) > 0) == "killed"
    done, shards = intact_rows(cache)
    assert 0 < done < N_TILES, done
    assert shards  # the kill point has a partial entry: its shards are what the restart must keep
    entry, index = shards[rng.randrange(len(shards))]
    fpath = entry.shard_paths(index)[0]
    data = bytearray(fpath.read_bytes())
    data[-5] ^= 0xFF
    fpath.write_bytes(bytes(data))
    corrupted_rows = json.loads(entry.shard_meta_path(index).read_text())["rows"]
    _, said = resume_in_process(cache, out, capsys, monkeypatch)
    s = summary(out)
    assert s["timings"]["extracted_tiles"] == N_TILES - done + corrupted_rows
    assert "is corrupt" in said and "re-extracting" in said
    assert (out / "runs.csv").read_bytes() == ref["runs"]
    for entry in EmbeddingCache(cache).entries():  # complete, verified, no shard left behind
        assert entry.exists() and entry.check() is None and not entry.shard_dir.exists()


def test_kill_during_grid_recomputes_only_unfinished_cells(tmp_path, ref, copy_cache, capsys, monkeypatch):
    rng = random.Random(5)
    cache, out = copy_cache(), tmp_path / "out"
    kill_at = rng.randint(1, N_CELLS - 2)
    proc = start(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out)], tmp_path / "run1.log")
    assert kill_when(proc, lambda: cell_progress(out) >= kill_at) == "killed"
    before = valid_cells(out)
    assert kill_at <= len(before) < N_CELLS
    assert not (out / "summary.json").exists()
    resume_in_process(cache, out, capsys, monkeypatch)
    s = summary(out)
    assert set(s["reused_cells"]) == before
    assert s["stale_cells"] == []
    assert (out / "runs.csv").read_bytes() == ref["runs"]


# -- in-process: changed inputs, truncated files, corrupt entries -----------------------------------
def main_in_process(args, capsys, monkeypatch, **env):
    for k, v in run_env(**env).items():
        monkeypatch.setenv(k, v)
    rc = cli.main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture
def resumable(tmp_path, ref, copy_cache):
    """A copy of the reference output (all cells done) and of its cache."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(ref["out"], out)
    return copy_cache(), out


def test_changed_task_config_invalidates_cells_and_says_why(resumable, ref, capsys, monkeypatch):
    cache, out = resumable
    # finished runs of other inputs are not replaced without --overwrite: refused, naming the change
    rc, stdout, err = main_in_process(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out),
                                                    "--set", "probe.C=0.5"], capsys, monkeypatch)
    assert rc == 2 and "computed from other inputs (task config changed (probe)" in err and "--overwrite" in err
    assert (out / "runs.csv").read_bytes() == ref["runs"] and summary(out)["reused_cells"] == []
    rc, stdout, err = main_in_process(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out),
                                                    "--set", "probe.C=0.5", "--overwrite"], capsys, monkeypatch)
    assert rc == 0, err
    s = summary(out)
    assert s["reused_cells"] == [] and len(s["stale_cells"]) == N_CELLS
    assert "task config changed (probe)" in stdout
    assert (out / "runs.csv").read_bytes() != ref["runs"]
    # and back: the saved cells now hold C=0.5, so the original config recomputes them again
    rc, stdout, _ = main_in_process(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out), "--overwrite"],
                                    capsys, monkeypatch)
    assert rc == 0 and "task config changed (probe)" in stdout
    assert (out / "runs.csv").read_bytes() == ref["runs"]


def test_extending_the_grid_reuses_existing_cells(resumable, capsys, monkeypatch):
    cache, out = resumable
    args = [a if a != "seeds=[42,123]" else "seeds=[42,123,7]" for a in SMALL_ARGS]
    rc, stdout, err = main_in_process(args + ["--cache-dir", str(cache), "--output", str(out)], capsys, monkeypatch)
    assert rc == 0, err
    s = summary(out)
    assert len(s["reused_cells"]) == N_CELLS and s["n_runs"] == N_CELLS + 4


def test_changed_package_version_invalidates_cells(resumable, ref, capsys, monkeypatch):
    from prism_plugin import runner

    cache, out = resumable
    real = runner.library_versions
    monkeypatch.setattr(runner, "library_versions", lambda: {**real(), "scikit-learn": "0.0-test"})
    rc, stdout, err = main_in_process(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out), "--overwrite"],
                                      capsys, monkeypatch)
    assert rc == 0, err
    assert summary(out)["reused_cells"] == []
    assert f"scikit-learn {real()['scikit-learn']} -> 0.0-test" in stdout
    assert (out / "runs.csv").read_bytes() == ref["runs"]  # same library really: same numbers


def test_disabled_metric_plugin_invalidates_cells(resumable, ref, capsys, monkeypatch):
    """Cells saved with another set of metric columns are not mixed into the table."""
    cache, out = resumable
    rc, stdout, err = main_in_process(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out),
                                                    "--disable", "collapse", "--overwrite"], capsys, monkeypatch)
    assert rc == 0, err
    assert summary(out)["reused_cells"] == []
    assert "metric plugins changed (disabled/removed collapse)" in stdout
    header = (out / "runs.csv").read_text().splitlines()[0].split(",")
    assert "degeneracy_share" not in header and "ece_fixed" in header


def test_changed_embeddings_invalidate_cells(tmp_path, ref, capsys, monkeypatch):
    """Precomputed embeddings edited between two runs: every cell is stale, and the split is named."""
    root = write_precomputed(tmp_path / "emb" / "Demo-Binary", {"train": 40, "val": 20, "test": 20})
    out = tmp_path / "out"
    args = ["--task", "prism_demo", "--model", "precomputed", "--model-args", f"root={root.parent}",
            "--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[42]", "--output", str(out), "--quiet", "--no-report"]
    assert main_in_process(args, capsys, monkeypatch)[0] == 0
    first = (out / "runs.csv").read_bytes()
    assert main_in_process(args, capsys, monkeypatch)[0] == 0
    assert len(summary(out)["reused_cells"]) == 2 and (out / "runs.csv").read_bytes() == first
    X = np.load(root / "train_features.npy")
    X[0, 0] += 1.0
    np.save(root / "train_features.npy", X)
    rc, _, err = main_in_process(args, capsys, monkeypatch)
    assert rc == 2 and "embeddings of train changed" in err  # the earlier runs are not replaced silently
    assert (out / "runs.csv").read_bytes() == first
    rc, stdout, _ = main_in_process(args + ["--overwrite"], capsys, monkeypatch)
    assert rc == 0 and summary(out)["reused_cells"] == []
    assert "embeddings of train changed" in stdout
    # --limit takes other rows: it must not reuse the full run's cells either
    rc, stdout, _ = main_in_process(args + ["--limit", "10", "--overwrite"], capsys, monkeypatch)
    assert rc == 0 and summary(out)["reused_cells"] == [] and "embeddings of" in stdout


def test_truncated_runs_csv_and_cells_are_recomputed(resumable, ref, capsys, monkeypatch):
    cache, out = resumable
    runs = out / "runs.csv"
    runs.write_bytes(runs.read_bytes()[: len(ref["runs"]) // 2])
    cells = sorted((out / "cells").glob("*.json"))
    cells[0].write_bytes(cells[0].read_bytes()[:40])  # truncated
    cells[1].write_text("\x00garbage")  # overwritten
    doctored = json.loads(cells[2].read_text())  # valid JSON with a valid checksum, but for another fraction
    doctored["row"]["fraction"] = 0.123
    doctored["checksum"] = cell_checksum(doctored)
    cells[2].write_text(json.dumps(doctored))
    edited = json.loads(cells[3].read_text())  # a hand edit of a number: valid JSON, wrong checksum
    edited["row"]["auroc"] = 0.5
    cells[3].write_text(json.dumps(edited))
    rc, stdout, err = main_in_process(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out)], capsys, monkeypatch)
    assert rc == 0, err
    s = summary(out)
    assert len(s["reused_cells"]) == N_CELLS - 4
    reasons = " ".join(x["reason"] for x in s["stale_cells"])
    assert reasons.count("unreadable") == 2 and "computed for fraction 0.123" in reasons
    assert "checksum mismatch (edited or corrupt)" in reasons
    assert {doctored["run_id"], edited["run_id"]} <= {x["cell"] for x in s["stale_cells"]}
    assert runs.read_bytes() == ref["runs"]


@pytest.fixture
def one_torch_thread():
    """Re-extraction in this process must match the subprocess runs (OMP_NUM_THREADS=1) bit for bit."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_corrupt_cache_entry_is_detected_and_recomputed(resumable, ref, capsys, monkeypatch, one_torch_thread):
    cache, out = resumable
    entries = EmbeddingCache(cache).entries()
    victim = next(e for e in entries if e.manifest()["provenance"]["split"] == "train")
    f = victim.dir / "features.npy"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, stdout, err = main_in_process(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out)],
                                          capsys, monkeypatch)
    assert rc == 0, err
    text = err + " ".join(str(w.message) for w in caught)
    assert f"cache entry {victim.key[:12]} is corrupt" in text and "checksum mismatch" in text
    s = summary(out)
    assert s["embedding_cache"]["train"] == "extracted" and s["timings"]["extracted_tiles"] == LIMIT
    assert victim.check() is None
    assert len(s["reused_cells"]) == N_CELLS  # same bits re-extracted: the cells stay valid
    assert (out / "runs.csv").read_bytes() == ref["runs"]


def test_shard_size_from_environment(monkeypatch):
    from prism_plugin.embed.cache import shard_size
    from prism_plugin.errors import PrismError

    monkeypatch.setenv("PRISM_SHARD_SIZE", str(SHARD))
    assert shard_size() == SHARD
    for bad in ("0", "-3", "abc", "1.5"):
        monkeypatch.setenv("PRISM_SHARD_SIZE", bad)
        with pytest.raises(PrismError, match="PRISM_SHARD_SIZE"):
            shard_size()
    monkeypatch.delenv("PRISM_SHARD_SIZE")
    assert shard_size() == 2048
