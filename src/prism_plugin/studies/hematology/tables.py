"""The audit's tables from :class:`~.inputs.AuditInputs` (``prism-run audit`` writes one CSV each;
:data:`TABLE_DESCRIPTIONS` says what each holds). Definitions the one-liners leave out:

* ``rank_matrix`` / ``rank_transfer``: CIs bootstrap the source-split means; Spearman rho has a
  bootstrap CI over encoders; regret of selecting by in-domain accuracy (Sec. 5.1, A.7, A.15-A.16).
* ``exposure``: ``in_pretraining`` / ``held_out`` / ``unknown`` (:mod:`.exposure`); ``held_out_only``
  restricts :data:`HELD_OUT_TABLES` to the held-out cells.
* ``effective_robustness``: residuals from the least-squares line of target on in-domain macro-F1,
  with a ``caveat`` when the line is ill-posed (in-domain SD < 0.01 or fewer than 3 encoders, A.4).
* ``per_class_recall`` / ``confusion`` / ``reliability`` / ``paired_bootstrap`` and the selectors
  ``consensus`` / ``agl_acc`` need per-example ``artifacts/`` (:mod:`.per_example`, :mod:`.selectors`);
  reliability pools 15 equal-width confidence bins over the runs (A.8, A.9).
* ``mechanism``: first-moment shift beside the target drop; audit.json gives their Spearman per probe,
  real and synthetic (``perturb:``) targets apart.
* ``adaptation_*``: every ``gain_<m>`` / ``f1_macro_<m>`` column pair of the runs, adaptation-registry
  order first, so a plugin's method is audited like a built-in; ``upper_bound`` marks methods
  registered with ``needs_labels`` (A.12).
* ``diagnostics``: domain decodability and projection columns when the runs computed them (A.1, A.3).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from prism_plugin.adaptation import priors as pri
from prism_plugin.adaptation import selection as sel
from prism_plugin.adaptation import stats
from prism_plugin.adaptation.calibration import ARMS as CAL_ARMS
from prism_plugin.adaptation.calibration import METRICS as CAL_METRICS
from prism_plugin.studies.hematology.inputs import GROUP, AuditInputs
from prism_plugin.studies.hematology.per_example import class_tables, paired_bootstrap_table, reliability_table
from prism_plugin.studies.hematology.selectors import selector_tables

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


def tables_markdown(written: Sequence[str]) -> str:
    """audit.md's list of the CSV tables written, one line each."""
    lines = ["## Tables", "", "CSV files beside this one (empty tables are not written):", ""]
    lines += [f"* `{name}.csv` - {TABLE_DESCRIPTIONS.get(name, '')}" for name in written]
    return "\n".join(lines) + "\n"

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

    from prism_plugin.studies.hematology.exposure import HELD_OUT

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
