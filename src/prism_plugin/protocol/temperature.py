"""Temperature scaling (PROTOCOL §2.5)."""

from __future__ import annotations

import numpy as np

from prism_plugin.contracts import T_BOUNDS

#: the floor added inside every log of an NLL (``log(p + EPS_LOG)``); :mod:`prism_plugin.metrics.core` uses it
EPS_LOG = 1e-12


def temperature_nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """``-mean log(softmax(L/T)[y] + 1e-12)`` with max-subtraction."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return float(-np.mean(np.log(p[np.arange(len(labels)), labels] + EPS_LOG)))


def fit_temperature(
    logits: np.ndarray,
    labels: np.ndarray,
    bounds: tuple[float, float] = T_BOUNDS,
) -> float:
    """Fit T by bounded Brent (SciPy ``minimize_scalar(method="bounded")``) on the NLL.

    Fit it on a held-out split (the validation split of the data the probe was trained on), never on the evaluation
    split. With the reference binary logit convention ``[-d, d]`` the neutral temperature is 2, and the search box
    [0.1, 10] is [0.05, 5] on the natural sigmoid scale.
    """
    from scipy.optimize import minimize_scalar
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if logits.ndim != 2 or len(labels) != logits.shape[0] or len(labels) == 0:
        raise ValueError("temperature fit needs an (N, K) logit matrix and N labels, N > 0")
    res = minimize_scalar(lambda t: temperature_nll(logits, labels, t), bounds=bounds, method="bounded")
    return float(res.x)
