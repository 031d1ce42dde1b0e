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
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def make_tiles(folder: Path, n: int, size: int, seed: int = 0) -> list[Path]:
    """``n`` smooth random RGB PNG tiles (compressible like tissue, not like noise)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    base = rng.integers(0, 256, size=(size // 8, size // 8, 3), dtype=np.uint8)
    for i in range(n):
        small = np.clip(base.astype(int) + rng.integers(-40, 40, size=base.shape), 0, 255).astype(np.uint8)
        im = Image.fromarray(small).resize((size, size), Image.BILINEAR)
        path = folder / f"tile_{i:05d}.png"
        im.save(path)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="vit_small_patch16_224", help="timm architecture (random weights)")
    p.add_argument("--n", type=int, default=512, help="number of tiles")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--tile-size", type=int, default=256, help="side of the PNG tiles on disk")
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: the pipeline's default)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeat", type=int, default=3, help="timed (bare, pipeline) pairs; best of each is reported")
    args = p.parse_args(argv)

    import numpy as np
    import torch

    from prism_plugin.data.sources import ImageSplit
    from prism_plugin.embed.cache import EmbeddingCache
    from prism_plugin.embed.extract import default_workers, extract_split, pick_device
    from prism_plugin.model_adapters.timm_generic import TimmAdapter

    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    adapter = TimmAdapter(args.arch, pretrained=False, pooling="cls", batch_size=args.batch)
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
    print(f"model: {args.arch} (random weights, {adapter.embed_dim}-d), batch {args.batch}, {args.n} tiles "
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
