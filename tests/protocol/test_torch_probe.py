"""The torch logistic backend: same objective as scikit-learn, solved to a tight tolerance."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import expit, log_softmax, softmax
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from prism_plugin.api import evaluate
from prism_plugin.errors import PrismError
from prism_plugin.metrics import auroc, ece
from prism_plugin.heads.logistic import LogisticProbe
from prism_plugin.protocol.torch_probe import _as_tensor, fit_logistic, resolve_device

from ._data import embeddings


def objective(X, y, coef, intercept, C):
    """scikit-learn's lbfgs objective scaled by 1 / (C n) and its gradient, in float64 NumPy."""
    X = X.astype(np.float64)
    n = len(y)
    z = X @ coef.T + intercept
    if coef.shape[0] == 1:
        z = z[:, 0]
        loss = np.logaddexp(0, z) - y * z
        G = (expit(z) - y)[:, None]
    else:
        lp = log_softmax(z, axis=1)
        loss = -lp[np.arange(n), y]
        G = np.exp(lp)
        G[np.arange(n), y] -= 1
    lam = 1.0 / (C * n)
    f = loss.mean() + 0.5 * lam * (coef ** 2).sum()
    grad = np.concatenate([G.T @ X / n + lam * coef, G.sum(0)[:, None] / n], axis=1)
    return f, grad


def sklearn_tight(X, y, C=1.0):
    """scikit-learn's own optimum: float64 features, tol 1e-10 (one BLAS thread: the same optimum; a
    multi-threaded BLAS spends most of a small lbfgs step synchronising, seconds on a busy machine)."""
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LogisticRegression(C=C, tol=1e-10, max_iter=100_000).fit(X.astype(np.float64), y)


@pytest.fixture(scope="module", params=[2, 5], ids=["binary", "multiclass"])
def problem(request):
    k = request.param
    X, y = embeddings(3000, k, dim=96, seed=1)
    Xt, yt = embeddings(4000, k, dim=96, seed=2)
    return k, X, y, Xt, yt, sklearn_tight(X, y)


def test_torch_reaches_the_optimum_sklearn_approaches(problem):
    k, X, y, Xt, yt, ref = problem
    fit = fit_logistic(X, y, k, C=1.0, device="cpu")
    assert fit.converged and fit.grad_max <= 1e-8
    assert fit.coef.shape == ((1, 96) if k == 2 else (k, 96))
    f_torch, g_torch = objective(X, y, fit.coef, fit.intercept, 1.0)
    f_ref, _ = objective(X, y, ref.coef_, ref.intercept_, 1.0)
    with threadpool_limits(1, user_api="blas"):
        loose = LogisticRegression(C=1.0, max_iter=1000).fit(X, y)  # the reference protocol's tol 1e-4
    f_loose, g_loose = objective(X, y, loose.coef_.astype(np.float64), loose.intercept_.astype(np.float64), 1.0)
    # independent float64 gradient at the torch solution is ~0, far below where tol 1e-4 stops
    assert np.abs(g_torch).max() < 1e-7 < np.abs(g_loose).max()
    assert f_torch <= f_ref + 1e-12
    assert f_torch < f_loose
    assert np.abs(fit.coef - ref.coef_).max() < 1e-3 * max(1.0, np.abs(ref.coef_).max())


def test_torch_agrees_with_tight_sklearn_on_metrics(problem):
    k, X, y, Xt, yt, ref = problem
    probe = LogisticProbe(seed=0, backend="torch", device="cpu").fit(X, y)
    out = probe.evaluate(Xt)
    p_ref = ref.predict_proba(Xt.astype(np.float64))
    assert out.proba.shape == p_ref.shape
    assert np.abs(out.proba - p_ref).max() < 1e-4
    assert abs(auroc(yt, out.proba) - auroc(yt, p_ref)) <= 1e-4
    for scheme in ("fixed", "adaptive"):
        assert abs(ece(yt, out.proba, 15, scheme) - ece(yt, p_ref, 15, scheme)) <= 2e-3
    # sklearn's decision conventions
    d_ref = ref.decision_function(Xt.astype(np.float64))
    assert out.decision.shape == d_ref.shape
    assert np.abs(out.decision - d_ref).max() < 1e-3
    if k == 2:
        np.testing.assert_array_equal(out.proba[:, 1], expit(out.decision))
        np.testing.assert_array_equal(out.proba[:, 0], 1 - expit(out.decision))
    else:
        np.testing.assert_allclose(out.proba, softmax(out.decision, axis=1), rtol=0, atol=1e-15)


def test_torch_backend_is_deterministic():
    X, y = embeddings(2000, 4, dim=64, seed=3)
    a = LogisticProbe(seed=42, backend="torch", device="cpu").fit(X, y)
    b = LogisticProbe(seed=123, backend="torch", device="cpu").fit(X, y)
    np.testing.assert_array_equal(a.torch_fit.coef, b.torch_fit.coef)
    np.testing.assert_array_equal(a.torch_fit.intercept, b.torch_fit.intercept)
    np.testing.assert_array_equal(a.evaluate(X).proba, b.evaluate(X).proba)


def test_labels_are_encoded_like_sklearn():
    X, y = embeddings(1500, 3, dim=32, seed=4)
    y_sparse = np.array([2, 5, 9])[y]  # non-contiguous labels: columns follow the sorted classes
    a = LogisticProbe(backend="torch", device="cpu").fit(X, y)
    b = LogisticProbe(backend="torch", device="cpu").fit(X, y_sparse)
    np.testing.assert_array_equal(b.classes_, [2, 5, 9])
    np.testing.assert_array_equal(a.evaluate(X).decision, b.evaluate(X).decision)


def test_torch_fit_does_not_copy_float32_features():
    X, _ = embeddings(500, 2, dim=16, seed=5)
    t = _as_tensor(X, resolve_device("cpu"))
    assert t.data_ptr() == X.ctypes.data  # shared memory, no float64 (or any) copy


def test_backend_recorded_in_runs_and_settings():
    tr, va, te = (embeddings(n, 3, dim=32, seed=s) for n, s in ((900, 6), (300, 7), (300, 8)))
    kw = dict(fractions=(0.1, 1.0), seeds=(42, 123))
    runs_torch = evaluate(tr, va, te, probe={"kind": "logistic", "backend": "torch"}, **kw)
    runs_sk = evaluate(tr, va, te, **kw)
    assert list(runs_torch["probe_backend"]) == ["torch"] * 4
    assert list(runs_sk["probe_backend"]) == ["sklearn"] * 4
    assert runs_torch["probe_converged"].all()
    assert list(runs_torch.columns).index("probe_backend") > list(runs_torch.columns).index("probe_converged")
    assert abs(runs_torch["auroc"] - runs_sk["auroc"]).max() < 0.01
    assert LogisticProbe(backend="torch").settings()["backend"] == "torch"
    assert LogisticProbe().settings() == {"kind": "logistic", "C": 1.0, "max_iter": 1000, "tol": 1e-4,
                                          "backend": "sklearn"}


def test_unknown_backend_is_a_one_line_error():
    with pytest.raises(PrismError, match=r"probe\.backend.*'sklearn'.*'torch'.*'jax'"):
        LogisticProbe(backend="jax")
    tr = embeddings(200, 2, dim=8, seed=9)
    with pytest.raises(PrismError, match="probe.backend"):
        evaluate(tr, tr, tr, fractions=(1.0,), seeds=(1,), probe={"kind": "logistic", "backend": "jax"})
