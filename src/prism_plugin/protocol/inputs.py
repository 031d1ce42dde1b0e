"""Validation of embedding arrays before any fit: one clear message per problem."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from prism_plugin.errors import PrismError


@dataclass
class SplitArrays:
    """Features ``X`` (N x D, float32, possibly memory-mapped) and integer labels ``y``."""

    X: np.ndarray
    y: np.ndarray
    name: str = ""

    def __len__(self) -> int:
        return int(self.y.shape[0])


def as_labels(y, where: str, n_classes: int | None = None) -> np.ndarray:
    """Integer labels 0..K-1 or a PrismError naming ``where``."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise PrismError(f"{where}: labels must be a 1-D vector, got shape {arr.shape}")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise PrismError(f"{where}: labels must be integers 0..K-1, got non-integer floats")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "iu":
        raise PrismError(f"{where}: labels must be integers 0..K-1, got dtype {arr.dtype}; map class names to integers first")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise PrismError(f"{where}: labels must be integers 0..K-1, found {arr.min()}")
    if n_classes is not None and arr.size and arr.max() >= n_classes:
        raise PrismError(f"{where}: label {arr.max()} is out of range for n_classes = {n_classes}")
    return arr


def as_features(X, where: str) -> np.ndarray:
    """A 2-D float32 feature matrix (memory maps stay memory maps) or a PrismError."""
    if isinstance(X, np.memmap) and X.dtype == np.float32:
        arr = X
    else:
        arr = np.asarray(X)
        if arr.dtype.kind not in "fiu" or arr.dtype.kind == "b":
            raise PrismError(f"{where}: features must be numeric, got dtype {arr.dtype}")
        if arr.dtype != np.float32:
            arr = arr.astype(np.float32)
    if arr.ndim != 2:
        raise PrismError(f"{where}: features must be a 2-D (samples x dims) matrix, got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise PrismError(f"{where}: features have 0 dimensions")
    # chunked finiteness check: bounded memory on memory-mapped matrices
    for start in range(0, arr.shape[0], 65536):
        if not np.isfinite(arr[start:start + 65536]).all():
            raise PrismError(f"{where}: features contain NaN or inf; re-extract or drop those rows")
    return arr


def check_splits(
    train: SplitArrays,
    val: SplitArrays | None,
    test: SplitArrays,
    n_classes: int | None = None,
) -> int:
    """Validate the three splits; return K. Raises PrismError with the split named."""
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
            raise PrismError(f"{where}: the split is empty")
    dims = {s.X.shape[1] for _, s in splits}
    if len(dims) > 1:
        raise PrismError(f"feature dimensions differ between splits: {sorted(dims)}")
    k = n_classes if n_classes is not None else int(max(s.y.max() for _, s in splits)) + 1
    if k < 2:
        raise PrismError("a task needs at least 2 classes; all labels are 0")
    present = set(np.unique(train.y).tolist())
    absent = [c for c in range(k) if c not in present]
    if absent:
        raise PrismError(
            f"{train.name or 'train'}: class(es) {absent} absent from the training split; "
            f"every one of the {k} classes needs at least one training sample"
        )
    test_only = sorted(set(np.unique(test.y).tolist()) - present)
    if test_only:  # unreachable given the check above, kept for n_classes=None callers
        warnings.warn(f"classes {test_only} appear in test but not in train", stacklevel=2)
    return k
