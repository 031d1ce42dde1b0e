"""A data source: ``noise_tiles`` - procedurally generated RGB tiles whose colour depends on the class.

A task uses it as ``source: {type: noise_tiles, n_per_class: 20, size: 32, seed: 0}``. Options
(``OPTIONS``; anything else in ``source:`` is rejected with the task file and line):

* ``n_per_class``: tiles per class in every split (an integer), or per split
  (``{train: 16, val: 8, test: 12}``);
* ``size``: tile side in pixels (8..512); ``seed``: the generator seed;
* ``shift``: a brightness offset added to every pixel (0 = none), to simulate an acquisition shift
  between two tasks (see ``example_noise_tiles_shifted.yaml``).

Like every source it subclasses :class:`prism_plugin.data.base.Source` and implements
``pool(name)``: the raw items of one split with their raw labels and stable keys. The base class
maps labels to the task's classes, applies ``--limit`` and fingerprints each split from the items'
keys, labels and **pixels** (:class:`~prism_plugin.data.refs.ArrayImageRef`), so changing an
option changes the fingerprint and the embedding cache never serves stale features.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prism_plugin.data.base import Pool, Source
from prism_plugin.data.refs import ArrayImageRef
from prism_plugin.errors import PrismError

SPLITS = ("train", "val", "test")
#: a base colour per class (RGB); classes beyond the palette get a seeded random colour
PALETTE = ((185, 105, 165), (160, 95, 180), (200, 150, 130), (120, 150, 120), (150, 150, 150))
#: per-pixel noise, and a per-tile colour jitter (like stain variation) that makes classes overlap
NOISE_STD = 40.0
JITTER_STD = 18.0


def class_colour(c: int) -> np.ndarray:
    if c < len(PALETTE):
        return np.asarray(PALETTE[c], dtype=np.float64)
    return np.random.default_rng([7, c]).uniform(40, 220, size=3)


def make_tiles(n_per_class: int, n_classes: int, size: int, seed: int, split_index: int,
               shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(images (N, size, size, 3) uint8, labels (N,))``, class-major order, deterministic."""
    rng = np.random.default_rng([int(seed), int(split_index)])
    images, labels = [], []
    for c in range(n_classes):
        base = class_colour(c) + float(shift) + rng.normal(0.0, JITTER_STD, size=(n_per_class, 1, 1, 3))
        noise = rng.normal(0.0, NOISE_STD, size=(n_per_class, size, size, 3))
        images.append(np.clip(base + noise, 0, 255).astype(np.uint8))
        labels.extend([c] * n_per_class)
    return np.concatenate(images), np.asarray(labels, dtype=np.int64)


class NoiseTilesSource(Source):
    """Procedural colour-noise tiles, one colour per class (no files, no download)."""

    type_name = "noise_tiles"
    OPTIONS = frozenset({"n_per_class", "size", "seed", "shift"})
    LAYOUT = "nothing on disk (tiles are generated from the options)"

    def __init__(self, task, n_per_class: Any = 20, size: int = 32, seed: int = 0, shift: float = 0.0,
                 **options: Any):
        super().__init__(task, n_per_class=n_per_class, size=size, seed=seed, shift=shift, **options)
        where = f"{task.file}: source"
        if isinstance(n_per_class, dict):
            bad = sorted(set(n_per_class) - set(SPLITS))
            if bad:
                raise PrismError(f"{where}.n_per_class: unknown split {bad[0]!r} (splits: {', '.join(SPLITS)})")
            counts = {s: n_per_class.get(s, 0) for s in SPLITS}
        else:
            counts = {s: n_per_class for s in SPLITS}
        for s, n in counts.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise PrismError(f"{where}.n_per_class: must be a non-negative integer (or one per split), "
                                 f"got {n!r} for {s}")
        if isinstance(size, bool) or not isinstance(size, int) or not 8 <= size <= 512:
            raise PrismError(f"{where}.size: must be an integer in [8, 512], got {size!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise PrismError(f"{where}.seed: must be a non-negative integer, got {seed!r}")
        if isinstance(shift, bool) or not isinstance(shift, (int, float)):
            raise PrismError(f"{where}.shift: must be a number, got {shift!r}")
        self.counts, self.size, self.seed, self.shift = counts, size, seed, float(shift)

    def describe(self) -> str:
        return f"noise tiles ({self.size} px, seed {self.seed}, shift {self.shift:g})"

    def all_pool_names(self) -> list[str]:
        return [s for s in SPLITS if self.counts[s] > 0]

    def pool(self, name: str) -> Pool:
        if name == "all":
            return Pool.concat([self.pool(s) for s in self.all_pool_names()], self.all_pool_names())
        if name not in SPLITS or self.counts[name] == 0:
            raise PrismError(f"task {self.task.name}: noise_tiles has no split {name!r} "
                             f"(splits: {', '.join(self.all_pool_names())}; set source.n_per_class)")
        images, labels = make_tiles(self.counts[name], self.task.n_classes, self.size, self.seed,
                                    SPLITS.index(name), self.shift)
        items = [ArrayImageRef(images, i, f"noise_tiles/{name}/{i}") for i in range(len(labels))]
        return Pool(items, [int(v) for v in labels], [r.key for r in items], where=f"noise_tiles [{name}]")
