"""The main job: task -> data -> embeddings -> runs -> tables -> report.

:func:`run_job` is what ``prism-run --task T --model M`` calls for each
(task, model) pair. Each stage only reads the output of the stage before it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from prism_plugin import __version__
from prism_plugin.data.sources import open_source
from prism_plugin.embed.cache import EmbeddingCache
from prism_plugin.embed.extract import extract_split, pick_device
from prism_plugin.errors import PrismError
from prism_plugin.protocol.grid import GridSpec, RunKey, grid_keys, run_grid
from prism_plugin.protocol.inputs import SplitArrays, check_splits
from prism_plugin.results import ResultsDir, cell_stats, rows_to_frame
from prism_plugin.tasks.schema import TaskConfig

SUMMARY_METRICS = ["auroc", "f1_macro", "brier", "nll", "ece_fixed", "ece_adaptive", "temperature",
                   "ece_scaled_fixed", "ece_scaled_adaptive", "degeneracy_share"]

#: Libraries whose versions can change the numbers; part of the run fingerprint.
NUMERIC_LIBS = ("numpy", "scipy", "scikit-learn")


@dataclass
class JobOptions:
    output: Path
    model_args: dict[str, Any] = field(default_factory=dict)
    cache_dir: Path | None = None
    device: str = "auto"
    num_workers: int | None = None
    limit: int | None = None
    allow_size_mismatch: bool = False
    progress: bool = True
    report: bool = True
    log: Callable[[str], None] = print
    #: where the grid runs (see prism_plugin.executors); None = in-process
    executor: Any = None


@dataclass
class JobResult:
    task: TaskConfig
    results_dir: Path
    runs: pd.DataFrame
    summary: dict[str, Any]


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "prism-plugin": __version__}
    for lib in ("numpy", "scipy", "scikit-learn", "pandas", "torch", "torchvision", "timm", "pluggy"):
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            out[lib] = "absent"
    return out


def make_adapter(host, name: str, model_args: dict[str, Any]):
    entry = host.adapter_factory(name)
    kwargs = dict(model_args)
    if entry.name.endswith(":"):
        kwargs["name"] = name
    return entry.factory(**kwargs)


def _check_expected(task: TaskConfig, split: str, y: np.ndarray, opts: JobOptions) -> None:
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


def load_embeddings(task: TaskConfig, adapter, opts: JobOptions,
                    only: tuple[str, ...] | None = None) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    """Embeddings of the task's splits (from the cache, extracting what is missing)."""
    splits: dict[str, SplitArrays] = {}
    info: dict[str, Any] = {"fingerprints": {}, "extracted_tiles": 0, "extraction_seconds": 0.0, "cache": {}}
    wanted = [s for s in task.splits if only is None or s in only]
    if adapter.input_kind == "features":
        for split in wanted:
            cfg = task.splits[split]
            X, y, fp = adapter.load_split(task.embeddings_key, cfg.name)
            if opts.limit is not None:
                from prism_plugin.data.sources import _limit_indices

                keep = _limit_indices(np.asarray(y), opts.limit)
                X, y = X[keep], np.asarray(y)[keep]
            splits[split] = SplitArrays(X, y, name=f"{task.name} {split}")
            info["fingerprints"][split] = fp if opts.limit is None else f"{fp}:limit={opts.limit}"
        return splits, info
    source = open_source(task)
    if source is None:
        raise PrismError(f"task {task.name} reads precomputed embeddings (source.type precomputed); "
                         "run it with --model precomputed --model-args root=DIR")
    cache = EmbeddingCache(opts.cache_dir)
    device = None
    adapter_fp = adapter.fingerprint()
    for split in wanted:
        images = source.split(split, opts.limit)
        _check_expected(task, split, images.labels, opts)
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


def transfer_embeddings(task: TaskConfig, adapter, opts: JobOptions) -> tuple[dict[str, SplitArrays], dict[str, Any]]:
    """Source train/val and target evaluation split, with the task's label maps applied."""
    from prism_plugin.protocol.labels import apply_label_map

    src_cfg, tgt_cfg = task.source_config, task.target_config
    src, src_info = load_embeddings(src_cfg, adapter, opts, only=("train", "val"))
    tgt, tgt_info = load_embeddings(tgt_cfg, adapter, opts, only=(task.target_split,))
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


#: Task keys a single run's numbers do not depend on: where the task came from, and
#: the grid's shape (each cell is keyed by its own fraction and seed), so a grid
#: extended by a seed or a fraction reuses the runs it already has.
CELL_INDEPENDENT_KEYS = ("file", "description", "tags", "label_fractions", "seeds")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def metric_plugins(host) -> dict[str, str]:
    """The plugins that add columns to a run (run_metrics) or fit it (probe_heads), with their origin."""
    out: dict[str, str] = {}
    for hook in (host.pm.hook.run_metrics, host.pm.hook.probe_heads):
        for impl in hook.get_hookimpls():
            info = host.infos.get(impl.plugin_name)
            out[impl.plugin_name] = info.origin if info is not None else impl.plugin_name
    return dict(sorted(out.items()))


def fingerprint_parts(task: TaskConfig, adapter, emb_info: dict[str, Any], host=None) -> dict[str, Any]:
    """Everything a run's numbers depend on, as short digests (JSON-plain), per component.

    With ``host``, the enabled metric/probe plugins (and their versions) are part
    of it: a run saved with another set of columns is not mixed into the table.
    """
    versions = library_versions()
    resolved = task.resolved()
    for member in ("source_config", "target_config"):
        if isinstance(resolved.get(member), dict):
            resolved[member] = {k: v for k, v in resolved[member].items() if k not in CELL_INDEPENDENT_KEYS}
    embeddings = emb_info.get("content") or emb_info["fingerprints"]
    return {
        "task": {k: _digest(v) for k, v in sorted(resolved.items()) if k not in CELL_INDEPENDENT_KEYS},
        "adapter": adapter.fingerprint(),
        "embeddings": {str(k): str(v) for k, v in sorted(embeddings.items())},
        "versions": {k: versions.get(k) for k in NUMERIC_LIBS + ("prism-plugin",)},
        **({"plugins": metric_plugins(host)} if host is not None else {}),
    }


def run_fingerprint(task: TaskConfig, adapter, emb_info: dict[str, Any]) -> str:
    return _digest_full(fingerprint_parts(task, adapter, emb_info))


def _digest_full(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _safe_name(text: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text).strip(".") or "_"
    return safe[:120]


def default_output(base: Path, task: str, adapter_name: str) -> Path:
    return base / _safe_name(task) / _safe_name(adapter_name)


def _check_before_work(task: TaskConfig, opts: JobOptions) -> None:
    """Problems that would otherwise surface only after the extraction: fail before it."""
    ids = [RunKey(float(f), int(s)).id for f in task.label_fractions for s in task.seeds]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise PrismError(f"{task.file}: label_fractions/seeds give two runs the same id {dup[0]!r} (fractions "
                         "equal to 6 significant digits); remove the near-duplicate value")
    out = Path(opts.output)
    if out.exists() and not out.is_dir():
        raise PrismError(f"--output {out}: exists and is not a folder; pass a results folder")
    parent = next((p for p in [out, *out.parents] if p.exists()), None)
    if parent is not None and (not parent.is_dir() or not os.access(parent, os.W_OK)):
        raise PrismError(f"--output {out}: cannot write under {parent}; pass a writable results folder")


def run_job(task: TaskConfig, adapter, host, opts: JobOptions) -> JobResult:
    """Run one task for one adapter; write and return the results directory."""
    t_start = time.perf_counter()
    _check_before_work(task, opts)
    if task.is_transfer:
        splits, emb_info = transfer_embeddings(task, adapter, opts)
    else:
        splits, emb_info = load_embeddings(task, adapter, opts)
    k = check_splits(splits["train"], splits.get("val"), splits["test"], task.n_classes)
    if "val" not in splits:
        warnings.warn(f"task {task.name} has no validation split: temperature and scaled ECE are NaN "
                      "(the temperature is never fitted on test)", stacklevel=2)
    spec = GridSpec(
        fractions=task.label_fractions, seeds=task.seeds, probe=task.probe, ece_bins=task.ece_bins,
        binary_logits=task.binary_logits, t_bounds=task.temperature_bounds, proportional_val=task.proportional_val,
    )
    results = ResultsDir(opts.output)
    parts = fingerprint_parts(task, adapter, emb_info, host)
    fingerprint = _digest_full(parts)
    keys = list(grid_keys(spec))
    reused, stale = [], []

    def exact(key) -> dict[str, Any]:
        return {"fraction": key.fraction, "seed": key.seed}

    def skip(key) -> bool:
        row, reason = results.load_cell(task.name, key.id, fingerprint, parts, expect=exact(key))
        if row is not None:
            reused.append(key.id)
            return True
        if reason:
            stale.append({"cell": key.id, "reason": reason.split(": ", 1)[-1]})
        return False

    if task.is_transfer:
        columns = {"src": task.src, "tgt": task.tgt, "pair": task.pair}
    else:
        columns = {"dataset": task.dataset}
    columns.update(task.columns)
    table = task.reference_table or ("transfer" if task.is_transfer else
                                     "indomain_propval" if task.proportional_val else "indomain")
    ident = {"reference_table": table, "task": task.name, "adapter": adapter.name, "model": adapter.display_name, "dataset": task.dataset,
             "class_names": task.class_names, "columns": columns,
             "meta": {"kind": task.kind, "src": task.src, "tgt": task.tgt, "pair": task.pair,
                      "results_dir": str(results.path), "adaptation": task.adaptation, "priors": task.priors},
             "artifact_dir": results.path / "artifacts"}
    t_grid = time.perf_counter()
    def save(key, row) -> None:
        results.save_cell(task.name, key.id, fingerprint, row, parts)

    executor = opts.executor
    if executor is None or (executor.name == "local" and executor.jobs == 1):
        run_grid(splits["train"], splits.get("val"), splits["test"], k, spec, host, ident, skip=skip, on_row=save)
    else:
        from prism_plugin.executors import GridJob, SplitRef, driver_blas_threads, plan_units

        job = GridJob(SplitRef.of(splits["train"]), SplitRef.of(splits["val"]) if "val" in splits else None,
                      SplitRef.of(splits["test"]), k, spec, ident, tuple(sorted(host.disabled)),
                      blas_threads=driver_blas_threads())
        for key, row in executor.run(job, plan_units(spec, skip)):
            save(key, row)
    grid_seconds = time.perf_counter() - t_grid
    if stale:
        by_reason: dict[str, list[str]] = {}
        for s in stale:
            by_reason.setdefault(s["reason"], []).append(s["cell"])
        for why, cells in by_reason.items():
            opts.log(f"{task.name}: recomputed {len(cells)} saved run(s) not reusable: {why} "
                     f"({', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''})")
    rows = []
    for key in keys:  # assemble from the persisted cells: resumed == uninterrupted
        row, reason = results.load_cell(task.name, key.id, fingerprint, parts, expect=exact(key))
        if row is None:
            raise PrismError(f"results cell {key.id} of {task.name} is missing after the run ({reason})")
        rows.append(row)
    runs = rows_to_frame(rows)
    results.write_runs(runs)
    collapsed = sorted({float(r["fraction"]) for r in rows if r.get("degenerate")})
    if collapsed:
        msg = (f"{adapter.display_name} on {task.name}: probe collapsed (>99% of test predictions in one class) "
               f"at fraction(s) {', '.join(f'{f:g}' for f in collapsed)}")
        warnings.warn(msg, stacklevel=2)
    summary = {
        "task": task.name,
        "model": adapter.display_name,
        "adapter": adapter.describe(),
        "resolved_task": task.resolved(),
        "n_runs": len(rows),
        "cells": cell_stats(runs, ["model", *columns], SUMMARY_METRICS + ["temperature_src"]),
        "collapsed_fractions": collapsed,
        "reused_cells": reused,
        "stale_cells": stale,
        "run_fingerprint": fingerprint,
        "fingerprints": {"adapter": adapter.fingerprint(), "data": emb_info["fingerprints"]},
        "embedding_cache": emb_info["cache"],
        "versions": library_versions(),
        "timings": {"extraction_seconds": round(emb_info["extraction_seconds"], 3),
                    "extracted_tiles": emb_info["extracted_tiles"],
                    "grid_seconds": round(grid_seconds, 3),
                    "total_seconds": round(time.perf_counter() - t_start, 3)},
    }
    results.write_json("summary.json", summary)
    if opts.report:
        from prism_plugin.report.build import write_report

        write_report(results.path, host)
    return JobResult(task, results.path, runs, summary)


def compact_table(runs: pd.DataFrame) -> str:
    """Seed mean ± std per fraction of the headline metrics, as fixed-width text."""
    cols = [c for c in ("auroc", "f1_macro", "ece_fixed", "ece_scaled_fixed", "temperature") if c in runs]
    lines = [f"{'fraction':>8}  " + "  ".join(f"{c:>17}" for c in cols) + "  collapsed"]
    for frac, g in runs.groupby("fraction", sort=True):
        cells = []
        for c in cols:
            v = pd.to_numeric(g[c], errors="coerce")
            sd = v.std(ddof=1) if len(v) > 1 else float("nan")
            cells.append(f"{v.mean():>8.4f} ± {sd:<6.4f}")
        n_deg = int(g["degenerate"].astype(bool).sum()) if "degenerate" in g else 0
        lines.append(f"{frac:>8g}  " + "  ".join(cells) + f"  {n_deg}/{len(g)}")
    return "\n".join(lines)
