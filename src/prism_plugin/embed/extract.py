"""The extraction loop: decode -> preprocess -> forward -> L2-normalise -> cached shards."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from prism_plugin.data.base import ImageSplit
from prism_plugin.embed.adapter import Adapter
from prism_plugin.embed.cache import CacheEntry, shard_size
from prism_plugin.embed.device import pick_device
from prism_plugin.errors import PrismError

SHARD_SIZE = 2048


class ImageFiles:
    """A map-style dataset over image files (decoded with PIL, converted to RGB)."""

    def __init__(self, paths: list[Path], transform):
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(self.paths[i]) as im:
                return self.transform(im.convert("RGB"))
        except (OSError, UnidentifiedImageError) as exc:
            raise PrismError(f"{self.paths[i]}: cannot be decoded as an image ({exc})") from None


def default_workers() -> int:
    return max(0, min(4, (os.cpu_count() or 1) - 1))


def check_precision(adapter: Adapter, device, autocast: bool) -> None:
    """The precision these rows are computed in must be the one the cache key names
    (:func:`~prism_plugin.embed.adapter.precision_identity`, recorded when the key was made): a worker on
    another kind of device than the driver resolved (a GPU actor for a CPU driver) would otherwise write bf16
    numbers under an fp32 key."""
    from prism_plugin.embed.adapter import dtype_name

    keyed = (getattr(adapter, "__dict__", {}).get("_precision") or {}).get("precision")
    ran = dtype_name(adapter.autocast_dtype) if autocast else "fp32"
    if keyed is not None and keyed != ran:
        raise PrismError(f"adapter {adapter.name}: its embeddings are keyed as {keyed} (the job's device), but "
                         f"this process extracts on {device} in {ran}; pass --device explicitly (e.g. --device cuda "
                         "or --device cpu) so the driver and every extraction worker use the same kind of device")


def embed_rows(adapter: Adapter, dataset, start: int, stop: int, device, num_workers: int, bar=None) -> np.ndarray:
    """The float32 embeddings of rows ``[start, stop)`` of ``dataset`` (one shard), in eval/inference mode.

    Batches start at ``start`` and hold ``adapter.batch_size`` rows (the last one the remainder): the
    batch composition of a shard never depends on who computes it (this process or a worker of
    :mod:`prism_plugin.embed.workers`), so neither do its bytes.
    """
    import torch
    from torch.utils.data import DataLoader, Subset

    autocast = device.type == "cuda" and getattr(adapter, "autocast_dtype", None) is not None
    check_precision(adapter, device, autocast)
    loader = DataLoader(Subset(dataset, range(start, stop)), batch_size=adapter.batch_size,
                        num_workers=num_workers, shuffle=False, pin_memory=device.type == "cuda",
                        persistent_workers=False)
    feats = np.empty((stop - start, adapter.embed_dim), dtype=np.float32)
    pos = 0
    with torch.inference_mode():
        for batch in loader:
            batch = batch.to(device, non_blocking=True)
            if autocast:
                with torch.autocast(device_type="cuda", dtype=adapter.autocast_dtype):
                    out = adapter.forward(batch)
            else:
                out = adapter.forward(batch)
            out = out.float()
            if out.ndim != 2 or out.shape[1] != adapter.embed_dim:
                raise PrismError(f"adapter {adapter.name} returned shape {tuple(out.shape)}; "
                                 f"it declares embed_dim = {adapter.embed_dim}")
            if adapter.normalize:
                out = torch.nn.functional.normalize(out, p=2, dim=1, eps=1e-12)
            feats[pos:pos + out.shape[0]] = out.cpu().numpy()
            pos += out.shape[0]
            if bar is not None:
                bar.update(out.shape[0])
    return feats


def shard_layout(n: int, size: int) -> list[tuple[int, int, int]]:
    """``(index, start, stop)`` of every shard of an ``n``-row split: shard k = rows ``[k*size, (k+1)*size)``
    of the split's order (at least one shard, possibly empty)."""
    return [(i, i * size, min(n, (i + 1) * size)) for i in range(max(1, -(-n // size)))]


def extract_split(
    adapter: Adapter,
    split: ImageSplit,
    entry: CacheEntry,
    *,
    device=None,
    num_workers: int | None = None,
    progress: bool = True,
    label: str = "",
    provenance: dict[str, Any] | None = None,
    workers=None,
) -> tuple[int, float]:
    """Fill ``entry`` with the embeddings of ``split``; return (tiles embedded now, seconds).

    Shards already on disk (from an interrupted run) are kept; the caller
    holds the entry's lock. ``workers`` (a :class:`prism_plugin.embed.workers.ShardWorkers`, e.g.
    from :func:`prism_plugin.executors.extraction_workers`) embeds the missing shards in several
    processes or Ray actors, each writing its shards into the entry; the driver then verifies every
    shard record and merges them exactly as after an in-process extraction (the same bytes).
    """
    n = len(split)
    size = shard_size(SHARD_SIZE)  # $PRISM_SHARD_SIZE overrides the module default
    layout = shard_layout(n, size)
    n_shards = len(layout)
    todo = [(i, start, stop) for i, start, stop in layout if not entry.shard_done(i, stop - start, start=start)]
    t0 = time.perf_counter()
    done_now = 0
    if todo:
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=sum(stop - start for _, start, stop in todo), unit="tile",
                       desc=label or "embedding", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
        try:
            if workers is not None and workers.count > 1 and len(todo) > 1:
                done_now = workers.extract(adapter, split, entry, todo, num_workers=num_workers, bar=bar)
            else:
                device = device or pick_device(adapter.device_request)
                if not getattr(adapter, "_built", False):
                    adapter.build(device)
                    adapter._built = True
                dataset = ImageFiles(split.paths, adapter.preprocessing.transform())
                loader_workers = default_workers() if num_workers is None else num_workers
                for i, start, stop in todo:
                    feats = embed_rows(adapter, dataset, start, stop, device, loader_workers, bar)
                    entry.write_shard(i, feats, split.labels[start:stop], start=start)
                    done_now += stop - start
        finally:
            if bar is not None:
                bar.close()
    entry.finalize(n_shards, adapter.embed_dim, provenance or {})
    return done_now, time.perf_counter() - t0
