"""Summary plugin behind the report: per-cell and per-setting tables the plots and the verdict read (not published
by PRISM; file names chosen not to clash).

* ``report_cells`` — one row per (table, model, setting, fraction), where *table* is a registered table kind
  (``register_tables``; each declares its setting and temperature columns) and *setting* its dataset, pair or
  hospital (``h<k>``). Seed statistics (``_mean``, ``_std`` with ddof = 1, ``_min``, ``_max``) of auroc, f1_macro,
  ece_fixed (raw) and ece_scaled_fixed (after the temperature the table records: own validation split
  in-distribution, **source** validation split for transfer, the proportional subset in ``indomain_propval``); seed
  mean / min / max of that temperature; seed means of the oracle / few-shot columns when present;
  ``collapsed_runs`` / ``collapsed_share`` (runs with the prevalence-aware ``collapsed``, or with PRISM's
  ``degenerate`` where the runs lack that column: see ``collapse_signal``), ``degenerate_runs`` (PRISM's > 0.99
  share, always); ``not_converged_runs``, ``t_bound_runs`` (``_low_runs``, ``_high_runs``: the table's temperature
  within 0.001 of a bound of the search box, option ``temperature_bounds``, default [0.1, 10]), ``nll_worse_runs``
  (test NLL after scaling above the raw NLL), ``single_class_test_runs``; ``neutral_temperature`` (2 for binary
  problems under the reference ``[-d, d]`` logits, 1 otherwise); ``scaling_helps`` = seed-mean scaled ECE <
  seed-mean raw ECE (False when scaled ≥ raw, NaN-free cells only).
* test-set uncertainty (when the runs carry the bootstrap plugin's columns): ``<m>_ci_low`` / ``<m>_ci_high`` per
  :data:`CI_METRICS` = the mean over seeds of the per-run bounds (an approximation of the CI of the seed mean; the
  report replaces it by the exact interval of the paired replicates where it finds them, ``ci_source`` says which),
  ``n_test_min_class`` (the smallest test-class count over the seeds) and ``ece_scaling_delta_ci_low`` / ``_high``
  (a CI of scaled − raw ECE, :func:`scaling_delta_ci`).
* ``report_settings`` — one row per (table, model, setting) with the numbers the verdict cites (see
  :data:`SETTINGS_COLUMNS` and :func:`report_settings`).
* ``fewshot_temperature`` — for transfer runs with few-shot target temperatures (columns
  ``temperature_fewshot_k<K>`` and ``ece_scaled_fewshot_k<K>``, written by the temperature-transfer plugin): per
  (table, model, pair, fraction, K) the seed means, the oracle ECE, ``gap`` = few-shot ECE − oracle ECE and
  ``within`` = gap ≤ tolerance (option ``fewshot_tolerance``, default 0.02).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.contracts import T_BOUNDS
from prism_plugin.quality import NLL_ATOL, NLL_RTOL, as_bool, bound_side
from prism_plugin.hookspecs import hookimpl
from prism_plugin.registrars import TableKind
from prism_plugin.tables import SHIFT_ROUTED_FROM, UNDECLARED, RunTables, SummaryOutput, table_kinds

#: Label of ``transfer`` rows whose task declares no shift kind (``shift`` = ``undeclared``).
UNDECLARED_LABEL = "transfer (shift kind not declared)"


def report_kinds(options: Mapping[str, Any] | None = None) -> dict[str, TableKind]:
    """The table kinds the report reads, by name in report order: ``options["table_kinds"]`` (the
    report passes its host's, :func:`prism_plugin.report.build.summary_options`), else the shared host's."""
    given = (options or {}).get("table_kinds")
    return {k.name: k for k in (table_kinds() if given is None else given)}


def transfer_tables(kinds: Mapping[str, TableKind]) -> tuple[str, ...]:
    """The transfer tables (target metrics, source-fitted temperature), in report order."""
    return tuple(name for name, k in kinds.items() if k.transfer)


def table_label(table: str, shift: Any = None, kinds: Mapping[str, TableKind] | None = None) -> str:
    """How the report names a table's runs: its kind's ``label``, except ``transfer`` rows whose
    task declares no shift kind (:data:`UNDECLARED_LABEL`)."""
    if table == SHIFT_ROUTED_FROM and str(shift) == UNDECLARED:
        return UNDECLARED_LABEL
    kind = (report_kinds() if kinds is None else kinds).get(table)
    return kind.label if kind is not None else table


def frame_label(table: str, frame: pd.DataFrame, kinds: Mapping[str, TableKind] | None = None) -> str:
    """:func:`table_label` for a frame of ``table``'s cells or settings: the undeclared-shift label
    only when every row of ``transfer`` is undeclared."""
    shifts = set(frame["shift"].astype(str)) if "shift" in frame.columns and len(frame) else set()
    return table_label(table, UNDECLARED if shifts == {UNDECLARED} else None, kinds)


def label_definition_bands_apply(table: str, shift: Any = None, kinds: Mapping[str, TableKind] | None = None) -> bool:
    """Whether the PRISM transfer-AUROC zone (label-definition pairs, Table 7) is the yardstick of
    these runs: kinds declaring ``bands`` (the release's label-definition table, Camelyon17's
    hospital pairs), except rows whose task declares no shift kind."""
    kind = (report_kinds() if kinds is None else kinds).get(table)
    return kind is not None and kind.bands and str(shift) != UNDECLARED


#: The band columns the verdict always reads (AUROC, macro-F1, raw and scaled ECE). The band tables
#: use :func:`band_metrics`, which reads the metric registry (``bands=True``; plugins add more).
VERDICT_BAND_COLUMNS = ("auroc", "f1_macro", "ece_fixed", "ece_scaled_fixed")
FEWSHOT_T = re.compile(r"^temperature_fewshot_k(\d+)$")
FEWSHOT_TOLERANCE = 0.02
#: The transfer-AUROC zone of the PRISM paper (Table 7): below ~0.85 more source
#: labels worsened target ECE in 86-88 % of combinations, above it in 1-8 %.
TRANSFER_ZONE = 0.85

CELL_ID = ["table", "model", "setting", "fraction"]
#: The metrics whose per-run test-set bootstrap CI (``<m>_ci_low`` / ``<m>_ci_high``, the bootstrap
#: metric plugin) the report reads.
CI_METRICS = ("auroc", "f1_macro", "brier", "nll", "nll_scaled", "ece_fixed", "ece_adaptive", "ece_scaled_fixed",
              "ece_scaled_adaptive")
#: Scaled metrics whose per-run CI is after the full-validation T, not the proportional subset's.
PROPVAL_OTHER_T = ("nll_scaled", "ece_scaled_fixed", "ece_scaled_adaptive")
#: The per-run column with the smallest class count of the test labels (bootstrap plugin, then the
#: collapse plugin's older name).
MIN_CLASS_COLUMNS = ("n_test_min_class", "min_test_class_count")
#: Fewer test samples than this in the rarest class: a conclusion on the cell rests on few samples.
FEW_TEST_SAMPLES = 10
#: report_cells / report_settings column: the setting's shift kind (``label_definition``,
#: ``covariate``, ``prior``, ``undeclared``; empty in-distribution)
SETTINGS_COLUMNS = [
    "table", "model", "setting", "n_classes", "n_fractions", "fraction_min", "fraction_max", "n_runs",
    "auroc_lo", "auroc_hi", "f1_macro_lo", "f1_macro_hi", "ece_fixed_lo", "ece_fixed_hi",
    "ece_scaled_fixed_lo", "ece_scaled_fixed_hi",
    "collapsed_cells", "collapsed_fractions", "largest_collapsed_fraction", "collapse_free_from",
    "scaling_cells", "scaling_not_helping_cells", "scaling_not_helping_fractions",
    "worst_scaling_fraction", "worst_scaling_gap",
    "neutral_temperature", "temperature_lo", "temperature_hi",
    "transfer_auroc", "target_ece_delta", "target_ece_rises",
    "fewshot_ks", "fewshot_k_needed", "fewshot_fractions_not_within",
    "degenerate_cells", "collapse_signal", "single_class_test_cells",
    "not_converged_runs", "not_converged_cells", "not_converged_fractions",
    "t_bound_cells", "t_bound_fractions", "t_bound_side", "nll_worse_cells", "nll_worse_fractions",
    "shift",
    "n_test_min_class", "few_test_cells", "auroc_hi_ci_low", "auroc_hi_ci_high",
    "ece_scaled_fixed_hi_ci_low", "ece_scaled_fixed_hi_ci_high", "transfer_auroc_ci_low", "transfer_auroc_ci_high",
    "scaling_ci_cells", "scaling_unsure_cells", "scaling_unsure_fractions", "scaling_not_helping_unsure_cells",
]
FEWSHOT_COLUMNS = [
    "table", "model", "setting", "fraction", "k", "n_runs", "temperature_fewshot", "ece_scaled_fewshot",
    "ece_scaled_oracle", "gap", "within",
]


def band_metrics(options: Mapping[str, Any] | None = None, host=None) -> tuple[str, ...]:
    """The metrics of the band tables: ``options["band_metrics"]`` when given (the report passes
    its host's), else the metric registry of ``host`` (default: the shared host), ``bands=True``.
    The columns the verdict reads (AUROC, raw and scaled ECE) are always among them."""
    given = (options or {}).get("band_metrics")
    if given is not None:
        names = [str(m) for m in given]
    else:
        from prism_plugin.metrics.descriptions import described_metrics

        names = [d.column for d in described_metrics(host, "bands")]
    missing = [m for m in VERDICT_BAND_COLUMNS if m not in names]
    return tuple(dict.fromkeys([*names, *missing]))


def setting_values(df: pd.DataFrame, key: str) -> pd.Series:
    """The setting label of each row: dataset / pair as is, hospital as ``h<k>``."""
    import pandas as pd
    if key == "hospital":
        return df[key].map(lambda h: f"h{int(h)}" if pd.notna(h) else "")
    if key == "pair" and "pair" not in df.columns:
        return df["src"].astype(str) + "->" + df["tgt"].astype(str)
    return df[key].astype(str)


def _n_classes(df: pd.DataFrame, kind: TableKind) -> pd.Series:
    import pandas as pd
    if "n_classes" in df.columns:
        return pd.to_numeric(df["n_classes"], errors="coerce")
    if kind.binary:
        return pd.Series(2, index=df.index, dtype=float)
    return pd.Series(np.nan, index=df.index, dtype=float)


def neutral_temperature(n_classes: float, convention: str = "symmetric") -> float:
    if n_classes is None or (isinstance(n_classes, float) and math.isnan(n_classes)):
        return float("nan")
    return 2.0 if int(n_classes) == 2 and convention == "symmetric" else 1.0


def fewshot_ks(df: pd.DataFrame) -> list[int]:
    """K values with both ``temperature_fewshot_k<K>`` and ``ece_scaled_fewshot_k<K>`` columns."""
    ks = []
    for c in df.columns:
        m = FEWSHOT_T.match(str(c))
        if m and f"ece_scaled_fewshot_k{m.group(1)}" in df.columns:
            ks.append(int(m.group(1)))
    return sorted(ks)


def _long(tables: RunTables, bands: tuple[str, ...] = VERDICT_BAND_COLUMNS,
          kinds: Mapping[str, TableKind] | None = None) -> pd.DataFrame:
    """All per-run rows in one frame with table / setting / temperature columns unified."""
    import pandas as pd
    parts = []
    for table, kind in (report_kinds() if kinds is None else kinds).items():
        key, tcol, transfer = kind.setting, kind.temperature, kind.transfer
        df = getattr(tables, table, None)
        if df is None or df.empty:
            continue
        if key not in df.columns and not (key == "pair" and {"src", "tgt"} <= set(df.columns)):
            continue
        nan = pd.Series(np.nan, index=df.index)
        cols: dict[str, Any] = {"table": table, "model": df["model"].astype(str), "setting": setting_values(df, key),
                                "fraction": pd.to_numeric(df["fraction"], errors="coerce").round(9)}
        cols["n_classes"] = pd.Series(_n_classes(df, kind).to_numpy(), index=df.index)
        default_shift = kind.shift if transfer else ""
        if transfer and "shift" in df.columns:
            cols["shift"] = df["shift"].where(df["shift"].notna() & (df["shift"].astype(str) != ""),
                                              default_shift).astype(str)
        else:
            cols["shift"] = default_shift
        for m in bands:
            cols[m] = pd.to_numeric(df[m], errors="coerce") if m in df.columns else nan
        cols["temperature"] = pd.to_numeric(df[tcol], errors="coerce") if tcol in df.columns else nan
        for c in ("temperature_oracle", "ece_scaled_oracle", "degeneracy_share", "nll", "nll_scaled",
                  "n_test_classes"):
            cols[c] = pd.to_numeric(df[c], errors="coerce") if c in df.columns else nan
        if kind.temperature_from:  # nll_scaled is after the full-validation T, not this table's
            cols["nll_scaled"] = nan
        for m in CI_METRICS:  # per-run test-set bootstrap CIs (the bootstrap metric plugin), when present
            for end in ("ci_low", "ci_high"):
                c = f"{m}_{end}"
                scaled_elsewhere = bool(kind.temperature_from) and m in PROPVAL_OTHER_T
                cols[c] = pd.to_numeric(df[c], errors="coerce") if c in df.columns and not scaled_elsewhere else nan
        minc = next((c for c in MIN_CLASS_COLUMNS if c in df.columns), None)
        cols["n_test_min_class"] = pd.to_numeric(df[minc], errors="coerce") if minc else nan
        for c in ("degenerate", "collapsed", "probe_converged"):
            cols[c] = as_bool(df[c]) if c in df.columns else nan
        for k in fewshot_ks(df):
            cols[f"temperature_fewshot_k{k}"] = pd.to_numeric(df[f"temperature_fewshot_k{k}"], errors="coerce")
            cols[f"ece_scaled_fewshot_k{k}"] = pd.to_numeric(df[f"ece_scaled_fewshot_k{k}"], errors="coerce")
        parts.append(pd.DataFrame(cols, index=df.index).reset_index(drop=True))
    if not parts:
        return pd.DataFrame(columns=["table", "model", "setting", "fraction"])
    return pd.concat(parts, ignore_index=True)


def report_cells(tables: RunTables, *, binary_logits: str = "symmetric",
                 bands: tuple[str, ...] = VERDICT_BAND_COLUMNS,
                 t_bounds: tuple[float, float] = T_BOUNDS, kinds: Mapping[str, TableKind] | None = None) -> pd.DataFrame:
    """The ``report_cells`` table (see the module docstring). Rows: tables in report order
    (:func:`report_kinds`), then model / setting in order of first appearance, fraction ascending.
    ``t_bounds``: the temperature search box the runs used."""
    import pandas as pd
    kinds = report_kinds() if kinds is None else kinds
    long = _long(tables, bands, kinds)
    if long.empty:
        return pd.DataFrame(columns=CELL_ID)
    g = long.groupby(CELL_ID, sort=False)
    cols: dict[str, Any] = {"n_runs": g.size()}  # columns gathered first, one frame built: never fragmented
    cols["n_classes"] = g["n_classes"].first()
    cols["shift"] = g["shift"].first()
    cols["neutral_temperature"] = pd.Series([neutral_temperature(k, binary_logits) for k in cols["n_classes"]],
                                            index=cols["n_classes"].index)
    for m in bands:
        agg = g[m].agg(["mean", "std", "min", "max"])
        for stat in ("mean", "std", "min", "max"):
            cols[f"{m}_{stat}"] = agg[stat]
    t = g["temperature"].agg(["mean", "min", "max"])
    for stat in ("mean", "min", "max"):
        cols[f"temperature_{stat}"] = t[stat]
    for m in CI_METRICS:  # the CI of the seed mean, approximated by the mean of the seeds' bounds
        for end in ("ci_low", "ci_high"):
            c = f"{m}_{end}"
            if c in long and long[c].notna().any():
                cols[c] = g[c].mean()
    if any(f"{m}_ci_low" in cols for m in CI_METRICS):
        cols["ci_source"] = pd.Series("mean of the seeds' intervals", index=cols["n_runs"].index)
    if long["n_test_min_class"].notna().any():
        cols["n_test_min_class"] = g["n_test_min_class"].min()
    extra = [c for c in long.columns if c.startswith(("temperature_fewshot_k", "ece_scaled_fewshot_k"))]
    for c in ["temperature_oracle", "ece_scaled_oracle", "degeneracy_share", *extra]:
        if long[c].notna().any():
            cols[f"{c}_mean"] = g[c].mean()
    out = pd.DataFrame(cols)
    deg = g["degenerate"]
    prev = g["collapsed"]
    prev_runs, deg_runs = prev.sum(min_count=1), deg.sum(min_count=1)
    use_prev = prev_runs.notna()
    out["collapsed_runs"] = prev_runs.where(use_prev, deg_runs)
    out["collapsed_share"] = prev.mean().where(use_prev, deg.mean())
    raw, scaled = out["ece_fixed_mean"], out["ece_scaled_fixed_mean"]
    helps = (scaled < raw).astype(object)
    helps[raw.isna() | scaled.isna()] = np.nan
    out["scaling_helps"] = helps
    out["degenerate_runs"] = deg_runs
    out["collapse_signal"] = np.where(use_prev, "prevalence", np.where(deg_runs.notna(), "prism", ""))
    out = out.join(_quality_counts(long, g, t_bounds))
    out = scaling_delta_ci(out)
    out = out.reset_index()
    order = {t: i for i, t in enumerate(kinds)}
    out["_t"] = out["table"].map(order)
    out["_f"] = out["fraction"]
    firsts = {k: i for i, k in enumerate(dict.fromkeys(zip(long["table"], long["model"], long["setting"])))}
    out["_s"] = [firsts[k] for k in zip(out["table"], out["model"], out["setting"])]
    out = out.sort_values(["_t", "_s", "_f"], kind="stable").drop(columns=["_t", "_s", "_f"]).reset_index(drop=True)
    return out


def scaling_delta_ci(cells: pd.DataFrame) -> pd.DataFrame:
    """``ece_scaling_delta_ci_low`` / ``_high``: a CI of (scaled − raw) seed-mean ECE per cell, and
    ``ece_scaling_delta_ci_source``. Without the paired bootstrap replicates (the report puts the exact paired
    interval in, :mod:`prism_plugin.report.uncertainty`) it is the conservative [scaled low − raw high, scaled high
    − raw low]: it includes zero whenever the two intervals overlap. NaN where either interval is missing."""
    cols = ("ece_fixed_ci_low", "ece_fixed_ci_high", "ece_scaled_fixed_ci_low", "ece_scaled_fixed_ci_high")
    if not all(c in cells for c in cols):
        return cells
    out = cells.copy()
    out["ece_scaling_delta_ci_low"] = out["ece_scaled_fixed_ci_low"] - out["ece_fixed_ci_high"]
    out["ece_scaling_delta_ci_high"] = out["ece_scaled_fixed_ci_high"] - out["ece_fixed_ci_low"]
    has = out["ece_scaling_delta_ci_low"].notna() & out["ece_scaling_delta_ci_high"].notna()
    out["ece_scaling_delta_ci_source"] = np.where(has, "interval overlap", "")
    return out


def _quality_counts(long: pd.DataFrame, g, t_bounds: tuple[float, float]) -> pd.DataFrame:
    """Per cell: runs whose probe did not converge, whose temperature is at a search bound (low /
    high), whose test NLL rose after scaling, and whose test split has one class (NaN: not recorded)."""
    import pandas as pd
    bounds = tuple(float(b) for b in t_bounds)
    t = long["temperature"]
    side = t.map(lambda v: bound_side(v, bounds)).where(t.notna())
    hit = (side != "").astype(float).where(t.notna())
    low = (side == "low").astype(float).where(t.notna())
    worse = (long["nll_scaled"] > long["nll"] + NLL_RTOL * long["nll"].abs() + NLL_ATOL).astype(float)
    worse[long["nll"].isna() | long["nll_scaled"].isna()] = np.nan
    flags = pd.DataFrame({"not_converged": 1.0 - long["probe_converged"], "t_bound": hit, "t_bound_low": low,
                          "t_bound_high": hit - low, "nll_worse": worse,
                          "single_class_test": (long["n_test_classes"] == 1).astype(float).where(
                              long["n_test_classes"].notna())}, index=long.index)
    flags[CELL_ID] = long[CELL_ID]
    counts = flags.groupby(CELL_ID, sort=False).sum(min_count=1)
    return counts.add_suffix("_runs").reindex(g.size().index)


def fewshot_temperature(tables: RunTables, *, tolerance: float = FEWSHOT_TOLERANCE,
                        kinds: Mapping[str, TableKind] | None = None) -> pd.DataFrame:
    """The ``fewshot_temperature`` table (long: one row per K); empty when no
    transfer table has few-shot columns and an oracle ECE."""
    import pandas as pd
    rows = []
    kinds = report_kinds() if kinds is None else kinds
    long = _long(tables, kinds=kinds)
    if long.empty:
        return pd.DataFrame(columns=FEWSHOT_COLUMNS)
    ks = sorted(int(c[len("temperature_fewshot_k"):]) for c in long.columns if FEWSHOT_T.match(c))
    if not ks:
        return pd.DataFrame(columns=FEWSHOT_COLUMNS)
    sub = long.loc[long["table"].isin(transfer_tables(kinds))]
    for (table, model, setting, fraction), g in sub.groupby(CELL_ID, sort=False):
        oracle = g["ece_scaled_oracle"].mean()
        for k in ks:
            ece_k = g[f"ece_scaled_fewshot_k{k}"].mean()
            if pd.isna(ece_k):
                continue
            gap = ece_k - oracle
            rows.append({"table": table, "model": model, "setting": setting, "fraction": fraction, "k": k,
                         "n_runs": int(g[f"ece_scaled_fewshot_k{k}"].notna().sum()),
                         "temperature_fewshot": g[f"temperature_fewshot_k{k}"].mean(), "ece_scaled_fewshot": ece_k,
                         "ece_scaled_oracle": oracle, "gap": gap,
                         "within": bool(gap <= tolerance) if pd.notna(gap) else np.nan})
    return pd.DataFrame(rows, columns=FEWSHOT_COLUMNS)


def _fmt_fracs(values) -> str:
    return ";".join(f"{float(v):g}" for v in values)


def report_settings(cells: pd.DataFrame, fewshot: pd.DataFrame | None = None,
                    bands: tuple[str, ...] = VERDICT_BAND_COLUMNS,
                    kinds: Mapping[str, TableKind] | None = None) -> pd.DataFrame:
    """One row per (table, model, setting) from a :func:`report_cells` table.

    * ``*_lo`` / ``*_hi``: seed means at the setting's smallest / largest fraction;
    * ``collapsed_cells`` (cells with at least one collapsed run), ``collapsed_fractions`` (";"-joined),
      ``largest_collapsed_fraction`` (NaN if none) and ``collapse_free_from`` = the smallest fraction above every
      collapsed one (NaN if none collapsed or the largest did);
    * ``scaling_cells`` (cells with raw and scaled ECE), ``scaling_not_helping_cells`` (seed-mean scaled ECE ≥
      raw), their fractions, and the worst one (largest scaled − raw: ``worst_scaling_fraction``,
      ``worst_scaling_gap``);
    * ``temperature_lo`` / ``_hi`` against ``neutral_temperature``;
    * transfer tables: ``transfer_auroc`` = mean over fractions of the seed-mean AUROC (the banding variable of
      PROTOCOL §6.10), ``target_ece_delta`` = raw ECE at the largest minus the smallest fraction,
      ``target_ece_rises`` = delta > 0;
    * few-shot: ``fewshot_ks`` tested, ``fewshot_k_needed`` = smallest K whose few-shot ECE is within tolerance of
      the oracle ECE at the largest fraction (NaN: none within, or no few-shot columns),
      ``fewshot_fractions_not_within``;
    * quality (cells with at least one such run; NaN when the runs do not record it): ``degenerate_cells`` (PRISM's
      > 0.99 share), ``collapse_signal`` (``prevalence``: the collapsed_* columns follow the prevalence-aware
      ``collapsed`` column; ``prism``: the runs only carry ``degenerate``), ``single_class_test_cells``,
      ``not_converged_runs`` / ``_cells`` / ``_fractions``, ``t_bound_cells`` / ``_fractions`` / ``_side``
      (``low``, ``high``, ``low+high``: the table's temperature within 0.001 of a search bound),
      ``nll_worse_cells`` / ``_fractions`` (test NLL after scaling above the raw NLL).
    """
    import pandas as pd
    rows = []
    extra = [f"{m}_{end}" for m in bands if m not in VERDICT_BAND_COLUMNS for end in ("lo", "hi")]
    columns = SETTINGS_COLUMNS[:SETTINGS_COLUMNS.index("collapsed_cells")] + extra + \
        SETTINGS_COLUMNS[SETTINGS_COLUMNS.index("collapsed_cells"):]
    if cells.empty:
        return pd.DataFrame(columns=columns)
    transfers = transfer_tables(report_kinds() if kinds is None else kinds)
    for (table, model, setting), g in cells.groupby(["table", "model", "setting"], sort=False):
        g = g.sort_values("fraction")
        lo, hi = g.iloc[0], g.iloc[-1]
        transfer = table in transfers
        coll = g.loc[g["collapsed_runs"].fillna(0) > 0, "fraction"]
        largest = float(coll.max()) if len(coll) else np.nan
        above = g.loc[g["fraction"] > largest, "fraction"] if len(coll) else pd.Series(dtype=float)
        both = g.loc[g["ece_fixed_mean"].notna() & g["ece_scaled_fixed_mean"].notna()]
        gap = both["ece_scaled_fixed_mean"] - both["ece_fixed_mean"]
        bad = both.loc[gap >= 0]
        worst = both.loc[gap.idxmax()] if len(bad) else None
        row: dict[str, Any] = {
            "table": table, "model": model, "setting": setting, "n_classes": lo["n_classes"],
            "n_fractions": len(g), "fraction_min": float(lo["fraction"]), "fraction_max": float(hi["fraction"]),
            "n_runs": int(g["n_runs"].sum()),
        }
        for m in bands:
            row[f"{m}_lo"] = lo[f"{m}_mean"]
            row[f"{m}_hi"] = hi[f"{m}_mean"]
        row.update({
            "collapsed_cells": int(len(coll)),
            "collapsed_fractions": _fmt_fracs(coll),
            "largest_collapsed_fraction": largest,
            "collapse_free_from": float(above.min()) if len(above) else np.nan,
            "scaling_cells": int(len(both)),
            "scaling_not_helping_cells": int(len(bad)),
            "scaling_not_helping_fractions": _fmt_fracs(bad["fraction"]),
            "worst_scaling_fraction": float(worst["fraction"]) if worst is not None else np.nan,
            "worst_scaling_gap": float(gap.max()) if len(bad) else np.nan,
            "neutral_temperature": lo["neutral_temperature"],
            "temperature_lo": lo["temperature_mean"],
            "temperature_hi": hi["temperature_mean"],
            "transfer_auroc": float(g["auroc_mean"].mean()) if transfer and g["auroc_mean"].notna().any() else np.nan,
            "target_ece_delta": float(hi["ece_fixed_mean"] - lo["ece_fixed_mean"]) if transfer else np.nan,
            "target_ece_rises": bool(hi["ece_fixed_mean"] > lo["ece_fixed_mean"]) if transfer else np.nan,
            "fewshot_ks": "", "fewshot_k_needed": np.nan, "fewshot_fractions_not_within": np.nan,
        })
        row.update(_quality_settings(g))
        row["shift"] = str(lo["shift"]) if "shift" in g.columns and pd.notna(lo["shift"]) else ""
        row.update(_uncertainty_settings(g, transfer))
        if fewshot is not None and not fewshot.empty and transfer:
            fs = fewshot.loc[(fewshot["table"] == table) & (fewshot["model"] == model) & (fewshot["setting"] == setting)]
            if not fs.empty:
                row["fewshot_ks"] = ";".join(str(int(k)) for k in sorted(fs["k"].unique()))
                top = fs.loc[np.isclose(fs["fraction"], row["fraction_max"])]
                ok = top.loc[top["within"] == True, "k"]  # noqa: E712 - object column
                row["fewshot_k_needed"] = float(ok.min()) if len(ok) else np.nan
                per_f = fs.groupby("fraction")["within"].agg(lambda s: bool((s == True).any()))  # noqa: E712
                row["fewshot_fractions_not_within"] = int((~per_f).sum())
        rows.append(row)
    out = pd.DataFrame(rows, columns=columns)
    return out


def _col(g: pd.DataFrame, column: str) -> pd.Series:
    import pandas as pd
    return pd.to_numeric(g[column], errors="coerce") if column in g.columns else pd.Series(np.nan, index=g.index)


def _uncertainty_settings(g: pd.DataFrame, transfer: bool) -> dict[str, Any]:
    """The uncertainty columns of one setting (NaN when the runs carry no test-set CI): ``n_test_min_class``
    (smallest test class count over its cells), ``few_test_cells`` (cells below :data:`FEW_TEST_SAMPLES`), the CI
    of AUROC / scaled ECE at the largest fraction, of ``transfer_auroc`` (mean over fractions of the cells'
    bounds), ``scaling_ci_cells`` (cells with a CI of scaled − raw ECE), ``scaling_unsure_cells`` / ``_fractions``
    (cells where scaling lowered the seed-mean ECE but that CI includes zero) and
    ``scaling_not_helping_unsure_cells`` (cells where it did not, with a CI including zero)."""
    import pandas as pd
    hi = g.iloc[-1]
    out: dict[str, Any] = {}
    n = _col(g, "n_test_min_class")
    out["n_test_min_class"] = float(n.min()) if n.notna().any() else np.nan
    out["few_test_cells"] = float(((n < FEW_TEST_SAMPLES) & (n > 0)).sum()) if n.notna().any() else np.nan
    for m in ("auroc", "ece_scaled_fixed"):
        for end in ("ci_low", "ci_high"):
            v = hi.get(f"{m}_{end}", np.nan)
            out[f"{m}_hi_{end}"] = float(v) if pd.notna(v) else np.nan
    for end in ("ci_low", "ci_high"):
        v = _col(g, f"auroc_{end}")
        out[f"transfer_auroc_{end}"] = float(v.mean()) if transfer and v.notna().all() and len(v) else np.nan
    lo_d, hi_d = _col(g, "ece_scaling_delta_ci_low"), _col(g, "ece_scaling_delta_ci_high")
    both = lo_d.notna() & hi_d.notna() & _col(g, "ece_fixed_mean").notna() & _col(g, "ece_scaled_fixed_mean").notna()
    if not both.any():
        out.update({"scaling_ci_cells": np.nan, "scaling_unsure_cells": np.nan, "scaling_unsure_fractions": "",
                    "scaling_not_helping_unsure_cells": np.nan})
        return out
    gap = _col(g, "ece_scaled_fixed_mean") - _col(g, "ece_fixed_mean")
    straddles = both & (lo_d <= 0) & (hi_d >= 0)
    unsure = straddles & (gap < 0)
    out["scaling_ci_cells"] = float(both.sum())
    out["scaling_unsure_cells"] = float(unsure.sum())
    out["scaling_unsure_fractions"] = _fmt_fracs(g.loc[unsure, "fraction"])
    out["scaling_not_helping_unsure_cells"] = float((straddles & (gap >= 0)).sum())
    return out


def _count_cells(g: pd.DataFrame, column: str) -> tuple[float, str]:
    """(cells with at least one such run, their fractions); NaN / "" when the runs do not record it."""
    if column not in g.columns or g[column].isna().all():
        return np.nan, ""
    hit = g.loc[g[column].fillna(0) > 0, "fraction"]
    return float(len(hit)), _fmt_fracs(hit)


def _quality_settings(g: pd.DataFrame) -> dict[str, Any]:
    """The quality columns of one setting (see :func:`report_settings`)."""
    import pandas as pd
    out: dict[str, Any] = {}
    out["degenerate_cells"] = _count_cells(g, "degenerate_runs")[0]
    signals = set(g["collapse_signal"]) - {""} if "collapse_signal" in g.columns else set()
    out["collapse_signal"] = "prevalence" if "prevalence" in signals else ("prism" if signals else "")
    out["single_class_test_cells"] = _count_cells(g, "single_class_test_runs")[0]
    nc = g["not_converged_runs"] if "not_converged_runs" in g.columns else pd.Series(dtype=float)
    out["not_converged_runs"] = float(nc.sum()) if nc.notna().any() else np.nan
    out["not_converged_cells"], out["not_converged_fractions"] = _count_cells(g, "not_converged_runs")
    out["t_bound_cells"], out["t_bound_fractions"] = _count_cells(g, "t_bound_runs")
    sides = [side for side in ("low", "high") if f"t_bound_{side}_runs" in g.columns
             and g[f"t_bound_{side}_runs"].fillna(0).sum() > 0]
    out["t_bound_side"] = "+".join(sides)
    out["nll_worse_cells"], out["nll_worse_fractions"] = _count_cells(g, "nll_worse_runs")
    return out


#: the leaderboard page reads report_cells (:func:`prism_plugin.summaries.engine.summary_plugins`)
LEADERBOARD = True


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """``report_cells``, ``report_settings`` and (when present) ``fewshot_temperature``. Options: ``binary_logits``
    (``symmetric``/``natural``: the neutral binary temperature 2 or 1), ``fewshot_tolerance`` (0.02) and
    ``temperature_bounds`` (the search box the runs used, default [0.1, 10])."""
    options = options or {}
    convention = str(options.get("binary_logits", "symmetric"))
    tol = float(options.get("fewshot_tolerance", FEWSHOT_TOLERANCE))
    bands = band_metrics(options)
    kinds = report_kinds(options)
    bounds = options.get("temperature_bounds") or T_BOUNDS
    cells = report_cells(tables, binary_logits=convention, bands=bands, t_bounds=(float(bounds[0]), float(bounds[1])),
                         kinds=kinds)
    if cells.empty:
        return None
    out = SummaryOutput()
    out.tables["report_cells"] = cells
    fs = fewshot_temperature(tables, tolerance=tol, kinds=kinds)
    if not fs.empty:
        out.tables["fewshot_temperature"] = fs
    elif any(tables[t] is not None for t in transfer_tables(kinds)):
        out.notes.append(
            "fewshot_temperature not computed: the transfer runs have no few-shot target temperature columns "
            "(temperature_fewshot_k<K> with ece_scaled_fewshot_k<K>, written by the temperature-transfer plugin)"
        )
    out.tables["report_settings"] = report_settings(cells, fs, bands, kinds)
    return out


__all__ = [
    "VERDICT_BAND_COLUMNS", "FEWSHOT_TOLERANCE", "TRANSFER_ZONE", "UNDECLARED_LABEL", "label_definition_bands_apply",
    "report_kinds", "table_label", "transfer_tables", "band_metrics", "fewshot_ks", "fewshot_temperature",
    "neutral_temperature", "report_cells", "report_settings", "summarize",
]
