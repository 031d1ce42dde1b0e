"""Label budget tables (PROTOCOL §6.14).

* ``label_budget_accounting`` (from ``indomain_propval``): one row per dataset (PCam, BRACS, CRC, MHIST,
  LungHist700, SPIDER-Breast, then other datasets in order of first appearance) and fraction (ascending)::

      n_train            = int(mean n_train over the cell's runs)      (truncation)
      val_original       = int(mean n_val of the dataset at fraction 1.0)
      val_proportional   = int(mean n_val at the fraction)
      total_original     = n_train + val_original
      total_proportional = n_train + val_proportional
      val_share_original = val_original / total_original

  A dataset without runs at fraction 1.0 has no known full validation size; it
  is left out and a note says so.
* ``camelyon17_label_budget`` (closed form, the same for every hospital)::

      n_train = 2·max(1, floor(14000·f/2)), val_full = 3000,
      val_prop = 2·max(1, floor(3000·f/2)), total_full = n_train + 3000,
      total_prop = n_train + val_prop, val_share_full = 3000 / (n_train + 3000)

  for the hospitals and fractions given, or, in the hook, for the hospitals
  (in-distribution ``hospital`` and transfer ``src``) and fractions present in
  the Camelyon17 tables.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.hookspecs import hookimpl
from prism_plugin.summaries.conventions import DATASET_ORDER, fraction_mask, fractions_present, order_like
from prism_plugin.tables import RunTables, SummaryOutput

LABEL_BUDGET_COLUMNS = [
    "dataset", "fraction", "n_train", "val_original", "val_proportional",
    "total_original", "total_proportional", "val_share_original",
]
CAMELYON17_BUDGET_COLUMNS = [
    "hospital", "fraction", "n_train", "val_full", "val_prop", "total_full", "total_prop", "val_share_full",
]
#: Camelyon17 re-split sizes per hospital (PROTOCOL §1.4): 14,000 train, 3,000 val, 50 % tumour.
CAMELYON17_TRAIN = 14000
CAMELYON17_VAL = 3000
#: The five Camelyon17 hospitals.
CAMELYON17_HOSPITALS = (0, 1, 2, 3, 4)
#: The PRISM label fractions.
FRACTIONS = (0.01, 0.05, 0.10, 0.25, 0.50, 1.00)


def _missing_full_val(propval: pd.DataFrame) -> list[Any]:
    import pandas as pd
    full = propval.loc[fraction_mask(propval, 1.0), "dataset"]
    return [d for d in pd.unique(propval["dataset"]) if d not in set(full)]


def label_budget_accounting(indomain_propval: pd.DataFrame) -> pd.DataFrame:
    """``label_budget_accounting`` of §6.14 from the proportional-validation runs.

    See the module docstring for the columns. Integer columns are int64; ``val_share_original`` is float. Datasets
    without runs at fraction 1.0 are left out (their full validation size is unknown).
    """
    import pandas as pd
    missing = [c for c in ("dataset", "fraction", "n_train", "n_val") if c not in indomain_propval.columns]
    if missing:
        raise PrismError(f"indomain_propval table lacks column(s) {', '.join(missing)}")
    df = indomain_propval
    skip = set(_missing_full_val(df))
    rows = []
    for dataset in order_like(df["dataset"], DATASET_ORDER):
        if dataset in skip:
            continue
        d = df.loc[df["dataset"] == dataset]
        val_original = int(d.loc[fraction_mask(d, 1.0), "n_val"].mean())
        for f in fractions_present(d):
            cell = d.loc[fraction_mask(d, f)]
            n_train = int(cell["n_train"].mean())
            val_prop = int(cell["n_val"].mean())
            total_orig = n_train + val_original
            rows.append({
                "dataset": dataset,
                "fraction": float(cell["fraction"].iloc[0]),
                "n_train": n_train,
                "val_original": val_original,
                "val_proportional": val_prop,
                "total_original": total_orig,
                "total_proportional": n_train + val_prop,
                "val_share_original": val_original / total_orig,
            })
    out = pd.DataFrame(rows, columns=LABEL_BUDGET_COLUMNS)
    for c in LABEL_BUDGET_COLUMNS[2:-1]:
        out[c] = out[c].astype("int64")
    out["fraction"] = out["fraction"].astype(float)
    out["val_share_original"] = out["val_share_original"].astype(float)
    return out


def camelyon17_budget_row(fraction: float) -> dict[str, float | int]:
    """Closed-form Camelyon17 budget at one fraction (no hospital column)."""
    f = float(fraction)
    n_train = 2 * max(1, math.floor(CAMELYON17_TRAIN * f / 2))
    val_prop = 2 * max(1, math.floor(CAMELYON17_VAL * f / 2))
    return {
        "fraction": f,
        "n_train": n_train,
        "val_full": CAMELYON17_VAL,
        "val_prop": val_prop,
        "total_full": n_train + CAMELYON17_VAL,
        "total_prop": n_train + val_prop,
        "val_share_full": CAMELYON17_VAL / (n_train + CAMELYON17_VAL),
    }


def camelyon17_label_budget(
    hospitals: Iterable[int] = CAMELYON17_HOSPITALS, fractions: Iterable[float] = FRACTIONS
) -> pd.DataFrame:
    """``camelyon17_label_budget`` of §6.14 (closed form) for the given hospitals (rows in the given order) ×
    fractions (ascending)."""
    import pandas as pd
    fracs = sorted(float(f) for f in fractions)
    bad = [f for f in fracs if not (0.0 < f <= 1.0)]
    if bad:
        raise PrismError(f"camelyon17_label_budget: fraction(s) {bad} outside (0, 1]")
    rows = []
    for h in hospitals:
        for f in fracs:
            rows.append({"hospital": h, **camelyon17_budget_row(f)})
    out = pd.DataFrame(rows, columns=CAMELYON17_BUDGET_COLUMNS)
    for c in ("n_train", "val_full", "val_prop", "total_full", "total_prop"):
        out[c] = out[c].astype("int64")
    return out


def camelyon17_hospitals(tables: RunTables) -> list[Any]:
    """Hospitals whose training labels the Camelyon17 tables used: in-distribution ``hospital`` and transfer
    ``src``, sorted."""
    found: set[Any] = set()
    if tables.camelyon17_indomain is not None and "hospital" in tables.camelyon17_indomain.columns:
        found.update(tables.camelyon17_indomain["hospital"].dropna().tolist())
    if tables.camelyon17_transfer is not None and "src" in tables.camelyon17_transfer.columns:
        found.update(tables.camelyon17_transfer["src"].dropna().tolist())
    return sorted(found, key=lambda h: (str(type(h)), h))


def _camelyon_fractions(tables: RunTables) -> list[float]:
    import pandas as pd
    fracs: list[float] = []
    for df in (tables.camelyon17_indomain, tables.camelyon17_transfer):
        if df is not None:
            fracs.extend(fractions_present(df))
    return fractions_present(pd.DataFrame({"fraction": fracs}))


def _closed_form_mismatch(tables: RunTables) -> list[str]:
    notes = []
    for name in ("camelyon17_indomain", "camelyon17_transfer"):
        df = getattr(tables, name)
        if df is None or "n_train" not in df.columns:
            continue
        expected = np.array([camelyon17_budget_row(f)["n_train"] for f in df["fraction"].astype(float)])
        bad = df["n_train"].to_numpy() != expected
        if bad.any():
            notes.append(
                f"camelyon17_label_budget: {int(bad.sum())} run(s) of {name} have n_train different from "
                "the closed form 2·max(1, floor(14000·f/2)) (PROTOCOL §6.14 assumes the 14,000/3,000 re-split)"
            )
    return notes


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """``label_budget_accounting`` (needs ``indomain_propval``) and ``camelyon17_label_budget`` (needs a Camelyon17
    table, or the option ``camelyon17_hospitals``, e.g. ``[0, 1, 2, 3, 4]``)."""
    options = options or {}
    explicit = options.get("camelyon17_hospitals")
    has_cam = tables.camelyon17_indomain is not None or tables.camelyon17_transfer is not None
    if tables.indomain_propval is None and not has_cam and explicit is None:
        return None
    out = SummaryOutput()
    if tables.indomain_propval is not None:
        skipped = _missing_full_val(tables.indomain_propval)
        if skipped:
            out.notes.append(
                "label_budget_accounting: not defined for " + ", ".join(map(str, skipped))
                + ": no proportional-validation run at fraction 1.0, so the full validation size is unknown"
            )
        table = label_budget_accounting(tables.indomain_propval)
        if not table.empty:
            out.tables["label_budget_accounting"] = table
    else:
        out.notes.append("label_budget_accounting not computed: no proportional-validation (indomain_propval) runs")
    if explicit is not None or has_cam:
        hospitals = list(explicit) if explicit is not None else camelyon17_hospitals(tables)
        fracs = _camelyon_fractions(tables) if has_cam else list(FRACTIONS)
        out.tables["camelyon17_label_budget"] = camelyon17_label_budget(hospitals, fracs)
        out.notes.extend(_closed_form_mismatch(tables))
    return out


__all__ = [
    "camelyon17_budget_row", "camelyon17_hospitals", "camelyon17_label_budget",
    "label_budget_accounting", "summarize",
]
