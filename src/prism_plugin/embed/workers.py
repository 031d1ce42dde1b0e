"""One split's extraction sharded over several workers: local processes, or Ray actors on a cluster.

The split's rows are cut into the cache's shards (shard k = rows ``[k*S, (k+1)*S)`` of the split's deterministic
order, ``S`` = ``$PRISM_SHARD_SIZE``, default 2048). The driver holds the entry's lock, lists the shards not yet on
disk (an interrupted run's intact shards are kept) and deals them round robin to ``N`` workers. Each worker builds
the adapter itself (the driver's adapter, pickled without its network: the same weights, seeded), embeds its shards
with the same loop as an in-process extraction (:func:`prism_plugin.embed.extract.embed_rows`: eval mode, inference
mode, batches that start at the shard's first row) and writes each one with the cache's shard writer (atomic files,
then the shard's checksummed record). The driver waits, re-verifies every new shard's record and checksums, and
merges the shards as it always does (:meth:`~prism_plugin.embed.cache.CacheEntry.finalize`): the cache entry is
byte-identical to an in-process extraction's.

Devices: with CUDA devices each worker gets one GPU (``CUDA_VISIBLE_DEVICES`` per local process; ``num_gpus=1`` per
Ray actor); on CPU the cores are split between the workers (torch intra-op threads = cores // N, and the DataLoader
workers of each from what is left). The shards are dealt before any work starts (:func:`assign`), so which worker
embeds which shard is fixed.

Local workers are ``spawn``-ed processes (as the ``--jobs`` pool's): nothing of the driver's threads, locks or CUDA
state is copied, and no process-wide multiprocessing setting is changed. They end the moment the driver does
(:func:`prism_plugin.procs.die_with_parent`), so a killed driver leaves no worker running, and the shard a worker
was writing is lost: the next run resumes at shard granularity (finished shards are kept). The result does not
depend on the torch thread count on the CPUs measured (see BENCHMARKS.md); keep the workers of one cluster on the
same kind of device and software, since the cache key does not record the device.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.procs import die_with_parent

FLAG = "--extract-workers"


def check_workers(workers: Any) -> int:
    """The number of extraction workers, or a one-line error."""
    try:
        value = int(workers)
        ok = value == workers or isinstance(workers, str)
    except (TypeError, ValueError):
        value, ok = 0, False
    if not ok or value < 1:
        raise PrismError(f"{FLAG} {workers}: must be a whole number >= 1 (1 = extract in this process; "
                         "N > 1 = N worker processes, or N Ray actors with --executor ray)")
    return value


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class WorkerSlot:
    """Where one worker runs: its device, the GPU it sees, its torch threads and DataLoader workers."""

    rank: int
    device: str  # "cpu" or "cuda" (the one GPU of ``cuda_visible``)
    cuda_visible: str | None = None
    threads: int = 1
    loader_workers: int = 0


def visible_gpus(cuda_count: int, environ: dict[str, str] | None = None) -> list[str]:
    """The GPU ids a child process can be pinned to: ``$CUDA_VISIBLE_DEVICES``'s entries when set, else 0..n-1."""
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is not None and raw.strip():
        ids = [part.strip() for part in raw.split(",") if part.strip()]
        return ids[:cuda_count] if cuda_count else []
    return [str(i) for i in range(cuda_count)]


def _split_cores(workers: int, cores: int, num_workers: int | None) -> tuple[int, int]:
    """(torch threads, DataLoader workers) of each of ``workers`` workers sharing ``cores`` cores."""
    share = max(1, cores // workers)
    loader = num_workers if num_workers is not None else max(0, min(4, share - 1))
    return share, loader


def plan_slots(workers: int, device_request: str = "auto", *, cuda_count: int = 0, cores: int = 1,
               mps: bool = False, num_workers: int | None = None,
               gpu_ids: Sequence[str] | None = None) -> list[WorkerSlot]:
    """The slots of ``workers`` local workers on a machine with ``cuda_count`` GPUs and ``cores`` CPUs.

    ``device_request`` is the normalised ``--device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``).
    On CUDA (``auto`` with GPUs, or ``cuda``) each worker gets its own GPU, so ``workers`` must not
    exceed the GPUs; on CPU the cores are split. Pure: the device logic is tested without a GPU.
    """
    workers = check_workers(workers)
    request = (device_request or "auto").strip().lower()
    if request.startswith("cuda:") and workers > 1:
        raise PrismError(f"--device {device_request} pins one GPU, but {FLAG} {workers} puts one worker on each "
                         f"GPU; pass --device cuda (or auto), or {FLAG} 1")
    if request == "mps" or (request == "auto" and mps and not cuda_count):
        if workers > 1:
            raise PrismError(f"{FLAG} {workers}: Apple's MPS is one device; pass {FLAG} 1, or --device cpu "
                             "to split the CPU cores")
    use_cuda = request.startswith("cuda") or (request == "auto" and cuda_count > 0)
    if use_cuda:
        ids = list(gpu_ids) if gpu_ids is not None else visible_gpus(cuda_count)
        if not ids:
            raise PrismError(f"--device {device_request}: no CUDA device is visible; use --device cpu (or auto)")
        if workers > len(ids):
            raise PrismError(f"{FLAG} {workers}: this machine has {len(ids)} CUDA device(s) and each worker takes "
                             f"one; pass {FLAG} {len(ids)} or fewer")
        threads, loader = _split_cores(workers, cores, num_workers)
        return [WorkerSlot(rank, "cuda", ids[rank], threads, loader) for rank in range(workers)]
    threads, loader = _split_cores(workers, cores, num_workers)
    return [WorkerSlot(rank, "cpu", None, threads, loader) for rank in range(workers)]


def plan_ray_slots(workers: int, device_request: str, resources: dict[str, float],
                   num_workers: int | None = None) -> tuple[list[WorkerSlot], dict[str, float]]:
    """Slots of ``workers`` Ray actors and the resources each asks for, from ``ray.cluster_resources()``.

    GPUs in the cluster (and ``--device`` auto or cuda): one GPU per actor (``num_gpus=1``, Ray sets
    its ``CUDA_VISIBLE_DEVICES``). Else CPU actors, each asking for an equal share of the cluster's CPUs.
    """
    workers = check_workers(workers)
    request = (device_request or "auto").strip().lower()
    gpus = int(resources.get("GPU", 0) or 0)
    cpus = max(1, int(resources.get("CPU", 1) or 1))
    if request.startswith("cuda:") and workers > 1:
        raise PrismError(f"--device {device_request} pins one GPU, but {FLAG} {workers} puts one Ray actor on each "
                         f"GPU; pass --device cuda (or auto)")
    if request == "mps":
        raise PrismError("--device mps: Ray actors embed on CUDA or CPU; pass --device cpu, cuda or auto")
    if request.startswith("cuda") and gpus == 0:
        raise PrismError(f"--device {device_request}: the Ray cluster has no GPUs; use --device cpu (or auto)")
    if gpus > 0 and request != "cpu":
        if workers > gpus:
            raise PrismError(f"{FLAG} {workers}: the Ray cluster has {gpus} GPU(s) and each actor takes one; "
                             f"pass {FLAG} {gpus} or fewer")
        threads = max(1, cpus // workers)
        loader = num_workers if num_workers is not None else max(0, min(4, threads - 1))
        return ([WorkerSlot(rank, "cuda", None, threads, loader) for rank in range(workers)],
                {"num_gpus": 1, "num_cpus": 1})
    if workers > cpus:
        raise PrismError(f"{FLAG} {workers}: the Ray cluster has {cpus} CPU(s) and each actor takes at least one; "
                         f"pass {FLAG} {cpus} or fewer")
    threads, loader = _split_cores(workers, cpus, num_workers)
    return [WorkerSlot(rank, "cpu", None, threads, loader) for rank in range(workers)], {"num_cpus": threads}


# -- what a worker receives -------------------------------------------------------------------
@dataclass
class Job:
    """Everything a worker needs: the adapter (pickled, unbuilt), the split's items and labels, the entry."""

    adapter: Any  # the adapter without its network (see adapter_payload)
    paths: list
    labels: np.ndarray
    entry: Any  # CacheEntry (root, key): picklable


def adapter_payload(adapter):
    """A copy of the adapter without its network (``nn.Module`` attributes dropped, ``_built`` off), checked to
    pickle: every worker builds it again from the same options and seed, on its own device. The copy travels
    the way every process argument does (multiprocessing's or Ray's own serialisation)."""
    clone = object.__new__(type(adapter))
    state = dict(vars(adapter))
    torch = sys.modules.get("torch")
    if torch is not None:
        state = {k: (None if isinstance(v, torch.nn.Module) else v) for k, v in state.items()}
    state["_built"] = False
    clone.__dict__.update(state)
    try:
        pickle.dumps(clone, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the same user-facing problem
        raise PrismError(f"{FLAG}: adapter {getattr(adapter, 'name', type(adapter).__name__)} cannot be sent to "
                         f"worker processes ({type(exc).__name__}: {exc}); pass {FLAG} 1") from None
    return clone


# -- the worker side (a spawned process or a Ray actor) ------------------------------------------
class ShardWorker:
    """Builds the adapter once on its slot's device, then embeds and writes shards on request."""

    def __init__(self, slot: WorkerSlot, job: Job):
        if slot.cuda_visible is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible  # before torch initialises CUDA
        import torch

        from prism_plugin.embed.extract import ImageFiles

        torch.set_num_threads(max(1, int(slot.threads)))
        self.slot = slot
        self.device = torch.device(slot.device)
        self.adapter = job.adapter
        self.adapter.build(self.device)
        self.adapter._built = True
        self.dataset = ImageFiles(job.paths, self.adapter.preprocessing.transform())
        self.labels = job.labels
        self.entry = job.entry

    def run(self, index: int, start: int, stop: int) -> dict[str, Any]:
        """Embed shard ``index`` (rows ``[start, stop)``), write it, return its record."""
        from prism_plugin.embed.extract import embed_rows

        try:
            feats = embed_rows(self.adapter, self.dataset, start, stop, self.device, self.slot.loader_workers)
            self.entry.write_shard(index, feats, self.labels[start:stop], start=start)
        except PrismError as exc:  # a plain PrismError pickles back to the driver whatever its subclass
            raise PrismError(str(exc)) from None
        record = self.entry.shard_record(index)
        if record is None:
            raise PrismError(f"cache entry {self.entry.dir}: shard {index} was written but its record is unreadable")
        return record


def _context():
    """The start method of the local workers: ``spawn`` (a fresh interpreter: no copy of the driver's threads,
    locks or CUDA state, and no process-wide multiprocessing setting changed for the caller; each worker
    imports torch itself, a few seconds against an extraction's minutes)."""
    import multiprocessing as mp

    return mp.get_context("spawn")


def _local_main(parent_pid: int, slot: WorkerSlot, job: Job, shards: list, results) -> None:
    """A local worker: build the adapter, embed and write its shards, report each record (or the error)."""
    die_with_parent(parent_pid)  # the driver is the OS parent (spawn): the kernel ends this worker with it
    try:
        worker = ShardWorker(slot, job)
        for index, start, stop in shards:
            results.put(("done", slot.rank, worker.run(index, start, stop)))
    except PrismError as exc:
        results.put(("error", slot.rank, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, which stops the others
        import traceback

        results.put(("crash", slot.rank, "".join(traceback.format_exception_only(type(exc), exc)).strip()))


def assign(todo: list[tuple[int, int, int]], count: int) -> list[list[tuple[int, int, int]]]:
    """The shards of each of ``count`` workers: round robin over the shards still to do (worker r gets
    the r-th, (r+count)-th, ... of them), so each worker's share is fixed before any work starts and
    the split of the work never depends on which worker is faster."""
    return [todo[r::count] for r in range(count)]


# -- the driver side ------------------------------------------------------------------------------
class ShardWorkers:
    """``count`` workers that embed the missing shards of one entry (see the module docstring)."""

    name = "local"

    def __init__(self, count: int, device_request: str = "auto"):
        self.count = check_workers(count)
        self.device_request = device_request or "auto"
        #: shard index -> rank of the worker that embedded it (last extraction)
        self.ranks: dict[int, int] = {}

    # to implement: yield (rank, record) as shards finish
    def _run(self, job: Job, todo: list[tuple[int, int, int]], num_workers: int | None) -> Iterator[tuple[int, dict]]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"extract_executor": self.name, "extract_workers": self.count}

    def extract(self, adapter, split, entry, todo: list[tuple[int, int, int]], *, num_workers: int | None = None,
                bar=None) -> int:
        """Embed the shards ``todo`` (``(index, start, stop)``) into ``entry``; the tiles embedded.

        Every shard a worker reports is re-checked here: its record on disk is the one the worker
        wrote and its files match their checksums (:meth:`CacheEntry.shard_done`)."""
        job = Job(adapter_payload(adapter), list(split.paths), np.asarray(split.labels), entry)
        rows = {i: (start, stop) for i, start, stop in todo}
        self.ranks = {}
        done = 0
        for rank, record in self._run(job, todo, num_workers):
            index = int(record["index"])
            start, stop = rows[index]
            if entry.shard_record(index) != record or not entry.shard_done(index, stop - start, start=start):
                raise PrismError(f"cache entry {entry.dir}: shard {index} reported by an extraction worker is missing "
                                 "or corrupt on disk (is the cache on a file system every worker writes to?); "
                                 "rerun to re-extract it")
            self.ranks[index] = rank
            done += stop - start
            if bar is not None:
                bar.update(stop - start)
        missing = sorted(set(rows) - set(self.ranks))
        if missing:
            raise PrismError(f"cache entry {entry.dir}: extraction workers returned without shard(s) "
                             f"{', '.join(map(str, missing[:5]))}; rerun to extract them")
        return done


class LocalShardWorkers(ShardWorkers):
    """Spawned worker processes on this machine (one per GPU, or the CPU cores split between them)."""

    name = "local"
    #: seconds between liveness checks of the workers while waiting for a shard
    poll_seconds = 1.0

    def slots(self, num_workers: int | None = None, count: int | None = None) -> list[WorkerSlot]:
        cuda_count, mps = 0, False
        request = self.device_request.strip().lower()
        if request != "cpu":
            import torch

            cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            mps_backend = getattr(torch.backends, "mps", None)
            mps = bool(mps_backend is not None and mps_backend.is_available())
        return plan_slots(count or self.count, request, cuda_count=cuda_count, cores=cpu_count(), mps=mps,
                          num_workers=num_workers)

    def _run(self, job: Job, todo, num_workers):
        import queue as queue_mod

        self.slots(num_workers)  # the full request is checked (enough GPUs?) even when fewer shards are left
        slots = self.slots(num_workers, count=min(self.count, len(todo)))
        ctx = _context()
        results = ctx.Queue()
        procs = [ctx.Process(target=_local_main, args=(os.getpid(), slot, job, shards, results), daemon=False,
                             name=f"prism-extract-{slot.rank}")
                 for slot, shards in zip(slots, assign(todo, len(slots)))]
        expected = len(todo)
        try:
            for proc in procs:
                proc.start()
            while expected:
                try:
                    kind, rank, value = results.get(timeout=self.poll_seconds)
                except queue_mod.Empty:
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead:
                        code = dead[0].exitcode
                        how = (f"was killed by signal {-code} (SIGKILL: often out of memory)" if code < 0
                               else f"exited with code {code} (its error is printed above)")
                        raise PrismError(f"{FLAG} {self.count}: extraction worker {dead[0].name} {how}; rerun to "
                                         "resume: the finished shards are kept") from None
                    if all(p.exitcode is not None for p in procs):
                        raise PrismError(f"{FLAG} {self.count}: the extraction workers ended with {expected} "
                                         "shard(s) not reported; rerun to extract them")
                    continue
                if kind == "done":
                    expected -= 1
                    yield rank, value
                elif kind == "error":
                    raise PrismError(value)
                else:
                    raise PrismError(f"{FLAG} {self.count}: extraction worker {rank} failed: {value}")
            for proc in procs:
                proc.join(timeout=30)
        finally:
            for proc in procs:  # stopped at once on an error or an interrupt; finished ones are already gone
                if proc.is_alive():
                    proc.kill()
            for proc in procs:
                if proc.pid is not None:
                    proc.join(timeout=5)
            results.close()
            results.join_thread()


class RayShardWorkers(ShardWorkers):
    """Ray actors (``--executor ray [--address HOST:PORT]``): one GPU each on a GPU cluster, else a share of
    the CPUs. The cache folder and the images must be on a file system every node reads and writes."""

    name = "ray"

    def __init__(self, count: int, ray, device_request: str = "auto"):
        super().__init__(count, device_request)
        self.ray = ray

    def slots(self, num_workers: int | None = None) -> tuple[list[WorkerSlot], dict[str, float]]:
        return plan_ray_slots(self.count, self.device_request, dict(self.ray.cluster_resources()), num_workers)

    def _run(self, job: Job, todo, num_workers):
        ray = self.ray
        slots, resources = self.slots(num_workers)
        slots = slots[:len(todo)]
        actor_cls = ray.remote(**resources)(ShardWorker)
        job_ref = ray.put(job)
        actors = [actor_cls.remote(slot, job_ref) for slot in slots]
        running: dict[Any, int] = {}
        try:
            for rank, shards in enumerate(assign(todo, len(actors))):  # an actor runs its calls in order
                for index, start, stop in shards:
                    running[actors[rank].run.remote(index, start, stop)] = rank
            while running:
                finished, _ = ray.wait(list(running), num_returns=1)
                for ref in finished:
                    rank = running.pop(ref)
                    yield rank, self._get(ref)
        finally:
            for actor in actors:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - already gone
                    pass

    def _get(self, ref):
        ray = self.ray
        try:
            return ray.get(ref)
        except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError) as exc:
            cause, seen = exc, 0
            while cause is not None and seen < 5:  # a PrismError raised in the actor (its build included)
                if isinstance(cause, PrismError):
                    raise PrismError(str(cause)) from None
                cause, seen = getattr(cause, "cause", None), seen + 1
            if isinstance(exc, ray.exceptions.RayActorError):
                raise PrismError(f"{FLAG} {self.count}: a Ray extraction actor died ({type(exc).__name__}); rerun "
                                 "to resume: the finished shards are kept") from None
            raise


def make_workers(count: int, executor=None, device_request: str = "auto") -> ShardWorkers | None:
    """The extraction workers for ``--extract-workers count`` under ``executor`` (``None`` for 1: in-process)."""
    count = check_workers(count)
    if count == 1:
        return None
    if executor is not None and getattr(executor, "name", "local") == "ray":
        return RayShardWorkers(count, executor.ray, device_request)
    return LocalShardWorkers(count, device_request)


__all__ = ["FLAG", "Job", "LocalShardWorkers", "RayShardWorkers", "ShardWorker", "ShardWorkers", "WorkerSlot",
           "adapter_payload", "assign", "check_workers", "make_workers", "plan_ray_slots", "plan_slots", "visible_gpus"]
