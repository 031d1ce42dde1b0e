"""The reliability metric plugin: bin statistics, the per-run artifact, its
buffer/flush path and the stale-artifact check."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from prism_plugin.metrics import reliability as rel
from prism_plugin.metrics.core import ece, softmax
from prism_plugin.report.cell_figures import pool_bins


def _binary(n=500, seed=0):
    rng = np.random.default_rng(seed)
    d = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-1.7 * d))).astype(int)
    proba = softmax(np.column_stack([-d, d]))
    return y, proba


def test_bins_match_histogram_and_ece():
    y, proba = _binary()
    proba[:3, 1] = 1.0  # exactly 1.0: in no fixed bin, still counted in N (PROTOCOL §3)
    proba[:3, 0] = 0.0
    out = rel.reliability_bins(y, proba, 15)
    conf = proba[:, 1]
    edges = np.linspace(0, 1, 16)
    inside = conf[conf < 1.0]
    counts, _ = np.histogram(inside, bins=edges)  # numpy's last bin is closed; 1.0 was removed first
    assert out["count"] == counts.tolist()
    assert out["n"] == len(y) and out["outside"] == 3
    for b, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        m = (conf >= lo) & (conf < hi)
        if m.any():
            assert out["confidence"][b] == pytest.approx(conf[m].mean(), abs=1e-15)
            assert out["accuracy"][b] == pytest.approx((y[m] == 1).mean(), abs=1e-15)
        else:
            assert out["confidence"][b] is None
    assert out["ece"] == ece(y, proba, 15, "fixed")  # same summation: bit-identical
    assert rel.ece_from_bins(out) == out["ece"]


def test_multiclass_top_label_bins():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(300, 4)) * 2
    y = rng.integers(0, 4, 300)
    proba = softmax(logits)
    out = rel.reliability_bins(y, proba, 10)
    assert sum(out["count"]) == 300
    assert out["ece"] == ece(y, proba, 10, "fixed")
    assert min(c for c in out["confidence"] if c is not None) >= 0.25  # top-label confidence >= 1/K


def _payload(task="t", fraction=0.1, seed=42, y=None, proba=None):
    y, proba = (y, proba) if y is not None else _binary()
    return {"format": rel.FORMAT, "task": task, "adapter": "ad", "model": "M", "fraction": fraction, "seed": seed,
            "n_classes": 2, "bins": 15, "raw": rel.reliability_bins(y, proba), "scaled": None}


def test_buffer_flush_and_load(tmp_path):
    y, proba = _binary()
    p = _payload(y=y, proba=proba)
    other = _payload(task="other")
    rel.record(p)
    rel.record(other)
    runs = pd.DataFrame([{"model": "M", "dataset": "D", "task": "t", "adapter": "ad", "fraction": 0.1, "seed": 42,
                          "ece_fixed": ece(y, proba), "reference_table": "indomain"}])
    runs.to_csv(tmp_path / "runs.csv", index=False)
    written = rel.flush(tmp_path)
    assert [w.name for w in written] == ["t--f0.1-s42.json"]  # only this directory's runs
    loaded = rel.load_reliability(tmp_path)
    assert len(loaded) == 1 and loaded[0]["setting"] == "D" and loaded[0]["raw"]["count"] == p["raw"]["count"]
    rel.flush(tmp_path / "elsewhere", runs=[{"task": "other", "adapter": "ad", "fraction": 0.1, "seed": 42}])
    assert (tmp_path / "elsewhere" / "reliability" / "other--f0.1-s42.json").exists()


def test_stale_artifact_is_ignored(tmp_path):
    y, proba = _binary()
    rel.record(_payload(y=y, proba=proba), tmp_path)  # written at once (results dir known)
    runs = pd.DataFrame([{"model": "M", "dataset": "D", "task": "t", "adapter": "ad", "fraction": 0.1, "seed": 42,
                          "ece_fixed": ece(y, proba) + 1e-6}])  # the run was recomputed since
    assert rel.load_reliability(tmp_path, runs) == []
    runs["ece_fixed"] = ece(y, proba)
    assert len(rel.load_reliability(tmp_path, runs)) == 1
    path = tmp_path / "reliability" / "t--f0.1-s42.json"
    data = json.loads(path.read_text())
    assert data["format"] == rel.FORMAT and data["scaled"] is None


def test_pooling_seeds_is_count_weighted():
    y1, p1 = _binary(seed=1)
    y2, p2 = _binary(n=200, seed=2)
    pooled = pool_bins([_payload(y=y1, proba=p1), _payload(y=y2, proba=p2)], "raw")
    both = rel.reliability_bins(np.concatenate([y1, y2]), np.vstack([p1, p2]))
    np.testing.assert_array_equal(pooled["count"], both["count"])
    ok = pooled["count"] > 0
    np.testing.assert_allclose(pooled["confidence"][ok], np.array(both["confidence"], dtype=float)[ok], atol=1e-12)
    np.testing.assert_allclose(pooled["accuracy"][ok], np.array(both["accuracy"], dtype=float)[ok], atol=1e-12)
