"""Probe sensitivity: do model rankings survive a change of probe? (PROTOCOL §6.17)

Two comparisons, both on **cells** = seed means per (model, dataset or pair, fraction, probe setting):

* **Regularisation sweep** — ``c_ablation``: per (model, dataset, fraction, C) the seed-mean ``auroc`` and
  seed-mean **raw** fixed-bin ``ece_fixed`` of the logistic probe. ``c_ranking``: per (dataset, fraction) and every
  C ≠ 1, the Kendall τ-b (SciPy ``kendalltau``) between the models' values at C and at C = 1, for AUROC and for raw
  ECE, with an *inversion* flag when τ < 0 (the paper: AUROC mean τ 0.823 with 0 of 36 inversions, ECE 0.024 with
  16 of 36). Transfer runs give ``ood_c_ablation`` / ``ood_c_ranking`` per pair.
* **Linear vs MLP probe** — ``mlp_ranking``: per (dataset, fraction) the same two τ between the logistic probe at C
  = 1 and the MLP probe (kind ``mlp``) (the paper: 0.85 for AUROC against 0.29 for ECE); ``ood_mlp_ranking`` for
  transfer pairs.

A τ needs at least 2 models with finite values at both settings; otherwise the row says ``not defined: needs ≥ 2
models`` (with the count) instead of a number. A constant column (e.g. two models with the same AUROC) leaves τ-b
undefined too and says so.

Where the C of a run comes from: the settings its results directory's ``summary.json`` records for its head
(``resolved_task``, read by :func:`load_runs`); the ``summarize`` hook reads the ``probe_C`` column of the runs
tables (written by sweep variants). Runs whose C is unknown are left out. The same run found twice (e.g. a plain
run and the C = 1 variant of a sweep) counts once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.heads.base import DEFAULT_KIND, probe_settings
from prism_plugin.results import read_summary
from prism_plugin.hookspecs import hookimpl
from prism_plugin.tables import RunTables, SummaryOutput

BASELINE_C = 1.0
#: The paper's grid of regularisation constants (PROTOCOL §6.17).
PAPER_C_VALUES = (0.01, 0.1, 1.0, 10.0, 100.0)
METRICS = ("auroc", "ece_fixed")
NEEDS = "not defined: needs ≥ 2 models"
C_ATOL = 1e-12

ABLATION_COLUMNS = ["model", "dataset", "fraction", "C", "auroc", "ece_fixed", "n_seeds"]
RANKING_COLUMNS = ["dataset", "fraction", "C", "n_models", "kendall_auroc", "kendall_ece",
                   "auroc_inverted", "ece_inverted", "note"]
MLP_RANKING_COLUMNS = ["dataset", "fraction", "mlp_settings", "n_models", "kendall_auroc", "kendall_ece",
                       "auroc_inverted", "ece_inverted", "note"]


# --------------------------------------------------------------------------- loading
def _recorded_probes(results_dir: Path) -> dict[str, Mapping[str, Any]]:
    """Head kind -> resolved settings of the runs in ``results_dir``, as its ``summary.json`` records
    them (``resolved_task``: the ``probes`` of a grid, else the one ``probe``)."""
    try:
        task = read_summary(results_dir).get("resolved_task") or {}
    except AttributeError:
        return {}
    probes = task.get("probes") or [task.get("probe") or {}]
    return {str(p.get("kind", DEFAULT_KIND)): p for p in probes if isinstance(p, Mapping)}


def load_runs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Every ``runs.csv`` under ``paths`` (searched recursively), concatenated.

    Each row gets ``results_dir``, and from the settings its ``summary.json`` records for the row's
    head: ``probe_C`` (NaN for a head without C) and ``probe_settings`` (``hidden=256,...``), so
    different configurations of one head stay apart. Returns an empty frame when nothing is found.
    """
    import pandas as pd
    from prism_plugin.results import runs_files

    frames = []
    for f in runs_files(paths):
        try:
            df = pd.read_csv(f)
        except Exception:  # an unreadable table is skipped; the summary notes what it used
            continue
        df = df.copy()  # consolidate the wide table (one block per dtype) before adding columns
        df["results_dir"] = str(f.parent)
        probes = _recorded_probes(f.parent)
        settings = [probes.get(str(k), {}) for k in df.get("probe", pd.Series(DEFAULT_KIND, index=df.index))]
        df["probe_C"] = [float(p["C"]) if "C" in p else np.nan for p in settings]
        df["probe_settings"] = [",".join(f"{k}={v}" for k, v in sorted(probe_settings(p).items())) for p in settings]
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------- the report of a sweep
#: The column keeping a sweep row's model name when the report labels the row by its variant.
MODEL_BASE = "model_base"


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not np.isfinite(v)) or str(v) in ("", "nan")


def variant_model(model: Any, sweep_key: Any, sweep_value: Any) -> str:
    """How the report names the runs of one sweep variant: ``"<model> · C = 0.1"`` for
    ``probe.C``, ``"<model> · kind = mlp"`` for ``probe.kind``; the model alone outside a sweep."""
    if _missing(sweep_key):
        return str(model)
    name = str(sweep_key).rsplit(".", 1)[-1]
    value = sweep_value
    if not isinstance(value, str):
        value = "?" if _missing(value) else f"{float(value):g}"
    else:
        try:
            value = f"{float(value):g}"
        except ValueError:
            pass
    return f"{model} · {name} = {value}"


def sweep_run_tables(paths: Iterable[str | Path], host=None):
    """The probe-sweep rows (``sweep_key`` set) of every ``runs.csv`` under ``paths`` as
    :class:`~prism_plugin.tables.RunTables`, each variant its own model (:func:`variant_model`;
    the model's name kept in ``model_base``), so the report's cells, diagrams and verdict describe
    each C (or probe kind) on its own instead of pooling them. ``None`` without sweep rows.
    (:func:`prism_plugin.tables.tables_from_results` leaves these rows out.)"""
    import pandas as pd
    from prism_plugin.plugins import host_or_shared
    from prism_plugin.results import runs_files
    from prism_plugin.tables import RunTables, read_run_table, routed_rows

    kinds = host_or_shared(host).tables
    parts: dict[str, list[pd.DataFrame]] = {}
    for file in runs_files(paths):
        df = read_run_table(file, ("model", "fraction", "seed"))
        if "sweep_key" not in df or not df["sweep_key"].notna().any():
            continue
        df = df.loc[df["sweep_key"].notna()].copy()
        df[MODEL_BASE] = df["model"].astype(str)
        value = df["sweep_value"] if "sweep_value" in df else pd.Series(np.nan, index=df.index)
        df["model"] = [variant_model(m, k, v) for m, k, v in zip(df[MODEL_BASE], df["sweep_key"], value)]
        for table, rows in routed_rows(df, kinds):
            if table in kinds:  # tables_from_results names an unknown table kind of the non-sweep rows
                parts.setdefault(table, []).append(rows)
    if not parts:
        return None
    out = {}
    for table, frames in parts.items():
        df = pd.concat(frames, ignore_index=True)
        key = [c for c in kinds.get(table).key_columns if c in df]
        out[table] = df.loc[~df.duplicated(subset=key)]  # a variant read twice counts once
    return RunTables(out)


def with_sweep_variants(run_tables, paths: Iterable[str | Path], host=None):
    """``run_tables`` (the non-sweep rows, or ``None``) with the sweep variants of ``paths`` added
    (:func:`sweep_run_tables`); unchanged when there are none."""
    import pandas as pd
    sweeps = sweep_run_tables(paths, host)
    if sweeps is None:
        return run_tables
    if run_tables is None:
        return sweeps
    from prism_plugin.tables import RunTables

    merged = {name: run_tables[name] for name in run_tables.present()}
    for name in sweeps.present():
        merged[name] = pd.concat([merged[name], sweeps[name]], ignore_index=True) if name in merged else sweeps[name]
    return RunTables(merged)


def _prepare(runs: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd
    df = runs.copy()
    if MODEL_BASE in df.columns:  # variant-labelled report rows: rank the models, not the variants
        df["model"] = df[MODEL_BASE].where(df[MODEL_BASE].notna(), df["model"])
    if "probe" not in df.columns:
        df["probe"] = DEFAULT_KIND
    df["probe"] = df["probe"].fillna(DEFAULT_KIND).astype(str)
    if "probe_C" not in df.columns:
        df["probe_C"] = np.nan
    df["probe_C"] = pd.to_numeric(df["probe_C"], errors="coerce")
    if "probe_settings" not in df.columns:
        df["probe_settings"] = ""
    df["probe_settings"] = df["probe_settings"].fillna("").astype(str)
    return df


def split_tables(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """In-distribution rows (keyed by ``dataset``) and transfer rows (keyed by ``pair``)."""
    import pandas as pd
    df = _prepare(runs)
    if "reference_table" in df.columns:
        table = df["reference_table"].fillna("indomain").astype(str)
    else:
        table = pd.Series("indomain", index=df.index)
    is_transfer = table.str.contains("transfer")
    out = {}
    ind = df.loc[~is_transfer]
    if len(ind) and "dataset" in ind.columns:
        out["indomain"] = ind
    tr = df.loc[is_transfer]
    if len(tr):
        tr = tr.copy()
        if "pair" not in tr.columns:
            tr["pair"] = tr["src"].astype(str) + "->" + tr["tgt"].astype(str)
        out["transfer"] = tr
    return out


# --------------------------------------------------------------------------- τ
def kendall(x: Iterable[float], y: Iterable[float]) -> tuple[float, str]:
    """Kendall τ-b between two aligned value vectors, and why it is undefined ('' when defined)."""
    from scipy import stats
    x = np.asarray(list(x), dtype=float)
    y = np.asarray(list(y), dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = len(x)
    if n < 2:
        return float("nan"), f"{NEEDS} ({n} with values at both settings)"
    if np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan"), f"not defined: the {n} models have equal values at one setting"
    return float(stats.kendalltau(x, y).statistic), ""


def count_inversions(taus: Iterable[float]) -> int:
    """How many defined τ are negative (the ordering flipped more than it held)."""
    return int(sum(1 for t in taus if np.isfinite(t) and t < 0))


def _dedupe(df: pd.DataFrame, key: list[str], notes: list[str], what: str) -> pd.DataFrame:
    dup = df.duplicated(subset=key, keep="first")
    if dup.any():
        notes.append(f"{what}: {int(dup.sum())} run(s) appear twice (e.g. a plain run and a sweep variant "
                     "with the same probe); each counts once")
    return df.loc[~dup]


# --------------------------------------------------------------------------- tables
def c_ablation(rows: pd.DataFrame, setting: str = "dataset", notes: list[str] | None = None) -> pd.DataFrame:
    """Seed-mean AUROC and raw fixed ECE per (model, setting, fraction, C) of the logistic probe."""
    import pandas as pd
    notes = notes if notes is not None else []
    df = _prepare(rows)
    df = df.loc[(df["probe"] == "logistic") & df["probe_C"].notna()]
    cols = ["model", setting, "fraction", "C", "auroc", "ece_fixed", "n_seeds"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    df = _dedupe(df, ["model", setting, "fraction", "seed", "probe_C"], notes, "c_ablation")
    g = df.groupby(["model", setting, "fraction", "probe_C"], sort=False)
    out = g.agg(auroc=("auroc", "mean"), ece_fixed=("ece_fixed", "mean"), n_seeds=("seed", "nunique")).reset_index()
    out = out.rename(columns={"probe_C": "C"})
    order = {m: i for i, m in enumerate(dict.fromkeys(df["model"]))}
    out = out.sort_values(["C", setting, "fraction"], kind="stable")
    out = out.assign(_m=out["model"].map(order)).sort_values(["C", setting, "fraction", "_m"], kind="stable")
    return out.drop(columns="_m")[cols].reset_index(drop=True)


def _compare(left: pd.DataFrame, right: pd.DataFrame) -> dict[str, Any]:
    """τ for AUROC and ECE between two per-model value frames (index model)."""
    common = [m for m in left.index if m in right.index]
    res: dict[str, Any] = {}
    notes = []
    n_models = 0
    for metric, short in (("auroc", "auroc"), ("ece_fixed", "ece")):
        a = left.loc[common, metric].to_numpy(dtype=float) if common else np.array([])
        b = right.loc[common, metric].to_numpy(dtype=float) if common else np.array([])
        tau, why = kendall(a, b)
        res[f"kendall_{short}"] = tau
        res[f"{short}_inverted"] = bool(np.isfinite(tau) and tau < 0) if np.isfinite(tau) else None
        n_models = max(n_models, int(np.sum(np.isfinite(a) & np.isfinite(b))))
        if why:
            notes.append(f"{short.upper()} {why}")
    res["n_models"] = n_models
    merged = sorted(set(notes), key=notes.index)
    if len(merged) == 2 and merged[0].split(" ", 1)[1] == merged[1].split(" ", 1)[1]:
        merged = [merged[0].split(" ", 1)[1]]
    res["note"] = "; ".join(merged)
    return res


def c_ranking(ablation: pd.DataFrame, setting: str = "dataset", baseline: float = BASELINE_C) -> pd.DataFrame:
    """Kendall τ of the model ordering at each C against C = ``baseline``, per (setting, fraction)."""
    import pandas as pd
    cols = [setting if c == "dataset" else c for c in RANKING_COLUMNS]
    rows = []
    if ablation.empty:
        return pd.DataFrame(columns=cols)
    for (s, f), g in ablation.groupby([setting, "fraction"], sort=False):
        at = {c: gc.set_index("model") for c, gc in g.groupby("C", sort=True)}
        base_key = next((c for c in at if abs(c - baseline) <= C_ATOL * max(1.0, abs(baseline))), None)
        for c in sorted(at):
            if base_key is not None and c == base_key:
                continue
            if base_key is None:
                rows.append({setting: s, "fraction": f, "C": c, "n_models": 0, "kendall_auroc": np.nan,
                             "kendall_ece": np.nan, "auroc_inverted": None, "ece_inverted": None,
                             "note": f"not defined: no runs at C = {baseline:g} to compare with"})
                continue
            rows.append({setting: s, "fraction": f, "C": c, **_compare(at[c], at[base_key])})
    return pd.DataFrame(rows, columns=cols)


def mlp_cells(rows: pd.DataFrame, setting: str = "dataset", baseline: float = BASELINE_C,
              notes: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seed-mean cells of the linear probe at C = ``baseline`` and of every MLP configuration."""
    notes = notes if notes is not None else []
    df = _prepare(rows)
    lin = df.loc[(df["probe"] == "logistic") & np.isclose(df["probe_C"].astype(float), baseline, rtol=0, atol=C_ATOL)]
    mlp = df.loc[df["probe"] == "mlp"]
    lin = _dedupe(lin, ["model", setting, "fraction", "seed"], notes, "linear probe at C = 1")
    mlp = _dedupe(mlp, ["model", setting, "fraction", "seed", "probe_settings"], notes, "MLP probe")
    agg = dict(auroc=("auroc", "mean"), ece_fixed=("ece_fixed", "mean"), n_seeds=("seed", "nunique"))
    lin_c = lin.groupby(["model", setting, "fraction"], sort=False).agg(**agg).reset_index() if len(lin) else None
    mlp_c = (mlp.groupby(["model", setting, "fraction", "probe_settings"], sort=False).agg(**agg).reset_index()
             if len(mlp) else None)
    return lin_c, mlp_c


def mlp_ranking(rows: pd.DataFrame, setting: str = "dataset", baseline: float = BASELINE_C,
                notes: list[str] | None = None) -> pd.DataFrame:
    """Kendall τ between the model orderings under the linear probe (C = 1) and the MLP probe."""
    import pandas as pd
    cols = [setting if c == "dataset" else c for c in MLP_RANKING_COLUMNS]
    lin, mlp = mlp_cells(rows, setting, baseline, notes)
    if mlp is None:
        return pd.DataFrame(columns=cols)
    out = []
    for (s, f, sig), g in mlp.groupby([setting, "fraction", "probe_settings"], sort=False):
        if lin is None:
            base = pd.DataFrame(columns=["auroc", "ece_fixed"])
        else:
            base = lin.loc[(lin[setting] == s) & np.isclose(lin["fraction"].astype(float), float(f))].set_index("model")
        row = {setting: s, "fraction": f, "mlp_settings": sig, **_compare(g.set_index("model"), base)}
        if base.empty:
            row["note"] = f"not defined: no linear-probe runs at C = {baseline:g} for this cell"
        out.append(row)
    return pd.DataFrame(out, columns=cols)


def headline(ranking: pd.DataFrame, prefix: str) -> dict[str, Any]:
    """Mean τ and inversion counts over the defined comparisons of a ranking table."""
    out: dict[str, Any] = {}
    if ranking.empty:
        return out
    for short in ("auroc", "ece"):
        taus = ranking[f"kendall_{short}"].astype(float)
        defined = taus[np.isfinite(taus)]
        out[f"{prefix}_{short}_comparisons"] = int(len(defined))
        out[f"{prefix}_{short}_tau_mean"] = float(defined.mean()) if len(defined) else float("nan")
        out[f"{prefix}_{short}_inversions"] = count_inversions(defined)
    return out


def sensitivity_tables(runs: pd.DataFrame, baseline: float = BASELINE_C) -> SummaryOutput:
    """Every probe-sensitivity table that the runs support (see the module docstring)."""
    out = SummaryOutput()
    if runs is None or runs.empty:
        return out
    parts = split_tables(runs)
    for kind, setting, prefix in (("indomain", "dataset", ""), ("transfer", "pair", "ood_")):
        rows = parts.get(kind)
        if rows is None:
            continue
        notes: list[str] = []
        abl = c_ablation(rows, setting, notes)
        n_c = abl["C"].nunique() if len(abl) else 0
        if n_c >= 2:
            out.tables[f"{prefix}c_ablation"] = abl
            rank = c_ranking(abl, setting, baseline)
            out.tables[f"{prefix}c_ranking"] = rank
            out.headline.update(headline(rank, f"{prefix}c_ranking"))
            n_models = abl["model"].nunique()
            if n_models < 2:
                out.notes.append(f"{prefix}c_ranking: Kendall τ {NEEDS} (only {', '.join(map(str, abl['model'].unique()))})")
        mlp = mlp_ranking(rows, setting, baseline, notes)
        if len(mlp):
            out.tables[f"{prefix}mlp_ranking"] = mlp
            out.headline.update(headline(mlp, f"{prefix}mlp_ranking"))
            if mlp["n_models"].max() < 2:
                out.notes.append(f"{prefix}mlp_ranking: Kendall τ {NEEDS} with both a linear (C = {baseline:g}) "
                                 "and an MLP run")
        out.notes.extend(notes)
    return out


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """``c_ablation``/``c_ranking`` (and ``ood_`` twins) when runs at ≥ 2 values of C are present;
    ``mlp_ranking`` when MLP-probe runs are present. Nothing otherwise."""
    import pandas as pd
    frames = []
    for name in ("indomain", "transfer"):
        df = getattr(tables, name, None)
        if df is not None:
            frames.append(df.assign(reference_table=name))
    if not frames:
        return None
    runs = pd.concat(frames, ignore_index=True)
    if "probe_C" not in runs.columns and ("probe" not in runs.columns or not (runs["probe"] == "mlp").any()):
        return None
    baseline = float((options or {}).get("baseline_C", BASELINE_C))
    out = sensitivity_tables(runs, baseline)
    return out if (out.tables or out.notes) else None


__all__ = ["BASELINE_C", "MODEL_BASE", "sweep_run_tables", "variant_model", "with_sweep_variants", "NEEDS", "PAPER_C_VALUES", "c_ablation", "c_ranking", "count_inversions", "headline",
           "kendall", "load_runs", "mlp_cells", "mlp_ranking", "sensitivity_tables", "split_tables", "summarize"]
