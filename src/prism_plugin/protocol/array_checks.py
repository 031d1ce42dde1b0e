"""The one validator of the arrays and scores a user hands to prism-plugin's Python entry points.

:func:`prism_plugin.evaluate` (through :func:`prism_plugin.protocol.inputs.check_splits`), the runner's feature
loaders and every public function of :mod:`prism_plugin.compat` (``compute_auroc``, ``compute_ece``, ...,
``PRISMEvaluator.evaluate``) check their inputs here, so one kind of bad input gets one message wherever it is
passed: an :class:`ArrayError` (a :class:`~prism_plugin.errors.PrismError` and a ``ValueError``) of one line that
names the argument, what is wrong and the fix, never a plausible number computed from it.

What is accepted:

* features (:func:`as_features`): a rectangular 2-D real matrix, at least one column, finite values that fit in
  float32 (cast to float32; float32 memory maps are kept);
* labels (:func:`as_labels`): a 1-D vector of integers 0..K-1 (bool is 0/1; floats that are exactly integers are
  accepted unless ``strict``), finite; :func:`check_label_range` against the K columns of a probability or logit
  matrix;
* probabilities (:func:`as_probabilities`): ``(N,)`` (or ``(N, 1)``) p(class 1) of a binary problem, or an
  ``(N, K)`` matrix, K >= 2; finite, in [0, 1], every row summing to 1 within :func:`row_sum_tolerance`;
* logits (:func:`as_logits`): ``(N,)`` (or ``(N, 1)``) binary decision values or an ``(N, K)`` matrix, finite;
* scores (:func:`as_score`): one real number, finite, in its documented range (AUROC, scaled ECE and OOD
  stability in [0, 1]);
* every array non-empty where a metric needs samples (:func:`check_nonempty`), lengths equal
  (:func:`check_pair_lengths`).

Degenerate but valid inputs (one class in the labels, a temperature at its search bound) are not errors: the
callers return the number and warn with a :class:`QualifiedResultWarning`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from prism_plugin.errors import PrismError

#: Largest label value accepted (far beyond any real class count; keeps int64 casts exact).
MAX_LABEL = 2**31 - 1
F32_MAX = float(np.finfo(np.float32).max)
#: rows per block of the chunked finiteness checks (bounded memory on memory-mapped matrices)
CHUNK = 65536
#: a probability row may miss 1 by this much (absolute) beyond the rounding of its dtype (see row_sum_tolerance)
ROW_SUM_ATOL = 1e-6


class ArrayError(PrismError, ValueError):
    """An invalid array or score: one line naming the argument and the fix (a ``ValueError`` too)."""


class QualifiedResultWarning(UserWarning):
    """A number computed from degenerate but valid input (one class, a temperature at its search bound):
    returned, and qualified by this warning."""


class TemperatureAtBoundWarning(QualifiedResultWarning):
    """A fitted temperature within :data:`prism_plugin.quality.BOUND_TOLERANCE` of its search bound."""


# --------------------------------------------------------------------------- generic
def as_array(value: Any, where: str, what: str) -> np.ndarray:
    """``np.asarray(value)`` or an ArrayError naming ``where`` (a string, dict, None or ragged list)."""
    if isinstance(value, (str, bytes, dict)) or value is None:
        raise ArrayError(f"{where}: {what} must be an array, got {type(value).__name__}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(value)
    except (ValueError, TypeError, OverflowError, MemoryError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ArrayError(f"{where}: {what} cannot be read as a rectangular array ({first[:120]}); "
                         "pass a NumPy array") from None


def check_nonempty(n: int, where: str) -> None:
    if n == 0:
        raise ArrayError(f"{where}: empty (0 samples); pass at least one sample")


def check_pair_lengths(n_rows: int, n_labels: int, where: str, features: str = "feature rows",
                       labels: str = "labels") -> None:
    """Rows and labels of one split must have equal length (checked before any ``--limit`` subset)."""
    if n_rows != n_labels:
        raise ArrayError(f"{where}: {n_rows} {features} but {n_labels} {labels}; they must have equal length "
                         "(one label per row)")


def _first_bad(mask: np.ndarray) -> tuple[str, int]:
    """``("row 3", count)`` (``"row 3, column 1"`` for a matrix) of the first True of ``mask``."""
    idx = np.argwhere(mask)
    at = ", column ".join(str(int(i)) for i in idx[0])
    return f"row {at}", int(idx.shape[0])


def _real(arr: np.ndarray, where: str, what: str, fix: str) -> np.ndarray:
    if arr.dtype.kind not in "fiub":
        raise ArrayError(f"{where}: {what} must be real numbers, got dtype {arr.dtype}; {fix}")
    return arr


def _check_finite(arr: np.ndarray, where: str, what: str) -> None:
    bad = ~np.isfinite(arr)
    if bad.any():
        at, n = _first_bad(bad)
        value = float(arr[tuple(np.argwhere(bad)[0])])
        shown = "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        more = f" (and {n - 1} more non-finite value{'s' if n > 2 else ''})" if n > 1 else ""
        raise ArrayError(f"{where}: {shown} at {at}{more}; {what} must be finite numbers")


# --------------------------------------------------------------------------- labels
def _label_shape_hint(arr: np.ndarray) -> str:
    if arr.ndim == 0:
        return "got a single value (a 0-d array); save one class index per sample, e.g. numpy.save(path, y)"
    if arr.ndim == 2 and arr.shape[1] > 1:
        return (f"got shape {arr.shape}: one-hot or probability rows? pass one integer class index per sample "
                "(not one-hot rows), e.g. y.argmax(axis=1)")
    return f"got shape {arr.shape}; pass one integer class index per sample, e.g. y.reshape(-1)"


def as_labels(y, where: str, n_classes: int | None = None, *, strict: bool = False,
              column_ok: bool = False) -> np.ndarray:
    """Integer labels 0..K-1 (int64, 1-D) or an ArrayError naming ``where``.

    ``strict`` (labels read from a file): only integer dtypes are accepted -- bool, float, string and object arrays
    are refused. Otherwise (the Python API) bool is taken as 0/1 and floats that are exactly integers are accepted.
    ``column_ok``: a ``(N, 1, ..., 1)`` array (one value per sample, as MedMNIST and PCAM store labels) is
    flattened; any other shape but ``(N,)`` is refused.
    """
    arr = as_array(y, where, "labels")
    if arr.ndim != 1:
        if column_ok and arr.ndim > 1 and all(d == 1 for d in arr.shape[1:]):
            arr = arr.reshape(-1)
        else:
            raise ArrayError(f"{where}: labels must be 1-D integers, {_label_shape_hint(arr)}")
    kind = arr.dtype.kind
    if strict and kind not in "iu":
        what = {"b": "bool", "f": "floats", "c": "complex numbers", "U": "strings", "S": "byte strings",
                "O": "Python objects"}.get(kind, str(arr.dtype))
        raise ArrayError(f"{where}: labels must be 1-D integers, got {what} (dtype {arr.dtype}); save integer "
                         "class indices 0..K-1 (e.g. y.astype('int64')"
                         + (", after mapping class names to integers)" if kind in "USO" else ")"))
    if kind == "b":
        arr = arr.astype(np.int64)
    elif kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ArrayError(f"{where}: labels contain NaN or inf; labels must be integers 0..K-1")
        if not np.all(arr == np.round(arr)):
            raise ArrayError(f"{where}: labels must be integers 0..K-1, got non-integer floats "
                             f"(e.g. {arr[arr != np.round(arr)][0]!r}); pass class indices, not probabilities")
        if arr.size and (arr.min() < 0 or arr.max() > MAX_LABEL):
            bad = arr.min() if arr.min() < 0 else arr.max()
            raise ArrayError(f"{where}: labels must be integers 0..K-1, found {bad:g}")
        arr = arr.astype(np.int64)
    elif kind in "iu":
        if arr.size:
            lo, hi = arr.min(), arr.max()
            if lo < 0:
                raise ArrayError(f"{where}: labels must be integers 0..K-1, found {lo}")
            if int(hi) > MAX_LABEL:
                raise ArrayError(f"{where}: label {hi} is not a plausible class index; labels must be 0..K-1")
        arr = arr.astype(np.int64, copy=False)
    else:
        raise ArrayError(f"{where}: labels must be 1-D integers 0..K-1, got dtype {arr.dtype}; "
                         "map class names to integers first")
    if n_classes is not None and arr.size and arr.max() >= n_classes:
        raise ArrayError(f"{where}: label {arr.max()} is out of range for n_classes = {n_classes}; "
                         f"labels must be 0..{n_classes - 1}")
    return arr


def check_label_range(y: np.ndarray, k: int, where: str, columns: str = "probability columns") -> None:
    """Labels (already :func:`as_labels`) must index the ``k`` columns of a probability or logit matrix."""
    if y.size and int(y.max()) >= k:
        raise ArrayError(f"{where}: label {int(y.max())} is out of range for {k} {columns}; labels must be "
                         f"0..{k - 1} (one column per class)")


def single_class(y: np.ndarray) -> tuple[int, int] | None:
    """``(class, count)`` when the labels hold one class, else ``None``."""
    classes = np.unique(y)
    return (int(classes[0]), int(y.size)) if classes.size == 1 else None


# --------------------------------------------------------------------------- features
def as_features(X, where: str) -> np.ndarray:
    """A 2-D, C-contiguous float32 feature matrix (C-ordered float32 memory maps stay memory maps) or an ArrayError.

    The layout is part of the computation: scikit-learn's binary ``decision_function`` is a float32 matrix-vector
    product whose rounding depends on the memory layout of X (a Fortran-ordered or strided view of the same values
    gives decision values a few float32 ulps apart, so Brier, ECE, NLL and T move by ~1e-8 to 1e-7). The embedding
    cache and ``np.save`` write C order, so every entry point (``prism_plugin.evaluate()`` on arrays in memory,
    ``PRISMEvaluator``, ``prism-run`` on the cache or a precomputed folder) hands the probe C-ordered float32 rows:
    one computation whatever the entry point (tests/api/test_entry_points_agree.py).
    """
    if isinstance(X, np.memmap) and X.dtype == np.float32 and X.flags.c_contiguous:
        arr = X
    else:
        arr = as_array(X, where, "features")
        if arr.dtype.kind not in "fiu":
            raise ArrayError(f"{where}: features must be real numbers, got dtype {arr.dtype}; "
                             "pass a float32 (N x D) matrix")
    if arr.ndim != 2:
        hint = "; reshape a single feature to (N, 1) with X.reshape(-1, 1)" if arr.ndim == 1 else ""
        raise ArrayError(f"{where}: features must be a 2-D (samples x dims) matrix, got shape {arr.shape}{hint}")
    if arr.shape[1] == 0:
        raise ArrayError(f"{where}: features have 0 dimensions")
    if arr.dtype != np.float32:
        if arr.dtype.kind == "f" and arr.size:
            # check the range before the cast: 1e300 would silently become inf
            for start in range(0, arr.shape[0], CHUNK):
                block = arr[start:start + CHUNK]
                if not np.isfinite(block).all():
                    raise ArrayError(f"{where}: features contain NaN or inf; re-extract or drop those rows")
                if block.dtype.itemsize > 4 and float(np.abs(block).max(initial=0.0)) > F32_MAX:
                    raise ArrayError(f"{where}: features exceed the float32 range (|x| > 3.4e38); "
                                     "rescale them (PRISM probes L2-normalised embeddings)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = arr.astype(np.float32)
    for start in range(0, arr.shape[0], CHUNK):
        if not np.isfinite(arr[start:start + CHUNK]).all():
            raise ArrayError(f"{where}: features contain NaN or inf; re-extract or drop those rows")
    if not arr.flags.c_contiguous:  # a Fortran-ordered / strided array (or memory map): C order, as the cache holds
        arr = np.ascontiguousarray(arr)
    return arr


# --------------------------------------------------------------------------- probabilities and logits
def row_sum_tolerance(dtype: np.dtype, k: int) -> float:
    """How far a probability row of ``k`` values in ``dtype`` may sum from 1: :data:`ROW_SUM_ATOL` plus the
    rounding of ``k`` additions (float32 ``predict_proba`` rows miss 1 by a few 1e-8)."""
    eps = float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else 0.0
    return ROW_SUM_ATOL + 4.0 * k * eps


def _binary_or_matrix(a: np.ndarray, where: str, shapes: str, given: tuple) -> np.ndarray:
    """``(N,)`` or ``(N, K)`` with K >= 2 (an ``(N, 1)`` column flattened to ``(N,)``), else an ArrayError."""
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim not in (1, 2) or (a.ndim == 2 and a.shape[1] < 2):
        raise ArrayError(f"{where}: must be {shapes}, K >= 2, got shape {given}")
    return a


def as_probabilities(probs: Any, where: str, n_rows: int | None = None) -> np.ndarray:
    """An ``(N, K)`` probability matrix (float dtype kept, others cast to float64) or an ArrayError.

    ``(N,)`` and ``(N, 1)`` are p(class 1) of a binary problem and become ``[1 - p, p]``; ``n_rows``: the number
    of labels the rows must match."""
    p = _real(as_array(probs, where, "probabilities"), where, "probabilities",
              "pass predicted probabilities (softmax of the logits)")
    if not np.issubdtype(p.dtype, np.floating):
        p = p.astype(np.float64)
    p = _binary_or_matrix(p, where, "p(class 1) of shape (N,) or a probability matrix (N, K)", np.shape(probs))
    if n_rows is not None:
        check_pair_lengths(p.shape[0], n_rows, where, "probability rows")
    check_nonempty(p.shape[0], where)
    _check_finite(p, where, "probabilities")
    outside = (p < 0) | (p > 1)
    if outside.any():
        at, n = _first_bad(outside)
        value = p[tuple(np.argwhere(outside)[0])]
        raise ArrayError(f"{where}: {value:g} at {at} is outside [0, 1] ({n} value{'s' if n > 1 else ''} in all); "
                         "pass probabilities (softmax of the logits), not logits or scores")
    if p.ndim == 1:
        return np.column_stack([1 - p, p])
    sums = p.sum(axis=1, dtype=np.float64)
    off = np.abs(sums - 1.0) > row_sum_tolerance(p.dtype, p.shape[1])
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise ArrayError(f"{where}: row {i} sums to {sums[i]:.6g}, not 1 ({int(off.sum())} row"
                         f"{'s' if off.sum() > 1 else ''} in all); pass probabilities (softmax of the logits)")
    return p


def as_logits(logits: Any, where: str) -> np.ndarray:
    """Float64 logits: ``(N,)`` binary decision values (``(N, 1)`` flattened) or an ``(N, K)`` matrix, K >= 2,
    non-empty and finite; else an ArrayError."""
    z = _real(as_array(logits, where, "logits"), where, "logits", "pass decision values or logits")
    if z.dtype.kind == "b":
        raise ArrayError(f"{where}: logits must be real numbers, got bool; pass decision values or logits")
    z = _binary_or_matrix(z.astype(np.float64), where, "binary decision values (N,) or a logit matrix (N, K)",
                          np.shape(logits))
    check_nonempty(z.shape[0], where)
    _check_finite(z, where, "logits")
    return z


# --------------------------------------------------------------------------- scores
def as_score(value: Any, where: str, lo: float = 0.0, hi: float = 1.0, *, low_open: bool = False,
             what: str = "a number") -> float:
    """One real number, finite, in ``[lo, hi]`` (``(lo, hi]`` with ``low_open``), as a float; else an ArrayError.

    bool, strings and arrays of more than one value are refused (a 0-d array or NumPy scalar is a number)."""
    v = value
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ArrayError(f"{where}: must be {what} in {'(' if low_open else '['}{lo:g}, {hi:g}], got {value!r}")
    v = float(v)
    if not math.isfinite(v):
        raise ArrayError(f"{where}: must be a finite number in [{lo:g}, {hi:g}], got {v}")
    if v > hi or v < lo or (low_open and v == lo):
        raise ArrayError(f"{where}: {v:g} is outside {'(' if low_open else '['}{lo:g}, {hi:g}]; pass {what} "
                         f"(it is defined on that range)")
    return v


__all__ = ["ArrayError", "CHUNK", "F32_MAX", "MAX_LABEL", "QualifiedResultWarning", "ROW_SUM_ATOL",
           "TemperatureAtBoundWarning", "as_array", "as_features", "as_labels", "as_logits", "as_probabilities",
           "as_score", "check_label_range", "check_nonempty", "check_pair_lengths", "row_sum_tolerance",
           "single_class"]
