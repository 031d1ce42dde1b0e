"""Embeddings of a task's splits: from the cache, extracting what is missing (task -> data -> embeddings).

``opts`` is any object with the job options the loading reads (``limit``, ``cache_dir``,
``device``, ``num_workers``, ``progress``, ``allow_size_mismatch``), e.g.
:class:`prism_plugin.runner.JobOptions`. Nothing here imports the runner: summaries that need
embeddings (geometry) call these functions directly.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from prism_plugin.data.catalogue import open_source
from prism_plugin.data.splits import limit_indices
from prism_plugin.embed.cache import EmbeddingCache
from prism_plugin.embed.extract import extract_split, pick_device
from prism_plugin.errors import PrismError
from prism_plugin.protocol.inputs import SplitArrays
from prism_plugin.tasks.schema import TaskConfig
from prism_plugin.versions import library_versions


def check_expected(task: TaskConfig, split: str, y: np.ndarray, opts) -> None:
    """Split size and class counts against those recorded in the task (``--allow-size-mismatch`` warns)."""
    cfg = task.splits[split]
    problems = []
    if cfg.size is not None and len(y) != cfg.size:
        problems.append(f"{len(y)} items, expected {cfg.size}")
    if cfg.class_counts is not None:
        counts = np.bincount(y, minlength=task.n_classes).tolist()
        if counts != list(cfg.class_counts):
            problems.append(f"class counts {counts}, expected {list(cfg.class_counts)}")
    if problems and opts.limit is None:
        msg = f"task {task.name}: split {split!r} has " + "; ".join(problems) + f" (sizes recorded in {task.file})"
        if not opts.allow_size_mismatch:
            raise PrismError(msg + "; pass --allow-size-mismatch to run anyway")
        warnings.warn(msg, stacklevel=2)


def load_embeddings(task: TaskConfig, adapter, opts,
                    only: tuple[str, ...] | None = None, host=None) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    """Embeddings of the task's splits (from the cache, extracting what is missing)."""
    splits: dict[str, SplitArrays] = {}
    info: dict[str, Any] = {"fingerprints": {}, "extracted_tiles": 0, "extraction_seconds": 0.0, "cache": {}}
    wanted = [s for s in task.splits if only is None or s in only]
    if adapter.input_kind == "features":
        for split in wanted:
            cfg = task.splits[split]
            X, y, fp = adapter.load_split(task.embeddings_key, cfg.name)
            if opts.limit is not None:
                keep = limit_indices(np.asarray(y), opts.limit)
                X, y = X[keep], np.asarray(y)[keep]
            splits[split] = SplitArrays(X, y, name=f"{task.name} {split}")
            info["fingerprints"][split] = fp if opts.limit is None else f"{fp}:limit={opts.limit}"
        return splits, info
    source = open_source(task, host=host)
    if source is None:
        raise PrismError(f"task {task.name} reads precomputed embeddings (source.type precomputed); "
                         "run it with --model precomputed --model-args root=DIR")
    cache = EmbeddingCache(opts.cache_dir)
    device = None
    adapter_fp = adapter.fingerprint()
    for split in wanted:
        images = source.split(split, opts.limit)
        check_expected(task, split, images.labels, opts)
        entry = cache.entry(adapter_fp, images.fingerprint, split)
        info["fingerprints"][split] = images.fingerprint
        loaded = entry.load()
        if loaded is None:
            with entry.lock():
                loaded = entry.load()  # another process may have finished it meanwhile
                if loaded is None:
                    device = device or pick_device(opts.device if opts.device != "auto" else adapter.device_request)
                    provenance = {"task": task.name, "dataset": task.dataset, "split": split,
                                  "adapter": adapter.describe(), "dataset_fingerprint": images.fingerprint,
                                  "versions": library_versions()}
                    n_new, secs = extract_split(adapter, images, entry, device=device, num_workers=opts.num_workers,
                                                progress=opts.progress, label=f"{task.name}/{split}",
                                                provenance=provenance)
                    info["extracted_tiles"] += n_new
                    info["extraction_seconds"] += secs
                    loaded = entry.load()
                    if loaded is None:
                        raise PrismError(f"cache entry {entry.dir} could not be written and read back")
                    info["cache"][split] = "extracted"
                else:
                    info["cache"][split] = "hit"
        else:
            info["cache"][split] = "hit"
        X, y = loaded
        info.setdefault("content", {})[split] = (
            f"{images.fingerprint}:{(entry.last_manifest or {}).get('features_checksum', '')}")
        splits[split] = SplitArrays(X, y, name=f"{task.name} {split}")
    return splits, info


def transfer_embeddings(task: TaskConfig, adapter, opts, host=None) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    """Source train/val and target evaluation split, with the task's label maps applied."""
    from prism_plugin.protocol.labels import apply_label_map

    src_cfg, tgt_cfg = task.source_config, task.target_config
    src, src_info = load_embeddings(src_cfg, adapter, opts, only=("train", "val"), host=host)
    tgt, tgt_info = load_embeddings(tgt_cfg, adapter, opts, only=(task.target_split,), host=host)
    out: dict[str, SplitArrays] = {}
    for split, arrays, mapping, role, cfg in (
        ("train", src.get("train"), task.source_labels, "source", src_cfg),
        ("val", src.get("val"), task.source_labels, "source", src_cfg),
        ("test", tgt[task.target_split], task.target_labels, "target", tgt_cfg),
    ):
        if arrays is None:
            continue
        y = apply_label_map(arrays.y, mapping, f"{task.file}: {role}_labels")
        if y.size and int(y.max()) >= task.n_classes:
            raise PrismError(
                f"{task.file}: {role} task {cfg.name} labels map to {sorted(set(y.tolist()))[:10]}, outside the "
                f"transfer task's {task.n_classes} classes; set {role}_labels (e.g. {{positive: [1]}}) so source "
                "and target share one label space"
            )
        out[split] = SplitArrays(arrays.X, y, name=f"{task.name} {role} {cfg.name} {split if role == 'source' else task.target_split}")
    info = {
        "fingerprints": {f"source_{k}": v for k, v in src_info["fingerprints"].items()}
        | {f"target_{k}": v for k, v in tgt_info["fingerprints"].items()},
        "extracted_tiles": src_info["extracted_tiles"] + tgt_info["extracted_tiles"],
        "extraction_seconds": src_info["extraction_seconds"] + tgt_info["extraction_seconds"],
        "cache": {f"source_{k}": v for k, v in src_info["cache"].items()}
        | {f"target_{k}": v for k, v in tgt_info["cache"].items()},
        "content": {f"source_{k}": v for k, v in (src_info.get("content") or src_info["fingerprints"]).items()}
        | {f"target_{k}": v for k, v in (tgt_info.get("content") or tgt_info["fingerprints"]).items()},
    }
    return out, info
