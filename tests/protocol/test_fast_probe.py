"""Fast mode (``probe.backend: fast``): the same objective as exact mode, solved for speed, with its
agreement stated per run; exact mode unchanged."""

from __future__ import annotations

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
from prism_plugin.heads.logistic import FAST_COLUMNS, FAST_MIN_ROWS, FAST_TOL, LogisticProbe, fast_mode_note
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


@pytest.fixture(scope="module", params=[2, 4], ids=["binary", "multiclass"])
def grids(request):
    """One small grid (fractions 0.05 / 0.5 / 1.0, two seeds) in exact and in fast mode."""
    k = request.param
    tr, va, te = (SplitArrays(*embeddings(n, k, dim=DIM, seed=s)) for n, s in ((N, 21), (800, 22), (800, 23)))
    out = {}
    for backend in ("sklearn", "fast"):
        spec = GridSpec(fractions=(0.05, 0.5, 1.0), seeds=(42, 123),
                        probe={"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": backend})
        ident = {"task": "t", "adapter": "m", "model": "m", "dataset": "d"}
        out[backend] = run_grid(tr, va, te, k, spec, get_host(LIGHT), ident)
    return k, tr, va, te, spec, out


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
        assert fast["auroc"] == pytest.approx(exact["auroc"], abs=2e-3)
        assert fast["ece_fixed"] == pytest.approx(exact["ece_fixed"], abs=5e-3)
        assert fast["ece_scaled_fixed"] == pytest.approx(exact["ece_scaled_fixed"], abs=5e-3)
        assert fast["temperature"] == pytest.approx(exact["temperature"], rel=2e-2)
        if k == 2:
            assert fast["probe_decision_bound"] > 0  # finite or inf, never NaN for binary
    assert fast_mode_note(list(out["sklearn"].values())) is None
    note = fast_mode_note(list(out["fast"].values()))
    assert note.startswith("numbers from the fast solver") and "3 of 6 runs" in note and "of exact" in note
    rows = {key.id: out["fast"][key] for key in grid_keys(spec)}
    # small fits and the first fit of >= FAST_MIN_ROWS rows (it measures lbfgs's cost) run scikit-learn;
    # lbfgs needs enough iterations here that the preconditioned solver repays itself on the rest
    assert [rows[i]["probe_solver"] for i in ("f0.05-s42", "f0.05-s123", "f0.5-s42")] == ["sklearn-lbfgs"] * 3
    assert rows["f0.5-s123"]["probe_solver"] == rows["f1-s42"]["probe_solver"] == "lbfgs-preconditioned"
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
        probe.prepare_grid({"observed": (len(y), 100)}, None, None)  # lbfgs as costly as 100 iterations
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
