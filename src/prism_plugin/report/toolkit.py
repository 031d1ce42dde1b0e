"""The public report toolkit: what a study or plugin needs to build report sections and figures.

Import from here only; the other ``prism_plugin.report`` modules are internal. Names:

- ``ReportSection``, ``ReportView``: a report section, and the read-only view of a results directory.
- ``render_sections_md(sections, figures_dir)``: the Markdown blocks of sections, figures linked.
- ``fmt(value, digits)``: a table cell as the report prints it ("–" for missing).
- ``pipe_table(header, rows)``, ``markdown_table(df)``: a Markdown table from rows or a DataFrame.
- ``available()``: whether matplotlib is installed; ``NO_MPL``: the "not shown" line when it is not.
- ``figure(w, h)``, ``style()``, ``png(fig)``: a pyplot-free figure, the report style, its PNG bytes.
- ``model_colors(models)``, ``PALETTE``, ``INK``, ``MUTED``, ``RAW``, ``SCALED``: the report's colours.
"""

from prism_plugin.contracts import ReportSection, ReportView
from prism_plugin.report.render import render_sections_md
from prism_plugin.report.markdown import fmt, markdown_table, pipe_table
from prism_plugin.report.plots import (INK, MUTED, NO_MPL, PALETTE, RAW, SCALED, available, figure, model_colors, png,
                                       style)

__all__ = ["ReportSection", "ReportView", "render_sections_md", "fmt", "pipe_table", "markdown_table", "available",
           "NO_MPL", "figure", "style", "png", "model_colors", "PALETTE", "INK", "MUTED", "RAW", "SCALED"]
