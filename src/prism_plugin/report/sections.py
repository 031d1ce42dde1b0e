"""Report sections and the read-only view of a results directory they are built from."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd


@dataclass
class ReportSection:
    """A titled block of Markdown, optionally with PNG figures (name -> bytes)."""

    title: str
    body: str
    order: int = 100
    figures: dict[str, bytes] = field(default_factory=dict)


@dataclass
class ReportView:
    """What report plugins read: the per-run table, summary.json and summary tables."""

    path: Path

    @cached_property
    def runs(self) -> pd.DataFrame:
        return pd.read_csv(self.path / "runs.csv")

    @cached_property
    def summary(self) -> dict[str, Any]:
        p = self.path / "summary.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def table(self, stem: str) -> pd.DataFrame | None:
        p = self.path / "summaries" / f"{stem}.csv"
        return pd.read_csv(p) if p.exists() else None
