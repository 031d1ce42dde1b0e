"""A probe head: ``example_centroid`` - nearest class mean, as a linear softmax head.

``logit_c(x) = -||x - m_c||^2 / tau`` up to a term common to all classes, i.e. linear:
``W = 2 m / tau``, ``b = -||m||^2 / tau``. A task selects it with ``probe: {kind: example_centroid}``.

Traits (``register_heads``): ``seed_invariant=True`` (class means do not depend on the seed, so
runs on the same training subset share one fit) and ``linear=True`` (``linear_params()`` gives
``(W, b)``, so the SHOT-IM adaptation can update it).
"""

from __future__ import annotations

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.protocol.probe import ProbeOutput

#: logistic-probe settings a protocol include may pass; this head ignores them
IGNORED = frozenset({"C", "max_iter", "tol", "backend", "device"})


class CentroidHead:
    kind = "example_centroid"

    def __init__(self, seed: int = 0, temperature: float = 0.05, **settings):
        unknown = sorted(set(settings) - IGNORED)
        if unknown:
            raise PrismError(f"probe.{unknown[0]}: not a setting of the example_centroid head (settings: temperature)")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature <= 0:
            raise PrismError(f"probe.temperature: must be a positive number, got {temperature!r}")
        self.seed, self.tau = int(seed), float(temperature)
        self.W: np.ndarray | None = None
        self.b: np.ndarray | None = None

    def fit(self, X, y) -> "CentroidHead":
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)
        means = np.stack([X[y == c].mean(axis=0) for c in range(int(y.max()) + 1)])
        self.W, self.b = 2.0 * means / self.tau, -(means ** 2).sum(axis=1) / self.tau
        return self

    def evaluate(self, X) -> ProbeOutput:
        logits = np.asarray(X, dtype=np.float64) @ self.W.T + self.b
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        return ProbeOutput(logits, z / z.sum(axis=1, keepdims=True))

    def linear_params(self) -> tuple[np.ndarray, np.ndarray]:
        return self.W, self.b
