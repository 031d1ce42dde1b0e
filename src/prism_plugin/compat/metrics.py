"""The PRISM package's standalone metric functions, backed by prism-plugin's implementation.

Signatures, defaults and conventions follow the PRISM package README (``prism_bench``):

* ``compute_auroc(labels, probs)``: ``probs`` is p(class 1) ``(N,)`` (or an ``(N, 2)`` matrix) for
  binary labels, an ``(N, K)`` matrix for multiclass (macro one-vs-rest). NaN when undefined (one
  class present), as in the per-run tables, with a :class:`QualifiedResultWarning`.
* ``compute_ece(probs, labels, n_bins=15, binning="fixed")``: binary = p(class 1) vs the label,
  multiclass = top-label confidence vs accuracy; ``binning="adaptive"`` = equal mass. The arithmetic
  runs in the dtype of ``probs`` (float32 probabilities give the reference's float32 result).
* ``compute_brier(labels, probs)``: binary Brier of p(class 1); NaN (with a warning) for a multiclass matrix.
* ``temperature_scale(logits, labels)`` / ``apply_temperature(logits, T)``: ``(N,)`` binary
  decision values or an ``(N, K)`` logit matrix. For ``(N,)`` input T is on the probe's own scale
  (T = 1 leaves ``predict_proba`` unchanged, the README's v0.3 convention), fitted within ``bounds``
  ([0.1, 10]) on that scale exactly as the package's ``temperature_scale`` does (equal bit for bit,
  tests/compat/test_package_equality.py); the results_v2 binary column was fitted on ``[-d, d]`` (a
  doubled scale, another search box), so it is about, not exactly, twice this T.
  A T at a search bound, or fitted on labels of one class, comes with a :class:`TemperatureAtBoundWarning`
  (a :class:`QualifiedResultWarning`).
* ``compute_ood_stability(ood_aurocs, id_aurocs)``: mean over pairs of min(OOD / ID(source), 1).
* ``compute_cri(auroc, ece_scaled, ood_stability, aggregation="multiplicative")``: also
  ``arithmetic``, ``geometric``, ``worst_axis``; every component must lie in [0, 1].

Every argument goes through :mod:`prism_plugin.protocol.array_checks`, the validator behind
:func:`prism_plugin.evaluate` too: labels 1-D integers 0..K-1 indexing the columns, probabilities finite, in
[0, 1], rows summing to 1; logits finite; AUROC, scaled ECE and OOD stability finite numbers in [0, 1]; no empty
arrays. Bad input raises a :class:`~prism_plugin.compat.errors.CompatError` (a ``ValueError``) of one line
naming the function, the argument and the fix, never a number.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Mapping

import numpy as np

from prism_plugin.compat.errors import CompatError
from prism_plugin.errors import PrismError
from prism_plugin.protocol.array_checks import (
    QualifiedResultWarning,
    TemperatureAtBoundWarning,
    as_labels,
    as_logits,
    as_probabilities,
    as_score,
    check_label_range,
    check_nonempty,
    check_pair_lengths,
    single_class,
)

DEFAULT_N_BINS = 15
#: the temperature search box of the reference fit (on the logit matrix it fits)
T_BOUNDS = (0.1, 10.0)


def compat_errors(fn):
    """Run ``fn`` with the array validator's errors raised as :class:`CompatError` (same one-line message)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CompatError:
            raise
        except PrismError as exc:
            raise CompatError(str(exc)) from None

    return wrapper


def labels_and_probs(fn: str, labels: Any, probs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated labels (int64) and an ``(N, K)`` probability matrix for the metric ``fn``."""
    y = as_labels(labels, f"{fn} labels")
    check_nonempty(len(y), f"{fn} labels")
    p = as_probabilities(probs, f"{fn} probs", n_rows=len(y))
    check_label_range(y, p.shape[1], f"{fn} labels")
    return y, p


def _warn(message: str, category=QualifiedResultWarning) -> None:
    warnings.warn(message, category, stacklevel=4)  # _warn, the function, compat_errors


@compat_errors
def compute_auroc(labels, probs, multi_class: bool | None = None) -> float:
    """AUROC: binary of p(class 1), macro one-vs-rest for an ``(N, K)`` matrix with K > 2.

    ``multi_class`` is accepted for compatibility; the kind is read from the shape of ``probs``. NaN, with a
    :class:`QualifiedResultWarning`, where the AUROC is undefined (the labels hold one class, or a macro AUROC
    misses classes).
    """
    from prism_plugin.metrics.core import auroc

    y, p = labels_and_probs("compute_auroc", labels, probs)
    value = auroc(y, p)
    if math.isnan(value):
        one = single_class(y)
        why = (f"the labels hold one class (class {one[0]}, {one[1]} samples)" if one else
               f"the labels hold {np.unique(y).size} of the {p.shape[1]} classes (macro one-vs-rest needs each)")
        _warn(f"compute_auroc: AUROC is undefined: {why}; returned NaN")
    return value


@compat_errors
def compute_brier(labels, probs) -> float:
    """Binary Brier score of p(class 1) (scikit-learn's ``brier_score_loss``); NaN, with a warning, for K > 2."""
    from prism_plugin.metrics.core import brier

    y, p = labels_and_probs("compute_brier", labels, probs)
    if p.shape[1] > 2:
        _warn(f"compute_brier: the binary Brier score is undefined for {p.shape[1]} probability columns; "
              "returned NaN")
    return brier(y, p)


@compat_errors
def compute_ece(probs, labels, n_bins: int = DEFAULT_N_BINS, binning: str = "fixed") -> float:
    """Expected calibration error with ``n_bins`` fixed-width (``binning="fixed"``) or equal-mass
    (``"adaptive"``) bins; bins are half-open [lo, hi), so a confidence of exactly 1.0 is in no fixed
    bin but counts in N (as in the reference)."""
    from prism_plugin.protocol.float32_path import ece

    if not isinstance(binning, str) or binning not in ("fixed", "adaptive"):
        raise CompatError(f"compute_ece binning: must be 'fixed' or 'adaptive', got {binning!r}")
    if isinstance(n_bins, (bool, np.bool_)) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise CompatError(f"compute_ece n_bins: must be a positive integer, got {n_bins!r}")
    y, p = labels_and_probs("compute_ece", labels, probs)
    return ece(y, p, int(n_bins), binning)


def _logit_matrix(logits: Any, where: str) -> tuple[np.ndarray, bool]:
    """``(N, K)`` float64 logits and whether the input was binary decision values (``(N,)``).

    Binary decision values ``d`` become ``[0, d]`` (prism-plugin's ``natural`` convention): after the
    max-subtraction its softmax at any T is bit for bit that of the PRISM package's ``[-d/2, d/2]``
    (both become ``[-d/T, 0]`` or ``[0, d/T]``), so T = 1 is the probe's own ``predict_proba``."""
    from prism_plugin.metrics.core import binary_logits

    z = as_logits(logits, f"{where} logits")
    if z.ndim == 1:
        return binary_logits(z, "natural"), True
    return z, False


def _bounds(bounds: Any) -> tuple[float, float]:
    where = "temperature_scale bounds"
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise CompatError(f"{where}: pass two numbers (low, high), e.g. (0.1, 10.0), got {bounds!r}") from None
    lo, hi = (as_score(b, where, 0.0, math.inf, low_open=True, what="a positive temperature") for b in (lo, hi))
    if not lo < hi:
        raise CompatError(f"{where}: low {lo:g} must be below high {hi:g}")
    return lo, hi


@compat_errors
def temperature_scale(logits, labels, bounds: tuple[float, float] = T_BOUNDS) -> float:
    """Fit T on a held-out split (never the evaluation split) by bounded Brent on the NLL.

    ``(N,)`` binary decision values: T is fitted and returned on the probe's own scale (T = 1 = unchanged), in
    ``bounds`` on that scale, as the PRISM package (v0.3) does; the results_v2 tables' binary T (logits
    ``[-d, d]``) is on a doubled scale. A T within 0.001 of a bound (:func:`prism_plugin.quality.bound_side`, the
    runner's test), or fitted on labels of a single class, is returned with a :class:`TemperatureAtBoundWarning`.
    """
    from prism_plugin.protocol.temperature import fit_temperature
    from prism_plugin.quality import bound_side

    z, _binary = _logit_matrix(logits, "temperature_scale")
    y = as_labels(labels, "temperature_scale labels")
    check_pair_lengths(z.shape[0], len(y), "temperature_scale", "logit rows")
    check_label_range(y, z.shape[1], "temperature_scale labels", "logit columns")
    lo, hi = _bounds(bounds)
    with np.errstate(over="ignore"):
        if not np.isfinite(z / lo).all():
            raise CompatError(f"temperature_scale logits: |z| up to {np.abs(z).max():.3g} overflows when divided "
                              f"by the lower bound T = {lo:g}; rescale the logits")
    t = fit_temperature(z, y, (lo, hi))
    side = bound_side(t, (lo, hi))
    one = single_class(y)
    if side or one:
        shown = f"T = {t:.6g}"
        parts = []
        if side:
            parts.append(f"{shown} sits at the {'lower' if side == 'low' else 'upper'} bound of the search box "
                         f"[{lo:g}, {hi:g}]: the NLL optimum lies outside it, so the scaled "
                         "probabilities are those of a clipped fit")
        if one:
            parts.append(f"the labels hold one class (class {one[0]}, {one[1]} samples): the NLL of one class "
                         "rewards pushing every probability towards it, so T does not measure calibration")
        _warn(f"temperature_scale: {'; '.join(parts)}; fit on a held-out split with every class "
              "(or widen bounds)", TemperatureAtBoundWarning)
    return t


@compat_errors
def apply_temperature(logits, T: float) -> np.ndarray:
    """Calibrated probabilities ``(N, K)`` (binary: ``[1 - p, p]``) for a fitted temperature."""
    from prism_plugin.metrics.core import probabilities_from_logits

    z, _binary = _logit_matrix(logits, "apply_temperature")
    t = as_score(T, "apply_temperature T", 0.0, math.inf, low_open=True, what="a positive temperature")
    with np.errstate(over="ignore", invalid="ignore"):
        p = probabilities_from_logits(z, t)
    if not np.isfinite(p).all():
        raise CompatError(f"apply_temperature: logits / T overflow (|z| up to {np.abs(z).max():.3g}, T = {t:g}); "
                          "rescale the logits")
    return p


def _auroc_map(values: Any, where: str, keys: str, *, pairs: bool) -> dict:
    if not isinstance(values, Mapping):
        raise CompatError(f"compute_ood_stability {where}: pass a mapping {keys}, got {type(values).__name__}")
    if not values:
        raise CompatError(f"compute_ood_stability {where}: empty; pass at least one {keys} entry")
    out = {}
    for key, value in values.items():
        if pairs and not (isinstance(key, tuple) and len(key) == 2):
            raise CompatError(f"compute_ood_stability {where}: key {key!r} is not a (source, target) pair")
        name = (str(key[0]), str(key[1])) if pairs else str(key)
        out[name] = as_score(value, f"compute_ood_stability {where}[{key!r}]", 0.0, 1.0, low_open=not pairs,
                             what="an AUROC")
    return out


@compat_errors
def compute_ood_stability(ood_aurocs: Mapping[tuple[str, str], float], id_aurocs: Mapping[str, float]) -> float:
    """Mean over the transfer pairs of min(OOD AUROC / in-distribution AUROC of the source, 1).

    ``ood_aurocs``: (source, target) -> OOD AUROC in [0, 1]; ``id_aurocs``: source -> in-distribution AUROC in
    (0, 1]. A NaN or out-of-range AUROC is an error. Pairs whose source has no in-distribution AUROC are left out
    with a :class:`QualifiedResultWarning`; with none left the result is NaN.
    """
    from prism_plugin.metrics.composite import ood_stability_from_maps

    pairs = _auroc_map(ood_aurocs, "ood_aurocs", "{(source, target): auroc}", pairs=True)
    ids = _auroc_map(id_aurocs, "id_aurocs", "{source: auroc}", pairs=False)
    missing = [p for p in pairs if p[0] not in ids]
    if missing:
        shown = ", ".join(repr(p) for p in missing[:4]) + (", ..." if len(missing) > 4 else "")
        _warn(f"compute_ood_stability: {len(missing)} of {len(pairs)} pair(s) left out ({shown}): their source has "
              "no id_aurocs entry" + ("; returned NaN" if len(missing) == len(pairs) else ""))
    pairs = {p: v for p, v in pairs.items() if p[0] in ids}
    if not pairs:
        return float("nan")
    return float(ood_stability_from_maps(ids, pairs))


@compat_errors
def compute_cri(auroc, ece_scaled, ood_stability, aggregation: str = "multiplicative") -> float:
    """Composite Reliability Index, AUROC x (1 - ECE_scaled) x OOD_Stability by default (PROTOCOL §6.2);
    each component a finite number in [0, 1]."""
    from prism_plugin.summaries.cri import AGGREGATIONS, cri

    if not isinstance(aggregation, str) or aggregation not in AGGREGATIONS:
        raise CompatError(f"compute_cri: unknown aggregation {aggregation!r}; use one of {', '.join(AGGREGATIONS)}")
    a = as_score(auroc, "compute_cri auroc", what="an AUROC")
    e = as_score(ece_scaled, "compute_cri ece_scaled", what="a scaled ECE")
    s = as_score(ood_stability, "compute_cri ood_stability", what="an OOD stability")
    return float(cri(a, e, s, aggregation))


__all__ = ["compute_auroc", "compute_brier", "compute_ece", "compute_cri", "compute_ood_stability",
           "temperature_scale", "apply_temperature", "DEFAULT_N_BINS", "QualifiedResultWarning",
           "TemperatureAtBoundWarning", "compat_errors", "labels_and_probs"]
