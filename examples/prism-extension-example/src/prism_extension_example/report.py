"""A report section: the example metrics per label fraction, from the results' per-run rows."""

from __future__ import annotations

from prism_plugin.report.sections import ReportSection

COLUMNS = ("example_brier_top", "example_confident_error")
TITLE = "Example extension: confident errors"


def confident_error_section(view) -> ReportSection | None:
    runs = view.runs
    present = [c for c in COLUMNS if runs is not None and c in runs.columns]
    if not present:
        return None  # nothing measured by this plugin: no section
    table = runs.groupby(["model", "fraction"], sort=True)[present].mean().reset_index()
    lines = ["| model | fraction | " + " | ".join(present) + " |",
             "|---|---:|" + "---:|" * len(present)]
    for row in table.itertuples(index=False):
        values = " | ".join(f"{getattr(row, c):.4f}" for c in present)
        lines.append(f"| {row.model} | {row.fraction:g} | {values} |")
    body = ("Seed means of the example plugin's metrics (lower is better): the top-label Brier score and "
            "the share of test tiles predicted confidently (at least `example_threshold`) and wrongly.\n\n"
            + "\n".join(lines))
    return ReportSection(TITLE, body, order=900, key="example-extension",
                         summary="example metrics per label fraction", tables={"example_confident_errors": table})
