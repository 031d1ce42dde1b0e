"""The standardised-feature probe heads of the hematology audit, each with its declared settings.

Every head here fits its feature standardisation (per-feature mean and population std, a zero std
replaced by 1, as scikit-learn's ``StandardScaler``) on the features it is trained on, i.e. the
**source train split** (or its label-fraction subset), and applies it to every split it
evaluates, as the audit does ("fit source-domain standardization", all heads). Set
``standardize: false`` to work on raw features. Heads return
:class:`~prism_plugin.heads.logistic.ProbeOutput` (``decision`` in the head's native form,
``proba`` consistent with it) and expose

* ``transform(X)`` - the features in the head's own space (standardised, and row-normalised for
  the cosine head), and
* ``linear_params()`` - ``(W, b)`` with ``softmax(transform(X) @ W.T + b) == proba`` when the head
  is linear in that space (logistic, SVM, both centroids), else ``None`` (1-NN). SHOT-IM adapts
  these parameters; the heads are registered with the matching ``linear`` trait (every head but
  ``knn1``), which SHOT-IM reads from the head registry.

====================  ===============================================================================
kind                  head
====================  ===============================================================================
``logistic_std``      ``LogisticRegression(C, max_iter=1000, random_state=seed)`` (the PRISM probe,
                      :class:`~prism_plugin.heads.logistic.LogisticProbe`) on source-standardised
                      features: the audit's main probe. ``C`` selects the regularisation (the audit's
                      A.16 sweep uses 1e-4, 1e-2, 1, 1e2).
``knn1``              1-nearest neighbour (Euclidean, standardised space). ``decision[:, k]`` is minus
                      the distance to the nearest training sample of class k, so its arg-max is the 1-NN
                      label; ``proba = softmax(decision)`` (a monotone score, not a calibrated
                      probability).
``centroid``          nearest class mean (Euclidean). ``decision = z @ mu_k - ||mu_k||^2 / 2``, which
                      differs from ``-||z - mu_k||^2 / 2`` by a per-row constant, so its softmax is the
                      identity-covariance Gaussian posterior and its arg-max the nearest centroid.
``centroid_cos``      nearest class mean by cosine similarity; ``decision = cos(z, mu_k)`` in [-1, 1],
                      ``proba = softmax(decision)`` (nearly uniform before temperature scaling).
``linear_svm``        ``LinearSVC(C, max_iter, random_state=seed)`` (squared hinge, one-vs-rest).
                      ``decision`` are the SVM margins used as logits; probabilities are
                      ``softmax(margins)`` for K > 2 and ``sigmoid(margin)`` for K = 2 (the same map the
                      logistic probe uses), **not** Platt scaling: margins are not log-odds, so read the
                      raw ECE of this head as uncalibrated scores and compare it after temperature
                      scaling.
====================  ===============================================================================

Binary problems (K = 2) keep the PRISM convention: ``decision`` is the single column ``d`` (the grid
turns it into the logits ``[-d, d]``) and ``proba = [1 - sigmoid(d), sigmoid(d)]``.

Settings an include sets for another head (the logistic probe's ``C``, ``max_iter``, ...) are dropped
when a task switches to one of these heads (``--probe knn1`` works on any task).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, NamedTuple, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    from sklearn.svm import LinearSVC

from prism_plugin.heads.base import ProbeOutput, Setting
from prism_plugin.heads.logistic import LogisticProbe
from prism_plugin.metrics.core import softmax

STANDARDIZE = {"standardize": Setting(bool, True)}
#: the settings of the linear heads (logistic_std, linear_svm)
LINEAR_SETTINGS = {"C": Setting(float, 1.0, lo=0.0, hi=1e12, lo_open=True),
                   "max_iter": Setting(int, 1000, lo=1, hi=10**7),
                   "tol": Setting(float, 1e-4, lo=0.0, hi=1.0, lo_open=True), **STANDARDIZE}


class Standardiser:
    """Per-feature mean and population std fitted on one matrix (zero std -> 1)."""

    def __init__(self, enabled: bool = True):
        self.enabled = bool(enabled)
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None

    def fit(self, X: np.ndarray) -> "Standardiser":
        X = np.asarray(X, dtype=np.float64)
        self.mean = X.mean(axis=0)
        std = X.std(axis=0)
        std[std == 0] = 1.0
        self.std = std
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if not self.enabled:
            return X
        return (X - self.mean) / self.std


def _binary_output(d: np.ndarray) -> ProbeOutput:
    from scipy.special import expit
    p1 = expit(d)
    return ProbeOutput(decision=d, proba=np.column_stack([1.0 - p1, p1]))


def _multi_output(decision: np.ndarray) -> ProbeOutput:
    return ProbeOutput(decision=decision, proba=softmax(decision))


def _as_proba_logits(W: np.ndarray, b: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Binary single-row (w, b) -> two rows [0, w] so that softmax gives [1 - sigmoid, sigmoid]."""
    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    b = np.atleast_1d(np.asarray(b, dtype=np.float64))
    if n_classes == 2 and W.shape[0] == 1:
        return np.vstack([np.zeros_like(W[0]), W[0]]), np.array([0.0, b[0]])
    return W, b


class _Base:
    kind = "base"

    def __init__(self, seed: int = 0, standardize: bool = True):
        self.seed = int(seed)
        self.scaler = Standardiser(standardize)
        self.n_classes: int | None = None
        self.converged: bool | None = None

    def transform(self, X: np.ndarray) -> np.ndarray:
        return self.scaler.transform(X)

    def linear_params(self) -> tuple[np.ndarray, np.ndarray] | None:
        return None

    def _fit_scaler(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = np.asarray(y, dtype=np.int64)
        self.n_classes = int(y.max()) + 1
        self.scaler.fit(X)
        return self.scaler.transform(X), y


class StandardisedLogistic(_Base):
    """The PRISM logistic probe on source-standardised features (the audit's main probe)."""

    kind = "logistic_std"

    def __init__(self, seed: int = 0, C: float = 1.0, max_iter: int = 1000, tol: float = 1e-4,
                 standardize: bool = True):
        super().__init__(seed, standardize)
        self.inner = LogisticProbe(seed=seed, C=C, max_iter=max_iter, tol=tol)

    def fit(self, X, y):
        Z, y = self._fit_scaler(X, y)
        self.inner.fit(Z.astype(np.float32), y)
        self.converged = self.inner.converged
        return self

    def evaluate(self, X) -> ProbeOutput:
        return self.inner.evaluate(self.transform(X).astype(np.float32))

    def linear_params(self):
        m = self.inner.model
        return _as_proba_logits(m.coef_, m.intercept_, self.n_classes)


class LinearSVMHead(_Base):
    """``LinearSVC`` on source-standardised features; margins as logits (see module docstring)."""

    kind = "linear_svm"

    def __init__(self, seed: int = 0, C: float = 1.0, max_iter: int = 1000, tol: float = 1e-4,
                 standardize: bool = True):
        super().__init__(seed, standardize)
        self.C, self.max_iter, self.tol = float(C), int(max_iter), float(tol)
        self.model: LinearSVC | None = None

    def fit(self, X, y):
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.svm import LinearSVC
        Z, y = self._fit_scaler(X, y)
        self.model = LinearSVC(C=self.C, max_iter=self.max_iter, tol=self.tol, random_state=self.seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            self.model.fit(Z, y)
        self.converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        return self

    def evaluate(self, X) -> ProbeOutput:
        d = self.model.decision_function(self.transform(X))
        return _binary_output(d) if d.ndim == 1 else _multi_output(d)

    def linear_params(self):
        return _as_proba_logits(self.model.coef_, self.model.intercept_, self.n_classes)


class OneNNHead(_Base):
    """1-nearest neighbour; decision = minus the distance to each class's nearest training sample."""

    kind = "knn1"

    def __init__(self, seed: int = 0, standardize: bool = True):
        super().__init__(seed, standardize)
        self.train: np.ndarray | None = None
        self.labels: np.ndarray | None = None

    def fit(self, X, y):
        Z, y = self._fit_scaler(X, y)
        self.train, self.labels = Z, y
        return self

    def class_distances(self, Z: np.ndarray) -> np.ndarray:
        from sklearn.metrics import pairwise_distances_chunked
        out = np.full((Z.shape[0], self.n_classes), np.inf)
        start = 0
        for block in pairwise_distances_chunked(Z, self.train, metric="euclidean", n_jobs=1):
            for c in range(self.n_classes):
                cols = self.labels == c
                if cols.any():
                    out[start:start + block.shape[0], c] = block[:, cols].min(axis=1)
            start += block.shape[0]
        return out

    def evaluate(self, X) -> ProbeOutput:
        decision = -self.class_distances(self.transform(X))
        if self.n_classes == 2:  # binary convention: d = score(1) - score(0)
            return _binary_output(decision[:, 1] - decision[:, 0])
        return _multi_output(decision)


class CentroidHead(_Base):
    """Nearest class mean, Euclidean (``cosine=False``) or cosine (``cosine=True``)."""

    kind = "centroid"

    def __init__(self, seed: int = 0, standardize: bool = True, cosine: bool = False):
        super().__init__(seed, standardize)
        self.cosine = bool(cosine)
        self.centroids: np.ndarray | None = None

    @staticmethod
    def _unit(Z: np.ndarray) -> np.ndarray:
        norm = np.linalg.norm(Z, axis=1, keepdims=True)
        return Z / np.where(norm > 0, norm, 1.0)

    def transform(self, X):
        Z = self.scaler.transform(X)
        return self._unit(Z) if self.cosine else Z

    def fit(self, X, y):
        Z, y = self._fit_scaler(X, y)
        means = np.stack([Z[y == c].mean(axis=0) for c in range(self.n_classes)])
        self.centroids = self._unit(means) if self.cosine else means
        return self

    def linear_params(self):
        W = self.centroids
        b = np.zeros(len(W)) if self.cosine else -0.5 * (W ** 2).sum(axis=1)
        return W, b

    def evaluate(self, X) -> ProbeOutput:
        W, b = self.linear_params()
        decision = self.transform(X) @ W.T + b
        if self.n_classes == 2:
            return _binary_output(decision[:, 1] - decision[:, 0])
        return _multi_output(decision)


def cosine_centroid(seed: int = 0, **settings) -> CentroidHead:
    """Nearest class mean by cosine similarity (the ``centroid`` head with ``cosine=True``)."""
    head = CentroidHead(seed=seed, cosine=True, **settings)
    head.kind = "centroid_cos"
    return head


class HeadSpec(NamedTuple):
    """A head factory, its declared settings and its ``linear`` trait (SHOT-IM adapts ``linear_params()``)."""

    factory: Callable[..., Any]
    settings: dict[str, Setting]
    linear: bool


#: kind -> head, registered in this order by :mod:`prism_plugin.heads.builtin`
HEADS = {
    "logistic_std": HeadSpec(StandardisedLogistic, LINEAR_SETTINGS, True),
    "knn1": HeadSpec(OneNNHead, STANDARDIZE, False),
    "centroid": HeadSpec(CentroidHead, STANDARDIZE, True),
    "centroid_cos": HeadSpec(cosine_centroid, STANDARDIZE, True),
    "linear_svm": HeadSpec(LinearSVMHead, LINEAR_SETTINGS, True),
}


def head_space(head, X: np.ndarray) -> np.ndarray:
    """Features in the space where ``head.linear_params()`` applies (identity for plain heads)."""
    tf = getattr(head, "transform", None)
    return np.asarray(tf(X) if tf is not None else X, dtype=np.float64)


def linear_params(head) -> tuple[np.ndarray, np.ndarray] | None:
    """``(W, b)`` of a linear head in :func:`head_space`, including the built-in PRISM ``logistic``."""
    fn = getattr(head, "linear_params", None)
    if fn is not None:
        return fn()
    model = getattr(head, "model", None)  # prism_plugin.heads.logistic.LogisticProbe
    if model is not None and hasattr(model, "coef_") and hasattr(model, "intercept_"):
        k = len(getattr(model, "classes_", [])) or model.coef_.shape[0]
        return _as_proba_logits(model.coef_, model.intercept_, k)
    return None
