"""Every column of the protocol equals a straight, independent implementation of PROTOCOL §2-3."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, f1_score, roc_auc_score

from prism_plugin import evaluate


def make_embeddings(k, n_train, n_val, n_test, dim=24, seed=0, prior=None):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, dim)) * 0.6

    def draw(n):
        y = rng.choice(k, size=n, p=prior)
        X = centers[y] + rng.normal(size=(n, dim))
        X /= np.linalg.norm(X, axis=1, keepdims=True)  # L2-normalised, as the release
        return X.astype(np.float32), y

    return draw(n_train), draw(n_val), draw(n_test)


# ---- the straight implementation (written from the spec, sharing no code) ----
def subset(y, f, seed):
    np.random.seed(seed)
    out, forced = [], 0
    for c in np.unique(y):
        pos = np.flatnonzero(y == c)
        q = len(pos) * f
        forced += q < 1
        out.append(np.random.choice(pos, max(1, math.floor(q)), replace=False))
    return np.sort(np.concatenate(out)), forced


def straight_ece(y, proba, bins=15, adaptive=False):
    if proba.shape[1] == 2:
        conf, corr = proba[:, 1], (y == 1).astype(float)
    else:
        conf, corr = proba.max(1), (proba.argmax(1) == y).astype(float)
    edges = np.linspace(0, 1, bins + 1)
    if adaptive:
        e = np.quantile(conf, np.linspace(0, 1, bins + 1))
        e[0], e[-1] = 0.0, 1.0 + 1e-9
        e = np.unique(e)
        edges = e if len(e) >= 3 else edges
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (conf >= lo) & (conf < hi)
        if m.sum():
            total += m.sum() * abs(corr[m].mean() - conf[m].mean())
    return total / len(y)


def softmax_T(L, T):
    z = L / T
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def fit_T(L, y):
    def nll(t):
        p = softmax_T(L, t)
        return -np.mean(np.log(p[np.arange(len(y)), y] + 1e-12))
    return minimize_scalar(nll, bounds=(0.1, 10.0), method="bounded").x


def straight(train, val, test, fractions, seeds):
    (Xtr, ytr), (Xva, yva), (Xte, yte) = train, val, test
    k = int(max(ytr.max(), yte.max())) + 1
    rows = []
    for f in sorted(fractions):
        for s in seeds:
            idx, forced = subset(ytr, f, s)
            clf = LogisticRegression(C=1.0, max_iter=1000, random_state=s)
            clf.fit(Xtr[idx].astype(np.float32), ytr[idx])
            proba = np.vstack([clf.predict_proba(Xte[i:i + 20000].astype(np.float32))
                               for i in range(0, len(Xte), 20000)]).astype(np.float64)

            def logits(X):
                d = clf.decision_function(X.astype(np.float32)).astype(np.float64)
                return np.column_stack([-d, d]) if d.ndim == 1 else d

            T = fit_T(logits(Xva), yva)
            scaled = softmax_T(logits(Xte), T)
            pred = proba.argmax(1)
            rows.append({
                "fraction": f, "seed": s, "n_train": len(idx), "n_classes": k,
                "auroc": roc_auc_score(yte, proba[:, 1]) if k == 2 else roc_auc_score(yte, proba, multi_class="ovr"),
                "f1_macro": f1_score(yte, pred, average="macro", zero_division=0),
                "f1_binary": f1_score(yte, pred, zero_division=0) if k == 2 else np.nan,
                "brier": brier_score_loss(yte, proba[:, 1]) if k == 2 else np.nan,
                "ece_fixed": straight_ece(yte, proba), "ece_adaptive": straight_ece(yte, proba, adaptive=True),
                "temperature": T,
                "ece_scaled_fixed": straight_ece(yte, scaled),
                "ece_scaled_adaptive": straight_ece(yte, scaled, adaptive=True),
                "degeneracy_share": np.bincount(pred, minlength=k).max() / len(pred),
                "degenerate": np.bincount(pred, minlength=k).max() / len(pred) > 0.99,
                "forced_classes": forced,
                "nll": -np.mean(np.log(proba[np.arange(len(yte)), yte] + 1e-12)),
                "nll_scaled": -np.mean(np.log(scaled[np.arange(len(yte)), yte] + 1e-12)),
            })
    return pd.DataFrame(rows)


@pytest.mark.parametrize("k,prior", [(2, None), (5, [0.4, 0.3, 0.15, 0.1, 0.05])])
def test_every_column_matches_the_straight_implementation(k, prior):
    train, val, test = make_embeddings(k, 1500, 300, 500, seed=k, prior=prior)
    fractions, seeds = (0.01, 0.1, 1.0), (42, 123, 456)
    ours = evaluate(train, val, test, fractions=fractions, seeds=seeds)
    ref = straight(train, val, test, fractions, seeds)
    assert len(ours) == len(ref) == 9
    for col in ref.columns:
        a = pd.to_numeric(ours[col]).to_numpy(dtype=float)
        b = pd.to_numeric(ref[col]).to_numpy(dtype=float)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12, equal_nan=True, err_msg=col)


def test_reference_column_order_and_grid_order():
    train, val, test = make_embeddings(2, 400, 100, 100, seed=9)
    df = evaluate(train, val, test, fractions=(0.5, 0.1), seeds=(456, 42))
    reference_cols = ["model", "dataset", "fraction", "seed", "n_train", "n_classes", "auroc", "f1_macro",
                      "f1_binary", "brier", "ece_fixed", "ece_adaptive", "temperature", "ece_scaled_fixed",
                      "ece_scaled_adaptive", "degeneracy_share", "degenerate", "forced_classes"]
    assert [c for c in df.columns if c in reference_cols] == reference_cols
    assert list(zip(df.fraction, df.seed)) == [(0.1, 456), (0.1, 42), (0.5, 456), (0.5, 42)]


def test_full_fraction_fit_reuse_is_exact():
    train, val, test = make_embeddings(3, 600, 100, 200, seed=11)
    a = evaluate(train, val, test, fractions=(1.0,))
    cols = [c for c in a.columns if c not in ("seed",)]
    first = a.iloc[0][cols]
    for i in (1, 2):
        pd.testing.assert_series_equal(a.iloc[i][cols], first, check_names=False)


def test_missing_validation_gives_nan_temperature_and_one_warning():
    train, _, test = make_embeddings(2, 300, 10, 100, seed=12)
    with pytest.warns(UserWarning, match="no validation split") as rec:
        df = evaluate(train, None, test, fractions=(1.0,), seeds=(42,))
    assert len([w for w in rec if "validation" in str(w.message)]) == 1
    assert df["temperature"].isna().all() and df["ece_scaled_fixed"].isna().all()
    assert df["ece_fixed"].notna().all()


def test_natural_binary_scale_halves_the_temperature():
    train, val, test = make_embeddings(2, 800, 300, 300, seed=13)
    sym = evaluate(train, val, test, fractions=(1.0,), seeds=(42,))
    nat = evaluate(train, val, test, fractions=(1.0,), seeds=(42,), binary_logits="natural")
    assert nat["temperature"].iloc[0] == pytest.approx(sym["temperature"].iloc[0] / 2, rel=1e-4)
    assert nat["ece_scaled_fixed"].iloc[0] == pytest.approx(sym["ece_scaled_fixed"].iloc[0], abs=1e-5)
