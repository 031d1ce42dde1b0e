"""The audit's tables from results directories (``prism-run audit``).

Input: the per-run rows of one or more results directories written by ``prism-run`` (found by
:func:`prism_plugin.tables.find_runs_files`; see :func:`result_files`), as the summary plugin
:mod:`prism_plugin.adaptation.audit_plugin` receives them; every run that carries the adaptation
plugin's columns (transfer runs by default) takes part. Runs are grouped by **task** (one source -> target pair) and **probe** (head kind); the
encoders compared are the distinct ``model`` values, each averaged over its seeds at one label
fraction (default: the largest fraction of each task, i.e. the audit's full source split).

Tables (CSV, one file each; see :data:`TABLES`):

* ``rank_matrix`` / ``rank_transfer`` - in-domain (source held-out) vs target macro-F1 per encoder,
  ranks, Spearman rho with a bootstrap CI over encoders, whether the in-domain best is dethroned,
  and the regret of selecting by in-domain accuracy (Sec. 5.1, A.7, A.15-A.16).
* ``calibration_transfer`` / ``calibration_summary`` - top-label ECE, adaptive ECE, NLL and
  multiclass Brier per calibration arm, and how many encoder x target cells each arm improves
  over the raw probe (A.13).
* ``adaptation_full`` - every method on the whole target (its own prior) per encoder;
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
  target examples, averaged over seeds (A.9); needs ``artifacts/``.
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

TABLES = ("rank_matrix", "rank_transfer", "calibration_transfer", "calibration_summary", "adaptation_full",
          "adaptation_scenarios", "adaptation_methods", "selector_regret", "selector_summary",
          "paired_bootstrap", "diagnostics")
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
    means: pd.DataFrame                     # seed means per (task, probe, model)
    artifacts: dict[tuple[str, str, str], list[Path]] = field(default_factory=dict)  # (task, probe, model) -> npz
    task_info: dict[str, dict] = field(default_factory=dict)  # task -> {priors, class_names, n_classes}
    notes: list[str] = field(default_factory=list)
    #: method name -> needs target labels (an upper bound), from the adaptation registry
    upper_bounds: dict[str, bool] = field(default_factory=dict)
    #: methods in registry order (then any other method found in the columns)
    method_order: tuple[str, ...] = ()
    #: the results directories read for the per-example artifacts (none given: those tables are skipped)
    results_dirs: tuple[Path, ...] = ()


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


def _task_info(dirs: Sequence[Path]) -> dict[str, dict]:
    task_info: dict[str, dict] = {}
    for d in dirs:
        summary = read_summary(d)
        if not summary:
            continue
        try:
            resolved = summary.get("resolved_task") or {}
        except AttributeError:
            resolved = {}
        if resolved.get("name"):
            task_info[str(resolved["name"])] = {"priors": resolved.get("priors") or {},
                                                "class_names": tuple(resolved.get("class_names") or ()),
                                                "n_classes": int(resolved.get("n_classes") or 0)}
    return task_info


def _artifacts(runs: pd.DataFrame, dirs: Sequence[Path]) -> dict[tuple[str, str, str], list[Path]]:
    """(task, probe, model) -> the per-example prediction files of the audited runs.

    The rows do not say which directory they were read from, so each directory's ``runs.csv``
    key columns are read to find whose ``artifacts/`` hold which (task, probe, model).
    """
    from prism_plugin.adaptation.plugin import artifact_name

    wanted = {(str(t), str(p), str(m), float(f)) for t, p, m, f in
              runs[["task", "probe", "model", "fraction"]].drop_duplicates().itertuples(index=False)}
    artifacts: dict[tuple[str, str, str], list[Path]] = {}
    for d in dirs:
        folder = Path(d) / "artifacts"
        if not folder.is_dir() or not (Path(d) / "runs.csv").exists():
            continue
        try:
            keys = pd.read_csv(Path(d) / "runs.csv", usecols=lambda c: c in ("task", "probe", "model", "fraction"))
        except (OSError, ValueError, pd.errors.ParserError):
            continue
        if not {"task", "model", "fraction"} <= set(keys.columns):
            continue
        keys = _with_probe(keys)
        for task, probe, model, fr in keys[["task", "probe", "model", "fraction"]].drop_duplicates().itertuples(
                index=False):
            key = (str(task), str(probe), str(model), float(fr))
            if key not in wanted:
                continue
            files = sorted(folder.glob(artifact_name(key[0], key[3], "*")))  # every seed
            if files:
                artifacts.setdefault(key[:3], []).extend(files)
    return artifacts


def prepare(runs: pd.DataFrame, fraction: float | None = None, results_dirs: Sequence[Path] = (),
            host=None) -> AuditInputs:
    """Seed means per (task, probe, model) of the audited rows at one label fraction per task."""
    notes: list[str] = []
    if runs is None or runs.empty or AUDIT_COLUMN not in runs.columns or not runs[AUDIT_COLUMN].notna().any():
        raise PrismError("no run carries the adaptation plugin's columns (id_f1_macro, gain_*, ...): run transfer "
                         "tasks (or tasks with `adaptation:`) with the adaptation plugin enabled")
    for col in ("model", "task", "fraction", "seed", "f1_macro"):
        if col not in runs.columns:
            raise PrismError(f"the audited runs lack column {col!r}; not a prism-run results table")
    runs = _with_probe(runs[runs[AUDIT_COLUMN].notna()].copy())
    if fraction is None:
        top = runs.groupby("task")["fraction"].transform("max")
        runs = runs[runs["fraction"] == top]
    else:
        runs = runs[np.isclose(runs["fraction"].astype(float), float(fraction))]
        if runs.empty:
            raise PrismError(f"--fraction {fraction}: no audited run at this label fraction")
    dup = runs.duplicated(subset=["task", "probe", "model", "seed"], keep="last")
    if dup.any():
        notes.append(f"{int(dup.sum())} duplicate (task, probe, model, seed) rows: the last row is kept")
        runs = runs[~dup]
    numeric = [c for c in runs.columns if c not in ("model", "task", "probe")
               and pd.api.types.is_numeric_dtype(runs[c])]
    means = runs.groupby(["task", "probe", "model"], sort=True)[numeric].mean().reset_index()
    extra = runs.groupby(["task", "probe", "model"], sort=True).agg(
        n_seeds=("seed", "nunique"), **{c: (c, "first") for c in ("src", "tgt", "pair") if c in runs.columns}
    ).reset_index()
    means = means.drop(columns=[c for c in ("seed",) if c in means.columns]).merge(extra, on=["task", "probe", "model"])
    dirs = [Path(d) for d in results_dirs]
    upper = method_traits(host)
    return AuditInputs(runs=runs, means=means, artifacts=_artifacts(runs, dirs), task_info=_task_info(dirs),
                       notes=notes, upper_bounds=upper, method_order=tuple(upper), results_dirs=tuple(dirs))


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

def rank_tables(inp: AuditInputs, B: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    m = inp.means.copy()
    m["id_rank"] = m.groupby(GROUP)["id_f1_macro"].rank(ascending=False, method="min")
    m["target_rank"] = m.groupby(GROUP)["f1_macro"].rank(ascending=False, method="min")
    m["relative_gap"] = (m["id_f1_macro"] - m["f1_macro"]) / m["id_f1_macro"]
    cols = [c for c in ["task", "probe", "pair", "model", "n_seeds", "id_f1_macro", "id_accuracy", "f1_macro",
                        "relative_gap", "id_rank", "target_rank"] if c in m.columns]
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
            "n_models": len(g), "spearman_rho": ci["rho"], "rho_ci_low": ci["ci_low"], "rho_ci_high": ci["ci_high"],
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
                row[k] = float(g[f"calx_{arm}_{k}"].mean())
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
                              "max_gain": float(gains.max()), "models_hurt": int((gains < 0).sum())})
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


def _artifact_preds(inp: AuditInputs, task: str, probe: str) -> dict[str, dict[int, dict[str, np.ndarray]]]:
    """model -> seed -> arrays, for the models of (task, probe) that saved artifacts."""
    out: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    for (t, p, model), files in inp.artifacts.items():
        if t != task or p != probe:
            continue
        for f in files:
            arr = _load_npz(f)
            out.setdefault(model, {})[int(arr["seed"])] = arr
    return out


def _cross_scores(preds: dict[str, dict[int, dict[str, np.ndarray]]], id_acc: dict[str, float],
                  idx: np.ndarray | None = None, seeds: Sequence[int] | None = None) -> dict[str, dict[str, float]]:
    """consensus and agl_acc per model, averaged over the seeds every model has."""
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
    for s, arr in any_model.items():
        y = arr["y_test"].astype(np.int64)
        n_classes = info.get("n_classes") or (int(y.max()) + 1)
        try:
            vec = pri.prior_vector(prior, n_classes, info.get("class_names", ()), custom=cfg.get("custom"),
                                   target_labels=y)
        except PrismError:
            return {}
        for d in range(int(cfg.get("draws", 1))):
            idx, _ = pri.resample(y, vec, k, pri.draw_seed(int(cfg.get("seed", 0)) + s, prior, k, d))
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
        y = preds[names[0]][common[0]]["y_test"].astype(np.int64)
        for a, b in pairs:
            A = np.stack([preds[a][s]["pred_test"] for s in common])
            Bm = np.stack([preds[b][s]["pred_test"] for s in common])
            res = stats.paired_bootstrap_f1(y, A, Bm, B=B, seed=seed)
            rows.append({"task": task, "probe": probe, "model_a": a, "model_b": b, "n_seeds": len(common), **res})
    return pd.DataFrame(rows)


# -- F: diagnostics -----------------------------------------------------------------------------

def diagnostics_table(inp: AuditInputs) -> pd.DataFrame:
    cols = [c for c in ("dom_decode_acc", "dom_decode_within", "dom_decode_perm", "dom_decode_class",
                        "proj_f1_macro", "proj_gain", "proj_id_delta") if c in inp.means.columns]
    if not cols:
        return pd.DataFrame()
    keep = inp.means[["task", "probe", "model", "f1_macro"] + cols]
    return keep.dropna(subset=cols, how="all").reset_index(drop=True)


# -- all ----------------------------------------------------------------------------------------

def build(inp: AuditInputs, *, B: int = stats.BOOTSTRAP_B, seed: int = 0,
          compare: Sequence[tuple[str, str]] = ()) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Every audit table (see :data:`TABLES`) and the headline numbers."""
    tables: dict[str, pd.DataFrame] = {}
    tables["rank_matrix"], tables["rank_transfer"] = rank_tables(inp, B, seed)
    tables["calibration_transfer"], tables["calibration_summary"] = calibration_tables(inp)
    tables["adaptation_full"], tables["adaptation_scenarios"], tables["adaptation_methods"] = adaptation_tables(inp, B, seed)
    tables["selector_regret"], tables["selector_summary"] = selector_tables(inp)
    tables["paired_bootstrap"] = paired_bootstrap_table(inp, B, seed, compare)
    tables["diagnostics"] = diagnostics_table(inp)
    if inp.results_dirs and not inp.artifacts:  # without directories the caller says why
        inp.notes.append("no per-example predictions (artifacts/) found: consensus, agl_acc and the paired "
                         "bootstrap need them")
    headline = {
        "n_runs": int(len(inp.runs)),
        "tasks": sorted(inp.means["task"].unique().tolist()),
        "probes": sorted(inp.means["probe"].unique().tolist()),
        "models": sorted(inp.means["model"].unique().tolist()),
        "fraction": sorted(inp.runs["fraction"].unique().tolist()),
        "bootstrap_B": int(B),
        "notes": inp.notes,
    }
    rt = tables["rank_transfer"]
    if not rt.empty:
        headline["median_spearman_rho"] = float(rt["spearman_rho"].median())
        headline["dethroned"] = f"{int(rt['dethroned'].sum())}/{len(rt)}"
    am = tables["adaptation_methods"]
    if not am.empty:
        headline["adaptation"] = {f"{r.method}@K{r.K}/{r.probe}": {"mean_gain": r.mean_gain,
                                                                   "scenarios_hurt": f"{r.scenarios_hurt}/{r.n_scenarios}",
                                                                   "cells_hurt": f"{r.cells_hurt}/{r.cells}"}
                                  for r in am.itertuples()}
    return tables, headline
