"""Two per-run metrics and the task key they read.

* ``example_brier_top``: the top-label Brier score, ``mean_i (conf_i - correct_i)^2`` with
  ``conf_i`` the largest predicted probability (lower is better);
* ``example_confident_error``: the share of test examples predicted with confidence of at least
  ``example_threshold`` **and** wrong (lower is better).

``example_threshold`` is a task YAML key (``register_task_keys``): a number in (0, 1), default 0.5.
Its validated value reaches every run as ``run.meta["example_threshold"]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

THRESHOLD_KEY = "example_threshold"
DEFAULT_THRESHOLD = 0.5


def brier_top(y_true: np.ndarray, proba: np.ndarray) -> float:
    proba = np.asarray(proba, dtype=np.float64)
    conf = proba.max(axis=1)
    correct = (proba.argmax(axis=1) == np.asarray(y_true)).astype(np.float64)
    return float(np.mean((conf - correct) ** 2))


def confident_error(y_true: np.ndarray, proba: np.ndarray, threshold: float) -> float:
    proba = np.asarray(proba, dtype=np.float64)
    wrong = proba.argmax(axis=1) != np.asarray(y_true)
    return float(np.mean((proba.max(axis=1) >= threshold) & wrong))


def check_threshold(value: Any, ctx) -> float:
    """The task-key validator: ``ctx.fail(key, message)`` builds the ``file:line: key: message`` error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) < 1:
        raise ctx.fail(THRESHOLD_KEY, f"must be a number strictly between 0 and 1, got {value!r}")
    return float(value)
