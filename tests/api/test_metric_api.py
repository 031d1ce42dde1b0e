"""The public metric API: hand-computed cases, and the same numbers the plugins write for the same inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

import prism_plugin
from prism_plugin import metrics as M
from prism_plugin.errors import PrismError
from prism_plugin.heads.logistic import LogisticProbe
from prism_plugin.protocol.sampling import stratified_subset


def _binary(p1):
    p1 = np.asarray(p1, dtype=float)
    return np.column_stack([1 - p1, p1])


def test_every_documented_function_is_exported():
    for name in ("auroc", "ece", "brier", "multiclass_brier", "nll", "degeneracy_share", "softmax", "binary_logits",
                 "neutral_temperature", "fit_temperature", "apply_temperature", "ood_stability_from_maps", "cri",
                 "ece_bin_edges"):
        assert name in M.__all__ and callable(getattr(M, name)) and getattr(M, name).__doc__, name
    doc = M.__doc__
    assert "[lo, hi)" in doc and "p(class 1)" in doc and "T = 2" in doc


def test_binary_metrics_by_hand():
    y = np.array([1, 0, 1, 1])
    proba = _binary([0.9, 0.25, 0.62, 1.0])
    # 15 fixed bins [lo, hi): 0.9 -> |1 - 0.9|, 0.25 -> |0 - 0.25|, 0.62 -> |1 - 0.62|; 1.0 is in no bin but counts in N
    assert M.ece(y, proba) == pytest.approx((0.1 + 0.25 + 0.38) / 4)
    assert M.brier(y, proba) == pytest.approx((0.01 + 0.0625 + 0.1444 + 0.0) / 4)
    assert M.nll(y, proba) == pytest.approx(-(math.log(0.9) + math.log(0.75) + math.log(0.62) + math.log(1 + 1e-12)) / 4)
    # AUROC: positives {0.8, 0.4} vs negatives {0.6, 0.2}: 3 of 4 pairs ordered
    assert M.auroc(np.array([1, 0, 1, 0]), _binary([0.8, 0.6, 0.4, 0.2])) == pytest.approx(0.75)
    assert math.isnan(M.auroc(np.array([1, 1]), _binary([0.3, 0.6])))  # one class: undefined
    # class-1 ECE, not top-label: predicting p1 = 0.3 for a class-0 sample is "confidence 0.3, wrong"
    assert M.ece(np.array([0]), _binary([0.3])) == pytest.approx(0.3)


def test_adaptive_ece_and_multiclass_by_hand():
    y = np.array([0, 1, 1, 1])
    proba = _binary([0.1, 0.3, 0.6, 0.8])
    # 2 equal-mass bins: edges [0, median 0.45, 1 + 1e-9] -> {0.1, 0.3}: |0.5 - 0.2|, {0.6, 0.8}: |1 - 0.7|
    assert np.allclose(M.ece_bin_edges(proba[:, 1], 2, "adaptive"), [0.0, 0.45, 1 + 1e-9])
    assert M.ece(y, proba, n_bins=2, scheme="adaptive") == pytest.approx((2 * 0.3 + 2 * 0.3) / 4)
    P = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.08, 0.82]])
    yk = np.array([0, 2, 2])
    # top-label: conf (0.7 right, 0.5 wrong, 0.82 right), each in its own bin
    assert M.ece(yk, P) == pytest.approx((0.3 + 0.5 + 0.18) / 3)
    assert M.multiclass_brier(yk, P) == pytest.approx(((0.09 + 0.04 + 0.01) + (0.04 + 0.25 + 0.49) + (0.01 + 0.0064 + 0.0324)) / 3)
    assert math.isnan(M.brier(yk, P))
    assert M.degeneracy_share(np.array([0, 0, 0, 1]), 2) == 0.75


def test_binary_temperature_scale():
    d = np.array([-2.0, -0.3, 0.0, 0.7, 3.1])
    L = M.binary_logits(d)
    assert np.array_equal(L, np.column_stack([-d, d]))
    assert M.neutral_temperature(2) == 2.0 and M.neutral_temperature(2, "natural") == 1.0
    assert M.neutral_temperature(5) == 1.0
    assert np.allclose(M.apply_temperature(L, 2.0)[:, 1], expit(d))          # T = 2 is the identity
    assert np.allclose(M.apply_temperature(L, 4.0)[:, 1], expit(d / 2))      # T = 4 halves the natural logit
    assert np.allclose(M.apply_temperature(M.binary_logits(d, "natural"), 1.0)[:, 1], expit(d))


def test_fit_temperature_recovers_the_generating_temperature():
    rng = np.random.default_rng(0)
    d = rng.normal(scale=3.0, size=10000)
    y = (rng.random(d.size) < expit(2 * d / 4.0)).astype(int)  # calibrated at T = 4 on the [-d, d] scale
    L = M.binary_logits(d)
    t = M.fit_temperature(L, y)
    assert t == pytest.approx(4.0, abs=0.25)
    # independent check: a brute-force grid over the search box finds the same minimum of the NLL
    grid = np.arange(0.1, 10.0, 0.02)
    coarse = grid[int(np.argmin([M.nll(y, M.apply_temperature(L, g)) for g in grid]))]
    fine = np.arange(coarse - 0.02, coarse + 0.02, 0.0005)
    best = fine[int(np.argmin([M.nll(y, M.apply_temperature(L, g)) for g in fine]))]
    assert t == pytest.approx(best, abs=2e-3)
    assert M.fit_temperature(L, y, bounds=(0.1, 3.0)) == pytest.approx(3.0, abs=1e-3)  # bound-limited


def test_ood_stability_and_cri_by_hand():
    stab = M.ood_stability_from_maps({"A": 0.9, "B": 0.8},
                                     {("A", "B"): 0.81, ("B", "A"): 0.85, ("C", "A"): 0.5})
    # A->B: 0.81/0.9 = 0.9; B->A: 0.85/0.8 > 1, clipped to 1; C has no in-distribution AUROC: left out
    assert stab == pytest.approx((0.9 + 1.0) / 2)
    assert math.isnan(M.ood_stability_from_maps({"A": 0.9}, {("C", "A"): 0.5}))
    assert math.isnan(M.ood_stability_from_maps({}, {}))
    with pytest.raises(PrismError, match="not a \\(source, target\\) pair"):
        M.ood_stability_from_maps({"A": 0.9}, {"A": 0.5})
    a, e, s = 0.9, 0.1, 0.95
    assert M.cri(a, e, s) == pytest.approx(0.9 * 0.9 * 0.95)
    assert M.cri(a, e, s, "arithmetic") == pytest.approx((0.9 + 0.9 + 0.95) / 3)
    assert M.cri(a, e, s, "geometric") == pytest.approx((0.9 * 0.9 * 0.95) ** (1 / 3))
    assert M.cri(a, e, s, "worst_axis") == pytest.approx(0.9)
    assert M.cri(a, -0.2, s) == pytest.approx(0.9 * 1.0 * 0.95)  # ECE clipped to [0, 1]
    assert isinstance(M.cri(a, e, s), float)
    arr = M.cri(np.array([0.9, 0.8]), np.array([0.1, 0.2]), np.array([1.0, 0.5]))
    assert np.allclose(arr, [0.81, 0.32])
    with pytest.raises(PrismError, match="unknown CRI aggregation"):
        M.cri(a, e, s, "harmonic")


def test_cri_and_stability_match_the_cri_summary_plugin():
    from prism_plugin.summaries import cri as cri_plugin
    from prism_plugin.tables import RunTables

    ind = pd.DataFrame([{"model": m, "dataset": ds, "fraction": 1.0, "seed": s, "auroc": a + 0.01 * (s - 1.5),
                         "f1_macro": 0.8, "ece_fixed": 0.2, "temperature": 1.0, "ece_scaled_fixed": e,
                         "degeneracy_share": 0.5, "degenerate": False}
                        for m, vals in {"M1": {"P": (0.9, 0.05), "Q": (0.8, 0.15)},
                                        "M2": {"P": (0.85, 0.10), "Q": (0.7, 0.02)}}.items()
                        for ds, (a, e) in vals.items() for s in (1, 2)])
    tr = pd.DataFrame([{"model": m, "src": src, "tgt": tgt, "pair": f"{src}->{tgt}", "fraction": 1.0, "seed": 1,
                        "auroc": a, "ece_fixed": 0.3, "temperature_src": 1.0, "ece_scaled_fixed": 0.2,
                        "degeneracy_share": 0.5, "degenerate": False}
                       for m, pairs in {"M1": {("P", "Q"): 0.72, ("Q", "P"): 0.84},
                                        "M2": {("P", "Q"): 0.80, ("Q", "P"): 0.60}}.items()
                       for (src, tgt), a in pairs.items()])
    out = cri_plugin.summarize(tables=RunTables(indomain=ind, transfer=tr), options={})
    table = out.tables["cri_variants_100"]
    for m in ("M1", "M2"):
        cells = ind[ind.model == m].groupby("dataset")[["auroc", "ece_scaled_fixed"]].mean()
        maps_id = cells["auroc"].to_dict()
        maps_ood = {(r.src, r.tgt): r.auroc for r in tr[tr.model == m].itertuples()}
        stab = M.ood_stability_from_maps(maps_id, maps_ood)
        assert table.loc[m, "ood_stability"] == pytest.approx(stab, abs=1e-12)
        a, e = cells["auroc"].mean(), cells["ece_scaled_fixed"].mean()
        for agg in ("multiplicative", "arithmetic", "geometric", "worst_axis"):
            assert table.loc[m, f"cri_{agg}"] == pytest.approx(M.cri(a, e, stab, agg), abs=1e-12)


def _data(k=2, n=(240, 120, 160), d=12, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for size in n:
        y = np.arange(size) % k
        X = rng.normal(size=(size, d)).astype(np.float32)
        X[np.arange(size), y] += 1.0
        out.append((X, y))
    return out


@pytest.mark.parametrize("k", [2, 3])
def test_plugin_rows_equal_direct_calls_on_the_same_probe(k):
    (Xtr, ytr), (Xva, yva), (Xte, yte) = _data(k=k)
    row = prism_plugin.evaluate((Xtr, ytr), (Xva, yva), (Xte, yte), fractions=[0.5], seeds=[123]).iloc[0]
    idx = stratified_subset(ytr, 0.5, 123).indices
    head = LogisticProbe(seed=123).fit(Xtr[idx], ytr[idx])
    test, val = head.evaluate(Xte), head.evaluate(Xva)
    P = np.asarray(test.proba, dtype=np.float64)  # the runner hands plugins float64 probabilities
    logits = lambda dec: M.binary_logits(dec) if dec.ndim == 1 else dec  # noqa: E731
    t = M.fit_temperature(logits(val.decision), yva)
    scaled = M.apply_temperature(logits(test.decision), t)
    direct = {
        "auroc": M.auroc(yte, P),
        "ece_fixed": M.ece(yte, P, 15, "fixed"),
        "ece_adaptive": M.ece(yte, P, 15, "adaptive"),
        "nll": M.nll(yte, P),
        "temperature": t,
        "ece_scaled_fixed": M.ece(yte, scaled, 15, "fixed"),
        "ece_scaled_adaptive": M.ece(yte, scaled, 15, "adaptive"),
        "nll_scaled": M.nll(yte, scaled),
        "degeneracy_share": M.degeneracy_share(P.argmax(1), k),
    }
    if k == 2:
        direct["brier"] = M.brier(yte, P)
    else:
        assert math.isnan(row["brier"])
    for name, value in direct.items():
        assert row[name] == value, (name, row[name], value)  # one implementation: bit-identical
    assert row["n_train"] == len(idx)
