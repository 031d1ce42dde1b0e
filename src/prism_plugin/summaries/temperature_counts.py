"""Temperature-scaling counts (PROTOCOL §6.12).

Conventions, exactly as the protocol:

* A **cell** is (model, dataset-or-pair, fraction); its value is the seed mean
  (:func:`~prism_plugin.summaries.conventions.seed_means`: ``math.fsum`` of the runs / count). A **run** is one
  row. Fractions are matched after rounding to 9 decimals.
* **Scaling fails / worsens** a cell: seed-mean ``ece_scaled_fixed`` > seed-mean ``ece_fixed`` (strict). Nearby
  definitions are counted too, as separate rows: adaptive bins (seed-mean ``ece_scaled_adaptive`` > seed-mean
  ``ece_adaptive``), majority of seeds (more than half of the cell's runs have ``ece_scaled_fixed > ece_fixed``),
  per run.
* **T < 1** is read only on multiclass cells (``n_classes > 2``), with the seed-mean ``temperature``; binary cells
  (``n_classes == 2``) use the [−d, d] logit convention where T = 2 is the identity, so they are counted against
  both 1 (for comparison) and 2 ("sharpened" = T < 2).
* **Transfer** (``tables.transfer``, label-definition pairs): cells and runs where the source-fitted T worsens
  target ECE; (model, pair) combinations at the smallest and largest fraction and on the all-fraction mean (mean of
  the combination's cell means); per pair, models worsened at the largest fraction.
* **Camelyon17** (``tables.camelyon17_transfer``): share of runs (and cells) where ``ece_scaled_fixed >
  ece_fixed``.
* Counts that cannot be computed (a column or table missing) become headline strings ``"not defined: <reason>"``
  and a note.

Public function: :func:`temperature_scaling_counts` (returns the table and the headline dict). Table
``temperature_scaling_counts`` columns: scope, subset, unit, rule, count, total, percent (= 100·count/total,
unrounded).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.summaries.conventions import (
    dataset_order, first_appearance, fraction_pct, normalise_fractions, not_defined, seed_means,
)
from prism_plugin.tables import RunTables, SummaryOutput

COLUMNS = ["scope", "subset", "unit", "rule", "count", "total", "percent"]
WORSE_FIXED = "seed-mean ece_scaled_fixed > seed-mean ece_fixed"
BINARY_IDENTITY_T = 2.0


class _Counter:
    """Collects table rows, headline values and notes."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.headline: dict[str, Any] = {}
        self.notes: list[str] = []

    def add(self, scope: str, subset: str, unit: str, rule: str, count: int, total: int,
            key: str | None = None) -> None:
        pct = 100.0 * count / total if total else float("nan")
        self.rows.append({"scope": scope, "subset": subset, "unit": unit, "rule": rule,
                          "count": int(count), "total": int(total), "percent": pct})
        if key:
            self.headline[key] = int(count)
            self.headline[f"{key}_total"] = int(total)
            self.headline[f"{key}_pct"] = pct

    def undefined(self, key: str, reason: str) -> None:
        text = not_defined(reason)
        self.headline[key] = text
        self.notes.append(f"temperature_scaling_counts {key}: {text}")

    def table(self) -> pd.DataFrame:
        import pandas as pd
        return pd.DataFrame(self.rows, columns=COLUMNS)


def _missing(df: pd.DataFrame, columns: Iterable[str]) -> list[str]:
    return [c for c in columns if c not in df.columns]


def _prepared(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    out["fraction"] = normalise_fractions(out["fraction"])
    if "pair" not in out.columns and {"src", "tgt"} <= set(out.columns):
        out["pair"] = out["src"].astype(str) + "->" + out["tgt"].astype(str)
    return out


def _worse_cells(df: pd.DataFrame, key: str, raw: str, scaled: str) -> pd.DataFrame:
    """Cell means of ``raw`` / ``scaled`` per (model, key, fraction) and ``worse``."""
    cells = seed_means(df, ["model", key, "fraction"], [raw, scaled]).reset_index()
    cells["worse"] = cells[scaled] > cells[raw]
    return cells.loc[cells[raw].notna() & cells[scaled].notna()]


def _indomain_counts(c: _Counter, ind: pd.DataFrame) -> None:
    scope = "in-distribution"
    miss = _missing(ind, ["model", "dataset", "fraction", "ece_fixed", "ece_scaled_fixed"])
    if miss:
        c.undefined("ts_indomain_cells_worse", f"in-distribution table lacks {', '.join(miss)}")
    else:
        cells = _worse_cells(ind, "dataset", "ece_fixed", "ece_scaled_fixed")
        c.add(scope, "all datasets", "cell", WORSE_FIXED, int(cells["worse"].sum()), len(cells),
              key="ts_indomain_cells_worse")
        for d in dataset_order(cells["dataset"]):
            sub = cells.loc[cells["dataset"] == d]
            c.add(scope, str(d), "cell", WORSE_FIXED, int(sub["worse"].sum()), len(sub),
                  key=f"ts_indomain_cells_worse_{d}")
        if not _missing(ind, ["ece_adaptive", "ece_scaled_adaptive"]):
            ad = _worse_cells(ind, "dataset", "ece_adaptive", "ece_scaled_adaptive")
            c.add(scope, "all datasets", "cell", "seed-mean ece_scaled_adaptive > seed-mean ece_adaptive",
                  int(ad["worse"].sum()), len(ad), key="ts_indomain_cells_worse_adaptive")
        runs = ind.loc[ind["ece_fixed"].notna() & ind["ece_scaled_fixed"].notna()]
        worse_run = (runs["ece_scaled_fixed"] > runs["ece_fixed"]).astype(float)
        share = worse_run.groupby([runs["model"], runs["dataset"], runs["fraction"]], sort=False).mean()
        c.add(scope, "all datasets", "cell", "more than half of the runs have ece_scaled_fixed > ece_fixed",
              int((share > 0.5).sum()), len(share), key="ts_indomain_cells_worse_majority")
        c.add(scope, "all datasets", "run", "ece_scaled_fixed > ece_fixed", int(worse_run.sum()), len(runs),
              key="ts_indomain_runs_worse")

    miss = _missing(ind, ["model", "dataset", "fraction", "temperature", "n_classes"])
    if miss:
        c.undefined("ts_multiclass_cells_T_lt_1", f"in-distribution table lacks {', '.join(miss)}")
        return
    t = seed_means(ind, ["model", "dataset", "fraction"], ["temperature", "n_classes"]).reset_index()
    t = t.loc[t["temperature"].notna()]
    multi = t.loc[t["n_classes"] > 2]
    binary = t.loc[t["n_classes"] == 2]
    if multi.empty:
        c.undefined("ts_multiclass_cells_T_lt_1", "no multiclass (n_classes > 2) cell")
    else:
        lt1 = multi["temperature"] < 1.0
        c.add(scope, "multiclass (n_classes > 2)", "cell", "seed-mean temperature < 1", int(lt1.sum()), len(multi),
              key="ts_multiclass_cells_T_lt_1")
        exc = multi.loc[~lt1]
        c.headline["ts_multiclass_cells_T_ge_1"] = "; ".join(
            f"{r.dataset} {fraction_pct(r.fraction)} {r.model}" for r in exc.itertuples()) or "none"
        runs = ind.loc[(ind["n_classes"] > 2) & ind["temperature"].notna()]
        c.add(scope, "multiclass (n_classes > 2)", "run", "temperature < 1", int((runs["temperature"] < 1.0).sum()),
              len(runs), key="ts_multiclass_runs_T_lt_1")
    if binary.empty:
        c.undefined("ts_binary_cells_T_lt_2", "no binary (n_classes = 2) cell")
    else:
        c.add(scope, "binary (n_classes = 2)", "cell", "seed-mean temperature < 1 (not the binary identity)",
              int((binary["temperature"] < 1.0).sum()), len(binary), key="ts_binary_cells_T_lt_1")
        c.add(scope, "binary (n_classes = 2)", "cell", "seed-mean temperature < 2 (sharpened; T = 2 is the identity)",
              int((binary["temperature"] < BINARY_IDENTITY_T).sum()), len(binary), key="ts_binary_cells_T_lt_2")


def _transfer_counts(c: _Counter, tr: pd.DataFrame) -> None:
    scope = "label-definition transfer"
    miss = _missing(tr, ["model", "pair", "fraction", "ece_fixed", "ece_scaled_fixed"])
    if miss:
        c.undefined("ts_transfer_cells_worse", f"transfer table lacks {', '.join(miss)}")
        return
    cells = _worse_cells(tr, "pair", "ece_fixed", "ece_scaled_fixed")
    c.add(scope, "all pairs", "cell", WORSE_FIXED, int(cells["worse"].sum()), len(cells), key="ts_transfer_cells_worse")
    runs = tr.loc[tr["ece_fixed"].notna() & tr["ece_scaled_fixed"].notna()]
    c.add(scope, "all pairs", "run", "ece_scaled_fixed > ece_fixed",
          int((runs["ece_scaled_fixed"] > runs["ece_fixed"]).sum()), len(runs), key="ts_transfer_runs_worse")
    fractions = sorted(cells["fraction"].unique())
    ends = [fractions[0], fractions[-1]] if len(fractions) > 1 else fractions
    for f in ends:
        at = cells.loc[cells["fraction"] == f]
        pct = fraction_pct(f)
        c.add(scope, f"all pairs at fraction {f:g}", "(model, pair)", WORSE_FIXED, int(at["worse"].sum()), len(at),
              key=f"ts_transfer_combos_worse_{pct}")
    combo = cells.groupby(["model", "pair"], sort=False)[["ece_fixed", "ece_scaled_fixed"]].agg(
        lambda s: float(np.mean(s.to_numpy())))
    c.add(scope, "all pairs, mean over fractions", "(model, pair)",
          "mean over fractions of seed-mean ece_scaled_fixed > of seed-mean ece_fixed",
          int((combo["ece_scaled_fixed"] > combo["ece_fixed"]).sum()), len(combo),
          key="ts_transfer_combos_worse_allfractions")
    top = fractions[-1]
    at = cells.loc[cells["fraction"] == top]
    for p in first_appearance(tr["pair"]):
        sub = at.loc[at["pair"] == p]
        if sub.empty:
            continue
        c.add(scope, f"{p} at fraction {top:g}", "model", WORSE_FIXED, int(sub["worse"].sum()), len(sub),
              key=f"ts_transfer_models_worse_{p}_{fraction_pct(top)}")


def _camelyon_counts(c: _Counter, cam: pd.DataFrame) -> None:
    scope = "covariate transfer (Camelyon17)"
    miss = _missing(cam, ["model", "pair", "fraction", "ece_fixed", "ece_scaled_fixed"])
    if miss:
        c.undefined("ts_camelyon17_runs_worse", f"Camelyon17 transfer table lacks {', '.join(miss)}")
        return
    runs = cam.loc[cam["ece_fixed"].notna() & cam["ece_scaled_fixed"].notna()]
    c.add(scope, "all hospital pairs", "run", "ece_scaled_fixed > ece_fixed",
          int((runs["ece_scaled_fixed"] > runs["ece_fixed"]).sum()), len(runs), key="ts_camelyon17_runs_worse")
    cells = _worse_cells(cam, "pair", "ece_fixed", "ece_scaled_fixed")
    c.add(scope, "all hospital pairs", "cell", WORSE_FIXED, int(cells["worse"].sum()), len(cells),
          key="ts_camelyon17_cells_worse")


def temperature_scaling_counts(tables: RunTables) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
    """All §6.12 counts from whichever of ``indomain``, ``transfer`` and
    ``camelyon17_transfer`` are present: (table, headline, notes).

    Headline keys (each count ``k`` also has ``k_total`` and ``k_pct``): ``ts_indomain_cells_worse`` (49 of 288)
    and ``ts_indomain_cells_worse_<dataset>``; ``ts_indomain_cells_worse_adaptive`` / ``_majority``,
    ``ts_indomain_runs_worse``; ``ts_multiclass_cells_T_lt_1`` (189 of 192), ``ts_multiclass_cells_T_ge_1`` (the
    exceptions, "dataset pct model; …"), ``ts_multiclass_runs_T_lt_1``; ``ts_binary_cells_T_lt_1`` / ``_T_lt_2``;
    ``ts_transfer_cells_worse`` (117 of 192), ``ts_transfer_runs_worse``, ``ts_transfer_combos_worse_<pct>`` at the
    smallest and largest fraction, ``ts_transfer_combos_worse_allfractions``,
    ``ts_transfer_models_worse_<pair>_<pct>`` at the largest fraction; ``ts_camelyon17_runs_worse``,
    ``ts_camelyon17_cells_worse``.
    """
    c = _Counter()
    if tables.indomain is not None:
        _indomain_counts(c, _prepared(tables.indomain))
    if tables.transfer is not None:
        _transfer_counts(c, _prepared(tables.transfer))
    if tables.camelyon17_transfer is not None:
        _camelyon_counts(c, _prepared(tables.camelyon17_transfer))
    return c.table(), c.headline, c.notes


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """§6.12: table ``temperature_scaling_counts`` and its headline counts;
    ``None`` when none of the in-distribution / transfer tables exists."""
    if tables.indomain is None and tables.transfer is None and tables.camelyon17_transfer is None:
        return None
    table, headline, notes = temperature_scaling_counts(tables)
    return SummaryOutput(tables={"temperature_scaling_counts": table}, headline=headline, notes=notes)
