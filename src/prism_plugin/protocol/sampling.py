"""Class-stratified subsampling (PROTOCOL §2.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Subset:
    """Sorted positions drawn from a label vector and the classes forced to one sample."""

    indices: np.ndarray
    forced_classes: tuple[int, ...]

    @property
    def n_forced(self) -> int:
        return len(self.forced_classes)


def class_quota(n_class: int, fraction: float) -> tuple[int, bool]:
    """``max(1, floor(n_c * f))`` and whether the class was forced (``n_c * f < 1``)."""
    q = n_class * fraction  # Python float product, as the reference
    return max(1, math.floor(q)), q < 1


def stratified_subset(labels: np.ndarray, fraction: float, seed: int) -> Subset:
    """Draw a class-stratified subset exactly as the reference did.

    Re-seeds NumPy's *global legacy* RNG with ``seed`` (the reference's ``np.random.seed``), then for each class in
    ascending label order draws ``max(1, floor(n_c * f))`` positions without replacement with ``np.random.choice``,
    consuming the global stream class after class. The union is returned sorted. At ``f = 1`` every seed returns
    every position.
    """
    if not (0.0 < fraction <= 1.0):
        raise ValueError(f"label fraction must be in (0, 1], got {fraction}")
    labels = np.asarray(labels)
    np.random.seed(int(seed))
    picks: list[np.ndarray] = []
    forced: list[int] = []
    for c in np.unique(labels):
        positions = np.flatnonzero(labels == c)
        n_c, was_forced = class_quota(len(positions), fraction)
        if was_forced:
            forced.append(int(c))
        picks.append(np.random.choice(positions, n_c, replace=False))
    indices = np.sort(np.concatenate(picks)) if picks else np.zeros(0, dtype=np.int64)
    return Subset(indices=indices, forced_classes=tuple(forced))


def subset_size(class_counts: list[int] | np.ndarray, fraction: float) -> tuple[int, int]:
    """Closed-form subset size and forced-class count for given class counts."""
    total, forced = 0, 0
    for n in class_counts:
        n_c, was_forced = class_quota(int(n), fraction)
        total += n_c
        forced += int(was_forced)
    return total, forced
