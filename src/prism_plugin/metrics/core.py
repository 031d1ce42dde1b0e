"""The metric functions of the PRISM protocol, as pure functions on arrays.

These are the public metric API (re-exported from :mod:`prism_plugin.metrics`) and the single implementation the
built-in metric plugins call.

Conventions (PROTOCOL §2.4, §3):

* ``proba`` is an ``(N, K)`` matrix of class probabilities; for binary problems column 1 is p(y = 1).
* Binary logits follow the reference convention: the single decision value ``d`` becomes the two-column matrix
  ``[-d, +d]``, so ``softmax(L / T)[:, 1] = sigmoid(2 d / T)`` and **T = 2 is the identity** for binary problems.
* ECE for K = 2 is a class-1 reliability error: confidence = p(y = 1) and "correct" = 1[y = 1]. For K > 2 it is the
  top-label ECE: confidence = max_k p_k, correct = 1[argmax = y].
* Fixed bins are ``linspace(0, 1, n_bins + 1)`` and every bin is half-open ``[lo, hi)``, the last one included, so
  a confidence of exactly 1.0 falls in no bin while still counting in N (bit-compatible with the reference).
"""

from __future__ import annotations

import warnings

import numpy as np

from prism_plugin.protocol.temperature import EPS_LOG  # the log floor of every NLL

__all__ = [
    "softmax",
    "binary_logits",
    "probabilities_from_logits",
    "auroc",
    "f1_macro",
    "f1_binary",
    "brier",
    "nll",
    "ece",
    "ece_bin_edges",
    "confidence_and_correct",
    "degeneracy_share",
    "predictions",
    "EPS_LOG",
]


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax with max-subtraction, in float64."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def binary_logits(d: np.ndarray, convention: str = "symmetric") -> np.ndarray:
    """Turn binary decision values ``d`` into a two-column logit matrix.

    ``symmetric`` (reference, default): ``[-d, d]``, T = 2 is the identity.
    ``natural``: ``[0, d]``, so ``softmax(L/T)[:, 1] = sigmoid(d / T)`` and
    T = 1 is the identity (fitted temperatures are half the reference's).
    """
    d = np.asarray(d, dtype=np.float64).reshape(-1)
    if convention == "symmetric":
        return np.column_stack([-d, d])
    if convention == "natural":
        return np.column_stack([np.zeros_like(d), d])
    raise ValueError(f"binary logit convention must be 'symmetric' or 'natural', got {convention!r}")


def neutral_temperature(n_classes: int, convention: str = "symmetric") -> float:
    """The temperature that leaves probabilities unchanged (2 for symmetric binary logits)."""
    return 2.0 if (n_classes == 2 and convention == "symmetric") else 1.0


def probabilities_from_logits(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """``softmax(logits / temperature)``."""
    return softmax(np.asarray(logits, dtype=np.float64) / float(temperature))


def predictions(proba: np.ndarray) -> np.ndarray:
    """Arg-max class (ties go to the lower index)."""
    return np.asarray(proba).argmax(axis=1)


def auroc(y: np.ndarray, proba: np.ndarray) -> float:
    """Binary AUROC of p(y=1) for K = 2, macro one-vs-rest for K > 2; NaN if undefined."""
    from sklearn.metrics import roc_auc_score
    proba = np.asarray(proba)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if proba.shape[1] == 2:
                return float(roc_auc_score(y, proba[:, 1]))
            return float(roc_auc_score(y, proba, multi_class="ovr", average="macro"))
    except ValueError:
        return float("nan")


def f1_macro(y: np.ndarray, pred: np.ndarray) -> float:
    """Macro-F1 over the union of observed true and predicted classes (zero_division = 0)."""
    from sklearn.metrics import f1_score
    return float(f1_score(y, pred, average="macro", zero_division=0))


def f1_binary(y: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    """F1 of class 1 for binary problems; NaN for K > 2."""
    from sklearn.metrics import f1_score
    if n_classes != 2:
        return float("nan")
    return float(f1_score(y, pred, zero_division=0))


def brier(y: np.ndarray, proba: np.ndarray) -> float:
    """Brier score of p(y=1) for binary problems; NaN for K > 2 (reference schema)."""
    from sklearn.metrics import brier_score_loss
    proba = np.asarray(proba)
    if proba.shape[1] != 2:
        return float("nan")
    return float(brier_score_loss(y, proba[:, 1]))


def multiclass_brier(y: np.ndarray, proba: np.ndarray) -> float:
    """Mean over samples of the squared distance between ``proba`` and the one-hot label."""
    proba = np.asarray(proba, dtype=np.float64)
    onehot = np.zeros_like(proba)
    onehot[np.arange(len(y)), np.asarray(y, dtype=np.int64)] = 1.0
    return float(((proba - onehot) ** 2).sum(axis=1).mean())


def nll(y: np.ndarray, proba: np.ndarray) -> float:
    """Mean negative log-likelihood ``-mean log(p_y + 1e-12)`` (the temperature objective)."""
    proba = np.asarray(proba, dtype=np.float64)
    p_true = proba[np.arange(len(y)), np.asarray(y, dtype=np.int64)]
    return float(-np.mean(np.log(p_true + EPS_LOG)))


def confidence_and_correct(y: np.ndarray, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Confidence and correctness as the PRISM ECE reads them (see module docstring)."""
    proba = np.asarray(proba, dtype=np.float64)
    y = np.asarray(y)
    if proba.shape[1] == 2:
        return proba[:, 1], (y == 1).astype(np.float64)
    return proba.max(axis=1), (proba.argmax(axis=1) == y).astype(np.float64)


def ece_bin_edges(conf: np.ndarray, n_bins: int = 15, scheme: str = "fixed") -> np.ndarray:
    """Bin edges: ``fixed`` = linspace(0, 1, n_bins+1); ``adaptive`` = equal-mass quantiles.

    Adaptive edges are ``np.quantile(conf, linspace(0, 1, n_bins+1))`` with the
    first edge set to 0 and the last to 1 + 1e-9, de-duplicated; fewer than three
    distinct edges (e.g. constant confidence) fall back to the fixed edges.
    """
    fixed = np.linspace(0.0, 1.0, n_bins + 1)
    if scheme == "fixed":
        return fixed
    if scheme != "adaptive":
        raise ValueError(f"ECE scheme must be 'fixed' or 'adaptive', got {scheme!r}")
    edges = np.quantile(conf, np.linspace(0.0, 1.0, n_bins + 1))
    edges[0] = 0.0
    edges[-1] = 1.0 + 1e-9
    edges = np.unique(edges)
    return fixed if len(edges) < 3 else edges


def ece(y: np.ndarray, proba: np.ndarray, n_bins: int = 15, scheme: str = "fixed") -> float:
    """Expected calibration error, ``sum_b |B| * |acc(B) - conf(B)| / N``.

    Bins are half-open ``[lo, hi)`` including the last; empty bins are skipped;
    N counts every sample (a fixed-bin confidence of exactly 1.0 is in no bin).
    """
    conf, correct = confidence_and_correct(y, proba)
    return ece_from_confidence(conf, correct, n_bins, scheme)


def ece_from_confidence(conf: np.ndarray, correct: np.ndarray, n_bins: int = 15, scheme: str = "fixed") -> float:
    """The ECE sum of :func:`ece` on confidences and 0/1 correctness already extracted (the bin means
    are taken in the dtype of ``conf``: the float32 reference path passes float32 confidences)."""
    edges = ece_bin_edges(conf, n_bins, scheme)
    n = conf.shape[0]
    if n == 0:
        return float("nan")
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        in_bin = (conf >= lo) & (conf < hi)
        count = int(in_bin.sum())
        if count == 0:
            continue
        total += count * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return float(total / n)


def degeneracy_share(pred: np.ndarray, n_classes: int) -> float:
    """Share of predictions in the most predicted class (``> 0.99`` = collapsed probe)."""
    pred = np.asarray(pred, dtype=np.int64)
    if pred.size == 0:
        return float("nan")
    return float(np.bincount(pred, minlength=n_classes).max() / pred.size)


def binary_proba_from_decision(d: np.ndarray) -> np.ndarray:
    """``[1 - sigmoid(d), sigmoid(d)]``, exactly as scikit-learn's binary predict_proba."""
    from scipy.special import expit
    p1 = expit(np.asarray(d, dtype=np.float64))
    return np.column_stack([1.0 - p1, p1])
