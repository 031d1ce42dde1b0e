"""The leaderboard: ``prism-run report DIR1 DIR2 ... --output OUT [--reference REF]``.

One self-contained page over many models and tasks, the user's models beside the eight PRISM reference
FMs (tabs and layout: docs/decisions.md).

Numbers (nothing is recomputed from probabilities): the per-run tables of the results directories
and of ``--reference`` (:func:`prism_plugin.tables.load_tables`), the tables of the summary plugins
that declare ``leaderboard=True`` (``report_cells``, ``cri_variants_<pct>``, ...), and Brier / NLL
seed means straight from the per-run rows. Which table kinds the page ranks or shows is each kind's
``leaderboard`` declaration (``register_tables``).

Leaderboard rule: per model, the seed mean of each in-distribution (``indomain``) cell, then the mean
over the model's datasets, at 100 % labels (the largest fraction, marked, when a dataset has no 100 %
runs) and at the model's smallest fraction. Models evaluated on different datasets are not compared on
the same tasks: the page says so above the table, and the per-task tables compare like with like.
A cell is *qualified* when one of its seeds collapsed, hit a temperature bound, got a worse NLL after
scaling, did not converge, had a single-class test split or fewer than
:data:`prism_plugin.quality.MIN_TEST_PER_CLASS` test samples in a class; the leaderboard counts them.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.report import plots
from prism_plugin.report.leaderboard_figures import (cri_figure, curves_figure, model_styles, rank_figure,
                                                  recoverability_figure, setting_order, transfer_figure)
from prism_plugin.report.markdown import fmt, markdown_table
from prism_plugin.report.sections import ReportSection
from prism_plugin.report.verdict_rows import pct, setting_label

DEFAULT_OUTPUT = Path("prism_leaderboard")
TABLES = "tables"
YOURS, REFERENCE = "yours", "PRISM reference"
#: (metric column, short label) of the leaderboard, each at 100 % and at the smallest fraction
METRICS: tuple[tuple[str, str], ...] = (("auroc", "AUROC"), ("f1_macro", "macro-F1"), ("ece_fixed", "ECE raw"),
                                        ("ece_scaled_fixed", "ECE scaled"), ("brier", "Brier"), ("nll", "NLL"))
#: (report_cells column, what it qualifies)
QUALIFIERS: tuple[tuple[str, str], ...] = (
    ("collapsed_runs", "collapsed"), ("t_bound_runs", "T at a bound"), ("nll_worse_runs", "NLL rose after T"),
    ("not_converged_runs", "not converged"), ("single_class_test_runs", "one test class"))
TABS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("tab-overview", "Overview", ("leaderboard", "lb-read")),
    ("tab-indist", "In-distribution", ("lb-auroc", "lb-breaking", "lb-rank")),
    ("tab-calibration", "Calibration", ("lb-recoverability",)),
    ("tab-transfer", "Transfer", ("lb-transfer",)),
    ("tab-cri", "CRI", ("lb-cri",)),
    ("tab-tables", "Per-task tables", ("lb-per-task", "lb-per-pair", "notes")),
)
NO_REFERENCE = ("Only your models are shown. To put them beside the eight PRISM reference FMs, add "
                "`--reference DIR` (a folder with the published results_v2 tables, e.g. a clone of the PRISM "
                "release), or run `prism-run reference pull` once: the leaderboard then uses that copy.")


# --------------------------------------------------------------------------- inputs
def page_tables(kinds: Mapping[str, Any], transfer: bool, *uses: str) -> tuple[str, ...]:
    """The in-distribution (or transfer) table kinds whose ``leaderboard`` use is one of ``uses``,
    ranked ones first (report order within each use)."""
    return tuple(n for use in uses for n, k in kinds.items() if k.transfer == transfer and k.leaderboard == use)


def check_output(output: Path | None, inputs: Sequence[Path]) -> Path:
    """The output folder (default :data:`DEFAULT_OUTPUT`); with several inputs it may not lie in one."""
    out = Path(output) if output is not None else DEFAULT_OUTPUT
    if out.exists() and not out.is_dir():
        raise PrismError(f"--output {out}: exists and is not a directory; pass a folder for the leaderboard")
    if len(inputs) > 1:
        res = out.resolve()
        for d in inputs:
            dr = Path(d).resolve()
            if res == dr or dr in res.parents:
                raise PrismError(f"--output {out}: lies inside the input results directory {d}; with several "
                                 "inputs the leaderboard goes to a folder of its own (e.g. --output leaderboard)")
    return out


def _models(tables) -> list[str]:
    out: list[str] = []
    for name in tables.present():
        df = tables[name]
        if "model" in df:
            out.extend(str(m) for m in df["model"])
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------------- tables
def _seed_means(df: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    cols = [m for m in metrics if m in df.columns]
    return df.groupby(["model", "dataset", "fraction"], sort=False)[cols].mean().reindex(columns=list(metrics))


def _qualified(cells: pd.DataFrame, runs: pd.DataFrame | None) -> pd.DataFrame:
    """Per cell (table, model, setting, fraction): whether anything qualifies it, and what."""
    from prism_plugin.quality import MIN_TEST_PER_CLASS

    c = cells[["table", "model", "setting", "fraction"]].copy()
    what = [[] for _ in range(len(c))]
    for col, label in QUALIFIERS:
        if col in cells:
            hit = pd.to_numeric(cells[col], errors="coerce").fillna(0).to_numpy() > 0
            for k in np.flatnonzero(hit):
                what[k].append(label)
    if runs is not None and "min_test_class_count" in runs:
        few = runs.loc[pd.to_numeric(runs["min_test_class_count"], errors="coerce") < MIN_TEST_PER_CLASS]
        keys = {(str(m), str(d), round(float(f), 9)) for m, d, f in few[["model", "dataset", "fraction"]].itertuples(
            index=False)}
        for k, r in enumerate(c.itertuples(index=False)):
            if (str(r.model), str(r.setting), round(float(r.fraction), 9)) in keys:
                what[k].append(f"< {MIN_TEST_PER_CLASS} test samples in a class")
    c["qualifiers"] = ["; ".join(w) for w in what]
    return c


def _cri_by_fraction(view) -> pd.DataFrame:
    """CRI (multiplicative) per model (rows) and label fraction (columns) from the ``cri_variants_<pct>``
    summary tables."""
    cols = {}
    for stem in (view.summaries.tables if view.summaries is not None else {}):
        m = re.fullmatch(r"cri_variants_(\d+(?:\.\d+)?)", stem)
        if not m:
            continue
        t = view.table(stem)
        if t is None or t.empty:
            continue
        if "model" not in t.columns:
            t = t.reset_index()
        if "cri_multiplicative" not in t:
            continue
        cols[float(m.group(1)) / 100.0] = t.set_index("model")["cri_multiplicative"].astype(float)
    if not cols:
        return pd.DataFrame()
    return pd.DataFrame(cols).reindex(columns=sorted(cols))


def leaderboard_table(view, yours: Iterable[str], infos: Mapping[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                      list[str]]:
    """The leaderboard (numbers), its displayed twin (text, arrows in the header) and notes on it."""
    from prism_plugin.report.derived import report_kinds

    yours = set(yours)
    rt = view.run_tables
    kinds = report_kinds(view.options)
    ranked = [rt[t] for t in page_tables(kinds, False, "rank") if rt is not None and t in rt]
    ind = (ranked[0] if len(ranked) == 1 else pd.concat(ranked, ignore_index=True)) if ranked else None
    task_transfers = page_tables(kinds, True, "rank")
    cells = view.table("report_cells")
    notes: list[str] = []
    if ind is None or ind.empty or cells is None:
        return pd.DataFrame(), pd.DataFrame(), ["no in-distribution runs: the leaderboard needs `indomain` runs"]
    means = _seed_means(ind, [m for m, _ in METRICS])
    qual = _qualified(cells, ind)
    cri = _cri_by_fraction(view)
    from prism_plugin.report.verdict import results_flags

    # the warning-level flags each results directory's summary.json carries (data checks included)
    flagged: dict[str, dict[str, set]] = {}
    for f in results_flags(getattr(view, "sources", ()) or ()):
        if f.get("level") == "warning" and f.get("flag"):
            per_model = flagged.setdefault(str(f.get("model", "")), {})
            per_model.setdefault(str(f["flag"]), set()).add(str(f.get("task", "")))
    rows = []
    for model in dict.fromkeys(ind["model"].astype(str)):
        mm = means.loc[model] if model in means.index.get_level_values(0) else None
        if mm is None:
            continue
        mm = mm.reset_index()
        datasets = list(dict.fromkeys(mm["dataset"]))
        full, low, not_full = [], [], []
        for d in datasets:
            sub = mm.loc[mm["dataset"] == d].sort_values("fraction")
            top = sub.loc[np.isclose(sub["fraction"], 1.0)]
            if top.empty:
                top = sub.tail(1)
                not_full.append(f"{d} ({pct(top['fraction'].iat[0])})")
            full.append(top.iloc[0])
            low.append(sub.iloc[0])
        full_df, low_df = pd.DataFrame(full), pd.DataFrame(low)
        lows = sorted({float(f) for f in low_df["fraction"]})
        row: dict[str, Any] = {"model": model, "whose": YOURS if model in yours else REFERENCE,
                               "datasets": len(datasets), "dataset_names": ", ".join(map(str, datasets))}
        for metric, _ in METRICS:
            row[f"{metric}_100"] = float(full_df[metric].mean()) if full_df[metric].notna().any() else np.nan
            row[f"{metric}_low"] = float(low_df[metric].mean()) if low_df[metric].notna().any() else np.nan
            row[f"{metric}_n_datasets"] = int(full_df[metric].notna().sum())
        row["lowest_fraction"] = lows[0] if len(lows) == 1 else np.nan
        row["lowest_fractions"] = ", ".join(pct(f) for f in lows)
        row["not_at_100"] = "; ".join(not_full)
        # the task transfers (label-definition pairs, declared covariate / prior shifts), not the Camelyon17 grid
        tr = cells.loc[cells["table"].isin(task_transfers) & (cells["model"] == model)]
        if len(tr):
            top = tr.loc[tr.groupby("setting")["fraction"].transform("max") == tr["fraction"]]
            row["transfer_auroc"] = float(top["auroc_mean"].mean())
            row["transfer_pairs"] = int(top["setting"].nunique())
        else:
            row["transfer_auroc"], row["transfer_pairs"] = np.nan, 0
        row["cri_100"] = float(cri.at[model, 1.0]) if (not cri.empty and model in cri.index and 1.0 in cri.columns) \
            else np.nan
        lowf = lows[0] if lows else None
        row["cri_low"] = np.nan
        if lowf is not None and not cri.empty and model in cri.index:
            hit = [c for c in cri.columns if math.isclose(c, lowf, rel_tol=1e-6)]
            if hit:
                row["cri_low"] = float(cri.at[model, hit[0]])
        mq = qual.loc[qual["model"] == model]
        row["cells"] = int(len(mq))
        row["qualified_cells"] = int((mq["qualifiers"] != "").sum())
        kinds = sorted({w for q in mq["qualifiers"] for w in q.split("; ") if w})
        row["qualifiers"] = ", ".join(kinds)
        row["flags"] = "; ".join(f"{name} ({', '.join(sorted(t for t in tasks if t))})" if any(tasks) else name
                                 for name, tasks in sorted(flagged.get(model, {}).items()))
        rows.append(row)
    lb = pd.DataFrame(rows).sort_values(["auroc_100", "model"], ascending=[False, True], na_position="last")
    lb.insert(0, "rank", range(1, len(lb) + 1))
    lb = lb.reset_index(drop=True)
    if lb["dataset_names"].nunique() > 1:
        notes.append("the models were not evaluated on the same datasets, so the means compare different tasks; "
                     "the Per-task tables tab compares like with like")
    if (lb["not_at_100"] != "").any():
        notes.append("some datasets have no 100 % runs: the largest fraction stands in (column `not at 100 %`)")
    if lb["lowest_fractions"].nunique() > 1:
        notes.append("the smallest label fraction differs between models (column `lowest`): the low-label columns "
                     "compare different budgets")

    def arrow(col: str) -> str:
        info = infos.get(col)
        return f" {info.arrow}" if info is not None and getattr(info, "arrow", "") else ""

    shown = []
    for r in lb.itertuples(index=False):
        q = f"{r.qualified_cells} of {r.cells}" + (f" ⚠ {r.qualifiers}" if r.qualified_cells else "")
        d = {"#": str(r.rank), "model": f"**{r.model}**" if r.whose == YOURS else str(r.model),
             "whose": r.whose, "datasets": str(r.datasets)}
        for metric, label in METRICS:
            v100, vlow = getattr(r, f"{metric}_100"), getattr(r, f"{metric}_low")
            part = getattr(r, f"{metric}_n_datasets")
            mark = f" ({part}/{r.datasets})" if 0 < part < r.datasets else ""
            d[f"{label}{arrow(metric)} 100 %"] = fmt(v100) + ("" if pd.isna(v100) else mark)
            d[f"{label}{arrow(metric)} low"] = fmt(vlow) + ("" if pd.isna(vlow) else mark)
        d["lowest"] = r.lowest_fractions
        d[f"transfer AUROC{arrow('auroc')}"] = fmt(r.transfer_auroc) + (f" ({r.transfer_pairs} pairs)"
                                                                       if r.transfer_pairs > 1 else "")
        d["CRI 100 %"] = fmt(r.cri_100)
        d["CRI low"] = fmt(r.cri_low)
        d["qualified cells (all runs)"] = q
        d["flags (summary.json)"] = f"⚠ {r.flags}" if r.flags else "–"
        d["not at 100 %"] = r.not_at_100 or "–"
        shown.append(d)
    return lb, pd.DataFrame(shown), notes


def per_task_table(cells: pd.DataFrame, runs: pd.DataFrame | None, tables: Sequence[str], yours,
                   kinds=None) -> pd.DataFrame:
    """One row per (kind of run, dataset or pair, model, fraction) at each setting's smallest and
    largest fraction: seed means and what qualifies the cell."""
    yours = set(yours)
    sub = cells.loc[cells["table"].isin(tables)]
    if sub.empty:
        return pd.DataFrame()
    qual = _qualified(sub.reset_index(drop=True), runs)
    sub = sub.reset_index(drop=True).assign(qualifiers=qual["qualifiers"])
    ends = sub.groupby(["table", "setting", "model"])["fraction"].transform
    sub = sub.loc[(sub["fraction"] == ends("min")) | (sub["fraction"] == ends("max"))]
    extra = {}
    if runs is not None and {"brier", "nll"} & set(runs.columns):
        m = _seed_means(runs, ["brier", "nll"]).reset_index().rename(columns={"dataset": "setting"})
        extra = {(str(a), str(b), round(float(c), 9)): (x, y) for a, b, c, x, y in
                 m[["model", "setting", "fraction", "brier", "nll"]].itertuples(index=False)}
    from prism_plugin.report.derived import table_label

    rank_t = {t: k for k, t in enumerate(tables)}
    rank_s = {v: k for k, v in enumerate(setting_order(sub))}
    sub = sub.assign(_t=sub["table"].map(rank_t), _s=sub["setting"].map(rank_s))
    rows = []
    for r in sub.sort_values(["_t", "_s", "fraction", "auroc_mean"],
                             ascending=[True, True, True, False]).itertuples(index=False):
        b, n = extra.get((str(r.model), str(r.setting), round(float(r.fraction), 9)), (np.nan, np.nan))
        rows.append({
            "runs": table_label(r.table, getattr(r, "shift", None), kinds),
            "dataset / pair": setting_label(r.setting), "fraction": pct(r.fraction),
            "model": f"**{r.model}**" if r.model in yours else str(r.model),
            "whose": YOURS if r.model in yours else REFERENCE, "seeds": fmt(r.n_runs),
            "AUROC ↑": fmt(r.auroc_mean), "macro-F1 ↑": fmt(r.f1_macro_mean), "ECE raw ↓": fmt(r.ece_fixed_mean),
            "ECE scaled ↓": fmt(r.ece_scaled_fixed_mean), "Brier ↓": fmt(b), "NLL ↓": fmt(n),
            "T": fmt(r.temperature_mean), "qualified by": ("⚠ " + r.qualifiers) if r.qualifiers else "–",
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- sections
def _figures_ok(sec: ReportSection) -> bool:
    if not plots.available():
        sec.not_shown.append("figures need matplotlib, which is not installed")
        return False
    return True


def leaderboard_sections(view, yours: Sequence[str], *, reference: bool, host=None,
                         reference_notes: Sequence[str] = ()) -> list[ReportSection]:
    """The sections of the leaderboard page (keys as in :data:`TABS`); ``reference_notes`` (a reference file
    the page does without) are said above the leaderboard table."""
    from prism_plugin.metrics.descriptions import metric_infos
    from prism_plugin.report.derived import report_kinds

    cells = view.table("report_cells")
    kinds = report_kinds(view.options)
    models = list(dict.fromkeys(cells["model"])) if cells is not None and len(cells) else []
    styles = model_styles(models, yours)
    infos = {i.column: i for i in metric_infos(host)}
    return [*_overview(view, yours, models, reference, infos, reference_notes),
            *_in_distribution(view, cells, page_tables(kinds, False, "rank"), yours, models, styles),
            *_transfer_cri(view, cells, page_tables(kinds, True, "rank", "show"), kinds, yours, models, styles),
            *_per_task(view, cells, kinds, yours)]


def _overview(view, yours: Sequence[str], models: list[str], reference: bool, infos,
              reference_notes: Sequence[str] = ()) -> list[ReportSection]:
    n_ref = sum(1 for m in models if m not in set(yours))
    out: list[ReportSection] = []
    lb, shown, notes = leaderboard_table(view, yours, infos)
    sec = ReportSection("Leaderboard", "", order=1, key="leaderboard",
                        summary=f"{len(set(yours) & set(models))} of yours, {n_ref} reference")
    body = []
    if not reference:
        body.append(NO_REFERENCE)
    body.extend(f"**⚠ Reference incomplete:** {note}." for note in reference_notes)
    if lb.empty:
        sec.not_shown.extend(notes)
    else:
        sec.tables["leaderboard"] = lb
        body.append("One row per model, sorted by mean AUROC at 100 % labels (click a header to sort by another "
                    "column; **bold**: your models). Each number is the mean over the model's datasets of the seed "
                    "mean at 100 % labels or at its smallest label fraction (`low`, column `lowest`); ↑ higher is "
                    "better, ↓ lower is better. Transfer AUROC: the target AUROC at the largest source fraction, "
                    "mean over the model's transfer pairs (not the Camelyon17 hospital grid). `(k/n)`: the metric "
                    "exists for k of the n datasets (the published tables have no NLL, and Brier only for binary "
                    "datasets). CRI (PROTOCOL §6.2) needs transfer runs of the model; it is a screening heuristic, "
                    "not a ranking. *Qualified cells* counts the (dataset, fraction) cells of the model whose numbers "
                    "something qualifies (⚠: what); *flags* are the warnings `prism-run` wrote to the model's "
                    "`summary.json` (e.g. few test samples in a class).")
        if notes:
            body.append("**Read with care:** " + "; ".join(notes) + ".")
        body.append(markdown_table(shown))
    sec.body = "\n\n".join(body)
    out.append(sec)
    read = ReportSection("How to read these figures", "", order=2, key="lb-read", summary="what each tab shows")
    read.body = "\n".join([
        "- **In-distribution**: AUROC and macro-F1 against the label fraction per dataset (dotted lines: the "
        "macro-F1 breaking-point thresholds), and each model's AUROC rank against its calibration rank.",
        "- **Calibration**: the recoverability map (how much temperature scaling lowers ECE, per cell).",
        "- **Transfer**: target AUROC and target ECE against the source label fraction, per transfer pair.",
        "- **CRI**: the composite reliability index per model and label fraction.",
        "- **Per-task tables**: every dataset and pair at its smallest and largest fraction, model beside model.",
        "",
        "Your models are drawn as large diamonds with thick lines (legend: *(yours)*; bold row labels in the "
        "heatmaps); the PRISM reference FMs as small circles with thin lines. Shaded bands: min-max over seeds "
        "(your models only, to keep the panels readable).",
    ])
    out.append(read)

    return out


def _in_distribution(view, cells, ranked: Sequence[str], yours, models, styles) -> list[ReportSection]:
    """The in-distribution and calibration tabs, over the ranked table kinds' cells."""
    from prism_plugin.report.basic import rank_points

    out: list[ReportSection] = []
    ind_cells = cells.loc[cells["table"].isin(ranked)] if cells is not None and len(cells) else None
    has_ind = ind_cells is not None and len(ind_cells) > 0

    # ---- in-distribution
    sec = ReportSection("AUROC vs label fraction", "", order=10, key="lb-auroc", summary="per dataset")
    if not has_ind:
        sec.not_shown.append("no in-distribution runs")
    elif _figures_ok(sec):
        sec.figures["lb-auroc.png"] = curves_figure(ind_cells, "auroc", "AUROC", styles)
        sec.captions["lb-auroc.png"] = ("Seed-mean AUROC vs label fraction, one panel per dataset; the y axis "
                                        "follows the data (not 0-1) so close curves stay apart.")
    out.append(sec)

    from prism_plugin.summaries.seeds import THRESHOLDS

    sec = ReportSection("Breaking points: macro-F1 vs label budget", "", order=11, key="lb-breaking",
                        summary="where macro-F1 crosses 0.4 … 0.8")
    if not has_ind:
        sec.not_shown.append("no in-distribution runs")
    else:
        if _figures_ok(sec):
            sec.figures["lb-breaking.png"] = curves_figure(ind_cells, "f1_macro", "macro-F1", styles,
                                                           thresholds=THRESHOLDS)
            sec.captions["lb-breaking.png"] = ("Seed-mean macro-F1 vs label fraction (PRISM Figure 6); dotted: the "
                                               "breaking-point thresholds.")
        bp = view.table("breaking_points_by_threshold")
        if bp is not None and len(bp):
            bp = bp.copy()
            bp["model"] = [f"**{m}**" if m in set(yours) else m for m in bp["model"]]
            sec.body = ("The smallest label fraction whose seed-mean macro-F1 reaches each threshold (– = never; "
                        "`breaking_points_by_threshold.csv`):\n\n"
                        + markdown_table(bp, formats={c: (lambda v: "–" if pd.isna(v) else pct(v))
                                                      for c in bp.columns if str(c).startswith("thr_")}))
    out.append(sec)

    sec = ReportSection("Discrimination rank vs calibration rank", "", order=12, key="lb-rank",
                        summary="AUROC rank against scaled-ECE rank")
    pts = rank_points(ind_cells) if has_ind else pd.DataFrame()
    if pts.empty:
        sec.not_shown.append("needs at least 3 models on the same dataset (ranks within a dataset); "
                             + ("these results have fewer" if has_ind else "no in-distribution runs"))
    else:
        fr = sorted(pts["fraction"].unique())
        show = list(dict.fromkeys([fr[0], fr[-1]]))
        missing = [m for m in yours if m in set(models) and m not in set(pts["model"])]
        if missing:
            sec.not_shown.append(f"{', '.join(missing)}: no dataset shared with at least two other models, so no "
                                 "rank within a dataset (run them on a PRISM dataset to place them here)")
        if _figures_ok(sec):
            sec.figures["lb-rank.png"] = rank_figure(pts, show, styles)
            sec.captions["lb-rank.png"] = ("Each point: one (model, dataset); x = AUROC rank, y = rank by scaled ECE "
                                           "(1 = best on both); grey band: the ranks agree within one place "
                                           "(PRISM Figure 2).")
        sec.body = ("Ranks within each dataset at the smallest and largest label fraction with at least three "
                    "models; bootstrap rank correlations are in `prism-run findings`.")
    out.append(sec)

    # ---- calibration
    sec = ReportSection("Recoverability map", "", order=20, key="lb-recoverability",
                        summary="how much temperature scaling lowers ECE")
    if not has_ind:
        sec.not_shown.append("no in-distribution runs")
    elif _figures_ok(sec):
        sec.figures["lb-recoverability.png"] = recoverability_figure(ind_cells, yours)
        sec.captions["lb-recoverability.png"] = ("ECE raw minus ECE after temperature scaling per (dataset, model) "
                                                 "and label fraction (PRISM Figure 11): blue = scaling recovered "
                                                 "calibration, red = it made ECE worse.")
        worse = int((ind_cells["ece_scaled_fixed_mean"] > ind_cells["ece_fixed_mean"]).sum())
        sec.body = (f"Temperature scaling did not lower the seed-mean ECE in **{worse} of {len(ind_cells)}** "
                    "in-distribution cells shown.")
    out.append(sec)
    return out


def _transfer_cri(view, cells, transfers: Sequence[str], kinds, yours, models, styles) -> list[ReportSection]:
    from prism_plugin.report.derived import frame_label

    out: list[ReportSection] = []
    # ---- transfer
    sec = ReportSection("Transfer curves", "", order=30, key="lb-transfer", summary="target AUROC and ECE")
    found = False
    for table in transfers:
        tc = cells.loc[cells["table"] == table] if cells is not None and len(cells) else None
        if tc is None or tc.empty:
            continue
        found = True
        if not _figures_ok(sec):
            break
        name = f"lb-transfer-{table}.png"
        sec.figures[name] = transfer_figure(tc, styles)
        sec.captions[name] = (f"{frame_label(table, tc, kinds)}: target AUROC (top) and target ECE (bottom; dashed: "
                              "after the source-fitted temperature) vs source label fraction (PRISM Figures 3, 13).")
    if not found:
        sec.not_shown.append("no transfer runs (run a transfer task, e.g. `prism_demo_transfer`)")
    out.append(sec)

    # ---- CRI
    sec = ReportSection("Composite Reliability Index", "", order=40, key="lb-cri", summary="per model and fraction")
    cri = _cri_by_fraction(view)
    if cri.empty:
        sec.not_shown.append("no CRI: it needs in-distribution and transfer runs of the same model")
    else:
        missing = [m for m in models if m not in set(cri.index)]
        if missing:
            sec.not_shown.append(f"{', '.join(missing)}: no CRI (no transfer runs at these fractions)")
        if _figures_ok(sec):
            sec.figures["lb-cri.png"] = cri_figure(cri, yours)
            sec.captions["lb-cri.png"] = ("CRI (multiplicative) per model and label fraction (PRISM Figure 7); each "
                                          "model's CRI is over its own datasets and pairs.")
        tab = cri.copy()
        tab.columns = [f"CRI {pct(c)}" for c in tab.columns]
        tab.insert(0, "model", [f"**{m}**" if m in set(yours) else m for m in tab.index])
        sec.tables["leaderboard_cri"] = cri.rename(columns=lambda c: f"cri_{round(c * 100, 6):g}pct").reset_index()
        sec.body = ("CRI = mean AUROC × (1 − mean scaled ECE) × OOD stability (PROTOCOL §6.2), from "
                    "`cri_variants_<pct>.csv`. A model with little in-distribution performance to lose looks stable: "
                    "read the index beside its components, not as a ranking.\n\n" + markdown_table(tab.reset_index(
                        drop=True)))
    out.append(sec)

    return out


def _per_task(view, cells, kinds, yours) -> list[ReportSection]:
    rt = view.run_tables
    per_task, transfers = page_tables(kinds, False, "rank", "show"), page_tables(kinds, True, "rank", "show")
    out: list[ReportSection] = []
    sec = ReportSection("Per dataset", "", order=50, key="lb-per-task", summary="in-distribution, end fractions")
    ind_parts = [rt[t] for t in per_task if rt is not None and t in rt.present()]
    ind_runs = pd.concat(ind_parts, ignore_index=True) if ind_parts else None
    pt = per_task_table(cells, ind_runs, per_task, yours, kinds) if cells is not None \
        else pd.DataFrame()
    if pt.empty:
        sec.not_shown.append("no in-distribution cells")
    else:
        sec.body = ("Every dataset at its smallest and largest label fraction, models side by side (seed means; "
                    "⚠ names what qualifies a cell).\n\n" + markdown_table(pt))
    out.append(sec)
    sec = ReportSection("Per transfer pair", "", order=51, key="lb-per-pair", summary="target metrics, end fractions")
    tr_runs = None
    if rt is not None:
        parts = [rt[t].rename(columns={"pair": "dataset"}) for t in transfers if t in rt.present()
                 and "pair" in rt[t]]
        tr_runs = pd.concat(parts, ignore_index=True) if parts else None
    pp = per_task_table(cells, tr_runs, transfers, yours, kinds) if cells is not None else pd.DataFrame()
    if pp.empty:
        sec.not_shown.append("no transfer cells")
    else:
        sec.body = ("Every transfer pair at its smallest and largest source label fraction (target metrics; T is the "
                    "source-fitted temperature).\n\n" + markdown_table(pp))
    out.append(sec)
    return out


# --------------------------------------------------------------------------- the page
def _page_tables(tables, yours: Iterable[str], kinds: Mapping[str, Any]):
    """The per-run tables the page shows: the kinds it ranks, and those it shows when one of the
    user's models ran them (the published Camelyon17 hospital grid, unless a model of yours ran a
    Camelyon17 task); with a note for each table left out (``leaderboard=""``: ``indomain_propval``)."""
    from prism_plugin.report.derived import table_label
    from prism_plugin.tables import RunTables

    yours = set(yours)
    keep, notes = {}, []
    for name in tables.present():
        df = tables[name]
        use = kinds[name].leaderboard if name in kinds else ""
        ran = "model" in df and df["model"].isin(yours).any()
        if use == "rank" or (use == "show" and ran):
            keep[name] = df
        elif ran:
            notes.append(f"{table_label(name, kinds=kinds)} runs of your models are not part of the leaderboard; "
                         "`prism-run findings` and the per-directory reports show them")
        else:
            notes.append(f"{table_label(name, kinds=kinds)} (reference only): not on the leaderboard, none of your "
                         "models has such runs")
    return RunTables(**keep), notes


def write_leaderboard(inputs: Sequence[Path], output: Path, host, *, reference: Path | None = None,
                      options: Mapping[str, Any] | None = None) -> Path:
    """Build the leaderboard of the results directories ``inputs`` (each a results directory or a folder
    of them), with the published tables of ``reference`` when given, into ``output``; returns the HTML."""
    from prism_plugin.report.build import (build_view, compute_summaries, models_title, notes_section, probes_apart,
                                           source_dirs, summary_options, write_sections)
    from prism_plugin.report.derived import report_kinds
    from prism_plugin.summaries.engine import summary_plugins, write_summaries
    from prism_plugin.reference_files import LEADERBOARD, open_reference, shown_missing
    from prism_plugin.tables import load_tables

    inputs = [Path(d) for d in inputs]
    output = check_output(output, inputs)
    # a reference file the page needs that is absent or damaged: an error line; one it does without: a note
    ref = open_reference(reference, LEADERBOARD, host=host) if reference is not None else None
    ref_models = set(_models(ref.tables)) if ref is not None else set()
    # two checkpoints of one adapter in two folders are two models here, labelled by folder
    tables = probes_apart(load_tables(inputs, ref.tables if ref is not None else None, host, label_models_by_input=True,
                                      reference_name=f"--reference {reference}"))
    yours = [m for m in _models(tables) if m not in ref_models]
    opts, notes = summary_options(options, host, source_dirs(inputs))
    ref_notes = shown_missing(ref, tables, yours, report_kinds(opts))
    for note in ref_notes:
        warnings.warn(note, stacklevel=2)
    tables, dropped = _page_tables(tables, yours, report_kinds(opts))
    page = set(summary_plugins(host, leaderboard=True))
    skip = [n for n in summary_plugins(host) if n not in page]
    summaries, failed = compute_summaries(tables, opts, host, skip=skip)
    output.mkdir(parents=True, exist_ok=True)
    tables_dir = output / TABLES
    write_summaries(tables_dir, summaries)
    title = models_title("PRISM leaderboard", yours) + (" beside the PRISM reference FMs" if reference else "")
    view = build_view(output, host, sources=inputs, run_tables=tables, summaries=summaries, tables_dir=tables_dir,
                      options=opts, title=title, reference=reference is not None, write_tables=False)
    view.models = tuple(yours)
    view.notes.extend(ref_notes + notes + failed + dropped)
    sections = leaderboard_sections(view, yours, reference=reference is not None, host=host, reference_notes=ref_notes)
    sections.append(notes_section(sections, view))
    footer = ("Self-contained: every figure is embedded in this file, no network access. The numbers come from "
              f"the CSV tables in <code>{TABLES}</code> (<code>leaderboard.csv</code> holds the leaderboard's "
              "numbers unrounded); click a table header to sort it, the CSV link above a table downloads it. "
              "The Markdown twin <code>report.md</code> has the figures in <code>figures/</code>.")
    return write_sections(view, sections, title=title, tabs=TABS, kicker="PRISM leaderboard", footer=footer)


__all__ = ["DEFAULT_OUTPUT", "TABS", "check_output", "leaderboard_sections", "leaderboard_table", "per_task_table",
           "write_leaderboard"]
