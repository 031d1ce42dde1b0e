"""Fit reuse in the run grid: at fraction 1.0 the seeds share one fit, with identical numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prism_plugin.plugins import get_host
from prism_plugin.protocol.grid import GridSpec, grid_keys, run_grid
from prism_plugin.protocol.inputs import SplitArrays, check_splits
from prism_plugin.heads.logistic import LogisticProbe
from prism_plugin.protocol.sampling import stratified_subset
from prism_plugin.results import rows_to_frame

from ._data import embeddings

FRACTIONS = (0.05, 0.5, 1.0)
SEEDS = (42, 123, 456)


class CountingHost:
    """The real plugin host, with the logistic head wrapped to count fits and evaluations."""

    def __init__(self):
        self.host = get_host()
        self.pm = self.host.pm
        self.fits = 0
        self.evaluations = 0

    def __getattr__(self, name):  # everything else (hook calls, head traits) is the real host's
        return getattr(self.host, name)

    def head_factory(self, kind):
        real = self.host.head_factory(kind)
        outer = self

        class Counted:
            def __init__(self, **kw):
                self.head = real(**kw)
                self.backend = getattr(self.head, "backend", None)

            def fit(self, X, y):
                outer.fits += 1
                self.head.fit(X, y)
                self.converged = self.head.converged
                return self

            def evaluate(self, X):
                outer.evaluations += 1
                return self.head.evaluate(X)

        return Counted


def _splits(k):
    tr, va, te = (SplitArrays(*embeddings(n, k, dim=48, seed=s)) for n, s in ((1200, 11), (400, 12), (400, 13)))
    check_splits(tr, va, te, k)
    return tr, va, te


def _grid(splits, k, reuse, backend="sklearn"):
    spec = GridSpec(fractions=FRACTIONS, seeds=SEEDS, reuse_identical_fits=reuse,
                    probe={"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": backend})
    host = CountingHost()
    ident = {"task": "t", "adapter": "a", "model": "m", "dataset": "d"}
    rows = run_grid(*splits, k, spec, host, ident)
    return rows_to_frame([rows[key] for key in grid_keys(spec)]), host


@pytest.mark.parametrize("k", [2, 4])
def test_fraction_one_shares_one_fit_with_identical_columns(k):
    splits = _splits(k)
    with_reuse, h1 = _grid(splits, k, reuse=True)
    without, h2 = _grid(splits, k, reuse=False)
    n_cells = len(FRACTIONS) * len(SEEDS)
    assert h2.fits == n_cells
    assert h1.fits == n_cells - (len(SEEDS) - 1)  # the three f = 1.0 seeds share one fit
    # decision values once per fit (val + test), shared by every metric plugin
    assert h1.evaluations == 2 * h1.fits and h2.evaluations == 2 * h2.fits
    pd.testing.assert_frame_equal(with_reuse, without, check_exact=True)
    full = without[without["fraction"] == 1.0].drop(columns=["seed"])
    assert len(full) == len(SEEDS)
    # without reuse, three separate fits give the same numbers: reuse is exact, not an approximation
    for col in full.columns:
        assert full[col].nunique(dropna=False) == 1, col
    assert (full["n_train"] == len(splits[0])).all()


def test_fraction_one_subset_is_the_whole_sorted_training_set():
    y = embeddings(1200, 3, dim=8, seed=14)[1]
    for seed in SEEDS:
        np.testing.assert_array_equal(stratified_subset(y, 1.0, seed).indices, np.arange(len(y)))


def test_torch_backend_reuse_is_exact_too():
    splits = _splits(3)
    a, h1 = _grid(splits, 3, reuse=True, backend="torch")
    b, h2 = _grid(splits, 3, reuse=False, backend="torch")
    assert h1.fits < h2.fits
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert set(a["probe_backend"]) == {"torch"}


def test_sklearn_fit_makes_no_copy_of_float32_features():
    """LogisticProbe on float32 features allocates far less than one copy of X (no float64 copy)."""
    import tracemalloc

    X, y = embeddings(20000, 2, dim=128, seed=15)
    tracemalloc.start()
    try:
        probe = LogisticProbe(seed=0).fit(X, y)
        probe.evaluate(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert probe.model.coef_.dtype == np.float32  # scikit-learn kept float32 throughout
    assert peak < 0.5 * X.nbytes, peak
