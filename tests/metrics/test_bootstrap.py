"""The per-run test-set bootstrap (``prism_plugin.metrics.bootstrap``).

* Every replicate equals the metric function of ``prism_plugin.metrics.core`` on the resampled
  rows (a naive loop, to 1e-12): K = 2 and K > 2, tied scores, a class with 2 samples, saturated
  and constant confidences (the adaptive-edge fallback), without a scaled matrix.
* The resamples are stratified (class counts kept, draws within the class), depend only on
  (seed, y_test), and do not depend on chunking; the plugin's fast path draws the same ones.
* Artifacts round-trip and bad ones are one-line errors; bad task-key values name file:line.
* End to end (precomputed embeddings, in-process): runs.csv columns, artifacts, the point values
  equal the runs.csv metrics, summary.json's cells[].ci is the percentile interval of the mean of
  the seeds' replicate vectors (recomputed here from the files), n = 0 switches everything off,
  and a transfer run uses the source-fitted temperature.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from prism_plugin import cli
from prism_plugin.errors import PrismError
from prism_plugin.metrics import bootstrap as bs
from prism_plugin.metrics import resampling as rs
from prism_plugin.metrics import core
from tests.conftest import write_precomputed


def naive(y, p, ps, idx, bins=15):
    out = {m: [] for m in rs.BOOT_METRICS}
    for r in idx:
        yy, pp = y[r], p[r]
        out["auroc"].append(core.auroc(yy, pp))
        out["f1_macro"].append(core.f1_macro(yy, pp.argmax(axis=1)))
        out["brier"].append(core.brier(yy, pp))
        out["nll"].append(core.nll(yy, pp))
        out["ece_fixed"].append(core.ece(yy, pp, bins, "fixed"))
        out["ece_adaptive"].append(core.ece(yy, pp, bins, "adaptive"))
        qq = None if ps is None else ps[r]
        out["nll_scaled"].append(math.nan if qq is None else core.nll(yy, qq))
        out["ece_scaled_fixed"].append(math.nan if qq is None else core.ece(yy, qq, bins, "fixed"))
        out["ece_scaled_adaptive"].append(math.nan if qq is None else core.ece(yy, qq, bins, "adaptive"))
    return {m: np.array(v) for m, v in out.items()}


def _data(n, k, seed, ties=False, two=False):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    if two:  # class 0 has exactly two samples
        y[y == 0] = 1
        y[:2] = 0
    logits = rng.normal(size=(n, k)) * 2 + 1.5 * np.eye(k)[y]
    if ties:
        logits = np.round(logits)
    if k == 2:
        d = logits[:, 1] - logits[:, 0]
        return y, core.binary_proba_from_decision(d), core.binary_logits(d)
    return y, core.softmax(logits), logits


def _assert_same(got, ref):
    for m in rs.BOOT_METRICS:
        assert np.array_equal(np.isnan(got[m]), np.isnan(ref[m])), m
        assert np.allclose(got[m], ref[m], rtol=0, atol=1e-12, equal_nan=True), (m, got[m], ref[m])


@pytest.mark.parametrize("k,ties,two,bins", [(2, False, False, 15), (2, True, True, 15), (3, False, True, 10),
                                              (4, True, False, 15), (3, True, True, 5)])
def test_replicates_equal_the_core_metrics_on_the_resampled_rows(k, ties, two, bins):
    y, p, logits = _data(40, k, seed=k + 3 * ties, ties=ties, two=two)
    ps = core.probabilities_from_logits(logits, 1.7)
    idx = rs.bootstrap_indices(y, 6, seed=11)
    got = rs.replicate_metrics(y, p, ps, idx, bins)
    _assert_same(got, naive(y, p, ps, idx, bins))
    assert np.isnan(got["brier"]).all() == (k > 2)
    point = rs.point_metrics(y, p, ps, bins)
    full = naive(y, p, ps, np.arange(y.size)[None], bins)
    assert all(np.allclose(point[m], full[m][0], atol=1e-12, equal_nan=True) for m in rs.BOOT_METRICS)


def test_saturated_constant_and_missing_cases_match_core():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 30)
    d = rng.normal(size=30) * 40  # p(y=1) of exactly 0.0 / 1.0: outside every fixed bin, in N
    p = core.binary_proba_from_decision(d)
    ps = core.probabilities_from_logits(core.binary_logits(d), 0.3)
    idx = rs.bootstrap_indices(y, 5, 0)
    _assert_same(rs.replicate_metrics(y, p, ps, idx), naive(y, p, ps, idx))
    const = np.tile([0.3, 0.7], (30, 1))  # one distinct confidence: adaptive falls back to fixed edges
    _assert_same(rs.replicate_metrics(y, const, None, idx), naive(y, const, None, idx))
    y3 = rng.integers(0, 2, 30)  # K = 3 with class 2 absent: AUROC NaN everywhere, as core says
    p3 = core.softmax(rng.normal(size=(30, 3)))
    idx3 = rs.bootstrap_indices(y3, 4, 0)
    got = rs.replicate_metrics(y3, p3, None, idx3)
    _assert_same(got, naive(y3, p3, None, idx3))
    assert np.isnan(got["auroc"]).all() and np.isfinite(got["f1_macro"]).all()


def test_resamples_are_stratified_paired_and_chunk_independent():
    y = np.array([0] * 7 + [1] * 2 + [2] * 11)[np.random.default_rng(1).permutation(20)]
    idx = rs.bootstrap_indices(y, 50, seed=3)
    assert idx.shape == (50, 20)
    for row in idx:
        assert np.array_equal(np.bincount(y[row], minlength=3), np.bincount(y))
    # row b: class by class, draws within that class
    assert (y[idx[:, :7]] == 0).all() and (y[idx[:, 7:9]] == 1).all() and (y[idx[:, 9:]] == 2).all()
    # the 2-sample class is really resampled (both of its rows, and repeats)
    assert set(np.unique(idx[:, 7:9])) == set(np.flatnonzero(y == 1))
    assert np.array_equal(idx, rs.bootstrap_indices(y.copy(), 50, seed=3))
    assert not np.array_equal(idx, rs.bootstrap_indices(y, 50, seed=4))
    assert not np.array_equal(idx, rs.bootstrap_indices(np.roll(y, 1), 50, seed=3))
    assert np.array_equal(idx, np.concatenate(list(rs.iter_bootstrap_indices(y, 50, 3, chunk=7))))


def test_fast_path_draws_the_same_resamples_in_any_chunking(monkeypatch):
    y, p, logits = _data(30, 3, seed=2, ties=True)
    ps = core.probabilities_from_logits(logits, 2.5)
    rep, point = rs.run_bootstrap(y, p, ps, 15, 23, seed=7)
    ref = rs.replicate_metrics(y, p, ps, rs.bootstrap_indices(y, 23, 7), 15)
    assert np.allclose(rep, np.column_stack([ref[m] for m in rs.BOOT_METRICS]), atol=1e-12, equal_nan=True)
    pt = rs.point_metrics(y, p, ps, 15)
    assert np.allclose(point, [pt[m] for m in rs.BOOT_METRICS], atol=1e-15, equal_nan=True)
    monkeypatch.setattr(rs, "CHUNK_ELEMENTS", 65)  # 2 replicates per chunk
    rep2, point2 = rs.run_bootstrap(y, p, ps, 15, 23, seed=7)
    # the same resamples (BLAS may round the last bit differently for another number of rows)
    assert np.allclose(rep, rep2, rtol=0, atol=1e-13, equal_nan=True)
    assert np.allclose(point, point2, rtol=0, atol=1e-13, equal_nan=True)


def test_percentile_ci_matches_numpy_and_propagates_nan():
    v = np.random.default_rng(0).normal(size=(200, 3))
    v[5, 2] = np.nan
    lo, hi = rs.percentile_ci(v, 0.9)
    assert np.allclose(lo[:2], np.percentile(v[:, :2], 5, axis=0)) and np.allclose(hi[:2], np.percentile(v[:, :2], 95,
                                                                                                         axis=0))
    assert math.isnan(lo[2]) and math.isnan(hi[2])
    assert rs.percentile_ci(v[:, 0], 0.5) == tuple(float(x) for x in np.percentile(v[:, 0], [25, 75]))


def test_artifact_round_trip_and_bad_files(tmp_path):
    rep = np.arange(20 * len(rs.BOOT_METRICS), dtype=float).reshape(20, -1)
    y = np.array([0, 1, 1, 0, 1])
    path = bs.write_replicates(bs.artifact_path(tmp_path, "t", "f1-s0"), rep, rep[0], 20, 3, 0.9, rs.test_digest(y))
    assert path == tmp_path / "bootstrap" / "t--f1-s0.npz"
    r = bs.load_replicates(path)
    assert r.metrics == rs.BOOT_METRICS and np.array_equal(r.replicates, rep) and (r.n, r.seed, r.level) == (20, 3, 0.9)
    assert np.array_equal(r.column("auroc"), rep[:, 0]) and r.pairs_with(r)
    assert r.test_digest == rs.test_digest(y.astype(np.int32)) != rs.test_digest(y[::-1])
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(PrismError, match="bad.npz: not a readable bootstrap artifact"):
        bs.load_replicates(bad)
    np.savez(bad, format=np.array(bs.FORMAT), metrics=np.array(rs.BOOT_METRICS), replicates=rep[:3], point=rep[0],
             n=np.int64(20), seed=np.int64(0), level=np.float64(0.95), test_digest=np.array("0" * 64))
    with pytest.raises(PrismError, match="do not match n = 20"):
        bs.load_replicates(bad)
    with pytest.raises(PrismError, match="no such bootstrap artifact"):
        bs.load_replicates(tmp_path / "missing.npz")


# --------------------------------------------------------------------------- end to end
TASK = """task: bt_t
dataset: Bset
class_names: [a, b]
source: {type: precomputed}
splits: {train: train, val: val, test: test}
label_fractions: [1.0]
seeds: [0, 1]
adaptation: []
"""
TARGET = TASK.replace("bt_t", "bt_tgt").replace("Bset", "Cset")
TRANSFER = """task: bt_tr
kind: transfer
source_task: bt_t
target_task: bt_tgt
class_names: [a, b]
label_fractions: [1.0]
seeds: [0]
adaptation: []
"""


def _setup(tmp_path, extra=""):
    emb = tmp_path / "emb"
    write_precomputed(emb / "Bset", {"train": 40, "val": 16, "test": 22})
    write_precomputed(emb / "Cset", {"train": 40, "val": 16, "test": 18}, seed=3)
    tasks = tmp_path / "tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / "bt_t.yaml").write_text(TASK + extra)
    (tasks / "bt_tgt.yaml").write_text(TARGET)
    (tasks / "bt_tr.yaml").write_text(TRANSFER + extra)
    return tasks, emb


def _run(capsys, tasks, emb, out, task="bt_t", *extra):
    rc = cli.main(["--task", task, "--include-path", str(tasks), "--model", "precomputed", "--model-args",
                   f"root={emb}", "--output", str(out), "--quiet", "--no-report", *extra])
    return rc, capsys.readouterr().err


def test_end_to_end_columns_artifacts_and_summary_ci(tmp_path, capsys):
    tasks, emb = _setup(tmp_path, "bootstrap: {n: 40, seed: 2, level: 0.9}\n")
    out = tmp_path / "out"
    rc, err = _run(capsys, tasks, emb, out)
    assert rc == 0, err
    runs = pd.read_csv(out / "runs.csv")
    cols = list(runs.columns)
    assert [c for c in cols if c in bs.COLUMNS] == list(bs.COLUMNS)
    assert cols.index("auroc") < cols.index("ece_scaled_adaptive") < cols.index("auroc_ci_low")
    assert (runs["n_test_min_class"] == 11).all()
    arts = [bs.load_replicates(bs.artifact_path(out / "artifacts", "bt_t", f"f1-s{s}")) for s in (0, 1)]
    assert arts[0].pairs_with(arts[1]) and arts[0].n == 40 and arts[0].level == 0.9
    # same test rows and settings: the SAME resamples (paired), so the two vectors move together
    y_test = np.load(emb / "Bset" / "test_labels.npy")
    assert arts[0].test_digest == rs.test_digest(y_test)
    for art, (_, row) in zip(arts, runs.iterrows()):
        for j, m in enumerate(rs.BOOT_METRICS):
            assert math.isclose(art.point[j], row[m], abs_tol=1e-12) or (math.isnan(art.point[j]) and math.isnan(row[m]))
            lo, hi = rs.percentile_ci(art.replicates[:, j], 0.9)
            assert math.isclose(row[f"{m}_ci_low"], lo, abs_tol=1e-15) or math.isnan(lo), m
            assert math.isclose(row[f"{m}_ci_high"], hi, abs_tol=1e-15) or math.isnan(hi), m
        assert math.isnan(row["brier_ci_low"]) is False and row["auroc_ci_low"] <= row["auroc_ci_high"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["bootstrap"] == {"n": 40, "seed": 2, "level": 0.9, "method": bs.METHOD}
    (cell,) = summary["cells"]
    mean = (arts[0].replicates + arts[1].replicates) / 2
    for j, m in enumerate(rs.BOOT_METRICS):
        lo, hi = np.percentile(mean[:, j], [5, 95])
        assert cell["ci"][m] == pytest.approx([lo, hi], abs=1e-15)


def test_bootstrap_off_keeps_the_columns_and_writes_nothing(tmp_path, capsys):
    tasks, emb = _setup(tmp_path)
    out = tmp_path / "out"
    rc, err = _run(capsys, tasks, emb, out, "bt_t", "--set", "bootstrap.n=0")
    assert rc == 0, err
    runs = pd.read_csv(out / "runs.csv")
    assert runs[[c for c in bs.COLUMNS if c != "n_test_min_class"]].isna().all().all()
    assert (runs["n_test_min_class"] == 11).all()
    assert not (out / "artifacts" / "bootstrap").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["bootstrap"]["n"] == 0 and "ci" not in summary["cells"][0]
    assert summary["cells"][0]["ci_note"].startswith("bootstrap off")


def test_transfer_run_keeps_the_source_temperature(tmp_path, capsys):
    tasks, emb = _setup(tmp_path, "bootstrap: {n: 20}\n")
    out = tmp_path / "tr"
    rc, err = _run(capsys, tasks, emb, out, "bt_tr")
    assert rc == 0, err
    row = pd.read_csv(out / "runs.csv").iloc[0]
    art = bs.load_replicates(next((out / "artifacts" / "bootstrap").glob("bt_tr--*.npz")))
    assert art.test_digest == rs.test_digest(np.load(emb / "Cset" / "test_labels.npy"))
    for m in ("nll_scaled", "ece_scaled_fixed", "ece_scaled_adaptive"):  # scaled by temperature_src
        assert math.isclose(art.point[art.metrics.index(m)], row[m], abs_tol=1e-12), m
    assert np.isfinite(art.column("ece_scaled_fixed")).all()


@pytest.mark.parametrize("value,message", [
    ("{n: -1}", "bootstrap.n: must be an integer number of replicates"),
    ("{n: 5}", "bootstrap.n: 5 replicates cannot give a percentile interval"),
    ("{level: 1.0}", "bootstrap.level: must be a coverage strictly between 0 and 1"),
    ("{seed: 0, nn: 3}", "bootstrap.nn: unknown field; did you mean 'n'?"),
    ("200", "bootstrap: must be a mapping"),
])
def test_bad_task_key_values_name_the_line(tmp_path, capsys, value, message):
    tasks, emb = _setup(tmp_path, f"bootstrap: {value}\n")
    rc, err = _run(capsys, tasks, emb, tmp_path / "out")
    assert rc == 2 and f"bt_t.yaml:9: {message}" in err, err
    assert "Traceback" not in err


def test_defaults_written_out_keep_the_fingerprint(tmp_path, capsys):
    """``bootstrap: {n: 200, seed: 0, level: 0.95}`` is the default: the finished runs are reused."""
    tasks, emb = _setup(tmp_path)
    out = tmp_path / "out"
    assert _run(capsys, tasks, emb, out)[0] == 0
    (tasks / "bt_t.yaml").write_text(TASK + "bootstrap: {n: 200, seed: 0, level: 0.95}\n")
    rc, err = _run(capsys, tasks, emb, out)
    assert rc == 0, err
    assert len(json.loads((out / "summary.json").read_text())["reused_cells"]) == 2


def test_cli_bootstrap_option_sets_n(tmp_path, capsys):
    tasks, emb = _setup(tmp_path)
    out = tmp_path / "out"
    rc, err = _run(capsys, tasks, emb, out, "bt_t", "--bootstrap", "12")
    assert rc == 0, err
    assert bs.load_replicates(bs.artifact_path(out / "artifacts", "bt_t", "f1-s0")).n == 12
