"""Generated embedding-like data for the probe tests (unit-norm rows, power-law spectrum, a shared mean)."""

from __future__ import annotations

import numpy as np


def embeddings(n: int, n_classes: int, dim: int = 64, sep: float = 0.35, seed: int = 0,
               class_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` float32 rows and integer labels; ``class_seed`` fixes the class geometry across splits."""
    geo = np.random.default_rng(class_seed)
    scale = (np.arange(dim) + 1.0) ** -1.0
    scale *= np.sqrt(dim / (scale ** 2).sum())
    means = geo.standard_normal((n_classes, dim)) * scale
    means *= sep * np.sqrt(dim) / np.linalg.norm(means, axis=1, keepdims=True) / np.sqrt(2)
    shared = np.zeros(dim)
    shared[0] = np.sqrt(dim)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    y[:n_classes] = np.arange(n_classes)  # every class present
    X = rng.standard_normal((n, dim)) * scale + means[y] + shared
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32), y.astype(np.int64)
