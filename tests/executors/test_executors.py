"""Executors: a process pool and a local Ray instance give the same runs.csv as in-process."""

from __future__ import annotations

import numpy as np
import pytest

from prism_plugin.executors import SplitRef, make_executor, plan_units
from prism_plugin.errors import PrismError
from prism_plugin.protocol.grid import GridSpec
from prism_plugin.protocol.inputs import SplitArrays
from tests.conftest import run_main, needs


@pytest.fixture(scope="module")
def embedding_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("exec")
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 32))
    folder = root / "embeddings" / "FM" / "Toy"
    folder.mkdir(parents=True)
    for split, n in (("train", 300), ("val", 100), ("test", 150)):  # 5 to 100 training rows a class
        y = rng.integers(0, 3, n)
        np.save(folder / f"{split}_features.npy", (centers[y] + 2 * rng.normal(size=(n, 32))).astype(np.float32))
        np.save(folder / f"{split}_labels.npy", y)
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "toy.yaml").write_text(
        "task: toy\ndataset: Toy\nclass_names: [a, b, c]\nsource: {type: precomputed}\n"
        "splits: {train: train, val: val, test: test}\nlabel_fractions: [0.05, 0.25, 1.0]\nseeds: [42, 123]\n")
    return root


def run(root, out, *extra):
    """``prism-run`` on the toy task in this process (the pool's workers and Ray's are processes either way)."""
    run_main("--task", "toy", "--include-path", str(root / "tasks"), "--model", "precomputed",
             "--model-args", f"root={root / 'embeddings' / 'FM'}", "--output", str(out), "--quiet", "--no-report",
             *extra, check=True)
    return (out / "runs.csv").read_bytes()


def test_process_pool_and_ray_match_in_process(embedding_task, tmp_path):
    serial = run(embedding_task, tmp_path / "serial")
    assert run(embedding_task, tmp_path / "pool", "--jobs", "2") == serial
    ray = needs("ray")
    assert not ray.is_initialized()  # the run starts its own local instance (--jobs CPUs), as a user's would
    try:
        assert run(embedding_task, tmp_path / "ray", "--executor", "ray", "--jobs", "2") == serial
        assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2
    finally:
        ray.shutdown()  # one Ray start for this module; the next module's test starts its own


def test_memory_mapped_features_travel_by_path(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(12, dtype=np.float32).reshape(4, 3))
    X = np.load(path, mmap_mode="r")
    ref = SplitRef.of(SplitArrays(X, np.array([0, 1, 0, 1])))
    assert ref.path == str(path) and ref.X is None
    np.testing.assert_array_equal(ref.materialize().X, X)
    sliced = SplitRef.of(SplitArrays(X[:2], np.array([0, 1])))  # not the whole file: sent by value
    assert sliced.path is None and sliced.X.shape == (2, 3)


def test_units_keep_the_full_fraction_seeds_together():
    spec = GridSpec(fractions=(0.1, 1.0), seeds=(42, 123, 456))
    done = {(0.1, 42)}
    units = plan_units(spec, lambda key: (key.fraction, key.seed) in done)
    assert units == [(0.1, (123, 456)), (1.0, (42, 123, 456))]


def test_bad_executor_arguments():
    with pytest.raises(PrismError, match="--jobs 0"):
        make_executor("local", 0)
    with pytest.raises(PrismError, match="--address only applies"):
        make_executor("local", 1, "10.0.0.1:6379")


def test_the_process_pool_is_started_once_for_all_grids_of_a_command(tmp_path):
    """``--jobs 2``: one pool serves every grid of the command (a pool per grid cost seconds each); its
    results equal in-process; close() ends it and a later grid starts a new one."""
    from prism_plugin.executors import Executor, GridJob, run_unit
    from prism_plugin.protocol.grid import grid_keys

    rng = np.random.default_rng(1)
    y = np.arange(120) % 2
    X = (rng.normal(size=(120, 6)) + y[:, None]).astype(np.float32)
    split = SplitRef.of(SplitArrays(X, y))
    spec = GridSpec(fractions=(0.25, 1.0), seeds=(42, 123))
    ident = {"task": "t", "adapter": "a", "model": "m", "dataset": "d"}
    job = GridJob(split, split, split, 2, spec, ident, (), blas_threads=1)
    units = plan_units(spec, lambda key: False)
    serial = [row for f, s in units for row in run_unit(job, f, s)]
    executor = Executor(2)
    try:
        first = sorted(executor.run(job, units), key=lambda kv: (kv[0].fraction, kv[0].seed))
        pool = executor._pool
        second = sorted(executor.run(job, units), key=lambda kv: (kv[0].fraction, kv[0].seed))
        assert executor.pools_started == 1 and executor._pool is pool and pool is not None
    finally:
        executor.close()
    assert executor._pool is None
    want = sorted(serial, key=lambda kv: (kv[0].fraction, kv[0].seed))
    assert [k for k, _ in first] == [k for k, _ in want] == list(sorted(grid_keys(spec), key=lambda k: (k.fraction, k.seed)))
    for (_, a), (_, b), (_, c) in zip(first, second, want):
        assert a.keys() == c.keys()
        for col in c:
            assert a[col] == c[col] or (a[col] != a[col] and c[col] != c[col]), col  # NaN == NaN
            assert b[col] == c[col] or (b[col] != b[col] and c[col] != c[col]), col
    executor.close()  # idempotent
