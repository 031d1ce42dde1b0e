"""Embeddings of a task's splits: from the cache, extracting what is missing (task -> data -> embeddings).

``opts`` is any object with the job options the loading reads (``limit``, ``cache_dir``, ``device``,
``num_workers``, ``progress``, ``allow_size_mismatch``; optionally ``extract_workers`` and ``executor`` for a split
extracted by several workers, see :func:`shard_workers`), e.g. :class:`prism_plugin.runner.JobOptions`. Nothing
here imports the runner: summaries that need embeddings (geometry) call these functions directly.

When every split of a task is loaded (``only=None``, and always for a transfer task), the splits are validated
(:func:`~prism_plugin.protocol.inputs.check_splits`) and checked together
(:func:`~prism_plugin.protocol.inputs.check_data`): the info dict's ``data_checks`` lists what was found (split
overlap, zero rows, extreme scale, one-class test split, rare classes; level ``warning`` or ``allowed``), errors
are raised. Identical split definitions (the same split name, the same data fingerprint) are refused before
anything is extracted, unless the task's ``allow_split_overlap`` names the pair.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from prism_plugin.data.catalogue import open_source
from prism_plugin.data.splits import limit_indices
from prism_plugin.embed.cache import EmbeddingCache
from prism_plugin.embed.device import pick_device
from prism_plugin.embed.extract import extract_split
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


def shard_workers(adapter, opts):
    """The workers of ``opts.extract_workers`` (``--extract-workers N``, default 1: in-process) under
    ``opts.executor`` (local processes, or Ray actors with ``--executor ray``); ``None`` for 1."""
    count = getattr(opts, "extract_workers", None)
    if count is None or count == 1:
        return None
    from prism_plugin.executors import extraction_workers

    device = getattr(opts, "device", "auto") or "auto"
    return extraction_workers(getattr(opts, "executor", None), count,
                              device if device != "auto" else adapter.device_request)


def identity_fingerprint(adapter, opts) -> str:
    """The adapter's fingerprint as this job's cache key: the precision is the one the job's device computes
    (``--device``, else the adapter's ``device=``; a bf16/fp16 request off CUDA is fp32) and a hub model's
    commit is resolved now, before any extraction (:mod:`prism_plugin.embed.hub`); the commit resolution is
    recorded under ``opts.cache_dir``."""
    from prism_plugin.data.datacache import using_cache_dir
    from prism_plugin.embed.adapter import bind_extraction_device

    bind_extraction_device(adapter, getattr(opts, "device", "auto") or "auto")
    with using_cache_dir(getattr(opts, "cache_dir", None)):
        return adapter.fingerprint()


def provenance_identity(adapter) -> dict[str, Any]:
    """The embedding identity a cache entry's manifest records (precision, weights, hub commit)."""
    from prism_plugin.embed.adapter import embedding_identity

    ident = embedding_identity(adapter)
    return {k: ident.get(k) for k in ("precision", "precision_requested", "device", "weights", "weights_revision")}


def load_embeddings(task: TaskConfig, adapter, opts,
                    only: tuple[str, ...] | None = None, host=None) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    """Embeddings of the task's splits (from the cache, extracting what is missing).

    Data sources that keep files of their own (demo tiles, converted hub datasets) keep them under
    ``opts.cache_dir`` when it is given (:func:`prism_plugin.data.datacache.using_cache_dir`)."""
    from prism_plugin.data.datacache import using_cache_dir

    with using_cache_dir(getattr(opts, "cache_dir", None)):
        return _load_embeddings(task, adapter, opts, only, host)


def feature_source(task: TaskConfig, adapter, host=None):
    """The feature source a features adapter (``--model precomputed``) reads ``task`` from: the adapter's
    own (``adapter.feature_source(task)``, e.g. ``--model-args root=DIR``), else the task's, of kind features."""
    source = adapter.feature_source(task)
    if source is None:
        source = open_source(task, host=host)
        if getattr(source, "input_kind", "images") != "features":
            raise PrismError(f"task {task.name}: source type {task.source.get('type')} yields images, and --model "
                             f"{adapter.name} reads embedding vectors: pass --model-args root=DIR (embeddings/<model>) "
                             "or path=DIR, or run an image encoder")
    return source


def image_source(task: TaskConfig, adapter, host=None):
    """The task's source for an image adapter; a feature source is refused (its vectors need no adapter)."""
    source = open_source(task, host=host)
    if getattr(source, "input_kind", "images") != "images":
        raise PrismError(f"task {task.name}: source type {task.source.get('type')} yields embedding vectors, not "
                         f"images, so adapter {adapter.name} has nothing to embed; run it with --model precomputed")
    return source


def read_feature_split(source, name: str, where: str):
    """``(X, y, fingerprint)`` of one source-level split of a feature source, checked: labels 1-D integers
    (before ``--limit`` picks rows by them: one-hot rows must not be flattened), features a 2-D matrix,
    equal lengths; ``where`` names the split in messages."""
    split = source.features(name)
    return (*checked_features(split.X, split.y, where), split.fingerprint)


def checked_features(X, y, where: str):
    """``(X, y)`` of a features split, checked (see :func:`read_feature_split`)."""
    y = as_labels(y, f"{where} labels")
    if not isinstance(X, np.ndarray) or X.ndim != 2:
        X = as_features(X, f"{where} features")
    check_pair_lengths(len(X), len(y), where)
    return X, y


def limited(X, y, opts):
    """The ``--limit`` rows of a split (class-balanced), or the split itself."""
    if opts.limit is None:
        return X, y
    keep = limit_indices(y, opts.limit)
    return X[keep], y[keep]


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
        source = feature_source(task, adapter, host)
        for split in wanted:
            cfg = task.splits[split]
            where = f"{task.name} {split} ({adapter.name} adapter, split {cfg.name!r})"
            X, y, fp = read_feature_split(source, cfg.name, where)
            X, y = limited(X, y, opts)
            splits[split] = SplitArrays(X, y, name=f"{task.name} {split}")
            info["fingerprints"][split] = fp if opts.limit is None else f"{fp}:limit={opts.limit}"
        if only is None:
            info["data_checks"] = _check_loaded(task, splits, info["fingerprints"], opts)
        return splits, info
    source = image_source(task, adapter, host)
    cache = EmbeddingCache(opts.cache_dir)
    device = None
    adapter_fp = identity_fingerprint(adapter, opts)
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
                                  "identity": provenance_identity(adapter), "versions": library_versions()}
                    n_new, secs = extract_split(adapter, images, entry, device=device, num_workers=opts.num_workers,
                                                progress=opts.progress, label=f"{task.name}/{split}",
                                                provenance=provenance, workers=shard_workers(adapter, opts))
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
    from prism_plugin.data.labels import check_task_classes  # --limit / class_names named before the data is

    check_task_classes(task, {name: s.y for name, s in splits.items()}, getattr(opts, "limit", None))
    check_splits(splits["train"], splits.get("val"), splits["test"], task.n_classes)
    if same is None:
        same = {**same_fingerprints(fingerprints), **same_names(task)}
    return check_data(splits, same=same, allowed=allowed_overlaps(task), where=f"task {task.name}",
                      small_classes=getattr(opts, "limit", None) is None, allow_hint=_allow_hint(task))


def transfer_embeddings(task: TaskConfig, adapter, opts, host=None) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    """Source train/val and target evaluation split, with the task's label maps applied."""
    src_cfg, tgt_cfg = task.source_config, task.target_config
    problem = definition_problem(task)
    if problem:
        raise PrismError(problem)
    src, src_info = load_embeddings(src_cfg, adapter, opts, only=("train", "val"), host=host)
    tgt, tgt_info = load_embeddings(tgt_cfg, adapter, opts, only=(task.target_split,), host=host)
    return _combine_transfer(task, src, src_info, tgt, tgt_info, opts)


def _combine_transfer(task: TaskConfig, src: dict[str, SplitArrays], src_info: dict[str, Any],
                      tgt: dict[str, SplitArrays], tgt_info: dict[str, Any],
                      opts) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    """The source train/val and target evaluation split of a transfer task, label maps applied and
    checked together."""
    from prism_plugin.protocol.labels import apply_label_map

    src_cfg, tgt_cfg = task.source_config, task.target_config
    same = transfer_same_names(task)
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
    if "reused_tiles" in src_info or "reused_tiles" in tgt_info:
        info["reused_tiles"] = src_info.get("reused_tiles", 0) + tgt_info.get("reused_tiles", 0)
    return out, info


# --------------------------------------------------------------------------- split seeds (grid dimension)
class PoolStore:
    """The embeddings one job has loaded, by image: ``(scope, item key, label)`` -> a row of an array.

    A task with ``split_seeds`` carves every split seed's splits out of one pool of images; the splits of split
    seed 1 are the images of split seed 0's train and held-out splits in another order. Their cache entries (keyed,
    as ever, by the split's fingerprint) are used when they exist; a split without one whose images are all here is
    gathered from these rows instead of being extracted again (``info["cache"][split] = "reused"``). ``scope`` is
    the task name (two datasets may share relative item keys).
    """

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._arrays: list[np.ndarray] = []

    def add(self, scope: str, keys: list[str] | None, labels: np.ndarray, X: np.ndarray) -> None:
        if keys is None or len(keys) != len(X):
            return
        slot = len(self._arrays)
        self._arrays.append(X)
        for i, (key, y) in enumerate(zip(keys, np.asarray(labels).tolist())):
            self._rows.setdefault((scope, key, int(y)), (slot, i))

    def covers(self, scope: str, keys: list[str] | None, labels: np.ndarray) -> bool:
        return keys is not None and len(keys) > 0 and all(
            (scope, key, int(y)) in self._rows for key, y in zip(keys, np.asarray(labels).tolist()))

    def gather(self, scope: str, keys: list[str], labels: np.ndarray) -> np.ndarray:
        where = np.asarray([self._rows[(scope, key, int(y))] for key, y in zip(keys, np.asarray(labels).tolist())])
        first = self._arrays[int(where[0, 0])]
        out = np.empty((len(where), first.shape[1]), dtype=np.float32)
        for slot in np.unique(where[:, 0]):
            mask = where[:, 0] == slot
            out[mask] = np.asarray(self._arrays[int(slot)][where[mask, 1]], dtype=np.float32)
        return out


@dataclass
class _Planned:
    split: str
    images: Any
    keys: list[str] | None
    entry: Any
    loaded: tuple[np.ndarray, np.ndarray] | None = None


def _split_keys(source, task: TaskConfig, split: str, limit: int | None) -> list[str] | None:
    """The stable item keys of a split, in its order (as :meth:`prism_plugin.data.base.Source.split`
    picks them); ``None`` when the source does not expose them."""
    try:
        pool, idx, y = source.part(task.splits[split].name)
    except (AttributeError, TypeError):
        return None
    if limit is not None:
        idx = idx[limit_indices(y, limit)]
    return [str(pool.keys[i]) for i in idx]


def _features_digest(X: np.ndarray) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=20)
    h.update(f"{X.shape}|{X.dtype}|".encode())
    h.update(np.ascontiguousarray(X).tobytes())
    return h.hexdigest()


class _SplitSeedLoader:
    """Loads the splits of each split seed of one task (see :func:`load_split_seeds`)."""

    def __init__(self, adapter, opts, host) -> None:
        self.adapter, self.opts, self.host = adapter, opts, host
        self.store = PoolStore()
        self.cache = None if adapter.input_kind == "features" else EmbeddingCache(opts.cache_dir)
        self.adapter_fp = None if self.cache is None else identity_fingerprint(adapter, opts)
        self.device = None
        self._pools: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}

    # -- image adapters: plan every split first (cache hits feed the store), then materialise --
    def plan(self, task: TaskConfig, wanted: tuple[str, ...]) -> list[_Planned]:
        source = image_source(task, self.adapter, self.host)
        out = []
        for split in wanted:
            images = source.split(split, self.opts.limit)
            check_expected(task, split, images.labels, self.opts)
            keys = _split_keys(source, task, split, self.opts.limit)
            plan = _Planned(split, images, keys if keys is not None and len(keys) == len(images) else None,
                            self.cache.entry(self.adapter_fp, images.fingerprint, split))
            plan.loaded = plan.entry.load()
            if plan.loaded is not None:
                self.store.add(task.name, plan.keys, plan.images.labels, plan.loaded[0])
            out.append(plan)
        return out

    def materialise(self, task: TaskConfig, plans: list[_Planned]) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
        opts, adapter = self.opts, self.adapter
        info: dict[str, Any] = {"fingerprints": {}, "extracted_tiles": 0, "extraction_seconds": 0.0, "cache": {},
                                "data_checks": [], "content": {}, "reused_tiles": 0}
        splits: dict[str, SplitArrays] = {}
        for plan in plans:
            split, images, entry = plan.split, plan.images, plan.entry
            info["fingerprints"][split] = images.fingerprint
            loaded, how = plan.loaded, "hit"
            if loaded is None:
                loaded = entry.load()
            if loaded is None and self.store.covers(task.name, plan.keys, images.labels):
                X = self.store.gather(task.name, plan.keys, images.labels)  # no image embedded twice
                loaded, how = (X, np.asarray(images.labels, dtype=np.int64)), "reused"
                info["reused_tiles"] += len(X)
            if loaded is None:
                with entry.lock():
                    loaded = entry.load()
                    if loaded is None:
                        self.device = self.device or pick_device(opts.device if opts.device != "auto"
                                                                 else adapter.device_request)
                        provenance = {"task": task.name, "dataset": task.dataset, "split": split,
                                      "adapter": adapter.describe(), "dataset_fingerprint": images.fingerprint,
                                      "identity": provenance_identity(adapter), "versions": library_versions()}
                        n_new, secs = extract_split(adapter, images, entry, device=self.device,
                                                    num_workers=opts.num_workers, progress=opts.progress,
                                                    label=f"{task.name}/{split}", provenance=provenance,
                                                    workers=shard_workers(adapter, opts))
                        info["extracted_tiles"] += n_new
                        info["extraction_seconds"] += secs
                        loaded = entry.load()
                        if loaded is None:
                            raise PrismError(f"cache entry {entry.dir} could not be written and read back")
                        how = "extracted"
            X, y = loaded
            where = f"cache entry {entry.dir}" if how != "reused" else f"{task.name}/{split} (gathered rows)"
            y = as_labels(y, f"{where} labels", strict=True)
            check_pair_lengths(len(X), len(y), where)
            if not np.array_equal(y, images.labels):
                raise PrismError(f"{where}: its labels differ from those of {task.name}/{split}; remove the entry "
                                 f"(prism-run cache rm {entry.key[:12]}) and run again")
            info["cache"][split] = how
            # the features themselves, whether read from the split's entry or gathered from other split
            # seeds' rows: the same features give the same run fingerprint either way
            info["content"][split] = f"{images.fingerprint}:rows:{_features_digest(np.asarray(X))}"
            self.store.add(task.name, plan.keys, images.labels, X)
            splits[split] = SplitArrays(X, y, name=f"{task.name} {split}")
        return splits, info

    # -- features adapters: the procedure applied to the pool the split: key names --
    def features(self, task: TaskConfig, wanted: tuple[str, ...]) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
        from prism_plugin.data.splits import run_split_procedure

        opts = self.opts
        info: dict[str, Any] = {"fingerprints": {}, "extracted_tiles": 0, "extraction_seconds": 0.0, "cache": {},
                                "data_checks": []}
        spec = task.split
        parts: dict[str, np.ndarray] = {}
        source = feature_source(task, self.adapter, self.host)
        if spec:
            pool_X, pool_y, pool_fp = self._pool(task, source)
            parts = run_split_procedure(spec, pool_y, f"task {task.name}: the pool of split.from")
            proc = _features_digest(np.frombuffer(json.dumps(spec, sort_keys=True).encode(), dtype=np.uint8))[:16]
        splits: dict[str, SplitArrays] = {}
        for split in wanted:
            cfg = task.splits[split]
            where = f"{task.name} {split} ({self.adapter.name} adapter, split {cfg.name!r})"
            if cfg.name in parts:
                idx = parts[cfg.name]
                X, y, fp = pool_X[idx], pool_y[idx], f"{pool_fp}:split-{proc}:{cfg.name}"
            else:
                X, y, fp = read_feature_split(source, cfg.name, where)
            X, y = limited(X, y, opts)
            check_expected(task, split, y, opts)
            splits[split] = SplitArrays(X, y, name=f"{task.name} {split}")
            info["fingerprints"][split] = fp if opts.limit is None else f"{fp}:limit={opts.limit}"
        return splits, info

    def _pool(self, task: TaskConfig, source) -> tuple[np.ndarray, np.ndarray, str]:
        """The pool of ``split.from`` (several names: concatenated in order) of a feature source, read once."""
        spec = task.split
        names = [spec["from"]] if isinstance(spec["from"], str) else list(spec["from"])
        cache_key = f"{task.name}|{task.embeddings_key}|{'+'.join(names)}"
        if cache_key in self._pools:
            return self._pools[cache_key]
        Xs, ys, fps = [], [], []
        for name in names:
            where = f"{task.name} pool {name!r} ({self.adapter.name} adapter)"
            try:
                X, y, fp = read_feature_split(source, name, where)
            except PrismError as exc:
                raise PrismError(f"task {task.name}: split_seeds with a feature source applies the split: "
                                 f"procedure to the pool it splits (split.from: {name}); {exc}") from None
            Xs.append(X)
            ys.append(y)
            fps.append(fp)
        out = (Xs[0] if len(Xs) == 1 else np.concatenate(Xs), ys[0] if len(ys) == 1 else np.concatenate(ys),
               "+".join(fps))
        self._pools[cache_key] = out
        return out

    def load(self, task: TaskConfig, wanted: tuple[str, ...],
             plans: list[_Planned] | None = None) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
        if self.cache is None:
            return self.features(task, wanted)
        return self.materialise(task, plans if plans is not None else self.plan(task, wanted))


def load_split_seeds(task: TaskConfig, adapter, opts, host=None) -> list[tuple[int | None, TaskConfig,
                                                                               dict[str, SplitArrays], dict[str, Any]]]:
    """``(split_seed, task at that split seed, splits, info)`` for every split seed of a task with
    ``split_seeds`` (else its one set of splits, split seed ``None``, exactly as :func:`load_embeddings`
    / :func:`transfer_embeddings`).

    No image is embedded twice across split seeds (:class:`PoolStore`): image adapters use the cache entries of
    each split seed's splits where they exist (the same keys as a run with ``--set split.seed=N``, so entries of
    earlier runs are used) and gather a missing split from the rows of the others; only images that no split seed
    has yet are extracted. A feature source's pool is read once and split by the procedure for each split seed. A
    transfer task varies its source split only: the target split is loaded once, at the target task's own
    ``split.seed``.
    """
    from prism_plugin.data.splits import with_split_seed

    if adapter.input_kind == "features":
        perturbed = [t for t in (task, task.source_config, task.target_config)
                     if t is not None and (t.extras or {}).get("perturb")]
        if perturbed:
            raise PrismError(f"task {perturbed[0].name}: perturb: is a synthetic image perturbation, but --model "
                             f"{adapter.name} reads embedding vectors (nothing to perturb); run an image "
                             "encoder, or drop perturb")

    seeds = tuple(getattr(task, "split_seeds", ()) or ())
    if not seeds:
        loaded = transfer_embeddings(task, adapter, opts, host=host) if task.is_transfer else \
            load_embeddings(task, adapter, opts, host=host)
        return [(None, task, *loaded)]
    variants = [(seed, with_split_seed(task, seed)) for seed in seeds]
    problem = definition_problem(task)
    if problem:
        raise PrismError(problem)
    loader = _SplitSeedLoader(adapter, opts, host)
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            return _load_seeds(task, variants, loader, opts)
    finally:  # said on the error path too: a corrupt entry or a size mismatch often explains the error
        seen: set[str] = set()
        for w in caught:  # a data check that holds for every split seed is said once, not once per seed
            text = f"{w.category.__name__}: {w.message}"
            if text not in seen:
                seen.add(text)
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _load_seeds(task: TaskConfig, variants: list, loader: _SplitSeedLoader, opts) -> list:
    from prism_plugin.data.datacache import using_cache_dir

    out = []
    with using_cache_dir(getattr(opts, "cache_dir", None)):
        if task.is_transfer:
            tgt_cfg = task.target_config
            wanted_src = tuple(s for s in ("train", "val") if s in task.source_config.splits)
            plans = [loader.plan(v.source_config, wanted_src) if loader.cache is not None else None
                     for _, v in variants]
            own = (task.source_config.split or {}).get("seed")
            if loader.cache is not None and own is not None and own not in {seed for seed, _ in variants}:
                loader.plan(task.source_config, wanted_src)  # its cached entries (an earlier run) feed the pool
            tgt, tgt_info = loader.load(tgt_cfg, (task.target_split,))
            for (seed, variant), plan in zip(variants, plans):
                src, src_info = loader.load(variant.source_config, wanted_src, plan)
                out.append((seed, variant, *_combine_transfer(variant, src, src_info, tgt, tgt_info, opts)))
            return out
        wanted = tuple(task.splits)
        plans = [loader.plan(v, wanted) if loader.cache is not None else None for _, v in variants]
        own = (task.split or {}).get("seed")
        if loader.cache is not None and own is not None and own not in {seed for seed, _ in variants}:
            loader.plan(task, wanted)  # the task's own split seed: its cached entries (an earlier run) feed the pool
        for (seed, variant), plan in zip(variants, plans):
            splits, info = loader.load(variant, wanted, plan)
            info["data_checks"] = _check_loaded(variant, splits, info["fingerprints"], opts)
            out.append((seed, variant, splits, info))
    return out
