"""Collect report sections from every plugin and write report.md (figures beside it)."""

from __future__ import annotations

from pathlib import Path

from prism_plugin.report.sections import ReportSection, ReportView
from prism_plugin.results import atomic_write_bytes, atomic_write_text


def collect_sections(path: Path, host) -> list[ReportSection]:
    view = ReportView(Path(path))
    sections: list[ReportSection] = []
    for result in host.hook.report_sections(view=view):
        sections.extend(result or [])
    return sorted(sections, key=lambda s: (s.order, s.title))


def write_report(path: Path, host) -> Path:
    path = Path(path)
    sections = collect_sections(path, host)
    view = ReportView(path)
    title = f"PRISM report: {view.summary.get('model', '')} on {view.summary.get('task', '')}".strip()
    parts = [f"# {title}\n"]
    for s in sections:
        parts.append(f"## {s.title}\n\n{s.body}\n")
        for name, data in s.figures.items():
            atomic_write_bytes(path / "figures" / name, data)
            parts.append(f"![{name}](figures/{name})\n")
    target = path / "report.md"
    atomic_write_text(target, "\n".join(parts))
    return target
