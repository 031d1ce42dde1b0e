"""Fast mode (``probe.backend: fast``): the same objective as exact mode, solved for speed, with its
agreement stated per run; exact mode unchanged."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy.special import expit, log_softmax
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from prism_plugin.errors import PrismError
from prism_plugin.plugins import get_host
from prism_plugin.protocol.grid import GridSpec, grid_keys, run_grid
from prism_plugin.protocol.inputs import SplitArrays
from prism_plugin.heads import logistic
from prism_plugin.heads.fast_record import fast_mode_note, fast_mode_record
from prism_plugin.heads.logistic import FAST_COLUMNS, FAST_MEASURED_AGREEMENT, FAST_MIN_ROWS, FAST_TOL, LogisticProbe
from prism_plugin.protocol.sampling import stratified_subset

from ._data import embeddings

DIM = 32
N = 2 * FAST_MIN_ROWS + 600  # fraction 0.5 and 1.0 take the preconditioned solver, 0.05 scikit-learn
#: metric plugins these tests do not read (they dominate a small grid's time)
LIGHT = ("bootstrap", "classwise", "reliability", "temperature_transfer")


def grad_max(X, y, coef, intercept, C=1.0):
    """max |grad| of scikit-learn's objective scaled by 1 / (C n), in float64 NumPy (independent of torch)."""
    X = X.astype(np.float64)
    n = len(y)
    z = X @ coef.T + intercept
    if coef.shape[0] == 1:
        G = (expit(z[:, 0]) - y)[:, None]
    else:
        G = np.exp(log_softmax(z, axis=1))
        G[np.arange(n), y] -= 1
    grad = np.concatenate([G.T @ X / n + coef / (C * n), G.sum(0)[:, None] / n], axis=1)
    return float(np.abs(grad).max())


def tight(X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LogisticRegression(C=1.0, tol=1e-10, max_iter=100_000).fit(X.astype(np.float64), y)


@contextlib.contextmanager
def fake_timings(exact_s: float, trial_s: float):
    """Fast mode's clock (``logistic._clock``) replaced by a fake one that every exact-mode fit advances by
    ``exact_s`` and every preconditioned fit (building the preconditioner included) by ``trial_s``: the
    decision is then deterministic, whatever the machine's load (no wall clock)."""
    clock = [0.0]
    real_clock, real_fit, real_pc = logistic._clock, LogisticProbe.fit, LogisticProbe._fit_preconditioned

    def fit(self, X, y):
        if self.backend == "sklearn":
            clock[0] += exact_s
        return real_fit(self, X, y)

    def fit_pc(self, *args, **kwargs):
        clock[0] += trial_s
        return real_pc(self, *args, **kwargs)

    logistic._clock, LogisticProbe.fit, LogisticProbe._fit_preconditioned = (lambda: clock[0]), fit, fit_pc
    try:
        yield
    finally:
        logistic._clock, LogisticProbe.fit, LogisticProbe._fit_preconditioned = real_clock, real_fit, real_pc


def grid_pair(k: int, exact_s: float = 10.0, trial_s: float = 1.0):
    """One small grid (fractions 0.05 / 0.5 / 1.0, two seeds) in exact and in fast mode, fast mode's trial
    timed by :func:`fake_timings` (by default it wins: 1 s against 10 s)."""
    tr, va, te = (SplitArrays(*embeddings(n, k, dim=DIM, seed=s)) for n, s in ((N, 21), (800, 22), (800, 23)))
    out = {}
    for backend in ("sklearn", "fast"):
        spec = GridSpec(fractions=(0.05, 0.5, 1.0), seeds=(42, 123),
                        probe={"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": backend})
        ident = {"task": "t", "adapter": "m", "model": "m", "dataset": "d"}
        with fake_timings(exact_s, trial_s):
            out[backend] = run_grid(tr, va, te, k, spec, get_host(LIGHT), ident)
    return k, tr, va, te, spec, out


@pytest.fixture(scope="module", params=[2, 4], ids=["binary", "multiclass"])
def grids(request):
    return grid_pair(request.param)


def test_fast_agrees_with_exact_and_records_its_solver(grids):
    k, tr, va, te, spec, out = grids
    for key in grid_keys(spec):
        exact, fast = out["sklearn"][key], out["fast"][key]
        assert fast["probe_backend"] == "fast" and set(FAST_COLUMNS) <= set(fast)
        assert not set(FAST_COLUMNS) & set(exact)  # exact-mode rows carry no new columns
        if fast["probe_solver"] == "sklearn-lbfgs":  # exactly what exact mode does
            for col in ("auroc", "ece_fixed", "ece_scaled_fixed", "temperature", "nll"):
                assert fast[col] == exact[col], col
            continue
        assert fast["probe_solver"] == "lbfgs-preconditioned"
        assert 0 < fast["probe_iter"] < 1000 and fast["probe_grad_max"] <= FAST_TOL
        for col, tol in FAST_MEASURED_AGREEMENT.items():  # the agreement the note states
            assert fast[col] == pytest.approx(exact[col], abs=tol), col
        if k == 2:
            assert fast["probe_decision_bound"] > 0  # finite or inf, never NaN for binary
    assert fast_mode_note(list(out["sklearn"].values())) is None
    note = fast_mode_note(list(out["fast"].values()))
    assert note.startswith("numbers from the fast solver") and "3 of 6 runs" in note and "of exact" in note
    assert "chosen by timing: trial f0.5-s123 1 s (build 0 s) vs exact 10 s on" in note
    rows = {key.id: out["fast"][key] for key in grid_keys(spec)}
    # small fits and the first fit of >= FAST_MIN_ROWS rows (it measures lbfgs's cost, timed) run scikit-learn;
    # the same fraction's next seed is the timed trial; it won, so the rest is the preconditioned solver's
    assert [rows[i]["probe_solver"] for i in ("f0.05-s42", "f0.05-s123", "f0.5-s42")] == ["sklearn-lbfgs"] * 3
    assert [rows[i]["probe_choice"] for i in ("f0.05-s42", "f0.5-s42", "f0.5-s123", "f1-s42")] == [
        "small", "filter", "trial-won", "measured"]
    assert rows["f0.5-s123"]["probe_solver"] == rows["f1-s42"]["probe_solver"] == "lbfgs-preconditioned"
    assert (rows["f0.5-s123"]["probe_exact_seconds"], rows["f0.5-s123"]["probe_trial_seconds"]) == (10.0, 1.0)
    record = fast_mode_record(list(out["fast"].values()))
    assert [(d["decision"], d["trial_run"], d["exact_run"], d["rows"], d["exact_seconds"], d["trial_seconds"])
            for d in record["decisions"]] == [("preconditioned", "f0.5-s123", "f0.5-s42", rows["f0.5-s123"]["n_train"],
                                               10.0, 1.0)]
    assert fast_mode_record(list(out["sklearn"].values())) is None
    # warm starts: from the same seed's previous fraction
    assert rows["f0.5-s123"]["probe_init"] == "warm:f0.05-s123" and rows["f1-s42"]["probe_init"] == "warm:f0.5-s42"


def test_fast_fit_meets_its_gradient_tolerance_and_its_certificate():
    """Checked against an independent float64 computation and scikit-learn's tight optimum."""
    X, y = embeddings(FAST_MIN_ROWS + 200, 2, dim=DIM, seed=31)
    Xt, yt = embeddings(1000, 2, dim=DIM, seed=32)
    ref = tight(X, y)
    d_star = Xt.astype(np.float64) @ ref.coef_[0] + ref.intercept_[0]
    for tol in (FAST_TOL, 1e-9):
        probe = LogisticProbe(backend="fast", tol=tol)
        probe.prepare_grid({"decision": "preconditioned"}, None, None)  # as after a trial that won
        probe.fit(X, y)
        assert probe.solver_stats["probe_solver"] == "lbfgs-preconditioned"
        fit = probe.torch_fit
        if tol == FAST_TOL:  # float32 products resolve the gradient to ~1e-8: check the loose tolerance
            assert grad_max(X, y, fit.coef, fit.intercept) <= 1.01 * tol
        assert probe.solver_stats["probe_grad_max"] <= tol
        d = probe.evaluate(Xt).decision
        bound = probe.solver_stats["probe_decision_bound"]
        if np.isfinite(bound):  # certified: no decision value further from the optimum than the bound
            assert np.abs(d - d_star).max() <= bound + 1e-5
    assert np.isfinite(bound) and bound < 0.05  # at a tight tolerance the certificate is informative
    assert roc_auc_score(yt, d) == pytest.approx(roc_auc_score(yt, d_star), abs=1e-6)


def test_small_fits_and_exact_mode_are_bit_identical_to_sklearn():
    X, y = embeddings(FAST_MIN_ROWS + 1, 3, dim=DIM, seed=41)
    Xt, _ = embeddings(300, 3, dim=DIM, seed=42)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = LogisticRegression(C=1.0, max_iter=1000, random_state=0).fit(X, y).decision_function(Xt)
    for backend in ("sklearn", "fast"):  # a fit outside a grid, fast mode on the CPU: scikit-learn's
        probe = LogisticProbe(backend=backend).fit(X, y)
        np.testing.assert_array_equal(probe.evaluate(Xt).decision, ref.astype(np.float64))
    assert LogisticProbe(backend="sklearn").fit(X, y).solver_stats is None
    assert probe.solver_stats["probe_solver"] == "sklearn-lbfgs"


def test_bad_backend_is_one_line_naming_the_field_and_choices():
    with pytest.raises(PrismError) as err:
        LogisticProbe(backend="quick")
    msg = str(err.value)
    assert "\n" not in msg and "probe.backend" in msg and "'fast'" in msg and "'quick'" in msg


def test_subset_sizes_used_above_match_the_grid():
    """The fixture's fractions straddle FAST_MIN_ROWS as the first test assumes."""
    y = embeddings(N, 2, dim=4, seed=21)[1]
    assert len(stratified_subset(y, 0.05, 42).indices) < FAST_MIN_ROWS <= len(stratified_subset(y, 0.5, 42).indices)


def test_fast_runs_are_flagged_and_accepted_by_every_entry_point(grids, tmp_path):
    """Runs the fast solver fitted carry a quality warning (summary.json `qualified`, console); the API
    and task files accept the backend; runs.csv keeps the solver columns at the end."""
    import pandas as pd

    from prism_plugin import evaluate, quality
    from prism_plugin.results import TRAILING_COLUMNS
    from prism_plugin.tasks.index import TaskIndex

    k, tr, va, te, spec, out = grids
    runs = pd.DataFrame(list(out["fast"].values()))
    flags = [f for f in quality.run_flags(runs) if f.flag == "fast_solver"]
    assert len(flags) == 1 and flags[0].level == "warning" and flags[0].count == 3 and quality.qualified(flags)
    assert "chosen by timing" in flags[0].message
    assert not [f for f in quality.run_flags(pd.DataFrame(list(out["sklearn"].values()))) if f.flag == "fast_solver"]
    assert set(FAST_COLUMNS) <= set(TRAILING_COLUMNS)
    rows = evaluate((tr.X[:300], tr.y[:300]), (va.X, va.y), (te.X, te.y), fractions=(1.0,), seeds=(42,),
                    probe={"kind": "logistic", "backend": "fast"})
    assert rows["probe_backend"].tolist() == ["fast"] and set(FAST_COLUMNS) <= set(rows.columns)
    task = tmp_path / "t.yaml"
    task.write_text("task: t\ndataset: D\nclass_names: [a, b]\nsource: {type: precomputed}\n"
                    "splits: {train: train, val: val, test: test}\nprobe: {kind: logistic, backend: fast}\n")
    assert TaskIndex([tmp_path]).load(str(task), []).probe["backend"] == "fast"
    task.write_text(task.read_text().replace("backend: fast", "backend: quick"))
    with pytest.raises(PrismError, match=r"t\.yaml:6: probe\.backend: must be one of sklearn, torch, fast, got 'quick'"):
        TaskIndex([tmp_path]).load(str(task), [])


@pytest.mark.parametrize("exact_s, trial_s", [(1.0, 10.0), (1.05, 1.0)], ids=["trial-slower", "trial-not-clearly-faster"])
def test_a_trial_that_does_not_win_hands_every_later_fit_to_exact_mode(exact_s, trial_s):
    """The decision rests on the timing: a trial slower than the exact fit of the same size, or faster by less
    than FAST_TRIAL_MARGIN, leaves every later fit exactly exact mode's (same numbers); only the trial's own
    run is the preconditioned solver's (within the stated agreement)."""
    k, tr, va, te, spec, out = grid_pair(4, exact_s=exact_s, trial_s=trial_s)
    rows = {key.id: out["fast"][key] for key in grid_keys(spec)}
    exact = {key.id: out["sklearn"][key] for key in grid_keys(spec)}
    assert rows["f0.5-s123"]["probe_choice"] == "trial-lost"
    assert rows["f0.5-s123"]["probe_solver"] == "lbfgs-preconditioned"
    for rid in ("f0.05-s42", "f0.05-s123", "f0.5-s42", "f1-s42", "f1-s123"):
        assert rows[rid]["probe_solver"] == "sklearn-lbfgs", rid
        for col in ("auroc", "ece_fixed", "ece_scaled_fixed", "temperature", "nll"):
            assert rows[rid][col] == exact[rid][col], (rid, col)
    assert rows["f1-s42"]["probe_choice"] == "measured"
    for col, tol in FAST_MEASURED_AGREEMENT.items():
        assert rows["f0.5-s123"][col] == pytest.approx(exact["f0.5-s123"][col], abs=tol), col
    (decision,) = fast_mode_record(list(out["fast"].values()))["decisions"]
    assert decision["decision"] == "exact" and decision["exact_seconds"] == pytest.approx(exact_s)
    assert decision["trial_seconds"] == pytest.approx(trial_s) and "every later fit of the grid is exact mode's" in decision["reason"]
    assert "exact after it" in fast_mode_note(list(out["fast"].values()))


def test_no_trial_without_a_timed_exact_fit_of_the_same_size():
    """One seed per fraction: no exact fit of a trial's size comes before it, so every fit is exact mode's
    (each timed as a possible pair) and the record says no trial was made."""
    tr, va, te = (SplitArrays(*embeddings(n, 2, dim=DIM, seed=s)) for n, s in ((N, 21), (400, 22), (400, 23)))
    spec = GridSpec(fractions=(0.5, 1.0), seeds=(42,), probe={"kind": "logistic", "backend": "fast"})
    with fake_timings(10.0, 1.0):
        rows = list(run_grid(tr, va, te, 2, spec, get_host(LIGHT), {"task": "t", "adapter": "m", "model": "m",
                                                                    "dataset": "d"}).values())
    assert [r["probe_solver"] for r in rows] == ["sklearn-lbfgs"] * 2
    record = fast_mode_record(rows)
    assert record["decisions"] == [] and record["reason"].startswith("no timed trial")
    assert fast_mode_note(rows).startswith("probe.backend fast: all 2 runs fitted by scikit-learn lbfgs")


def test_prism_run_fast_records_the_decision_in_summary_json(tmp_path, capsys):
    """A real `prism-run --probe-backend fast` run (precomputed features, in this process so the clock can be
    faked): summary.json's ``fast_mode`` holds the decision, both timings, the sizes and the reason, the
    console prints the note, and the runs agree with exact mode within the stated tolerance."""
    import pandas as pd

    from prism_plugin import cli
    from tests.conftest import write_precomputed

    write_precomputed(tmp_path / "emb" / "fastset", {"train": 2400, "val": 300, "test": 300}, dim=16, n_classes=3)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "ft.yaml").write_text("task: ft\ndataset: fastset\nclass_names: [a, b, c]\nsource: {type: precomputed}\n"
                                   "splits: {train: train, val: val, test: test}\nlabel_fractions: [0.05, 0.5, 1.0]\n"
                                   "seeds: [42, 123]\n")
    common = ["--include-path", str(tasks), "--task", "ft", "--model", "precomputed", "--model-args",
              f"root={tmp_path / 'emb'}", "--no-report", "--cache-dir", str(tmp_path / "cache")]
    with fake_timings(10.0, 2.0):
        assert cli.main([*common, "--probe-backend", "fast", "--output", str(tmp_path / "fast")]) == 0
    out = capsys.readouterr()
    assert cli.main([*common, "--output", str(tmp_path / "exact")]) == 0
    capsys.readouterr()
    (summary_path,) = (tmp_path / "fast").rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    (decision,) = summary["fast_mode"]["decisions"]
    assert decision["decision"] == "preconditioned" and decision["trial_run"] == "f0.5-s123"
    assert decision["exact_run"] == "f0.5-s42" and decision["rows"] == 1200
    assert (decision["exact_seconds"], decision["trial_seconds"], decision["exact_over_solve"]) == (10.0, 2.0, 5.0)
    assert decision["build_seconds"] == 0.0 and "its solve was faster by at least 1.1x" in decision["reason"]
    assert summary["fast_mode"]["runs_by_solver"] == {"sklearn-lbfgs": 3, "lbfgs-preconditioned": 3}
    assert "chosen by timing: trial f0.5-s123 2 s (build 0 s) vs exact 10 s on 1200 rows" in out.out + out.err
    assert "fast_mode" not in json.loads(next((tmp_path / "exact").rglob("summary.json")).read_text())
    fast = pd.read_csv(summary_path.parent / "runs.csv")
    exact = pd.read_csv(next((tmp_path / "exact").rglob("runs.csv")))
    assert list(fast["probe_choice"]) == ["small", "small", "filter", "trial-won", "measured", "measured"]
    for col, tol in FAST_MEASURED_AGREEMENT.items():
        assert np.abs(fast[col].to_numpy() - exact[col].to_numpy()).max() <= tol, col


def test_importing_the_logistic_module_imports_neither_sklearn_nor_scipy():
    code = ("import sys, prism_plugin.heads.logistic as m; m.SETTINGS, m.DEFAULT_PROBE, m.BACKENDS, m.FAST_COLUMNS; "
            "print(sorted(x for x in ('sklearn', 'scipy', 'torch') if x in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
