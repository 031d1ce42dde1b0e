"""Report sections and the read-only view of a results directory they are built from.

A ``report_sections`` hook receives a :class:`ReportView` and returns
:class:`ReportSection` objects. ``ReportView(path)`` works on any prism-run
results directory; the report builder fills the optional fields (the per-run
tables in the reference schema, the summary tables of every ``summarize``
plugin, reliability artifacts) so sections do not recompute them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd


@dataclass
class ReportSection:
    """A titled block of Markdown, optionally with PNG figures (name -> bytes).

    ``captions`` gives a caption per figure name; ``not_shown`` lists, one
    line each, what this section would show but cannot, and why (rendered as
    a visible note and collected in the report's "Not shown" list); ``key`` is
    a stable anchor (derived from the title when empty); ``summary`` is a
    one-line teaser used in the table of contents; ``html``, when set, is the
    section's body in the HTML report (``body`` stays the Markdown twin);
    ``tables`` (stem -> DataFrame) are written as ``<stem>.csv`` beside the
    summary tables, so the report's numbers can be traced to a file.
    """

    title: str
    body: str
    order: int = 100
    figures: dict[str, bytes] = field(default_factory=dict)
    captions: dict[str, str] = field(default_factory=dict)
    not_shown: list[str] = field(default_factory=list)
    key: str = ""
    summary: str = ""
    html: str = ""
    tables: dict[str, Any] = field(default_factory=dict)

    @property
    def anchor(self) -> str:
        raw = self.key or self.title
        slug = "".join(ch.lower() if ch.isalnum() else "-" for ch in raw)
        while "--" in slug:
            slug = slug.replace("--", "-")
        return slug.strip("-") or "section"


@dataclass
class ReportView:
    """What report plugins read.

    * ``path``: the folder the report is written to (a results directory, or
      the output folder of ``prism-run findings``).
    * ``runs``: the per-run rows (``runs.csv`` of every source directory,
      concatenated; for a reference directory, its per-run tables).
    * ``summary``: ``summary.json`` of ``path`` (``{}`` when absent).
    * ``table(stem)``: a summary table by file stem (``rank_correlations``),
      from the summaries computed for this report or from ``<tables_dir>/<stem>.csv``.
    * ``run_tables``: :class:`~prism_plugin.tables.RunTables` in the reference
      schema (``None`` if it could not be built); ``summaries``: the merged
      :class:`~prism_plugin.tables.SummaryOutput`; ``reliability``: the
      reliability artifacts of the source directories; ``notes``: why
      something could not be loaded; ``options``: the summary options used
      (e.g. ``fewshot_tolerance``, ``binary_logits``).
    """

    path: Path
    sources: tuple[Path, ...] = ()
    tables_dir: Path | None = None
    run_tables: Any = None
    summaries: Any = None
    reliability: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    title: str = ""
    reference: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.sources = tuple(Path(s) for s in self.sources) or (self.path,)
        if self.tables_dir is None:
            self.tables_dir = self.path / "summaries"

    @cached_property
    def runs(self) -> pd.DataFrame:
        frames = []
        for src in self.sources:
            direct = src / "runs.csv"
            files = [direct] if direct.exists() else sorted(src.rglob("runs.csv")) if src.is_dir() else []
            frames.extend(pd.read_csv(f) for f in files)
        if not frames and self.run_tables is not None:
            for name in self.run_tables.present():
                df = getattr(self.run_tables, name).copy()
                df["reference_table"] = name
                frames.append(df)
        if not frames:
            return pd.DataFrame()
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    @cached_property
    def summary(self) -> dict[str, Any]:
        p = self.path / "summary.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def table(self, stem: str) -> pd.DataFrame | None:
        if self.summaries is not None and stem in getattr(self.summaries, "tables", {}):
            return self.summaries.tables[stem]
        p = Path(self.tables_dir) / f"{stem}.csv"
        return pd.read_csv(p) if p.exists() else None

    @property
    def headline(self) -> dict[str, Any]:
        return dict(getattr(self.summaries, "headline", {}) or {})

    def source_summaries(self) -> list[dict[str, Any]]:
        """``summary.json`` of every source results directory (those that have one)."""
        out = []
        for src in self.sources:
            direct = src / "summary.json"
            files = [direct] if direct.exists() else sorted(src.rglob("summary.json")) if src.is_dir() else []
            for f in files:
                try:
                    out.append(json.loads(f.read_text()))
                except (OSError, ValueError):
                    continue
        return out
