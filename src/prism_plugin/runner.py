"""The main job: task -> data -> embeddings -> runs -> tables -> report.

:func:`run_job` is what ``prism-run --task T --model M`` calls for each (task, model) pair. Each stage only reads
the output of the stage before it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from prism_plugin import manifest, quality
from prism_plugin.embed.adapter import identity_columns
from prism_plugin.errors import PrismError
from prism_plugin.metrics.descriptions import metric_infos
from prism_plugin.protocol.grid import GridSpec, RunKey, grid_keys, run_grid, run_suffix
from prism_plugin.protocol.inputs import check_splits
from prism_plugin.results import RUNS_NAME, ResultsDir, check_layout, rows_to_frame
from prism_plugin.aggregation import cell_stats
from prism_plugin.kept_runs import check_grid_kept
from prism_plugin.tasks.schema import TaskConfig
from prism_plugin.versions import NUMERIC_LIBS, library_versions


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
    #: ``--extract-workers N``: a split's missing shards embedded by N workers (local processes, or Ray
    #: actors under a Ray executor; see prism_plugin.embed.workers); 1 = in this process
    extract_workers: int = 1
    #: ``--overwrite``: replace the folder's runs.csv even when this grid drops some of its runs
    overwrite: bool = False
    #: probe fits shared with the command's other jobs that fit on the same data (a transfer task and
    #: its source's in-domain task: prism_plugin.protocol.fit_memo); None = every grid fits its own
    fit_memo: Any = None


@dataclass
class JobResult:
    task: TaskConfig
    results_dir: Path
    runs: pd.DataFrame
    summary: dict[str, Any]


def fit_tag(task: TaskConfig, model_label: str) -> tuple[str, str]:
    """(model, the task whose train and val splits the probe is fitted on): a transfer task fits on its source
    task's, any other task on its own (the unit :class:`~prism_plugin.protocol.fit_memo.FitMemo` plans with)."""
    return (str(model_label), str(task.source_task) if task.is_transfer else str(task.name))


def _fit_data_key(task: TaskConfig, adapter_fp: str, split_seed, emb_info: dict[str, Any]) -> str | None:
    """What the fitted probe's inputs are, as the loader fingerprinted them: the adapter's fingerprint and the
    content of the train and val features (a transfer task's are its source's); None when the loader gave none."""
    prefix = "source_" if task.is_transfer else ""
    content, prints = emb_info.get("content") or {}, emb_info.get("fingerprints") or {}
    train = content.get(prefix + "train") or prints.get(prefix + "train")
    if not train:
        return None
    val = content.get(prefix + "val") or prints.get(prefix + "val")
    return json.dumps([adapter_fp, split_seed, str(train), str(val) if val else None])


def make_adapter(host, name: str, model_args: dict[str, Any]):
    entry = host.adapter_factory(name)
    kwargs = dict(model_args)
    if entry.name.endswith(":"):
        kwargs["name"] = name
    return entry.factory(**kwargs)


#: Task keys a single run's numbers do not depend on: where the task came from, and
#: the grid's shape (each cell is keyed by its own fraction and seed, and its fingerprint holds its
#: own split seed and probe), so a grid extended by a seed, a fraction, a split seed or a probe
#: reuses the runs it already has.
CELL_INDEPENDENT_KEYS = ("file", "description", "tags", "label_fractions", "seeds", "split_seeds", "probes")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def metric_plugins(host) -> dict[str, str]:
    """The plugins that add columns to a run (run_metrics), fit it (heads) or describe how its columns aggregate
    (metrics), with their origin."""
    out: dict[str, str] = {}
    for hook in ("run_metrics", "register_heads", "probe_heads", "register_metrics"):
        for plugin in host.implementations(hook):
            out[plugin] = host.origin(plugin)
    return dict(sorted(out.items()))


def fingerprint_parts(task: TaskConfig, adapter, emb_info: dict[str, Any], host=None) -> dict[str, Any]:
    """Everything a run's numbers depend on, as short digests (JSON-plain), per component.

    With ``host``, the enabled metric/probe plugins (and their versions) are part
    of it: a run saved with another set of columns is not mixed into the table.
    """
    versions = library_versions()
    resolved = task.resolved()
    descriptive = _descriptive_keys(host)
    resolved["extras"] = _result_extras(resolved.get("extras"), descriptive)
    for member in ("source_config", "target_config"):
        if isinstance(resolved.get(member), dict):
            resolved[member] = {k: v for k, v in resolved[member].items() if k not in CELL_INDEPENDENT_KEYS}
            resolved[member]["extras"] = _result_extras(resolved[member].get("extras"), descriptive)
    embeddings = emb_info.get("content") or emb_info["fingerprints"]
    return {
        "task": {k: _digest(v) for k, v in sorted(resolved.items()) if k not in CELL_INDEPENDENT_KEYS},
        "adapter": adapter.fingerprint(),
        "embeddings": {str(k): str(v) for k, v in sorted(embeddings.items())},
        "versions": {k: versions.get(k) for k in NUMERIC_LIBS + ("prism-plugin",)},
        **({"plugins": metric_plugins(host)} if host is not None else {}),
    }


def _member_perturbation(task: TaskConfig) -> dict[str, Any]:
    """``{"perturb": ...}`` of a transfer task whose target (else source) task is a synthetic perturbation domain
    (the key lives in that member's file), so plugins see it on the run."""
    if task.extras.get("perturb") or not task.is_transfer:
        return {}
    for member in (task.target_config, task.source_config):
        if member is not None and (member.extras or {}).get("perturb"):
            return {"perturb": member.extras["perturb"]}
    return {}


def _descriptive_keys(host) -> set[str]:
    """Task keys registered with ``results=False`` (labels that change no number)."""
    from prism_plugin.plugins import host_or_shared

    reg = host_or_shared(host).task_keys
    return {name for name in reg.names() if not getattr(reg.get(name), "results", True)}


def _result_extras(extras: Any, descriptive: set[str]) -> Any:
    """A task's plugin keys as far as its numbers depend on them: an absent key (value None) and a descriptive one
    are left out, so registering or declaring one keeps finished runs reusable."""
    if not isinstance(extras, dict):
        return extras
    return {k: v for k, v in extras.items() if v is not None and k not in descriptive}


def run_fingerprint(task: TaskConfig, adapter, emb_info: dict[str, Any]) -> str:
    return _digest_full(fingerprint_parts(task, adapter, emb_info))


def _digest_full(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def default_output(base: Path, task: str, adapter_name: str) -> Path:
    """``base/<task>/<model>``: both names sanitised to one component each and confined under ``base``."""
    from prism_plugin.paths import confined

    return confined(base, task, adapter_name)


def has_grid_keys(task: TaskConfig) -> bool:
    """Whether the task uses the ``split_seeds`` / ``probes`` grid dimensions (its run ids carry them)."""
    return bool(getattr(task, "split_seeds", ()) or getattr(task, "probes", ()))


def grid_units(task: TaskConfig) -> list[tuple[int | None, dict[str, Any], str]]:
    """``(split seed, probe, run-id suffix)`` of every grid unit, in grid order (split seed, then probe); one unit
    ``(None, task.probe, "")`` for a task without the ``split_seeds`` / ``probes`` keys."""
    out = []
    for split_seed in task.grid_split_seeds:
        for probe in task.grid_probes:
            suffix = run_suffix(split_seed if task.split_seeds else None,
                                str(probe.get("kind", "logistic")) if task.probes else None)
            out.append((split_seed, dict(probe), suffix))
    return out


def planned_runs(task: TaskConfig, model: str) -> list[tuple]:
    """The runs the task's results folder will hold, as :func:`prism_plugin.results.check_grid_kept` takes them:
    ``(task, model, fraction, seed)``, or with the grid-dimension keys ``(task, model, fraction, seed, split seed,
    probe kind)``."""
    if not has_grid_keys(task):
        return [(task.name, model, float(f), int(s)) for f in task.label_fractions for s in task.seeds]
    return [(task.name, model, float(f), int(s), split_seed, str(probe.get("kind", "logistic")))
            for split_seed, probe, _ in grid_units(task) for f in task.label_fractions for s in task.seeds]


def check_before_work(task: TaskConfig, opts: JobOptions, model: str | None = None) -> None:
    """Problems that would otherwise surface only after the extraction: fail before it.

    ``model``: the ``model`` column of this run (the adapter's display name); with it, a grid that
    would drop runs of the folder's existing ``runs.csv`` is refused unless ``opts.overwrite``.
    """
    ids = [RunKey(float(f), int(s)).id + suffix for _, _, suffix in grid_units(task)
           for f in task.label_fractions for s in task.seeds]
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
    if out.is_dir():
        check_layout(out)
        if model is not None:
            check_grid_kept(out / RUNS_NAME, planned_runs(task, model), overwrite=getattr(opts, "overwrite", False),
                            where=f"--output {out}")


@dataclass
class _Unit:
    """One (split seed, probe) of a task's grid: its splits, its probe spec and its cells' fingerprint."""

    split_seed: int | None
    probe: dict[str, Any]
    suffix: str
    splits: dict[str, Any]
    n_classes: int
    spec: GridSpec
    parts: dict[str, Any]
    fingerprint: str
    keys: list[RunKey]

    def cell(self, key: RunKey) -> str:
        return key.id + self.suffix

    def expect(self, task: TaskConfig, key: RunKey) -> dict[str, Any]:
        """The identity a saved cell of this unit must have."""
        out: dict[str, Any] = {"fraction": key.fraction, "seed": key.seed}
        if has_grid_keys(task):
            if task.split_seeds:
                out["split_seed"] = self.split_seed
            out["probe"] = str(self.probe.get("kind", "logistic"))
        return out


def _merge_checks(infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The data checks of every split seed, each distinct one once."""
    out, seen = [], set()
    for info in infos:
        for c in info.get("data_checks") or ():
            mark = json.dumps(c, sort_keys=True, default=str)
            if mark not in seen:
                seen.add(mark)
                out.append(c)
    return out


def run_job(task: TaskConfig, adapter, host, opts: JobOptions) -> JobResult:
    """Run one task for one adapter; write and return the results directory.

    The grid is split seed x probe x label fraction x seed for a task with ``split_seeds`` / ``probes``
    (:mod:`prism_plugin.tasks.grid_keys`), label fraction x seed otherwise; each (split seed, probe)
    runs :func:`~prism_plugin.protocol.grid.run_grid` on its splits. The results folder is locked while it is
    written (:mod:`prism_plugin.folder_lock`: another process writing it is refused; re-entrant).
    """
    from prism_plugin.folder_lock import writing

    with writing(opts.output, wait=bool(getattr(opts, "wait", False))):  # one writer per results folder
        return _run_job(task, adapter, host, opts)


def _run_job(task: TaskConfig, adapter, host, opts: JobOptions) -> JobResult:
    from prism_plugin.embed.load import load_split_seeds

    t_start = time.perf_counter()
    check_before_work(task, opts, adapter.display_name)
    loaded = load_split_seeds(task, adapter, opts, host=host)  # (split seed, task at it, splits, info)
    infos = [info for *_, info in loaded]
    results = ResultsDir(opts.output)
    units = _plan_units(task, adapter, loaded, host)
    saved = {unit.cell(key): results.load_cell(task.name, unit.cell(key), unit.fingerprint, unit.parts,
                                               expect=unit.expect(task, key))
             for unit in units for key in unit.keys}
    runs_by_base = {results.cell_path(task.name, rid).stem: rid for rid in saved}
    for rid, why in manifest.tampered(results.path, runs_by_base).items():
        if saved[rid][0] is not None:  # a run whose artifacts changed after the run wrote them is recomputed
            saved[rid] = (None, why)
    if not opts.overwrite:  # finished runs of other inputs are never replaced without a word
        _refuse_changed_inputs(results, task, units, saved)
    columns, ident = _identity(task, adapter, results)
    identity = _embedding_identity(adapter, opts)
    ident["identity_columns"] = identity_columns(identity)  # each cell records what its embeddings are
    t_grid = time.perf_counter()
    reused, stale, shared_fits = _run_units(task, adapter, host, opts, units, saved, loaded, results, ident)
    grid_seconds = time.perf_counter() - t_grid
    _log_stale(task, stale, opts.log)
    rows, ids = _assemble(task, adapter, units, results, columns, identity_columns(identity))
    runs = rows_to_frame(rows)
    results.write_runs(runs)  # first invalidates a summary/report of other content (a kill leaves no mismatch)
    gone = [n for n in results.invalidated if n.startswith("report.")]
    if gone and not opts.report:
        opts.log(f"{task.name}: removed {' and '.join(gone)} of {results.path}: they described the earlier "
                 f"runs.csv (`prism-run report {results.path}` rebuilds them)")
    flags, collapsed, degenerate = _flag_runs(task, adapter, host, opts, runs, rows, ids, infos)
    flags = flags + _identity_flags(task, adapter, identity, ids, opts)
    runs.attrs["flags"] = [f.to_dict() for f in flags]
    by_seed = len(loaded) > 1

    def per_seed(field_name: str) -> Any:
        if not by_seed:
            return infos[0][field_name]
        return {f"split_seed={seed}": info[field_name] for seed, _, _, info in loaded}

    cell_by = ["model", *columns] + (["probe"] if task.probes and "probe" in runs else [])
    summary = {
        "task": task.name,
        "model": adapter.display_name,
        "adapter": adapter.describe(),
        # the adapter's declared pretraining datasets (None = not declared); never part of a fingerprint
        "pretraining_data": _pretraining_data(adapter),
        # what the embeddings are: the precision they were computed in and the weights' hub commit
        "embedding_identity": identity,
        "resolved_task": task.resolved(),
        "n_runs": len(rows),
        **({"grid": {"split_seeds": list(task.split_seeds),
                     "probes": [str(p.get("kind", "logistic")) for p in task.grid_probes],
                     "label_fractions": list(task.label_fractions), "seeds": list(task.seeds)}}
           if has_grid_keys(task) else {}),
        "cells": cell_stats(runs, cell_by, metric_infos(host, "summary")),
        "collapsed_fractions": collapsed,
        "degenerate_fractions": degenerate,
        "qualified": quality.qualified(flags),
        "flags": [f.to_dict() for f in flags],
        "reused_cells": reused,
        "stale_cells": stale,
        "run_fingerprint": units[0].fingerprint if len(units) == 1 else
        _digest_full({u.suffix: u.fingerprint for u in units}),
        "fingerprints": {"adapter": adapter.fingerprint(), "data": per_seed("fingerprints")},
        "embedding_cache": per_seed("cache"),
        "versions": library_versions(),
        "timings": {"extraction_seconds": round(sum(i["extraction_seconds"] for i in infos), 3),
                    "extracted_tiles": sum(i["extracted_tiles"] for i in infos),
                    **({"reused_tiles": sum(i.get("reused_tiles", 0) for i in infos)}
                       if any("reused_tiles" in i for i in infos) else {}),
                    "grid_seconds": round(grid_seconds, 3),
                    # probe fits taken from an earlier job of this command that fitted on the same data
                    "shared_fits": shared_fits,
                    "total_seconds": round(time.perf_counter() - t_start, 3)},
    }
    from prism_plugin.heads.fast_record import fast_mode_record

    fast_mode = fast_mode_record(rows)  # probe.backend fast: its timed trial, decision and reason per grid
    if fast_mode is not None:
        summary["fast_mode"] = fast_mode
    for entry in host.task_keys.entries():  # what a plugin's task key adds (the bootstrap's cells[].ci)
        key = host.task_keys.get(entry.name)
        if getattr(key, "summary", None) is not None:
            summary[entry.name] = key.summary(task.extras.get(entry.name), cells=summary["cells"], runs=runs,
                                              run_ids=ids, artifact_dir=ident["artifact_dir"], task=task.name,
                                              cell_by=cell_by)
    results.write_json("summary.json", summary)
    if opts.report:
        from prism_plugin.report.build import write_report

        write_report(results.path, host)
    return JobResult(task, results.path, runs, summary)


def _plan_units(task: TaskConfig, adapter, loaded: list, host) -> list[_Unit]:
    """One :class:`_Unit` per (split seed, probe) of the grid, with its splits and fingerprint."""
    gridded = has_grid_keys(task)
    units: list[_Unit] = []
    warned_val = False
    for split_seed, variant, splits, emb_info in loaded:
        k = check_splits(splits["train"], splits.get("val"), splits["test"], task.n_classes)
        if "val" not in splits and not warned_val:
            warned_val = True
            warnings.warn(f"task {task.name} has no validation split: temperature and scaled ECE are NaN "
                          "(the temperature is never fitted on test)", stacklevel=3)
        for seed_of_split, probe, suffix in grid_units(task):
            if seed_of_split != split_seed:
                continue
            cell_task = dataclasses.replace(variant, probe=dict(probe)) if gridded else task
            spec = GridSpec(
                fractions=task.label_fractions, seeds=task.seeds, probe=probe, ece_bins=task.ece_bins,
                binary_logits=task.binary_logits, t_bounds=task.temperature_bounds,
                proportional_val=task.proportional_val,
            )
            parts = fingerprint_parts(cell_task, adapter, emb_info, host)
            units.append(_Unit(split_seed, probe, suffix, splits, k, spec, parts, _digest_full(parts),
                               list(grid_keys(spec))))
    return units


def _refuse_changed_inputs(results: ResultsDir, task: TaskConfig, units: list[_Unit], saved: dict) -> None:
    """A saved run of this folder computed from other inputs is an error unless ``--overwrite``."""
    changed: dict[str, list[str]] = {}
    for unit in units:
        for key in unit.keys:
            cid = unit.cell(key)
            why = results.inputs_changed(task.name, cid, unit.fingerprint, unit.parts) if saved[cid][1] else None
            if why:
                changed.setdefault(why, []).append(cid)
    if changed:
        n = sum(map(len, changed.values()))
        why, cells = next(iter(changed.items()))
        raise PrismError(
            f"--output {results.path}: {n} finished run(s) of {task.name} there were computed from other inputs "
            f"({why}; {', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''}); pass --overwrite to recompute "
            "them in this folder, or choose another --output to keep both")


def _identity(task: TaskConfig, adapter, results: ResultsDir) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the identity columns of every row, what the grid hands each run besides its data)."""
    if task.is_transfer:
        columns = {"src": task.src, "tgt": task.tgt, "pair": task.pair}
        if task.extras.get("shift"):  # the declared shift kind (tables.tables_from_results routes by it)
            columns["shift"] = str(task.extras["shift"])
    else:
        columns = {"dataset": task.dataset}
    columns.update(task.columns)
    table = task.reference_table or ("transfer" if task.is_transfer else
                                     "indomain_propval" if task.proportional_val else "indomain")
    ident = {"reference_table": table, "task": task.name, "adapter": adapter.name, "model": adapter.display_name,
             "dataset": task.dataset, "class_names": task.class_names, "columns": columns,
             "meta": {**task.extras, **_member_perturbation(task), "kind": task.kind, "src": task.src,
                      "tgt": task.tgt, "pair": task.pair,
                      "results_dir": str(results.path), "adaptation": task.adaptation, "priors": task.priors},
             "artifact_dir": results.path / "artifacts"}
    return columns, ident


def _run_units(task: TaskConfig, adapter, host, opts: JobOptions, units: list[_Unit], saved: dict, loaded: list,
               results: ResultsDir, ident: dict[str, Any]) -> tuple[list[str], list[dict[str, str]], int]:
    """Run every unit's missing cells (in-process or on ``opts.executor``), saving each as it comes; returns
    (reused cell ids, stale cells, probe fits shared with an earlier job)."""
    reused: list[str] = []
    stale: list[dict[str, str]] = []
    executor = opts.executor
    in_process = executor is None or executor.in_process
    memo = opts.fit_memo if in_process else None
    tag = fit_tag(task, adapter.display_name)
    data_keys = ({split_seed: _fit_data_key(task, units[0].parts["adapter"], split_seed, info)
                  for split_seed, _, _, info in loaded} if memo is not None and units else {})
    shared_fits = 0
    for unit in units:
        def skip(key, unit=unit) -> bool:
            cid = unit.cell(key)
            row, reason = saved[cid]  # each saved cell is read once, before the grid
            if row is not None:
                reused.append(cid)
                return True
            if reason:
                stale.append({"cell": cid, "reason": reason.split(": ", 1)[-1]})
            return False

        def save(key, row, unit=unit) -> None:
            results.save_cell(task.name, unit.cell(key), unit.fingerprint, row, unit.parts)

        unit_ident = dict(ident)
        if has_grid_keys(task):
            unit_ident["run_suffix"] = unit.suffix
            if task.split_seeds:
                unit_ident["split_seed"] = unit.split_seed
        splits = unit.splits
        if in_process:
            key = data_keys.get(unit.split_seed)
            scope = memo.scope(tag, key) if memo is not None and key is not None else None
            run_grid(splits["train"], splits.get("val"), splits["test"], unit.n_classes, unit.spec, host, unit_ident,
                     skip=skip, on_row=save, fits=scope)
            shared_fits += scope.hits if scope is not None else 0
        else:
            from prism_plugin.executors import GridJob, SplitRef, driver_blas_threads, plan_units

            job = GridJob(SplitRef.of(splits["train"]), SplitRef.of(splits["val"]) if "val" in splits else None,
                          SplitRef.of(splits["test"]), unit.n_classes, unit.spec, unit_ident,
                          tuple(sorted(host.disabled)), blas_threads=driver_blas_threads())
            for key, row in executor.run(job, plan_units(unit.spec, skip)):
                save(key, row)
    if memo is not None:
        memo.done(tag)
    return reused, stale, shared_fits


def _log_stale(task: TaskConfig, stale: list[dict[str, str]], log: Callable[[str], None]) -> None:
    by_reason: dict[str, list[str]] = {}
    for s in stale:
        by_reason.setdefault(s["reason"], []).append(s["cell"])
    for why, cells in by_reason.items():
        log(f"{task.name}: recomputed {len(cells)} saved run(s) not reusable: {why} "
            f"({', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''})")


def _embedding_identity(adapter, opts: JobOptions) -> dict[str, Any]:
    """:func:`~prism_plugin.embed.adapter.embedding_identity` of the job's adapter (its device bound as the
    loader bound it; the hub commit as the loader resolved it)."""
    from prism_plugin.data.datacache import using_cache_dir
    from prism_plugin.embed.adapter import bind_extraction_device, embedding_identity

    bind_extraction_device(adapter, getattr(opts, "device", "auto") or "auto")
    with using_cache_dir(getattr(opts, "cache_dir", None)):
        return embedding_identity(adapter)


def _identity_flags(task: TaskConfig, adapter, identity: dict[str, Any], ids: list[str],
                    opts: JobOptions) -> list:
    """The embedding identity's notes as flags of every run (source ``embeddings``), each said on the console."""
    out = [quality.Flag(n["check"], n["level"] if n["level"] in quality.LEVELS else "warning", n["message"],
                        len(ids), len(ids), tuple(ids), source="embeddings")
           for n in identity.get("notes") or ()]
    for line in quality.console_lines(out, f"{adapter.display_name} on {task.name}"):
        opts.log(line)
    return out


def _assemble(task: TaskConfig, adapter, units: list[_Unit], results: ResultsDir,
              columns: dict[str, Any], identity: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows and run ids of the job, read back from the persisted cells: resumed == uninterrupted.

    ``identity``: the embedding identity columns (precision, weights, hub commit) of every row; a cell is
    reused only when the adapter's fingerprint, which holds them, matches, so rows saved before these columns
    existed get them too."""
    rows, ids = [], []
    for unit in units:
        for key in unit.keys:
            cid = unit.cell(key)
            row, reason = results.load_cell(task.name, cid, unit.fingerprint, unit.parts, expect=unit.expect(task, key))
            if row is None:
                raise PrismError(f"results cell {cid} of {task.name} is missing after the run ({reason})")
            # the identity columns as the task gives them now (a descriptive key such as `shift`, declared
            # after the cell was saved, is not in its fingerprint), in the order of a fresh row
            rows.append({"model": adapter.display_name, **columns,
                         **{k: v for k, v in row.items() if k != "model" and k not in columns},
                         **(identity or {})})
            ids.append(cid)
    return rows, ids


def _flag_runs(task: TaskConfig, adapter, host, opts: JobOptions, runs: pd.DataFrame, rows: list[dict],
               ids: list[str], infos: list[dict]) -> tuple[list, list[float], list[float]]:
    """The quality flags of the runs (attached to ``runs.attrs``, warnings logged) and the fractions with a probe
    collapse / PRISM's ``degenerate``."""
    data_checks = _merge_checks(infos) if len(infos) > 1 else infos[0].get("data_checks")
    runs.attrs[quality.RUN_IDS_ATTR] = ids  # flags name the runs by these ids
    flags = quality.run_flags(runs, t_bounds=task.temperature_bounds, data_checks=data_checks,
                              checks=quality.host_checks(host), name=task.name)
    one_class = any(r.get("n_test_classes") == 1 for r in rows) or any(
        isinstance(c, dict) and c.get("check") == "single_class_test" for c in data_checks or ())
    collapsed, degenerate = _collapse_fractions(rows, one_class)
    if collapsed:
        msg = (f"{adapter.display_name} on {task.name}: probe collapsed (predicts one class beyond its test share "
               f"and recalls no other class) at fraction(s) {', '.join(f'{f:g}' for f in collapsed)}")
        warnings.warn(msg, stacklevel=3)
    elif one_class and degenerate:
        warnings.warn(f"{adapter.display_name} on {task.name}: the test split has one class, so predicting it is not "
                      "a probe collapse; AUROC is undefined and ECE/F1 describe that class only", stacklevel=3)
    # the loader's data checks were already printed as warnings when the splits were read
    for line in quality.console_lines([f for f in flags if f.level == "warning" and f.source != "data"],
                                      f"{adapter.display_name} on {task.name}"):
        opts.log(line)
    runs.attrs["flags"] = [f.to_dict() for f in flags]
    return flags, collapsed, degenerate


def _pretraining_data(adapter) -> list[str] | None:
    """``adapter.pretraining_data`` as summary.json holds it: a list, or ``None`` (not declared)."""
    value = getattr(adapter, "pretraining_data", None)
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    try:
        return [str(v) for v in value]
    except TypeError:
        return [str(value)]


def _collapse_fractions(rows: list[dict], one_class: bool = False) -> tuple[list[float], list[float]]:
    """(fractions with a prevalence-aware collapse, fractions with PRISM's ``degenerate``); runs without the
    prevalence-aware column (an older cell) count by ``degenerate``; a one-class test split never collapses
    (``one_class``: the loader or the runs say the test split has one class)."""
    collapsed, degenerate = set(), set()
    for r in rows:
        f = float(r["fraction"])
        if r.get("degenerate") is True or str(r.get("degenerate")).lower() == "true":
            degenerate.add(f)
        if one_class or r.get("n_test_classes") == 1:
            continue
        flag = r.get("collapsed", r.get("degenerate"))
        if flag is True or str(flag).lower() == "true":
            collapsed.add(f)
    return sorted(collapsed), sorted(degenerate)


