"""Validation of embedding arrays and grid settings before any fit: one clear message per problem.

Everything a user hands to :func:`prism_plugin.api.evaluate` (or a features
adapter hands to the runner) passes through here first, so a bad input fails
with a :class:`~prism_plugin.errors.PrismError` naming the split or argument and
the fix, never with an exception from deep inside NumPy or scikit-learn.

What is accepted:

* features: anything ``np.asarray`` turns into a rectangular 2-D real matrix
  (float, int or unsigned dtypes; cast to float32, memory maps of float32 are
  kept as they are), with at least one column and only finite values that fit
  in float32;
* labels: a 1-D vector of integers 0..K-1 (bool is taken as 0/1, and floats
  that are exactly integers, such as 0.0 and 1.0, are accepted);
* every split non-empty, features and labels of equal length, one feature width
  across splits, at least 2 classes, every class present in the training split.

A test split that holds a single class is *not* an error: PROTOCOL §3 says the
AUROC is then NaN (scikit-learn cannot compute it); the other metrics are
reported as usual.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from prism_plugin.errors import PrismError

#: Largest label value accepted (far beyond any real class count; keeps int64 casts exact).
MAX_LABEL = 2**31 - 1
MAX_SEED = 2**32 - 1
_F32_MAX = float(np.finfo(np.float32).max)
_CHUNK = 65536


@dataclass
class SplitArrays:
    """Features ``X`` (N x D, float32, possibly memory-mapped) and integer labels ``y``."""

    X: np.ndarray
    y: np.ndarray
    name: str = ""

    def __len__(self) -> int:
        return int(self.y.shape[0])


def _asarray(value: Any, where: str, what: str) -> np.ndarray:
    if isinstance(value, (str, bytes, dict)) or value is None:
        raise PrismError(f"{where}: {what} must be an array, got {type(value).__name__}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(value)
    except (ValueError, TypeError, OverflowError, MemoryError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PrismError(f"{where}: {what} cannot be read as a rectangular array ({first[:120]}); "
                         "pass a NumPy array") from None


def as_labels(y, where: str, n_classes: int | None = None) -> np.ndarray:
    """Integer labels 0..K-1 or a PrismError naming ``where``."""
    arr = _asarray(y, where, "labels")
    if arr.ndim != 1:
        raise PrismError(f"{where}: labels must be a 1-D vector, got shape {arr.shape}; "
                         "pass one integer class index per sample (not one-hot rows)")
    kind = arr.dtype.kind
    if kind == "b":
        arr = arr.astype(np.int64)
    elif kind == "f":
        if not np.all(np.isfinite(arr)):
            raise PrismError(f"{where}: labels contain NaN or inf; labels must be integers 0..K-1")
        if not np.all(arr == np.round(arr)):
            raise PrismError(f"{where}: labels must be integers 0..K-1, got non-integer floats "
                             f"(e.g. {arr[arr != np.round(arr)][0]!r}); pass class indices, not probabilities")
        if arr.size and (arr.min() < 0 or arr.max() > MAX_LABEL):
            bad = arr.min() if arr.min() < 0 else arr.max()
            raise PrismError(f"{where}: labels must be integers 0..K-1, found {bad:g}")
        arr = arr.astype(np.int64)
    elif kind in "iu":
        if arr.size:
            lo, hi = arr.min(), arr.max()
            if lo < 0:
                raise PrismError(f"{where}: labels must be integers 0..K-1, found {lo}")
            if int(hi) > MAX_LABEL:
                raise PrismError(f"{where}: label {hi} is not a plausible class index; labels must be 0..K-1")
        arr = arr.astype(np.int64, copy=False)
    else:
        raise PrismError(f"{where}: labels must be integers 0..K-1, got dtype {arr.dtype}; "
                         "map class names to integers first")
    if n_classes is not None and arr.size and arr.max() >= n_classes:
        raise PrismError(f"{where}: label {arr.max()} is out of range for n_classes = {n_classes}; "
                         f"labels must be 0..{n_classes - 1}")
    return arr


def as_features(X, where: str) -> np.ndarray:
    """A 2-D float32 feature matrix (memory maps stay memory maps) or a PrismError."""
    if isinstance(X, np.memmap) and X.dtype == np.float32:
        arr = X
    else:
        arr = _asarray(X, where, "features")
        if arr.dtype.kind not in "fiu":
            raise PrismError(f"{where}: features must be real numbers, got dtype {arr.dtype}; "
                             "pass a float32 (N x D) matrix")
    if arr.ndim != 2:
        hint = "; reshape a single feature to (N, 1) with X.reshape(-1, 1)" if arr.ndim == 1 else ""
        raise PrismError(f"{where}: features must be a 2-D (samples x dims) matrix, got shape {arr.shape}{hint}")
    if arr.shape[1] == 0:
        raise PrismError(f"{where}: features have 0 dimensions")
    if arr.dtype != np.float32:
        if arr.dtype.kind == "f" and arr.size:
            # check the range before the cast: 1e300 would silently become inf
            for start in range(0, arr.shape[0], _CHUNK):
                block = arr[start:start + _CHUNK]
                if not np.isfinite(block).all():
                    raise PrismError(f"{where}: features contain NaN or inf; re-extract or drop those rows")
                if np.abs(block).max(initial=0.0) > _F32_MAX:
                    raise PrismError(f"{where}: features exceed the float32 range (|x| > 3.4e38); "
                                     "rescale them (PRISM probes L2-normalised embeddings)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = arr.astype(np.float32)
    # chunked finiteness check: bounded memory on memory-mapped matrices
    for start in range(0, arr.shape[0], _CHUNK):
        if not np.isfinite(arr[start:start + _CHUNK]).all():
            raise PrismError(f"{where}: features contain NaN or inf; re-extract or drop those rows")
    return arr


def check_n_classes(n_classes: Any, where: str = "n_classes") -> int | None:
    if n_classes is None:
        return None
    if isinstance(n_classes, (bool, np.bool_)) or not isinstance(n_classes, (int, np.integer)):
        raise PrismError(f"{where}: must be an integer >= 2 (or None to infer it from the labels), got {n_classes!r}")
    if n_classes < 2:
        raise PrismError(f"{where}: must be at least 2, got {n_classes}")
    return int(n_classes)


def check_splits(
    train: SplitArrays,
    val: SplitArrays | None,
    test: SplitArrays,
    n_classes: int | None = None,
) -> int:
    """Validate the three splits; return K. Raises PrismError with the split named."""
    n_classes = check_n_classes(n_classes)
    splits = [("train", train), ("test", test)] + ([("val", val)] if val is not None else [])
    for name, s in splits:
        where = s.name or name
        s.X = as_features(s.X, f"{where} features")
        s.y = as_labels(s.y, f"{where} labels", n_classes)
        if s.X.shape[0] != s.y.shape[0]:
            raise PrismError(
                f"{where}: {s.X.shape[0]} feature rows but {s.y.shape[0]} labels; they must have equal length"
            )
        if s.y.shape[0] == 0:
            raise PrismError(f"{where}: the split is empty; every split needs at least one sample")
    dims = {name: s.X.shape[1] for name, s in splits}
    if len(set(dims.values())) > 1:
        shown = ", ".join(f"{n} {d}" for n, d in dims.items())
        raise PrismError(f"feature dimensions differ between splits ({shown}); all splits must come from one model")
    k = n_classes if n_classes is not None else int(max(s.y.max() for _, s in splits)) + 1
    if k < 2:
        raise PrismError("a task needs at least 2 classes; every label is 0 "
                         "(pass n_classes or labels of two or more classes)")
    present = set(np.unique(train.y).tolist())
    absent = [c for c in range(k) if c not in present]
    if absent:
        others = [n for n, s in splits if n != "train" and set(np.unique(s.y).tolist()) & set(absent)]
        seen = f" (they occur in {', '.join(others)})" if others else ""
        shown = absent[:10] + (["..."] if len(absent) > 10 else [])
        raise PrismError(
            f"{train.name or 'train'}: class(es) {shown} absent from the training split{seen}; "
            f"every one of the {k} classes needs at least one training sample"
        )
    return k


# -- grid settings ------------------------------------------------------------
def check_seeds(seeds: Iterable[Any], where: str = "seeds") -> tuple[int, ...]:
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise PrismError(f"{where}: pass a list of integers, e.g. [42, 123, 456]; got {seeds!r}")
    out = []
    for s in seeds:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
            raise PrismError(f"{where}: {s!r} is not an integer seed; use integers 0..{MAX_SEED}")
        if not 0 <= int(s) <= MAX_SEED:
            raise PrismError(f"{where}: seed {s} is outside 0..{MAX_SEED} (NumPy's legacy seed range)")
        out.append(int(s))
    if not out:
        raise PrismError(f"{where}: at least one seed is needed")
    if len(set(out)) != len(out):
        raise PrismError(f"{where}: {out} contains duplicates")
    return tuple(out)


def _finite_number(value: Any, where: str, lo: float, hi: float, lo_open: bool = True) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise PrismError(f"{where}: must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
        raise PrismError(f"{where}: must be a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value!r}")
    return v


def _integer(value: Any, where: str, lo: int, hi: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise PrismError(f"{where}: must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise PrismError(f"{where}: must be between {lo} and {hi}, got {value}")
    return int(value)


def check_probe(probe: Mapping[str, Any], where: str = "probe") -> dict[str, Any]:
    """The settings of the logistic probe (C, max_iter, tol, backend) checked as the task schema does."""
    if not isinstance(probe, Mapping):
        raise PrismError(f"{where}: must be a mapping such as {{'kind': 'logistic', 'C': 1.0}}, got {probe!r}")
    out = dict(probe)
    kind = out.setdefault("kind", "logistic")
    if not isinstance(kind, str) or not kind:
        raise PrismError(f"{where}.kind: must be the name of a probe head, got {kind!r}")
    if kind != "logistic":
        return out  # another head plugin validates its own settings
    allowed = {"kind", "C", "max_iter", "tol", "backend"}
    unknown = sorted(set(map(str, out)) - allowed)
    if unknown:
        raise PrismError(f"{where}: unknown setting(s) {unknown} for the logistic probe (allowed: {sorted(allowed)})")
    if "C" in out:
        out["C"] = _finite_number(out["C"], f"{where}.C", 0.0, 1e12)
    if "max_iter" in out:
        out["max_iter"] = _integer(out["max_iter"], f"{where}.max_iter", 1, 10**7)
    if "tol" in out:
        out["tol"] = _finite_number(out["tol"], f"{where}.tol", 0.0, 1.0)
    if out.get("backend", "sklearn") not in ("sklearn", "torch"):
        raise PrismError(f"{where}.backend: must be 'sklearn' or 'torch', got {out['backend']!r}")
    return out


def check_grid_settings(*, seeds: Any, C: Any, max_iter: Any, ece_bins: Any, proportional_val: Any,
                        probe: Any = None) -> dict[str, Any]:
    """Validate :func:`prism_plugin.api.evaluate`'s keyword arguments; return them normalised."""
    out: dict[str, Any] = {"seeds": check_seeds(seeds)}
    if probe is None:
        out["probe"] = check_probe({"kind": "logistic", "C": C, "max_iter": max_iter}, "C/max_iter")
    else:
        out["probe"] = check_probe(probe)
    out["ece_bins"] = _integer(ece_bins, "ece_bins", 1, 10_000)
    if not isinstance(proportional_val, (bool, np.bool_)):
        raise PrismError(f"proportional_val: must be True or False, got {proportional_val!r}")
    out["proportional_val"] = bool(proportional_val)
    return out
