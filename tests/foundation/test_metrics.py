"""Metric functions: hand-computed cases, the reference's binning rules, a second library."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import log_loss, roc_auc_score
from torchmetrics.classification import BinaryCalibrationError, MulticlassCalibrationError

from prism_plugin.metrics import (
    apply_temperature,
    binary_logits,
    brier,
    degeneracy_share,
    ece,
    ece_bin_edges,
    fit_temperature,
    multiclass_brier,
    neutral_temperature,
    nll,
)
from prism_plugin.heads.logistic import LogisticProbe


def binary_proba(p1):
    p1 = np.asarray(p1, dtype=float)
    return np.column_stack([1 - p1, p1])


def test_ece_binary_hand_computed():
    # bins of width 1/15; confidences = p(y=1)
    p = [0.05, 0.05, 0.95, 0.95, 0.5]
    y = [0, 1, 1, 1, 0]
    # bin [0, 1/15): conf 0.05, acc 0.5 -> |0.5-0.05|*2 = 0.9
    # bin [7/15, 8/15): conf 0.5, acc 0 -> 0.5
    # bin [14/15, 1): conf 0.95, acc 1 -> 0.05*2 = 0.1
    assert ece(y, binary_proba(p)) == pytest.approx((0.9 + 0.5 + 0.1) / 5, abs=1e-15)


def test_ece_multiclass_uses_top_label():
    proba = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    y = np.array([0, 2, 2])
    # conf 0.7 correct, 0.6 wrong, 0.6 correct; 0.6 -> bin [8/15, 9/15)=[0.533,0.6) ? 0.6 is the edge 9/15
    edges = np.linspace(0, 1, 16)
    assert edges[9] == pytest.approx(0.6)
    # 0.6 falls in [9/15, 10/15) (half-open) unless float rounding puts 9/15 above 0.6
    expected_bins = {}
    for conf, corr in [(0.7, 1.0), (0.6, 0.0), (0.6, 1.0)]:
        b = int(np.searchsorted(edges, conf, side="right") - 1)
        expected_bins.setdefault(b, []).append((conf, corr))
    expected = sum(len(v) * abs(np.mean([c for _, c in v]) - np.mean([x for x, _ in v])) for v in expected_bins.values()) / 3
    assert ece(y, proba) == pytest.approx(expected, abs=1e-15)


def test_fixed_bins_drop_confidence_exactly_one_but_count_it():
    # p = 1.0 lies in no [lo, hi) bin; N still counts it.
    p = [1.0, 1.0, 0.2]
    y = [1, 1, 0]
    # only the 0.2 sample is binned: |0 - 0.2| * 1 / 3
    assert ece(y, binary_proba(p), scheme="fixed") == pytest.approx(0.2 / 3, abs=1e-15)
    # adaptive bins end at 1 + 1e-9, so the two p = 1.0 samples count (|1 - 1| = 0)
    assert ece(y, binary_proba(p), scheme="adaptive") == pytest.approx(0.2 / 3, abs=1e-15)
    # a mis-labelled p = 1.0 sample: invisible to the fixed scheme, visible to the adaptive one
    y2 = [0, 1, 0]
    assert ece(y2, binary_proba(p), scheme="fixed") == pytest.approx(0.2 / 3, abs=1e-15)
    assert ece(y2, binary_proba(p), scheme="adaptive") > 0.2 / 3 + 0.1


def test_adaptive_falls_back_to_fixed_edges_when_fewer_than_three_edges():
    # constant confidence 0: quantile edges collapse to {0, 1 + 1e-9} -> fixed edges
    zero = np.zeros(50)
    np.testing.assert_array_equal(ece_bin_edges(zero, 15, "adaptive"), np.linspace(0, 1, 16))
    # constant 0.3: edges {0, 0.3, 1 + 1e-9} (three remain, no fallback), one occupied bin
    const = np.full(50, 0.3)
    edges = ece_bin_edges(const, 15, "adaptive")
    np.testing.assert_array_equal(edges, np.array([0.0, 0.3, 1.0 + 1e-9]))
    y = np.r_[np.ones(10), np.zeros(40)].astype(int)
    assert ece(y, binary_proba(const), scheme="adaptive") == pytest.approx(abs(0.2 - 0.3), abs=1e-15)
    assert ece(y, binary_proba(zero), scheme="adaptive") == pytest.approx(0.2, abs=1e-15)


def test_adaptive_edges_are_equal_mass_quantiles():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 3000)
    edges = ece_bin_edges(conf, 15, "adaptive")
    assert edges[0] == 0.0 and edges[-1] == 1.0 + 1e-9 and len(edges) == 16
    counts = np.histogram(conf, edges)[0]
    assert counts.min() >= 199 and counts.max() <= 201


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_ece_agrees_with_torchmetrics(seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.001, 0.999, 2000)
    y = (rng.uniform(size=2000) < p ** 1.5).astype(int)
    ours = ece(y, binary_proba(p), n_bins=15)
    theirs = BinaryCalibrationError(n_bins=15, norm="l1")(torch.tensor(p, dtype=torch.float64), torch.tensor(y)).item()
    assert ours == pytest.approx(theirs, abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_multiclass_ece_agrees_with_torchmetrics(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(1500, 5)) * 2
    proba = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = np.array([rng.choice(5, p=row) for row in proba])
    ours = ece(y, proba, n_bins=15)
    theirs = MulticlassCalibrationError(num_classes=5, n_bins=15, norm="l1")(
        torch.tensor(proba, dtype=torch.float64), torch.tensor(y)).item()
    assert ours == pytest.approx(theirs, abs=1e-6)


def test_binary_temperature_two_is_identity():
    d = np.linspace(-4, 4, 41)
    L = binary_logits(d)
    np.testing.assert_allclose(apply_temperature(L, 2.0)[:, 1], 1 / (1 + np.exp(-d)), rtol=0, atol=1e-15)
    assert neutral_temperature(2) == 2.0 and neutral_temperature(5) == 1.0
    assert neutral_temperature(2, "natural") == 1.0
    np.testing.assert_allclose(apply_temperature(binary_logits(d, "natural"), 1.0)[:, 1], 1 / (1 + np.exp(-d)),
                               atol=1e-15)


def test_fitted_temperature_recovers_a_known_scale():
    rng = np.random.default_rng(3)
    true_logits = rng.normal(size=(20000, 4)) * 2.0
    p = np.exp(true_logits) / np.exp(true_logits).sum(1, keepdims=True)
    y = (p.cumsum(1) > rng.uniform(size=(20000, 1))).argmax(1)
    # the model reports logits 3x too sharp: T should be about 3
    assert fit_temperature(true_logits * 3.0, y) == pytest.approx(3.0, rel=0.05)
    # binary on the [-d, d] scale: natural-scale T of 1.5 appears as 3.0
    d = rng.normal(size=20000) * 2
    yb = (rng.uniform(size=20000) < 1 / (1 + np.exp(-d))).astype(int)
    assert fit_temperature(binary_logits(d * 1.5), yb) == pytest.approx(3.0, rel=0.05)
    assert fit_temperature(binary_logits(d * 1.5, "natural"), yb) == pytest.approx(1.5, rel=0.05)


def test_temperature_is_bounded():
    d = np.linspace(-3, 3, 200)
    y = (d > 0).astype(int)  # perfectly separable: NLL keeps falling as T -> 0
    t = fit_temperature(binary_logits(d * 100), y)
    assert 0.1 <= t < 0.1 + 1e-3


def test_nll_brier_degeneracy_against_sklearn_and_hand():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.05, 0.95, 300)
    y = (rng.uniform(size=300) < p).astype(int)
    P = binary_proba(p)
    assert nll(y, P) == pytest.approx(log_loss(y, P), abs=1e-9)
    assert brier(y, P) == pytest.approx(np.mean((p - y) ** 2), abs=1e-15)
    assert multiclass_brier(y, P) == pytest.approx(2 * np.mean((p - y) ** 2), abs=1e-12)
    assert np.isnan(brier([0, 1, 2], np.eye(3)))
    assert degeneracy_share(np.array([0, 0, 0, 1]), 3) == 0.75
    assert degeneracy_share(np.array([2, 2]), 3) == 1.0


def test_probe_probabilities_are_bit_identical_to_predict_proba():
    rng = np.random.default_rng(5)
    for k in (2, 4):
        X = rng.normal(size=(400, 16)).astype(np.float32)
        y = rng.integers(0, k, 400)
        probe = LogisticProbe(seed=42).fit(X, y)
        out = probe.evaluate(X)
        np.testing.assert_array_equal(out.proba, probe.model.predict_proba(X))
        assert roc_auc_score(y == 1, out.proba[:, 1]) > 0.5 or k > 2
