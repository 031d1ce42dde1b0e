"""Test-time adaptation on hand-made batches: exact statistics, the CBR edge cases, BBSE, SHOT-IM."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import approx_fprime
from sklearn.preprocessing import StandardScaler

from prism_plugin.adaptation import tta
from prism_plugin.heads.standardised import StandardisedLogistic
from prism_plugin.metrics.core import softmax


def test_tgtstd_is_the_batch_zscore_in_the_heads_space():
    rng = np.random.default_rng(0)
    Xs = rng.normal(2.0, 3.0, size=(200, 4))
    Xt = rng.normal(-1.0, 0.5, size=(30, 4))
    src = tta.source_moments(Xs)
    moved = tta.restandardise(Xt, tta.batch_moments(Xt), src)
    # what a source-standardising head sees is exactly the batch's own z-score
    np.testing.assert_allclose((moved - src.mean) / src.std, StandardScaler().fit_transform(Xt), atol=1e-12)


def test_cbr_statistics_by_hand():
    X = np.array([[0.0, 0.0], [2.0, 4.0], [10.0, 10.0], [12.0, 10.0], [14.0, 16.0]])
    labels = np.array([0, 0, 1, 1, 1])
    mom = tta.class_balanced_moments(X, labels, source_std=np.array([9.0, 9.0]))
    np.testing.assert_allclose(mom.mean, [(1 + 12) / 2, (2 + 12) / 2])  # unweighted mean of class means
    # pooled within-class variance: (sum of squares) / (sum of (n_c - 1)) = / (1 + 2)
    ss = np.array([1 + 1 + 4 + 0 + 4, 4 + 4 + 4 + 4 + 16])
    np.testing.assert_allclose(mom.std, np.sqrt(ss / 3))


def test_cbr_empty_pseudo_classes_are_omitted():
    X = np.array([[0.0], [2.0], [10.0], [12.0]])
    # classes 0 and 3 present, 1 and 2 empty (K = 4): the mean averages the two present classes only
    mom = tta.class_balanced_moments(X, np.array([0, 0, 3, 3]), source_std=np.array([5.0]))
    assert mom.mean[0] == pytest.approx(6.0)
    assert mom.std[0] == pytest.approx(np.sqrt((1 + 1 + 1 + 1) / 2))


def test_cbr_singleton_enters_mean_not_variance():
    X = np.array([[0.0], [2.0], [100.0]])
    mom = tta.class_balanced_moments(X, np.array([0, 0, 1]), source_std=np.array([5.0]))
    assert mom.mean[0] == pytest.approx((1.0 + 100.0) / 2)  # the singleton's mean counts
    assert mom.std[0] == pytest.approx(np.sqrt(2.0 / 1))    # only class 0 contributes: ss 2, dof 1


def test_cbr_one_pseudo_class_falls_back_to_source_std():
    X = np.array([[0.0, 1.0], [2.0, 5.0], [4.0, 3.0]])
    src_std = np.array([7.0, 0.5])
    mom = tta.class_balanced_moments(X, np.zeros(3, dtype=int), source_std=src_std)
    np.testing.assert_allclose(mom.mean, X.mean(axis=0))
    np.testing.assert_array_equal(mom.std, src_std)
    assert "source std" in mom.note
    # only singletons: no within-class variance at all -> source std as well
    mom2 = tta.class_balanced_moments(X, np.array([0, 1, 2]), source_std=src_std)
    np.testing.assert_array_equal(mom2.std, src_std)


def test_cbr_mean_keeps_source_std_and_zero_target_std_is_recentred_only():
    X = np.array([[1.0, 3.0], [3.0, 3.0]])
    src = tta.Moments(np.array([0.0, 0.0]), np.array([2.0, 4.0]))
    mom = tta.class_balanced_moments(X, np.array([0, 1]), src.std, second_moment=False)
    np.testing.assert_array_equal(mom.std, src.std)
    moved = tta.restandardise(X, tta.batch_moments(X), src)  # feature 2 has zero batch std
    np.testing.assert_allclose(moved[:, 1], [0.0, 0.0])
    np.testing.assert_allclose(moved[:, 0], [-2.0, 2.0])  # (x - 2) / 1 * 2


def test_oracle_cb_removes_a_known_offset_exactly():
    rng = np.random.default_rng(1)
    means = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    ys = np.repeat([0, 1, 2], 100)
    Xs = means[ys] + rng.normal(size=(300, 2))
    yt = np.array([0] * 80 + [1] * 10 + [2] * 10)
    Xt = means[yt] + np.array([3.0, -2.0]) + rng.normal(size=(100, 2))
    head = StandardisedLogistic(seed=0).fit(Xs, ys)
    inputs = tta.AdaptationInputs(head=head, source=tta.source_moments(Xs), n_classes=3)
    a = tta.adapt("oracle_cb", Xt, inputs, y_true=yt)
    assert np.mean(a.pred == yt) > 0.95
    assert np.mean(head.evaluate(Xt).proba.argmax(1) == yt) < 0.9


def test_bbse_recovers_a_pure_label_shift():
    # a perfect classifier: confusion = diag(p_s); target predictions follow the target prior
    val_y = np.array([0] * 50 + [1] * 50)
    w = tta.bbse_weights(val_y, val_y, np.array([0] * 90 + [1] * 10), n_classes=2)
    np.testing.assert_allclose(w, [0.9 / 0.5, 0.1 / 0.5])
    adj = tta.bbse_adjust(np.array([[0.5, 0.5], [0.2, 0.8]]), w)
    np.testing.assert_allclose(adj[0], [0.9, 0.1])
    np.testing.assert_allclose(adj[1], [0.2 * 1.8 / (0.36 + 0.16), 0.8 * 0.2 / (0.36 + 0.16)])


def test_bbse_inverts_a_confusion_matrix():
    # classifier confuses 20 % of class 1 as class 0 on the source
    val_y = np.array([0] * 100 + [1] * 100)
    val_pred = np.array([0] * 100 + [0] * 20 + [1] * 80)
    # target prior (0.3, 0.7): predicted frequencies q = C w with C = [[.5, .1], [0, .4]]
    q = np.array([0.5 * 0.6 + 0.1 * 1.4, 0.4 * 1.4])
    target_pred = np.array([0] * int(round(q[0] * 1000)) + [1] * int(round(q[1] * 1000)))
    w = tta.bbse_weights(val_pred, val_y, target_pred, 2)
    np.testing.assert_allclose(w, [0.6, 1.4], atol=1e-9)


def test_im_gradient_matches_finite_differences():
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(20, 3))
    W = rng.normal(size=(4, 3)) * 0.5
    b = rng.normal(size=4) * 0.1
    theta = np.concatenate([W.ravel(), b])

    def f(t):
        return tta.im_loss_and_grad(Z, t[:12].reshape(4, 3), t[12:])[0]

    _, gW, gb = tta.im_loss_and_grad(Z, W, b)
    np.testing.assert_allclose(np.concatenate([gW.ravel(), gb]), approx_fprime(theta, f, 1e-7), atol=1e-5)


def test_shot_im_lowers_the_im_loss_and_needs_a_linear_head():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 5))
    y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)
    head = StandardisedLogistic(seed=0).fit(X, y)
    W, b = head.linear_params()
    Z = head.transform(X)
    np.testing.assert_allclose(softmax(Z @ W.T + b), head.evaluate(X).proba, atol=1e-5)
    W2, b2 = tta.information_maximisation(Z, W, b, steps=20, lr=0.01)
    assert tta.im_loss_and_grad(Z, W2, b2)[0] < tta.im_loss_and_grad(Z, W, b)[0]
    again = tta.information_maximisation(Z, W, b, steps=20, lr=0.01, seed=7)
    np.testing.assert_array_equal(again[0], W2)  # full batch: deterministic

    class NotLinear:
        kind = "knn1"

        def evaluate(self, X):
            return head.evaluate(X)

    inputs = tta.AdaptationInputs(head=NotLinear(), source=tta.source_moments(X), n_classes=3)
    assert tta.adapt("shot_im", X, inputs).proba is None


def test_plain_prism_logistic_head_is_adapted_in_raw_space():
    from prism_plugin.heads.logistic import LogisticProbe

    rng = np.random.default_rng(4)
    Xs = rng.normal(size=(300, 3)) * [1.0, 5.0, 0.2] + [0, 10, -3]
    ys = (Xs[:, 0] > 0).astype(int)
    head = LogisticProbe(seed=0).fit(Xs.astype(np.float32), ys)
    inputs = tta.AdaptationInputs(head=head, source=tta.source_moments(Xs), n_classes=2)
    Xt = Xs + [2.0, 0.0, 0.0]  # a shift along the decision direction
    assert np.mean(tta.adapt("tgtstd", Xt, inputs).pred == ys) > 0.95
    assert np.mean(head.evaluate(Xt.astype(np.float32)).proba.argmax(1) == ys) < 0.8
    shot = tta.adapt("shot_im", Xt, inputs)  # linear parameters read from the sklearn model
    assert shot.proba.shape == (300, 2)
