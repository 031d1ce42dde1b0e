"""Report sections and the read-only view of a results directory they are built from.

A ``report_sections`` hook receives a :class:`ReportView` and returns
:class:`ReportSection` objects. ``ReportView(path)`` works on any prism-run
results directory; the report builder fills the optional fields (the per-run
tables in the reference schema, the summary tables of every ``summarize``
plugin, reliability artifacts) so sections do not recompute them.
"""

from prism_plugin.contracts import ReportSection, ReportView

__all__ = ["ReportSection", "ReportView"]
