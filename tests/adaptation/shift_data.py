"""Data shared by the adaptation tests: the WBC class names and encoders seeing one controlled shift."""

from __future__ import annotations

import numpy as np

from prism_plugin.studies.hematology.generator import ShiftGenerator
from prism_plugin.protocol.inputs import SplitArrays

WBC = ("neutrophil", "lymphocyte", "monocyte", "eosinophil", "basophil")


def encoder_views(n_models: int = 3):
    """The same images (labels) seen by encoders of different quality and shift sensitivity."""
    g = ShiftGenerator(n_classes=5, dim=16, class_sep=6.0, seed=0, class_names=WBC)
    src, tgt = g.domain("source"), g.domain("target", 1.0, align=0.5)
    base = {"train": g.sample(src, 400, seed=1), "val": g.sample(src, 150, seed=2), "test": g.sample(tgt, 300, seed=3)}
    views = {}
    for e in range(n_models):
        rng = np.random.default_rng(100 + e)
        A = np.linalg.qr(rng.normal(size=(16, 16)))[0]
        noise = [0.2, 0.8, 1.6][e]
        extra_offset = [4.0, 1.0, 0.5][e] * g.direction("target", align=0.6)  # encoder-specific scanner sensitivity
        out = {}
        for split, (X, y) in base.items():
            Z = X + (extra_offset if split == "test" else 0.0) + noise * rng.normal(size=X.shape)
            out[split] = SplitArrays((Z @ A).astype(np.float32), y)
        views[f"enc_{'abc'[e]}"] = out
    return views
