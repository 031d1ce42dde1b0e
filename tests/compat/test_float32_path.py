"""The reference's floating-point path (probability_dtype="float32") against a reference-style computation
written here from PROTOCOL §2.2-§3: float32 features, sklearn's float32 predict_proba kept, metrics on it, the
scaled probabilities softmax(L / T) of the float64 logit matrix (the package's ``np.asarray(logits, dtype=float)``).
This runs without the PRISM package; tests/compat/test_package_equality.py compares with the package's own code."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, f1_score, roc_auc_score

import prism_plugin
from prism_plugin.errors import PrismError

BINS = 15
PATH_COLUMNS = ["brier", "ece_fixed", "ece_adaptive"]  # the scaled ECEs are float64 on both paths


def _splits(k: int, seed: int, sizes=(160, 90, 140), dim=12):
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        y = np.arange(n) % k
        X = rng.normal(size=(n, dim)) + 0.6 * np.eye(k, dim)[y]
        out.append(((X / np.linalg.norm(X, axis=1, keepdims=True)), y))  # float64: the path casts to float32
    return out


# ----------------------------------------------------------------- the reference computation, from the definitions
def _subset(y, f, s):  # §2.2: legacy global RNG, per class ascending, max(1, floor(n_c f)), sorted union
    np.random.seed(s)
    picked = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        picked.extend(np.random.choice(idx, size=max(1, int(len(idx) * f)), replace=False))
    return np.array(sorted(picked))


def _ece(conf, correct, edges):  # §3: sum |B| |acc - conf| / N over half-open bins, empty bins skipped
    total, n = 0.0, len(conf)
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (conf >= lo) & (conf < hi)
        if m.sum() > 0:
            total += m.sum() * abs(correct[m].mean() - conf[m].mean())
    return float(total / n)


def _edges(conf, scheme):
    if scheme == "fixed":
        return np.linspace(0, 1, BINS + 1)
    e = np.quantile(conf, np.linspace(0, 1, BINS + 1))
    e[0], e[-1] = 0.0, 1.0 + 1e-9
    e = np.unique(e)
    return np.linspace(0, 1, BINS + 1) if len(e) < 3 else e


def _conf(P, y):
    if P.shape[1] == 2:
        return P[:, 1], (y == 1).astype(float)
    return P.max(axis=1), (P.argmax(axis=1) == y).astype(float)


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _logits(clf, X):
    d = clf.decision_function(X)
    return np.hstack([-d.reshape(-1, 1), d.reshape(-1, 1)]) if d.ndim == 1 else d


def _reference_run(train, val, test, f, s):
    (Xtr, ytr), (Xva, yva), (Xte, yte) = train, val, test
    idx = _subset(ytr, f, s)
    clf = LogisticRegression(C=1.0, max_iter=1000, random_state=s).fit(np.asarray(Xtr[idx], np.float32), ytr[idx])
    P = clf.predict_proba(np.asarray(Xte, np.float32))
    assert P.dtype == np.float32
    conf, corr = _conf(P, yte)
    Lva = _logits(clf, np.asarray(Xva, np.float32))

    def nll(T):
        p = _softmax(Lva / T)
        return -np.log(p[np.arange(len(yva)), yva] + 1e-12).mean()

    T = float(minimize_scalar(nll, bounds=(0.1, 10.0), method="bounded").x)
    S = _softmax(np.asarray(_logits(clf, np.asarray(Xte, np.float32)), dtype=float) / T)
    assert S.dtype == np.float64
    s_conf, s_corr = _conf(S, yte)
    k = P.shape[1]
    return {
        "auroc": roc_auc_score(yte, P[:, 1]) if k == 2 else roc_auc_score(yte, P, multi_class="ovr", average="macro"),
        "f1_macro": f1_score(yte, P.argmax(axis=1), average="macro", zero_division=0),
        "brier": brier_score_loss(yte, P[:, 1]) if k == 2 else float("nan"),
        "ece_fixed": _ece(conf, corr, _edges(conf, "fixed")),
        "ece_adaptive": _ece(conf, corr, _edges(conf, "adaptive")),
        "temperature": T,
        "ece_scaled_fixed": _ece(s_conf, s_corr, _edges(s_conf, "fixed")),
        "ece_scaled_adaptive": _ece(s_conf, s_corr, _edges(s_conf, "adaptive")),
    }


def _same(a, b) -> bool:
    return (np.isnan(a) and np.isnan(b)) or a == b


@pytest.mark.parametrize("k", [2, 3])
def test_float32_path_equals_the_reference_computation_exactly(k):
    train, val, test = _splits(k, seed=k)
    grid = dict(fractions=[0.25, 1.0], seeds=[7])
    exact = prism_plugin.evaluate(train, val, test, probability_dtype="float32", **grid)
    default = prism_plugin.evaluate(train, val, test, **grid)
    differs = 0
    for (_, e), (_, d) in zip(exact.iterrows(), default.iterrows()):
        ref = _reference_run(train, val, test, e["fraction"], int(e["seed"]))
        for col, value in ref.items():
            assert _same(e[col], value), (k, e["fraction"], col, e[col], value)  # bit for bit
        differs += sum(not _same(d[c], ref[c]) for c in PATH_COLUMNS)
        # every other column is untouched by the option
        others = [c for c in exact.columns if c not in PATH_COLUMNS]
        pd.testing.assert_series_equal(e[others], d[others], check_names=False)
    assert differs > 0  # the default (float64 metric arithmetic) is not the reference path: the test can fail


def test_default_path_is_unchanged_and_bad_values_are_one_line():
    train, val, test = _splits(2, seed=5, sizes=(80, 40, 60), dim=6)
    a = prism_plugin.evaluate(train, val, test, fractions=[1.0], seeds=[0])
    b = prism_plugin.evaluate(train, val, test, fractions=[1.0], seeds=[0], probability_dtype="float64")
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(PrismError, match="probability_dtype: must be 'float64'.*'float32'"):
        prism_plugin.evaluate(train, val, test, fractions=[1.0], seeds=[0], probability_dtype="float16")


def test_task_key_is_validated(tmp_path):
    from tests.conftest import run_main

    ok = run_main("validate", "prism_demo", "--set", "probability_dtype=float32")
    assert ok.returncode == 0, ok.stderr
    bad = run_main("validate", "prism_demo", "--set", "probability_dtype=half")
    assert bad.returncode == 2 and "probability_dtype" in bad.stderr and "float32" in bad.stderr
