"""Decoupling summaries (PROTOCOL §6.5-6.9): reference numbers, exact RNG
recipes checked against literal loops, and small hand-computed tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pluggy
import pytest
from scipy import stats

import prism_plugin.hookspecs as hookspecs
from prism_plugin.summaries import conventions as conv
from prism_plugin.summaries import decoupling as dec
from prism_plugin.summaries import decoupling_seeds as dseeds
from prism_plugin.tables import RunTables, SummaryOutput

from tests.conftest import SHARED
REFERENCE = SHARED / "reference" / "prism_results_v2"
ORDER = ["PCam", "BRACS", "CRC", "MHIST", "LungHist700", "SPIDER-Breast"]
FRACTIONS = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0]


@pytest.fixture(scope="module")
def summary(reference_tables) -> SummaryOutput:
    return dec.summarize(reference_tables, {})


def make_indomain(cells: dict, seeds=(42, 123, 456)) -> pd.DataFrame:
    """cells: {(dataset, fraction): {model: (auroc, ece)}} -> per-run table with
    the same value for every seed."""
    rows = []
    for (dataset, fraction), models in cells.items():
        for model, (auroc, ece) in models.items():
            for s in seeds:
                rows.append({"model": model, "dataset": dataset, "fraction": fraction, "seed": s,
                             "auroc": auroc, "ece_scaled_fixed": ece})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- reference: §6.5
# Published rank_correlations.csv rows (upstream results_v2), full precision.
PUBLISHED_RC = {
    ("PCam", 0.01): (-0.5714285714285715, -0.4999999999999999, -1.0, 0.25925925925925924),
    ("BRACS", 0.1): (0.7619047619047621, 0.5714285714285714, 0.06172839506172839, 0.9999999999999998),
    ("CRC", 0.1): (0.9047619047619048, 0.7857142857142856, 0.5379206730769232, 1.0),
    ("MHIST", 0.01): (-0.7857142857142858, -0.6428571428571428, -1.0, -0.13416158774808468),
    ("MHIST", 0.25): (-0.09523809523809526, -0.07142857142857142, -0.8232188065099457, 0.7218571180856601),
    ("LungHist700", 0.05): (0.38095238095238104, 0.21428571428571427, -0.6157497565725414, 0.9230769230769231),
    ("SPIDER-Breast", 1.0): (0.261904761904762, 0.21428571428571427, -0.518987341772152, 0.9230769230769231),
}


def test_rank_correlations_layout(summary):
    rc = summary.tables["rank_correlations"]
    assert list(rc.columns) == ["dataset", "fraction", "n_models", "spearman", "kendall", "ci_lo", "ci_hi"]
    assert list(rc["dataset"]) == [d for d in ORDER for _ in FRACTIONS]
    assert list(rc["fraction"]) == FRACTIONS * 6
    assert (rc["n_models"] == 8).all()
    assert rc[["spearman", "kendall", "ci_lo", "ci_hi"]].notna().all().all()


@pytest.mark.parametrize("key", list(PUBLISHED_RC))
def test_rank_correlations_bit_identical(summary, key):
    rc = summary.tables["rank_correlations"].set_index(["dataset", "fraction"])
    got = tuple(rc.loc[key, ["spearman", "kendall", "ci_lo", "ci_hi"]])
    assert got == PUBLISHED_RC[key]


# --------------------------------------------------------------------------- reference: §6.6
def test_pooled_rho_and_contrast(summary):
    h = summary.headline
    assert round(h["decoupling_pooled_rho_1pct"], 3) == -0.238
    assert round(h["decoupling_pooled_rho_100pct"], 3) == 0.516
    assert h["decoupling_pooled_rho_1pct"] == pytest.approx(-5 / 21, abs=1e-12)
    assert round(h["decoupling_pooled_contrast"], 3) == 0.754
    assert round(h["decoupling_pooled_contrast_ci_lo"], 3) == 0.190
    assert round(h["decoupling_pooled_contrast_ci_hi"], 3) == 1.270
    assert h["decoupling_pooled_contrast_n_datasets"] == 6
    # cluster CI brackets the point estimate at every fraction
    for f in FRACTIONS:
        pct = conv.fraction_pct(f)
        assert h[f"decoupling_pooled_rho_{pct}_ci_lo"] <= h[f"decoupling_pooled_rho_{pct}"] \
            <= h[f"decoupling_pooled_rho_{pct}_ci_hi"]


def test_wilcoxon(summary):
    h = summary.headline
    assert h["decoupling_wilcoxon_W"] == 2.0
    assert round(h["decoupling_wilcoxon_p"], 3) == 0.094
    assert h["decoupling_wilcoxon_p"] == pytest.approx(6 / 64)


# --------------------------------------------------------------------------- reference: §6.7
def test_rank_diff_by_fraction(summary):
    rd = summary.tables["rank_diff_by_fraction"]
    assert list(rd.columns) == ["dataset", "0.01", "0.05", "0.1", "0.25", "0.5", "1.0"]
    assert list(rd["dataset"]) == sorted(ORDER)
    expected = [  # published rank_diff_by_fraction.csv
        [3.25, 1.0, 1.25, 2.5, 3.5, 2.5],
        [1.75, 1.0, 0.75, 2.0, 0.25, 1.5],
        [4.0, 2.0, 2.75, 1.5, 1.0, 1.5],
        [3.75, 2.5, 3.25, 2.75, 1.75, 1.5],
        [3.5, 2.75, 1.75, 1.25, 1.25, 1.5],
        [1.5, 1.5, 1.75, 1.75, 2.0, 2.25],
    ]
    np.testing.assert_array_equal(rd.iloc[:, 1:].to_numpy(dtype=float), np.array(expected))


# --------------------------------------------------------------------------- reference: §6.8
def test_i2_table(summary):
    het = summary.tables["rank_correlation_heterogeneity"].set_index("fraction")
    expected = {  # PROTOCOL §6.8: (rho, tau2, I2 %)
        0.01: (-0.298, 0.408, 67.1), 0.05: (0.472, 0.142, 41.5), 0.1: (0.517, 0.267, 57.2),
        0.25: (0.508, 0.037, 15.6), 0.5: (0.658, 0.958, 82.7), 1.0: (0.565, 0.000, 0.0),
    }
    for f, (rho, tau2, i2) in expected.items():
        row = het.loc[f]
        assert round(row["rho"], 3) == rho
        assert round(row["tau2"], 3) == tau2
        assert round(row["i2"], 1) == i2
        assert row["n_datasets"] == 6 and row["note"] == ""
        assert row["ci_lo"] < row["rho"] < row["ci_hi"]
    assert round(summary.headline["decoupling_i2_1pct"], 1) == 67.1
    assert summary.headline["decoupling_i2_100pct"] == 0.0


# --------------------------------------------------------------------------- reference: §6.9
def test_seedlevel_table(summary):
    sl = summary.tables["rank_correlations_seedlevel"]
    assert list(sl.columns) == ["fraction", "rho", "ci_lo", "ci_hi"]
    assert list(sl["fraction"]) == FRACTIONS
    published = [  # upstream rank_correlations_seedlevel.csv, full precision
        (-0.10495039682539685, -0.5396825396825398, 0.357242063492063),
        (0.24134325396825404, -0.21825396825396828, 0.6507936507936508),
        (0.33842460317460327, -0.07142857142857144, 0.6984126984126985),
        (0.36243055555555564, 0.0, 0.6587301587301588),
        (0.4921626984126985, 0.04751984126984129, 0.7896825396825399),
        (0.5178353174603176, 0.2657738095238095, 0.7222222222222224),
    ]
    assert [tuple(r) for r in sl[["rho", "ci_lo", "ci_hi"]].itertuples(index=False)] == published
    assert round(summary.headline["decoupling_seedlevel_rho_1pct"], 3) == -0.105


def test_seedlevel_contrast(summary):
    h = summary.headline
    assert round(h["decoupling_seedlevel_contrast"], 3) == 0.616
    assert round(h["decoupling_seedlevel_contrast_ci_lo"], 3) == 0.075
    assert round(h["decoupling_seedlevel_contrast_ci_hi"], 3) == 1.127


def test_no_notes_on_reference(summary):
    assert summary.notes == []


# --------------------------------------------------------------------------- exact recipes vs literal loops
def test_spearman_rows_bit_identical_to_scipy():
    rng = np.random.default_rng(123)
    x = rng.integers(0, 5, size=(400, 9)).astype(float) / 7.0  # many ties
    y = rng.normal(size=(400, 9))
    y[::7] = np.round(y[::7], 0)
    x[5] = 0.3  # constant row -> NaN
    got = conv.spearman_rows(x, y)
    with np.errstate(all="ignore"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.array([stats.spearmanr(a, b).statistic for a, b in zip(x, y)])
    assert np.isnan(got[5]) and np.isnan(want[5])
    np.testing.assert_array_equal(got, want)


def literal_model_bootstrap(a, e, n_boot, seed=0):
    """§6.5 as written: one rng.integers(0, n, n) per iteration, scipy per draw."""
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(a), len(a))
        if len(np.unique(a[idx])) < 3:
            continue
        r = stats.spearmanr(a[idx], -e[idx]).statistic
        if not np.isnan(r):
            vals.append(r)
    return np.percentile(vals, [2.5, 97.5])


def test_model_bootstrap_matches_literal_loop():
    a = np.array([0.91, 0.90, 0.90, 0.85, 0.80, 0.95, 0.70])
    e = np.array([0.05, 0.02, 0.08, 0.08, 0.01, 0.03, 0.10])
    ind = make_indomain({("X", 0.5): {f"m{i}": (a[i], e[i]) for i in range(len(a))}})
    rc = dec.rank_correlations(ind, n_boot=300)
    want = literal_model_bootstrap(a, e, 300)
    assert (rc.loc[0, "ci_lo"], rc.loc[0, "ci_hi"]) == (want[0], want[1])


def test_cluster_bootstrap_matches_literal_loop(reference_tables):
    ind = reference_tables.indomain
    ranks = conv.within_dataset_ranks(conv.cell_means(ind))
    at = ranks.loc[ranks["fraction"] == 0.01]
    rng = np.random.default_rng(0)
    vals = []
    for _ in range(200):
        drawn = rng.choice(ORDER, 6)
        sub = pd.concat([at.loc[at["dataset"] == d] for d in drawn])
        vals.append(stats.spearmanr(sub["rank_auroc"], sub["rank_cal"]).statistic)
    want = tuple(np.percentile(vals, [2.5, 97.5]))
    got = dec.pooled_rank_correlations(ind, n_boot=200).set_index("fraction").loc[0.01, ["ci_lo", "ci_hi"]]
    assert tuple(got) == want


def test_pooled_contrast_matches_literal_loop(reference_tables):
    """§6.6 contrast as written: default_rng(1), alphabetical dataset list,
    one rng.choice draw shared by both fractions."""
    ind = reference_tables.indomain
    ranks = conv.within_dataset_ranks(conv.cell_means(ind))
    alphabetical = sorted(ORDER)
    assert alphabetical == ["BRACS", "CRC", "LungHist700", "MHIST", "PCam", "SPIDER-Breast"]
    rng = np.random.default_rng(1)
    diffs = []
    for _ in range(150):
        drawn = rng.choice(alphabetical, 6)
        rho = {}
        for f in (0.01, 1.0):
            at = ranks.loc[ranks["fraction"] == f]
            sub = pd.concat([at.loc[at["dataset"] == d] for d in drawn])
            rho[f] = stats.spearmanr(sub["rank_auroc"], sub["rank_cal"]).statistic
        diffs.append(rho[1.0] - rho[0.01])
    got = dec.pooled_contrast(ind, n_boot=150)
    assert (got["ci_lo"], got["ci_hi"]) == tuple(np.percentile(diffs, [2.5, 97.5]))
    assert got["delta"] == got["rho_high"] - got["rho_low"]


def test_seedlevel_draws_match_literal_choice_calls():
    datasets = np.array(ORDER)
    seeds = [42, 123, 456]
    rng = np.random.default_rng(0)
    lit_d, lit_s = [], []
    for _ in range(150):
        lit_d.append(rng.choice(datasets, 6))
        lit_s.append([rng.choice(seeds) for _d in range(6) for _m in range(8)])
    ds_idx, seed_idx = dseeds.seedlevel_draws(np.random.default_rng(0), 6, 48, 3, 150)
    np.testing.assert_array_equal(datasets[ds_idx], np.array(lit_d))
    np.testing.assert_array_equal(np.array(seeds)[seed_idx], np.array(lit_s))


def test_seedlevel_matches_literal_loop(reference_tables):
    ind = reference_tables.indomain
    models = list(dict.fromkeys(ind["model"]))
    at = ind.loc[ind["fraction"] == 1.0].set_index(["dataset", "model", "seed"])
    rng = np.random.default_rng(0)
    vals = []
    for _ in range(60):
        drawn = rng.choice(ORDER, 6)
        chosen = {(d, m): rng.choice([42, 123, 456]) for d in ORDER for m in models}
        ra, rc = [], []
        for d in drawn:
            a = np.array([at.loc[(d, m, chosen[(d, m)]), "auroc"] for m in models])
            e = np.array([at.loc[(d, m, chosen[(d, m)]), "ece_scaled_fixed"] for m in models])
            ra.append(stats.rankdata(-a))
            rc.append(stats.rankdata(e))
        vals.append(stats.spearmanr(np.concatenate(ra), np.concatenate(rc)).statistic)
    got = dseeds.rank_correlations_seedlevel(ind, n_boot=60).set_index("fraction").loc[1.0]
    assert got["rho"] == np.mean(vals)
    assert (got["ci_lo"], got["ci_hi"]) == tuple(np.percentile(vals, [2.5, 97.5]))


def test_seed_means_use_correctly_rounded_sum():
    df = pd.DataFrame({"k": ["a", "b", "a", "a", "b"], "x": [1e16, 1.0, 1.0, -1e16, np.nan]})
    m = conv.seed_means(df, ["k"], ["x"])
    assert list(m.index) == ["a", "b"]
    assert m.loc["a", "x"] == 1 / 3  # a left-to-right sum would give 0
    assert m.loc["b", "x"] == 1.0  # NaN skipped
    s = conv.seed_means(df.iloc[::-1], ["k"], ["x"], sort=False)
    assert list(s.index) == ["b", "a"] and s.loc["a", "x"] == 1 / 3


# --------------------------------------------------------------------------- hand-made tables
ALIGNED = {"A": (0.9, 0.01), "B": (0.8, 0.02), "C": (0.7, 0.03), "D": (0.6, 0.04)}
INVERTED = {"A": (0.9, 0.04), "B": (0.8, 0.03), "C": (0.7, 0.02), "D": (0.6, 0.01)}


def test_perfectly_aligned_four_models():
    ind = make_indomain({("X", 0.01): ALIGNED, ("Y", 0.01): ALIGNED})
    rc = dec.rank_correlations(ind)
    assert list(rc["spearman"]) == [1.0, 1.0]
    assert list(rc["kendall"]) == [1.0, 1.0]
    assert list(rc["n_models"]) == [4, 4]
    assert rc.loc[0, "ci_hi"] == 1.0
    pooled = dec.pooled_rank_correlations(ind, n_boot=50)
    assert pooled.loc[0, "rho"] == 1.0 and pooled.loc[0, "ci_lo"] == 1.0
    rd = dec.rank_diff_by_fraction(ind)
    assert list(rd["0.01"]) == [0.0, 0.0]


def test_perfectly_inverted_four_models():
    ind = make_indomain({("X", 0.01): INVERTED})
    rc = dec.rank_correlations(ind)
    assert rc.loc[0, "spearman"] == -1.0 and rc.loc[0, "kendall"] == -1.0
    # ranks 1..4 vs 4..1 -> mean |diff| = (3 + 1 + 1 + 3) / 4
    assert dec.rank_diff_by_fraction(ind).loc[0, "0.01"] == 2.0


def test_ties_hand_computed():
    # AUROC ranks (avg) 3.5 3.5 2 1 vs -ECE ranks 4 3 2 1:
    # rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9); tau_b = 5 / sqrt(5 * 6)
    ind = make_indomain({("X", 1.0): {"A": (0.9, 0.01), "B": (0.9, 0.02), "C": (0.7, 0.03), "D": (0.6, 0.04)}})
    rc = dec.rank_correlations(ind)
    assert rc.loc[0, "spearman"] == pytest.approx(math.sqrt(0.9), abs=1e-15)
    assert rc.loc[0, "kendall"] == pytest.approx(5 / math.sqrt(30), abs=1e-15)
    ranks = conv.within_dataset_ranks(conv.cell_means(ind))
    assert list(ranks["rank_auroc"]) == [1.5, 1.5, 3.0, 4.0]
    assert list(ranks["rank_cal"]) == [1.0, 2.0, 3.0, 4.0]
    assert dec.rank_diff_by_fraction(ind).loc[0, "1.0"] == 0.25


def test_seed_mean_before_ranking():
    # per-seed values disagree; the seed means decide (A: 0.8, B: 0.7, C: 0.6)
    rows = []
    for seed, vals in zip((1, 2), ({"A": 0.9, "B": 0.6, "C": 0.5}, {"A": 0.7, "B": 0.8, "C": 0.7})):
        for m, a in vals.items():
            rows.append({"model": m, "dataset": "X", "fraction": 0.5, "seed": seed, "auroc": a,
                         "ece_scaled_fixed": {"A": 0.1, "B": 0.2, "C": 0.3}[m]})
    rc = dec.rank_correlations(pd.DataFrame(rows))
    assert rc.loc[0, "spearman"] == pytest.approx(1.0)


def test_two_models_not_defined():
    ind = make_indomain({("X", 0.01): {"A": (0.9, 0.1), "B": (0.8, 0.2)},
                         ("X", 1.0): {"A": (0.9, 0.1), "B": (0.8, 0.2)}})
    rc = dec.rank_correlations(ind)
    assert list(rc["n_models"]) == [2, 2]
    assert rc[["spearman", "kendall", "ci_lo", "ci_hi"]].isna().all().all()
    assert any("not defined" in n and "2 model" in n for n in rc.attrs["notes"])
    out = dec.summarize(RunTables(indomain=ind), {})
    assert out.tables["rank_correlations"]["spearman"].isna().all()
    assert out.headline["decoupling_i2_1pct"].startswith("not defined")
    assert out.headline["decoupling_wilcoxon"].startswith("not defined")
    assert out.headline["decoupling_pooled_contrast"].startswith("not defined")
    assert any(n.startswith("decoupling_pooled_contrast: not defined") for n in out.notes)


def test_constant_auroc_not_defined():
    ind = make_indomain({("X", 0.5): {"A": (0.8, 0.1), "B": (0.8, 0.2), "C": (0.8, 0.3)}})
    rc = dec.rank_correlations(ind)
    assert math.isnan(rc.loc[0, "spearman"]) and math.isnan(rc.loc[0, "ci_lo"])
    assert any("constant" in n for n in rc.attrs["notes"])


def test_missing_contrast_fraction_not_defined():
    ind = make_indomain({("X", 0.5): ALIGNED, ("Y", 0.5): INVERTED})
    out = dec.summarize(RunTables(indomain=ind), {})
    assert "0.01" in out.headline["decoupling_pooled_contrast"]
    assert out.headline["decoupling_seedlevel_contrast"].startswith("not defined")
    # a user-chosen pair of fractions that exists works
    ind2 = make_indomain({(d, f): (ALIGNED if f == 0.5 else INVERTED) for d in "XYZ" for f in (0.1, 0.5)})
    out2 = dec.summarize(RunTables(indomain=ind2), {"contrast_fractions": [0.1, 0.5]})
    # pooled rho: -1 at 0.1, +1 at 0.5 for every draw
    assert out2.headline["decoupling_pooled_contrast"] == 2.0
    assert out2.headline["decoupling_pooled_contrast_ci_lo"] == 2.0
    assert out2.headline["decoupling_seedlevel_contrast"] == 2.0
    assert out2.headline["decoupling_wilcoxon_n_datasets"] == 3


def test_single_dataset_cluster_ci_not_defined():
    ind = make_indomain({("X", 0.5): ALIGNED})
    pooled = dec.pooled_rank_correlations(ind)
    assert pooled.loc[0, "rho"] == 1.0
    assert math.isnan(pooled.loc[0, "ci_lo"])
    assert any("not defined" in n and "1 dataset" in n for n in pooled.attrs["notes"])
    sl = dseeds.rank_correlations_seedlevel(ind)
    assert sl[["rho", "ci_lo", "ci_hi"]].isna().all().all()
    assert any("not defined" in n and "1 dataset" in n for n in sl.attrs["notes"])


def test_heterogeneity_hand_computed():
    # z = (0, 2), v = 1 (n = 4): mu_FE = 1, Q = 2, df = 1, C = 1, tau2 = 1,
    # I2 = 50 %, w* = 1/2 -> mu = 1, se = 1.
    rc = pd.DataFrame({"dataset": ["A", "B", "A"], "fraction": [0.5, 0.5, 1.0], "n_models": [4, 4, 4],
                       "spearman": [0.0, math.tanh(2.0), 0.3]})
    het = dec.rank_heterogeneity(rc).set_index("fraction")
    row = het.loc[0.5]
    assert row["q"] == pytest.approx(2.0)
    assert row["tau2"] == pytest.approx(1.0)
    assert row["i2"] == pytest.approx(50.0)
    assert row["rho"] == pytest.approx(math.tanh(1.0))
    assert row["ci_lo"] == pytest.approx(math.tanh(1.0 - 1.96))
    assert row["ci_hi"] == pytest.approx(math.tanh(1.0 + 1.96))
    assert het.loc[1.0, "note"].startswith("not defined")
    assert math.isnan(het.loc[1.0, "i2"])


def test_homogeneous_i2_zero():
    rc = pd.DataFrame({"dataset": ["A", "B"], "fraction": [1.0, 1.0], "n_models": [8, 8], "spearman": [0.5, 0.5]})
    row = dec.rank_heterogeneity(rc).iloc[0]
    assert row["q"] == 0.0 and row["i2"] == 0.0 and row["tau2"] == 0.0
    assert row["rho"] == pytest.approx(0.5)


def test_dataset_order_and_other_datasets():
    assert conv.dataset_order(["Zeta", "CRC", "Alpha", "PCam"]) == ["PCam", "CRC", "Zeta", "Alpha"]
    ind = make_indomain({("Zeta", 0.5): ALIGNED, ("CRC", 0.5): ALIGNED, ("Alpha", 0.5): INVERTED})
    rc = dec.rank_correlations(ind)
    assert list(rc["dataset"]) == ["CRC", "Zeta", "Alpha"]
    assert list(dec.rank_diff_by_fraction(ind)["dataset"]) == ["Alpha", "CRC", "Zeta"]


def test_hook_registration_and_none():
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(dec)
    ind = make_indomain({("X", 0.01): ALIGNED, ("Y", 0.01): INVERTED,
                         ("X", 1.0): ALIGNED, ("Y", 1.0): ALIGNED})
    results = pm.hook.summarize(tables=RunTables(indomain=ind), options={})
    assert len(results) == 1 and isinstance(results[0], SummaryOutput)
    assert set(results[0].tables) == {"rank_correlations", "rank_correlations_seedlevel",
                                      "rank_diff_by_fraction", "rank_correlation_heterogeneity"}
    assert results[0].headline["decoupling_pooled_rho_100pct"] == 1.0
    assert results[0].headline["decoupling_pooled_rho_1pct"] == 0.0
    assert pm.hook.summarize(tables=RunTables(), options={}) == []
