"""The ``classwise`` metric plugin: per-class one-vs-rest ECE, its artifact and its cost.

Checked against independent computations: a naive per-class loop over
:func:`prism_plugin.metrics.core.ece` (class k as a binary problem) and explicit half-open bin
masks; two closed forms (a constant prediction: ECE_k = |share of class k - p_k|; probabilities
drawn so that E[1[y = k] | p] = p_k: ECE -> 0 as N grows); the K = 2 claim of the docstring
(the mean of both classes' one-vs-rest ECE is ``ece_fixed``); and the calibration plugin's own
temperature-scaled probabilities.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

from prism_plugin.contracts import CalibrationSet, RunContext
from prism_plugin.metrics import calibration as calib_plugin
from prism_plugin.metrics import classwise as cw
from prism_plugin.metrics.core import ece, probabilities_from_logits
from prism_plugin.protocol.grid import SCALING


def naive_class_ece(y, proba, bins):
    """ECE of each class k as the binary problem (1 - p_k, p_k) vs 1[y = k], by core.ece."""
    return np.array([ece((y == k).astype(int), np.column_stack([1 - proba[:, k], proba[:, k]]), bins, "fixed")
                     for k in range(proba.shape[1])])


def naive_bins(y, proba, bins, k):
    edges = np.linspace(0, 1, bins + 1)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (proba[:, k] >= lo) & (proba[:, k] < hi)
        out.append((int(m.sum()), proba[m, k].mean() if m.any() else np.nan,
                    (y[m] == k).mean() if m.any() else np.nan))
    return out


def softmax_rows(rng, n, k, scale=2.0):
    return probabilities_from_logits(rng.normal(size=(n, k)) * scale)


@pytest.mark.parametrize("n,k,bins", [(500, 9, 15), (37, 3, 10), (200, 5, 7)])
def test_matches_a_naive_per_class_loop(n, k, bins):
    rng = np.random.default_rng(n + k)
    p = softmax_rows(rng, n, k)
    # probabilities exactly on bin edges and exactly 1.0 (in no bin, still counted in N)
    p[0] = 0.0
    p[0, 0] = 1.0
    edge = 1.0 / bins
    p[1] = (1 - edge) / (k - 1)
    p[1, 1] = edge
    y = rng.integers(0, k, n)
    stats = cw.classwise_bins(y, p, bins)
    want = naive_class_ece(y, p, bins)
    np.testing.assert_allclose(stats["ece"], want, rtol=0, atol=1e-12)
    assert cw.classwise_ece(y, p, bins) == pytest.approx(want.mean(), abs=1e-12)
    for c in range(k):
        for b, (cnt, conf, acc) in enumerate(naive_bins(y, p, bins, c)):
            assert stats["count"][c, b] == cnt
            np.testing.assert_allclose([stats["confidence"][c, b], stats["accuracy"][c, b]], [conf, acc],
                                       rtol=0, atol=1e-12, equal_nan=True)
    assert stats["count"][0].sum() == n - 1  # the sample with p_0 = 1.0 is in no bin of class 0


def test_constant_prediction_has_the_closed_form():
    k = 4
    y = np.repeat(np.arange(k), [50, 30, 15, 5])  # shares 0.5, 0.3, 0.15, 0.05
    p = np.tile([0.4, 0.3, 0.2, 0.1], (len(y), 1))
    stats = cw.classwise_bins(y, p, 15)
    np.testing.assert_allclose(stats["ece"], [0.1, 0.0, 0.05, 0.05], atol=1e-12)
    assert cw.classwise_ece(y, p, 15) == pytest.approx(0.05, abs=1e-12)
    # the uniform prediction on balanced labels is perfectly class-wise calibrated
    yb = np.arange(400) % k
    assert cw.classwise_ece(yb, np.full((400, k), 1 / k), 15) == pytest.approx(0.0, abs=1e-12)


def test_calibrated_probabilities_give_an_ece_that_vanishes_with_n():
    rng = np.random.default_rng(7)
    k = 5

    def draw(n):
        p = rng.dirichlet(np.full(k, 0.7), size=n)
        u = rng.random(n)[:, None]
        y = (u > np.cumsum(p, axis=1)).sum(axis=1)  # y ~ Categorical(p): E[1[y = k] | p] = p_k
        return y, p

    small = np.mean([cw.classwise_ece(*draw(500), 15) for _ in range(5)])
    large = cw.classwise_ece(*draw(200_000), 15)
    assert large < 0.005 and large < small / 5, (small, large)


def test_binary_is_nan_and_would_repeat_ece_fixed():
    rng = np.random.default_rng(3)
    d = rng.normal(size=300)
    p1 = 1 / (1 + np.exp(-d))
    p = np.column_stack([1 - p1, p1])
    y = (rng.random(300) < p1).astype(int)
    assert np.isnan(cw.classwise_ece(y, p, 15))
    # the docstring's reason: both one-vs-rest problems have the class-1 reliability error
    np.testing.assert_allclose(naive_class_ece(y, p, 15), ece(y, p, 15, "fixed"), rtol=0, atol=1e-12)
    run = _run(y, p, np.column_stack([-d, d]), k=2)
    assert all(np.isnan(v) for v in cw.run_metrics(run).values())


def _run(y, proba, logits, *, k, artifact_dir=None, cal=None, names=(), kind="indomain"):
    return RunContext(task="toy_task", adapter="toy", model="Toy", dataset="ToySet", fraction=1.0, seed=42,
                      n_classes=k, n_train=10, forced_classes=0, y_test=y, proba_test=proba, logits_test=logits,
                      calibration={"val": cal} if cal is not None else {}, ece_bins=15, class_names=tuple(names),
                      meta={"kind": kind}, artifact_dir=artifact_dir, scaling=SCALING)


def _multiclass_run(tmp_path, k=4, n=160, kind="indomain", names=("a", "b", "c", "d")):
    rng = np.random.default_rng(11)
    y = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) + 1.5 * np.eye(k)[y]
    vy = rng.integers(0, k, 80)
    cal = CalibrationSet(rng.normal(size=(80, k)) + 1.5 * np.eye(k)[vy], vy)
    return _run(y, probabilities_from_logits(logits), logits, k=k, artifact_dir=tmp_path / "artifacts", cal=cal,
                names=names, kind=kind)


@pytest.mark.parametrize("kind", ["indomain", "transfer"])
def test_columns_use_the_calibration_plugins_temperature_and_write_the_artifact(tmp_path, kind):
    run = _multiclass_run(tmp_path, kind=kind)
    cols = cw.run_metrics(run)
    calib = calib_plugin.run_metrics(run)
    t = calib["temperature_src" if kind == "transfer" else "temperature"]
    scaled = probabilities_from_logits(run.logits_test, t)  # independent of run.scaled_proba
    per_raw = naive_class_ece(run.y_test, run.proba_test, 15)
    per_scaled = naive_class_ece(run.y_test, scaled, 15)
    assert cols["ece_classwise"] == pytest.approx(per_raw.mean(), abs=1e-12)
    assert cols["ece_classwise_scaled"] == pytest.approx(per_scaled.mean(), abs=1e-12)
    assert cols["ece_classwise_max"] == pytest.approx(per_raw.max(), abs=1e-12)
    assert cols["ece_classwise_scaled"] != cols["ece_classwise"]
    path = tmp_path / "artifacts" / "classwise" / "toy_task--f1-s42.json"
    art = json.loads(path.read_text())
    assert art["format"] == cw.FORMAT and art["n"] == 160 and art["bins"] == 15 and art["n_classes"] == 4
    assert art["temperature"] == pytest.approx(t)
    assert art["temperature_source"] == ("source validation split" if kind == "transfer" else "validation split")
    assert [c["name"] for c in art["classes"]] == ["a", "b", "c", "d"]
    assert [c["n"] for c in art["classes"]] == np.bincount(run.y_test, minlength=4).tolist()
    worst = int(per_raw.argmax())
    assert art["worst"]["raw"] == {"index": worst, "name": "abcd"[worst], "ece": pytest.approx(per_raw[worst])}
    assert art["worst"]["scaled"]["index"] == int(per_scaled.argmax())
    for c, want_raw, want_sc in zip(art["classes"], per_raw, per_scaled):
        assert c["raw"]["ece"] == pytest.approx(want_raw, abs=1e-12)
        assert c["scaled"]["ece"] == pytest.approx(want_sc, abs=1e-12)
        assert cw.ece_from_bins(c["raw"], art["n"]) == pytest.approx(want_raw, abs=1e-12)
        assert sum(c["raw"]["count"]) <= 160 and len(c["raw"]["accuracy"]) == 15
        assert all((a is None) == (cnt == 0) for a, cnt in zip(c["raw"]["accuracy"], c["raw"]["count"]))
    assert not list(path.parent.glob(".*.tmp"))  # atomic write leaves no temporary file


def test_no_artifact_without_artifact_dir_and_nan_scaled_without_validation(tmp_path):
    run = _multiclass_run(tmp_path)
    bare = _run(run.y_test, run.proba_test, run.logits_test, k=4)  # no artifact_dir, no val split
    cols = cw.run_metrics(bare)
    assert np.isfinite(cols["ece_classwise"]) and np.isnan(cols["ece_classwise_scaled"])
    assert not (tmp_path / "artifacts").exists()


def test_load_matches_runs_csv_rows_and_ignores_stale_files(tmp_path):
    run = _multiclass_run(tmp_path)
    cols = cw.run_metrics(run)
    row = {"task": "toy_task", "adapter": "toy", "model": "Toy", "dataset": "ToySet", "fraction": 1.0, "seed": 42,
           "n_classes": 4, **cols}
    got, stale = cw.load_classwise(tmp_path, pd.DataFrame([row]))
    assert stale == 0 and len(got) == 1 and got[0]["setting"] == "ToySet" and got[0]["model"] == "Toy"
    got, stale = cw.load_classwise(tmp_path, pd.DataFrame([{**row, "ece_classwise": cols["ece_classwise"] + 0.01}]))
    assert got == [] and stale == 1  # other numbers: a file left over from another configuration
    got, stale = cw.load_classwise(tmp_path, pd.DataFrame([{**row, "seed": 7}]))
    assert got == [] and stale == 1


def test_per_run_cost_on_a_demo_sized_run(tmp_path):
    run = _multiclass_run(tmp_path, k=9, n=500, names=())
    run.temperature("val")  # fitted (and cached) by the calibration plugin before this one runs
    cw.run_metrics(run)
    times = []
    for _ in range(15):
        t0 = time.perf_counter()
        cw.run_metrics(run)
        times.append(time.perf_counter() - t0)
    # ~1 ms on an idle core (compute ~0.3 ms + the atomic JSON write); loose bound for a shared machine
    assert np.median(times) < 0.02, times
