"""The report's Verdict section: per model, KPI cards and one line per question with its evidence
(:func:`prism_plugin.report.verdict.build_verdict`)."""

from __future__ import annotations

import html
import json
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.report.context import SectionContext
from prism_plugin.report.derived import FEWSHOT_TOLERANCE, report_kinds, transfer_tables
from prism_plugin.report.markdown import fmt, inline
from prism_plugin.report.sections import ReportSection
from prism_plugin.report.verdict import TOPICS, build_verdict
from prism_plugin.report.verdict_rows import pct


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


def kpis(settings: pd.DataFrame, model: str, kinds=None) -> str:
    """KPI cards (HTML) of one model: in-distribution numbers at the largest fraction, transfer AUROC."""
    kinds = report_kinds() if kinds is None else kinds
    ms = settings.loc[settings["model"] == model]
    ind = ms.loc[ms["table"].isin([n for n, k in kinds.items() if not k.transfer and not k.variant_of])]
    tr = ms.loc[ms["table"].isin(transfer_tables(kinds))]
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


def verdict_section(ctx: SectionContext) -> ReportSection:
    sec = ReportSection("Verdict", "", order=5, key="verdict", summary="plain-language answers, per model")
    settings = ctx.settings
    if settings is None or settings.empty:
        sec.not_shown.append("no per-setting summary (report_settings) could be computed from these results")
        return sec
    tol = float(ctx.view.options.get("fewshot_tolerance", FEWSHOT_TOLERANCE))
    from prism_plugin.report.verdict import results_flags

    v = build_verdict(settings, tolerance=tol, metric_cells=ctx.metric_cells,
                      flags=results_flags(getattr(ctx.view, "sources", ()) or ()), kinds=ctx.kinds)
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
                 f'<span class="counts">{html.escape(badge)}</span></h3></summary>' + kpis(settings, model, ctx.kinds))
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
