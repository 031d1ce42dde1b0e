"""Built-in report plugin: the per-fraction table, temperature and collapse sections."""

from __future__ import annotations

import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.report.sections import ReportSection


def _markdown_table(df: pd.DataFrame, floatfmt: str = "{:.4f}") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        cells = [floatfmt.format(v) if isinstance(v, float) else str(v) for v in row.tolist()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@hookimpl
def report_sections(view):
    runs = view.runs
    metrics = [c for c in ("auroc", "f1_macro", "ece_fixed", "ece_scaled_fixed", "temperature", "temperature_src",
                           "degeneracy_share")
               if c in runs]
    ident = [c for c in ("model", "dataset", "pair", "hospital") if c in runs]
    means = runs.groupby(ident + ["fraction"], sort=False)[metrics].mean().reset_index()
    sections = [ReportSection(
        "Results by label fraction (seed means)",
        "Seed means over the runs of each (model, dataset, fraction) cell. ECE uses 15 bins; "
        "`ece_scaled_fixed` is after the temperature fitted on the full validation split.\n\n"
        + _markdown_table(means),
        order=10,
    )]
    if "degenerate" in runs:
        deg = runs[runs["degenerate"].astype(bool)]
        if deg.empty:
            body = "No run collapsed: in every run fewer than 99 % of test predictions fell in one class."
        else:
            counts = deg.groupby(ident + ["fraction"]).size().reset_index(name="collapsed_runs")
            body = ("A probe **collapses** when more than 99 % of its test predictions fall in one class; "
                    "its AUROC and ECE are then not informative.\n\n" + _markdown_table(counts))
        sections.append(ReportSection("Collapse", body, order=30))
    tcol = "temperature" if "temperature" in runs else "temperature_src"
    if tcol in runs and runs[tcol].notna().any():
        k = int(runs["n_classes"].iloc[0]) if "n_classes" in runs else 0
        neutral = "2 (binary logits [-d, d])" if k == 2 else "1"
        t = runs.groupby("fraction")[tcol].agg(["mean", "min", "max"]).reset_index()
        sections.append(ReportSection(
            "Fitted temperature",
            f"Temperature fitted on the validation split; the neutral value is {neutral}. "
            "Below neutral the probe was under-confident (scaling sharpens it), above it over-confident.\n\n"
            + _markdown_table(t),
            order=40,
        ))
    return sections
