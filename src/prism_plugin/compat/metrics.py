"""The PRISM package's standalone metric functions, backed by prism-plugin's implementation.

Signatures, defaults and conventions follow the PRISM package README (``prism_bench``):

* ``compute_auroc(labels, probs)``: ``probs`` is p(class 1) ``(N,)`` (or an ``(N, 2)`` matrix) for
  binary labels, an ``(N, K)`` matrix for multiclass (macro one-vs-rest). NaN when undefined (one
  class present), as in the per-run tables.
* ``compute_ece(probs, labels, n_bins=15, binning="fixed")``: binary = p(class 1) vs the label,
  multiclass = top-label confidence vs accuracy; ``binning="adaptive"`` = equal mass. The arithmetic
  runs in the dtype of ``probs`` (float32 probabilities give the reference's float32 result).
* ``compute_brier(labels, probs)``: binary Brier of p(class 1); NaN for a multiclass matrix.
* ``temperature_scale(logits, labels)`` / ``apply_temperature(logits, T)``: ``(N,)`` binary
  decision values or an ``(N, K)`` logit matrix. For ``(N,)`` input T is on the probe's own scale
  (T = 1 leaves ``predict_proba`` unchanged, the README's v0.3 convention); it is fitted exactly as
  the reference did (on ``[-d, d]`` within [0.1, 10]) and halved, an exact operation, so it is the
  results_v2 binary temperature divided by 2 and the scaled probabilities are the results_v2 ones.
* ``compute_ood_stability(ood_aurocs, id_aurocs)``: mean over pairs of min(OOD / ID(source), 1).
* ``compute_cri(auroc, ece_scaled, ood_stability, aggregation="multiplicative")``: also
  ``arithmetic``, ``geometric``, ``worst_axis``; ``ece_scaled`` is clipped to [0, 1].
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from prism_plugin.compat.errors import CompatError

DEFAULT_N_BINS = 15
#: the temperature search box of the reference fit (on the logit matrix it fits)
T_BOUNDS = (0.1, 10.0)


def _labels(labels: Any, where: str) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1:
        raise CompatError(f"{where}: labels must be a 1-D array of integer class labels, got shape {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not (np.issubdtype(y.dtype, np.number) and np.all(np.isfinite(y)) and np.all(y == np.round(y))):
            raise CompatError(f"{where}: labels must be integers (class indices), got dtype {y.dtype}")
        y = y.astype(np.int64)
    return y


def _proba_matrix(probs: Any, n: int, where: str) -> np.ndarray:
    """``(N, K)`` probabilities; a 1-D p(class 1) vector becomes ``[1 - p, p]`` (dtype kept)."""
    p = np.asarray(probs)
    if not np.issubdtype(p.dtype, np.floating):
        p = p.astype(np.float64)
    if p.ndim == 2 and p.shape[1] == 1:
        p = p[:, 0]
    if p.ndim == 1:
        p = np.column_stack([1 - p, p])
    if p.ndim != 2 or p.shape[1] < 2:
        raise CompatError(f"{where}: probs must be p(class 1) of shape (N,) or a probability matrix (N, K), "
                         f"got shape {np.shape(probs)}")
    if p.shape[0] != n:
        raise CompatError(f"{where}: {p.shape[0]} probability rows for {n} labels; pass one row per label")
    return p


def compute_auroc(labels, probs, multi_class: bool | None = None) -> float:
    """AUROC: binary of p(class 1), macro one-vs-rest for an ``(N, K)`` matrix with K > 2.

    ``multi_class`` is accepted for compatibility; the kind is read from the shape of ``probs``.
    """
    from prism_plugin.metrics.core import auroc

    y = _labels(labels, "compute_auroc")
    return auroc(y, _proba_matrix(probs, len(y), "compute_auroc"))


def compute_brier(labels, probs) -> float:
    """Binary Brier score of p(class 1) (scikit-learn's ``brier_score_loss``); NaN for K > 2."""
    from prism_plugin.metrics.core import brier

    y = _labels(labels, "compute_brier")
    return brier(y, _proba_matrix(probs, len(y), "compute_brier"))


def compute_ece(probs, labels, n_bins: int = DEFAULT_N_BINS, binning: str = "fixed") -> float:
    """Expected calibration error with ``n_bins`` fixed-width (``binning="fixed"``) or equal-mass
    (``"adaptive"``) bins; bins are half-open [lo, hi), so a confidence of exactly 1.0 is in no fixed
    bin but counts in N (as in the reference)."""
    from prism_plugin.protocol.float32_path import ece

    if binning not in ("fixed", "adaptive"):
        raise CompatError(f"compute_ece: binning must be 'fixed' or 'adaptive', got {binning!r}")
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise CompatError(f"compute_ece: n_bins must be a positive integer, got {n_bins!r}")
    y = _labels(labels, "compute_ece")
    return ece(y, _proba_matrix(probs, len(y), "compute_ece"), int(n_bins), binning)


def _logit_matrix(logits: Any, where: str) -> tuple[np.ndarray, bool]:
    """``(N, K)`` float64 logits and whether the input was binary decision values (``(N,)``)."""
    from prism_plugin.metrics.core import binary_logits

    z = np.asarray(logits, dtype=np.float64)
    if z.ndim == 2 and z.shape[1] == 1:
        z = z[:, 0]
    if z.ndim == 1:
        return binary_logits(z, "symmetric"), True
    if z.ndim != 2 or z.shape[1] < 2:
        raise CompatError(f"{where}: logits must be binary decision values (N,) or a logit matrix (N, K), "
                         f"got shape {np.shape(logits)}")
    return z, False


def temperature_scale(logits, labels, bounds: tuple[float, float] = T_BOUNDS) -> float:
    """Fit T on a held-out split (never the evaluation split) by bounded Brent on the NLL.

    ``(N,)`` binary decision values: the returned T is on the probe's own scale (T = 1 = unchanged);
    ``bounds`` apply to the ``[-d, d]`` logits the fit uses (the reference's), i.e. [0.05, 5] on the
    returned scale by default.
    """
    from prism_plugin.protocol.temperature import fit_temperature

    z, binary = _logit_matrix(logits, "temperature_scale")
    y = _labels(labels, "temperature_scale")
    if len(y) != z.shape[0] or len(y) == 0:
        raise CompatError(f"temperature_scale: {z.shape[0]} logit rows for {len(y)} labels; pass one label per row")
    if y.min() < 0 or y.max() >= z.shape[1]:
        raise CompatError(f"temperature_scale: labels must be in 0..{z.shape[1] - 1} for {z.shape[1]} logit columns")
    t = fit_temperature(z, y, tuple(float(b) for b in bounds))
    return t / 2.0 if binary else t


def apply_temperature(logits, T: float) -> np.ndarray:
    """Calibrated probabilities ``(N, K)`` (binary: ``[1 - p, p]``) for a fitted temperature."""
    from prism_plugin.metrics.core import probabilities_from_logits

    z, binary = _logit_matrix(logits, "apply_temperature")
    t = float(T)
    if not (math.isfinite(t) and t > 0):
        raise CompatError(f"apply_temperature: T must be a positive number, got {T!r}")
    return probabilities_from_logits(z, 2.0 * t if binary else t)


def compute_ood_stability(ood_aurocs: Mapping[tuple[str, str], float], id_aurocs: Mapping[str, float]) -> float:
    """Mean over the transfer pairs of min(OOD AUROC / in-distribution AUROC of the source, 1).

    ``ood_aurocs``: (source, target) -> OOD AUROC; ``id_aurocs``: source -> in-distribution AUROC.
    Pairs whose source has no (positive, finite) in-distribution AUROC, or whose OOD AUROC is not
    finite, are left out; with none left the result is NaN.
    """
    from prism_plugin.metrics.composite import ood_stability_from_maps

    if not isinstance(ood_aurocs, Mapping) or not isinstance(id_aurocs, Mapping):
        raise CompatError("compute_ood_stability: pass ood_aurocs={(source, target): auroc} and "
                         "id_aurocs={source: auroc} mappings")
    ids = {str(k): float(v) for k, v in id_aurocs.items() if np.isfinite(float(v)) and float(v) > 0}
    pairs = {}
    for key, value in ood_aurocs.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise CompatError(f"compute_ood_stability: ood_aurocs key {key!r} is not a (source, target) pair")
        if np.isfinite(float(value)) and str(key[0]) in ids:
            pairs[(str(key[0]), str(key[1]))] = float(value)
    if not pairs:
        return float("nan")
    return float(ood_stability_from_maps(ids, pairs))


def compute_cri(auroc, ece_scaled, ood_stability, aggregation: str = "multiplicative") -> float:
    """Composite Reliability Index, AUROC x (1 - ECE_scaled) x OOD_Stability by default."""
    from prism_plugin.summaries.cri import AGGREGATIONS, cri

    if aggregation not in AGGREGATIONS:
        raise CompatError(f"compute_cri: unknown aggregation {aggregation!r}; use one of {', '.join(AGGREGATIONS)}")
    return float(cri(float(auroc), float(ece_scaled), float(ood_stability), aggregation))


__all__ = ["compute_auroc", "compute_brier", "compute_ece", "compute_cri", "compute_ood_stability",
           "temperature_scale", "apply_temperature", "DEFAULT_N_BINS"]
