"""A run metric plugin: balanced accuracy, one more column of runs.csv."""

from __future__ import annotations

import numpy as np

from prism_plugin import hookimpl


def balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over the classes present in ``y_true`` of the fraction predicted correctly."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    recalls = [float(np.mean(y_pred[y_true == c] == c)) for c in np.unique(y_true)]
    return float(np.mean(recalls))


@hookimpl
def run_metrics(run):
    return {"example_balanced_accuracy": balanced_accuracy(run.y_test, run.pred_test)}
