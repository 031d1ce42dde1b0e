"""The audit's inputs: the audited runs of results directories, their means over source splits,
each encoder x target cell's exposure and the per-example artifacts (``prism-run audit``).

Input: the per-run rows of one or more results directories written by ``prism-run`` (see
:func:`result_files`); every run that carries the adaptation plugin's columns (transfer runs by
default) takes part. Runs are grouped by **task** (one source -> target pair) and **probe** (head
kind); the encoders compared are the distinct ``model`` values at one label fraction (default: the
largest fraction of each task). Each encoder's numbers are the mean over its **source splits** (the
``split_seed`` column of tasks with ``split_seeds:``; results without it count as one split) of the
means over its probe seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.results import read_summary

#: the source-split column of the runs (tasks with ``split_seeds:``) and the audit's own split key
SPLIT_COLUMN = "split_seed"
SPLIT = "audit_split"
#: the split key of runs without a ``split_seed`` (results of tasks without ``split_seeds:``)
NO_SPLIT = -1
GROUP = ["task", "probe"]
#: the column that marks a run audited by the adaptation plugin
AUDIT_COLUMN = "id_f1_macro"
#: the probe of runs whose table has no ``probe`` column (the PRISM logistic probe)
DEFAULT_PROBE = "logistic"


@dataclass
class AuditInputs:
    runs: pd.DataFrame                      # seed-level rows at the chosen fraction
    means: pd.DataFrame                     # means over split seeds (of seed means) per (task, probe, model)
    #: (task, probe, model) -> (split key, seed) -> npz file of that run
    artifacts: dict[tuple[str, str, str], dict[tuple[int, int], Path]] = field(default_factory=dict)
    task_info: dict[str, dict] = field(default_factory=dict)  # task -> {priors, class_names, n_classes}
    notes: list[str] = field(default_factory=list)
    #: method name -> needs target labels (an upper bound), from the adaptation registry
    upper_bounds: dict[str, bool] = field(default_factory=dict)
    #: methods in registry order (then any other method found in the columns)
    method_order: tuple[str, ...] = ()
    #: the results directories read for the per-example artifacts (none given: those tables are skipped)
    results_dirs: tuple[Path, ...] = ()
    #: seed means per (task, probe, model, split key): the source-split values the CIs resample
    split_means: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: one row per (task, model): target_dataset, exposure, matched, synthetic (see :mod:`.exposure`)
    cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    _loaded: dict = field(default_factory=dict, repr=False)

    def load(self, path: Path) -> dict[str, np.ndarray]:
        """The arrays of one artifact, read once."""
        if path not in self._loaded:
            self._loaded[path] = load_npz(path)
        return self._loaded[path]


def load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


RunKey = tuple  # (split key, seed) of one run


def artifact_preds(inp: AuditInputs, task: str, probe: str) -> dict[str, dict[RunKey, dict[str, np.ndarray]]]:
    """model -> (split key, seed) -> arrays, for the models of (task, probe) that saved artifacts."""
    out: dict[str, dict[RunKey, dict[str, np.ndarray]]] = {}
    for (t, p, model), files in inp.artifacts.items():
        if t != task or p != probe:
            continue
        for run_key, f in sorted(files.items()):
            out.setdefault(model, {})[run_key] = inp.load(f)
    return out



# -- loading ------------------------------------------------------------------------------------

def result_files(paths: Iterable[Path]) -> list[Path]:
    """The ``runs.csv`` files to audit: :func:`~prism_plugin.results.runs_files`, leaves only.

    A folder whose sub-folders hold results too (a ``--group`` folder) has a combined table beside
    its members' tables: the members are read (they hold the per-example artifacts), the combined
    table is not, so no run counts twice.
    """
    from prism_plugin.results import runs_files

    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise PrismError(f"{p}: no such results directory")
        if p.is_file() and p.name != "runs.csv":
            raise PrismError(f"{p}: pass results directories (folders with runs.csv)")
        files = runs_files([p])
        if not files:
            raise PrismError(f"{p}: no runs.csv below this folder; pass directories written by prism-run")
        if p.is_dir() and files == [p / "runs.csv"]:  # a group folder: its members, when it has any
            files += runs_files(d for d in sorted(p.iterdir()) if d.is_dir())
        found.extend(files)
    dirs = sorted({f.parent for f in found})
    leaves = [d for d in dirs if not any(o != d and d in o.parents for o in dirs)]
    return [d / "runs.csv" for d in leaves]


def audited_rows(tables) -> pd.DataFrame:
    """The per-run rows of every table kind (:class:`~prism_plugin.tables.RunTables`) that has the
    adaptation plugin's columns; :func:`prepare` keeps the rows that carry them."""
    frames = [df for _kind, df in tables.items() if AUDIT_COLUMN in df.columns]
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True, sort=False)


def _with_probe(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``probe`` column (:data:`DEFAULT_PROBE` where the results have none)."""
    if "probe" not in df.columns:
        df["probe"] = DEFAULT_PROBE
    return df


def _split_key(value: Any) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return NO_SPLIT
    return int(f) if np.isfinite(f) else NO_SPLIT


def _with_split(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the audit's split key (:data:`SPLIT`): the ``split_seed`` or :data:`NO_SPLIT`."""
    df[SPLIT] = [_split_key(v) for v in df[SPLIT_COLUMN]] if SPLIT_COLUMN in df.columns else NO_SPLIT
    return df


KEY_COLUMNS = ("task", "probe", "model", "adapter", "fraction", "seed", SPLIT_COLUMN, "run_id", "tgt", "dataset")


@dataclass
class _DirScan:
    """What :func:`_scan` gathers from the results directories."""

    task_info: dict[str, dict] = field(default_factory=dict)
    artifacts: dict[tuple[str, str, str], dict[tuple[int, int], Path]] = field(default_factory=dict)
    #: (task, model) -> (declared in the results, pretraining names or None)
    pretraining: dict[tuple[str, str], tuple[bool, tuple[str, ...] | None]] = field(default_factory=dict)


def _task_entry(resolved: dict) -> dict:
    from prism_plugin.studies.hematology.exposure import task_identity

    return {"priors": resolved.get("priors") or {}, "class_names": tuple(resolved.get("class_names") or ()),
            "n_classes": int(resolved.get("n_classes") or 0), "identity": task_identity(resolved)}


def _scan(runs: pd.DataFrame, dirs: Sequence[Path]) -> _DirScan:
    """Per results directory: its task (summary.json ``resolved_task``), its encoders' pretraining declaration
    (summary.json ``pretraining_data``) and the per-example artifacts of the audited runs.

    The rows do not say which directory they were read from, so each directory's ``runs.csv`` key columns are read
    to find whose ``artifacts/`` hold which run: by name (``<task>--<run_id>.npz``) when the table has ``run_id``,
    else by the identity saved in each artifact (older results: ``<task>--f<fraction>-s<seed>.npz``). A file of a
    run the directory's ``runs.csv`` does not hold (an older grid) is not read.
    """
    from prism_plugin.studies.hematology.exposure import as_names

    scan = _DirScan()
    wanted = {(str(t), str(p), str(m), float(f)) for t, p, m, f in
              runs[["task", "probe", "model", "fraction"]].drop_duplicates().itertuples(index=False)}
    for d in dirs:
        d = Path(d)
        summary = read_summary(d) if (d / "runs.csv").exists() else {}
        resolved = summary.get("resolved_task") if isinstance(summary.get("resolved_task"), dict) else {}
        if resolved.get("name"):
            scan.task_info.setdefault(str(resolved["name"]), _task_entry(resolved))
        if not (d / "runs.csv").exists():
            continue
        try:
            keys = pd.read_csv(d / "runs.csv", usecols=lambda c: c in KEY_COLUMNS)
        except (OSError, ValueError, pd.errors.ParserError):
            continue
        if not {"task", "model", "fraction", "seed"} <= set(keys.columns):
            continue
        keys = _with_split(_with_probe(keys))
        if "pretraining_data" in summary:
            declared = (True, as_names(summary.get("pretraining_data")))
            for task, model in keys[["task", "model"]].drop_duplicates().itertuples(index=False):
                scan.pretraining.setdefault((str(task), str(model)), declared)
        folder = d / "artifacts"
        if folder.is_dir():
            _dir_artifacts(scan, keys, folder, wanted)
    return scan


def _run_id_candidates(r, has_id: bool, probe_unique: bool) -> list[str]:
    """The artifact names a runs.csv row may have: its ``run_id``, else the runner's cell id
    (``f<fraction>-s<seed>[-split<S>][-<probe>]``; without the probe part only when the directory
    holds a single probe for that cell)."""
    from prism_plugin.protocol.grid import run_id as cell_id

    run_id = getattr(r, "run_id", None) if has_id else None
    if isinstance(run_id, str) and run_id:
        return [run_id]
    split = int(getattr(r, SPLIT))
    split = None if split == NO_SPLIT else split
    return ([cell_id(r.fraction, r.seed, split, str(r.probe))]
            + ([cell_id(r.fraction, r.seed, split)] if probe_unique else []))


def _dir_artifacts(scan: _DirScan, keys: pd.DataFrame, folder: Path, wanted: set) -> None:
    from prism_plugin.adaptation.plugin import artifact_name, safe_name

    rows = [r for r in keys.drop_duplicates().itertuples(index=False)
            if (str(r.task), str(r.probe), str(r.model), float(r.fraction)) in wanted]
    has_id = "run_id" in keys.columns
    probes_of: dict[tuple, set] = {}
    for r in rows:
        probes_of.setdefault((str(r.task), str(r.model), float(r.fraction), int(r.seed), int(getattr(r, SPLIT))),
                             set()).add(str(r.probe))
    by_identity: dict[tuple, list] = {}
    for r in rows:
        ident = (str(r.task), str(r.model), float(r.fraction), int(r.seed), int(getattr(r, SPLIT)))
        found = None
        for rid in _run_id_candidates(r, has_id, len(probes_of[ident]) == 1):
            f = folder / artifact_name(str(r.task), float(r.fraction), int(r.seed), rid)
            if f.is_file():
                found = f
                break
        if found is not None:
            scan.artifacts.setdefault((str(r.task), str(r.probe), str(r.model)), {})[(ident[4], ident[3])] = found
            continue
        by_identity.setdefault(ident, []).append(str(r.probe))
    if not by_identity:
        return
    for task in sorted({k[0] for k in by_identity}):
        for f in sorted(folder.glob(f"{safe_name(task)}--*.npz")):
            try:
                with np.load(f, allow_pickle=False) as z:
                    names = set(z.files)
                    ident = (str(z["task"]), str(z["model"]), float(z["fraction"]), int(z["seed"]),
                             _split_key(z["split_seed"]) if "split_seed" in names else NO_SPLIT)
                    probe = str(z["probe"]) if "probe" in names else ""
            except (OSError, ValueError, KeyError):
                continue
            probes = by_identity.get(ident)
            if not probes:
                continue  # a run this directory's runs.csv does not hold
            if probe and probe not in probes:
                continue
            if not probe:  # written before artifacts named their probe: only an unambiguous one
                if len(set(probes)) != 1:
                    continue
                probe = probes[0]
            scan.artifacts.setdefault((ident[0], probe, ident[1]), {})[(ident[4], ident[3])] = f


def prepare(runs: pd.DataFrame, fraction: float | None = None, results_dirs: Sequence[Path] = (),
            host=None) -> AuditInputs:
    """Means over split seeds of the seed means per (task, probe, model) of the audited rows at one
    label fraction per task, with each cell's exposure and the per-example artifacts."""
    notes: list[str] = []
    if runs is None or runs.empty or AUDIT_COLUMN not in runs.columns or not runs[AUDIT_COLUMN].notna().any():
        raise PrismError("no run carries the adaptation plugin's columns (id_f1_macro, gain_*, ...): run transfer "
                         "tasks (or tasks with `adaptation:`) with the adaptation plugin enabled")
    for col in ("model", "task", "fraction", "seed", "f1_macro"):
        if col not in runs.columns:
            raise PrismError(f"the audited runs lack column {col!r}; not a prism-run results table")
    runs = _with_split(_with_probe(runs[runs[AUDIT_COLUMN].notna()].copy()))
    if fraction is None:
        top = runs.groupby("task")["fraction"].transform("max")
        runs = runs[runs["fraction"] == top]
    else:
        runs = runs[np.isclose(runs["fraction"].astype(float), float(fraction))]
        if runs.empty:
            raise PrismError(f"--fraction {fraction}: no audited run at this label fraction")
    key = ["task", "probe", "model", SPLIT, "seed"]
    dup = runs.duplicated(subset=key, keep="last")
    if dup.any():
        what = "(task, probe, model, split_seed, seed)" if SPLIT_COLUMN in runs.columns else "(task, probe, model, seed)"
        notes.append(f"{int(dup.sum())} duplicate {what} rows: the last row is kept")
        runs = runs[~dup]
    cell = ["task", "probe", "model"]
    numeric = [c for c in runs.columns if c not in ("model", "task", "probe", SPLIT, "seed", SPLIT_COLUMN)
               and pd.api.types.is_numeric_dtype(runs[c])]
    split_means = runs.groupby(cell + [SPLIT], sort=True)[numeric].mean().reset_index()
    means = split_means.groupby(cell, sort=True)[numeric].mean().reset_index()
    extra = runs.groupby(cell, sort=True).agg(
        n_seeds=("seed", "nunique"), n_split_seeds=(SPLIT, "nunique"),
        **{c: (c, "first") for c in ("src", "tgt", "pair", "adapter") if c in runs.columns}
    ).reset_index()
    means = means.merge(extra, on=cell)
    dirs = [Path(d) for d in results_dirs]
    scan = _scan(runs, dirs)
    upper = method_traits(host)
    return AuditInputs(runs=runs, means=means, artifacts=scan.artifacts, task_info=scan.task_info,
                       notes=notes, upper_bounds=upper, method_order=tuple(upper), results_dirs=tuple(dirs),
                       split_means=split_means, cells=_cells(runs, means, scan, host))


def _cells(runs: pd.DataFrame, means: pd.DataFrame, scan: _DirScan, host=None) -> pd.DataFrame:
    """One row per audited (task, model): target dataset, exposure, matched, synthetic."""
    from prism_plugin.studies.hematology import exposure as ex

    synthetic_col = {}
    if "synthetic" in runs.columns:
        from prism_plugin.quality import as_bool

        for (task, model), g in runs.groupby(["task", "model"], sort=False):
            vals = as_bool(g["synthetic"]).dropna()
            if len(vals):
                synthetic_col[(task, model)] = bool((vals > 0).any())
    registry: dict[str, tuple[bool, tuple[str, ...] | None]] = {}
    rows = []
    for (task, model), g in means.groupby(["task", "model"], sort=True):
        info = scan.task_info.get(str(task), {})
        fallback = ""
        for col in ("tgt", "dataset"):
            if col in g.columns and isinstance(g[col].iloc[0], str) and g[col].iloc[0]:
                fallback = g[col].iloc[0]
                break
        ident = info.get("identity") or ex.task_identity({}, fallback)
        if fallback and fallback not in ident["names"]:
            ident = {**ident, "names": ident["names"] + (fallback,)}
        declared = scan.pretraining.get((str(task), str(model)))
        if declared is None:  # results written before summary.json recorded it: the adapter's declaration
            adapter = str(g["adapter"].iloc[0]) if "adapter" in g.columns and isinstance(g["adapter"].iloc[0], str) \
                else str(model)
            if adapter not in registry:
                registry[adapter] = ex.registry_pretraining(adapter, host)
            declared = registry[adapter]
        state, matched = ex.classify(declared[1], ident["names"])
        rows.append({"model": model, "task": task, "target_dataset": ident["dataset"] or fallback,
                     "exposure": state, "matched": matched,
                     "synthetic": bool(synthetic_col.get((task, model), ident.get("synthetic", False)))})
    return pd.DataFrame(rows, columns=["model", "task", "target_dataset", "exposure", "matched", "synthetic"])


def method_traits(host=None) -> dict[str, bool]:
    """Adaptation method -> needs target labels (an upper bound), in registry order.

    With the adaptation plugin disabled (``--disable adaptation``) the registry has no methods:
    the built-ins' declared traits (:data:`~prism_plugin.adaptation.tta.BUILTIN_METHODS`) describe
    the columns of the results written with it.
    """
    from prism_plugin.plugins import host_or_shared

    methods = {e.name: bool(e.meta.get("needs_labels")) for e in host_or_shared(host).adaptation.entries()
               if e.meta.get("role") == "method"}
    if not methods:
        from prism_plugin.adaptation.tta import BUILTIN_METHODS

        methods = {name: bool(needs) for name, (_fn, needs) in BUILTIN_METHODS.items()}
    return methods
