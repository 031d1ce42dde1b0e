"""The audit's probe heads against scikit-learn's own estimators, and their registration."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier, NearestCentroid
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from prism_plugin.heads.standardised import HEADS, CentroidHead, OneNNHead, linear_params
from prism_plugin.errors import PrismError
from prism_plugin.metrics.core import softmax
from prism_plugin.plugins import get_host
from prism_plugin.protocol.grid import GridSpec, run_grid
from prism_plugin.protocol.inputs import SplitArrays
from prism_plugin.protocol.settings import check_probe


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    means = rng.normal(scale=3.0, size=(4, 6))
    y = np.repeat(np.arange(4), 60)
    X = (means[y] + rng.normal(size=(240, 6)) * [1, 2, 0.5, 1, 3, 1] + [5, -2, 0, 1, 0, 8]).astype(np.float32)
    yt = np.repeat(np.arange(4), 25)
    Xt = (means[yt] + rng.normal(size=(100, 6)) * [1, 2, 0.5, 1, 3, 1] + [5, -2, 0, 1, 0, 8]).astype(np.float32)
    return X, y, Xt, yt


def test_logistic_std_is_the_standardised_sklearn_logistic(data):
    X, y, Xt, _ = data
    ours = HEADS["logistic_std"].factory(seed=3, C=0.5).fit(X, y).evaluate(Xt)
    ref = make_pipeline(StandardScaler(), LogisticRegression(C=0.5, max_iter=1000, random_state=3))
    ref.fit(X.astype(np.float64), y)
    np.testing.assert_allclose(ours.proba, ref.predict_proba(Xt.astype(np.float64)), atol=1e-4)
    np.testing.assert_array_equal(ours.proba.argmax(1), ref.predict(Xt.astype(np.float64)))


def test_knn1_matches_sklearn_and_scores_are_class_distances(data):
    X, y, Xt, _ = data
    head = HEADS["knn1"].factory(seed=0).fit(X, y)
    out = head.evaluate(Xt)
    sc = StandardScaler().fit(X.astype(np.float64))
    ref = KNeighborsClassifier(n_neighbors=1).fit(sc.transform(X), y)
    np.testing.assert_array_equal(out.proba.argmax(1), ref.predict(sc.transform(Xt)))
    d, _ = ref.kneighbors(sc.transform(Xt), n_neighbors=1)
    np.testing.assert_allclose(-out.decision.max(axis=1), d[:, 0], rtol=1e-6)
    np.testing.assert_allclose(out.proba, softmax(out.decision))


@pytest.mark.parametrize("cosine", [False, True])
def test_centroid_heads_match_sklearn_nearest_centroid(data, cosine):
    X, y, Xt, _ = data
    head = HEADS["centroid_cos" if cosine else "centroid"].factory(seed=0).fit(X, y)
    out = head.evaluate(Xt)
    sc = StandardScaler().fit(X.astype(np.float64))
    Z, Zt = sc.transform(X), sc.transform(Xt)
    if cosine:
        # cosine to the class mean = Euclidean on unit vectors against normalised means
        means = np.stack([Z[y == c].mean(0) for c in range(4)])
        means /= np.linalg.norm(means, axis=1, keepdims=True)
        zt = Zt / np.linalg.norm(Zt, axis=1, keepdims=True)
        expected = np.argmax(zt @ means.T, axis=1)
        assert head.kind == "centroid_cos"
    else:
        expected = NearestCentroid().fit(Z, y).predict(Zt)
    np.testing.assert_array_equal(out.proba.argmax(1), expected)
    W, b = linear_params(head)
    np.testing.assert_allclose(softmax(head.transform(Xt) @ W.T + b), out.proba, atol=1e-12)


def test_linear_svm_margins_are_the_logits(data):
    X, y, Xt, _ = data
    head = HEADS["linear_svm"].factory(seed=1, C=0.1).fit(X, y)
    out = head.evaluate(Xt)
    sc = StandardScaler().fit(X.astype(np.float64))
    ref = LinearSVC(C=0.1, max_iter=1000, random_state=1).fit(sc.transform(X), y)
    np.testing.assert_allclose(out.decision, ref.decision_function(sc.transform(Xt)), atol=1e-6)
    np.testing.assert_allclose(out.proba, softmax(out.decision))


def test_binary_heads_follow_the_prism_convention(data):
    X, y, Xt, _ = data
    yb = (y >= 2).astype(int)
    for kind, spec in HEADS.items():
        head = spec.factory(seed=0).fit(X, yb)
        out = head.evaluate(Xt)
        assert out.decision.ndim == 1, kind  # one decision value d; the grid makes [-d, d]
        np.testing.assert_allclose(out.proba[:, 1], 1 / (1 + np.exp(-out.decision.astype(np.float64))), atol=1e-6,
                                   err_msg=kind)
        params = linear_params(head)
        assert (params is not None) is spec.linear, kind  # the declared trait is what the head offers
        if params is None:
            assert kind == "knn1"
        else:
            W, b = params
            np.testing.assert_allclose(softmax(head.transform(Xt) @ W.T + b), out.proba, atol=1e-5, err_msg=kind)


def test_heads_are_registered_and_run_in_the_grid(data):
    X, y, Xt, yt = data
    host = get_host()
    reg = host.registry("heads")
    assert tuple(HEADS) == ("logistic_std", "knn1", "centroid", "centroid_cos", "linear_svm")
    assert [HEADS[k].linear for k in HEADS] == [True, False, True, True, True]
    for kind, spec in HEADS.items():
        # registered by the built-in heads plugin, with the factory, its settings and the linear trait
        assert reg.entry(kind).plugin == "builtin_heads", kind
        assert reg.get(kind) is spec.factory and reg.meta(kind, "settings") == spec.settings
        assert host.head_traits(kind)["linear"] is spec.linear
    ident = {"task": "t", "adapter": "a", "model": "m", "dataset": "d", "meta": {"kind": "indomain"}}
    tr, te = SplitArrays(X, y), SplitArrays(Xt, yt)
    spec = GridSpec(fractions=(1.0,), seeds=(0,), probe=check_probe({"kind": "knn1"}))
    row = next(iter(run_grid(tr, None, te, 4, spec, host, ident).values()))
    assert row["probe"] == "knn1" and row["f1_macro"] > 0.8
    with pytest.raises(PrismError, match=r"probe.neighbours: unknown key 'probe.neighbours' for probe head 'centroid'.*standardize"):
        check_probe({"kind": "centroid", "neighbours": 3})
    with pytest.raises(PrismError, match=r"probe.C: must be a finite number, got 'large' \(probe head logistic_std\)"):
        check_probe({"kind": "logistic_std", "C": "large"})
    assert check_probe({"kind": "linear_svm", "C": 2}) == {"kind": "linear_svm", "C": 2.0, "max_iter": 1000,
                                                           "tol": 1e-4, "standardize": True}


def test_heads_without_standardisation(data):
    X, y, Xt, _ = data
    head = OneNNHead(seed=0, standardize=False).fit(X, y)
    ref = KNeighborsClassifier(n_neighbors=1).fit(X, y)
    np.testing.assert_array_equal(head.evaluate(Xt).proba.argmax(1), ref.predict(Xt))
    c = CentroidHead(standardize=False).fit(X, y)
    np.testing.assert_array_equal(c.evaluate(Xt).proba.argmax(1), NearestCentroid().fit(X, y).predict(Xt))
