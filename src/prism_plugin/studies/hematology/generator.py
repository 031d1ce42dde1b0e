"""A controlled-shift embedding generator where the right answers are known.

Labelled embeddings ``x = mu_y + offset_domain + within_std * eps`` (``eps ~ N(0, I)``) with

* class clusters: ``n_classes`` means at pairwise distance about ``class_sep`` (random directions),
* a per-domain **first-moment offset** (a fixed vector per domain, magnitude and direction chosen
  by the caller or drawn from the generator's seed), the mechanism the audit identifies, and
* a controllable class prior per sample call (integer counts by largest remainder, see
  :func:`prism_plugin.adaptation.priors.counts_for_batch`).

With no offset, source and target are the same distribution (domains are not decodable, adaptation
has nothing to fix); with an offset, a source-trained probe is biased on the target in a way a
class-balanced re-centring can undo exactly, while a label-prior correction (BBSE) cannot.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from prism_plugin.adaptation.priors import counts_for_batch


@dataclass(frozen=True)
class Domain:
    name: str
    offset: np.ndarray

    @property
    def magnitude(self) -> float:
        return float(np.linalg.norm(self.offset))


class ShiftGenerator:
    """Class clusters shared by every domain; domains differ by a mean offset only."""

    def __init__(self, n_classes: int = 5, dim: int = 16, class_sep: float = 4.0, within_std: float = 1.0,
                 seed: int = 0, class_names: Sequence[str] | None = None):
        if n_classes < 2 or dim < 1:
            raise ValueError("need n_classes >= 2 and dim >= 1")
        self.n_classes, self.dim, self.seed = int(n_classes), int(dim), int(seed)
        self.within_std = float(within_std)
        rng = np.random.default_rng([self.seed, 1])
        raw = rng.standard_normal((n_classes, dim))
        raw /= np.linalg.norm(raw, axis=1, keepdims=True)
        self.class_means = raw * (class_sep / np.sqrt(2.0))
        self.class_names = tuple(class_names) if class_names else tuple(f"class{i}" for i in range(n_classes))

    def direction(self, name: str, align: float | None = None) -> np.ndarray:
        """A unit vector drawn deterministically from the generator seed and the domain name.

        ``align`` (in [0, 1]) is its cosine with the span of the centred class means: 0 = a pure
        nuisance direction no source probe relies on, 1 = entirely class-discriminative. ``None``
        draws an unconstrained random direction.
        """
        rng = np.random.default_rng([self.seed, 2, zlib.crc32(name.encode())])
        v = rng.standard_normal(self.dim)
        if align is None:
            return v / np.linalg.norm(v)
        a = float(align)
        if not 0.0 <= a <= 1.0:
            raise ValueError("align must be in [0, 1]")
        centred = self.class_means - self.class_means.mean(axis=0)
        basis = np.linalg.svd(centred, full_matrices=False)[2][: self.n_classes - 1]
        inside = basis.T @ (basis @ v)
        outside = v - inside
        if np.linalg.norm(outside) < 1e-12 or np.linalg.norm(inside) < 1e-12:
            raise ValueError("dim too small to separate class and nuisance directions")
        return a * inside / np.linalg.norm(inside) + np.sqrt(1 - a * a) * outside / np.linalg.norm(outside)

    def domain(self, name: str, offset: float | np.ndarray = 0.0, align: float | None = None) -> Domain:
        """A domain with offset ``magnitude * direction(name, align)`` (a scalar) or the given vector."""
        off = np.asarray(offset, dtype=np.float64)
        vec = off * self.direction(name, align) if off.ndim == 0 else off.reshape(self.dim)
        return Domain(name, vec)

    def sample(self, domain: Domain, n: int, prior: Sequence[float] | None = None,
               seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``n`` labelled embeddings (float32) whose class counts follow ``prior`` (default balanced)."""
        p = np.full(self.n_classes, 1.0 / self.n_classes) if prior is None else np.asarray(prior, float)
        p = p / p.sum()
        counts = counts_for_batch(p, int(n))
        y = np.repeat(np.arange(self.n_classes), counts)
        rng = np.random.default_rng([self.seed, 3, zlib.crc32(domain.name.encode()), 0 if seed is None else int(seed) + 1])
        rng.shuffle(y)
        X = self.class_means[y] + domain.offset + self.within_std * rng.standard_normal((len(y), self.dim))
        return X.astype(np.float32), y.astype(np.int64)
