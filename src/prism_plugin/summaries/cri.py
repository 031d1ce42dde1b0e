"""OOD stability and the Composite Reliability Index (PROTOCOL §6.1-6.4).

Conventions (all exactly as in the protocol):

* A *cell* is (model, dataset-or-pair, fraction); its value is the **seed mean** (arithmetic mean over the cell's
  runs). Every aggregate first takes seed means and then averages cells.
* Fractions are matched numerically (``|fraction - f| <= 1e-9``).
* **OOD stability** (§6.1) of model m::

      stab(m) = mean over pairs p of min(A_ood(m, p) / A_id(m, src(p)), 1)

  with A_ood the seed-mean target AUROC of the pair and A_id the seed-mean
  in-distribution AUROC of the pair's **source** at the same fraction (1.0 by
  definition). For the label-definition pairs the source is a dataset
  (``indomain.dataset``); for Camelyon17 it is a hospital
  (``camelyon17_indomain.hospital``, matched against ``transfer.src``). The
  in-distribution key column is ``dataset`` if present, else ``hospital``.
  Pairs whose source has no in-distribution AUROC are left out of the mean; a
  model with no usable pair has no measured stability. Pairs are averaged in
  order of first appearance in the transfer table.
* **CRI** (§6.2) at fraction f: a = mean over the model's datasets of seed-mean
  ``auroc`` at f; e = clip(mean over datasets of seed-mean ``ece_scaled_fixed``
  at f, 0, 1); s = stab(m) (always the 100 % value). Aggregations (registry
  :data:`AGGREGATIONS`): multiplicative a·(1−e)·s, arithmetic (a + (1−e) + s)/3,
  geometric (a·(1−e)·s)^(1/3), worst_axis min(a, 1−e, s).
* Models are listed in the reference display order (:data:`~.conventions.MODEL_ORDER`), then
  any other model in order of first appearance.
* Tables indexed by ``model`` (``cri_variants_*``, ``cri_components``,
  ``camelyon17_cri_components``) carry ``model`` as a named index, to be written
  as the first CSV column; the other tables have a plain RangeIndex (write
  without index).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.errors import PrismError, UnknownNameError, suggest
from prism_plugin.hookspecs import hookimpl
from prism_plugin.summaries.conventions import (
    fraction_label, fraction_mask, fractions_present, model_order, require_columns,
)
from prism_plugin.tables import RunTables, SummaryOutput


#: Fraction at which OOD stability and the CRI components are defined.
STABILITY_FRACTION = 1.0

CRI_VARIANT_COLUMNS = [
    "auroc", "ece_scaled", "ood_stability",
    "cri_multiplicative", "cri_arithmetic", "cri_geometric", "cri_worst_axis",
]
CRI_COMPONENT_COLUMNS = [
    "id_auroc_mean", "ood_auroc_mean", "drop_mean", "drop_worst", "ood_stability", "cri",
]
CAMELYON_COMPONENT_COLUMNS = [
    "id_auroc", "ood_auroc", "drop_mean", "drop_worst", "ood_stability", "cri",
]


def _source_key(indomain: pd.DataFrame) -> str:
    for key in ("dataset", "hospital"):
        if key in indomain.columns:
            return key
    raise PrismError("in-distribution table has neither a 'dataset' nor a 'hospital' column")


def _id_cell_means(indomain: pd.DataFrame, fraction: float, columns: list[str]) -> pd.DataFrame:
    """Seed means per (model, source) at ``fraction``; index (model, source)."""
    key = _source_key(indomain)
    require_columns(indomain, ["model", key, "fraction", *columns], "in-distribution")
    rows = indomain.loc[fraction_mask(indomain, fraction)]
    return rows.groupby(["model", key], sort=False)[columns].mean()


def _id_model_means(indomain: pd.DataFrame, fraction: float) -> pd.DataFrame:
    """Per model: mean over its datasets/hospitals of seed-mean ``auroc`` and seed-mean ``ece_scaled_fixed`` at
    ``fraction`` (the latter *not* clipped)."""
    import pandas as pd
    cells = _id_cell_means(indomain, fraction, ["auroc", "ece_scaled_fixed"])
    if cells.empty:
        return pd.DataFrame(columns=["auroc", "ece_scaled_fixed"], dtype=float)
    means = cells.groupby(level="model", sort=False).mean()
    return means.loc[model_order(means.index)]


# --------------------------------------------------------------------------- §6.1
def ood_pairs(indomain: pd.DataFrame, transfer: pd.DataFrame, *, fraction: float = STABILITY_FRACTION) -> pd.DataFrame:
    """Per (model, pair) at ``fraction``: the terms of §6.1 and §6.3.

    Columns: model, pair, src, tgt, id_auroc (seed-mean in-distribution AUROC of the source), ood_auroc (seed-mean
    target AUROC), drop = id_auroc − ood_auroc, ratio = min(ood_auroc / id_auroc, 1). ``id_auroc``, ``drop`` and
    ``ratio`` are NaN when the source has no in-distribution run at ``fraction``. Rows: models in display order,
    pairs in order of first appearance in ``transfer``.
    """
    import pandas as pd
    require_columns(transfer, ["model", "src", "tgt", "fraction", "auroc"], "transfer")
    t = transfer.loc[fraction_mask(transfer, fraction)].copy()
    if "pair" not in t.columns:
        t["pair"] = t["src"].astype(str) + "->" + t["tgt"].astype(str)
    cols = ["model", "pair", "src", "tgt", "id_auroc", "ood_auroc", "drop", "ratio"]
    if t.empty:
        return pd.DataFrame(columns=cols)
    ood = (
        t.groupby(["model", "pair"], sort=False)
        .agg(src=("src", "first"), tgt=("tgt", "first"), ood_auroc=("auroc", "mean"))
        .reset_index()
    )
    id_auroc = _id_cell_means(indomain, fraction, ["auroc"])["auroc"]
    lookup = {k: v for k, v in id_auroc.items()}
    ood["id_auroc"] = [lookup.get((m, s), np.nan) for m, s in zip(ood["model"], ood["src"])]
    ood["id_auroc"] = ood["id_auroc"].astype(float)
    ood["drop"] = ood["id_auroc"] - ood["ood_auroc"]
    ood["ratio"] = np.minimum(ood["ood_auroc"] / ood["id_auroc"], 1.0)
    pair_rank = {p: i for i, p in enumerate(pd.unique(t["pair"]))}
    model_rank = {m: i for i, m in enumerate(model_order(ood["model"]))}
    ood["_m"] = ood["model"].map(model_rank)
    ood["_p"] = ood["pair"].map(pair_rank)
    ood = ood.sort_values(["_m", "_p"], kind="stable").drop(columns=["_m", "_p"])
    return ood[cols].reset_index(drop=True)


def ood_stability(indomain: pd.DataFrame, transfer: pd.DataFrame, *, fraction: float = STABILITY_FRACTION) -> pd.Series:
    """OOD stability per model (§6.1): mean over pairs of min(A_ood/A_id(src), 1).

    Works for the label-definition pairs (``indomain`` keyed by ``dataset``) and for Camelyon17
    (``camelyon17_indomain`` keyed by ``hospital``; ``src`` of ``camelyon17_transfer`` names the hospital). Pairs
    without an in-distribution AUROC for their source are left out; models with no usable pair are absent from the
    result. Returns a float Series named ``ood_stability`` indexed by ``model`` in display order.
    """
    import pandas as pd
    pairs = ood_pairs(indomain, transfer, fraction=fraction)
    pairs = pairs.loc[pairs["ratio"].notna()]
    if pairs.empty:
        return pd.Series(dtype=float, name="ood_stability", index=pd.Index([], name="model"))
    stab = pairs.groupby("model", sort=False)["ratio"].mean().astype(float)
    stab = stab.loc[model_order(stab.index)]
    stab.name = "ood_stability"
    stab.index.name = "model"
    return stab


# --------------------------------------------------------------------------- aggregations
def _cri_multiplicative(a, e, s):
    return a * (1.0 - e) * s


def _cri_arithmetic(a, e, s):
    return (a + (1.0 - e) + s) / 3.0


def _cri_geometric(a, e, s):
    return (a * (1.0 - e) * s) ** (1.0 / 3.0)


def _cri_worst_axis(a, e, s):
    return np.minimum(np.minimum(a, 1.0 - e), s)


#: CRI aggregation rules by name: ``f(a, e, s)`` with a = AUROC, e = clipped
#: scaled ECE, s = OOD stability (scalars or arrays). Extend by adding entries.
AGGREGATIONS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "multiplicative": _cri_multiplicative,
    "arithmetic": _cri_arithmetic,
    "geometric": _cri_geometric,
    "worst_axis": _cri_worst_axis,
}


def get_aggregation(name: str) -> Callable[[Any, Any, Any], Any]:
    """The aggregation rule called ``name``; an unknown name is a :class:`UnknownNameError`."""
    try:
        return AGGREGATIONS[name]
    except KeyError:
        raise UnknownNameError("CRI aggregation", name, AGGREGATIONS) from None


def cri(a, e, s, aggregation: str = "multiplicative"):
    """CRI of AUROC ``a``, scaled ECE ``e`` (clipped to [0, 1] here) and stability ``s``."""
    return get_aggregation(aggregation)(a, np.clip(e, 0.0, 1.0), s)


def rank_by_cri(df: pd.DataFrame, aggregation: str = "multiplicative") -> pd.DataFrame:
    """Rank the rows of a ``cri_variants`` table by one aggregation rule.

    Uses column ``cri_<aggregation>`` if present, else computes it from ``auroc``, ``ece_scaled`` and
    ``ood_stability``. Returns a copy sorted by that CRI descending (stable: ties keep their order) with a ``rank``
    column (1 = best, ties share the smallest rank, NaN CRI last and unranked).
    """
    fn = get_aggregation(aggregation)
    col = f"cri_{aggregation}"
    out = df.copy()
    if col not in out.columns:
        require_columns(out, ["auroc", "ece_scaled", "ood_stability"], "CRI")
        out[col] = fn(out["auroc"], out["ece_scaled"].clip(0.0, 1.0), out["ood_stability"])
    out = out.sort_values(col, ascending=False, kind="stable", na_position="last")
    out["rank"] = out[col].rank(ascending=False, method="min")
    return out


# --------------------------------------------------------------------------- §6.2
def cri_variants(
    indomain: pd.DataFrame,
    stability: pd.Series | Mapping[str, float],
    fraction: float,
    *,
    imputed: pd.Series | Mapping[str, bool] | None = None,
) -> pd.DataFrame:
    """The ``cri_variants_<pct>`` table of §6.2 at ``fraction``.

    Index ``model`` (display order; every model with in-distribution runs at ``fraction``); columns ``auroc``,
    ``ece_scaled`` (clipped to [0, 1]), ``ood_stability`` (``stability[model]``, NaN if absent) and
    ``cri_multiplicative``, ``cri_arithmetic``, ``cri_geometric``, ``cri_worst_axis``. When ``imputed`` flags at
    least one listed model, a boolean column ``ood_stability_imputed`` is appended; otherwise the columns are
    exactly the published ones.
    """
    import pandas as pd
    means = _id_model_means(indomain, fraction)
    stab = pd.Series(stability, dtype=float) if not isinstance(stability, pd.Series) else stability.astype(float)
    out = pd.DataFrame(index=pd.Index(list(means.index), name="model"))
    out["auroc"] = means["auroc"].astype(float)
    out["ece_scaled"] = means["ece_scaled_fixed"].astype(float).clip(0.0, 1.0)
    out["ood_stability"] = stab.reindex(out.index).astype(float)
    a, e, s = out["auroc"], out["ece_scaled"], out["ood_stability"]
    for name, fn in AGGREGATIONS.items():
        out[f"cri_{name}"] = fn(a, e, s)
    if imputed is not None:
        flags = pd.Series(imputed, dtype=object).reindex(out.index).fillna(False).astype(bool)
        if flags.any():
            out["ood_stability_imputed"] = flags
    return out


def kendall_between_rules(variants: pd.DataFrame) -> pd.DataFrame:
    """Pairwise Kendall τ-b between the CRI columns of a ``cri_variants`` table.

    Columns: rule_a, rule_b, kendall_tau (NaN when fewer than 2 models or a column is constant). Models with a NaN
    CRI are left out.
    """
    import pandas as pd
    from scipy import stats
    cols = [f"cri_{n}" for n in AGGREGATIONS if f"cri_{n}" in variants.columns]
    rows = []
    data = variants[cols].dropna()
    for i, ca in enumerate(cols):
        for cb in cols[i + 1:]:
            if len(data) < 2:
                tau = float("nan")
            else:
                tau = float(stats.kendalltau(data[ca].to_numpy(), data[cb].to_numpy()).statistic)
            rows.append({"rule_a": ca[4:], "rule_b": cb[4:], "kendall_tau": tau})
    return pd.DataFrame(rows, columns=["rule_a", "rule_b", "kendall_tau"])


# --------------------------------------------------------------------------- imputation
def resolve_ood_stability(
    models: Iterable[str],
    measured: pd.Series,
    *,
    overrides: Mapping[str, float] | None = None,
    default: float | None = None,
) -> pd.DataFrame:
    """Stability to use for each model, and where it came from.

    Rules, in order: a user value in ``overrides`` (source ``user``, imputed; it replaces a measured value too);
    the measured value (source ``measured``); ``default`` (source ``default``); the mean of the measured values of
    all models that have one (source ``mean``); otherwise NaN (source ``none``). Returns a DataFrame indexed by
    ``model`` (display order) with columns ``ood_stability``, ``imputed`` (bool) and ``source``. Override and
    default values must be numbers in [0, 1].
    """
    import pandas as pd
    models = model_order(models)
    overrides = dict(overrides or {})
    for name, value in list(overrides.items()):
        overrides[name] = _check_unit("ood_stability", value, name)
    if default is not None:
        default = _check_unit("default_ood_stability", default)
    measured = measured.dropna().astype(float)
    mean_measured = float(measured.mean()) if len(measured) else None
    rows = []
    for m in models:
        if m in overrides:
            rows.append((m, overrides[m], True, "user"))
        elif m in measured.index:
            rows.append((m, float(measured[m]), False, "measured"))
        elif default is not None:
            rows.append((m, default, True, "default"))
        elif mean_measured is not None:
            rows.append((m, mean_measured, True, "mean"))
        else:
            rows.append((m, float("nan"), False, "none"))
    out = pd.DataFrame(rows, columns=["model", "ood_stability", "imputed", "source"]).set_index("model")
    out["imputed"] = out["imputed"].astype(bool)
    return out


def _check_unit(option: str, value: Any, model: str | None = None) -> float:
    where = f"option {option}" + (f" for model {model!r}" if model is not None else "")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise PrismError(f"{where}: {value!r} is not a number; give a stability in [0, 1]") from None
    if not (0.0 <= v <= 1.0) or math.isnan(v):
        raise PrismError(f"{where}: {v} is outside [0, 1]; OOD stability is a clipped AUROC ratio")
    return v


# --------------------------------------------------------------------------- §6.3 / §6.4
def _component_frame(pairs: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd
    usable = pairs.loc[pairs["ratio"].notna()]
    g = usable.groupby("model", sort=False)
    out = pd.DataFrame({
        "ood_auroc_mean": g["ood_auroc"].mean(),
        "drop_mean": g["drop"].mean(),
        "drop_worst": g["drop"].max(),
        "ood_stability": g["ratio"].mean(),
    })
    return out.astype(float)


def cri_components(indomain: pd.DataFrame, transfer: pd.DataFrame, *, fraction: float = STABILITY_FRACTION) -> pd.DataFrame:
    """The ``cri_components`` table of §6.3 (label-definition pairs, fraction 1.0).

    Per model with at least one usable pair (index ``model``, display order): id_auroc_mean = mean over **all** its
    datasets of seed-mean AUROC; ood_auroc_mean = mean over pairs of A_ood; drop_mean / drop_worst = mean / max
    over pairs of A_id(src) − A_ood; ood_stability = §6.1; cri = cri_multiplicative at this fraction (§6.2). Note
    id_auroc_mean − ood_auroc_mean ≠ drop_mean (all-dataset mean vs source-only).
    """
    import pandas as pd
    pairs = ood_pairs(indomain, transfer, fraction=fraction)
    comp = _component_frame(pairs)
    means = _id_model_means(indomain, fraction)
    models = [m for m in model_order(comp.index) if m in means.index]
    comp = comp.loc[models]
    out = pd.DataFrame(index=pd.Index(models, name="model"))
    out["id_auroc_mean"] = means["auroc"].reindex(models).astype(float)
    for c in ("ood_auroc_mean", "drop_mean", "drop_worst", "ood_stability"):
        out[c] = comp[c]
    e = means["ece_scaled_fixed"].reindex(models).astype(float).clip(0.0, 1.0)
    out["cri"] = _cri_multiplicative(out["id_auroc_mean"], e, out["ood_stability"])
    return out[CRI_COMPONENT_COLUMNS]


def cri_components_per_pair(
    indomain: pd.DataFrame, transfer: pd.DataFrame, *, fraction: float = STABILITY_FRACTION, decimals: int = 4
) -> pd.DataFrame:
    """The ``cri_components_per_pair`` table of §6.3: columns model, pair, id_auroc, ood_auroc, drop, rounded to
    ``decimals`` (4) places; models in display order, pairs in order of first appearance; pairs whose source has no
    in-distribution AUROC are left out. Plain RangeIndex."""
    pairs = ood_pairs(indomain, transfer, fraction=fraction)
    pairs = pairs.loc[pairs["ratio"].notna(), ["model", "pair", "id_auroc", "ood_auroc", "drop"]]
    out = pairs.reset_index(drop=True)
    for c in ("id_auroc", "ood_auroc", "drop"):
        out[c] = out[c].astype(float).round(decimals)
    return out


def camelyon17_cri_components(
    camelyon17_indomain: pd.DataFrame, camelyon17_transfer: pd.DataFrame, *, fraction: float = STABILITY_FRACTION
) -> pd.DataFrame:
    """The ``camelyon17_cri_components`` table of §6.4.

    Per model with at least one usable hospital pair (index ``model``, display order): id_auroc = mean over
    hospitals of seed-mean in-distribution AUROC at 1.0; ood_auroc = plain mean of **all** the model's transfer
    runs at 1.0 (pairs × seeds, not of seed means); drop_mean / drop_worst = mean / max over pairs of A_id(src
    hospital) − A_ood(pair); ood_stability = §6.1 over the hospital pairs; cri = id_auroc·(1−e)·ood_stability with
    e = clip(mean over hospitals of seed-mean in-distribution ``ece_scaled_fixed``, 0, 1).
    """
    import pandas as pd
    pairs = ood_pairs(camelyon17_indomain, camelyon17_transfer, fraction=fraction)
    comp = _component_frame(pairs)
    means = _id_model_means(camelyon17_indomain, fraction)
    models = [m for m in model_order(comp.index) if m in means.index]
    t = camelyon17_transfer.loc[fraction_mask(camelyon17_transfer, fraction)]
    run_mean = t.groupby("model", sort=False)["auroc"].mean()
    out = pd.DataFrame(index=pd.Index(models, name="model"))
    out["id_auroc"] = means["auroc"].reindex(models).astype(float)
    out["ood_auroc"] = run_mean.reindex(models).astype(float)
    for c in ("drop_mean", "drop_worst", "ood_stability"):
        out[c] = comp[c].reindex(models)
    e = means["ece_scaled_fixed"].reindex(models).astype(float).clip(0.0, 1.0)
    out["cri"] = _cri_multiplicative(out["id_auroc"], e, out["ood_stability"])
    return out[CAMELYON_COMPONENT_COLUMNS]


# --------------------------------------------------------------------------- hook
def _undefined_pairs_note(pairs: pd.DataFrame, what: str) -> list[str]:
    bad = pairs.loc[pairs["ratio"].isna()]
    if bad.empty:
        return []
    listed = ", ".join(sorted({f"{m} {p}" for m, p in zip(bad["model"], bad["pair"])}))
    return [
        f"{what}: OOD stability term not defined for {listed}: the source has no "
        f"in-distribution run at fraction {STABILITY_FRACTION:g}; those pairs are left out"
    ]


def _summarize_main(ind: pd.DataFrame, tr: pd.DataFrame | None, options: Mapping[str, Any], out: SummaryOutput) -> None:
    import pandas as pd
    overrides = options.get("ood_stability")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise PrismError(
            "option ood_stability must map model names to numbers in [0, 1] "
            "(use default_ood_stability for one value for every model)"
        )
    overrides = dict(overrides or {})
    default = options.get("default_ood_stability")
    models = model_order(ind["model"])
    unknown = [m for m in overrides if m not in models]
    for m in unknown:
        out.notes.append(
            f"option ood_stability names model {m!r}, which has no in-distribution runs; ignored"
            + suggest(str(m), models)
        )
        overrides.pop(m)

    measured = pd.Series(dtype=float)
    has_id_100 = bool(fraction_mask(ind, STABILITY_FRACTION).any())
    if tr is not None:
        if not has_id_100:
            out.notes.append(
                f"OOD stability not measured: in-distribution runs lack fraction {STABILITY_FRACTION:g} "
                "(A_id of PROTOCOL §6.1 is defined at 100 % labels)"
            )
        elif not fraction_mask(tr, STABILITY_FRACTION).any():
            out.notes.append(
                f"OOD stability not measured: transfer runs lack fraction {STABILITY_FRACTION:g} "
                "(A_ood of PROTOCOL §6.1 is defined at 100 % labels)"
            )
        else:
            pairs = ood_pairs(ind, tr)
            out.notes.extend(_undefined_pairs_note(pairs, "label-definition transfer"))
            measured = ood_stability(ind, tr)

    if measured.empty and not overrides and default is None:
        reason = "no transfer runs" if tr is None else "no usable transfer runs"
        out.notes.append(
            f"CRI not computed: {reason} to measure OOD stability (PROTOCOL §6.1) and "
            "neither option ood_stability nor default_ood_stability was set"
        )
        return

    resolved = resolve_ood_stability(models, measured, overrides=overrides, default=default)
    for source, label in (("user", "user-provided (option ood_stability)"),
                          ("default", "option default_ood_stability"),
                          ("mean", "mean stability of the models with transfer runs")):
        names = [m for m in resolved.index if resolved.at[m, "source"] == source]
        if names:
            extra = ""
            if source == "user":
                replaced = [m for m in names if m in measured.index]
                if replaced:
                    extra = "; replaces the measured value for " + ", ".join(replaced)
            out.notes.append(
                f"ood_stability imputed (imputed={source}) for {', '.join(names)}: {label}{extra}"
            )
    missing = [m for m in resolved.index if resolved.at[m, "source"] == "none"]
    if missing:
        out.notes.append(
            f"CRI not computed for {', '.join(missing)}: no transfer runs and no ood_stability value"
        )
    resolved = resolved.loc[[m for m in resolved.index if m not in missing]]
    stab = resolved["ood_stability"]
    imputed = resolved["imputed"]
    keep = ind.loc[ind["model"].isin(list(resolved.index))]

    taus_main: list[float] = []
    for f in fractions_present(keep):
        label = fraction_label(f)
        table = cri_variants(keep, stab, f, imputed=imputed)
        _check_balance(keep, f, out)
        out.tables[f"cri_variants_{label}"] = table
        taus = kendall_between_rules(table)["kendall_tau"]
        if len(table) < 2 or taus.isna().all():
            out.notes.append(
                f"cri_variants_{label}: Kendall tau between CRI rules not defined "
                f"({len(table)} model(s) with a CRI; needs at least 2 with non-constant CRI)"
            )
            continue
        out.headline[f"cri_rule_kendall_tau_min_{label}"] = float(taus.min())
        out.headline[f"cri_rule_kendall_tau_max_{label}"] = float(taus.max())
        if label in ("1", "100"):
            taus_main.extend(taus.dropna().tolist())
    if taus_main:
        out.headline["cri_rule_kendall_tau_min"] = float(min(taus_main))
        out.headline["cri_rule_kendall_tau_max"] = float(max(taus_main))

    if tr is not None and not measured.empty:
        out.tables["cri_components"] = cri_components(keep, tr)
        out.tables["cri_components_per_pair"] = cri_components_per_pair(keep, tr)
    else:
        out.notes.append("cri_components not computed: needs measured transfer runs at fraction 1.0")


def _check_balance(ind: pd.DataFrame, fraction: float, out: SummaryOutput) -> None:
    key = _source_key(ind)
    rows = ind.loc[fraction_mask(ind, fraction)]
    sets = rows.groupby("model", sort=False)[key].agg(lambda s: frozenset(s))
    if sets.nunique() > 1:
        out.notes.append(
            f"cri_variants_{fraction_label(fraction)}: models were evaluated on different "
            f"{key} sets; each model's auroc / ece_scaled average only its own {key}s"
        )


#: the leaderboard page reads the CRI tables (:func:`prism_plugin.summaries.engine.summary_plugins`)
LEADERBOARD = True


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """CRI tables (§6.1-6.4): ``cri_variants_<pct>`` for every fraction present, ``cri_components``,
    ``cri_components_per_pair``, ``camelyon17_cri_components``; headline Kendall τ ranges between the four CRI
    rules."""
    options = options or {}
    ind, tr = tables.indomain, tables.transfer
    cam_id, cam_tr = tables.camelyon17_indomain, tables.camelyon17_transfer
    if ind is None and cam_id is None and cam_tr is None and tr is None:
        return None
    out = SummaryOutput()
    if ind is not None:
        _summarize_main(ind, tr, options, out)
    elif tr is not None:
        out.notes.append("CRI not computed: transfer runs without in-distribution runs (A_id of §6.1 is missing)")

    if cam_id is not None and cam_tr is not None:
        if not fraction_mask(cam_id, STABILITY_FRACTION).any() or not fraction_mask(cam_tr, STABILITY_FRACTION).any():
            out.notes.append("camelyon17_cri_components not computed: Camelyon17 runs lack fraction 1.0")
        else:
            pairs = ood_pairs(cam_id, cam_tr)
            out.notes.extend(_undefined_pairs_note(pairs, "Camelyon17 transfer"))
            table = camelyon17_cri_components(cam_id, cam_tr)
            if table.empty:
                out.notes.append("camelyon17_cri_components not computed: no transfer pair has an in-distribution source hospital")
            else:
                out.tables["camelyon17_cri_components"] = table
    elif cam_id is not None or cam_tr is not None:
        lacking = "camelyon17_transfer" if cam_tr is None else "camelyon17_indomain"
        out.notes.append(f"camelyon17_cri_components not computed: {lacking} runs are missing")
    return out


__all__ = [
    "AGGREGATIONS", "camelyon17_cri_components", "cri",
    "cri_components", "cri_components_per_pair", "cri_variants", "get_aggregation",
    "kendall_between_rules", "ood_pairs", "ood_stability", "rank_by_cri",
    "resolve_ood_stability", "summarize",
]
