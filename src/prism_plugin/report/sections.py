"""Report sections and the read-only view of a results directory they are built from.

A ``report_sections`` hook receives a :class:`ReportView` and returns
:class:`ReportSection` objects. ``read_view(path, host)`` reads one of any prism-run
results directory; the report builder also fills the optional fields (the per-run
tables in the reference schema, the summary tables of every ``summarize``
plugin, reliability artifacts) so sections do not recompute them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable


from prism_plugin.contracts import ReportSection, ReportView
from prism_plugin.metrics.descriptions import described_metrics
from prism_plugin.results import read_runs, read_summary, runs_files, summary_dirs


def read_view(path: str | Path, host, *, sources: Iterable[str | Path] = (), **fields: Any) -> ReportView:
    """The :class:`ReportView` of the results directory ``path``: the ``runs.csv`` of every source
    (default ``path``; a reference view without any: its per-run tables), the verified
    ``summary.json`` of ``path`` and of each source, and the metric descriptions of ``host``
    (unless ``metrics`` is given). ``fields``: the other fields of :class:`ReportView`."""
    import pandas as pd
    view = ReportView(Path(path), sources=tuple(sources), **fields)
    frames = [read_runs(f) for f in runs_files(view.sources)]
    if not frames and view.run_tables is not None:
        frames = [getattr(view.run_tables, name).assign(reference_table=name) for name in view.run_tables.present()]
    if frames:
        view.runs = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    view.summary = read_summary(view.path)  # {} for a summary that does not describe runs.csv
    view.source_summaries = [s for s in map(read_summary, summary_dirs(view.sources)) if s]
    if not view.metrics:
        view.metrics = described_metrics(host)
    return view


__all__ = ["ReportSection", "ReportView", "read_view"]
