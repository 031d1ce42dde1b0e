"""Feature sources: source types that yield embedding vectors instead of images.

A feature source is run with ``--model precomputed`` (no ``--model-args``): its vectors skip the
adapter and the extraction cache. It subclasses :class:`FeatureSource` and implements one method,
:meth:`FeatureSource.features`, the :class:`FeatureSplit` of one source-level split (the names a
task's ``splits:`` and ``split.from`` use). Options, label mapping (``class_map``,
``drop_classes``) and messages are those of :class:`~prism_plugin.data.base.Source`; ``split:``
procedures, ``--limit`` and the data checks are applied by the loader, as for image sources.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from prism_plugin.data.base import Pool, Source


@dataclass
class FeatureSplit:
    """Vectors of one split (N x D), their task labels (N integers) and a fingerprint of both."""

    X: np.ndarray
    y: np.ndarray
    fingerprint: str

    def __len__(self) -> int:
        return len(self.y)


def rows_fingerprint(keys: Sequence[str], labels: np.ndarray, X: np.ndarray) -> str:
    """blake2b over each row's key and label and the vectors' bytes: changes when any of them or the order does."""
    h = hashlib.blake2b(digest_size=20)
    for key, y in zip(keys, np.asarray(labels).tolist()):
        h.update(f"{key}|{y}|".encode())
    X = np.ascontiguousarray(X)
    h.update(f"{X.shape}|{X.dtype}|".encode())
    h.update(X.tobytes())
    return h.hexdigest()


class FeatureSource(Source):
    """Base class of a feature source: implement :meth:`features`.

    The fingerprint of a :class:`FeatureSplit` enters the run fingerprint (resume): it must change
    when any vector, label, key or the order changes. :meth:`rows` computes one over stable row
    keys; a digest of the files read (:func:`prism_plugin.storage.file_digest`) does as well.
    """

    input_kind = "features"

    def features(self, name: str) -> FeatureSplit:  # pragma: no cover - abstract
        raise NotImplementedError

    def rows(self, X, raw: Sequence, keys: Sequence[str], where: str) -> FeatureSplit:
        """The :class:`FeatureSplit` of rows ``X`` with raw classes ``raw`` (class names or integers) and stable
        ``keys``: labels mapped to the task's classes (``class_map``, dropped classes left out)."""
        y = self.labels(Pool(list(range(len(raw))), list(raw), [str(k) for k in keys], where=where))
        kept = np.flatnonzero(y >= 0)
        X, y = np.asarray(X)[kept], y[kept]
        return FeatureSplit(X, y, rows_fingerprint([str(keys[i]) for i in kept], y, X))


__all__ = ["FeatureSplit", "FeatureSource", "rows_fingerprint"]
