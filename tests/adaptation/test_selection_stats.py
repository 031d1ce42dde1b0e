"""Selectors and statistics on hand-made cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import entropy, spearmanr
from sklearn.metrics import f1_score

from prism_plugin.adaptation import selection as sel
from prism_plugin.adaptation import stats


def test_per_run_selectors_by_hand():
    proba = np.array([[0.5, 0.5, 0.0], [0.8, 0.1, 0.1], [0.2, 0.2, 0.6]])
    assert sel.conf(proba) == pytest.approx((0.5 + 0.8 + 0.6) / 3)
    assert sel.neg_ent(proba) == pytest.approx(-np.mean([entropy(p) for p in proba]))
    assert sel.marg_ent(proba) == pytest.approx(entropy(proba.mean(axis=0)))
    uniform = np.full((4, 5), 0.2)
    assert sel.neg_ent(uniform) == pytest.approx(-np.log(5))
    # predicted frequencies (2/3, 0, 1/3) against a source prior (1/2, 1/4, 1/4)
    q, p = np.array([2 / 3, 0, 1 / 3]), np.array([0.5, 0.25, 0.25])
    assert sel.neg_pred_kl(np.array([0, 0, 2]), p) == pytest.approx(-(q[0] * np.log(q[0] / p[0]) + q[2] * np.log(q[2] / p[2])))
    assert sel.neg_pred_kl(np.array([0, 0, 1, 2]), p) == pytest.approx(0.0)
    X = np.array([[1.0, 2.0], [3.0, 2.0]])  # mean (2, 2); source (0, 0) with std (1, 2): shift (2, 1)
    assert sel.neg_shift(X, np.zeros(2), np.array([1.0, 2.0])) == pytest.approx(-np.sqrt((4 + 1) / 2))
    scores = sel.per_run_scores(proba, None, None, None, np.full(3, 1 / 3))
    assert np.isnan(scores["neg_shift"]) and set(scores) == set(sel.PER_RUN)


def test_consensus_and_agl_by_hand():
    preds = {"a": np.array([0, 1, 1, 0]), "b": np.array([0, 1, 0, 0]), "c": np.array([1, 1, 1, 1])}
    # agreements: ab 3/4, ac 2/4, bc 1/4
    c = sel.consensus(preds)
    assert c == pytest.approx({"a": (0.75 + 0.5) / 2, "b": (0.75 + 0.25) / 2, "c": (0.5 + 0.25) / 2})
    preds_id = {k: np.zeros(4, int) for k in preds}  # everyone agrees in-domain
    agl = sel.agl_acc({"a": 0.9, "b": 0.8, "c": 1.0}, preds_id, preds)
    assert agl == pytest.approx({"a": 0.9 * 0.625, "b": 0.8 * 0.5, "c": 1.0 * 0.375})
    assert np.isnan(sel.consensus({"a": preds["a"]})["a"])


def test_spearman_regret_and_ties():
    truth = {"a": 0.9, "b": 0.5, "c": 0.7, "d": 0.6}
    good = {"a": 4.0, "b": 1.0, "c": 3.0, "d": 2.0}
    bad = {"a": 1.0, "b": 4.0, "c": 2.0, "d": 3.0}
    assert sel.spearman(good, truth) == pytest.approx(1.0)
    assert sel.spearman(bad, truth) == pytest.approx(-1.0)
    assert sel.regret(good, truth) == (0.0, "a", "a")
    r, chosen, oracle = sel.regret(bad, truth)
    assert (chosen, oracle) == ("b", "a") and r == pytest.approx(0.4)
    assert sel.select({"z": 1.0, "y": 1.0, "x": float("nan")}) == "y"  # ties: first in sorted order
    rows = sel.evaluate_selectors({"good": good, "bad": bad}, truth)
    assert [r["selector"] for r in rows] == ["bad", "good"]
    assert np.isnan(sel.spearman({"a": 1.0, "b": 2.0}, truth))  # fewer than 3 encoders


def test_marg_ent_is_oracle_balanced_but_penalises_the_right_encoder_under_skew():
    # the audit's A.10 mechanism: a robust encoder follows a skewed prior (low marginal entropy)
    y = np.array([0] * 80 + [1] * 10 + [2] * 10)
    robust = np.eye(3)[y] * 0.9 + 0.1 / 3
    collapsed = np.tile([0.34, 0.33, 0.33], (100, 1))  # predicts "everything is class 0", uniform marginal
    assert sel.marg_ent(collapsed) > sel.marg_ent(robust)


def test_weighted_macro_f1_equals_sklearn_on_a_resample():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 60)
    pred = np.where(rng.random(60) < 0.7, y, rng.integers(0, 4, 60))
    idx = rng.integers(0, 60, 60)
    W = np.bincount(idx, minlength=60)[None, :].astype(float)
    ours = stats._weighted_macro_f1(y, pred, W, 4)[0]
    assert ours == pytest.approx(f1_score(y[idx], pred[idx], average="macro", zero_division=0))


def test_paired_bootstrap_hand_cases():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 300)
    same = stats.paired_bootstrap_f1(y, y, y, B=200, seed=0)
    assert same["diff"] == 0 and same["ci_low"] == 0 and same["ci_high"] == 0 and not same["excludes_zero"]
    noisy = np.where(rng.random(300) < 0.6, y, (y + 1) % 3)
    res = stats.paired_bootstrap_f1(y, y, noisy, B=500, seed=0)
    expected = 1.0 - f1_score(y, noisy, average="macro")
    assert res["diff"] == pytest.approx(expected)
    assert res["excludes_zero"] and res["ci_low"] > 0.2 and res["ci_high"] <= 1.0 and res["p_boot"] < 0.01
    # seeds: (S, N) predictions are averaged inside every resample
    two = stats.paired_bootstrap_f1(y, np.stack([y, noisy]), np.stack([noisy, noisy]), B=300, seed=0)
    assert two["diff"] == pytest.approx(expected / 2)
    # two indistinguishable noisy encoders: the CI covers zero
    other = np.where(rng.random(300) < 0.6, y, (y + 1) % 3)
    tie = stats.paired_bootstrap_f1(y, noisy, other, B=500, seed=0)
    assert tie["ci_low"] < 0 < tie["ci_high"] and not tie["excludes_zero"]


def test_hierarchical_bootstrap_and_spearman_ci():
    const = stats.hierarchical_bootstrap(np.full((6, 5), 0.05), B=200)
    assert const["mean"] == pytest.approx(0.05) and const["ci_low"] == pytest.approx(0.05)
    rng = np.random.default_rng(2)
    table = 0.06 + rng.normal(scale=0.02, size=(18, 15))
    hb = stats.hierarchical_bootstrap(table, B=1000, seed=0)
    assert hb["ci_low"] < table.mean() < hb["ci_high"] and hb["ci_low"] > 0.04
    x = np.arange(10.0)
    ci = stats.spearman_ci(x, x ** 2, B=200)
    assert ci["rho"] == pytest.approx(1.0) and ci["ci_low"] == pytest.approx(1.0)
    noisy = x + rng.normal(scale=3, size=10)
    ci2 = stats.spearman_ci(x, noisy, B=500)
    assert ci2["rho"] == pytest.approx(spearmanr(x, noisy).statistic)
    assert ci2["ci_low"] <= ci2["rho"] <= ci2["ci_high"]
    assert np.isnan(stats.spearman_ci([1, 2], [2, 1])["rho"])


def test_between_domain_directions_find_the_offset():
    rng = np.random.default_rng(3)
    offset = np.zeros(8)
    offset[2] = 5.0
    A = rng.normal(size=(200, 8))
    Bm = rng.normal(size=(200, 8)) + offset
    U = stats.between_domain_directions([A, Bm], k=3, mean=np.zeros(8), std=np.ones(8))
    assert U.shape == (1, 8)  # at most n_domains - 1 directions
    assert abs(U[0, 2]) > 0.99


def test_fast_macro_f1_equals_sklearn():
    rng = np.random.default_rng(5)
    for _ in range(20):
        n, k = rng.integers(1, 40), rng.integers(2, 7)
        y = rng.integers(0, k, n)
        pred = np.where(rng.random(n) < 0.5, y, rng.integers(0, k + 1, n))  # may predict an unseen class
        assert stats.macro_f1(y, pred) == pytest.approx(f1_score(y, pred, average="macro", zero_division=0), abs=1e-12)
