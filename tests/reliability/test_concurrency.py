"""Two prism-run processes on one cache; eviction and verification while others read."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import numpy as np

from prism_plugin import cli
from prism_plugin.embed.cache import CacheEntry, EmbeddingCache
from tests.reliability.conftest import N_TILES, SMALL_ARGS, start, summary


def wait_ok(proc, timeout: float = 300) -> str:
    try:
        proc.wait(timeout=timeout)
    finally:
        proc._log_handle.close()
    log = Path(proc._log_handle.name).read_text()
    assert proc.returncode == 0, log
    assert "Traceback" not in log and "internal error" not in log, log
    return log


def test_three_runs_same_task_share_one_extraction(tmp_path, ref, copy_cache):
    """Same task, same cold embedding cache, started together: every tile is embedded exactly once in total
    (the entry lock), and every table equals the uninterrupted run. (Runs sharing one results
    folder are exercised by benchmarks/chaos.py; the demo tiles, drawn once for the session, are
    linked in: generations racing on one cache are tested below.)"""
    cache = copy_cache(embeddings=False)
    outs = [tmp_path / f"out{i}" for i in range(3)]
    procs = [start(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(o)], tmp_path / f"{i}.log")
             for i, o in enumerate(outs)]
    for p in procs:
        wait_ok(p)
    assert sum(summary(o)["timings"]["extracted_tiles"] for o in outs) == N_TILES
    entries = EmbeddingCache(cache).entries()
    assert len(entries) == 3 and all(e.check() is None for e in entries)
    for o in outs:
        assert (o / "runs.csv").read_bytes() == ref["runs"]
        assert not list(o.rglob("*.tmp"))


def test_other_task_runs_while_cache_is_verified_and_evicted(tmp_path, ref, copy_cache, capsys):
    """prism_demo (reading) and prism_demo_multiclass (extracting) run while `cache verify` and
    `cache rm --task prism_demo` loop on the same cache: both finish, tables correct."""
    cache = copy_cache()
    out_a, out_b = tmp_path / "a", tmp_path / "b"
    multi = ["--task", "prism_demo_multiclass", "--model", "demo_vit", "--set", "label_fractions=[0.5,1.0]",
             "--set", "seeds=[42]", "--limit", "32", "--num-workers", "0", "--quiet", "--no-report"]
    a = start(SMALL_ARGS + ["--no-report", "--cache-dir", str(cache), "--output", str(out_a)], tmp_path / "a.log")
    b = start(multi + ["--cache-dir", str(cache), "--output", str(out_b)], tmp_path / "b.log")
    rounds, errors = 0, []
    while a.poll() is None or b.poll() is None:
        for argv in (["cache", "verify", "--cache-dir", str(cache)],
                     ["cache", "rm", "--task", "prism_demo", "--wait", "0.2", "--cache-dir", str(cache)],
                     ["cache", "ls", "--cache-dir", str(cache)]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rc = cli.main(argv)
            if rc not in (0, 1):
                errors.append((argv, rc))
        rounds += 1
        time.sleep(0.05)
    capsys.readouterr()
    assert not errors
    assert rounds >= 3
    wait_ok(a), wait_ok(b)
    assert (out_a / "runs.csv").read_bytes() == ref["runs"]
    # the multiclass table equals a clean recomputation of its grid from the (verified) cache
    assert cli.main(multi + ["--cache-dir", str(cache), "--output", str(tmp_path / "b2")]) == 0
    assert (tmp_path / "b2" / "runs.csv").read_bytes() == (out_b / "runs.csv").read_bytes()
    assert cli.main(["cache", "verify", "--cache-dir", str(cache)]) == 0


def _draw_tiles(cache: str, barrier, results) -> None:
    from prism_plugin.data import demo
    from prism_plugin.data.datacache import using_cache_dir

    try:
        barrier.wait(60)
        with using_cache_dir(cache):
            results.put(str(demo.ensure_demo_dataset("binary", {"train": 40, "val": 20, "test": 20}, size=16)))
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        results.put(f"error: {type(exc).__name__}: {exc}")


def test_processes_drawing_the_demo_tiles_together_on_a_fresh_cache_agree(tmp_path):
    """Three processes generate the same demo tiles into one fresh cache at once (what runs started together
    on a new --cache-dir do): each gets the same complete folder, and no temporary folder is left."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_draw_tiles, args=(str(tmp_path), barrier, results)) for _ in range(3)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert not [g for g in got if g.startswith("error")], got
    assert len(set(got)) == 1
    root = Path(got[0])
    assert root.parent == tmp_path / "datasets" and (root / "COMPLETE").is_file()
    assert len(list(root.rglob("*.png"))) == 2 * (40 + 20 + 20)
    assert [p.name for p in (tmp_path / "datasets").iterdir()] == [root.name]  # no temporary folder left


# -- in-process races on one entry (threads) ------------------------------------------------------
def _fill(entry: CacheEntry, X: np.ndarray, y: np.ndarray, shard: int = 50) -> None:
    for i, start_ in enumerate(range(0, len(y), shard)):
        entry.write_shard(i, X[start_:start_ + shard], y[start_:start_ + shard], start=start_)
    entry.finalize(-(-len(y) // shard), X.shape[1], {"task": "t", "split": "train"})


def test_readers_never_see_a_torn_entry_while_it_is_removed_and_rewritten(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 16)).astype(np.float32)
    y = (np.arange(300) % 3).astype(np.int64)
    cache = EmbeddingCache(tmp_path)
    entry = cache.entry("adapter", "data", "train")
    _fill(entry, X, y)
    stop = threading.Event()
    seen = {"hits": 0, "misses": 0}
    failures: list[BaseException] = []

    def reader():
        try:
            while not stop.is_set():
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got = cache.entry("adapter", "data", "train").load()
                assert not [w for w in caught if "corrupt" in str(w.message)], [str(w.message) for w in caught]
                if got is None:
                    seen["misses"] += 1
                else:
                    assert np.array_equal(np.asarray(got[0]), X) and np.array_equal(got[1], y)
                    seen["hits"] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    def evictor():
        try:
            for _ in range(5):
                e = cache.entry("adapter", "data", "train")
                assert e.remove(timeout=10)
                with e.lock():
                    if e.load() is None:
                        _fill(e, X, y)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            stop.set()

    threads = [threading.Thread(target=reader) for _ in range(2)] + [threading.Thread(target=evictor)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert seen["hits"] > 0
    assert not (tmp_path / "embeddings" / ".trash").exists() or not any((tmp_path / "embeddings" / ".trash").iterdir())


def test_lock_is_reentrant_within_a_thread(tmp_path):
    """The runner holds an entry's lock while load() may need it again (to discard a corrupt entry)."""
    entry = EmbeddingCache(tmp_path).entry("a", "b", "train")
    with entry.lock():
        with entry.lock():
            assert entry.remove(timeout=0)
        assert not entry.locked_elsewhere()


def test_rm_skips_an_entry_another_process_is_writing(tmp_path, capsys):
    """`cache rm` waits for the entry lock, then gives up and says so (it never deletes a live extraction)."""
    import multiprocessing as mp

    entry = EmbeddingCache(tmp_path).entry("a", "b", "train")
    entry.shard_dir.mkdir(parents=True)
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()

    def holder():
        with entry.lock():
            ready.set()
            release.wait(30)

    p = ctx.Process(target=holder)
    p.start()
    try:
        assert ready.wait(30)
        assert entry.info()["state"] == "extracting"
        rc = cli.main(["cache", "rm", "--all", "--wait", "0.2", "--cache-dir", str(tmp_path)])
        out = capsys.readouterr().out
        assert rc == 0 and "skipped" in out and entry.dir.exists()
    finally:
        release.set()
        p.join(30)
    assert cli.main(["cache", "rm", "--all", "--cache-dir", str(tmp_path)]) == 0
    assert not entry.dir.exists()
