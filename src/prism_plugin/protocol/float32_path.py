"""The reference evaluator's floating-point path: ``probability_dtype: float32``.

The PRISM reference runs (``results_v2``, PROTOCOL §2.3-2.5) fit the probe on float32 features, so scikit-learn's
``predict_proba`` returns **float32** probabilities, and the metrics are computed on those float32 arrays: the
ECE's per-bin mean confidence is a float32 mean, ``brier_score_loss`` sees float32 p(class 1), and the scaled
probabilities are ``softmax(L / T)`` of the float32 decision values, evaluated in float32. prism-plugin's default
path holds the *same* probabilities (the head's ``predict_proba``, upcast exactly) but does the metric arithmetic
in float64, so ECE and Brier differ from the reference's by rounding only (about 1e-8 to 5e-8). The temperature
itself is the same in both paths (the NLL is evaluated in float64 either way).

``probability_dtype="float32"`` (``prism_plugin.evaluate(..., probability_dtype="float32")``, the task key
``probability_dtype: float32``, or ``--set probability_dtype=float32``) recomputes the affected columns on the
reference's path, so they equal a reference-style computation bit for bit:

* ``brier`` (binary), ``ece_fixed``, ``ece_adaptive`` on the float32 probabilities;
* ``ece_scaled_fixed``, ``ece_scaled_adaptive`` (and ``ece_scaled_prop``, ``ece_scaled_adaptive_prop``,
  ``ece_scaled_oracle`` where the run has them) on float32 ``softmax(L / T)`` with the run's fitted T.

Unchanged (already identical on both paths, or not reference columns): ``auroc``, ``f1_*``, ``degeneracy_share``,
the temperatures, ``nll``/``nll_scaled`` and every plugin column (they keep float64 arithmetic). For the sklearn
logistic probe the float32 arrays are exactly what the reference holds; for another head (e.g. ``backend: torch``,
whose decision values are float64) they are a float32 rounding of its output, not a reference path.

The functions here are the reference's arithmetic in the dtype of their input (float64 input gives
exactly :func:`prism_plugin.metrics.core.ece`); the bins, conventions and definitions are those of
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
NAN = float("nan")


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


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax with max-subtraction in the dtype of ``logits``."""
    z = np.asarray(logits)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def scaled_proba(logits: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(L / T)`` in the dtype of ``logits`` (T a Python float, so float32 stays float32)."""
    return softmax(np.asarray(logits) / float(temperature))


def float32_columns(run, proba: np.ndarray, row: Mapping[str, Any]) -> dict[str, float]:
    """The reference-path values of the columns ``row`` has (see the module docstring).

    ``run`` is the run's :class:`~prism_plugin.contracts.RunContext` (its cached temperatures and
    logits are used), ``proba`` the head's own test probabilities.
    """
    p32 = np.asarray(proba, dtype=np.float32)
    l32 = np.asarray(run.logits_test, dtype=np.float32)
    y, bins = run.y_test, run.ece_bins
    out: dict[str, float] = {}

    def put(name: str, fn) -> None:
        if name in row:
            out[name] = fn()

    put("brier", lambda: _brier(y, p32))
    put("ece_fixed", lambda: ece(y, p32, bins, "fixed"))
    put("ece_adaptive", lambda: ece(y, p32, bins, "adaptive"))

    def scaled_pair(t: float, fixed: str, adaptive: str | None) -> None:
        if fixed not in row and (adaptive is None or adaptive not in row):
            return
        if not np.isfinite(t):
            put(fixed, lambda: NAN)
            if adaptive:
                put(adaptive, lambda: NAN)
            return
        s32 = scaled_proba(l32, t)
        put(fixed, lambda: ece(y, s32, bins, "fixed"))
        if adaptive:
            put(adaptive, lambda: ece(y, s32, bins, "adaptive"))

    if "val" in run.calibration or "ece_scaled_fixed" in row:
        scaled_pair(run.temperature("val"), "ece_scaled_fixed", "ece_scaled_adaptive")
    if "val_prop" in run.calibration:
        scaled_pair(run.temperature("val_prop"), "ece_scaled_prop", "ece_scaled_adaptive_prop")
    t_oracle = row.get("temperature_oracle")
    if t_oracle is not None and "ece_scaled_oracle" in row:
        scaled_pair(float(t_oracle), "ece_scaled_oracle", None)
    return out


__all__ = ["KEY", "PROBABILITY_DTYPES", "check_probability_dtype", "confidence_and_correct", "ece",
           "float32_columns", "probability_dtype_of", "scaled_proba", "softmax"]
