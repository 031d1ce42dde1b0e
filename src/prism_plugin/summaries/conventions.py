"""Conventions shared by the PROTOCOL §6 tables (see :mod:`.decoupling`): dataset and model order,
fraction rounding, ``math.fsum`` seed means, "not defined" notes, rank cells and rank statistics."""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterable, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.errors import PrismError

#: Reference order of the six main datasets (§6.5).
DATASET_ORDER: tuple[str, ...] = ("PCam", "BRACS", "CRC", "MHIST", "LungHist700", "SPIDER-Breast")


AUROC = "auroc"


ECE = "ece_scaled_fixed"


#: Default fractions of the ρ(high) − ρ(low) contrasts (§6.6, §6.9).
CONTRAST_FRACTIONS: tuple[float, float] = (0.01, 1.0)


FRACTION_DECIMALS = 9


# --------------------------------------------------------------------------- helpers
def not_defined(reason: str) -> str:
    """The headline value / note text used when a statistic cannot be computed."""
    return f"not defined: {reason}"


def first_appearance(values: Iterable[Any]) -> list[Any]:
    """Distinct values in order of first appearance."""
    return list(dict.fromkeys(values))


def dataset_order(names: Iterable[Any]) -> list[Any]:
    """Distinct dataset names: the reference datasets in §6.5 order, then others in order of first appearance."""
    return order_like(names, DATASET_ORDER)


def fraction_pct(fraction: float) -> str:
    """Headline-key suffix of a fraction: 0.01 -> ``"1pct"``, 1.0 -> ``"100pct"``."""
    return fraction_label(fraction) + "pct"


def normalise_fractions(values: Any) -> np.ndarray:
    """Fractions as float64 rounded to 9 decimals (the grouping key)."""
    return np.round(np.asarray(values, dtype=float), FRACTION_DECIMALS)


def seed_means(df: pd.DataFrame, keys: Sequence[str], columns: Sequence[str], *, sort: bool = False) -> pd.DataFrame:
    """Per group of ``keys``: the arithmetic mean of each of ``columns`` = ``math.fsum`` of the group's non-NaN
    values (the correctly rounded sum) divided by their number; NaN when none. Rows: groups in order of first
    appearance (``sort=False``) or sorted by key; index = the keys.

    The correctly rounded sum makes the mean independent of row order; it is the convention under which the
    published derived tables are reproduced bit for bit (a plain left-to-right or pandas sum differs in the last
    bit for some cells)."""
    import pandas as pd
    keys = list(keys)
    codes = df.groupby(keys, sort=sort).ngroup().to_numpy()
    valid = codes >= 0  # rows with a NaN key belong to no group
    n_groups = int(codes.max()) + 1 if valid.any() else 0
    _, first = np.unique(codes[valid], return_index=True)
    first_rows = df.loc[valid, keys].iloc[first]
    index = pd.MultiIndex.from_frame(first_rows) if len(keys) > 1 else pd.Index(first_rows[keys[0]], name=keys[0])
    order = np.argsort(codes, kind="stable")
    order = order[valid[order]]
    bounds = np.searchsorted(codes[order], np.arange(n_groups + 1))
    out = {}
    for col in columns:
        x = df[col].to_numpy(dtype=float)[order]
        vals = np.full(n_groups, np.nan)
        for g in range(n_groups):
            chunk = x[bounds[g]:bounds[g + 1]]
            chunk = chunk[~np.isnan(chunk)]
            if chunk.size:
                vals[g] = math.fsum(chunk) / chunk.size
        out[col] = vals
    return pd.DataFrame(out, index=index)


def with_notes(df: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    df.attrs["notes"] = list(notes)
    return df


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise PrismError(f"{what} table lacks column(s) {', '.join(missing)}")


def percentile_ci(values: np.ndarray) -> tuple[float, float]:
    """2.5 / 97.5 percentiles (NumPy linear interpolation) of the non-NaN values; (NaN, NaN) when none are left."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(v, [2.5, 97.5])
    return float(lo), float(hi)


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row-wise Spearman ρ of two (B, n) arrays, bit-identical to ``scipy.stats.spearmanr(x[i], y[i]).statistic``
    for every row.

    Like scipy: average ranks, Pearson correlation of the ranks computed as in ``numpy.corrcoef`` (centred cross
    products scaled by 1/(n−1), then ``cov_xy / sd_y / sd_x``, clipped to [−1, 1]); NaN when n < 2, when a row
    holds a NaN, or when either row is constant.
    """
    from scipy import stats
    x = np.atleast_2d(np.asarray(x, dtype=float))
    y = np.atleast_2d(np.asarray(y, dtype=float))
    if x.shape != y.shape:
        raise ValueError(f"spearman_rows: shapes {x.shape} and {y.shape} differ")
    b, n = x.shape
    out = np.full(b, np.nan)
    if n < 2 or b == 0:
        return out
    bad = np.isnan(x).any(axis=1) | np.isnan(y).any(axis=1)
    bad |= (x == x[:, :1]).all(axis=1) | (y == y[:, :1]).all(axis=1)
    ok = ~bad
    if not ok.any():
        return out
    rx = stats.rankdata(x[ok], axis=1)
    ry = stats.rankdata(y[ok], axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    scale = np.true_divide(1, n - 1)
    cxy = np.einsum("ij,ij->i", rx, ry) * scale
    cxx = np.einsum("ij,ij->i", rx, rx) * scale
    cyy = np.einsum("ij,ij->i", ry, ry) * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        r = cxy / np.sqrt(cyy) / np.sqrt(cxx)
    out[ok] = np.clip(r, -1.0, 1.0)
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """``scipy.stats.spearmanr(x, y).statistic`` without the constant-input warning."""
    from scipy import stats
    if len(x) < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.spearmanr(x, y).statistic)


def kendall(x: Sequence[float], y: Sequence[float]) -> float:
    from scipy import stats
    if len(x) < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.kendalltau(x, y).statistic)


# --------------------------------------------------------------------------- cells
def cell_means(indomain: pd.DataFrame) -> pd.DataFrame:
    """Seed-mean AUROC and ``ece_scaled_fixed`` per (dataset, fraction, model).

    Columns: dataset, fraction, model, auroc, ece_scaled_fixed. Rows: datasets in :func:`dataset_order`, fractions
    ascending, models in CSV order. Cells with a NaN mean are dropped; ``attrs["notes"]`` lists them.
    """
    require_columns(indomain, ["model", "dataset", "fraction", AUROC, ECE], "in-distribution")
    df = indomain[["dataset", "fraction", "model", AUROC, ECE]].copy()
    df["fraction"] = normalise_fractions(df["fraction"])
    means = seed_means(df, ["dataset", "fraction", "model"], [AUROC, ECE]).reset_index()
    notes = []
    nan = means[AUROC].isna() | means[ECE].isna()
    if nan.any():
        dropped = ", ".join(f"{r.model}/{r.dataset}/{r.fraction:g}" for r in means.loc[nan].itertuples())
        notes.append(f"decoupling: cells without a seed-mean AUROC or scaled ECE left out: {dropped}")
        means = means.loc[~nan]
    d_rank = {d: i for i, d in enumerate(dataset_order(indomain["dataset"]))}
    m_rank = {m: i for i, m in enumerate(first_appearance(indomain["model"]))}
    means = means.assign(_d=means["dataset"].map(d_rank), _m=means["model"].map(m_rank))
    means = means.sort_values(["_d", "fraction", "_m"], kind="stable").drop(columns=["_d", "_m"])
    return with_notes(means.reset_index(drop=True), notes)


def within_dataset_ranks(cells: pd.DataFrame) -> pd.DataFrame:
    """Within each (dataset, fraction): rank_auroc = average rank of seed-mean AUROC **descending**, rank_cal =
    average rank of seed-mean ``ece_scaled_fixed`` **ascending** (§6.6). Same row order as ``cells``."""
    from scipy import stats
    out = cells.copy()
    out["rank_auroc"] = np.nan
    out["rank_cal"] = np.nan
    for _, idx in out.groupby(["dataset", "fraction"], sort=False).groups.items():
        out.loc[idx, "rank_auroc"] = stats.rankdata(-out.loc[idx, AUROC].to_numpy(dtype=float))
        out.loc[idx, "rank_cal"] = stats.rankdata(out.loc[idx, ECE].to_numpy(dtype=float))
    return out


def eligible_datasets(ranks: pd.DataFrame, fraction: float, notes: list[str] | None = None) -> list[str]:
    """Datasets with at least 2 ranked models at ``fraction`` (dataset order)."""
    at = ranks.loc[ranks["fraction"] == fraction]
    counts = at.groupby("dataset", sort=False).size()
    keep = [d for d in dataset_order(at["dataset"]) if counts.get(d, 0) >= 2]
    dropped = [d for d in dataset_order(at["dataset"]) if d not in keep]
    if dropped and notes is not None:
        notes.append(f"pooled decoupling at fraction {fraction:g}: datasets with fewer than 2 models left out: "
                     + ", ".join(map(str, dropped)))
    return keep


def contrast_fractions(present: Iterable[float], fractions: Sequence[float]) -> tuple[float, float] | str:
    """(low, high) normalised, or a reason why the contrast is not defined."""
    lo, hi = (float(normalise_fractions(f)) for f in fractions)
    have = set(float(f) for f in present)
    missing = [f for f in (lo, hi) if f not in have]
    if missing:
        return f"fraction(s) {', '.join(f'{f:g}' for f in missing)} not in the in-distribution table"
    if lo == hi:
        return "the two contrast fractions are equal"
    return lo, hi


#: Reference display order of the eight PRISM models.
MODEL_ORDER: tuple[str, ...] = (
    "CLIP", "PLIP", "CONCH", "VIRCHOW2", "UNI", "GigaPath", "H-Optimus-0", "MIDNIGHT",
)


FRACTION_ATOL = 1e-9


# --------------------------------------------------------------------------- helpers
def order_like(values: Iterable[Any], reference: Iterable[Any]) -> list[Any]:
    """Distinct ``values``: those named in ``reference`` in reference order, then the rest in order of first
    appearance."""
    seen = first_appearance(values)
    ref = [r for r in reference if r in seen]
    return ref + [v for v in seen if v not in ref]


def model_order(models: Iterable[Any]) -> list[Any]:
    """Models in the reference display order, then others by first appearance."""
    return order_like(models, MODEL_ORDER)


def fraction_mask(df: pd.DataFrame, fraction: float) -> pd.Series:
    """Boolean mask of the rows of ``df`` whose ``fraction`` equals ``fraction``."""
    import pandas as pd
    return pd.Series(
        np.isclose(df["fraction"].astype(float).to_numpy(), float(fraction), rtol=0.0, atol=FRACTION_ATOL),
        index=df.index,
    )


def fraction_label(fraction: float) -> str:
    """File-stem suffix of a fraction in percent: 0.01 -> ``1``, 0.1 -> ``10``, 1.0 -> ``100``."""
    return f"{round(float(fraction) * 100.0, 6):g}"


def fractions_present(df: pd.DataFrame) -> list[float]:
    """Distinct fractions of ``df``, ascending, with near-equal values merged."""
    import pandas as pd
    out: list[float] = []
    for f in sorted(float(x) for x in pd.unique(df["fraction"].dropna())):
        if not out or abs(f - out[-1]) > FRACTION_ATOL:
            out.append(f)
    return out
