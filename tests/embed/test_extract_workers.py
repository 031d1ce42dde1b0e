"""Extraction sharded over workers: the cache entry of 2 local processes and of 2 Ray CPU actors is
byte-identical to an in-process extraction (features.npy, labels.npy, manifest checksums); the
device assignment (one GPU per worker, CPU cores split) and bad input are checked without a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import needs

from prism_plugin.embed.cache import EmbeddingCache
from prism_plugin.embed.extract import extract_split, shard_layout
from prism_plugin.embed.workers import (LocalShardWorkers, WorkerSlot, adapter_payload, assign, check_workers,
                                        make_workers, plan_ray_slots, plan_slots, visible_gpus)
from prism_plugin.errors import PrismError

N, SHARD, BATCH = 22, 4, 3  # 6 shards (the last one 2 rows), 2 batches per shard (3 + 1 rows)


def _adapter():
    from prism_plugin.model_adapters.demo import DemoViT

    return DemoViT(batch_size=BATCH)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    from PIL import Image

    from prism_plugin.data.base import ImageSplit

    folder = tmp_path_factory.mktemp("tiles")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(N):
        path = folder / f"t{i:02d}.png"
        Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return ImageSplit(paths=paths, labels=rng.integers(0, 3, N).astype(np.int64), fingerprint="workers-test")


def _extract(root: Path, split, workers=None, done=None, make=None):
    """Extract ``split`` into a fresh cache under ``root`` (shards ``done`` of ``(index, X)`` already on disk)."""
    adapter = (make or _adapter)()
    entry = EmbeddingCache(root).entry(adapter.fingerprint(), split.fingerprint, "test")
    for i, X in done or ():  # what an interrupted run left behind
        entry.write_shard(i, X, split.labels[i * SHARD:i * SHARD + len(X)], start=i * SHARD)
    with entry.lock():
        n_new, _ = extract_split(adapter, split, entry, num_workers=0, progress=False, workers=workers,
                                 provenance={"task": "t"})
    assert n_new == N - sum(len(X) for _, X in done or ())
    return entry, adapter


def _files(entry) -> dict[str, object]:
    manifest = json.loads(entry.manifest_path.read_text())
    assert not entry.shard_dir.exists() and entry.check() is None
    return {"features": (entry.dir / "features.npy").read_bytes(), "labels": (entry.dir / "labels.npy").read_bytes(),
            "checksums": (manifest["features_checksum"], manifest["labels_checksum"], manifest["n"],
                          manifest["n_shards"])}


@pytest.fixture(scope="module")
def single(split, tmp_path_factory):
    """The in-process (1 worker) entry and the adapter it built (1 torch thread: cheap on a loaded machine;
    the thread count's independence is checked below)."""
    import torch

    mp = pytest.MonkeyPatch()
    mp.setenv("PRISM_SHARD_SIZE", str(SHARD))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        entry, adapter = _extract(tmp_path_factory.mktemp("one"), split)
        yield {**_files(entry), "adapter": adapter, "X": entry.load()[0].copy()}
    finally:
        torch.set_num_threads(threads)
        mp.undo()


def _same(entry, reference) -> bool:
    return _files(entry) == {k: reference[k] for k in ("features", "labels", "checksums")}


def test_reference_is_an_independent_forward(single, split):
    """The in-process entry holds what a plain batched forward of the same network gives: shard by shard,
    batches of BATCH rows from each shard's first row; and the first shard again with 2 torch threads
    gives the same bytes (so a worker's thread share does not change what it writes)."""
    import torch

    from prism_plugin.embed.extract import ImageFiles

    adapter = single["adapter"]
    ds = ImageFiles(split.paths, adapter.preprocessing.transform())

    def forward(start, stop):
        with torch.inference_mode():
            return torch.cat([torch.nn.functional.normalize(adapter.forward(
                torch.stack([ds[i] for i in range(a, min(stop, a + BATCH))])), dim=1)
                for a in range(start, stop, BATCH)]).numpy()

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        expected = np.concatenate([forward(start, stop) for _, start, stop in shard_layout(N, SHARD)])
        torch.set_num_threads(2)
        two_threads = forward(0, SHARD)
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(single["X"], expected)
    assert two_threads.tobytes() == single["X"][:SHARD].tobytes()
    assert single["X"].shape == (N, 192) and single["checksums"][2:] == (N, 6)
    assert np.allclose(np.linalg.norm(single["X"], axis=1), 1, atol=1e-5) and np.unique(single["X"][:, 0]).size == N


def _tiny():
    from tests.embed._tiny_adapter import TinyViT

    return TinyViT(batch_size=BATCH)


@pytest.fixture(scope="module")
def tiny_single(split, tmp_path_factory):
    """The in-process (1 worker) entry of the small ViT-like network the worker tests send to their workers
    (no timm: a spawned worker or a Ray actor that imports timm takes twice as long to start; the demo
    ViT's own adapter is checked above and below)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PRISM_SHARD_SIZE", str(SHARD))
    try:
        entry, _ = _extract(tmp_path_factory.mktemp("tiny-one"), split, make=_tiny)
        yield {**_files(entry), "X": entry.load()[0].copy()}
    finally:
        mp.undo()


def test_two_local_processes_resume_and_write_the_same_entry(tiny_single, split, tmp_path, monkeypatch):
    """An interrupted run left shards 0 and 3: they are kept, the other four go round robin to 2 worker
    processes (1 thread each), and the merged entry is byte for byte the in-process one."""
    monkeypatch.setenv("PRISM_SHARD_SIZE", str(SHARD))
    workers = make_workers(2, None, "cpu")
    assert isinstance(workers, LocalShardWorkers)
    X = tiny_single["X"]
    entry, _ = _extract(tmp_path, split, workers, done=[(0, X[0:SHARD]), (3, X[3 * SHARD:4 * SHARD])], make=_tiny)
    assert workers.ranks == {1: 0, 2: 1, 4: 0, 5: 1}
    assert _same(entry, tiny_single)


@pytest.fixture(scope="module")
def ray_local():
    ray = needs("ray")
    import logging

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_two_ray_cpu_actors_write_the_same_entry(tiny_single, split, tmp_path, monkeypatch, ray_local):
    """1 worker in-process against 2 Ray CPU actors, from scratch (the small ViT-like network without timm)."""
    from prism_plugin.executors import extraction_workers

    monkeypatch.setenv("PRISM_SHARD_SIZE", str(SHARD))
    executor = SimpleNamespace(name="ray", ray=ray_local)
    workers = extraction_workers(executor, 2, "auto")
    assert workers.name == "ray" and workers.slots()[1] == {"num_cpus": 1}
    entry, _ = _extract(tmp_path / "ray", split, workers, make=_tiny)
    assert _same(entry, tiny_single)
    assert workers.ranks == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0, 5: 1}


# -- device assignment and bad input (no GPU needed) ----------------------------------------------
def test_one_gpu_per_worker_and_cpu_cores_split():
    slots = plan_slots(4, "auto", cuda_count=4, cores=16)
    assert [s.cuda_visible for s in slots] == ["0", "1", "2", "3"] and {s.device for s in slots} == {"cuda"}
    assert {s.threads for s in slots} == {4} and {s.loader_workers for s in slots} == {3}
    # the driver's CUDA_VISIBLE_DEVICES is honoured: workers get its entries, one each
    ids = visible_gpus(2, {"CUDA_VISIBLE_DEVICES": "5,7"})
    assert [s.cuda_visible for s in plan_slots(2, "cuda", cuda_count=2, cores=8, gpu_ids=ids)] == ["5", "7"]
    assert plan_slots(2, "cpu", cuda_count=4, cores=2) == [WorkerSlot(0, "cpu", None, 1, 0), WorkerSlot(1, "cpu", None, 1, 0)]
    assert [s.threads for s in plan_slots(3, "auto", cuda_count=0, cores=16, num_workers=2)] == [5, 5, 5]
    assert plan_ray_slots(2, "auto", {"CPU": 64, "GPU": 8})[1] == {"num_gpus": 1, "num_cpus": 1}
    assert plan_ray_slots(2, "cpu", {"CPU": 64, "GPU": 8})[1] == {"num_cpus": 32}
    assert assign([(i, 0, 0) for i in range(5)], 2) == [[(0, 0, 0), (2, 0, 0), (4, 0, 0)], [(1, 0, 0), (3, 0, 0)]]


@pytest.mark.parametrize("call, match", [
    (lambda: check_workers(0), "--extract-workers 0: must be a whole number >= 1"),
    (lambda: check_workers(1.5), "--extract-workers 1.5"),
    (lambda: plan_slots(3, "auto", cuda_count=2, cores=8), "has 2 CUDA device.* pass --extract-workers 2 or fewer"),
    (lambda: plan_slots(2, "cuda:1", cuda_count=2, cores=8), "--device cuda:1 pins one GPU"),
    (lambda: plan_slots(2, "cuda", cuda_count=0, cores=8, gpu_ids=[]), "no CUDA device is visible"),
    (lambda: plan_slots(2, "auto", mps=True, cores=8), "MPS is one device"),
    (lambda: plan_ray_slots(3, "auto", {"CPU": 64, "GPU": 2}), "Ray cluster has 2 GPU"),
    (lambda: plan_ray_slots(3, "cpu", {"CPU": 2}), "Ray cluster has 2 CPU"),
    (lambda: plan_ray_slots(2, "cuda", {"CPU": 2}), "the Ray cluster has no GPUs"),
])
def test_bad_worker_requests_are_one_line(call, match):
    with pytest.raises(PrismError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_adapter_travels_without_its_network_and_unpicklable_ones_say_so(single):
    import copy

    adapter = copy.copy(single["adapter"])  # built by the in-process extraction
    assert adapter._built and adapter._model is not None
    clone = adapter_payload(adapter)
    assert clone._built is False and clone._model is None and clone.fingerprint() == adapter.fingerprint()
    adapter.hook = lambda x: x  # a lambda does not pickle
    with pytest.raises(PrismError, match="cannot be sent to worker processes.*--extract-workers 1"):
        adapter_payload(adapter)


def test_one_worker_is_in_process_and_ray_missing_is_one_line(monkeypatch):
    import builtins

    from prism_plugin.executors import make_executor

    assert make_workers(1) is None
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(PrismError, match=r"--executor ray needs Ray: pip install"):
        make_executor("ray", 2)


def test_unreachable_or_malformed_ray_address_is_one_line():
    import socket

    needs("ray")
    from prism_plugin.executors import make_executor

    with socket.socket() as sock:  # a port nothing listens on (bound, never listening)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(PrismError, match=rf"--address 127.0.0.1:{port}: no Ray cluster answers there"):
            make_executor("ray", 1, f"127.0.0.1:{port}")
    with pytest.raises(PrismError, match="--address headnode: expected HOST:PORT"):
        make_executor("ray", 1, "headnode")


def test_cli_option_reaches_the_workers(tmp_path):
    """``--extract-workers N`` is parsed, carried by the job options to the loader, which asks the run's
    executor for N workers (local processes here); ``--extract-workers 0`` is one line before any work.
    (A whole ``prism-run`` costs seconds; the byte-identity of N workers is tested above.)"""
    from prism_plugin.cli import main_parser
    from prism_plugin.embed.load import shard_workers
    from prism_plugin.executors import make_executor
    from prism_plugin.runner import JobOptions
    from tests.conftest import run_main

    args = main_parser().parse_args(["--task", "t", "--model", "m", "--extract-workers", "2"])
    assert args.extract_workers == 2
    opts = JobOptions(output=tmp_path, device="cpu", executor=make_executor("local", 1),
                      extract_workers=args.extract_workers)
    from tests.embed._tiny_adapter import TinyViT

    workers = shard_workers(TinyViT(), opts)
    assert isinstance(workers, LocalShardWorkers) and workers.count == 2 and workers.device_request == "cpu"
    assert shard_workers(TinyViT(), JobOptions(output=tmp_path)) is None  # default 1: in-process
    bad = run_main("--task", "prism_demo", "--model", "demo_vit", "--cache-dir", str(tmp_path / "cache"),
                   "--output", str(tmp_path / "out"), "--extract-workers", "0")
    assert bad.returncode == 2 and "--extract-workers 0: must be a whole number >= 1" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
