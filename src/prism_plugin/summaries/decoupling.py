"""Decoupling of discrimination and calibration rankings (PROTOCOL §6.5-6.9).

Every function reads the in-distribution per-run table (results_v2 schema: ``model``, ``dataset``, ``fraction``,
``seed``, ``auroc``, ``ece_scaled_fixed``) and follows these conventions exactly:

* **Cell value** = seed mean (:func:`seed_means`): the correctly rounded sum (``math.fsum``) of the runs of one
  (dataset, fraction, model) divided by their number (NaN runs skipped). A cell whose mean AUROC or mean
  ``ece_scaled_fixed`` is NaN is left out (with a note).
* **Fractions** are compared after rounding to 9 decimals, so ``0.1`` and ``0.1000000001`` are one fraction; they
  are processed in ascending order.
* **Dataset order** (:func:`dataset_order`): PCam, BRACS, CRC, MHIST, LungHist700, SPIDER-Breast for those names,
  then any other dataset in order of first appearance. Where the protocol says *alphabetical* (the §6.6 contrast,
  the rows of §6.7) Python's ``sorted`` (code-point order) is used.
* **Model order** = order of first appearance in the per-run table ("CSV order"; alphabetical by key in the
  reference). It fixes which bootstrap index means which model, so it matters for bit-reproducibility.
* **Seed order** (§6.9) = order of first appearance in the per-run table (42, 123, 456 in the reference).
* **Ranks**: average ranks for ties (``scipy.stats.rankdata``). AUROC is ranked descending (rank 1 = best
  discrimination), ``ece_scaled_fixed`` ascending (rank 1 = best calibration). Spearman ρ between AUROC and −ECE
  (§6.5) equals Spearman ρ between these two rank vectors.
* **Spearman** is ``scipy.stats.spearmanr(x, y).statistic``; :func:`spearman_rows` is a vectorised, bit-identical
  version (NaN for a constant input, as scipy). **Kendall** is ``scipy.stats.kendalltau`` (τ-b).
* **Percentile intervals**: ``numpy.percentile(values, [2.5, 97.5])`` (linear interpolation) over the bootstrap
  values that are not NaN.
* **Random numbers**: a fresh ``numpy.random.default_rng(seed)`` per quantity, consumed in the exact order of the
  protocol. Batched draws (``rng.integers(0, n, size=(B, n))``) are used only where they produce the same stream as
  the protocol's one-call-per-iteration loop (NumPy's bit generators buffer at the generator level, so splitting a
  run of equal-bound integer draws into calls does not change the values); the tests check this against the literal
  loops.
* **"Not defined"**: a statistic that cannot be computed (fewer than 3 models, fewer than 2 datasets, a fraction
  missing, a constant input) is NaN in its table row, and a one-line note starting ``"not defined"`` says why;
  headline values that cannot be computed are the string ``"not defined: <reason>"``.

Here: :func:`rank_correlations` (§6.5), :func:`pooled_rank_correlations` and :func:`pooled_contrast` (§6.6),
:func:`wilcoxon_contrast` (§6.6), :func:`rank_diff_by_fraction` (§6.7), :func:`rank_heterogeneity` (§6.8),
:func:`decoupling_summary`; §6.9 is in :mod:`.decoupling_seeds`, the shared helpers
(:func:`~.conventions.seed_means`, :func:`~.conventions.cell_means`, ...) in :mod:`.conventions`. Tables that carry
notes keep them in ``DataFrame.attrs["notes"]``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.hookspecs import hookimpl
from prism_plugin.summaries.conventions import (
    AUROC, CONTRAST_FRACTIONS, ECE, cell_means, contrast_fractions, dataset_order, eligible_datasets, fraction_pct,
    kendall, normalise_fractions, not_defined, percentile_ci, spearman, spearman_rows, with_notes,
    within_dataset_ranks,
)
from prism_plugin.summaries.decoupling_seeds import rank_correlations_seedlevel, seedlevel_contrast
from prism_plugin.tables import RunTables, SummaryOutput

N_BOOT_MODEL = 2000     # §6.5
N_BOOT_CLUSTER = 5000   # §6.6

RANK_CORRELATION_COLUMNS = ["dataset", "fraction", "n_models", "spearman", "kendall", "ci_lo", "ci_hi"]
POOLED_COLUMNS = ["fraction", "n_datasets", "n_pairs", "rho", "ci_lo", "ci_hi"]
HETEROGENEITY_COLUMNS = ["fraction", "n_datasets", "rho", "ci_lo", "ci_hi", "tau2", "i2", "q", "note"]


# --------------------------------------------------------------------------- §6.5
def _model_bootstrap(a: np.ndarray, e: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """§6.5 bootstrap values: ``default_rng(seed)``; ``n_boot`` draws of ``integers(0, n, n)``; a draw whose AUROC*
    has < 3 distinct values is skipped; ρ = Spearman(AUROC*, −ECE*); NaN values dropped."""
    n = len(a)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))  # == n_boot calls of integers(0, n, n)
    ab = a[idx]
    eb = e[idx]
    s = np.sort(ab, axis=1)
    distinct = 1 + (np.diff(s, axis=1) != 0).sum(axis=1)
    keep = distinct >= 3
    rho = spearman_rows(ab[keep], -eb[keep])
    return rho[~np.isnan(rho)]


def rank_correlations(indomain: pd.DataFrame, *, n_boot: int = N_BOOT_MODEL, seed: int = 0) -> pd.DataFrame:
    """``rank_correlations`` (§6.5): per dataset × fraction, Spearman ρ and Kendall τ-b between seed-mean AUROC and
    −``ece_scaled_fixed`` across models (CSV order), with a model-bootstrap percentile CI.

    Bootstrap: a fresh ``default_rng(seed)`` (0) for every (dataset, fraction); ``n_boot`` (2,000) iterations, each
    ``rng.integers(0, n_models, n_models)`` model indices with replacement; a draw whose resampled AUROC vector has
    fewer than 3 distinct values is skipped (the draw still consumes the RNG); Spearman(AUROC*, −ECE*); NaN
    dropped; ci_lo / ci_hi = 2.5 / 97.5 percentiles.

    Columns: dataset, fraction, n_models, spearman, kendall, ci_lo, ci_hi. Rows: datasets in :func:`dataset_order`,
    fractions ascending. With fewer than 3 models every statistic of the row is NaN ("not defined").
    """
    import pandas as pd
    cells = cell_means(indomain)
    notes = list(cells.attrs.get("notes", []))
    rows = []
    for (dataset, fraction), cell in cells.groupby(["dataset", "fraction"], sort=False):
        a = cell[AUROC].to_numpy(dtype=float)
        e = cell[ECE].to_numpy(dtype=float)
        n = len(a)
        row = {"dataset": dataset, "fraction": float(fraction), "n_models": n,
               "spearman": np.nan, "kendall": np.nan, "ci_lo": np.nan, "ci_hi": np.nan}
        where = f"rank_correlations {dataset} at fraction {fraction:g}"
        if n < 3:
            notes.append(f"{where}: {not_defined(f'{n} model(s), a rank correlation needs at least 3')}")
            rows.append(row)
            continue
        row["spearman"] = spearman(a, -e)
        row["kendall"] = kendall(a, -e)
        if math.isnan(row["spearman"]):
            notes.append(f"{where}: {not_defined('AUROC or scaled ECE is constant across models')}")
        boot = _model_bootstrap(a, e, n_boot, seed)
        row["ci_lo"], row["ci_hi"] = percentile_ci(boot)
        if boot.size == 0:
            notes.append(f"{where}: CI {not_defined('no bootstrap draw had 3 distinct AUROC values and a defined rho')}")
        rows.append(row)
    out = pd.DataFrame(rows, columns=RANK_CORRELATION_COLUMNS)
    out["n_models"] = out["n_models"].astype(int)
    return with_notes(out, notes)


# --------------------------------------------------------------------------- §6.6
def _rank_blocks(ranks: pd.DataFrame, fraction: float, datasets: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(rank_auroc, rank_cal) arrays of each dataset at ``fraction``, in ``datasets`` order."""
    at = ranks.loc[ranks["fraction"] == fraction]
    blocks = []
    for d in datasets:
        sub = at.loc[at["dataset"] == d]
        blocks.append((sub["rank_auroc"].to_numpy(dtype=float), sub["rank_cal"].to_numpy(dtype=float)))
    return blocks


def _pooled_rho(blocks: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """Spearman over the pooled rank pairs; NaN with fewer than 3 pairs."""
    if sum(len(b[0]) for b in blocks) < 3:
        return float("nan")
    ra = np.concatenate([b[0] for b in blocks])
    rc = np.concatenate([b[1] for b in blocks])
    return spearman(ra, rc)


def _cluster_rhos(blocks: Sequence[tuple[np.ndarray, np.ndarray]], draws: np.ndarray) -> np.ndarray:
    """Pooled Spearman ρ of the stacked blocks named by each row of ``draws``."""
    sizes = {len(b[0]) for b in blocks}
    if len(sizes) == 1:
        ra = np.stack([b[0] for b in blocks])  # (k, n)
        rc = np.stack([b[1] for b in blocks])
        b_ = draws.shape[0]
        return spearman_rows(ra[draws].reshape(b_, -1), rc[draws].reshape(b_, -1))
    return np.array([_pooled_rho([blocks[j] for j in row]) for row in draws], dtype=float)


def pooled_rank_correlations(indomain: pd.DataFrame, *, n_boot: int = N_BOOT_CLUSTER, seed: int = 0) -> pd.DataFrame:
    """Pooled decoupling ρ with a dataset-cluster bootstrap, per fraction (§6.6).

    Within each dataset the seed-mean AUROCs are ranked descending and the seed-mean ``ece_scaled_fixed`` ascending
    (average ranks); the (rank_auroc, rank_cal) pairs of all datasets (≥ 2 models each) are pooled and ρ = Spearman
    over the pool. CI: a fresh ``default_rng(seed)`` (0) per fraction; ``n_boot`` (5,000) iterations, each
    ``rng.choice(datasets, k)`` with replacement from the k datasets in :func:`dataset_order`; the drawn datasets'
    rank pairs are stacked (a dataset drawn twice appears twice) and Spearman taken; 2.5 / 97.5 percentiles. Not
    saved as a CSV by the hook; its numbers go to the headline.

    Columns: fraction, n_datasets, n_pairs, rho, ci_lo, ci_hi.
    """
    import pandas as pd
    ranks = within_dataset_ranks(cell_means(indomain))
    notes = list(ranks.attrs.get("notes", []))
    rows = []
    for fraction in sorted(ranks["fraction"].unique()):
        datasets = eligible_datasets(ranks, fraction, notes)
        blocks = _rank_blocks(ranks, fraction, datasets)
        k = len(blocks)
        n_pairs = int(sum(len(b[0]) for b in blocks))
        rho = _pooled_rho(blocks)
        lo = hi = float("nan")
        where = f"pooled decoupling at fraction {fraction:g}"
        if math.isnan(rho):
            notes.append(f"{where}: {not_defined(f'{n_pairs} pooled rank pair(s) (at least 3 needed) or a constant rank vector')}")
        if k < 2:
            notes.append(f"{where}: cluster CI {not_defined(f'{k} dataset(s), resampling datasets needs at least 2')}")
        else:
            rng = np.random.default_rng(seed)
            draws = rng.choice(np.arange(k), size=(n_boot, k))  # == n_boot calls of choice(datasets, k)
            lo, hi = percentile_ci(_cluster_rhos(blocks, draws))
        rows.append({"fraction": float(fraction), "n_datasets": k, "n_pairs": n_pairs,
                     "rho": rho, "ci_lo": lo, "ci_hi": hi})
    return with_notes(pd.DataFrame(rows, columns=POOLED_COLUMNS), notes)


def pooled_contrast(
    indomain: pd.DataFrame,
    *,
    fractions: Sequence[float] = CONTRAST_FRACTIONS,
    n_boot: int = N_BOOT_CLUSTER,
    seed: int = 1,
) -> dict[str, Any]:
    """Contrast pooled ρ(high) − pooled ρ(low) with a shared cluster bootstrap (§6.6).

    ``fractions`` = (low, high), default (0.01, 1.0). Datasets: those with ≥ 2 models at both fractions, in
    **alphabetical** order. Observed difference = pooled ρ(high) − pooled ρ(low) over those datasets. CI:
    ``default_rng(seed)`` (1); ``n_boot`` (5,000) iterations, each ``rng.choice(datasets, k)``; the same drawn
    datasets are pooled at both fractions and the difference of the two Spearman ρ's kept; 2.5 / 97.5 percentiles
    of the (non-NaN) differences. Returns ``{"rho_low", "rho_high", "delta", "ci_lo", "ci_hi", "n_datasets",
    "fractions"}``, or ``{"not_defined": reason}``.
    """
    ranks = within_dataset_ranks(cell_means(indomain))
    pair = contrast_fractions(ranks["fraction"].unique(), fractions)
    if isinstance(pair, str):
        return {"not_defined": pair}
    lo_f, hi_f = pair
    common = set(eligible_datasets(ranks, lo_f)) & set(eligible_datasets(ranks, hi_f))
    datasets = sorted(common)
    k = len(datasets)
    if k < 2:
        return {"not_defined": f"{k} dataset(s) measured at both fractions; the cluster bootstrap needs at least 2"}
    b_lo = _rank_blocks(ranks, lo_f, datasets)
    b_hi = _rank_blocks(ranks, hi_f, datasets)
    rho_lo, rho_hi = _pooled_rho(b_lo), _pooled_rho(b_hi)
    rng = np.random.default_rng(seed)
    draws = rng.choice(np.arange(k), size=(n_boot, k))
    diffs = _cluster_rhos(b_hi, draws) - _cluster_rhos(b_lo, draws)
    ci_lo, ci_hi = percentile_ci(diffs)
    return {"rho_low": rho_lo, "rho_high": rho_hi, "delta": rho_hi - rho_lo, "ci_lo": ci_lo,
            "ci_hi": ci_hi, "n_datasets": k, "fractions": (lo_f, hi_f)}


def wilcoxon_contrast(rank_corr: pd.DataFrame, *, fractions: Sequence[float] = CONTRAST_FRACTIONS) -> dict[str, Any]:
    """Wilcoxon signed-rank test of the per-dataset §6.5 ρ at high vs low (§6.6).

    ``scipy.stats.wilcoxon(rho_high, rho_low)`` with scipy's defaults (two-sided, zero_method "wilcox", exact
    distribution for small samples without ties) over the datasets with a defined ρ at both fractions. Returns
    ``{"W", "p", "n_datasets"}`` or ``{"not_defined": reason}``.
    """
    from scipy import stats
    rc = rank_corr.copy()
    rc["fraction"] = normalise_fractions(rc["fraction"])
    pair = contrast_fractions(rc["fraction"].unique(), fractions)
    if isinstance(pair, str):
        return {"not_defined": pair}
    lo_f, hi_f = pair
    lo = rc.loc[rc["fraction"] == lo_f].set_index("dataset")["spearman"].dropna()
    hi = rc.loc[rc["fraction"] == hi_f].set_index("dataset")["spearman"].dropna()
    datasets = [d for d in dataset_order(rc["dataset"]) if d in lo.index and d in hi.index]
    if not datasets:
        return {"not_defined": "no dataset has a defined rho at both fractions"}
    x = hi.loc[datasets].to_numpy(dtype=float)
    y = lo.loc[datasets].to_numpy(dtype=float)
    if np.all(x == y):
        return {"not_defined": "all per-dataset differences are zero"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.wilcoxon(x, y)
    except ValueError as exc:
        return {"not_defined": f"wilcoxon failed ({exc})"}
    return {"W": float(res.statistic), "p": float(res.pvalue), "n_datasets": len(datasets)}


# --------------------------------------------------------------------------- §6.7
def rank_diff_by_fraction(indomain: pd.DataFrame) -> pd.DataFrame:
    """``rank_diff_by_fraction`` (§6.7): mean over models of |rank_auroc − rank_cal| (the §6.6 within-dataset
    ranks) per (dataset, fraction).

    One row per dataset in **alphabetical** order, first column ``dataset``, then one column per fraction
    ascending, named ``str(fraction)`` ("0.01", "0.05", "0.1", …, "1.0"); NaN where a dataset lacks the fraction.
    """
    import pandas as pd
    ranks = within_dataset_ranks(cell_means(indomain))
    notes = list(ranks.attrs.get("notes", []))
    ranks["absdiff"] = (ranks["rank_auroc"] - ranks["rank_cal"]).abs()
    means = ranks.groupby(["dataset", "fraction"], sort=False)["absdiff"].mean()
    fractions = sorted(ranks["fraction"].unique())
    datasets = sorted(ranks["dataset"].unique())
    data: dict[str, list[Any]] = {"dataset": datasets}
    for f in fractions:
        data[str(float(f))] = [float(means.get((d, f), np.nan)) for d in datasets]
    out = pd.DataFrame(data)
    missing = [(d, f) for d in datasets for f in fractions if (d, f) not in means.index]
    if missing:
        notes.append("rank_diff_by_fraction: " + not_defined(
            "no cells for " + ", ".join(f"{d} at {f:g}" for d, f in missing)))
    return with_notes(out, notes)


# --------------------------------------------------------------------------- §6.8
def rank_heterogeneity(rank_corr: pd.DataFrame, *, clip: float = 0.999) -> pd.DataFrame:
    """DerSimonian–Laird random-effects pooling of the per-dataset §6.5 ρ (§6.8).

    Per fraction, over the datasets with a defined ρ and n_models > 3: z_i = atanh(clip(ρ_i, −0.999, 0.999)); v_i =
    1/(n_models_i − 3); w_i = 1/v_i; μ_FE = Σwz/Σw; Q = Σw(z − μ_FE)²; df = k − 1; C = Σw − Σw²/Σw; τ² = max(0, (Q
    − df)/C); w*_i = 1/(v_i + τ²); μ = Σw*z/Σw*; se = √(1/Σw*); rho = tanh(μ), ci_lo/ci_hi = tanh(μ ∓ 1.96 se); i2
    = max(0, (Q − df)/Q)·100 (0 when Q = 0). Needs k ≥ 2.

    Columns: fraction, n_datasets, rho, ci_lo, ci_hi, tau2, i2, q, note (empty, or "not defined: …").
    """
    import pandas as pd
    rc = rank_corr.copy()
    rc["fraction"] = normalise_fractions(rc["fraction"])
    rows = []
    for fraction in sorted(rc["fraction"].unique()):
        at = rc.loc[(rc["fraction"] == fraction) & rc["spearman"].notna() & (rc["n_models"] > 3)]
        k = len(at)
        row = {"fraction": float(fraction), "n_datasets": k, "rho": np.nan, "ci_lo": np.nan,
               "ci_hi": np.nan, "tau2": np.nan, "i2": np.nan, "q": np.nan, "note": ""}
        if k < 2:
            row["note"] = not_defined(f"{k} dataset(s) with a defined rho and more than 3 models; "
                                      "heterogeneity needs at least 2")
            rows.append(row)
            continue
        z = np.arctanh(np.clip(at["spearman"].to_numpy(dtype=float), -clip, clip))
        v = 1.0 / (at["n_models"].to_numpy(dtype=float) - 3.0)
        w = 1.0 / v
        mu_fe = np.sum(w * z) / np.sum(w)
        q = float(np.sum(w * (z - mu_fe) ** 2))
        df = k - 1
        c = np.sum(w) - np.sum(w ** 2) / np.sum(w)
        tau2 = max(0.0, (q - df) / c)
        ws = 1.0 / (v + tau2)
        mu = np.sum(ws * z) / np.sum(ws)
        se = math.sqrt(1.0 / np.sum(ws))
        row.update(rho=math.tanh(mu), ci_lo=math.tanh(mu - 1.96 * se), ci_hi=math.tanh(mu + 1.96 * se),
                   tau2=float(tau2), i2=(max(0.0, (q - df) / q) * 100.0 if q > 0 else 0.0), q=q)
        rows.append(row)
    return pd.DataFrame(rows, columns=HETEROGENEITY_COLUMNS)


# --------------------------------------------------------------------------- hook
def _contrast_option(options: Mapping[str, Any]) -> tuple[float, float]:
    value = options.get("contrast_fractions", CONTRAST_FRACTIONS) if options else CONTRAST_FRACTIONS
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise PrismError(f"option contrast_fractions: {value!r} is not a pair of fractions, e.g. [0.01, 1.0]") from None
    return lo, hi


def _headline_contrast(headline: dict[str, Any], notes: list[str], prefix: str, result: Mapping[str, Any],
                       keys: Sequence[str]) -> None:
    if "not_defined" in result:
        text = not_defined(result["not_defined"])
        headline[prefix] = text
        notes.append(f"{prefix}: {text}")
        return
    for k in keys:
        headline[f"{prefix}_{k}" if k != "delta" else prefix] = result[k]


def decoupling_summary(tables: RunTables, options: Mapping[str, Any] | None = None) -> SummaryOutput | None:
    """All of §6.5-6.9 from ``tables.indomain``: tables ``rank_correlations``, ``rank_correlations_seedlevel``,
    ``rank_diff_by_fraction``, ``rank_correlation_heterogeneity`` and the headline numbers (pooled ρ and cluster CI
    per fraction, the pooled contrast, Wilcoxon W/p, I² / τ² / random-effects ρ per fraction, seed-level ρ per
    fraction and contrast). ``None`` when there is no in-distribution table.

    Headline keys (``<pct>`` = :func:`fraction_pct`, e.g. ``1pct``): ``decoupling_pooled_rho_<pct>`` (+ ``_ci_lo``
    / ``_ci_hi``); ``decoupling_pooled_contrast`` (+ ``_ci_lo``, ``_ci_hi``, ``_n_datasets``);
    ``decoupling_wilcoxon_W``, ``_p``, ``_n_datasets``; ``decoupling_i2_<pct>``, ``decoupling_tau2_<pct>``,
    ``decoupling_re_rho_<pct>``; ``decoupling_seedlevel_rho_<pct>``; ``decoupling_seedlevel_contrast`` (+
    ``_ci_lo``, ``_ci_hi``, ``_n_datasets``). A quantity that is not defined has the string ``"not defined:
    <reason>"`` under its main key (``decoupling_pooled_contrast``, ``decoupling_wilcoxon``, …).

    Option ``contrast_fractions`` (default ``[0.01, 1.0]``) picks the (low, high) fractions of the contrasts and of
    the Wilcoxon test.
    """
    indomain = tables.indomain
    if indomain is None:
        return None
    options = options or {}
    frac_pair = _contrast_option(options)
    out = SummaryOutput()
    notes = out.notes
    headline = out.headline

    rc = rank_correlations(indomain)
    notes.extend(rc.attrs.get("notes", []))
    out.tables["rank_correlations"] = rc

    seedlevel = rank_correlations_seedlevel(indomain)
    notes.extend(n for n in seedlevel.attrs.get("notes", []) if n not in notes)
    out.tables["rank_correlations_seedlevel"] = seedlevel

    rdiff = rank_diff_by_fraction(indomain)
    notes.extend(n for n in rdiff.attrs.get("notes", []) if n not in notes)
    out.tables["rank_diff_by_fraction"] = rdiff

    het = rank_heterogeneity(rc)
    out.tables["rank_correlation_heterogeneity"] = het
    for r in het.itertuples():
        pct = fraction_pct(r.fraction)
        if r.note:
            headline[f"decoupling_i2_{pct}"] = r.note
            notes.append(f"rank_correlation_heterogeneity at fraction {r.fraction:g}: {r.note}")
            continue
        headline[f"decoupling_i2_{pct}"] = r.i2
        headline[f"decoupling_tau2_{pct}"] = r.tau2
        headline[f"decoupling_re_rho_{pct}"] = r.rho

    pooled = pooled_rank_correlations(indomain)
    notes.extend(n for n in pooled.attrs.get("notes", []) if n not in notes)
    for r in pooled.itertuples():
        pct = fraction_pct(r.fraction)
        headline[f"decoupling_pooled_rho_{pct}"] = r.rho if not math.isnan(r.rho) else not_defined(
            "pooled rank pairs constant or too few")
        if not math.isnan(r.ci_lo):
            headline[f"decoupling_pooled_rho_{pct}_ci_lo"] = r.ci_lo
            headline[f"decoupling_pooled_rho_{pct}_ci_hi"] = r.ci_hi

    _headline_contrast(headline, notes, "decoupling_pooled_contrast", pooled_contrast(indomain, fractions=frac_pair),
                       ("delta", "ci_lo", "ci_hi", "n_datasets"))
    _headline_contrast(headline, notes, "decoupling_wilcoxon", wilcoxon_contrast(rc, fractions=frac_pair),
                       ("W", "p", "n_datasets"))
    for r in seedlevel.itertuples():
        headline[f"decoupling_seedlevel_rho_{fraction_pct(r.fraction)}"] = (
            r.rho if not math.isnan(r.rho) else not_defined("see notes"))
    _headline_contrast(headline, notes, "decoupling_seedlevel_contrast",
                       seedlevel_contrast(indomain, fractions=frac_pair), ("delta", "ci_lo", "ci_hi", "n_datasets"))
    return out


@hookimpl
def summarize(tables: RunTables, options: Mapping[str, Any]) -> SummaryOutput | None:
    """PROTOCOL §6.5-6.9 (see :func:`decoupling_summary`)."""
    return decoupling_summary(tables, options)
