"""What the built-in report sections share: :class:`SectionContext` (the summary tables of a
:class:`~prism_plugin.report.sections.ReportView`, the table kinds in report order, the exact
test-set CIs) and small helpers."""

from __future__ import annotations

import json
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.report import plots
from prism_plugin.report.derived import label_definition_bands_apply, report_kinds, transfer_tables
from prism_plugin.report.metric_table import metric_cells
from prism_plugin.report.sections import ReportSection

MAX_TABLE_ROWS = 80


class SectionContext:
    def __init__(self, view):
        self.view = view
        self.cells = view.table("report_cells")
        self.settings = view.table("report_settings")
        # the table kinds in report order: in-distribution (variants with another T last), transfer
        self.kinds = report_kinds(view.options)
        ind = [n for n, k in self.kinds.items() if not k.transfer]
        self.in_dist = tuple(n for n in ind if not self.kinds[n].variant_of)
        self.variants = tuple(n for n in ind if self.kinds[n].variant_of)
        self.transfers = transfer_tables(self.kinds)
        #: the in-distribution tables models are ranked on (``leaderboard="rank"``)
        self.ranked = tuple(n for n in self.in_dist if self.kinds[n].leaderboard == "rank")
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
            self.metric_cells = metric_cells(view.run_tables, self.described, self.kinds)
        except Exception as exc:  # a malformed plugin column must not cost the whole report
            self.metric_cells = None
            self.metric_error = f"the metric table could not be computed: {type(exc).__name__}: {exc}"

    def _exact_ci(self) -> None:
        """The CI level of the results and, where the bootstrap replicates are at hand, the exact
        seed-mean CIs in the cells (and the settings the verdict cites, recomputed from them)."""
        from prism_plugin.report import uncertainty
        from prism_plugin.report.derived import band_metrics, report_settings

        try:
            self.ci_level = uncertainty.bootstrap_level(self.view.source_summaries)
        except Exception:
            self.ci_level = None
        if self.cells is None or self.cells.empty or "ci_source" not in self.cells:
            return
        from prism_plugin.report.build import source_dirs

        models = set(self.cells["model"].astype(str))
        cells, level, k = uncertainty.exact_cell_ci(source_dirs(self.view.sources), self.cells,
                                                    label=lambda row: cell_model(row, models),
                                                    other_t=[n for n, k in self.kinds.items() if k.temperature_from])
        if not k:
            return
        self.cells, self.cells_exact = cells, k
        self.ci_level = self.ci_level or level
        self.settings = report_settings(cells, self.fewshot, band_metrics(self.view.options), self.kinds)

    def cells_of(self, *tables: str) -> pd.DataFrame | None:
        if self.cells is None or self.cells.empty:
            return None
        sub = self.cells.loc[self.cells["table"].isin(tables)]
        return sub if len(sub) else None

    def figure_cells(self, section: ReportSection, tables, column: str | None = None) -> list:
        """``(table, cells)`` of each of ``tables`` with cells (and a value in ``column``); empty when
        none has, or when figures cannot be drawn (then ``section`` says so)."""
        present = [(t, c) for t in tables if (c := self.cells_of(t)) is not None
                   and (column is None or c[column].notna().any())]
        return present if present and figure_guard(self, section) else []

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


def figure_guard(ctx: SectionContext, section: ReportSection) -> bool:
    if not ctx.mpl:
        section.not_shown.append(plots.NO_MPL)
        return False
    return True


def banded(table: str, cells: pd.DataFrame, kinds) -> bool:
    """Whether the PRISM label-definition zone applies to (all of) these transfer cells."""
    shifts = set(cells["shift"].astype(str)) if "shift" in cells.columns and len(cells) else {""}
    return all(label_definition_bands_apply(table, k, kinds) for k in shifts)


def ci_words(ctx: SectionContext) -> str:
    level = f"{round(100 * ctx.ci_level, 6):g} % " if ctx.ci_level else ""
    return f"{level}test-set bootstrap CI of the seed mean"


def sweep_run_count(ctx: SectionContext) -> int:
    import pandas as pd
    from prism_plugin.results import runs_files

    n = 0
    try:
        for f in runs_files(ctx.view.sources):
            head = pd.read_csv(f, usecols=lambda c: c == "sweep_key")
            n += int(head["sweep_key"].notna().sum()) if "sweep_key" in head else 0
    except Exception:
        return 0
    return n


def ci_text(lo: float, hi: float, digits: int = 3) -> str:
    """`` [lo, hi]`` of a test-set CI, empty when not measured."""
    import pandas as pd
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return ""
    return f" [{lo:.{digits}f}, {hi:.{digits}f}]"
