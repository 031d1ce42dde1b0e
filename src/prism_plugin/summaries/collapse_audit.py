"""Collapse (degeneracy) audit, PROTOCOL §6.13.

``degeneracy_audit``: in-distribution runs grouped by (dataset, model, fraction), value = mean of the boolean
``degenerate`` (share of the cell's seeds whose probe put > 99 % of test predictions in one class), cells with
share > 0 kept, ``scope = "in-distribution"``; then transfer runs grouped by (pair, model, fraction) the same way,
``pair`` renamed ``dataset``, ``scope = "ood"``. In-distribution rows first; each part in sorted group-key order
(pandas ``groupby`` default: lexicographic dataset/pair, then model, then fraction). Columns: dataset, model,
fraction, degenerate, scope; plain RangeIndex.
"""

from __future__ import annotations

from typing import Any, Mapping, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.hookspecs import hookimpl
from prism_plugin.tables import RunTables, SummaryOutput

AUDIT_COLUMNS = ["dataset", "model", "fraction", "degenerate", "scope"]
_TRUE = {"true", "1", "yes", "t", "1.0"}
_FALSE = {"false", "0", "no", "f", "0.0"}


def _as_bool(col: pd.Series, where: str) -> pd.Series:
    """``degenerate`` as float 0/1 (NaN kept); accepts bools, 0/1 and True/False strings."""
    import pandas as pd
    if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
        return col.astype(float)
    lowered = col.astype("string").str.strip().str.lower()
    bad = lowered.notna() & ~lowered.isin(_TRUE | _FALSE)
    if bad.any():
        raise PrismError(f"{where}: column degenerate has non-boolean value(s) such as {col[bad].iloc[0]!r}")
    return lowered.map(lambda v: 1.0 if v in _TRUE else (0.0 if v in _FALSE else float("nan"))).astype(float)


def _audit_part(df: pd.DataFrame, key: str, scope: str, where: str) -> pd.DataFrame:
    missing = [c for c in (key, "model", "fraction", "degenerate") if c not in df.columns]
    if missing:
        raise PrismError(f"{where} table lacks column(s) {', '.join(missing)}")
    work = df[[key, "model", "fraction"]].copy()
    work["degenerate"] = _as_bool(df["degenerate"], where)
    share = work.groupby([key, "model", "fraction"], sort=True)["degenerate"].mean().reset_index()
    share = share.loc[share["degenerate"] > 0].rename(columns={key: "dataset"})
    share["scope"] = scope
    return share[AUDIT_COLUMNS]


def degeneracy_audit(indomain: pd.DataFrame | None, transfer: pd.DataFrame | None) -> pd.DataFrame:
    """The ``degeneracy_audit`` table of §6.13 (see module docstring).

    Either input may be ``None`` (its part is then empty). Values are shares of
    seeds, e.g. 1/3, 2/3 or 1 for three seeds.
    """
    import pandas as pd
    parts = []
    if indomain is not None:
        parts.append(_audit_part(indomain, "dataset", "in-distribution", "in-distribution"))
    if transfer is not None:
        parts.append(_audit_part(transfer, "pair", "ood", "transfer"))
    if not parts:
        return pd.DataFrame(columns=AUDIT_COLUMNS)
    return pd.concat(parts, ignore_index=True)


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """``degeneracy_audit`` from the in-distribution and label-definition transfer
    runs; headline counts of listed cells per scope."""
    if tables.indomain is None and tables.transfer is None:
        return None
    out = SummaryOutput()
    table = degeneracy_audit(tables.indomain, tables.transfer)
    out.tables["degeneracy_audit"] = table
    if tables.indomain is not None:
        out.headline["degenerate_cells_indomain"] = int((table["scope"] == "in-distribution").sum())
    else:
        out.notes.append("degeneracy_audit: no in-distribution runs; only transfer cells are audited")
    if tables.transfer is not None:
        out.headline["degenerate_cells_ood"] = int((table["scope"] == "ood").sum())
    else:
        out.notes.append("degeneracy_audit: no transfer runs; only in-distribution cells are audited")
    return out


__all__ = ["degeneracy_audit", "summarize"]
