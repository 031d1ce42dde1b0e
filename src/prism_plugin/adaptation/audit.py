"""The audit's tables from results directories (``prism-run audit``).

Input: the per-run rows of one or more results directories written by ``prism-run`` (found by
:func:`prism_plugin.tables.find_runs_files`; see :func:`result_files`), as the summary plugin
:mod:`prism_plugin.adaptation.audit_plugin` receives them; every run that carries the adaptation
plugin's columns (transfer runs by default) takes part. Runs are grouped by **task** (one source -> target
pair) and **probe** (head kind); the encoders compared are the distinct ``model`` values at one label
fraction (default: the largest fraction of each task, i.e. the audit's full source split). Each
encoder's numbers are the mean over its **source splits** (the ``split_seed`` column of tasks with
``split_seeds:``; results without it count as one split) of the means over its probe seeds; CIs over
the source splits bootstrap those split means (``--bootstrap`` resamples, seeded).

Tables (CSV, one file each; see :data:`TABLES`):

* ``rank_matrix`` / ``rank_transfer`` - in-domain (source held-out) vs target macro-F1 per encoder
  (with ``n_split_seeds`` and CIs over the source splits, ``id_f1_macro_ci_low/high``,
  ``f1_macro_ci_low/high``, and the cell's ``exposure``), ranks, Spearman rho with a bootstrap CI over
  encoders, whether the in-domain best is dethroned, and the regret of selecting by in-domain
  accuracy (Sec. 5.1, A.7, A.15-A.16).
* ``exposure`` - per encoder x task: the evaluated (target) dataset and whether the encoder saw it in
  pretraining (``in_pretraining`` / ``held_out`` / ``unknown``, the pretraining name that ``matched``;
  :mod:`.exposure`; Sec. 4, 5.1). ``held_out_only`` (``prism-run audit --held-out-only``) restricts
  ``rank_matrix``, ``rank_transfer``, ``selector_regret`` / ``selector_summary`` and
  ``effective_robustness`` to the held-out cells.
* ``effective_robustness`` - per task and probe the least-squares line of target on in-domain
  macro-F1 over encoders, each encoder's residual from it and the in-domain spread (population SD),
  with a ``caveat`` whenever the line is ill-posed (SD < 0.01 or fewer than 3 encoders; the audit's
  in-domain scores are saturated, A.4).
* ``per_class_recall`` / ``confusion`` - per encoder on each target, from the per-example predictions
  pooled over split and probe seeds (counts summed): recall and support per class, and every
  (true, predicted) class pair with its count and row share (A.8: "lymphocytes called
  neutrophils" is the row lymphocyte -> neutrophil); need ``artifacts/``.
* ``mechanism`` - per encoder x target the first-moment shift (``first_moment_shift``: RMS per-feature
  mean shift in source SDs) beside the target drop (in-domain minus target macro-F1), ``synthetic``
  marking targets derived by ``perturb:``; audit.json gives the Spearman of shift vs drop per probe
  for real and synthetic targets (Sec. 5 mechanism).
* ``reliability`` - top-label reliability diagrams per calibration arm: 15 equal-width confidence
  bins pooled over the runs (count, mean confidence, accuracy; non-empty bins only); need
  ``artifacts/`` written with calibration transfer.
* ``calibration_transfer`` / ``calibration_summary`` - top-label ECE, adaptive ECE, NLL and
  multiclass Brier per calibration arm, and how many encoder x target cells each arm improves
  over the raw probe (A.13).
* ``adaptation_full`` - every method on the whole target (its own prior), over encoders: macro-F1
  before/after, gain (mean, range, encoders hurt) and top-label ECE, NLL and multiclass Brier after it;
  ``adaptation_scenarios`` - target x prior x K x method: mean gain over encoders, range, hurt
  encoders; ``adaptation_methods`` - per method and K over all scenarios: mean gain, range of
  scenario means, scenarios hurt, encoder x scenario cells hurt, worst cell and a hierarchical
  bootstrap CI (A.12). The methods are every ``gain_<m>`` / ``f1_macro_<m>`` column pair of the
  runs (adaptation-registry order first), so a plugin's method is audited like a built-in;
  ``upper_bound`` marks methods registered with ``needs_labels`` (``oracle_cb``).
* ``selector_regret`` / ``selector_summary`` - Spearman of each label-free score with the true
  target macro-F1 and the selection regret, on the whole target and under every prior, next to
  selection by in-domain accuracy (A.10-A.11); ``consensus`` and ``agl_acc`` need per-example
  predictions (``artifacts/`` of the results directories).
* ``paired_bootstrap`` - paired bootstrap of macro-F1 differences between encoders on the shared
  target examples, the seeds averaged inside each resample (A.9): every (split seed, seed) of the
  pair at once when the split seeds share the target examples, else per split seed with the
  resulting numbers averaged; needs ``artifacts/``.
* ``diagnostics`` - domain decodability and between-domain projection columns when the runs
  computed them (A.1, A.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from prism_plugin.results import read_summary
from prism_plugin.adaptation import priors as pri
from prism_plugin.adaptation import selection as sel
from prism_plugin.adaptation import stats
from prism_plugin.adaptation.calibration import ARMS as CAL_ARMS
from prism_plugin.adaptation.calibration import METRICS as CAL_METRICS
from prism_plugin.errors import PrismError

TABLES = ("rank_matrix", "rank_transfer", "exposure", "effective_robustness", "calibration_transfer",
          "calibration_summary", "reliability", "adaptation_full", "adaptation_scenarios", "adaptation_methods",
          "selector_regret", "selector_summary", "paired_bootstrap", "per_class_recall", "confusion", "mechanism",
          "diagnostics")
#: one line per table: what ``<table>.csv`` of ``prism-run audit`` holds (listed in audit.md)
TABLE_DESCRIPTIONS = {
    "rank_matrix": "per encoder x task x probe: in-domain and target macro-F1 (means over split seeds, CIs over "
                   "them), ranks, relative gap, exposure",
    "rank_transfer": "per task x probe: Spearman rho of in-domain vs target ranking (CI over encoders), dethroned, "
                     "regret of selecting by in-domain accuracy",
    "exposure": "per encoder x task: the target dataset and whether it was in the encoder's pretraining data",
    "effective_robustness": "per encoder x task x probe: residual from the in-domain vs target line, with a caveat "
                            "when the in-domain spread is too small for the line",
    "calibration_transfer": "per encoder x task x probe: top-label ECE, adaptive ECE, NLL and Brier per "
                            "calibration arm",
    "calibration_summary": "per probe x calibration arm: mean metrics and the cells whose ECE the arm improves",
    "reliability": "per encoder x task x probe x calibration arm: top-label reliability bins (15, pooled over runs)",
    "adaptation_full": "per task x probe x method: gain on the whole target over encoders",
    "adaptation_scenarios": "per task x prior x K x method: mean gain over encoders, range, encoders hurt",
    "adaptation_methods": "per method x K: mean gain over scenarios, range, scenarios and cells hurt, bootstrap CI",
    "selector_regret": "per task x prior x selector: Spearman with the target macro-F1 and selection regret",
    "selector_summary": "per probe x condition x selector: mean Spearman and regret",
    "paired_bootstrap": "per encoder pair: macro-F1 difference on the shared target examples with a bootstrap CI",
    "per_class_recall": "per encoder x target x class: recall and support (pooled over split seeds and seeds)",
    "confusion": "per encoder x target: every (true, predicted) class pair with its count and row share",
    "mechanism": "per encoder x target: first-moment shift (source SDs) beside the target drop, real vs synthetic",
    "diagnostics": "per encoder x task: domain decodability and mean-direction projection",
}
#: the tables ``held_out_only`` restricts to held-out encoder x target cells
HELD_OUT_TABLES = ("rank_matrix", "rank_transfer", "selector_regret", "selector_summary", "effective_robustness")
#: the source-split column of the runs (tasks with ``split_seeds:``) and the audit's own split key
SPLIT_COLUMN = "split_seed"
SPLIT = "audit_split"
#: the split key of runs without a ``split_seed`` (results of tasks without ``split_seeds:``)
NO_SPLIT = -1
GROUP = ["task", "probe"]
#: priors counted as "balanced" in the selector summary; every other prior is "skewed" and the
#: whole target split (its own class prior) is "target"
BALANCED_PRIORS = {"balanced"}
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
            self._loaded[path] = _load_npz(path)
        return self._loaded[path]


def tables_markdown(written: Sequence[str]) -> str:
    """audit.md's list of the CSV tables written, one line each."""
    lines = ["## Tables", "", "CSV files beside this one (empty tables are not written):", ""]
    lines += [f"* `{name}.csv` - {TABLE_DESCRIPTIONS.get(name, '')}" for name in written]
    return "\n".join(lines) + "\n"


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
    from prism_plugin.adaptation.exposure import task_identity

    return {"priors": resolved.get("priors") or {}, "class_names": tuple(resolved.get("class_names") or ()),
            "n_classes": int(resolved.get("n_classes") or 0), "identity": task_identity(resolved)}


def _scan(runs: pd.DataFrame, dirs: Sequence[Path]) -> _DirScan:
    """Per results directory: its task (summary.json ``resolved_task``), its encoders' pretraining
    declaration (summary.json ``pretraining_data``) and the per-example artifacts of the audited runs.

    The rows do not say which directory they were read from, so each directory's ``runs.csv`` key
    columns are read to find whose ``artifacts/`` hold which run: by name (``<task>--<run_id>.npz``)
    when the table has ``run_id``, else by the identity saved in each artifact (older results:
    ``<task>--f<fraction>-s<seed>.npz``). A file of a run the directory's ``runs.csv`` does not hold
    (an older grid) is not read.
    """
    from prism_plugin.adaptation.exposure import as_names

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
    from prism_plugin.adaptation import exposure as ex

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


# -- A: rank transfer ---------------------------------------------------------------------------

def split_cis(inp: AuditInputs, B: int, seed: int, metrics: Sequence[str] = ("id_f1_macro", "f1_macro")
              ) -> pd.DataFrame:
    """Per (task, probe, model): ``<metric>_ci_low`` / ``_ci_high``, a bootstrap over the split-seed means."""
    rows = []
    sm = inp.split_means
    for (task, probe, model), g in sm.groupby(["task", "probe", "model"], sort=True):
        row: dict[str, Any] = {"task": task, "probe": probe, "model": model}
        for metric in metrics:
            ci = stats.mean_ci(g[metric].to_numpy() if metric in g else [], B=B, seed=seed)
            row[f"{metric}_ci_low"], row[f"{metric}_ci_high"] = ci["ci_low"], ci["ci_high"]
        rows.append(row)
    cols = ["task", "probe", "model"] + [f"{m}_ci_{s}" for m in metrics for s in ("low", "high")]
    return pd.DataFrame(rows, columns=cols)


def rank_tables(inp: AuditInputs, B: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    m = inp.means.copy()
    m["id_rank"] = m.groupby(GROUP)["id_f1_macro"].rank(ascending=False, method="min")
    m["target_rank"] = m.groupby(GROUP)["f1_macro"].rank(ascending=False, method="min")
    m["relative_gap"] = (m["id_f1_macro"] - m["f1_macro"]) / m["id_f1_macro"]
    cis = split_cis(inp, B, seed)
    # the runs' own test-set bootstrap bounds (metrics.bootstrap, same names) averaged into the means are
    # replaced by the audit's CI over the split-seed means, which is what this table reports
    m = m.drop(columns=[c for c in cis.columns if c in m.columns and c not in ("task", "probe", "model")])
    m = m.merge(cis, on=["task", "probe", "model"], how="left")
    if not inp.cells.empty:
        m = m.merge(inp.cells[["task", "model", "exposure"]], on=["task", "model"], how="left")
    cols = [c for c in ["task", "probe", "pair", "model", "n_seeds", "n_split_seeds", "id_f1_macro",
                        "id_f1_macro_ci_low", "id_f1_macro_ci_high", "id_accuracy", "f1_macro", "f1_macro_ci_low",
                        "f1_macro_ci_high", "relative_gap", "id_rank", "target_rank", "exposure"] if c in m.columns]
    matrix = m[cols].sort_values(GROUP + ["target_rank", "model"]).reset_index(drop=True)
    rows = []
    for (task, probe), g in m.groupby(GROUP, sort=True):
        idf = dict(zip(g["model"], g["id_f1_macro"]))
        tgt = dict(zip(g["model"], g["f1_macro"]))
        acc = dict(zip(g["model"], g["id_accuracy"])) if "id_accuracy" in g else idf
        ci = stats.spearman_ci(g["id_f1_macro"].to_numpy(), g["f1_macro"].to_numpy(), B=B, seed=seed)
        id_best = sel.select(idf)
        tgt_best = sel.select(tgt)
        reg, chosen, _ = sel.regret(acc, tgt)
        rows.append({
            "task": task, "probe": probe, "pair": g["pair"].iloc[0] if "pair" in g else task,
            "n_models": len(g), "n_split_seeds": int(g["n_split_seeds"].max()) if "n_split_seeds" in g else 1,
            "spearman_rho": ci["rho"], "rho_ci_low": ci["ci_low"], "rho_ci_high": ci["ci_high"],
            "id_best": id_best, "id_best_target_rank": int(g.loc[g["model"] == id_best, "target_rank"].iloc[0])
            if id_best is not None else None,
            "target_best": tgt_best, "dethroned": bool(id_best != tgt_best),
            "id_f1_range": float(g["id_f1_macro"].max() - g["id_f1_macro"].min()),
            "target_f1_range": float(g["f1_macro"].max() - g["f1_macro"].min()),
            "selected_by_id_accuracy": chosen, "regret_id_accuracy": reg,
        })
    return matrix, pd.DataFrame(rows)


# -- B: calibration transfer --------------------------------------------------------------------

def calibration_tables(inp: AuditInputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    m = inp.means
    cols = [f"calx_{a}_{k}" for a in CAL_ARMS for k in CAL_METRICS if f"calx_{a}_{k}" in m.columns]
    if not cols:
        return pd.DataFrame(), pd.DataFrame()
    keep = [c for c in ["task", "probe", "pair", "model", "temperature_src", "temperature_oracle"] if c in m.columns]
    per_cell = m[keep + cols].copy()
    rows = []
    for probe, g in per_cell.groupby("probe", sort=True):
        for arm in CAL_ARMS:
            if f"calx_{arm}_ece_top" not in g:
                continue
            row: dict[str, Any] = {"probe": probe, "arm": arm, "n_cells": int(g[f"calx_{arm}_ece_top"].notna().sum())}
            for k in CAL_METRICS:
                row[k] = float(g[f"calx_{arm}_{k}"].mean()) if f"calx_{arm}_{k}" in g else float("nan")
            diff = g[f"calx_{arm}_ece_top"] - g["calx_raw_ece_top"]
            row["cells_ece_improved"] = int((diff < 0).sum())
            row["ece_vs_raw"] = float(diff.mean())
            rows.append(row)
    return per_cell, pd.DataFrame(rows)


# -- C: adaptation under priors -----------------------------------------------------------------

def methods_present(columns: Iterable[str], order: Sequence[str] = ()) -> list[str]:
    """Methods with ``gain_<m>`` and ``f1_macro_<m>`` columns: registry order first, then the others."""
    cols = list(columns)
    found = [c[len("gain_"):] for c in cols if c.startswith("gain_") and f"f1_macro_{c[len('gain_'):]}" in cols]
    return [m for m in order if m in found] + [m for m in found if m not in order]


def adaptation_tables(inp: AuditInputs, B: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    m = inp.means
    methods = methods_present(m.columns, inp.method_order)
    full_rows = []
    for (task, probe), g in m.groupby(GROUP, sort=True):
        for meth in methods:
            gains = g[f"gain_{meth}"]
            full_rows.append({"task": task, "probe": probe, "method": meth, "n_models": int(gains.notna().sum()),
                              "f1_before": float(g["f1_macro"].mean()), "f1_after": float(g[f"f1_macro_{meth}"].mean()),
                              "mean_gain": float(gains.mean()), "min_gain": float(gains.min()),
                              "max_gain": float(gains.max()), "models_hurt": int((gains < 0).sum()),
                              # calibration after the method beside its accuracy (means over encoders)
                              **{f"{k}_after": float(g[f"{k}_{meth}"].mean()) if f"{k}_{meth}" in g else float("nan")
                                 for k in ("ece", "nll", "brier")}})
    full = pd.DataFrame(full_rows)
    # long table of prior-stress cells: (task, probe, model, prior, K, method) -> gain
    cells = []
    for col in m.columns:
        parsed = pri.parse_column(col)
        if parsed is None or not parsed[2].startswith("f1_") or parsed[2] == "f1_none":
            continue
        prior, k, name = parsed
        base = pri.column(prior, k, "f1_none")
        if base not in m.columns:
            continue
        part = m[["task", "probe", "model"]].copy()
        part["prior"], part["K"], part["method"] = prior, k, name[3:]
        part["f1_before"] = m[base].to_numpy()
        part["f1_after"] = m[col].to_numpy()
        part["gain"] = part["f1_after"] - part["f1_before"]
        cells.append(part)
    if not cells:
        inp.notes.append("no class-prior stress columns (set `priors:` in the task) - adaptation_scenarios empty")
        return full, pd.DataFrame(), pd.DataFrame()
    long = pd.concat(cells, ignore_index=True).dropna(subset=["gain"])
    scen = (long.groupby(["task", "probe", "prior", "K", "method"], sort=True)
            .agg(n_models=("gain", "size"), f1_before=("f1_before", "mean"), f1_after=("f1_after", "mean"),
                 mean_gain=("gain", "mean"), min_gain=("gain", "min"), max_gain=("gain", "max"),
                 models_hurt=("gain", lambda s: int((s < 0).sum())))
            .reset_index())
    method_rows = []
    for (probe, k, meth), g in long.groupby(["probe", "K", "method"], sort=True):
        per_scen = g.groupby(["task", "prior"])["gain"].mean()
        table = g.pivot_table(index=["task", "prior"], columns="model", values="gain", aggfunc="mean")
        hb = stats.hierarchical_bootstrap(table.to_numpy(), B=B, seed=seed)
        method_rows.append({
            "probe": probe, "K": int(k), "method": meth, "n_scenarios": int(len(per_scen)),
            "mean_gain": float(per_scen.mean()), "range_low": float(per_scen.min()), "range_high": float(per_scen.max()),
            "scenarios_hurt": int((per_scen < 0).sum()), "cells": int(len(g)), "cells_hurt": int((g["gain"] < 0).sum()),
            "worst_cell": float(g["gain"].min()), "ci_low": hb["ci_low"], "ci_high": hb["ci_high"],
            "upper_bound": bool(inp.upper_bounds.get(meth, False)),
        })
    return full, scen, pd.DataFrame(method_rows)


# -- D: selectors -------------------------------------------------------------------------------

def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


RunKey = tuple  # (split key, seed) of one run


def _artifact_preds(inp: AuditInputs, task: str, probe: str) -> dict[str, dict[RunKey, dict[str, np.ndarray]]]:
    """model -> (split key, seed) -> arrays, for the models of (task, probe) that saved artifacts."""
    out: dict[str, dict[RunKey, dict[str, np.ndarray]]] = {}
    for (t, p, model), files in inp.artifacts.items():
        if t != task or p != probe:
            continue
        for run_key, f in sorted(files.items()):
            out.setdefault(model, {})[run_key] = inp.load(f)
    return out


def _cross_scores(preds: dict[str, dict[RunKey, dict[str, np.ndarray]]], id_acc: dict[str, float],
                  idx: np.ndarray | None = None, seeds: Sequence[RunKey] | None = None) -> dict[str, dict[str, float]]:
    """consensus and agl_acc per model, averaged over the runs ((split key, seed)) every model has."""
    common = sorted(set.intersection(*[set(v) for v in preds.values()])) if preds else []
    if seeds is not None:
        common = [s for s in common if s in seeds]
    if len(preds) < 2 or not common:
        return {}
    cons: dict[str, list[float]] = {}
    agl: dict[str, list[float]] = {}
    for s in common:
        tgt = {m: (v[s]["pred_test"] if idx is None else v[s]["pred_test"][idx]) for m, v in preds.items()}
        c = sel.consensus(tgt)
        for m, val in c.items():
            cons.setdefault(m, []).append(val)
        if all("pred_val" in v[s] for v in preds.values()):
            a = sel.agl_acc(id_acc, {m: v[s]["pred_val"] for m, v in preds.items()}, tgt)
            for m, val in a.items():
                agl.setdefault(m, []).append(val)
    out = {"consensus": {m: float(np.mean(v)) for m, v in cons.items()}}
    if agl:
        out["agl_acc"] = {m: float(np.mean(v)) for m, v in agl.items()}
    return out


def selector_tables(inp: AuditInputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    m = inp.means
    rows = []
    for (task, probe), g in m.groupby(GROUP, sort=True):
        models = list(g["model"])
        id_acc = dict(zip(models, g["id_accuracy"])) if "id_accuracy" in g else {}
        preds = _artifact_preds(inp, task, probe)
        preds = {k: v for k, v in preds.items() if k in models}
        conditions: list[tuple[str, int | None, dict[str, float], dict[str, dict[str, float]]]] = []
        truth = dict(zip(models, g["f1_macro"]))
        scores = {s: dict(zip(models, g[f"sel_{s}"])) for s in sel.PER_RUN if f"sel_{s}" in g}
        if preds:
            scores.update(_cross_scores(preds, id_acc))
        conditions.append(("target", None, truth, scores))
        prior_keys = sorted({parsed[:2] for parsed in map(pri.parse_column, g.columns) if parsed is not None})
        info = inp.task_info.get(task, {})
        for prior, k in prior_keys:
            base = pri.column(prior, k, "f1_none")
            if base not in g:
                continue
            t = dict(zip(models, g[base]))
            sc = {s: dict(zip(models, g[pri.column(prior, k, f"sel_{s}")]))
                  for s in sel.PER_RUN if pri.column(prior, k, f"sel_{s}") in g}
            if preds and info.get("priors"):
                sc.update(_prior_cross_scores(preds, id_acc, info, prior, k))
            conditions.append((prior, k, t, sc))
        for prior, k, t, sc in conditions:
            table = dict(sc)
            if id_acc:
                table["id_acc"] = id_acc
            for r in sel.evaluate_selectors(table, t):
                rows.append({"task": task, "probe": probe, "prior": prior, "K": k, **r})
    out = pd.DataFrame(rows)
    if out.empty:
        return out, out
    out["condition"] = np.where(out["prior"] == "target", "target",
                                np.where(out["prior"].isin(list(BALANCED_PRIORS)), "balanced", "skewed"))
    summary = (out.groupby(["probe", "condition", "selector"], sort=True)
               .agg(n=("regret", "size"), mean_spearman=("spearman", "mean"), mean_regret=("regret", "mean"),
                    max_regret=("regret", "max"))
               .reset_index())
    return out, summary


def _prior_cross_scores(preds, id_acc, info: dict, prior: str, k: int) -> dict[str, dict[str, float]]:
    """consensus / agl_acc on the very batches the plugin drew (same seeds), averaged over draws."""
    cfg = info["priors"]
    any_model = next(iter(preds.values()))
    acc: dict[str, dict[str, list[float]]] = {}
    for s, arr in any_model.items():  # s = (split key, seed): the plugin drew with the run's seed
        y = arr["y_test"].astype(np.int64)
        n_classes = info.get("n_classes") or (int(y.max()) + 1)
        try:
            vec = pri.prior_vector(prior, n_classes, info.get("class_names", ()), custom=cfg.get("custom"),
                                   target_labels=y)
        except PrismError:
            return {}
        for d in range(int(cfg.get("draws", 1))):
            idx, _ = pri.resample(y, vec, k, pri.draw_seed(int(cfg.get("seed", 0)) + int(s[1]), prior, k, d))
            for name, vals in _cross_scores(preds, id_acc, idx=idx, seeds=[s]).items():
                for model, v in vals.items():
                    acc.setdefault(name, {}).setdefault(model, []).append(v)
    return {name: {mm: float(np.mean(v)) for mm, v in per.items()} for name, per in acc.items()}


# -- E: paired bootstrap ------------------------------------------------------------------------

def paired_bootstrap_table(inp: AuditInputs, B: int, seed: int, compare: Sequence[tuple[str, str]] = (),
                           max_models: int = 12) -> pd.DataFrame:
    rows = []
    for (task, probe), g in inp.means.groupby(GROUP, sort=True):
        preds = _artifact_preds(inp, task, probe)
        if len(preds) < 2:
            continue
        common = sorted(set.intersection(*[set(v) for v in preds.values()]))
        if not common:
            continue
        names = sorted(preds)
        if compare:
            pairs = [(a, b) for a, b in compare if a in preds and b in preds]
        elif len(names) <= max_models:
            pairs = list(combinations(names, 2))
        else:  # many encoders: the in-domain best against every other one
            best = sel.select(dict(zip(g["model"], g["id_f1_macro"])))
            pairs = [(best, n) for n in names if n != best]
        groups = _shared_target_groups(preds[names[0]], common)
        for a, b in pairs:
            results = []
            for keys in groups:
                y = preds[names[0]][keys[0]]["y_test"].astype(np.int64)
                A = np.stack([preds[a][s]["pred_test"] for s in keys])
                Bm = np.stack([preds[b][s]["pred_test"] for s in keys])
                results.append(stats.paired_bootstrap_f1(y, A, Bm, B=B, seed=seed))
            res = ({**results[0], "aggregation": "one bootstrap over the shared target examples"}
                   if len(results) == 1 else _average_bootstrap(results))
            rows.append({"task": task, "probe": probe, "model_a": a, "model_b": b, "n_seeds": len(common),
                         "n_split_seeds": len({k[0] for k in common}), **res})
    return pd.DataFrame(rows)


def _shared_target_groups(runs: dict[RunKey, dict[str, np.ndarray]], common: Sequence[RunKey]) -> list[list[RunKey]]:
    """The runs of one bootstrap each: all of them when every split seed evaluates the same target
    examples (the same labels in the same order), else one group per split seed."""
    by_split: dict[int, list[RunKey]] = {}
    for k in common:
        by_split.setdefault(int(k[0]), []).append(k)
    if len(by_split) == 1:
        return [list(common)]
    ys = [runs[keys[0]]["y_test"] for keys in by_split.values()]
    if all(y.shape == ys[0].shape and np.array_equal(y, ys[0]) for y in ys[1:]):
        return [list(common)]
    return list(by_split.values())


def _average_bootstrap(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-split-seed paired bootstraps averaged (the CI bounds and p as means over split seeds).

    Used only when the split seeds scored different target examples; a mean of percentile bounds is
    not itself a confidence interval, so the row says how it was made (``aggregation``)."""
    out = {k: float(np.mean([r[k] for r in results])) for k in ("diff", "ci_low", "ci_high", "p_boot")}
    out["B"] = int(results[0]["B"])
    out["n"] = int(round(np.mean([r["n"] for r in results])))
    out["excludes_zero"] = bool(out["ci_low"] > 0 or out["ci_high"] < 0)
    out["aggregation"] = f"mean of {len(results)} per-split-seed bootstraps (not a joint CI)"
    return out


# -- F: diagnostics -----------------------------------------------------------------------------

def diagnostics_table(inp: AuditInputs) -> pd.DataFrame:
    cols = [c for c in ("dom_decode_acc", "dom_decode_within", "dom_decode_perm", "dom_decode_class",
                        "proj_f1_macro", "proj_gain", "proj_id_delta") if c in inp.means.columns]
    if not cols:
        return pd.DataFrame()
    keep = inp.means[["task", "probe", "model", "f1_macro"] + cols]
    return keep.dropna(subset=cols, how="all").reset_index(drop=True)


# -- G: exposure and effective robustness ------------------------------------------------------

EXPOSURE_COLUMNS = ["model", "task", "target_dataset", "exposure", "matched"]
ER_COLUMNS = ["task", "probe", "model", "id_f1_macro", "f1_macro", "line_f1", "effective_robustness", "x_spread",
              "caveat"]


def exposure_table(inp: AuditInputs) -> pd.DataFrame:
    if inp.cells.empty:
        return pd.DataFrame(columns=EXPOSURE_COLUMNS)
    return inp.cells[EXPOSURE_COLUMNS].sort_values(["task", "model"]).reset_index(drop=True)


def held_out(inp: AuditInputs) -> AuditInputs:
    """``inp`` restricted to the encoder x task cells whose exposure is ``held_out``."""
    from dataclasses import replace

    from prism_plugin.adaptation.exposure import HELD_OUT

    cells = inp.cells
    keep = set() if cells.empty else {(t, m) for t, m, e in cells[["task", "model", "exposure"]].itertuples(index=False)
                                       if e == HELD_OUT}

    def rows(df: pd.DataFrame) -> pd.DataFrame:
        if df.empty:
            return df
        mask = [(t, m) in keep for t, m in df[["task", "model"]].itertuples(index=False)]
        return df[np.asarray(mask, dtype=bool)].reset_index(drop=True)

    return replace(inp, runs=rows(inp.runs), means=rows(inp.means), split_means=rows(inp.split_means),
                   cells=rows(cells), artifacts={k: v for k, v in inp.artifacts.items() if (k[0], k[2]) in keep},
                   notes=inp.notes)


def effective_robustness_table(inp: AuditInputs) -> pd.DataFrame:
    rows = []
    for (task, probe), g in inp.means.groupby(GROUP, sort=True):
        g = g.sort_values("model")
        er = stats.effective_robustness(g["id_f1_macro"].to_numpy(), g["f1_macro"].to_numpy())
        for i, r in enumerate(g.itertuples(index=False)):
            rows.append({"task": task, "probe": probe, "model": r.model, "id_f1_macro": float(r.id_f1_macro),
                         "f1_macro": float(r.f1_macro), "line_f1": float(er["line"][i]),
                         "effective_robustness": float(er["residual"][i]), "x_spread": er["x_spread"],
                         "caveat": er["caveat"]})
    return pd.DataFrame(rows, columns=ER_COLUMNS)


# -- H: per-class recall and confusion, reliability ---------------------------------------------

RECALL_COLUMNS = ["task", "probe", "model", "target_dataset", "class_name", "recall", "n_true"]
CONFUSION_COLUMNS = ["task", "probe", "model", "target_dataset", "true_class", "pred_class", "count", "share"]
RELIABILITY_COLUMNS = ["task", "probe", "model", "arm", "bin", "confidence", "accuracy", "count"]


def _target_dataset(inp: AuditInputs, task: str, model: str) -> str:
    c = inp.cells
    if c.empty:
        return ""
    hit = c[(c["task"] == task) & (c["model"] == model)]
    return str(hit["target_dataset"].iloc[0]) if len(hit) else ""


def pooled_confusion(runs: Iterable[dict[str, np.ndarray]], n_classes: int = 0) -> np.ndarray:
    """Confusion counts ``C[true, predicted]`` summed over runs (target labels and predictions)."""
    mats = []
    for arr in runs:
        y = np.asarray(arr["y_test"], dtype=np.int64)
        p = np.asarray(arr["pred_test"], dtype=np.int64)
        mats.append((y, p))
    k = max([int(n_classes)] + [int(max(y.max(initial=-1), p.max(initial=-1))) + 1 for y, p in mats])
    C = np.zeros((k, k), dtype=np.int64)
    for y, p in mats:
        np.add.at(C, (y, p), 1)
    return C


def class_tables(inp: AuditInputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    recall_rows, conf_rows = [], []
    for (task, probe, model), files in sorted(inp.artifacts.items()):
        if not files:
            continue
        info = inp.task_info.get(task, {})
        names = list(info.get("class_names") or ())
        C = pooled_confusion((inp.load(f) for _k, f in sorted(files.items())), info.get("n_classes") or len(names))
        k = C.shape[0]
        names = names + [str(i) for i in range(len(names), k)] if len(names) < k else names[:k]
        dataset = _target_dataset(inp, task, model)
        support = C.sum(axis=1)
        for i in range(k):
            recall_rows.append({"task": task, "probe": probe, "model": model, "target_dataset": dataset,
                                "class_name": names[i], "recall": float(C[i, i] / support[i]) if support[i] else np.nan,
                                "n_true": int(support[i])})
            for j in range(k):
                conf_rows.append({"task": task, "probe": probe, "model": model, "target_dataset": dataset,
                                  "true_class": names[i], "pred_class": names[j], "count": int(C[i, j]),
                                  "share": float(C[i, j] / support[i]) if support[i] else np.nan})
    return pd.DataFrame(recall_rows, columns=RECALL_COLUMNS), pd.DataFrame(conf_rows, columns=CONFUSION_COLUMNS)


def reliability_table(inp: AuditInputs) -> pd.DataFrame:
    from prism_plugin.adaptation.calibration import ARMS

    rows = []
    for (task, probe, model), files in sorted(inp.artifacts.items()):
        sums: dict[str, np.ndarray] = {}
        for _k, f in sorted(files.items()):
            arr = inp.load(f)
            if "reliability" not in arr or "reliability_arms" not in arr:
                continue
            for arm, v in zip(arr["reliability_arms"].tolist(), arr["reliability"]):
                arm = str(arm)
                if arm not in sums:
                    sums[arm] = v.astype(float)
                elif sums[arm].shape == v.shape:
                    sums[arm] = sums[arm] + v
                else:  # another bin count (a task with other ece_bins): never mixed, never silently dropped
                    inp.notes.append(f"reliability: {f.name} has {v.shape[-1]} bins for arm {arm}, the other runs of "
                                     f"{model} on {task} ({probe}) {sums[arm].shape[-1]}; left out of the pooled bins")
        order = [a for a in ARMS if a in sums] + sorted(a for a in sums if a not in ARMS)
        for arm in order:
            count, conf, correct = sums[arm]
            for b in np.flatnonzero(count > 0):
                rows.append({"task": task, "probe": probe, "model": model, "arm": arm, "bin": int(b),
                             "confidence": float(conf[b] / count[b]), "accuracy": float(correct[b] / count[b]),
                             "count": int(round(count[b]))})
    return pd.DataFrame(rows, columns=RELIABILITY_COLUMNS)


# -- I: mechanism --------------------------------------------------------------------------------

MECHANISM_COLUMNS = ["task", "probe", "model", "target_dataset", "synthetic", "first_moment_shift", "target_drop"]


def mechanism_table(inp: AuditInputs) -> tuple[pd.DataFrame, dict[str, Any]]:
    """First-moment shift beside the target drop per encoder x target, and the Spearman of shift vs
    drop over the cells of each probe, separately for real and synthetic (``perturb:``) targets."""
    m = inp.means
    if "first_moment_shift" not in m.columns or not m["first_moment_shift"].notna().any():
        return pd.DataFrame(columns=MECHANISM_COLUMNS), {}
    d = m[["task", "probe", "model", "first_moment_shift"]].copy()
    d["target_drop"] = m["id_f1_macro"] - m["f1_macro"]
    cells = inp.cells if not inp.cells.empty else pd.DataFrame(columns=["task", "model", "target_dataset", "synthetic"])
    d = d.merge(cells[["task", "model", "target_dataset", "synthetic"]], on=["task", "model"], how="left")
    d["synthetic"] = d["synthetic"].fillna(False).astype(bool)
    d["target_dataset"] = d["target_dataset"].fillna("")
    d = d[MECHANISM_COLUMNS].sort_values(["probe", "synthetic", "task", "model"]).reset_index(drop=True)
    summary: dict[str, Any] = {}
    for probe, g in d.groupby("probe", sort=True):
        for synthetic, h in g.groupby("synthetic", sort=True):
            ok = h.dropna(subset=["first_moment_shift", "target_drop"])
            rho = float("nan")
            if len(ok) >= 3 and ok["first_moment_shift"].nunique() > 1 and ok["target_drop"].nunique() > 1:
                from scipy.stats import spearmanr

                rho = float(spearmanr(ok["first_moment_shift"], ok["target_drop"]).statistic)
            summary.setdefault(str(probe), {})["synthetic" if synthetic else "real"] = {
                "spearman_shift_vs_drop": rho, "n_cells": int(len(ok))}
    return d, summary


# -- all ----------------------------------------------------------------------------------------

def build(inp: AuditInputs, *, B: int = stats.BOOTSTRAP_B, seed: int = 0,
          compare: Sequence[tuple[str, str]] = (), held_out_only: bool = False
          ) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Every audit table (see :data:`TABLES`) and the headline numbers.

    ``held_out_only``: the tables of :data:`HELD_OUT_TABLES` use only the encoder x task cells whose
    exposure is ``held_out`` (the others keep every cell; ``exposure`` lists them all).
    """
    tables: dict[str, pd.DataFrame] = {}
    ranked = inp
    if held_out_only:
        ranked = held_out(inp)
        dropped = len(inp.cells) - len(ranked.cells)
        inp.notes.append(f"--held-out-only: {dropped} of {len(inp.cells)} encoder x task cells are not held out "
                         f"(in pretraining or unknown) and are left out of {', '.join(HELD_OUT_TABLES)}")
    if ranked.means.empty:
        tables["rank_matrix"], tables["rank_transfer"] = pd.DataFrame(), pd.DataFrame()
    else:
        tables["rank_matrix"], tables["rank_transfer"] = rank_tables(ranked, B, seed)
    tables["exposure"] = exposure_table(inp)
    tables["effective_robustness"] = effective_robustness_table(ranked)
    tables["calibration_transfer"], tables["calibration_summary"] = calibration_tables(inp)
    tables["reliability"] = reliability_table(inp)
    tables["adaptation_full"], tables["adaptation_scenarios"], tables["adaptation_methods"] = adaptation_tables(inp, B, seed)
    tables["selector_regret"], tables["selector_summary"] = (selector_tables(ranked) if not ranked.means.empty
                                                             else (pd.DataFrame(), pd.DataFrame()))
    tables["paired_bootstrap"] = paired_bootstrap_table(inp, B, seed, compare)
    tables["per_class_recall"], tables["confusion"] = class_tables(inp)
    tables["mechanism"], mechanism = mechanism_table(inp)
    tables["diagnostics"] = diagnostics_table(inp)
    if inp.results_dirs and not inp.artifacts:  # without directories the caller says why
        inp.notes.append("no per-example predictions (artifacts/) found: consensus, agl_acc, the paired "
                         "bootstrap, per-class recall, confusion and reliability need them")
    er = tables["effective_robustness"]
    if not er.empty and (er["caveat"] != "").any():
        n = int(er.loc[er["caveat"] != "", ["task", "probe"]].drop_duplicates().shape[0])
        inp.notes.append(f"effective robustness: the in-domain vs target line is ill-posed in {n} task x probe "
                         "group(s) (see the caveat column): read the residuals as the target ranking, not as "
                         "robustness beyond the line")
    headline = {
        "n_runs": int(len(inp.runs)),
        "tasks": sorted(inp.means["task"].unique().tolist()),
        "probes": sorted(inp.means["probe"].unique().tolist()),
        "models": sorted(inp.means["model"].unique().tolist()),
        "fraction": sorted(inp.runs["fraction"].unique().tolist()),
        "n_split_seeds": int(inp.means["n_split_seeds"].max()) if "n_split_seeds" in inp.means else 1,
        "bootstrap_B": int(B),
        "held_out_only": bool(held_out_only),
        "notes": inp.notes,
    }
    rt = tables["rank_transfer"]
    if not rt.empty:
        ranked = rt.loc[rt["n_models"] >= 3]  # Spearman and "dethroned" need three or more encoders
        if not ranked.empty:
            headline["median_spearman_rho"] = float(ranked["spearman_rho"].median())
            headline["dethroned"] = f"{int(ranked['dethroned'].sum())}/{len(ranked)}"
        if len(ranked) < len(rt):
            inp.notes.append(f"rank transfer: {len(rt) - len(ranked)} of {len(rt)} task x probe groups have fewer than "
                             "3 encoders: no Spearman rho, and 'dethroned' is not counted for them")
    ex = tables["exposure"]
    if not ex.empty:
        headline["exposure"] = {state: int((ex["exposure"] == state).sum())
                                for state in ("in_pretraining", "held_out", "unknown")}
    if not er.empty:
        headline["effective_robustness_caveats"] = int(er.loc[er["caveat"] != "", ["task", "probe"]]
                                                       .drop_duplicates().shape[0])
    if mechanism:
        headline["mechanism"] = mechanism
    am = tables["adaptation_methods"]
    if not am.empty:
        headline["adaptation"] = {f"{r.method}@K{r.K}/{r.probe}": {"mean_gain": r.mean_gain,
                                                                   "scenarios_hurt": f"{r.scenarios_hurt}/{r.n_scenarios}",
                                                                   "cells_hurt": f"{r.cells_hurt}/{r.cells}"}
                                  for r in am.itertuples()}
    return tables, headline
