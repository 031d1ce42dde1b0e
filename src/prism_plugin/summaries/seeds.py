"""Seed-level summaries: breaking points (PROTOCOL §6.15) and seed variability (§6.16).

* ``breaking_points_by_threshold``: one row per dataset (PCam, BRACS, CRC, MHIST, LungHist700, SPIDER-Breast, then
  others by first appearance) × model (display order CLIP, PLIP, CONCH, VIRCHOW2, UNI, GigaPath, H-Optimus-0,
  MIDNIGHT, then others); for each threshold t (0.4, 0.5, 0.6, 0.7, 0.8; column ``thr_<t>``) the smallest fraction
  whose seed-mean ``f1_macro`` is ≥ t, NaN if no fraction reaches it. Columns: dataset, model, thr_0.4, ….
* "moves by" (CHANGELOG, e.g. 0.64 on MHIST): per dataset, the mean over the models with at least 2 reached
  thresholds of (max − min reached fraction). Not defined for a dataset where no model reaches 2 thresholds.
* ``seed_variability_auroc`` / ``seed_variability_ece``: in-distribution runs grouped by (model, dataset, fraction)
  in pandas' sorted group order → mean, std (ddof = 1; NaN for a single seed), min, max of ``auroc`` /
  ``ece_scaled_fixed``. Columns: model, dataset, fraction, mean, std, min, max.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.summaries.conventions import DATASET_ORDER, model_order, order_like, require_columns
from prism_plugin.tables import RunTables, SummaryOutput

THRESHOLDS: tuple[float, ...] = (0.4, 0.5, 0.6, 0.7, 0.8)
SEED_STATS = ["mean", "std", "min", "max"]


def threshold_column(threshold: float) -> str:
    """Column name of a threshold: 0.4 -> ``thr_0.4``."""
    return f"thr_{float(threshold):g}"


def breaking_points_by_threshold(indomain: pd.DataFrame, thresholds: Iterable[float] = THRESHOLDS) -> pd.DataFrame:
    """The ``breaking_points_by_threshold`` table of §6.15 (see module docstring)."""
    import pandas as pd
    require_columns(indomain, ["model", "dataset", "fraction", "f1_macro"], "in-distribution")
    thresholds = [float(t) for t in thresholds]
    cols = ["dataset", "model"] + [threshold_column(t) for t in thresholds]
    means = indomain.groupby(["dataset", "model", "fraction"], sort=True)["f1_macro"].mean()
    rows = []
    for dataset in order_like(indomain["dataset"], DATASET_ORDER):
        d = indomain.loc[indomain["dataset"] == dataset]
        for model in model_order(d["model"]):
            curve = means.loc[(dataset, model)].sort_index()
            fr = curve.index.to_numpy(dtype=float)
            val = curve.to_numpy(dtype=float)
            row: dict[str, Any] = {"dataset": dataset, "model": model}
            for t in thresholds:
                hit = fr[val >= t]
                row[threshold_column(t)] = float(hit.min()) if hit.size else np.nan
            rows.append(row)
    out = pd.DataFrame(rows, columns=cols)
    for c in cols[2:]:
        out[c] = out[c].astype(float)
    return out


def breaking_point_moves(table: pd.DataFrame) -> pd.DataFrame:
    """Per dataset of a ``breaking_points_by_threshold`` table: ``moves_by`` = mean over models with ≥ 2 reached
    thresholds of (max − min reached fraction), ``n_models`` = how many models qualified. ``moves_by`` is NaN (not
    defined) when none qualified. Rows in the table's dataset order."""
    import pandas as pd
    thr = [c for c in table.columns if c.startswith("thr_")]
    rows = []
    for dataset in pd.unique(table["dataset"]):
        sub = table.loc[table["dataset"] == dataset, thr]
        reached = sub.notna().sum(axis=1)
        ok = sub.loc[reached >= 2]
        spread = ok.max(axis=1) - ok.min(axis=1)
        rows.append({
            "dataset": dataset,
            "moves_by": float(spread.mean()) if len(ok) else np.nan,
            "n_models": int(len(ok)),
        })
    return pd.DataFrame(rows, columns=["dataset", "moves_by", "n_models"])


def _seed_variability(indomain: pd.DataFrame, column: str) -> pd.DataFrame:
    require_columns(indomain, ["model", "dataset", "fraction", column], "in-distribution")
    out = indomain.groupby(["model", "dataset", "fraction"], sort=True)[column].agg(SEED_STATS).reset_index()
    return out[["model", "dataset", "fraction", *SEED_STATS]]


def seed_variability_auroc(indomain: pd.DataFrame) -> pd.DataFrame:
    """``seed_variability_auroc`` of §6.16: mean/std(ddof=1)/min/max of ``auroc`` per (model, dataset, fraction),
    sorted group order."""
    return _seed_variability(indomain, "auroc")


def seed_variability_ece(indomain: pd.DataFrame) -> pd.DataFrame:
    """``seed_variability_ece`` of §6.16: the same for ``ece_scaled_fixed``."""
    return _seed_variability(indomain, "ece_scaled_fixed")


def _headline_key(dataset: Any) -> str:
    return "breaking_point_moves_by_" + "".join(ch if ch.isalnum() else "_" for ch in str(dataset))


#: the leaderboard page reads the breaking points (:func:`prism_plugin.summaries.engine.summary_plugins`)
LEADERBOARD = True


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """``breaking_points_by_threshold``, ``seed_variability_auroc`` and ``seed_variability_ece`` from the
    in-distribution runs; headline ``breaking_point_moves_by_<dataset>`` per dataset where defined. Option
    ``breaking_point_thresholds`` replaces the default thresholds."""
    ind = tables.indomain
    if ind is None:
        return None
    options = options or {}
    out = SummaryOutput()
    thresholds = options.get("breaking_point_thresholds") or THRESHOLDS
    bp = breaking_points_by_threshold(ind, thresholds)
    out.tables["breaking_points_by_threshold"] = bp
    for _, row in breaking_point_moves(bp).iterrows():
        if row["n_models"] == 0:
            out.notes.append(
                f"breaking-point 'moves by' not defined for {row['dataset']}: no model reaches "
                "at least 2 thresholds"
            )
        else:
            out.headline[_headline_key(row["dataset"])] = float(row["moves_by"])
    out.tables["seed_variability_auroc"] = seed_variability_auroc(ind)
    out.tables["seed_variability_ece"] = seed_variability_ece(ind)
    seeds = ind.groupby(["model", "dataset", "fraction"]).size()
    if (seeds < 2).any():
        out.notes.append(
            f"seed_variability: std not defined (NaN) for {int((seeds < 2).sum())} cell(s) with a single run"
        )
    return out


__all__ = [
    "breaking_point_moves", "breaking_points_by_threshold", "seed_variability_auroc",
    "seed_variability_ece", "summarize", "threshold_column",
]
