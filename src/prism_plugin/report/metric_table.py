"""The report's metric table: every described metric (``register_metrics`` with ``report=True``)
that the runs hold, per label fraction, aggregated over seeds as its description says.

:func:`metric_cells` builds the long ``metric_cells`` table (one row per table kind, model,
setting, fraction and metric; written as ``metric_cells.csv`` beside the summary tables, and cited
by the verdict's plugin-metric lines); :func:`metric_section` renders it, one row per metric and
setting with one column per fraction. A third-party metric with a description appears here
without any change to the report.
"""

from __future__ import annotations

from typing import Any, Iterable, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.report.derived import report_kinds, setting_values, table_label
from prism_plugin.report.markdown import pipe_table
from prism_plugin.report.sections import ReportSection
from prism_plugin.report.verdict_rows import pct, setting_label
from prism_plugin.aggregation import AGGREGATORS

STEM = "metric_cells"
METRIC_CELLS_COLUMNS = ["table", "model", "setting", "fraction", "metric", "display", "direction", "aggregation",
                        "origin", "n_runs", "value", "std", "ci_low", "ci_high"]
MAX_ROWS = 80
SETTING_KEYS = ("dataset", "pair", "hospital")


def _setting_key(kind, df: pd.DataFrame) -> str | None:
    if kind is not None:
        key = kind.setting
        return key if key in df.columns or (key == "pair" and {"src", "tgt"} <= set(df.columns)) else None
    return next((k for k in SETTING_KEYS if k in df.columns), None)


def metric_cells(run_tables, described: Iterable[Any], kinds=None) -> pd.DataFrame:
    """The ``metric_cells`` table (see the module docstring) for ``described`` metrics
    (:class:`~prism_plugin.metrics.descriptions.DescribedMetric`) present in ``run_tables``.

    ``value`` is the seed aggregate of the description (``mean``: the mean, with ``std`` the seed standard
    deviation, ddof = 1, NaN for one run; ``median``/``max``/``min``/``sum``/``first``: that statistic, ``std``
    NaN); ``n_runs`` counts the runs with a value. Rows: table kinds in report order, then model / setting in order
    of first appearance, fraction ascending, metrics in registration order.
    """
    import pandas as pd
    described = list(described)
    rows: list[dict[str, Any]] = []
    if run_tables is None:
        return pd.DataFrame(columns=METRIC_CELLS_COLUMNS)
    kinds = report_kinds() if kinds is None else kinds
    present = list(run_tables.present())
    for table in [t for t in kinds if t in present] + [t for t in present if t not in kinds]:
        df = run_tables.get(table)
        if df is None or df.empty or "model" not in df.columns or "fraction" not in df.columns:
            continue
        cols = {}
        for d in described:
            c = d.info.column
            if c in df.columns:
                vals = pd.to_numeric(df[c], errors="coerce")
                if vals.notna().any():
                    cols[c] = (d, vals)
        if not cols:
            continue
        key = _setting_key(kinds.get(table), df)
        frame = pd.DataFrame({"model": df["model"].astype(str).to_numpy(),
                              "setting": setting_values(df, key).to_numpy() if key else "",
                              "fraction": pd.to_numeric(df["fraction"], errors="coerce").round(9).to_numpy()})
        for c, (_d, vals) in cols.items():
            frame[c] = vals.to_numpy()
            for end in ("ci_low", "ci_high"):  # the bootstrap plugin's per-run test-set CI, when present
                if f"{c}_{end}" in df.columns:
                    frame[f"{c}_{end}"] = pd.to_numeric(df[f"{c}_{end}"], errors="coerce").to_numpy()
        first_seen = {k: i for i, k in enumerate(dict.fromkeys(zip(frame["model"], frame["setting"])))}
        g = frame.groupby(["model", "setting", "fraction"], sort=False)
        size = g.size()
        parts = []
        for c, (d, _vals) in cols.items():
            how = d.info.aggregation
            col = g[c]
            value = AGGREGATORS[how](col)
            std = col.std(ddof=1).where(size > 1) if how == "mean" else pd.Series(np.nan, index=size.index)
            ci = {end: (g[f"{c}_{end}"].mean() if f"{c}_{end}" in frame and how == "mean"
                        else pd.Series(np.nan, index=size.index)) for end in ("ci_low", "ci_high")}
            part = pd.DataFrame({"n_runs": col.count(), "value": value, "std": std, **ci}).reset_index()
            part = part.loc[part["n_runs"] > 0]
            part.insert(0, "table", table)
            part.insert(4, "metric", c)
            part.insert(5, "display", d.info.label)
            part.insert(6, "direction", d.info.direction or "")
            part.insert(7, "aggregation", how)
            part.insert(8, "origin", d.origin)
            part["_m"] = len(parts)
            parts.append(part)
        block = pd.concat(parts, ignore_index=True)
        block["_s"] = [first_seen[k] for k in zip(block["model"], block["setting"])]
        block = block.sort_values(["_s", "fraction", "_m"], kind="stable").drop(columns=["_s", "_m"])
        rows.extend(block.to_dict("records"))
    return pd.DataFrame(rows, columns=METRIC_CELLS_COLUMNS)


def _cell(value: float, std: float, fmt: str, lo: float = np.nan, hi: float = np.nan) -> str:
    if value is None or not np.isfinite(value):
        return "–"
    text = format(value, fmt)
    text = f"{text} ± {format(std, fmt)}" if std is not None and np.isfinite(std) else text
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        text += f" [{format(lo, fmt)}, {format(hi, fmt)}]"
    return text


def _stat(how: str) -> str:
    return "mean ± sd" if how == "mean" else how


def metric_section(cells: pd.DataFrame | None, described: Iterable[Any], kinds=None) -> ReportSection:
    """The "Metrics by label fraction" section from a :func:`metric_cells` table."""
    sec = ReportSection("Metrics by label fraction", "", order=88, key="metrics",
                        summary="every described metric, per fraction")
    if cells is None or cells.empty:
        sec.not_shown.append("no described metric (register_metrics with report=True) is present in these runs")
        return sec
    sec.tables[STEM] = cells
    info = {d.info.column: d for d in described}
    fractions = sorted(cells["fraction"].unique())
    header = ["runs", "model", "setting", "metric", "over seeds"] + [pct(f) for f in fractions]
    groups = list(cells.groupby(["table", "model", "setting", "metric"], sort=False))
    third = sorted({m for m in cells["metric"] if not info[m].builtin})
    intro = ("Every metric column with a description (`register_metrics`) that these runs hold, aggregated over "
             "seeds as its description says (`metric_cells.csv`). ↑: higher is better, ↓: lower is better.")
    if "ci_low" in cells and cells["ci_low"].notna().any():
        intro += (" In brackets: the test-set bootstrap CI of the seed mean (the mean of the seeds' intervals, "
                  "from the bootstrap plugin's `<metric>_ci_low` / `_ci_high` columns).")
    if third:
        intro += " From plugins: " + ", ".join(f"`{m}` ({info[m].origin})" for m in third) + "."
    if len(groups) > MAX_ROWS:
        sec.body = intro + (f"\n\n{len(groups):,} rows — too many to list here; every cell is in "
                            "`metric_cells.csv`.")
        return sec
    rows = []
    for (table, model, setting, metric), g in groups:
        d = info[metric]  # every row of the table comes from a description
        by_f = {float(r.fraction): _cell(r.value, r.std, d.info.fmt, getattr(r, "ci_low", np.nan),
                                         getattr(r, "ci_high", np.nan)) for r in g.itertuples(index=False)}
        rows.append([table_label(table, kinds=kinds), model, setting_label(setting), d.info.titled,
                     _stat(str(g["aggregation"].iloc[0]))] + [by_f.get(float(f), "–") for f in fractions])
    sec.body = intro + "\n\n" + pipe_table(header, rows)
    return sec


__all__ = ["METRIC_CELLS_COLUMNS", "STEM", "metric_cells", "metric_section"]
