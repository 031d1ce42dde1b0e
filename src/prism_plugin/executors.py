"""Where the run grid executes: in-process (default), a local process pool, or a Ray cluster.

The unit of work is one label fraction of one task for one adapter (all its unfinished seeds), so the single fit
shared by the seeds at fraction 1.0 stays one fit. Workers receive *references* to the embeddings (the path of a
memory-mapped ``.npy`` in the cache or the user's embedding folder) rather than copies, re-create the plugin host
with the same disabled plugins, and return finished rows; the driver persists each row as it arrives, so resuming
works the same for every executor and the assembled ``runs.csv`` is byte-identical.

On several machines (Ray) the cache and the embedding folders must be on a file system every worker can read.

Extraction (``--extract-workers N``) uses the same executor choice: the missing shards of one split go to N spawned
processes (``--executor local``) or N Ray actors (``--executor ray``), see :func:`extraction_workers` and
:mod:`prism_plugin.embed.workers`.
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.procs import die_with_parent
from prism_plugin.protocol.grid import GridSpec, RunKey, grid_keys, run_grid
from prism_plugin.protocol.inputs import SplitArrays

EXECUTORS = ("local", "ray")


@dataclass
class SplitRef:
    """A picklable handle on one split: labels by value, features by path when memory-mapped."""

    y: np.ndarray
    name: str
    path: str | None = None
    X: np.ndarray | None = None

    @classmethod
    def of(cls, split: SplitArrays) -> "SplitRef":
        X = split.X
        path = getattr(X, "filename", None)
        if isinstance(X, np.memmap) and path and os.path.exists(path):
            whole = np.load(path, mmap_mode="r", allow_pickle=False)
            if whole.shape == X.shape and whole.dtype == X.dtype and whole.offset == X.offset:
                return cls(y=np.asarray(split.y), name=split.name, path=str(path))
        return cls(y=np.asarray(split.y), name=split.name, X=np.asarray(X))

    def materialize(self) -> SplitArrays:
        X = np.load(self.path, mmap_mode="r", allow_pickle=False) if self.path else self.X
        return SplitArrays(X=X, y=self.y, name=self.name)


@dataclass
class GridJob:
    """Everything a worker needs to run part of one task's grid."""

    train: SplitRef
    val: SplitRef | None
    test: SplitRef
    n_classes: int
    spec: GridSpec
    ident: Mapping[str, Any]
    disabled: tuple[str, ...] = ()
    #: the driver's BLAS thread count: lbfgs at tol 1e-4 stops at a point that depends on it,
    #: so every worker uses the same count as an in-process run would (Ray defaults to 1)
    blas_threads: int | None = None


def driver_blas_threads() -> int | None:
    from threadpoolctl import threadpool_info

    counts = [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
    return max(counts) if counts else None


def run_unit(job: GridJob, fraction: float, seeds: tuple[int, ...]) -> list[tuple[RunKey, dict]]:
    """Run the given seeds of one fraction (in a worker or in-process)."""
    from threadpoolctl import threadpool_limits

    from prism_plugin.plugins import get_host

    host = get_host(job.disabled)
    spec = replace(job.spec, fractions=(fraction,), seeds=seeds)
    with threadpool_limits(limits=job.blas_threads, user_api="blas"):
        rows = run_grid(job.train.materialize(), job.val.materialize() if job.val else None,
                        job.test.materialize(), job.n_classes, spec, host, job.ident)
    return list(rows.items())


def plan_units(spec: GridSpec, done: Callable[[RunKey], bool]) -> list[tuple[float, tuple[int, ...]]]:
    """Fractions with at least one unfinished seed, and those seeds (grid order)."""
    todo: dict[float, list[int]] = {}
    for key in grid_keys(spec):
        if not done(key):
            todo.setdefault(key.fraction, []).append(key.seed)
    return [(f, tuple(s)) for f, s in todo.items()]


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel what has not started, kill the workers, release the queues."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
    for proc in processes:
        try:
            proc.join(timeout=5)
        except (OSError, ValueError, AssertionError, AttributeError):
            pass


class Executor:
    """Runs grid units; ``jobs == 1`` runs in-process with no pickling.

    With ``jobs > 1`` the units go to a pool of ``jobs`` spawned worker processes that die with the
    driver (see :func:`prism_plugin.procs.die_with_parent`). The pool is started on the first grid that
    needs it and kept for the grids after it (every task x model of one ``prism-run``), so a worker's
    start-up (a fresh interpreter importing NumPy, scikit-learn and the plugins: seconds on 2 cores) is
    paid once per run, not once per grid; :meth:`close` ends it (the command does, and so does the
    interpreter's exit). When the driver is interrupted (Ctrl-C, SIGTERM, an error in a unit) the
    workers are killed at once rather than left to finish, and the next grid starts a new pool.
    """

    name = "local"

    def __init__(self, jobs: int = 1):
        if jobs < 1:
            raise PrismError(f"--jobs {jobs}: must be at least 1")
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None
        #: pools started by this executor (1 for a whole run unless one was stopped by an error)
        self.pools_started = 0

    @property
    def in_process(self) -> bool:
        """Whether grids run in this process (``--jobs 1`` locally): what may share state between grids."""
        return self.name == "local" and self.jobs == 1

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import atexit
            import multiprocessing as mp

            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"),
                                             initializer=die_with_parent, initargs=(os.getpid(),))
            self.pools_started += 1
            if self.pools_started == 1:
                atexit.register(self.close)
        return self._pool

    def run(self, job: GridJob, units: Iterable[tuple[float, tuple[int, ...]]]) -> Iterator[tuple[RunKey, dict]]:
        units = list(units)
        if self.jobs == 1 or len(units) <= 1:
            for fraction, seeds in units:
                yield from run_unit(job, fraction, seeds)
            return
        pool = self._get_pool()
        try:
            pending = {pool.submit(run_unit, job, f, s) for f, s in units}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    yield from fut.result()
        except BaseException:  # interrupted, terminated, or a unit failed: stop the workers now
            self._pool = None
            _stop_pool(pool)
            raise

    def close(self) -> None:
        """End the worker pool (idempotent); the next grid would start a new one."""
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "jobs": self.jobs}


def check_ray_address(address: str, timeout: float = 3.0) -> None:
    """``--address HOST:PORT`` (or ``ray://HOST:PORT``): a malformed one, or one where nothing listens,
    fails at once in one line (``ray.init`` would retry for a long while first). ``auto`` is left to Ray."""
    import socket

    text = str(address).strip()
    if text in ("auto", "local"):
        return
    bare = text.split("://", 1)[1] if "://" in text else text
    host, _, port = bare.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise PrismError(f"--address {address}: expected HOST:PORT of a Ray cluster's head "
                         "(e.g. 10.0.0.1:6379, ray://10.0.0.1:10001) or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise PrismError(f"--address {address}: no Ray cluster answers there ({exc.strerror or exc}); start one "
                         f"with `ray start --head --port {port}` on {host}, or fix the address") from None


class RayExecutor(Executor):
    """Units as Ray tasks (``--executor ray [--address HOST:PORT]``); a local instance when no address."""

    name = "ray"

    def __init__(self, address: str | None = None, jobs: int | None = None):
        try:
            import ray
        except ImportError:
            raise PrismError("--executor ray needs Ray: pip install 'prism-plugin[ray]'") from None
        self.ray = ray
        self.address = address
        if address:
            check_ray_address(address)
        if not ray.is_initialized():
            import logging

            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "ignore_reinit_error": True, "logging_level": logging.WARNING}
            if address:
                kwargs["address"] = address
            elif jobs:
                kwargs["num_cpus"] = jobs
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise PrismError(f"--executor ray: cannot connect to {address or 'a local Ray instance'}: {exc}") from None
        self.jobs = int(ray.cluster_resources().get("CPU", 1))
        self._remote = ray.remote(num_cpus=1)(run_unit)

    def run(self, job: GridJob, units: Iterable[tuple[float, tuple[int, ...]]]) -> Iterator[tuple[RunKey, dict]]:
        ray = self.ray
        job_ref = ray.put(job)
        pending = [self._remote.remote(job_ref, f, s) for f, s in units]
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                try:
                    yield from ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else exc
                    if isinstance(cause, PrismError):
                        raise cause from None
                    raise

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "address": self.address or "local", "cpus": self.jobs}


def extraction_workers(executor: Executor | None, count: int, device_request: str = "auto"):
    """The workers that embed one split's missing shards for ``--extract-workers count``: ``None`` for 1
    (in-process, as always), spawned processes under the local executor, Ray actors under ``--executor
    ray`` (on the instance or cluster that executor connected to)."""
    from prism_plugin.embed.workers import make_workers

    return make_workers(count, executor, device_request)


def make_executor(kind: str = "local", jobs: int = 1, address: str | None = None) -> Executor:
    if kind == "local":
        if address:
            raise PrismError("--address only applies to --executor ray")
        return Executor(jobs)
    if kind == "ray":
        return RayExecutor(address, jobs if jobs > 1 else None)
    raise PrismError(f"--executor {kind!r}: choose one of {', '.join(EXECUTORS)}")
