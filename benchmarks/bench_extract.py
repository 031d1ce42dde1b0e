"""Extraction throughput: the full pipeline against a bare forward pass, same model, batch and machine.

Pipeline = what ``prism-run`` does for one split: PNG decode (PIL) ->
preprocessing (Resize + CenterCrop + ToTensor + Normalize, in DataLoader
workers) -> forward (``torch.inference_mode``) -> L2 normalisation -> shards
written atomically -> final ``features.npy`` + manifest, through
:func:`prism_plugin.embed.extract.extract_split` and the real cache.

Bare = the same adapter's ``forward`` on tensors already in memory, same batch
size, same number of torch threads.

    python benchmarks/bench_extract.py                 # ViT-S/16, 512 tiles, batch 64
    python benchmarks/bench_extract.py --n 1024 --workers 2 --device cuda

Prints tiles/s for both and their ratio (target >= 0.9 on CPU). Not a test:
numbers depend on the machine.

    python benchmarks/bench_extract.py --extract-workers 2 --n 512      # 1 vs 2 local worker processes
    python benchmarks/bench_extract.py --extract-workers 2 --ray        # 1 vs 2 Ray actors (local instance)

With ``--extract-workers N`` it compares instead one in-process extraction with the same split
sharded over N workers (``prism-run --extract-workers N``), interleaved, each into a fresh cache
entry: wall time (worker start-up, adapter build, decode, forward, shard writes, merge), the ratio,
and whether the two ``features.npy`` files are byte-identical.

    python benchmarks/bench_extract.py --model h_optimus_0 --device cuda --n 4096 --batch 256   # ViT-g/14, fp16
    python benchmarks/bench_extract.py --model timm:vit_tiny_patch16_224 --model-args img_size=64 --json out.json

``--model NAME`` builds a registered adapter (``prism-run ls adapters``) with random weights
(``pretrained=false``, nothing is downloaded) and its own dtype policy (e.g. H-optimus-0: ViT-g/14,
fp16 autocast on CUDA); without it, ``--arch`` names a timm architecture (random weights, class
token, fp32). The bare forward runs under the same autocast as the pipeline. ``--json FILE`` also
writes the figures to FILE.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def _write_tiles(job: tuple[str, int, int, int, int]) -> None:
    """Tiles ``[start, stop)`` of :func:`make_tiles` (each from its own seeded stream)."""
    import numpy as np
    from PIL import Image

    folder, start, stop, size, seed = job
    base = np.random.default_rng(seed).integers(0, 256, size=(size // 8, size // 8, 3), dtype=np.uint8)
    for i in range(start, stop):
        rng = np.random.default_rng([seed, i])
        small = np.clip(base.astype(int) + rng.integers(-40, 40, size=base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(small).resize((size, size), Image.BILINEAR).save(Path(folder) / f"tile_{i:05d}.png")


def make_tiles(folder: Path, n: int, size: int, seed: int = 0) -> list[Path]:
    """``n`` smooth random RGB PNG tiles (compressible like tissue, not like noise); the same files
    whatever the number of processes writing them (up to 8, for thousands of tiles)."""
    procs = max(1, min(8, (os.cpu_count() or 1) - 1, n // 512))
    step = -(-n // procs)
    jobs = [(str(folder), a, min(n, a + step), size, seed) for a in range(0, n, step)]
    if procs == 1:
        for job in jobs:
            _write_tiles(job)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: the model (and CUDA) already live in this process; the writers need numpy and PIL only
        with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(_write_tiles, jobs))
    return [folder / f"tile_{i:05d}.png" for i in range(n)]


def make_adapter(args):
    """The adapter under test: ``--model`` (a registered adapter, random weights) or timm ``--arch``."""
    if not args.model:
        from prism_plugin.model_adapters.timm_generic import TimmAdapter

        return TimmAdapter(args.arch, pretrained=False, pooling="cls", batch_size=args.batch)
    from prism_plugin.commands.model_args import parse_model_args
    from prism_plugin.plugins import get_host
    from prism_plugin.runner import make_adapter as build

    kwargs = {"pretrained": "false", **parse_model_args(args.model_args), "batch_size": str(args.batch)}
    return build(get_host(), args.model, kwargs)


def autocast_for(adapter, device):
    """The autocast context the pipeline uses (``embed_rows``): the adapter's dtype on CUDA, else none."""
    import torch

    dtype = getattr(adapter, "autocast_dtype", None)
    if device.type == "cuda" and dtype is not None:
        return torch.autocast(device_type="cuda", dtype=dtype)
    return contextlib.nullcontext()


def dtype_of(adapter) -> str:
    from prism_plugin.embed.adapter import dtype_name

    return dtype_name(getattr(adapter, "autocast_dtype", None))


def model_label(args, adapter) -> str:
    return f"{args.model or args.arch} (random weights, {adapter.embed_dim}-d, autocast {dtype_of(adapter)} on CUDA)"


def write_json(path, payload: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(payload, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="vit_small_patch16_224", help="timm architecture (random weights)")
    p.add_argument("--model", default=None, help="a registered adapter instead of --arch, built with random weights "
                                                 "(e.g. h_optimus_0: ViT-g/14, fp16 on CUDA)")
    p.add_argument("--model-args", action="append", default=None, metavar="K=V[,K=V]",
                   help="with --model: adapter options (pretrained=false is implied)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the figures to FILE")
    p.add_argument("--n", type=int, default=512, help="number of tiles")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--tile-size", type=int, default=256, help="side of the PNG tiles on disk")
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: the pipeline's default)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeat", type=int, default=3, help="timed (bare, pipeline) pairs; best of each is reported")
    p.add_argument("--extract-workers", type=int, default=1, metavar="N",
                   help="compare 1 worker with N extraction workers instead (see above)")
    p.add_argument("--ray", action="store_true", help="with --extract-workers: Ray actors on a local instance")
    p.add_argument("--shard", type=int, default=None, help="tiles per shard ($PRISM_SHARD_SIZE; default n / 8)")
    args = p.parse_args(argv)
    if args.extract_workers > 1:
        return compare_workers(args)

    import numpy as np
    import torch

    from prism_plugin.data.base import ImageSplit
    from prism_plugin.embed.cache import EmbeddingCache
    from prism_plugin.embed.extract import default_workers, extract_split, pick_device

    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    adapter = make_adapter(args)
    adapter.build(device)
    adapter._built = True
    workers = default_workers() if args.workers is None else args.workers
    pre = adapter.preprocessing

    with tempfile.TemporaryDirectory(prefix="prism-bench-") as tmp:
        tmp = Path(tmp)
        (tmp / "tiles").mkdir()
        paths = make_tiles(tmp / "tiles", args.n, args.tile_size)
        labels = np.zeros(args.n, dtype=np.int64)

        # -- bare forward on pre-made tensors -------------------------------------------
        transform = pre.transform()
        from PIL import Image

        with Image.open(paths[0]) as im:
            one = transform(im.convert("RGB"))
        data = one.unsqueeze(0).repeat(args.n, 1, 1, 1).contiguous()
        data += torch.randn_like(data) * 0.01

        def cpu_now() -> float:
            """CPU seconds of this process and of its finished children (the DataLoader workers)."""
            import resource

            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            return time.process_time() + kids.ru_utime + kids.ru_stime

        cpu: dict[str, list[float]] = {"bare": [], "pipeline": []}

        def bare() -> float:
            c0 = cpu_now()
            t0 = time.perf_counter()
            with torch.inference_mode():
                for start in range(0, args.n, args.batch):
                    with autocast_for(adapter, device):  # the pipeline's dtype policy (embed_rows)
                        out = adapter.forward(data[start:start + args.batch].to(device))
                    out = torch.nn.functional.normalize(out.float(), dim=1)
                    out.cpu()
            if device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
            cpu["bare"].append(cpu_now() - c0)
            return elapsed

        # -- the pipeline: decode + preprocess + forward + write, through the real cache ------
        def pipeline(rep: int) -> float:
            split = ImageSplit(paths=paths, labels=labels, fingerprint=f"bench-{rep}-{time.time_ns()}")
            cache = EmbeddingCache(tmp / "cache")
            entry = cache.entry(adapter.fingerprint(), split.fingerprint, "test")
            c0 = cpu_now()
            t0 = time.perf_counter()
            with entry.lock():
                n_done, _ = extract_split(adapter, split, entry, device=device, num_workers=workers, progress=False)
            elapsed = time.perf_counter() - t0
            cpu["pipeline"].append(cpu_now() - c0)
            X, _ = entry.load()
            assert X.shape == (args.n, adapter.embed_dim) and n_done == args.n
            return elapsed

        bare()  # warm-up (allocator, kernels)
        # interleaved pairs, so a noisy neighbour on a shared machine hits both sides alike
        pairs = [(bare(), pipeline(r)) for r in range(args.repeat)]
        bare_s = min(b for b, _ in pairs)
        pipe_s = min(p for _, p in pairs)
        paired = sorted(b / p for b, p in pairs)

    bare_tps, pipe_tps = args.n / bare_s, args.n / pipe_s
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"device {device}, DataLoader workers {workers}")
    print(f"model: {model_label(args, adapter)}, batch {args.batch}, {args.n} tiles "
          f"{args.tile_size}px -> Resize {pre.resize} + CenterCrop {pre.crop}")
    print(f"bare forward on pre-made tensors : {bare_tps:8.1f} tiles/s ({bare_s:.2f} s)")
    print(f"full pipeline (decode..write)    : {pipe_tps:8.1f} tiles/s ({pipe_s:.2f} s)")
    print(f"ratio pipeline / bare            : {pipe_tps / bare_tps:8.3f} (best of each); "
          f"per pair: {', '.join(f'{r:.3f}' for r in paired)}")
    cpu_bare, cpu_pipe = min(cpu["bare"][1:] or cpu["bare"]), min(cpu["pipeline"])
    print(f"CPU seconds per tile (all processes): bare {1000 * cpu_bare / args.n:.1f} ms, "
          f"pipeline {1000 * cpu_pipe / args.n:.1f} ms; pipeline overhead {100 * (cpu_pipe / cpu_bare - 1):+.1f} %")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if load > (os.cpu_count() or 1):
        print(f"note: load average {load:.1f} exceeds {os.cpu_count()} CPUs; other processes share the machine")
    write_json(args.json, {
        "mode": "pipeline_vs_bare", "model": args.model or args.arch, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "dtype": dtype_of(adapter), "embed_dim": adapter.embed_dim,
        "n": args.n, "batch": args.batch, "tile_size": args.tile_size, "loader_workers": workers,
        "repeat": args.repeat, "torch": torch.__version__, "cpus": os.cpu_count(),
        "bare_tiles_per_s": bare_tps, "pipeline_tiles_per_s": pipe_tps, "ratio": pipe_tps / bare_tps,
        "ratio_per_pair": paired, "bare_seconds": bare_s, "pipeline_seconds": pipe_s, "loadavg": load,
    })
    return 0


def compare_workers(args) -> int:
    """1 worker (in-process) against ``args.extract_workers`` workers on the same tiles: interleaved pairs."""
    import numpy as np

    from prism_plugin.data.base import ImageSplit
    from prism_plugin.embed.cache import SHARD_ENV, EmbeddingCache
    from prism_plugin.embed.extract import extract_split
    from prism_plugin.embed.workers import LocalShardWorkers, RayShardWorkers

    os.environ[SHARD_ENV] = str(args.shard or max(1, args.n // 8))
    ray = None
    if args.ray:
        import logging

        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    workers = (RayShardWorkers(args.extract_workers, ray, args.device) if ray is not None
               else LocalShardWorkers(args.extract_workers, args.device))
    loader_workers = args.workers if args.workers is not None else 0
    with tempfile.TemporaryDirectory(prefix="prism-bench-") as tmp:
        tmp = Path(tmp)
        (tmp / "tiles").mkdir()
        paths = make_tiles(tmp / "tiles", args.n, args.tile_size)
        labels = np.zeros(args.n, dtype=np.int64)
        times: dict[str, list[float]] = {"one": [], "many": []}
        digests: dict[str, set[bytes]] = {"one": set(), "many": set()}
        for rep in range(args.repeat):
            for kind in ("one", "many"):
                adapter = make_adapter(args)
                split = ImageSplit(paths=paths, labels=labels, fingerprint=f"bench-{kind}-{rep}")
                entry = EmbeddingCache(tmp / f"cache-{kind}-{rep}").entry(adapter.fingerprint(), split.fingerprint, "t")
                t0 = time.perf_counter()
                with entry.lock():  # the build is inside the timing on both sides (each worker builds its own)
                    extract_split(adapter, split, entry, num_workers=loader_workers, progress=False,
                                  workers=workers if kind == "many" else None)
                times[kind].append(time.perf_counter() - t0)
                digests[kind].add((entry.dir / "features.npy").read_bytes())
    one, many = min(times["one"]), min(times["many"])
    where = "Ray actors (local instance)" if ray is not None else "local processes"
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; model {args.model or args.arch} "
          f"(random weights), device {args.device}, "
          f"{args.n} tiles {args.tile_size}px, batch {args.batch}, shard {os.environ[SHARD_ENV]}, "
          f"DataLoader workers {loader_workers}")
    rows = [("1 worker (in-process)", one, times["one"]),
             (f"{args.extract_workers} workers ({where})", many, times["many"])]
    width = max(len(r[0]) for r in rows)
    for name, best, runs in rows:
        print(f"{name:<{width}} : {args.n / best:8.1f} tiles/s ({best:.2f} s; runs {', '.join(f'{t:.2f}' for t in runs)})")
    print(f"{'speed-up, N workers / 1':<{width}} : {one / many:8.3f} (best of each); per pair: "
          f"{', '.join(f'{a / b:.3f}' for a, b in zip(times['one'], times['many']))}")
    same = len(digests["one"] | digests["many"]) == 1
    print(f"features.npy byte-identical across all {2 * args.repeat} extractions: {same}")
    write_json(args.json, {
        "mode": "workers", "model": args.model or args.arch, "device": args.device, "workers": args.extract_workers,
        "executor": "ray" if ray is not None else "local", "n": args.n, "batch": args.batch,
        "shard": int(os.environ[SHARD_ENV]), "repeat": args.repeat, "cpus": os.cpu_count(),
        "one_tiles_per_s": args.n / one, "many_tiles_per_s": args.n / many, "speedup": one / many,
        "seconds_one": times["one"], "seconds_many": times["many"], "byte_identical": same,
    })
    if ray is not None:
        ray.shutdown()
    return 0 if same else 1


def cli(argv: list[str] | None = None) -> int:
    from prism_plugin.errors import PrismError

    try:
        return main(argv)
    except PrismError as exc:  # bad --model / --model-args / --device: one line, no traceback
        print(f"bench_extract: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
