"""The reference evaluator's floating-point path: ``probability_dtype: float32``.

The PRISM reference runs (``results_v2``, PROTOCOL §2.3-2.5) and the PRISM package's ``evaluate()`` (on float32
features) fit scikit-learn's probe on float32 features, so ``predict_proba`` returns **float32** probabilities, and
the raw-probability metrics are computed on those float32 arrays: the ECE's per-bin mean confidence is a float32
mean and ``brier_score_loss`` sees float32 p(class 1). prism-plugin's default path holds the *same* probabilities
(the head's ``predict_proba``, upcast exactly) but does that arithmetic in float64, so ECE and Brier differ from the
reference's by rounding only (about 1e-8 to 5e-8).

The temperature-scaled columns need no second path: the package turns the float32 decision values into a float64
logit matrix (``np.asarray(logits, dtype=float)``, binary ``[-d, d]``) and computes ``softmax(L / T)`` in float64
with max-subtraction, which is exactly what the default path does
(:func:`prism_plugin.metrics.core.probabilities_from_logits` through ``RunContext.scaled_proba``), and the
temperature is fitted in float64 on both paths. (An earlier version of this module recomputed the scaled
probabilities in float32, which moved ``ece_scaled_*`` away from the package's by up to 7e-8.)

``probability_dtype="float32"`` (``prism_plugin.evaluate(..., probability_dtype="float32")``, the task key
``probability_dtype: float32``, or ``--set probability_dtype=float32``) recomputes ``brier`` (binary),
``ece_fixed`` and ``ece_adaptive`` on the float32 probabilities, so every column equals the package's
``evaluate()`` bit for bit (tested with ``==`` against the package's own code, tests/compat/test_package_equality.py).

Unchanged (identical on both paths, or not reference columns): ``auroc``, ``f1_*``, ``degeneracy_share``, the
temperatures, every scaled ECE, ``nll``/``nll_scaled`` and every plugin column. For the sklearn logistic probe the
float32 arrays are exactly what the reference holds; for another head (e.g. ``backend: torch``, whose decision
values are float64) they are a float32 rounding of its output, not a reference path.

:func:`ece` is the reference's arithmetic in the dtype of its input (float64 input gives exactly
:func:`prism_plugin.metrics.core.ece`); the bins, conventions and definitions are those of
:mod:`prism_plugin.metrics.core`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.metrics.core import brier as _brier
from prism_plugin.metrics.core import ece_from_confidence

#: accepted values; ``float64`` is the default (prism-plugin's own path)
PROBABILITY_DTYPES = ("float64", "float32")
#: the task key / ``run.meta`` key naming the path
KEY = "probability_dtype"


def check_probability_dtype(value: Any, where: str = KEY) -> str:
    """``"float64"`` (default) or ``"float32"`` (the reference path); anything else is a PrismError."""
    if value is None:
        return "float64"
    if isinstance(value, str):
        text = value.strip().lower()
    else:
        try:
            text = np.dtype(value).name
        except TypeError:
            text = repr(value)
    if text not in PROBABILITY_DTYPES:
        raise PrismError(f"{where}: must be 'float64' (default, prism-plugin's float64 metric arithmetic) or "
                         f"'float32' (the reference's float32 predict_proba path), got {value!r}")
    return text


def probability_dtype_of(meta: Mapping[str, Any] | None) -> str:
    """The path a run asks for (``meta["probability_dtype"]``; absent = float64)."""
    return check_probability_dtype((meta or {}).get(KEY))


def confidence_and_correct(y: np.ndarray, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """As :func:`prism_plugin.metrics.core.confidence_and_correct`, keeping the dtype of ``proba``.

    ``proba`` may also be a 1-D vector of p(class 1) (binary). Correctness is float64 (0/1), as in the reference.
    """
    proba = np.asarray(proba)
    if not np.issubdtype(proba.dtype, np.floating):
        proba = proba.astype(np.float64)
    y = np.asarray(y)
    if proba.ndim == 1:
        return proba, (y == 1).astype(np.float64)
    if proba.shape[1] == 2:
        return proba[:, 1], (y == 1).astype(np.float64)
    return proba.max(axis=1), (proba.argmax(axis=1) == y).astype(np.float64)


def ece(y: np.ndarray, proba: np.ndarray, n_bins: int = 15, scheme: str = "fixed") -> float:
    """The PRISM ECE (same bins and conventions as :func:`prism_plugin.metrics.core.ece`) with the
    per-bin mean confidence taken in the dtype of ``proba``, as the reference does on float32."""
    conf, correct = confidence_and_correct(y, proba)
    return ece_from_confidence(conf, correct, n_bins, scheme)


def float32_columns(run, proba: np.ndarray, row: Mapping[str, Any]) -> dict[str, float]:
    """The reference-path values of the raw-probability columns ``row`` has (see the module docstring).

    ``run`` is the run's :class:`~prism_plugin.contracts.RunContext`, ``proba`` the head's own test
    probabilities. The scaled columns are not touched: the default path already is the package's.
    """
    p32 = np.asarray(proba, dtype=np.float32)
    y, bins = run.y_test, run.ece_bins
    out: dict[str, float] = {}
    if "brier" in row:
        out["brier"] = _brier(y, p32)
    for scheme in ("fixed", "adaptive"):
        if f"ece_{scheme}" in row:
            out[f"ece_{scheme}"] = ece(y, p32, bins, scheme)
    return out


__all__ = ["KEY", "PROBABILITY_DTYPES", "check_probability_dtype", "confidence_and_correct", "ece",
           "float32_columns", "probability_dtype_of"]
