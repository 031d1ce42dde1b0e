"""Probe heads: the PRISM logistic probe (PROTOCOL §2.3), registered through ``register_heads``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.utils.extmath import softmax as sk_softmax

from prism_plugin.errors import PrismError
from prism_plugin.hookspecs import hookimpl

PREDICT_CHUNK = 20_000


@dataclass
class ProbeOutput:
    """Decision values of one fitted probe on one split.

    ``decision`` is what the head computes natively: ``(N,)`` for a binary
    logistic probe, ``(N, K)`` otherwise. ``proba`` is bit-identical to the
    head's own ``predict_proba``.
    """

    decision: np.ndarray
    proba: np.ndarray


class ProbeHead(Protocol):
    def fit(self, X: np.ndarray, y: np.ndarray) -> "ProbeHead": ...

    def evaluate(self, X: np.ndarray) -> ProbeOutput: ...


BACKENDS = ("sklearn", "torch")


class LogisticProbe:
    """``LogisticRegression(C, max_iter=1000, random_state=seed)`` on float32 features.

    ``backend="sklearn"`` (default, the reference): everything else is
    scikit-learn's default (L2, lbfgs, intercept, tol 1e-4; multinomial for
    K > 2, binary logistic for K = 2). Decision values are computed once per
    split in chunks of 20,000 rows cast to float32, and the probabilities are
    derived from them exactly as ``predict_proba`` does.

    ``backend="torch"``: the same objective solved to ``max |grad| <= tol``
    (default :data:`~prism_plugin.protocol.torch_probe.DEFAULT_TOL` = 1e-8) by
    :mod:`prism_plugin.protocol.torch_probe`, on CUDA when present (``device``).
    Decision values are float64 ``X w + b``; the probabilities follow
    scikit-learn's conventions (binary ``[1 - expit(d), expit(d)]``, softmax).
    """

    kind = "logistic"

    def __init__(self, seed: int = 0, C: float = 1.0, max_iter: int = 1000, tol: float | None = None,
                 backend: str = "sklearn", device: str = "auto"):
        if backend not in BACKENDS:
            raise PrismError(f"probe.backend: must be 'sklearn' (reference, default) or 'torch', got {backend!r}")
        self.seed = int(seed)
        self.C = float(C)
        self.max_iter = int(max_iter)
        self.backend = backend
        self.device = str(device)
        if tol is None:
            if backend == "torch":
                from prism_plugin.protocol.torch_probe import DEFAULT_TOL

                tol = DEFAULT_TOL
            else:
                tol = 1e-4
        self.tol = float(tol)
        self.model: LogisticRegression | None = None
        self.torch_fit = None
        self.classes_: np.ndarray | None = None
        self.converged: bool | None = None

    def settings(self) -> dict[str, Any]:
        return {"kind": self.kind, "C": self.C, "max_iter": self.max_iter, "tol": self.tol, "backend": self.backend}

    def fit(self, X: np.ndarray, y: np.ndarray) -> "LogisticProbe":
        X = np.asarray(X, dtype=np.float32)
        if self.backend == "torch":
            return self._fit_torch(X, y)
        self.model = LogisticRegression(C=self.C, max_iter=self.max_iter, tol=self.tol, random_state=self.seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            self.model.fit(X, y)
        self.converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        return self

    def _fit_torch(self, X: np.ndarray, y: np.ndarray) -> "LogisticProbe":
        from prism_plugin.protocol.torch_probe import fit_logistic

        # classes as scikit-learn sees them: the sorted distinct labels of y
        self.classes_, y_enc = np.unique(np.asarray(y), return_inverse=True)
        if len(self.classes_) < 2:
            raise PrismError(f"the probe needs at least two classes in its training subset, got {self.classes_.tolist()}")
        try:
            self.torch_fit = fit_logistic(X, y_enc, len(self.classes_), C=self.C, tol=self.tol,
                                          max_iter=self.max_iter, device=self.device)
        except ValueError as exc:
            raise PrismError(f"probe.backend torch: {exc}") from None
        self.converged = self.torch_fit.converged
        return self

    def evaluate(self, X: np.ndarray) -> ProbeOutput:
        if self.backend == "torch":
            from prism_plugin.protocol.torch_probe import decision_function

            assert self.torch_fit is not None, "fit() first"
            decision = decision_function(X, self.torch_fit.coef, self.torch_fit.intercept, self.device)
        else:
            assert self.model is not None, "fit() first"
            parts = []
            for start in range(0, X.shape[0], PREDICT_CHUNK):
                chunk = np.asarray(X[start:start + PREDICT_CHUNK], dtype=np.float32)
                parts.append(self.model.decision_function(chunk))
            decision = np.concatenate(parts) if parts else np.zeros((0,))
        if decision.ndim == 1:
            p1 = expit(decision)
            proba = np.stack([1 - p1, p1], axis=1)
        else:
            proba = sk_softmax(decision.copy(), copy=False)
        return ProbeOutput(decision=decision, proba=proba)


HeadFactory = Callable[..., ProbeHead]


def builtin_heads() -> dict[str, HeadFactory]:
    return {"logistic": LogisticProbe}


@hookimpl
def register_heads(register) -> None:
    """The PRISM logistic probe: lbfgs ignores the seed, and it is linear in the raw features."""
    register("logistic", LogisticProbe, seed_invariant=True, linear=True,
             description="PRISM probe: LogisticRegression(C=1, lbfgs, max_iter=1000) on float32 features")
