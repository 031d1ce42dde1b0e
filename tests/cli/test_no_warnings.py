"""Noise-free runs: no torch non-writable-array warning from the MLP probe on memory-mapped
features, no pandas 'highly fragmented' PerformanceWarning from the report's cell table."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd


def test_mlp_probe_on_read_only_memory_maps_warns_nothing(tmp_path):
    from prism_plugin.heads.mlp import MLPProbe

    rng = np.random.default_rng(0)
    y = np.arange(80) % 2
    np.save(tmp_path / "X.npy", (rng.normal(size=(80, 6)) + y[:, None]).astype(np.float32))
    X = np.load(tmp_path / "X.npy", mmap_mode="r")  # what the cache hands the probe: read-only
    assert not X.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        probe = MLPProbe(hidden=4, epochs=3, early_stopping=False, batch_size=32).fit(X, y)
        proba = probe.predict_proba(X[:10])
    assert proba.shape == (10, 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert not X.flags.writeable  # never written through


def test_report_cells_of_wide_run_tables_is_not_fragmented():
    """A host with many band metrics (plugins') and few-shot K columns: the cell table is built in one go."""
    from prism_plugin.contracts import RunTables
    from prism_plugin.report.derived import report_cells

    rng = np.random.default_rng(0)
    n = 12
    bands = tuple(f"metric_{i}" for i in range(30))
    cols = {"model": ["m"] * n, "dataset": ["D"] * n, "fraction": [0.5, 1.0] * (n // 2), "seed": range(n),
            "n_classes": [2] * n, "auroc": rng.uniform(0.6, 0.9, n), "f1_macro": rng.uniform(size=n),
            "ece_fixed": rng.uniform(0, 0.2, n), "ece_scaled_fixed": rng.uniform(0, 0.1, n),
            "temperature": rng.uniform(0.5, 2, n), "nll": rng.uniform(size=n), "nll_scaled": rng.uniform(size=n),
            "degeneracy_share": rng.uniform(0.5, 0.7, n), "degenerate": [False] * n, "probe_converged": [True] * n}
    cols.update({b: rng.uniform(size=n) for b in bands})
    for k in (4, 8, 16, 32, 64, 128):
        cols[f"temperature_fewshot_k{k}"] = rng.uniform(0.5, 2, n)
        cols[f"ece_scaled_fewshot_k{k}"] = rng.uniform(0, 0.1, n)
    tables = RunTables(indomain=pd.DataFrame(cols))
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        cells = report_cells(tables, bands=("auroc", "f1_macro", "ece_fixed", "ece_scaled_fixed", *bands))
    assert len(cells) == 2 and "metric_29_max" in cells.columns
