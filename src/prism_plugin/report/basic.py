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

import html
import json
import math
from typing import Any

import numpy as np
import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.report import plots
from prism_plugin.report.derived import (CI_METRICS, FEW_TEST_SAMPLES, FEWSHOT_TOLERANCE, TABLE_LABELS, TRANSFER_TABLES,
                                         TRANSFER_ZONE, frame_label, label_definition_bands_apply, table_label)
from prism_plugin.report.markdown import fmt, inline, markdown_table
from prism_plugin.report.metric_table import metric_cells, metric_section
from prism_plugin.report.sections import ReportSection
from prism_plugin.report.verdict import TOPICS, build_verdict, pct, setting_label

IN_DIST = ("indomain", "camelyon17_indomain")
TRANSFERS = TRANSFER_TABLES
MAX_TABLE_ROWS = 80
NO_MPL = "figures need matplotlib, which is not installed: pip install matplotlib"


# --------------------------------------------------------------------------- helpers
class _Ctx:
    def __init__(self, view):
        self.view = view
        self.cells = view.table("report_cells")
        self.settings = view.table("report_settings")
        self.fewshot = view.table("fewshot_temperature")
        self.headline = view.headline
        self.notes = list(getattr(view.summaries, "notes", []) or [])
        if view.summaries is None:
            p = view.tables_dir / "findings.json"
            if p.exists():
                try:
                    data = json.loads(p.read_text())
                    self.headline = data.get("headline", {})
                    self.notes = data.get("notes", [])
                except (OSError, ValueError):
                    pass
        self.ci_level = None
        self.cells_exact = 0  # cells whose CIs come from the paired bootstrap replicates
        if not view.reference:
            self._exact_ci()
        self.mpl = plots.available()
        # the described metrics (register_metrics, report=True) these runs hold, per cell
        self.described = view.described_metrics("report")
        self.metric_error = ""
        try:
            self.metric_cells = metric_cells(view.run_tables, self.described)
        except Exception as exc:  # a malformed plugin column must not cost the whole report
            self.metric_cells = None
            self.metric_error = f"the metric table could not be computed: {type(exc).__name__}: {exc}"

    def _exact_ci(self) -> None:
        """The CI level of the results and, where the bootstrap replicates are at hand, the exact
        seed-mean CIs in the cells (and the settings the verdict cites, recomputed from them)."""
        from prism_plugin.report import uncertainty
        from prism_plugin.report.derived import band_metrics, report_settings

        try:
            self.ci_level = uncertainty.bootstrap_level(self.view.source_summaries())
        except Exception:
            self.ci_level = None
        if self.cells is None or self.cells.empty or "ci_source" not in self.cells:
            return
        from prism_plugin.report.build import source_dirs

        models = set(self.cells["model"].astype(str))
        cells, level, k = uncertainty.exact_cell_ci(source_dirs(self.view.sources), self.cells,
                                                    label=lambda row: cell_model(row, models))
        if not k:
            return
        self.cells, self.cells_exact = cells, k
        self.ci_level = self.ci_level or level
        self.settings = report_settings(cells, self.fewshot, band_metrics(self.view.options))

    def cells_of(self, table: str) -> pd.DataFrame | None:
        if self.cells is None or self.cells.empty:
            return None
        sub = self.cells.loc[self.cells["table"] == table]
        return sub if len(sub) else None

    def notes_about(self, *words: str) -> list[str]:
        return [n for n in self.notes if any(w in n for w in words)]

    def h(self, key: str) -> Any:
        return self.headline.get(key)


def cell_model(row, models: set[str]) -> str:
    """The model label the report's cells give a runs.csv row: the model, or ``model · probe``
    (several probes of one model), or ``model · C = …`` (a probe-sweep variant)."""
    from prism_plugin.report.build import PROBE_SEP
    from prism_plugin.summaries.probe_sensitivity import variant_model

    model = str(row.get("model", ""))
    for cand in (variant_model(model, row.get("sweep_key"), row.get("sweep_value")),
                 f"{model}{PROBE_SEP}{row.get('probe')}"):
        if cand in models:
            return cand
    return model


def _figure_guard(ctx: _Ctx, section: ReportSection) -> bool:
    if not ctx.mpl:
        section.not_shown.append(NO_MPL)
        return False
    return True


# --------------------------------------------------------------------------- overview
def _banded(table: str, cells: pd.DataFrame) -> bool:
    """Whether the PRISM label-definition zone applies to (all of) these transfer cells."""
    shifts = set(cells["shift"].astype(str)) if "shift" in cells.columns and len(cells) else {""}
    return all(label_definition_bands_apply(table, k) for k in shifts)


def overview(ctx: _Ctx) -> ReportSection:
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
            "kind of run": frame_label(table, sub),
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
        + (f" Error bars are the {_ci_words(ctx)} (resampling the test set; the probe and its temperature are "
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


def _file_lines(ctx: _Ctx) -> list[str]:
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


def _ci_words(ctx: _Ctx) -> str:
    level = f"{round(100 * ctx.ci_level, 6):g} % " if ctx.ci_level else ""
    return f"{level}test-set bootstrap CI of the seed mean"


def _no_cells_text(ctx: _Ctx) -> str:
    """Why there are no cells, in words a user can act on."""
    sweeps = _sweep_run_count(ctx)
    if sweeps:
        return (f"These results are a probe sweep ({sweeps} runs of `sweep:` variants), which this report's "
                "per-cell sections leave out (each variant would be pooled with the others); `prism-run "
                "sensitivity DIR` compares the variants (ranking stability per C or probe kind).")
    text = "No per-run results could be read."
    return text + (" " + " ".join(ctx.view.notes) if ctx.view.notes else "")


def _sweep_run_count(ctx: _Ctx) -> int:
    from prism_plugin.results import runs_files

    n = 0
    try:
        for f in runs_files(ctx.view.sources):
            head = pd.read_csv(f, usecols=lambda c: c == "sweep_key")
            n += int(head["sweep_key"].notna().sum()) if "sweep_key" in head else 0
    except Exception:
        return 0
    return n


# --------------------------------------------------------------------------- verdict
LEVEL_MARK = {"good": "✅", "warn": "⚠️", "bad": "❌", "info": "ℹ️", "na": "○"}


def _evidence(r) -> str:
    if not r.source:
        return ""
    where = json.loads(r.where)

    def show(v):
        if not isinstance(v, list):
            return str(v)
        return "/".join(map(str, v)) if len(v) <= 6 else f"{len(v)} settings ({v[0]} … {v[-1]})"

    sel = ", ".join(f"{k}={show(v)}" for k, v in where.items() if k != "model")
    agg = "" if r.agg == "value" else f"{r.agg} of "
    val = float(r.value)
    shown = "empty (none)" if math.isnan(val) else (f"{int(val)}" if val.is_integer() else f"{val:.4f}")
    return f"{r.source} [{sel}]: {agg}{r.column} = {shown}"


def _kpis(settings: pd.DataFrame, model: str) -> str:
    """KPI cards (HTML) of one model: in-distribution numbers at the largest fraction, transfer AUROC."""
    ms = settings.loc[settings["model"] == model]
    ind = ms.loc[ms["table"].isin(IN_DIST)]
    tr = ms.loc[ms["table"].isin(TRANSFERS)]
    cards = []
    if len(ind):
        top = pct(float(ind["fraction_max"].max()))
        cards.append((fmt(float(ind["auroc_hi"].mean())), f"AUROC at {top} labels"))
        cards.append((f"{fmt(float(ind['ece_fixed_hi'].mean()))} → {fmt(float(ind['ece_scaled_fixed_hi'].mean()))}",
                      f"ECE raw → scaled at {top}"))
        cards.append((f"{int(ind['collapsed_cells'].sum())} / {int(ind['n_fractions'].sum())}",
                      "cells with a collapsed seed"))
        cards.append((f"{int(ind['scaling_not_helping_cells'].sum())} / {int(ind['scaling_cells'].sum())}",
                      "cells where scaling did not lower ECE"))
    if len(tr) and tr["auroc_hi"].notna().any():
        # the number of the "At a glance" line below the cards (seed mean at the largest source fraction,
        # mean over pairs), said as such; the transfer lines' banding AUROC is a mean over fractions
        top = pct(float(tr["fraction_max"].max()))
        pairs = f"{len(tr)} pair{'s' if len(tr) > 1 else ''}"
        cards.append((fmt(float(tr["auroc_hi"].mean())),
                      f"target AUROC at {top} source labels ({pairs}{', mean' if len(tr) > 1 else ''})"))
    if not cards:
        return ""
    return '<div class="kpis" style="padding:4px 16px">' + "".join(
        f'<div class="kpi"><div class="v">{html.escape(v)}</div><div class="l">{html.escape(l)}</div></div>'
        for v, l in cards) + "</div>"


def verdict_section(ctx: _Ctx) -> ReportSection:
    sec = ReportSection("Verdict", "", order=5, key="verdict", summary="plain-language answers, per model")
    settings = ctx.settings
    if settings is None or settings.empty:
        sec.not_shown.append("no per-setting summary (report_settings) could be computed from these results")
        return sec
    tol = float(ctx.view.options.get("fewshot_tolerance", FEWSHOT_TOLERANCE))
    from prism_plugin.report.verdict import results_flags

    v = build_verdict(settings, tolerance=tol, metric_cells=ctx.metric_cells,
                      flags=results_flags(getattr(ctx.view, "sources", ()) or ()))
    sec.tables["verdict"] = v
    intro = ("Each line answers one question and cites the number behind it (the table, the row and the column; "
             "`verdict.csv` lists the same evidence). A probe *collapses* when it predicts one class beyond that "
             "class's share of the test split and recalls no other test class above 5 % (prevalence-aware; "
             "results without that column, such as the published tables, use PRISM's `degenerate`: more than "
             "99 % of test predictions in one class); temperature scaling *does not help* in a cell when the "
             "seed-mean scaled ECE is not below the raw ECE, and it is not a clean success when the fitted "
             "temperature sits at a search bound or the test NLL rose after scaling.")
    md = [intro + " Markers: ✅ fine · ⚠️ caution · ❌ problem · ℹ️ context · ○ not measured."]
    h = [f'<p>{inline(intro)}</p><div class="legend-dots">'
         '<span><i style="background:var(--good)"></i>fine</span><span><i style="background:#f59e0b"></i>caution'
         '</span><span><i style="background:var(--bad)"></i>problem</span><span><i style="background:var(--info)">'
         '</i>context</span><span><i style="border:2px solid var(--na);width:8px;height:8px"></i>not measured'
         '</span></div>']
    models = list(dict.fromkeys(v["model"]))
    if len(models) > 3:
        h.append(f"<p>{len(models)} models: click a model to open its verdict.</p>")
    for i, model in enumerate(models):
        mv = v.loc[v["model"] == model]
        counts = mv["level"].value_counts()
        badge = " · ".join(f"{counts.get(k, 0)} {lab}" for k, lab in (("bad", "problem"), ("warn", "caution"),
                                                                      ("good", "fine")) if counts.get(k, 0))
        md.append(f"\n### {model}\n")
        opened = " open" if (len(models) <= 3 or i == 0) else ""
        h.append(f'<details class="verdict-model"{opened}><summary><h3>{html.escape(str(model))}'
                 f'<span class="counts">{html.escape(badge)}</span></h3></summary>' + _kpis(settings, model))
        for topic, label in TOPICS.items():
            tv = mv.loc[mv["topic"] == topic]
            if tv.empty:
                continue
            md.append(f"**{label}**\n")
            items = []
            for r in tv.itertuples(index=False):
                ev = _evidence(r)
                md.append(f"- {LEVEL_MARK.get(r.level, '')} {r.text}" + (f" *({ev})*" if ev else ""))
                attrs = ""
                if r.source:
                    attrs = (f' data-source="{html.escape(r.source)}" data-where="{html.escape(r.where, quote=True)}"'
                             f' data-column="{html.escape(r.column)}" data-agg="{html.escape(r.agg)}"'
                             f' data-value="{float(r.value)!r}"')
                items.append(f'<li class="verdict lv-{r.level}"{attrs}>{html.escape(r.text)}'
                             + (f'<span class="evidence">{html.escape(ev)}</span>' if ev else "") + "</li>")
            md.append("")
            h.append(f'<div class="verdict-topic"><div class="topic">{html.escape(label)}</div><ul>'
                     + "".join(items) + "</ul></div>")
        h.append("</details>")
    sec.body = "\n".join(md)
    sec.html = "\n".join(h)
    return sec


# --------------------------------------------------------------------------- discrimination
def discrimination(ctx: _Ctx) -> ReportSection:
    sec = ReportSection("Discrimination vs label fraction", "", order=10, key="discrimination",
                        summary="AUROC and macro-F1 with seed bands")
    found = False
    body = ["AUROC (ranking quality) and macro-F1 (decisions at the arg-max) as the share of training labels "
            "grows. Lines are seed means; the band spans the seeds" + (f"; error bars are the {_ci_words(ctx)}"
                                                                     if plots.has_ci(ctx.cells, ("auroc", "f1_macro"))
                                                                     else "") +
            ". Each y axis is fitted to its data (within 0–1), so small differences are visible: read the tick "
            "values, not the height."]
    for table in IN_DIST:
        cells = ctx.cells_of(table)
        if cells is None:
            continue
        found = True
        if not _figure_guard(ctx, sec):
            break
        settings = list(dict.fromkeys(cells["setting"]))
        label = TABLE_LABELS[table]
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
    if not found:
        sec.not_shown.append(_no_in_distribution(ctx, "see the Transfer section"))
    bp = ctx.view.table("breaking_points_by_threshold")
    if bp is not None and len(bp) <= MAX_TABLE_ROWS:
        body.append("**Breaking points** (`breaking_points_by_threshold.csv`): the smallest label fraction whose "
                    "seed-mean macro-F1 reaches each threshold (– = never).\n\n"
                    + markdown_table(bp, formats={c: (lambda v: "–" if pd.isna(v) else pct(v))
                                                  for c in bp.columns if c.startswith("thr_")}))
    sec.body = "\n\n".join(body)
    return sec


def _no_in_distribution(ctx: _Ctx, transfer_hint: str) -> str:
    """Why an in-distribution section is empty: only transfer runs (then ``transfer_hint``), a
    probe sweep read elsewhere, or no runs at all."""
    if ctx.cells is not None and not ctx.cells.empty and ctx.cells["table"].isin(TRANSFERS).any():
        return f"no in-distribution runs in these results (only transfer); {transfer_hint}"
    if _sweep_run_count(ctx):
        return ("the in-distribution runs here are probe-sweep variants, left out of this section; `prism-run "
                "sensitivity DIR` compares them")
    return "no in-distribution runs could be read from these results (see the Overview)"


# --------------------------------------------------------------------------- calibration
def calibration(ctx: _Ctx) -> ReportSection:
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
    found = False
    for table in (*IN_DIST, "indomain_propval"):
        cells = ctx.cells_of(table)
        if cells is None:
            continue
        found = True
        if not _figure_guard(ctx, sec):
            break
        settings = list(dict.fromkeys(cells["setting"]))
        name = f"ece-{table}.png"
        label = "after T fitted on the proportional validation subset" if table == "indomain_propval" else \
            "after temperature scaling"
        sec.figures[name] = plots.ece_curves(cells, settings, scaled_label=label, ci_level=ctx.ci_level)
        sec.captions[name] = f"{TABLE_LABELS[table]}: ECE vs label fraction (raw solid, scaled dashed)."
    if not found:
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
        raw = plots.pool_bins(es, "raw")
        scaled = plots.pool_bins(es, "scaled")
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


def reliability(ctx: _Ctx) -> ReportSection:
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
    if not _figure_guard(ctx, sec):
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
    sec.figures["reliability.png"] = plots.reliability_grid(groups)
    sec.captions["reliability.png"] = "Reliability diagrams; bars below each panel: share of test samples per bin."
    return sec


# --------------------------------------------------------------------------- temperature
def temperature(ctx: _Ctx) -> ReportSection:
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
    found = False
    for table in (*IN_DIST, "indomain_propval"):
        cells = ctx.cells_of(table)
        if cells is None or cells["temperature_mean"].isna().all():
            continue
        found = True
        if not _figure_guard(ctx, sec):
            break
        name = f"temperature-{table}.png"
        sec.figures[name] = plots.temperature_curves(cells, list(dict.fromkeys(cells["setting"])))
        sec.captions[name] = f"{TABLE_LABELS[table]}: fitted temperature vs label fraction (log scale)."
    if not found:
        sec.not_shown.append("no in-distribution temperatures (no runs, or no validation split so T was never "
                             "fitted); transfer temperatures are in the Transfer section")
    sec.body = "\n\n".join(body)
    return sec


# --------------------------------------------------------------------------- collapse
def collapse(ctx: _Ctx) -> ReportSection:
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
    for table in ("indomain", "transfer", "covariate_transfer", "prior_transfer", "camelyon17_indomain"):
        cells = ctx.cells_of(table)
        if cells is None or cells["collapsed_runs"].isna().all():
            continue
        found = True
        rows = cells[["model", "setting"]].drop_duplicates()
        if len(rows) > MAX_TABLE_ROWS:
            sec.not_shown.append(f"{frame_label(table, cells)}: {len(rows)} rows are too many for a heatmap; see "
                                 "report_cells.csv (collapsed_runs)")
            continue
        if not _figure_guard(ctx, sec):
            break
        name = f"collapse-{table}.png"
        sec.figures[name] = plots.collapse_heatmap(cells, title=frame_label(table, cells))
        n_c = int((cells["collapsed_runs"] > 0).sum())
        sec.captions[name] = (f"{frame_label(table, cells)}: collapsed seeds per cell ({n_c} of {len(cells)} cells with "
                              "at least one).")
    cam = ctx.cells_of("camelyon17_transfer")
    if cam is not None and cam["collapsed_runs"].notna().any():
        k = int((cam["collapsed_runs"] > 0).sum())
        body.append(f"Camelyon17 hospital transfer: {k} of {len(cam)} cells have a collapsed seed "
                    "(`report_cells.csv`, table camelyon17_transfer).")
    if not found:
        sec.not_shown.append("the runs carry no `collapsed` or `degenerate` flag (the collapse metric plugin was "
                             "disabled)")
    sec.body = "\n\n".join(body)
    return sec


# --------------------------------------------------------------------------- decoupling
def rank_points(cells: pd.DataFrame, min_models: int = 3) -> pd.DataFrame:
    """Within-dataset ranks of seed-mean AUROC (descending) and scaled ECE
    (ascending), average ranks for ties; (dataset, fraction) groups with fewer
    than ``min_models`` models with both values are left out."""
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


def decoupling(ctx: _Ctx) -> ReportSection:
    sec = ReportSection("Discrimination rank vs calibration rank", "", order=50, key="decoupling",
                        summary="does the best-ranking model calibrate best?")
    cells = ctx.cells_of("indomain")
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
        sec.figures["rank-scatter.png"] = plots.rank_scatter(pts, show, ann)
        sec.captions["rank-scatter.png"] = ("AUROC rank vs calibration rank at the smallest and largest label "
                                            "fraction; grey band: ranks agree within one place.")
    else:
        sec.not_shown.append(NO_MPL)
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


# --------------------------------------------------------------------------- transfer
def transfer(ctx: _Ctx) -> ReportSection:
    sec = ReportSection("Transfer", "", order=60, key="transfer",
                        summary="target ECE/AUROC vs source labels; temperatures")
    body = [f"Probes trained on the source and evaluated on the target. In the PRISM paper, whether more source labels "
            f"help or harm target calibration tracks the transfer AUROC: below about {TRANSFER_ZONE:.2f} (shaded) more "
            "labels worsened target ECE in 86–88 % of combinations, above it in 1–8 % (Table 7). That zone was measured "
            "on label-definition pairs: it is shaded only for them (and Camelyon17), not for a task declaring "
            "`shift: covariate` or `shift: prior`, nor for one that declares no shift kind."]
    found = False
    for table in TRANSFERS:
        cells = ctx.cells_of(table)
        if cells is None:
            continue
        found = True
        if not _figure_guard(ctx, sec):
            break
        settings = list(dict.fromkeys(cells["setting"]))
        agg = None if len(settings) <= 6 else f"{len(settings)} pairs (mean over pairs)"
        name = f"transfer-{table}.png"
        sec.figures[name] = plots.transfer_curves(cells, settings, aggregate_label=agg, zone=_banded(table, cells),
                                                  ci_level=ctx.ci_level, zone_at=TRANSFER_ZONE)
        sec.captions[name] = (f"{frame_label(table, cells)}: target AUROC (top; y axis fitted to the data) and target "
                              "ECE (bottom) vs source label fraction"
                              + ("; averaged over pairs, band = range over pairs." if agg else "."))
        extra = []
        if "temperature_oracle_mean" in cells and cells["temperature_oracle_mean"].notna().any():
            extra.append(("temperature_oracle", "oracle T (fitted on target test; not deployable)", "--"))
        ks = sorted(int(c[len("temperature_fewshot_k"):-len("_mean")]) for c in cells.columns
                    if c.startswith("temperature_fewshot_k") and c.endswith("_mean"))
        if ks:
            extra.append((f"temperature_fewshot_k{ks[-1]}", f"few-shot T (K = {ks[-1]} target labels)", ":"))
        if len(settings) <= 6 and cells["temperature_mean"].notna().any():
            tname = f"transfer-temperature-{table}.png"
            sec.figures[tname] = plots.temperature_curves(cells, settings, extra=extra, max_cols=2,
                                                          xlabel="source label fraction (log scale)")
            sec.captions[tname] = (f"{frame_label(table, cells)}: source-fitted temperature" +
                                   (", oracle" if any(e[0] == "temperature_oracle" for e in extra) else "") +
                                   (" and few-shot" if ks else "") + " temperatures vs source label fraction.")
            if not extra:
                sec.not_shown.append(f"{TABLE_LABELS[table]}: oracle and few-shot temperatures — the runs have no "
                                     "temperature_oracle / temperature_fewshot_k<K> columns")
    if not found:
        sec.not_shown.append("these results hold no transfer runs (run a transfer task, e.g. `prism_demo_transfer`)")
        return sec
    if ctx.fewshot is not None and not ctx.fewshot.empty and ctx.mpl:
        tol = float(ctx.view.options.get("fewshot_tolerance", FEWSHOT_TOLERANCE))
        sec.figures["fewshot.png"] = plots.fewshot_gap(ctx.fewshot, tolerance=tol)
        sec.captions["fewshot.png"] = ("Few-shot target temperature: target ECE minus oracle ECE vs the number of "
                                       f"labelled target samples K at the largest source fraction; green: within {tol:g}.")
    elif ctx.fewshot is None or ctx.fewshot.empty:
        sec.not_shown.append("few-shot target temperatures: the transfer runs have no temperature_fewshot_k<K> / "
                             "ece_scaled_fewshot_k<K> columns (the temperature-transfer plugin writes them)")
    bands = ctx.view.table("mechanism_bands")
    if bands is not None:
        body.append("**Rising target ECE by transfer AUROC** (`mechanism_bands.csv`, PROTOCOL §6.10; combinations "
                    "of model and pair, banded by the mean target AUROC over fractions; rate = share of the band's "
                    "combinations whose target ECE rose):\n\n" + markdown_table(bands, formats=_PERCENT_COLUMNS))
    rho = ctx.h("mechanism_spearman_slope_all")
    if isinstance(rho, (int, float)):
        body.append(f"Spearman correlation between transfer AUROC and the slope of target ECE in log10 fraction: "
                    f"**{rho:.2f}** over {ctx.h('mechanism_spearman_slope_all_n')} combinations (PRISM: −0.78).")
    n_w, n_t = ctx.h("ts_transfer_cells_worse"), ctx.h("ts_transfer_cells_worse_total")
    if isinstance(n_w, (int, float)) and isinstance(n_t, (int, float)):
        body.append(f"The source-fitted temperature made target ECE worse in **{int(n_w)} of {int(n_t)}** "
                    "label-definition transfer cells (ts_transfer_cells_worse).")
    sec.body = "\n\n".join(body)
    return sec


#: Columns of the PROTOCOL §6 tables that hold a percentage (printed with its unit).
_PERCENT_COLUMNS = {"rate": lambda v: "–" if pd.isna(v) else f"{float(v):g} %"}


# --------------------------------------------------------------------------- CRI
def cri(ctx: _Ctx) -> ReportSection:
    sec = ReportSection("Composite Reliability Index (CRI)", "", order=70, key="cri",
                        summary="AUROC × (1 − scaled ECE) × OOD stability")
    body = ["The CRI (PROTOCOL §6.2) multiplies mean AUROC, one minus the mean scaled ECE and the OOD stability "
            "(mean over transfer pairs of min(target AUROC / source AUROC, 1), at 100 % labels). It is a screening "
            "heuristic: a model with little in-distribution performance to lose looks stable, and for CRC/BRACS the "
            "ratio compares a binary target AUROC with a multiclass source AUROC."]
    shown = False
    for stem, what in (("cri_variants_100", "CRI at 100 % labels under four aggregation rules"),
                       ("cri_variants_1", "CRI at 1 % labels"),
                       ("cri_components", "components at 100 % labels (label-definition pairs)"),
                       ("camelyon17_cri_components", "Camelyon17 components")):
        t = ctx.view.table(stem)
        if t is None or t.empty:
            continue
        shown = True
        if "model" not in t.columns:
            t = t.reset_index()
        body.append(f"**{what}** (`{stem}.csv`):\n\n" + markdown_table(t))
    if not shown:
        reasons = ctx.notes_about("CRI", "cri_", "OOD stability")
        sec.not_shown.append("no CRI table: " + ("; ".join(reasons[:3]) if reasons else
                                                 "needs in-distribution and transfer runs of the same model"))
    sec.body = "\n\n".join(body)
    return sec


# --------------------------------------------------------------------------- findings
PAPER_NUMBERS: list[tuple[str, str, str, str]] = [
    # (headline key, what, paper value, unit/format)
    ("decoupling_pooled_rho_1pct", "pooled AUROC-rank vs calibration-rank ρ at 1 % labels", "−0.24", "f"),
    ("decoupling_pooled_rho_100pct", "pooled ρ at 100 % labels", "0.52", "f"),
    ("decoupling_i2_1pct", "heterogeneity I² at 1 %", "67 %", "pct"),
    ("decoupling_i2_100pct", "heterogeneity I² at 100 %", "0 %", "pct"),
    ("decoupling_pooled_contrast", "ρ(100 %) − ρ(1 %)", "0.754 [0.190, 1.270]", "ci"),
    ("decoupling_seedlevel_contrast", "seed-level bootstrap Δρ", "0.62 [0.08, 1.13]", "ci"),
    ("ts_indomain_cells_worse", "cells where temperature scaling does not reduce ECE", "49 of 288", "of"),
    ("ts_multiclass_cells_T_lt_1", "multiclass cells with T < 1", "189 of 192", "of"),
    ("ts_binary_cells_T_lt_2", "binary cells with T < 2 (sharpened)", "63 of 96", "of"),
    ("ts_transfer_cells_worse", "transfer cells where the source T worsens target ECE", "117 of 192 (61 %)", "of"),
    ("ts_camelyon17_runs_worse", "Camelyon17 runs where the source T worsens target ECE", "16 %", "of"),
    ("mechanism_label_definition_rises", "label-definition combinations with rising target ECE", "28 of 32", "rises"),
    ("mechanism_covariate_rises", "Camelyon17 combinations with rising target ECE", "10 of 160", "rises"),
    ("mechanism_spearman_slope_all", "Spearman(transfer AUROC, ECE slope)", "−0.78", "f"),
    ("degenerate_cells_indomain", "in-distribution cells with a collapsed seed", "28", "i"),
    ("degenerate_cells_ood", "transfer cells with a collapsed seed", "119", "i"),
    ("cri_rule_kendall_tau_min", "Kendall τ between CRI rules (min)", "0.71", "f"),
]


def _headline_value(ctx: _Ctx, key: str, kind: str) -> str | None:
    v = ctx.h(key)
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if kind == "of":
        tot = ctx.h(f"{key}_total")
        p = ctx.h(f"{key}_pct")
        return f"{int(v)} of {int(tot)}" + (f" ({p:.1f} %)" if isinstance(p, (int, float)) else "")
    if kind == "rises":
        n = ctx.h(key[:-len("_rises")] + "_n")
        return f"{int(v)} of {int(n)}" if n is not None else str(v)
    if kind == "ci":
        lo, hi = ctx.h(f"{key}_ci_lo"), ctx.h(f"{key}_ci_hi")
        return f"{v:.3f} [{lo:.3f}, {hi:.3f}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) \
            else f"{v:.3f}"
    if kind == "pct":
        return f"{v:.1f} %"
    if kind == "i":
        return f"{int(v)}"
    return f"{v:.3f}"


def findings(ctx: _Ctx) -> ReportSection:
    sec = ReportSection("Findings: headline numbers", "", order=80, key="findings",
                        summary="the paper's four findings on these runs")
    rows = []
    for key, what, paper, kind in PAPER_NUMBERS:
        val = _headline_value(ctx, key, kind)
        if val is None:
            continue
        rows.append({"finding": what, "these results": val, "PRISM paper (8 reference models)": paper,
                     "findings.json key": f"`{key}`"})
    body = []
    if rows:
        body.append("The statistics behind the PRISM paper's findings, computed on these results with the PROTOCOL "
                    "§6 recipes, next to the paper's values (which are for its eight models and six datasets; on "
                    "other results they are a point of comparison, not an expectation). \"not defined\" means the "
                    "statistic needs more models, datasets or fractions than these results have.\n\n"
                    + markdown_table(pd.DataFrame(rows)))
    else:
        sec.not_shown.append("no headline statistic could be computed from these results")
    n_head = len(ctx.headline)
    if n_head:
        body.append(f"All {n_head} headline values are in `findings.json`.")
    sec.body = "\n\n".join(body)
    return sec


# --------------------------------------------------------------------------- metric table
def metrics_table(ctx: _Ctx) -> ReportSection:
    sec = metric_section(ctx.metric_cells, ctx.described)
    if ctx.metric_error:
        sec.not_shown = [ctx.metric_error]
    return sec


# --------------------------------------------------------------------------- per-cell table
def cell_table(ctx: _Ctx) -> ReportSection:
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
            "runs": table_label(r.table, getattr(r, "shift", None)), "model": r.model, "setting": setting_label(r.setting),
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
        intro += (f"; in brackets the {_ci_words(ctx)}" + (" (from the paired replicates)" if ctx.cells_exact else
                                                          " (approximated by the mean of the seeds' intervals)")
                  + "; *rarest test class*: the smallest class count of the test split")
    sec.body = (intro + ". T is the temperature behind the scaled ECE (source validation split for transfer).\n\n"
                + markdown_table(pd.DataFrame(rows)))
    return sec


def ci_text(lo: float, hi: float, digits: int = 3) -> str:
    """`` [lo, hi]`` of a test-set CI, empty when not measured."""
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return ""
    return f" [{lo:.{digits}f}, {hi:.{digits}f}]"


@hookimpl
def report_sections(view):
    ctx = _Ctx(view)
    makers = (overview, verdict_section, discrimination, calibration, reliability, temperature, collapse,
              decoupling, transfer, cri, findings, metrics_table, cell_table)
    return [m(ctx) for m in makers]


__all__ = ["markdown_table", "rank_points", "report_sections"]
