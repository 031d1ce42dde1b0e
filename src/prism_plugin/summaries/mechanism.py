"""Mechanism analysis of target ECE under transfer (PROTOCOL §6.10-6.11).

Conventions, exactly as the protocol:

* **Designs**: ``"label-definition"`` = ``tables.transfer`` (``ood_all_v2``), ``"covariate"`` =
  ``tables.camelyon17_transfer``; whichever are present, rows concatenated in that order. Within a design, models
  in CSV order (first appearance) and, per model, pairs in CSV order (first appearance in the design's table); a
  (model, pair) with no run is skipped.
* **Seed mean** e_f / a_f = :func:`~prism_plugin.summaries.conventions.seed_means` (``math.fsum`` of the runs /
  count) of the raw target ``ece_fixed`` / ``auroc`` of the (model, pair, fraction) runs. Fractions are matched
  after rounding to 9 decimals and used in ascending order.
* ``lo`` / ``hi`` fractions are the design's smallest / largest fraction (1 % and 100 % in the reference); a
  combination lacking one of them has NaN endpoints (and ``rises`` False), with a note.
* ``ece_slope`` = ``numpy.polyfit(log10(f), e_f, 1)[0]`` over the combination's fractions (NaN with fewer than 2
  fractions).
* ``rises`` = ``ece_hi > ece_lo`` (strict; endpoints, not the slope).
* ``auroc_mean`` = ``numpy.mean`` of the a_f (one value per fraction), the banding variable; ``auroc_dist`` =
  |auroc_mean − 0.5|.
* ``degeneracy`` = mean ``degeneracy_share`` over all runs of the combination; ``degenerate_share`` = share of
  those runs flagged ``degenerate``; NaN when the table lacks the column.
* **Bands** on auroc_mean, half-open [lo, hi): :data:`BANDS`; per band n, rises (count), rate = round(100·share
  rising, 1), mean_delta = round(mean ece_delta, 4), designs = sorted distinct design names joined by ", "; empty
  bands omitted; label ``"[0.00, 0.55)"``.
* **Spearman** = ``scipy.stats.spearmanr`` over the combinations with both values defined; statistics that cannot
  be computed are headline strings ``"not defined: <reason>"`` plus a note.

Public functions: :func:`design_table`, :func:`mechanism_summary`, :func:`mechanism_bands`,
:func:`mechanism_headline`, :func:`camelyon17_ece_trend`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterable, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.summaries.conventions import (
    first_appearance, normalise_fractions, not_defined, require_columns, seed_means,
)
from prism_plugin.tables import RunTables, SummaryOutput

LABEL_DEFINITION = "label-definition"
COVARIATE = "covariate"
#: Designs of prism-run results beyond the release's two (by the transfer task's ``shift:``): a
#: declared covariate / prior shift of a user task, and transfer tasks that declare no shift kind.
#: Kept apart from the release designs so that neither band nor headline mixes them in.
DECLARED_COVARIATE = "declared-covariate"
DECLARED_PRIOR = "declared-prior"
UNDECLARED = "shift-undeclared"
#: Half-open auroc_mean bands [lo, hi) of §6.10.
BANDS: tuple[tuple[float, float], ...] = ((0.0, 0.55), (0.55, 0.70), (0.70, 0.85), (0.85, 0.95), (0.95, 1.01))
#: Model whose covariate-shift numbers are reported separately (§6.10: CLIP).
FOCUS_MODEL = "CLIP"
MONOTONE_TOL = 1e-9

SUMMARY_COLUMNS = [
    "design", "model", "pair", "ece_lo", "ece_hi", "ece_delta", "ece_slope", "rises",
    "auroc_lo", "auroc_hi", "auroc_mean", "auroc_dist", "degeneracy", "degenerate_share",
]
BAND_COLUMNS = ["band", "n", "rises", "rate", "mean_delta", "designs"]
TREND_COLUMNS = ["model", "pair", "lo", "hi", "delta", "rises", "monotone"]


def _with_pair(df: pd.DataFrame) -> pd.DataFrame:
    if "pair" in df.columns:
        return df
    return df.assign(pair=df["src"].astype(str) + "->" + df["tgt"].astype(str))


def _combinations(df: pd.DataFrame) -> list[tuple[Any, Any]]:
    """(model, pair) keys: models in CSV order, pairs in CSV order, present only."""
    present = set(zip(df["model"], df["pair"]))
    return [(m, p) for m in first_appearance(df["model"]) for p in first_appearance(df["pair"]) if (m, p) in present]


def _per_fraction(df: pd.DataFrame) -> pd.DataFrame:
    """Seed means of ece_fixed and auroc per (model, pair, fraction)."""
    d = df[["model", "pair", "fraction", "ece_fixed", "auroc"]].copy()
    d["fraction"] = normalise_fractions(d["fraction"])
    return seed_means(d, ["model", "pair", "fraction"], ["ece_fixed", "auroc"], sort=True)


def design_table(df: pd.DataFrame, design: str) -> pd.DataFrame:
    """The §6.10 rows of one design (columns :data:`SUMMARY_COLUMNS`); ``attrs["notes"]`` says what could not be
    computed."""
    import pandas as pd
    require_columns(df, ["model", "fraction", "ece_fixed", "auroc"], f"{design} transfer")
    if "pair" not in df.columns:
        require_columns(df, ["src", "tgt"], f"{design} transfer")
    df = _with_pair(df)
    notes: list[str] = []
    cells = _per_fraction(df)
    all_fracs = sorted(set(cells.index.get_level_values("fraction")))
    f_lo, f_hi = all_fracs[0], all_fracs[-1]
    runs = df.groupby(["model", "pair"], sort=False)
    has_deg = {"degeneracy_share": "degeneracy_share" in df.columns, "degenerate": "degenerate" in df.columns}
    if not all(has_deg.values()):
        notes.append(f"mechanism_summary ({design}): degeneracy / degenerate_share "
                     + not_defined("the transfer table lacks degeneracy_share or degenerate"))
    rows = []
    incomplete = []
    for model, pair in _combinations(df):
        c = cells.loc[(model, pair)]
        fr = c.index.to_numpy(dtype=float)
        e = c["ece_fixed"].to_numpy(dtype=float)
        a = c["auroc"].to_numpy(dtype=float)
        e_lo = float(c["ece_fixed"].get(f_lo, np.nan))
        e_hi = float(c["ece_fixed"].get(f_hi, np.nan))
        a_lo = float(c["auroc"].get(f_lo, np.nan))
        a_hi = float(c["auroc"].get(f_hi, np.nan))
        if math.isnan(e_lo) or math.isnan(e_hi):
            incomplete.append(f"{model}/{pair}")
        ok = ~np.isnan(e)
        slope = float(np.polyfit(np.log10(fr[ok]), e[ok], 1)[0]) if ok.sum() >= 2 and len(set(fr[ok])) >= 2 else np.nan
        a_ok = a[~np.isnan(a)]
        a_mean = float(np.mean(a_ok)) if a_ok.size else np.nan
        g = runs.get_group((model, pair))
        rows.append({
            "design": design, "model": model, "pair": pair,
            "ece_lo": e_lo, "ece_hi": e_hi, "ece_delta": e_hi - e_lo, "ece_slope": slope,
            "rises": bool(e_hi > e_lo),
            "auroc_lo": a_lo, "auroc_hi": a_hi, "auroc_mean": a_mean, "auroc_dist": abs(a_mean - 0.5),
            "degeneracy": float(g["degeneracy_share"].mean()) if has_deg["degeneracy_share"] else np.nan,
            "degenerate_share": float(g["degenerate"].astype(bool).mean()) if has_deg["degenerate"] else np.nan,
        })
    if incomplete:
        notes.append(f"mechanism_summary ({design}): ece_lo/ece_hi/ece_delta "
                     + not_defined(f"no runs at fraction {f_lo:g} or {f_hi:g} for " + ", ".join(incomplete)))
    out = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    out["rises"] = out["rises"].astype(bool)
    out.attrs["notes"] = notes
    return out


def mechanism_summary(transfer: pd.DataFrame | None = None,
                      camelyon17_transfer: pd.DataFrame | None = None,
                      more: Mapping[str, pd.DataFrame | None] | None = None) -> pd.DataFrame:
    """``mechanism_summary`` (§6.10): one row per (design, model, pair); label-definition rows (from ``transfer``)
    first, then covariate rows (from ``camelyon17_transfer``), then the designs of ``more`` (design name -> runs)
    in order. Columns :data:`SUMMARY_COLUMNS`."""
    import pandas as pd
    parts, notes = [], []
    for design, df in ((LABEL_DEFINITION, transfer), (COVARIATE, camelyon17_transfer), *dict(more or {}).items()):
        if df is None or df.empty:
            continue
        t = design_table(df, design)
        notes.extend(t.attrs.get("notes", []))
        parts.append(t)
    if not parts:
        out = pd.DataFrame(columns=SUMMARY_COLUMNS)
    else:
        out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
    out.attrs["notes"] = notes
    return out


def band_label(lo: float, hi: float) -> str:
    """``"[0.55, 0.70)"``."""
    return f"[{lo:.2f}, {hi:.2f})"


def mechanism_bands(summary: pd.DataFrame, bands: Iterable[tuple[float, float]] = BANDS) -> pd.DataFrame:
    """``mechanism_bands`` (§6.10) from a :func:`mechanism_summary` table.

    Combinations with auroc_mean in [lo, hi) and a defined ece_delta; columns band, n, rises, rate (=
    round(100·rises/n, 1)), mean_delta (= round(mean ece_delta, 4)), designs (sorted distinct, ", "-joined). Empty
    bands are omitted.
    """
    import pandas as pd
    rows = []
    s = summary.loc[summary["auroc_mean"].notna() & summary["ece_delta"].notna()]
    for lo, hi in bands:
        b = s.loc[(s["auroc_mean"] >= lo) & (s["auroc_mean"] < hi)]
        if b.empty:
            continue
        n = len(b)
        r = int(b["rises"].astype(bool).sum())
        rows.append({"band": band_label(lo, hi), "n": n, "rises": r, "rate": round(100.0 * r / n, 1),
                     "mean_delta": round(float(b["ece_delta"].mean()), 4),
                     "designs": ", ".join(sorted(set(map(str, b["design"]))))})
    return pd.DataFrame(rows, columns=BAND_COLUMNS)


def _spearman(x: pd.Series, y: pd.Series) -> tuple[float | str, int]:
    from scipy import stats
    ok = x.notna() & y.notna()
    n = int(ok.sum())
    if n < 3:
        return not_defined(f"{n} combination(s), a rank correlation needs at least 3"), n
    xv, yv = x[ok].to_numpy(dtype=float), y[ok].to_numpy(dtype=float)
    if np.all(xv == xv[0]) or np.all(yv == yv[0]):
        return not_defined("constant input"), n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.spearmanr(xv, yv).statistic), n


def _key(design: str) -> str:
    return design.replace("-", "_")


def mechanism_headline(summary: pd.DataFrame, *, focus_model: str = FOCUS_MODEL) -> tuple[dict[str, Any], list[str]]:
    """Headline statistics of §6.10 from a :func:`mechanism_summary` table.

    * ``mechanism_spearman_slope_all`` / ``_label_definition`` / ``_covariate`` / ``_nondegenerate``:
      Spearman(auroc_mean, ece_slope) over all combinations, within a design, and over the combinations with
      degenerate_share == 0 (with ``..._n`` counts);
    * per design: ``mechanism_<design>_rises``, ``_n``, ``_mean_delta`` (mean ece_delta over combinations with a
      defined delta);
    * covariate design, ``focus_model`` (CLIP): ``mechanism_covariate_<model>_auroc_mean`` (mean of its
      auroc_mean), ``_rises``, ``_n``; the other models together: ``mechanism_covariate_others_rises``, ``_n``, and
      the range of their per-model mean auroc_mean (``..._auroc_mean_min`` / ``_max``);
    * ``mechanism_slope_endpoint_disagreements``: combinations where sign(ece_slope) > 0 disagrees with ``rises``.
    """
    h: dict[str, Any] = {}
    notes: list[str] = []

    def put(key: str, value: Any) -> None:
        h[key] = value
        if isinstance(value, str):
            notes.append(f"{key}: {value}")

    if summary.empty:
        return h, notes
    rho, n = _spearman(summary["auroc_mean"], summary["ece_slope"])
    put("mechanism_spearman_slope_all", rho)
    h["mechanism_spearman_slope_all_n"] = n
    for design in first_appearance(summary["design"]):
        sub = summary.loc[summary["design"] == design]
        rho, n = _spearman(sub["auroc_mean"], sub["ece_slope"])
        put(f"mechanism_spearman_slope_{_key(design)}", rho)
        h[f"mechanism_spearman_slope_{_key(design)}_n"] = n
    if summary["degenerate_share"].notna().any():
        nd = summary.loc[summary["degenerate_share"] == 0]
        rho, n = _spearman(nd["auroc_mean"], nd["ece_slope"])
        put("mechanism_spearman_slope_nondegenerate", rho)
        h["mechanism_spearman_slope_nondegenerate_n"] = n
    else:
        put("mechanism_spearman_slope_nondegenerate", not_defined("no degenerate flags in the transfer tables"))
    for design in first_appearance(summary["design"]):
        sub = summary.loc[(summary["design"] == design) & summary["ece_delta"].notna()]
        k = _key(design)
        h[f"mechanism_{k}_rises"] = int(sub["rises"].astype(bool).sum())
        h[f"mechanism_{k}_n"] = len(sub)
        put(f"mechanism_{k}_mean_delta", float(sub["ece_delta"].mean()) if len(sub) else
            not_defined("no combination with both endpoint fractions"))
    cov = summary.loc[(summary["design"] == COVARIATE) & summary["ece_delta"].notna()]
    if not cov.empty:
        focus = cov.loc[cov["model"] == focus_model]
        others = cov.loc[cov["model"] != focus_model]
        if focus.empty:
            put(f"mechanism_covariate_{focus_model}_auroc_mean", not_defined(f"no covariate runs of {focus_model}"))
        else:
            h[f"mechanism_covariate_{focus_model}_auroc_mean"] = float(focus["auroc_mean"].mean())
            h[f"mechanism_covariate_{focus_model}_rises"] = int(focus["rises"].astype(bool).sum())
            h[f"mechanism_covariate_{focus_model}_n"] = len(focus)
        h["mechanism_covariate_others_rises"] = int(others["rises"].astype(bool).sum())
        h["mechanism_covariate_others_n"] = len(others)
        if not others.empty:
            per_model = others.groupby("model", sort=False)["auroc_mean"].mean()
            h["mechanism_covariate_others_auroc_mean_min"] = float(per_model.min())
            h["mechanism_covariate_others_auroc_mean_max"] = float(per_model.max())
    ok = summary["ece_slope"].notna() & summary["ece_delta"].notna()
    h["mechanism_slope_endpoint_disagreements"] = int(
        ((summary.loc[ok, "ece_slope"] > 0) != summary.loc[ok, "rises"].astype(bool)).sum())
    return h, notes


def split_undeclared(transfer: pd.DataFrame | None) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(label-definition rows, rows of transfer tasks without a declared shift kind) of the ``transfer`` table
    (``shift`` = ``undeclared``, set by :func:`prism_plugin.tables.tables_from_results`; the release table has no
    ``shift`` column: all label-definition)."""
    if transfer is None or "shift" not in transfer.columns:
        return transfer, None
    from prism_plugin.tables import UNDECLARED as MARK

    und = transfer["shift"].astype(str) == MARK
    a, b = transfer.loc[~und], transfer.loc[und]
    return (a if len(a) else None), (b if len(b) else None)


def camelyon17_ece_trend(camelyon17_transfer: pd.DataFrame) -> pd.DataFrame:
    """``camelyon17_ece_trend`` (§6.11): per (model, pair) in CSV order, lo / hi = seed-mean ``ece_fixed`` at the
    smallest / largest fraction (1 % / 100 %), delta = hi − lo, rises = hi > lo, monotone = every successive
    difference of the seed means (fractions ascending) ≥ −1e-9. Columns :data:`TREND_COLUMNS`."""
    import pandas as pd
    require_columns(camelyon17_transfer, ["model", "fraction", "ece_fixed", "auroc"], "camelyon17 transfer")
    df = _with_pair(camelyon17_transfer)
    cells = _per_fraction(df)
    all_fracs = sorted(set(cells.index.get_level_values("fraction")))
    f_lo, f_hi = all_fracs[0], all_fracs[-1]
    rows = []
    for model, pair in _combinations(df):
        e = cells.loc[(model, pair), "ece_fixed"]
        lo = float(e.get(f_lo, np.nan))
        hi = float(e.get(f_hi, np.nan))
        vals = e.to_numpy(dtype=float)
        rows.append({"model": model, "pair": pair, "lo": lo, "hi": hi, "delta": hi - lo, "rises": bool(hi > lo),
                     "monotone": bool(np.all(np.diff(vals) >= -MONOTONE_TOL))})
    out = pd.DataFrame(rows, columns=TREND_COLUMNS)
    out["rises"] = out["rises"].astype(bool)
    out["monotone"] = out["monotone"].astype(bool)
    return out


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """§6.10-6.11: tables ``mechanism_summary``, ``mechanism_bands`` (when any transfer table exists),
    ``camelyon17_ece_trend`` (when the Camelyon17 transfer table exists) and the §6.10 headline statistics. Option
    ``mechanism_focus_model`` (default ``"CLIP"``) names the model whose covariate numbers are reported apart."""
    label_def, undeclared = split_undeclared(tables.transfer)
    more = {DECLARED_COVARIATE: tables.covariate_transfer, DECLARED_PRIOR: tables.prior_transfer,
            UNDECLARED: undeclared}
    if label_def is None and tables.camelyon17_transfer is None and all(v is None for v in more.values()):
        return None
    focus = str((options or {}).get("mechanism_focus_model", FOCUS_MODEL))
    out = SummaryOutput()
    summary = mechanism_summary(label_def, tables.camelyon17_transfer, more)
    if undeclared is not None:
        n = len(_with_pair(undeclared)[["model", "pair"]].drop_duplicates())
        out.notes.append(f"mechanism_summary: {n} transfer combination(s) of tasks without `shift:` are design {UNDECLARED!r}, not "
                         "label-definition; add `shift: covariate | label_definition | prior` to the task file")
    out.notes.extend(summary.attrs.get("notes", []))
    out.tables["mechanism_summary"] = summary
    out.tables["mechanism_bands"] = mechanism_bands(summary)
    headline, notes = mechanism_headline(summary, focus_model=focus)
    out.headline.update(headline)
    out.notes.extend(notes)
    if tables.camelyon17_transfer is not None:
        out.tables["camelyon17_ece_trend"] = camelyon17_ece_trend(tables.camelyon17_transfer)
    return out
