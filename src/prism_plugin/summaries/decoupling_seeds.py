"""Seed-level rank decoupling (PROTOCOL §6.9): ρ over (dataset, seed) draws and its contrast.

Conventions as in :mod:`.conventions`."""

from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.summaries.conventions import (
    AUROC, CONTRAST_FRACTIONS, ECE, cell_means, contrast_fractions, dataset_order, first_appearance,
    normalise_fractions, not_defined, percentile_ci, spearman, spearman_rows, with_notes,
)

N_BOOT_SEED = 2000
SEEDLEVEL_COLUMNS = ["fraction", "rho", "ci_lo", "ci_hi"]


class _SeedGrid:
    """Per-run AUROC / ECE at one fraction as arrays, for the §6.9 bootstrap."""

    def __init__(self, indomain: pd.DataFrame, fraction: float, datasets: Sequence[str],
                 models: Sequence[str], seeds: Sequence[Any]):
        at = indomain.loc[normalise_fractions(indomain["fraction"]) == fraction]
        runs = at.groupby(["dataset", "model", "seed"], sort=False)[[AUROC, ECE]].mean()
        self.datasets = list(datasets)
        self.models = {d: [m for m in models if any((d, m, s) in runs.index for s in seeds)] for d in datasets}
        self.seeds = list(seeds)
        self.missing: list[str] = []
        self.auroc: list[np.ndarray] = []
        self.ece: list[np.ndarray] = []
        for d in self.datasets:
            a = np.full((len(self.models[d]), len(self.seeds)), np.nan)
            e = np.full_like(a, np.nan)
            for i, m in enumerate(self.models[d]):
                for j, s in enumerate(self.seeds):
                    if (d, m, s) in runs.index:
                        a[i, j], e[i, j] = runs.loc[(d, m, s)]
                    else:
                        self.missing.append(f"{m}/{d}/seed {s}")
            self.auroc.append(a)
            self.ece.append(e)
        self.offsets = np.cumsum([0] + [len(self.models[d]) for d in self.datasets])

    @property
    def n_draws(self) -> int:
        return int(self.offsets[-1])

    def pooled(self, ds_idx: np.ndarray, seed_idx: np.ndarray) -> np.ndarray:
        """Bootstrap ρ for draws ``ds_idx`` (B, k) and ``seed_idx`` (B, Σ models)."""
        from scipy import stats
        sizes = {len(self.models[d]) for d in self.datasets}
        b = ds_idx.shape[0]
        if len(sizes) == 1:
            n = sizes.pop()
            k = len(self.datasets)
            a = np.stack(self.auroc)  # (k, n, S)
            e = np.stack(self.ece)
            s = seed_idx.reshape(b, k, n)
            dd = np.arange(k)[None, :, None]
            mm = np.arange(n)[None, None, :]
            sel_a = a[dd, mm, s]  # (B, k, n): every dataset's chosen run
            sel_e = e[dd, mm, s]
            rows = np.arange(b)[:, None]
            dra = sel_a[rows, ds_idx]  # (B, k, n): the drawn datasets
            dre = sel_e[rows, ds_idx]
            ra = stats.rankdata(-dra, axis=2).reshape(b, -1)
            rc = stats.rankdata(dre, axis=2).reshape(b, -1)
            return spearman_rows(ra, rc)
        out = np.empty(b)
        for i in range(b):
            ra, rc = [], []
            for j in ds_idx[i]:
                d = self.datasets[j]
                cols = seed_idx[i, self.offsets[j]:self.offsets[j + 1]]
                rr = np.arange(len(self.models[d]))
                ra.append(stats.rankdata(-self.auroc[j][rr, cols]))
                rc.append(stats.rankdata(self.ece[j][rr, cols]))
            out[i] = spearman(np.concatenate(ra), np.concatenate(rc))
        return out


def seedlevel_draws(rng: np.random.Generator, n_datasets: int, n_seed_draws: int, n_seeds: int,
                    n_boot: int) -> tuple[np.ndarray, np.ndarray]:
    """The §6.9 draws, in the protocol's RNG order: per iteration (1) ``rng.choice(datasets, n_datasets)`` then (2)
    ``n_seed_draws`` single ``rng.choice(seeds)`` calls (datasets outer, models inner). Returned as indices:
    (n_boot, n_datasets) and (n_boot, n_seed_draws)."""
    ds_idx = np.empty((n_boot, n_datasets), dtype=np.int64)
    seed_idx = np.empty((n_boot, n_seed_draws), dtype=np.int64)
    for i in range(n_boot):
        ds_idx[i] = rng.integers(0, n_datasets, n_datasets)
        seed_idx[i] = rng.integers(0, n_seeds, n_seed_draws)
    return ds_idx, seed_idx


def _seed_grid_or_reason(indomain: pd.DataFrame, fraction: float, datasets: Sequence[str]) -> _SeedGrid | str:
    if "seed" not in indomain.columns:
        return "the in-distribution table has no 'seed' column"
    models = first_appearance(indomain["model"])
    seeds = first_appearance(indomain["seed"])
    if len(datasets) < 2:
        return f"{len(datasets)} dataset(s); the dataset bootstrap needs at least 2"
    grid = _SeedGrid(indomain, fraction, datasets, models, seeds)
    if grid.missing:
        shown = ", ".join(grid.missing[:5]) + (" …" if len(grid.missing) > 5 else "")
        return f"runs missing from the model × seed grid ({shown})"
    bad = [d for d in grid.datasets if len(grid.models[d]) < 2]
    if bad:
        return f"fewer than 2 models in {', '.join(map(str, bad))}"
    if any(np.isnan(a).any() or np.isnan(e).any() for a, e in zip(grid.auroc, grid.ece)):
        return "a run has a NaN AUROC or scaled ECE"
    return grid


def rank_correlations_seedlevel(indomain: pd.DataFrame, *, n_boot: int = N_BOOT_SEED, seed: int = 0) -> pd.DataFrame:
    """``rank_correlations_seedlevel`` (§6.9): seed-level dataset bootstrap per fraction.

    A fresh ``default_rng(seed)`` (0) per fraction; ``n_boot`` (2,000) iterations; per iteration, in this RNG
    order: (1) ``rng.choice(datasets, k)`` with the k datasets of the fraction in :func:`dataset_order`; (2) for
    every dataset of the *full* list and every model in CSV order, one ``rng.choice(seeds)`` (seeds in order of
    first appearance); (3) for each drawn dataset, the run with the chosen seed per model; AUROC ranked descending
    and ``ece_scaled_fixed`` ascending within the dataset; pooled; Spearman. **rho = mean of the bootstrap ρ's**
    (not a point estimate); ci_lo / ci_hi = 2.5 / 97.5 percentiles; NaN ρ's are dropped. Needs at least 2 datasets,
    at least 2 models per dataset and every (dataset, model, seed) run of the fraction; otherwise the row is NaN
    ("not defined", with a note).

    Columns: fraction, rho, ci_lo, ci_hi.
    """
    import pandas as pd
    cells = cell_means(indomain)
    notes = list(cells.attrs.get("notes", []))
    rows = []
    for fraction in sorted(cells["fraction"].unique()):
        datasets = dataset_order(cells.loc[cells["fraction"] == fraction, "dataset"])
        grid = _seed_grid_or_reason(indomain, fraction, datasets)
        row = {"fraction": float(fraction), "rho": np.nan, "ci_lo": np.nan, "ci_hi": np.nan}
        if isinstance(grid, str):
            notes.append(f"rank_correlations_seedlevel at fraction {fraction:g}: {not_defined(grid)}")
            rows.append(row)
            continue
        rng = np.random.default_rng(seed)
        ds_idx, seed_idx = seedlevel_draws(rng, len(grid.datasets), grid.n_draws, len(grid.seeds), n_boot)
        rho = grid.pooled(ds_idx, seed_idx)
        rho = rho[~np.isnan(rho)]
        if rho.size == 0:
            notes.append(f"rank_correlations_seedlevel at fraction {fraction:g}: "
                         + not_defined("every bootstrap rho was NaN"))
        else:
            row["rho"] = float(np.mean(rho))
            row["ci_lo"], row["ci_hi"] = percentile_ci(rho)
        rows.append(row)
    return with_notes(pd.DataFrame(rows, columns=SEEDLEVEL_COLUMNS), notes)


def seedlevel_contrast(
    indomain: pd.DataFrame,
    *,
    fractions: Sequence[float] = CONTRAST_FRACTIONS,
    n_boot: int = N_BOOT_SEED,
    seed: int = 1,
) -> dict[str, Any]:
    """Seed-level contrast ρ(high) − ρ(low) (§6.9; README's Δρ = 0.62 [0.08, 1.13]).

    ``default_rng(seed)`` (1); ``n_boot`` (2,000) iterations; one (datasets, seeds) draw per iteration, in the §6.9
    RNG order, shared by both fractions (datasets measured at both, in :func:`dataset_order`; models per dataset =
    those measured at both, CSV order). Reported ``delta`` = **mean of the differences**; ci = 2.5 / 97.5
    percentiles. Returns ``{"delta", "ci_lo", "ci_hi", "n_datasets", "fractions"}`` or ``{"not_defined": reason}``.
    """
    cells = cell_means(indomain)
    pair = contrast_fractions(cells["fraction"].unique(), fractions)
    if isinstance(pair, str):
        return {"not_defined": pair}
    lo_f, hi_f = pair
    at_lo = cells.loc[cells["fraction"] == lo_f]
    at_hi = cells.loc[cells["fraction"] == hi_f]
    datasets = [d for d in dataset_order(cells["dataset"])
                if d in set(at_lo["dataset"]) and d in set(at_hi["dataset"])]
    if not datasets:
        return {"not_defined": "no dataset is measured at both fractions"}
    both = indomain.loc[indomain["model"].isin(set(at_lo["model"]) & set(at_hi["model"]))]
    g_lo = _seed_grid_or_reason(both, lo_f, datasets)
    g_hi = _seed_grid_or_reason(both, hi_f, datasets)
    for g in (g_lo, g_hi):
        if isinstance(g, str):
            return {"not_defined": g}
    if g_lo.models != g_hi.models or g_lo.seeds != g_hi.seeds:
        return {"not_defined": "the model or seed grids differ between the two fractions"}
    rng = np.random.default_rng(seed)
    ds_idx, seed_idx = seedlevel_draws(rng, len(datasets), g_lo.n_draws, len(g_lo.seeds), n_boot)
    diffs = g_hi.pooled(ds_idx, seed_idx) - g_lo.pooled(ds_idx, seed_idx)
    diffs = diffs[~np.isnan(diffs)]
    if diffs.size == 0:
        return {"not_defined": "every bootstrap difference was NaN"}
    lo, hi = percentile_ci(diffs)
    return {"delta": float(np.mean(diffs)), "ci_lo": lo, "ci_hi": hi, "n_datasets": len(datasets),
            "fractions": (lo_f, hi_f)}
