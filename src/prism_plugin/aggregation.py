"""How the runs of a cell (a task x fraction) combine into the cell's values (``summary.json``)."""

from __future__ import annotations

from typing import Any, Iterable, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.registrars import AGGREGATIONS  # the names a metric may declare (register_metrics)


def _first(values):
    """The first value present: per group (``groupby(...).first()`` skips NaN) or of one series."""
    import pandas as pd
    if isinstance(values, pd.Series):
        present = values.dropna()
        return present.iloc[0] if len(present) else float("nan")
    return values.first()


#: aggregation name (:data:`prism_plugin.registrars.AGGREGATIONS`) -> how the runs of a cell combine,
#: for a :class:`pandas.Series` of one cell's values or a ``SeriesGroupBy`` of many cells (NaN skipped;
#: NaN when no run has a value)
AGGREGATORS = {
    "mean": lambda v: v.mean(),
    "median": lambda v: v.median(),
    "max": lambda v: v.max(),
    "min": lambda v: v.min(),
    "sum": lambda v: v.sum(min_count=1),
    "first": _first,
}


def _metric_spec(metric: Any) -> tuple[str, str]:
    """(column, aggregation) of a column name (the mean) or a :class:`~prism_plugin.registrars.MetricInfo`
    (its aggregation, checked by the MetricRegistrar)."""
    if isinstance(metric, str):
        return metric, "mean"
    column = getattr(metric, "column", None)
    if not isinstance(column, str):
        raise TypeError(f"metric must be a column name or a MetricInfo, got {type(metric).__name__}")
    return column, getattr(metric, "aggregation", "mean") or "mean"


def aggregate(values: pd.Series, how: str = "mean") -> float:
    """One cell's value from its runs' values (NaN skipped; NaN when no run has a value)."""
    import pandas as pd
    if how not in AGGREGATORS:
        raise ValueError(f"unknown aggregation {how!r} (one of {', '.join(AGGREGATIONS)})")
    return float(AGGREGATORS[how](pd.to_numeric(values, errors="coerce")))


def cell_stats(df: pd.DataFrame, by: list[str], metrics: Iterable[Any]) -> list[dict]:
    """Per cell (``by`` + fraction): each metric aggregated over the cell's runs (seeds).

    ``metrics`` holds column names (aggregated by the mean) or metric descriptions
    (:class:`~prism_plugin.registrars.MetricInfo`, aggregated as they declare). ``mean`` gives ``<column>_mean``
    and ``<column>_std`` (seed standard deviation, ddof = 1; NaN for one run); any other aggregation gives
    ``<column>_<aggregation>`` (``my_score_median``). Columns absent from ``df`` are skipped.
    """
    import pandas as pd
    specs = [_metric_spec(m) for m in metrics]
    present = [(m, how) for m, how in dict.fromkeys(specs) if m in df.columns]
    out = []
    for keys, g in df.groupby(by + ["fraction"], sort=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        entry = dict(zip(by + ["fraction"], keys))
        entry["n_runs"] = int(len(g))
        for m, how in present:
            vals = pd.to_numeric(g[m], errors="coerce")
            entry[f"{m}_{how}"] = aggregate(vals, how)
            if how == "mean":
                entry[f"{m}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        out.append(entry)
    return out
