"""Embeddings of a task's splits: from the cache, extracting what is missing (task -> data -> embeddings).

``opts`` is any object with the job options the loading reads (``limit``, ``cache_dir``,
``device``, ``num_workers``, ``progress``, ``allow_size_mismatch``), e.g.
:class:`prism_plugin.runner.JobOptions`. Nothing here imports the runner: summaries that need
embeddings (geometry) call these functions directly.

When every split of a task is loaded (``only=None``, and always for a transfer task), the splits
are validated (:func:`~prism_plugin.protocol.inputs.check_splits`) and checked together
(:func:`~prism_plugin.protocol.inputs.check_data`): the info dict's ``data_checks`` lists what was
found (split overlap, zero rows, extreme scale, one-class test split, rare classes; level
``warning`` or ``allowed``), errors are raised. Identical split definitions (the same split name,
the same data fingerprint) are refused before anything is extracted, unless the task's
``allow_split_overlap`` names the pair.
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
from prism_plugin.protocol.inputs import (ALLOW_KEY, SplitArrays, as_features, as_labels, check_data,
                                         check_pair_lengths,
                                         check_splits, same_definition_problem, split_pair)
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
    """Embeddings of the task's splits (from the cache, extracting what is missing).

    Data sources that keep files of their own (demo tiles, converted hub datasets) keep them under
    ``opts.cache_dir`` when it is given (:func:`prism_plugin.data.datacache.using_cache_dir`)."""
    from prism_plugin.data.datacache import using_cache_dir

    with using_cache_dir(getattr(opts, "cache_dir", None)):
        return _load_embeddings(task, adapter, opts, only, host)


def _load_embeddings(task: TaskConfig, adapter, opts, only: tuple[str, ...] | None,
                     host) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    splits: dict[str, SplitArrays] = {}
    info: dict[str, Any] = {"fingerprints": {}, "extracted_tiles": 0, "extraction_seconds": 0.0, "cache": {},
                            "data_checks": []}
    wanted = [s for s in task.splits if only is None or s in only]
    if only is None:
        problem = definition_problem(task)
        if problem:
            raise PrismError(problem)
    if adapter.input_kind == "features":
        for split in wanted:
            cfg = task.splits[split]
            X, y, fp = adapter.load_split(task.embeddings_key, cfg.name)
            where = f"{task.name} {split} ({adapter.name} adapter, split {cfg.name!r})"
            # labels are checked before --limit picks rows by them: one-hot rows must not be flattened
            y = as_labels(y, f"{where} labels")
            if not isinstance(X, np.ndarray) or X.ndim != 2:
                X = as_features(X, f"{where} features")
            check_pair_lengths(len(X), len(y), where)
            if opts.limit is not None:
                keep = limit_indices(y, opts.limit)
                X, y = X[keep], y[keep]
            splits[split] = SplitArrays(X, y, name=f"{task.name} {split}")
            info["fingerprints"][split] = fp if opts.limit is None else f"{fp}:limit={opts.limit}"
        if only is None:
            info["data_checks"] = _check_loaded(task, splits, info["fingerprints"], opts)
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
        where = f"cache entry {entry.dir}"
        y = as_labels(y, f"{where} labels", strict=True)
        check_pair_lengths(len(X), len(y), where)
        if not np.array_equal(y, images.labels):
            raise PrismError(f"{where}: its labels differ from those of {task.name}/{split}; remove the entry "
                             f"(prism-run cache rm {entry.key[:12]}) and run again")
        info.setdefault("content", {})[split] = (
            f"{images.fingerprint}:{(entry.last_manifest or {}).get('features_checksum', '')}")
        splits[split] = SplitArrays(X, y, name=f"{task.name} {split}")
    if only is None:
        info["data_checks"] = _check_loaded(task, splits, info["fingerprints"], opts)
    return splits, info


def allowed_overlaps(task: TaskConfig) -> tuple:
    """The split pairs the task allows to be identical or to share rows (task key ``allow_split_overlap``)."""
    return tuple((getattr(task, "extras", None) or {}).get(ALLOW_KEY) or ())


def _allow_hint(task: TaskConfig) -> str:
    return f"{ALLOW_KEY}: [{{a}}, {{b}}] in {task.file}"


def same_names(task: TaskConfig) -> dict[tuple[str, str], str]:
    """Split pairs of an in-domain task that read the same source split (``val: heldout``, ``test: heldout``)."""
    out: dict[tuple[str, str], str] = {}
    names = list(task.splits)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if task.splits[a].name == task.splits[b].name:
                out[split_pair(a, b)] = f"both are split {task.splits[a].name!r} of {task.dataset}"
    return out


def transfer_same_names(task: TaskConfig) -> dict[tuple[str, str], str]:
    """Source splits of a transfer task that are the target's evaluation split (same task, same split)."""
    src_cfg, tgt_cfg = task.source_config, task.target_config
    same: dict[tuple[str, str], str] = {}
    target = tgt_cfg.splits.get(task.target_split)
    for split in ("train", "val"):
        mine = src_cfg.splits.get(split)
        if mine is not None and target is not None and src_cfg.name == tgt_cfg.name and mine.name == target.name:
            same[split_pair(split, "test")] = (f"source {split} and target {task.target_split} are both split "
                                               f"{mine.name!r} of {src_cfg.name}")
    return same


def definition_problem(task: TaskConfig) -> str | None:
    """The error for identical split definitions of ``task`` (read from the task alone, before any
    data), or ``None``; what ``prism-run validate`` and the loaders report."""
    same = transfer_same_names(task) if task.is_transfer else same_names(task)
    return same_definition_problem(same, allowed_overlaps(task), f"task {task.name}", allow_hint=_allow_hint(task))


def same_fingerprints(fingerprints: dict[str, str]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    names = list(fingerprints)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if fingerprints[a] and fingerprints[a] == fingerprints[b]:
                out[split_pair(a, b)] = "identical files: same data fingerprint"
    return out


def _check_loaded(task: TaskConfig, splits: dict[str, SplitArrays], fingerprints: dict[str, str], opts,
                  same: dict[tuple[str, str], str] | None = None) -> list[dict[str, Any]]:
    """Validate the splits and check them together (see the module docstring); the data checks found."""
    if "train" not in splits or "test" not in splits:
        return []
    check_splits(splits["train"], splits.get("val"), splits["test"], task.n_classes)
    if same is None:
        same = {**same_fingerprints(fingerprints), **same_names(task)}
    return check_data(splits, same=same, allowed=allowed_overlaps(task), where=f"task {task.name}",
                      small_classes=getattr(opts, "limit", None) is None, allow_hint=_allow_hint(task))


def transfer_embeddings(task: TaskConfig, adapter, opts, host=None) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    """Source train/val and target evaluation split, with the task's label maps applied."""
    from prism_plugin.protocol.labels import apply_label_map

    src_cfg, tgt_cfg = task.source_config, task.target_config
    problem = definition_problem(task)
    if problem:
        raise PrismError(problem)
    same = transfer_same_names(task)
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
    for split in ("train", "val"):
        fp = src_info["fingerprints"].get(split)
        if split in out and fp and fp == tgt_info["fingerprints"].get(task.target_split):
            same.setdefault(split_pair(split, "test"), f"source {src_cfg.name} {split} and target {tgt_cfg.name} "
                                                       f"{task.target_split} are identical: same data fingerprint")
    data_checks = _check_loaded(task, out, {}, opts, same=same)
    info = {
        "fingerprints": {f"source_{k}": v for k, v in src_info["fingerprints"].items()}
        | {f"target_{k}": v for k, v in tgt_info["fingerprints"].items()},
        "extracted_tiles": src_info["extracted_tiles"] + tgt_info["extracted_tiles"],
        "extraction_seconds": src_info["extraction_seconds"] + tgt_info["extraction_seconds"],
        "cache": {f"source_{k}": v for k, v in src_info["cache"].items()}
        | {f"target_{k}": v for k, v in tgt_info["cache"].items()},
        "content": {f"source_{k}": v for k, v in (src_info.get("content") or src_info["fingerprints"]).items()}
        | {f"target_{k}": v for k, v in (tgt_info.get("content") or tgt_info["fingerprints"]).items()},
        "data_checks": data_checks,
    }
    return out, info
