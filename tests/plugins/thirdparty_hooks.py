"""A third party's plugin module for the hooks the example packages do not implement.

Written as a plugin author would (``@hookimpl`` functions, public imports only); the tests in
``test_hooks.py`` load it into a real :class:`~prism_plugin.plugins.PluginHost`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from prism_plugin import hookimpl
from prism_plugin.contracts import SummaryOutput
from prism_plugin.data.perturb import Param
from prism_plugin.quality import Flag


class MeanColourAdapter:
    """A toy adapter factory: ``MeanColourAdapter(size=8)``."""

    def __init__(self, size: int = 8):
        self.size = int(size)


class LegacyHead:
    def __init__(self, seed: int = 0):
        self.seed = seed


def invert(img: np.ndarray, rng: np.random.Generator, strength: float = 1.0) -> np.ndarray:
    """Blend each pixel towards its negative by ``strength``."""
    img = img.astype(np.float64)
    return np.clip(img + strength * (255.0 - 2.0 * img), 0, 255).astype(np.uint8)


def few_seeds(runs: pd.DataFrame, ctx) -> list[Flag]:
    """Warn when a cell has fewer than three seeds."""
    counts = runs.groupby("fraction")["seed"].nunique()
    few = counts[counts < 3]
    if few.empty:
        return []
    return [Flag("thirdparty_few_seeds", "warning", f"fewer than 3 seeds at {len(few)} fraction(s)", int(len(few)),
                 int(len(counts)))]


@hookimpl
def register_adapters(register):
    register("thirdparty_mean_colour", MeanColourAdapter, description="mean colour (third-party test)", dim=3)


@hookimpl
def probe_heads(register):
    register("thirdparty_legacy", LegacyHead, seed_invariant=True)


@hookimpl
def register_perturbations(register):
    register("thirdparty_invert", invert, params={"strength": Param(1.0, 0.0, 1.0)},
             description="blend towards the negative image (third-party test)")


@hookimpl
def register_checks(register):
    register("thirdparty_few_seeds", few_seeds, description="fewer than 3 seeds per cell (third-party test)")


@hookimpl
def summarize(tables, options):
    indomain = tables.indomain
    if indomain is None:
        return None
    best = indomain.groupby("model", sort=True)["auroc"].mean().reset_index()
    return SummaryOutput(tables={"thirdparty_mean_auroc": best}, headline={"thirdparty_models": int(len(best))})
