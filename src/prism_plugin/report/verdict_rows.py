"""A verdict line and its evidence: the row of the ``verdict`` table (sentence, level, the table it
cites, a JSON ``where`` filter, ``column``, ``agg``, ``value``), the words the lines share, and
:func:`check_verdict`, which recomputes every cited number from the table it names."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.registrars import TableKind
from prism_plugin.report.derived import UNDECLARED_LABEL
from prism_plugin.tables import SHIFT_ROUTED_FROM, UNDECLARED

SOURCE = "report_settings.csv"


VERDICT_COLUMNS = ["model", "topic", "level", "table", "setting", "text", "source", "where", "column", "agg", "value"]


#: What each declared shift kind means, said where the PRISM label-definition bands do not apply.
SHIFT_WORDS = {"covariate": "covariate shift (same labels; site, scanner or stain differ)",
               "prior": "prior shift (class proportions differ)"}


#: Settings listed one by one up to this many per (model, table); beyond, they are summarised.
MAX_LISTED = 8


def pct(f: float) -> str:
    """0.01 -> ``1 %``; 0.005 -> ``0.5 %``."""
    return f"{round(float(f) * 100.0, 6):g} %"


def setting_label(setting: Any) -> str:
    """A setting as the report shows it: ``src->tgt`` -> ``src → tgt``."""
    return str(setting).replace("->", " → ")


def num(x: float, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def frac_list(text: str) -> str:
    vals = [v for v in str(text or "").split(";") if v]
    return ", ".join(pct(float(v)) for v in vals)


def setting_name(setting: str, spec: TableKind | None = None) -> str:
    name = setting_label(setting)
    if spec is not None and spec.temperature_from:
        return f"{name} (T from {spec.temperature_from})"
    if spec is not None and spec.setting_prefix and "->" not in str(setting):
        return f"{spec.setting_prefix}{name}"
    return name


def kind_label(spec: TableKind, s: pd.DataFrame) -> str:
    """The kind's label; :data:`UNDECLARED_LABEL` when every row of ``transfer`` is undeclared."""
    shifts = set(s["shift"].astype(str)) if "shift" in s.columns and len(s) else set()
    return UNDECLARED_LABEL if spec.name == SHIFT_ROUTED_FROM and shifts == {UNDECLARED} else spec.label


def verdict_row(model, topic, level, table, setting, text, where=None, column="", agg="", value=np.nan,
         source: str = SOURCE) -> dict[str, Any]:
    return {"model": model, "topic": topic, "level": level, "table": table, "setting": setting, "text": text,
            "source": source if where is not None else "", "where": json.dumps(where) if where is not None else "",
            "column": column, "agg": agg, "value": value}


def where_of(table: str, model: str, settings) -> dict[str, Any]:
    settings = list(settings)
    return {"table": table, "model": model, "setting": settings[0] if len(settings) == 1 else settings}


def get_value(r, name: str, default: Any = np.nan) -> Any:
    """A report_settings field that older tables (or hand-made ones) may lack."""
    value = getattr(r, name, default)
    return default if value is None else value


def count_of(value: Any) -> int:
    """A count that may be NaN (not recorded): 0 then."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0
    return 0 if math.isnan(v) else int(v)


def ci_range(lo: Any, hi: Any, digits: int = 3) -> str:
    """``"[lo, hi]"`` of a test-set CI; empty when not measured."""
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        return ""
    return "" if math.isnan(lo) or math.isnan(hi) else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def select_rows(table: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    import pandas as pd
    mask = pd.Series(True, index=table.index)
    for col, val in where.items():
        values = val if isinstance(val, list) else [val]
        mask &= table[col].astype(str).isin([str(v) for v in values])
    return table.loc[mask]


def evidence_value(table: pd.DataFrame, where: Mapping[str, Any], column: str, agg: str) -> float:
    """Recompute a verdict value from the table it cites."""
    import pandas as pd
    rows = select_rows(table, where)
    col = pd.to_numeric(rows[column], errors="coerce")
    if agg == "value":
        if len(rows) != 1:
            raise ValueError(f"verdict cites {where} in {column}: {len(rows)} rows match, expected 1")
        return float(col.iloc[0])
    if agg == "sum":
        return float(col.sum())
    if agg == "mean":
        return float(col.mean())
    raise ValueError(f"unknown aggregation {agg!r}")


def check_verdict(verdict: pd.DataFrame, tables: Mapping[str, pd.DataFrame], atol: float = 1e-12) -> list[str]:
    """Problems found when recomputing each verdict value from its cited table (empty = all match)."""
    problems = []
    for r in verdict.itertuples(index=False):
        if not r.source:
            continue
        stem = r.source[:-4] if r.source.endswith(".csv") else r.source
        if stem not in tables:
            problems.append(f"{r.text[:60]}: cites {r.source}, which is absent")
            continue
        got = evidence_value(tables[stem], json.loads(r.where), r.column, r.agg)
        want = float(r.value)
        if not ((math.isnan(got) and math.isnan(want)) or abs(got - want) <= atol):
            problems.append(f"{r.text[:60]}: {r.column} = {got}, verdict says {want}")
    return problems
