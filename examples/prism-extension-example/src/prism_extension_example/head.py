"""A probe head: ``example_centroid`` - nearest (shrunken) class mean, as a linear softmax head.

``logit_c(x) = -||x - m_c||^2 / tau`` up to a term common to all classes, i.e. linear:
``W = 2 m / tau``, ``b = -||m||^2 / tau``, where ``m_c`` is the class mean shrunk by ``alpha``
towards the mean of all training rows. A task selects it with
``probe: {kind: example_centroid, temperature: 0.05, alpha: 0.5}``.

The settings are declared with the registration (:data:`SETTINGS`, see ``plugin.py``): task
files and ``prism_plugin.evaluate`` check them and fill in the defaults before the head is built;
``--probe logistic`` on a task written for this head drops ``alpha`` and ``temperature``.

Traits (``register_heads``): ``seed_invariant=True`` (class means do not depend on the seed, so
runs on the same training subset share one fit) and ``linear=True`` (``linear_params()`` gives
``(W, b)``, so the SHOT-IM adaptation can update it).
"""

from __future__ import annotations

import numpy as np

from prism_plugin.heads.base import ProbeOutput, Setting

#: name -> Setting(type, default, bounds): what a task's ``probe:`` may set for this head
SETTINGS = {
    "temperature": Setting(float, 0.05, lo=0.0, lo_open=True),
    "alpha": Setting(float, 0.0, lo=0.0, hi=1.0),
}


class CentroidHead:
    kind = "example_centroid"

    def __init__(self, seed: int = 0, temperature: float = 0.05, alpha: float = 0.0):
        self.seed, self.tau, self.alpha = int(seed), float(temperature), float(alpha)
        self.W: np.ndarray | None = None
        self.b: np.ndarray | None = None

    def fit(self, X, y) -> "CentroidHead":
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)
        means = np.stack([X[y == c].mean(axis=0) for c in range(int(y.max()) + 1)])
        means = (1.0 - self.alpha) * means + self.alpha * X.mean(axis=0)
        self.W, self.b = 2.0 * means / self.tau, -(means ** 2).sum(axis=1) / self.tau
        return self

    def evaluate(self, X) -> ProbeOutput:
        logits = np.asarray(X, dtype=np.float64) @ self.W.T + self.b
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        return ProbeOutput(logits, z / z.sum(axis=1, keepdims=True))

    def linear_params(self) -> tuple[np.ndarray, np.ndarray]:
        return self.W, self.b
