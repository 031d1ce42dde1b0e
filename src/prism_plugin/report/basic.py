"""Built-in report plugin: the sections of the PRISM report.

Every section reads the summary tables (``report_cells``, ``report_settings``,
``fewshot_temperature`` of :mod:`prism_plugin.report.derived` and the
PROTOCOL §6 tables of the summary plugins) through the
:class:`~prism_plugin.report.sections.ReportView`; nothing is recomputed from
raw probabilities except the reliability diagrams, which read the per-run
reliability artifacts. A section that cannot show something says so, with the
reason, in ``not_shown``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.report import cell_figures, plots
from prism_plugin.report.context import (MAX_TABLE_ROWS, SectionContext, ci_text, ci_words, figure_guard,
                                         sweep_run_count)
from prism_plugin.report.derived import CI_METRICS, FEW_TEST_SAMPLES, frame_label, table_label
from prism_plugin.report.markdown import fmt, markdown_table
from prism_plugin.report.metric_table import metric_section
from prism_plugin.report.sections import ReportSection
from prism_plugin.report.transfer_sections import cri, findings, transfer
from prism_plugin.report.verdict_rows import pct, setting_label
from prism_plugin.report.verdict_section import verdict_section


# --------------------------------------------------------------------------- overview


def overview(ctx: SectionContext) -> ReportSection:
    import pandas as pd
    sec = ReportSection("Overview", "", order=1, key="overview", summary="what was evaluated, how to read")
    cells = ctx.cells
    if cells is None or cells.empty:
        sec.body = _no_cells_text(ctx)
        return sec
    rows = []
    for table in dict.fromkeys(cells["table"]):
        sub = cells.loc[cells["table"] == table]
        fr = sorted(sub["fraction"].unique())
        rows.append({
            "kind of run": frame_label(table, sub, ctx.kinds),
            "models": ", ".join(dict.fromkeys(sub["model"])),
            "settings": ", ".join(setting_label(s) for s in list(dict.fromkeys(sub["setting"]))[:8])
            + (f" … ({sub['setting'].nunique()})" if sub["setting"].nunique() > 8 else ""),
            "label fractions": ", ".join(pct(f) for f in fr),
            "runs per cell": "–".join(sorted({str(int(n)) for n in sub["n_runs"]})),
            "total runs": int(sub["n_runs"].sum()),
        })
    models = list(dict.fromkeys(cells["model"]))
    n_runs = int(cells["n_runs"].sum())
    intro = (f"This report covers **{n_runs:,} runs** of **{len(models)} model{'s' if len(models) > 1 else ''}** "
             f"({', '.join(models[:8])}{' …' if len(models) > 8 else ''}). A *run* is one label fraction × seed of "
             "one task; a *cell* is a label fraction of one setting, averaged over its seeds.")
    if ctx.view.reference:
        intro += (" The runs are the **published PRISM per-run tables** (results_v2): per-run probabilities are "
                  "not part of that release, so the reliability diagrams cannot be drawn.")
    how = "\n".join([
        "**How to read it**",
        "",
        "- **AUROC** measures ranking (discrimination): binary AUROC, or macro one-vs-rest for more than two classes.",
        "- **ECE** (expected calibration error, 15 fixed bins) measures whether predicted probabilities match "
        "observed frequencies; 0 is perfect. Binary tasks use the class-1 convention of PRISM (p(y=1) against the "
        "observed frequency of y=1), multiclass tasks the top-label confidence.",
        "- **Temperature scaling** divides the logits by one number T fitted on the validation split (never on "
        "test); *scaled ECE* is the ECE afterwards. For binary tasks the neutral value is T = 2 (PRISM's [−d, d] "
        "logit convention), for multiclass T = 1.",
        "- A probe **collapses** when more than 99 % of its test predictions fall in one class; its AUROC and ECE "
        "are then not informative.",
        "- Bands in the figures span the minimum to the maximum over seeds; lines are seed means."
        + (f" Error bars are the {ci_words(ctx)} (resampling the test set; the probe and its temperature are "
           "kept): how much the number could move on another test set of the same size. Where the rarest test "
           f"class has fewer than {FEW_TEST_SAMPLES} samples the verdict says so."
           if plots.has_ci(cells, CI_METRICS) else ""),
    ])
    where = ctx.view.tables_dir
    try:
        rel = where.resolve().relative_to(ctx.view.path.resolve())
        loc = "beside this report" if str(rel) == "." else f"in `{rel}/`"
    except ValueError:
        loc = f"in `{where}`"
    files = "\n".join([f"**Files behind the numbers** ({loc})", "", *_file_lines(ctx)])
    sec.body = "\n\n".join([intro, markdown_table(pd.DataFrame(rows)), how, files])
    if ctx.cells_exact:  # the CSVs the verdict cites hold the exact (replicate) intervals too
        sec.tables["report_cells"] = ctx.cells
        sec.tables["report_settings"] = ctx.settings
    return sec


#: What the overview says of each table it may cite (only those these results hold are listed).
FILE_WORDS = {
    "report_cells": "one row per cell (seed mean, std, min, max of every metric, and the test-set CI where "
                    "measured)",
    "report_settings": "one row per (model, setting) with what the verdict cites",
    "verdict": "the verdict with its evidence",
    "metric_cells": "every described metric per cell",
}


def _file_lines(ctx: SectionContext) -> list[str]:
    """The files behind the numbers that these results hold: the report's own tables, then the
    PROTOCOL §6 tables a summary plugin wrote, then ``findings.json``."""
    tables = set(getattr(ctx.view.summaries, "tables", {}) or {})
    if ctx.view.summaries is None and ctx.view.tables_dir.is_dir():
        tables = {p.stem for p in ctx.view.tables_dir.glob("*.csv")}
    tables.add("verdict")  # written with this report (the verdict section's table)
    if ctx.metric_cells is not None and not ctx.metric_cells.empty:
        tables.add("metric_cells")
    own = [f"`{t}.csv`: {w}" for t, w in FILE_WORDS.items() if t in tables]
    lines = ["- " + "; ".join(own) + "."] if own else []
    protocol = sorted(t for t in tables if t not in FILE_WORDS and t != "fewshot_temperature")
    if "fewshot_temperature" in tables:
        lines.append("- `fewshot_temperature.csv`: few-shot target temperatures per K.")
    if protocol:
        shown = ", ".join(f"`{t}.csv`" for t in protocol[:12]) + (f" and {len(protocol) - 12} more"
                                                                 if len(protocol) > 12 else "")
        lines.append(f"- The PROTOCOL §6 tables these runs support, under their published names: {shown}.")
    if ctx.headline or (ctx.view.tables_dir / "findings.json").exists():
        lines.append("- `findings.json`: headline numbers and notes (what is not defined here, and why).")
    return lines


def _no_cells_text(ctx: SectionContext) -> str:
    """Why there are no cells, in words a user can act on."""
    sweeps = sweep_run_count(ctx)
    if sweeps:
        return (f"These results are a probe sweep ({sweeps} runs of `sweep:` variants), which this report's "
                "per-cell sections leave out (each variant would be pooled with the others); `prism-run "
                "sensitivity DIR` compares the variants (ranking stability per C or probe kind).")
    text = "No per-run results could be read."
    return text + (" " + " ".join(ctx.view.notes) if ctx.view.notes else "")


# --------------------------------------------------------------------------- discrimination
def discrimination(ctx: SectionContext) -> ReportSection:
    import pandas as pd
    sec = ReportSection("Discrimination vs label fraction", "", order=10, key="discrimination",
                        summary="AUROC and macro-F1 with seed bands")
    body = ["AUROC (ranking quality) and macro-F1 (decisions at the arg-max) as the share of training labels "
            "grows. Lines are seed means; the band spans the seeds" + (f"; error bars are the {ci_words(ctx)}"
                                                                     if plots.has_ci(ctx.cells, ("auroc", "f1_macro"))
                                                                     else "") +
            ". Each y axis is fitted to its data (within 0–1), so small differences are visible: read the tick "
            "values, not the height."]
    for table, cells in ctx.figure_cells(sec, ctx.in_dist):
        settings = list(dict.fromkeys(cells["setting"]))
        label = ctx.kinds[table].label
        if len(settings) == 1:
            s = settings[0]
            sec.figures[f"discrimination-{table}.png"] = plots.metric_curves(
                cells, [(s, "auroc", "AUROC"), (s, "f1_macro", "macro-F1")], bounds=(0.0, 1.0), ci_level=ctx.ci_level)
            sec.captions[f"discrimination-{table}.png"] = f"{label}: AUROC (left) and macro-F1 (right) on {setting_label(s)}."
        else:
            for metric, ylab in (("auroc", "AUROC"), ("f1_macro", "macro-F1")):
                name = f"{metric}-{table}.png"
                sec.figures[name] = plots.metric_curves(cells, [(s, metric, ylab) for s in settings], bounds=(0.0, 1.0),
                                                        ci_level=ctx.ci_level)
                sec.captions[name] = f"{label}: {ylab} vs label fraction, one panel per setting."
    if ctx.cells_of(*ctx.in_dist) is None:
        sec.not_shown.append(_no_in_distribution(ctx, "see the Transfer section"))
    bp = ctx.view.table("breaking_points_by_threshold")
    if bp is not None and len(bp) <= MAX_TABLE_ROWS:
        body.append("**Breaking points** (`breaking_points_by_threshold.csv`): the smallest label fraction whose "
                    "seed-mean macro-F1 reaches each threshold (– = never).\n\n"
                    + markdown_table(bp, formats={c: (lambda v: "–" if pd.isna(v) else pct(v))
                                                  for c in bp.columns if c.startswith("thr_")}))
    sec.body = "\n\n".join(body)
    return sec


def _no_in_distribution(ctx: SectionContext, transfer_hint: str) -> str:
    """Why an in-distribution section is empty: only transfer runs (then ``transfer_hint``), a
    probe sweep read elsewhere, or no runs at all."""
    if ctx.cells is not None and not ctx.cells.empty and ctx.cells["table"].isin(ctx.transfers).any():
        return f"no in-distribution runs in these results (only transfer); {transfer_hint}"
    if sweep_run_count(ctx):
        return ("the in-distribution runs here are probe-sweep variants, left out of this section; `prism-run "
                "sensitivity DIR` compares them")
    return "no in-distribution runs could be read from these results (see the Overview)"


# --------------------------------------------------------------------------- calibration
def calibration(ctx: SectionContext) -> ReportSection:
    sec = ReportSection("Calibration vs label fraction", "", order=20, key="calibration",
                        summary="raw vs temperature-scaled ECE")
    body = ["Raw ECE (solid) and ECE after temperature scaling (dashed) per label fraction. Where the dashed line "
            "lies above the solid one, temperature scaling made calibration worse."]
    n = ctx.h("ts_indomain_cells_worse")
    tot = ctx.h("ts_indomain_cells_worse_total")
    if isinstance(n, (int, float)) and isinstance(tot, (int, float)):
        body.append(f"Across all in-distribution cells, temperature scaling did **not** reduce ECE in **{int(n)} of "
                    f"{int(tot)}** (seed-mean scaled ECE > raw; `findings.json` ts_indomain_cells_worse; the PRISM "
                    "paper reports 49 of 288 for its eight models).")
    for table, cells in ctx.figure_cells(sec, (*ctx.in_dist, *ctx.variants)):
        settings = list(dict.fromkeys(cells["setting"]))
        name = f"ece-{table}.png"
        kind = ctx.kinds[table]
        label = f"after T fitted on {kind.temperature_from}" if kind.temperature_from else "after temperature scaling"
        sec.figures[name] = plots.ece_curves(cells, settings, scaled_label=label, ci_level=ctx.ci_level)
        sec.captions[name] = f"{kind.label}: ECE vs label fraction (raw solid, scaled dashed)."
    if ctx.cells_of(*ctx.in_dist, *ctx.variants) is None:
        sec.not_shown.append(_no_in_distribution(ctx, "target calibration under transfer is in the Transfer section"))
    sec.body = "\n\n".join(body)
    return sec


# --------------------------------------------------------------------------- reliability
def _reliability_groups(entries: list[dict], cells: pd.DataFrame | None, max_groups: int = 8):
    by: dict[tuple, list[dict]] = {}
    for e in entries:  # one group per cell: a sweep variant (task@probe.C=…) is a model of its own, never pooled
        by.setdefault((_entry_model(e), e["setting"], e["reference_table"], round(float(e["fraction"]), 9)),
                      []).append(e)
    keys = list(by)
    chosen = []
    pairs = list(dict.fromkeys((k[0], k[1], k[2]) for k in keys))
    for m, s, t in pairs:
        fr = sorted(k[3] for k in keys if k[:3] == (m, s, t))
        for f in dict.fromkeys([fr[0], fr[-1]]):
            chosen.append((m, s, t, f))
    skipped = max(0, len(chosen) - max_groups)
    groups = []
    for m, s, t, f in chosen[:max_groups]:
        es = by[(m, s, t, f)]
        raw = cell_figures.pool_bins(es, "raw")
        scaled = cell_figures.pool_bins(es, "scaled")
        ece_raw = float(np.mean([e["raw"]["ece"] for e in es]))
        sc = [e["scaled"]["ece"] for e in es if e.get("scaled")]
        temps = [e["scaled"]["temperature"] for e in es if e.get("scaled")]
        groups.append({
            "title": f"{setting_label(s)} · {pct(f)} labels\n{m}" + (f", {len(es)} seeds pooled" if len(es) > 1 else ""),
            "raw": raw, "scaled": scaled, "ece_raw": ece_raw,
            "ece_scaled": float(np.mean(sc)) if sc else float("nan"),
            "temperature": float(np.mean(temps)) if temps else float("nan"),
            "binary": int(es[0].get("n_classes", 2)) == 2,
        })
    return groups, skipped, len(pairs)


def _entry_model(entry: dict) -> str:
    """The model of a reliability artifact, labelled by its sweep variant (``task@key=value``) if any."""
    from prism_plugin.summaries.probe_sensitivity import variant_model

    task = str(entry.get("task", ""))
    if "@" in task and "=" in task.split("@", 1)[1]:
        key, value = task.split("@", 1)[1].split("=", 1)
        return variant_model(entry["model"], key, value)
    return str(entry["model"])


def reliability(ctx: SectionContext) -> ReportSection:
    sec = ReportSection("Reliability diagrams", "", order=25, key="reliability",
                        summary="raw and scaled, smallest and largest fraction")
    entries = ctx.view.reliability
    if not entries:
        if ctx.view.reference:
            why = ("the published per-run tables hold no per-run probabilities, so there are no bins to draw")
        else:
            why = ("these results have no reliability artifacts (`reliability/*.json`, written by the `reliability` "
                   "metric plugin while the runs are in memory); rerun with that plugin enabled, e.g. after "
                   "deleting `cells/` to force recomputation")
        sec.not_shown.append(why)
        return sec
    if not figure_guard(ctx, sec):
        return sec
    groups, skipped, n_pairs = _reliability_groups(entries, ctx.cells)
    sec.body = ("Observed frequency against predicted probability per confidence bin (15 fixed bins, as the ECE), for "
                "the smallest and largest label fraction of each setting, raw and after temperature scaling; the "
                "seeds of a cell are pooled (bin counts add). Binary tasks plot the predicted p(class 1) against "
                "the observed frequency of class 1 (the PRISM convention): below the diagonal class 1 is predicted "
                "more often than it occurs. Multiclass tasks plot the top-label confidence against accuracy: below "
                "the diagonal the probe is over-confident, above it under-confident. The ECE in each panel title is "
                "the seed mean of `ece_fixed` / `ece_scaled_fixed` in `runs.csv`.")
    if skipped:
        sec.not_shown.append(f"{skipped} further cells (of {n_pairs} settings) are not drawn to keep the figure "
                             "readable; their bins are in `reliability/`")
    sec.figures["reliability.png"] = cell_figures.reliability_grid(groups)
    sec.captions["reliability.png"] = "Reliability diagrams; bars below each panel: share of test samples per bin."
    return sec


# --------------------------------------------------------------------------- temperature
def temperature(ctx: SectionContext) -> ReportSection:
    sec = ReportSection("Fitted temperature", "", order=30, key="temperature",
                        summary="read against T = 2 (binary) or 1")
    body = ["The temperature T fitted on the validation split, per label fraction. **Binary tasks are read against "
            "T = 2**: under PRISM's [−d, d] logit convention T = 2 leaves the probabilities unchanged, so T < 2 "
            "means the probe was under-confident and scaling sharpened it; multiclass tasks are read against T = 1. "
            "Grey strips are the search bounds [0.1, 10]; a T at a bound means the fit ran out of room."]
    lt1, lt1_tot = ctx.h("ts_multiclass_cells_T_lt_1"), ctx.h("ts_multiclass_cells_T_lt_1_total")
    if isinstance(lt1, (int, float)) and isinstance(lt1_tot, (int, float)):
        body.append(f"Multiclass cells with T < 1 (under-confident probes): **{int(lt1)} of {int(lt1_tot)}** "
                    "(`findings.json` ts_multiclass_cells_T_lt_1; PRISM paper: 189 of 192).")
    lt2, lt2_tot = ctx.h("ts_binary_cells_T_lt_2"), ctx.h("ts_binary_cells_T_lt_2_total")
    if isinstance(lt2, (int, float)) and isinstance(lt2_tot, (int, float)):
        body.append(f"Binary cells with T < 2: **{int(lt2)} of {int(lt2_tot)}** (ts_binary_cells_T_lt_2).")
    for table, cells in ctx.figure_cells(sec, (*ctx.in_dist, *ctx.variants), "temperature_mean"):
        name = f"temperature-{table}.png"
        sec.figures[name] = plots.temperature_curves(cells, list(dict.fromkeys(cells["setting"])))
        sec.captions[name] = f"{ctx.kinds[table].label}: fitted temperature vs label fraction (log scale)."
    all_cells = ctx.cells_of(*ctx.in_dist, *ctx.variants)
    if all_cells is None or all_cells["temperature_mean"].isna().all():
        sec.not_shown.append("no in-distribution temperatures (no runs, or no validation split so T was never "
                             "fitted); transfer temperatures are in the Transfer section")
    sec.body = "\n\n".join(body)
    return sec


# --------------------------------------------------------------------------- collapse
def collapse(ctx: SectionContext) -> ReportSection:
    sec = ReportSection("Collapse", "", order=40, key="collapse", summary="where the probe predicts one class")
    body = ["A probe **collapses** when it predicts one class beyond that class's share of the test split and "
            "recalls no other test class above 5 % (the prevalence-aware `collapsed` column). Results without "
            "it (the published tables) use PRISM's `degenerate` flag: more than 99 % of the test predictions in "
            "one class, whatever the prevalence. Each cell of the heatmap shows how many seeds collapsed; collapse "
            "usually marks the label budget below which a setting cannot be trusted."]
    audit = ctx.view.table("degeneracy_audit")
    if audit is not None:
        body.append(f"`degeneracy_audit.csv` (PROTOCOL §6.13) lists {len(audit)} cells with at least one collapsed "
                    "seed" + (" (PRISM: 28 in-distribution + 119 transfer)." if ctx.view.reference else "."))
    found = False
    grids = [n for n in ctx.kinds if ctx.kinds[n].grid]
    for table in [n for n in (*ctx.in_dist, *ctx.transfers) if n not in grids]:
        cells = ctx.cells_of(table)
        if cells is None or cells["collapsed_runs"].isna().all():
            continue
        found = True
        label = frame_label(table, cells, ctx.kinds)
        rows = cells[["model", "setting"]].drop_duplicates()
        if len(rows) > MAX_TABLE_ROWS:
            sec.not_shown.append(f"{label}: {len(rows)} rows are too many for a heatmap; see report_cells.csv "
                                 "(collapsed_runs)")
            continue
        if not figure_guard(ctx, sec):
            break
        name = f"collapse-{table}.png"
        sec.figures[name] = cell_figures.collapse_heatmap(cells, title=label)
        n_c = int((cells["collapsed_runs"] > 0).sum())
        sec.captions[name] = f"{label}: collapsed seeds per cell ({n_c} of {len(cells)} cells with at least one)."
    for table in grids:  # many settings (Camelyon17's hospital pairs): one line instead of a heatmap
        grid = ctx.cells_of(table)
        if grid is not None and grid["collapsed_runs"].notna().any():
            k = int((grid["collapsed_runs"] > 0).sum())
            body.append(f"{ctx.kinds[table].label}: {k} of {len(grid)} cells have a collapsed seed "
                        f"(`report_cells.csv`, table {table}).")
    if not found:
        sec.not_shown.append("the runs carry no `collapsed` or `degenerate` flag (the collapse metric plugin was "
                             "disabled)")
    sec.body = "\n\n".join(body)
    return sec


# --------------------------------------------------------------------------- decoupling
def rank_points(cells: pd.DataFrame, min_models: int = 3) -> pd.DataFrame:
    """Within-dataset ranks of seed-mean AUROC (descending) and scaled ECE (ascending), average ranks for ties;
    (dataset, fraction) groups with fewer than ``min_models`` models with both values are left out."""
    import pandas as pd
    rows = []
    ok = cells.loc[cells["auroc_mean"].notna() & cells["ece_scaled_fixed_mean"].notna()]
    for (setting, f), g in ok.groupby(["setting", "fraction"], sort=False):
        if g["model"].nunique() < min_models:
            continue
        ra = g["auroc_mean"].rank(ascending=False, method="average")
        rc = g["ece_scaled_fixed_mean"].rank(ascending=True, method="average")
        for m, a, c in zip(g["model"], ra, rc):
            rows.append({"model": m, "setting": setting, "fraction": f, "rank_auroc": a, "rank_cal": c,
                         "n_models": g["model"].nunique()})
    return pd.DataFrame(rows, columns=["model", "setting", "fraction", "rank_auroc", "rank_cal", "n_models"])


def decoupling(ctx: SectionContext) -> ReportSection:
    sec = ReportSection("Discrimination rank vs calibration rank", "", order=50, key="decoupling",
                        summary="does the best-ranking model calibrate best?")
    cells = ctx.cells_of(*ctx.ranked)
    if cells is None:
        sec.not_shown.append("needs in-distribution runs of at least 3 models on the same dataset; there are no "
                             "in-distribution runs here")
        return sec
    models = list(dict.fromkeys(cells["model"]))
    pts = rank_points(cells)
    if pts.empty:
        sec.not_shown.append(f"needs at least 3 models evaluated on the same dataset; these results have "
                             f"{len(models)} model{'s' if len(models) != 1 else ''} ({', '.join(models[:6])}), so "
                             "there is no ranking to compare. Combine results directories of several models with "
                             "`prism-run findings DIR1 DIR2 DIR3 --output OUT`")
        return sec
    fr = sorted(pts["fraction"].unique())
    show = list(dict.fromkeys([fr[0], fr[-1]]))
    ann = {}
    for f in show:
        key = f"decoupling_pooled_rho_{round(f * 100, 6):g}pct"
        rho = ctx.h(key)
        disp = pts.loc[np.isclose(pts["fraction"], f)]
        mean_disp = float((disp["rank_auroc"] - disp["rank_cal"]).abs().mean())
        txt = f"mean |rank difference| {mean_disp:.2f}"
        if isinstance(rho, (int, float)):
            txt = f"pooled Spearman ρ = {rho:.2f}\n" + txt
        ann[f] = txt
    body = ["Each point is one (model, dataset): its AUROC rank within the dataset against its rank by scaled ECE "
            "(1 = best on both). On the diagonal the two rankings agree; in PRISM they agree under full supervision "
            "(pooled ρ 0.52, I² 0 %) but not at 1 % labels (ρ −0.24, I² 67 %)."]
    if ctx.mpl:
        sec.figures["rank-scatter.png"] = cell_figures.rank_scatter(pts, show, ann)
        sec.captions["rank-scatter.png"] = ("AUROC rank vs calibration rank at the smallest and largest label "
                                            "fraction; grey band: ranks agree within one place.")
    else:
        sec.not_shown.append(plots.NO_MPL)
    rc = ctx.view.table("rank_correlations")
    if rc is not None and len(rc) <= MAX_TABLE_ROWS:
        body.append("Per-dataset rank correlations (`rank_correlations.csv`, PROTOCOL §6.5: Spearman and Kendall "
                    "between AUROC and −scaled ECE across models, model-bootstrap 95 % CI):\n\n"
                    + markdown_table(rc))
    notes = ctx.notes_about("rank_correlation", "decoupling", "pooled")
    if notes:
        body.append("Not defined here: " + "; ".join(notes[:6]))
    sec.body = "\n\n".join(body)
    return sec


# --------------------------------------------------------------------------- metric table
def metrics_table(ctx: SectionContext) -> ReportSection:
    sec = metric_section(ctx.metric_cells, ctx.described, ctx.kinds)
    if ctx.metric_error:
        sec.not_shown = [ctx.metric_error]
    return sec


# --------------------------------------------------------------------------- per-cell table
def cell_table(ctx: SectionContext) -> ReportSection:
    import pandas as pd
    sec = ReportSection("Results by label fraction", "", order=90, key="cells", summary="seed mean ± std per cell")
    cells = ctx.cells
    if cells is None or cells.empty:
        sec.not_shown.append("no cells")
        return sec
    if len(cells) > MAX_TABLE_ROWS:
        sec.body = (f"{len(cells):,} cells — too many to list here; every cell is in `report_cells.csv` (seed mean, "
                    "std, min and max of each metric).")
        return sec

    with_ci = plots.has_ci(cells, ("auroc", "f1_macro", "ece_fixed", "ece_scaled_fixed"))

    def pm(r, metric):
        m, s = getattr(r, f"{metric}_mean"), getattr(r, f"{metric}_std")
        if pd.isna(m):
            return "–"
        text = f"{m:.3f} ± {s:.3f}" if not pd.isna(s) else f"{m:.3f}"
        return text + ci_text(getattr(r, f"{metric}_ci_low", np.nan), getattr(r, f"{metric}_ci_high", np.nan))

    rows = []
    for r in cells.itertuples(index=False):
        row = {
            "runs": table_label(r.table, getattr(r, "shift", None), ctx.kinds), "model": r.model, "setting": setting_label(r.setting),
            "fraction": pct(r.fraction), "AUROC": pm(r, "auroc"),
            "macro-F1": pm(r, "f1_macro"), "ECE raw": pm(r, "ece_fixed"),
            "ECE scaled": pm(r, "ece_scaled_fixed"),
            "T": fmt(r.temperature_mean, 3),
            "collapsed": "–" if pd.isna(r.collapsed_runs) else f"{int(r.collapsed_runs)}/{int(r.n_runs)}",
        }
        n_min = getattr(r, "n_test_min_class", np.nan)
        if not pd.isna(n_min):
            row["rarest test class"] = f"{int(n_min)}" + (" ⚠️ few" if 0 < n_min < FEW_TEST_SAMPLES else "")
        rows.append(row)
    intro = "Seed mean ± standard deviation (ddof = 1) per cell (`report_cells.csv`)"
    if with_ci:
        intro += (f"; in brackets the {ci_words(ctx)}" + (" (from the paired replicates)" if ctx.cells_exact else
                                                          " (approximated by the mean of the seeds' intervals)")
                  + "; *rarest test class*: the smallest class count of the test split")
    sec.body = (intro + ". T is the temperature behind the scaled ECE (source validation split for transfer).\n\n"
                + markdown_table(pd.DataFrame(rows)))
    return sec


@hookimpl
def report_sections(view):
    ctx = SectionContext(view)
    makers = (overview, verdict_section, discrimination, calibration, reliability, temperature, collapse,
              decoupling, transfer, cri, findings, metrics_table, cell_table)
    return [m(ctx) for m in makers]


__all__ = ["markdown_table", "rank_points", "report_sections"]
