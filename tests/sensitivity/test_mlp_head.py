"""The MLP probe head: registered through the hook, seeded, deterministic, better than chance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import expit
from sklearn.metrics import roc_auc_score

from prism_plugin.errors import PrismError
from prism_plugin.heads.mlp import DEFAULTS, MLPProbe
from prism_plugin.plugins import get_host


def _blobs(n=400, d=24, k=2, shift=1.5, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % k
    rng.shuffle(y)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[np.arange(n), y] += shift  # class c is shifted along feature c
    return X, y


def test_registered_as_kind_mlp_through_the_hook():
    host = get_host()
    entry = host.registry("heads").entry("mlp")
    assert entry.origin == "prism_plugin (built in)" and entry.plugin == "builtin_heads"
    head = host.head_factory("mlp")(seed=3, hidden=32)
    assert isinstance(head, MLPProbe) and head.seed == 3 and head.hidden == 32
    assert head.settings() == {"kind": "mlp", **DEFAULTS, "hidden": 32}


def test_same_seed_identical_outputs_and_global_state_restored():
    X, y = _blobs()
    torch.manual_seed(1234)
    before = torch.random.get_rng_state().clone()
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    a = MLPProbe(seed=7, hidden=64).fit(X[:300], y[:300]).evaluate(X[300:])
    b = MLPProbe(seed=7, hidden=64).fit(X[:300], y[:300]).evaluate(X[300:])
    c = MLPProbe(seed=8, hidden=64).fit(X[:300], y[:300]).evaluate(X[300:])
    assert np.array_equal(a.decision, b.decision) and np.array_equal(a.proba, b.proba)
    assert not np.array_equal(a.decision, c.decision)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == deterministic


def test_beats_chance_and_keeps_the_binary_logit_convention():
    X, y = _blobs(n=600, shift=1.5, seed=1)
    head = MLPProbe(seed=0).fit(X[:400], y[:400])
    out = head.evaluate(X[400:])
    assert out.decision.shape == (200,)                         # binary: one decision value d
    assert np.array_equal(out.proba[:, 1], expit(out.decision))  # p = [1 - σ(d), σ(d)]
    assert np.allclose(out.proba.sum(axis=1), 1.0)
    auc = roc_auc_score(y[400:], out.proba[:, 1])
    assert auc > 0.85, auc
    assert head.mode == "early_stopping" and head.converged in (True, False)
    assert 1 <= head.best_epoch <= head.epochs_run <= DEFAULTS["epochs"]


def test_multiclass_and_small_subsets_use_fixed_epochs():
    X, y = _blobs(n=450, k=3, shift=2.5, seed=2)
    head = MLPProbe(seed=0).fit(X[:300], y[:300])
    out = head.evaluate(X[300:])
    assert out.decision.shape == (150, 3)
    assert (out.proba.argmax(1) == y[300:]).mean() > 0.7
    tiny = MLPProbe(seed=0, epochs=30).fit(X[:9], y[:9])  # 1 held-out sample per class < 20: no split
    assert tiny.mode == "fixed_epochs" and tiny.epochs_run == 30 and tiny.converged is None


def test_through_the_grid_with_the_python_api():
    import prism_plugin

    X, y = _blobs(n=500, seed=3)
    rows = prism_plugin.evaluate((X[:300], y[:300]), (X[300:400], y[300:400]), (X[400:], y[400:]),
                                 fractions=[0.5, 1.0], seeds=[42], probe={"kind": "mlp", "hidden": 32})
    assert list(rows["probe"]) == ["mlp", "mlp"]
    assert (rows["auroc"] > 0.8).all()
    assert rows["temperature"].between(0.1, 10).all()
    again = prism_plugin.evaluate((X[:300], y[:300]), (X[300:400], y[300:400]), (X[400:], y[400:]),
                                  fractions=[0.5, 1.0], seeds=[42], probe={"kind": "mlp", "hidden": 32})
    assert rows["auroc"].tolist() == again["auroc"].tolist()
    assert rows["ece_fixed"].tolist() == again["ece_fixed"].tolist()


@pytest.mark.parametrize("settings, fragment", [
    ({"hidden": 0}, "probe.hidden"),
    ({"activation": "swish"}, "probe.activation"),
    ({"lr": -1}, "probe.lr"),
    ({"hiden": 10}, "did you mean 'hidden'"),
    ({"device": "tpu"}, "probe.device"),
])
def test_bad_settings_are_one_line_errors(settings, fragment):
    with pytest.raises(PrismError, match=fragment.replace("(", r"\(")):
        get_host().head_factory("mlp")(seed=0, **settings)


def test_grid_row_equals_a_direct_fit_with_the_runs_seed():
    import prism_plugin
    from prism_plugin import metrics as M
    from prism_plugin.protocol.sampling import stratified_subset

    X, y = _blobs(n=500, seed=4)
    row = prism_plugin.evaluate((X[:300], y[:300]), (X[300:400], y[300:400]), (X[400:], y[400:]), fractions=[0.5],
                                seeds=[123], probe={"kind": "mlp", "hidden": 16}).iloc[0]
    idx = stratified_subset(y[:300], 0.5, 123).indices
    out = MLPProbe(seed=123, hidden=16).fit(X[:300][idx], y[:300][idx]).evaluate(X[400:])
    P = np.asarray(out.proba, dtype=np.float64)
    assert row["auroc"] == M.auroc(y[400:], P)
    assert row["ece_fixed"] == M.ece(y[400:], P)
