"""The compatibility layer against the PRISM package's own code (``prism-bench`` 0.3.0 from the package index,
installed by the ``[test]`` extra): every column ``==``, bit for bit.

* ``binary_temperature="natural"`` (the default) against the package's ``PRISMEvaluator.evaluate()`` as released:
  binary logits ``[-d/2, d/2]``, T searched in [0.1, 10] on the probe's own scale.
* ``binary_temperature="doubled"`` against the same ``evaluate()`` with the binary expansion of the package's
  earlier public release (``_logits`` returned ``[-d, d]``, the results_v2 scale); every other line of that
  evaluator and of ``prism_bench.metrics`` is the same in both releases, so this is that release's code path.
  Multiclass logits pass through unchanged, so those cases run the released package untouched in both modes.
* the standalone functions (``compute_ece``, ``compute_brier``, ``compute_auroc``, ``temperature_scale``,
  ``apply_temperature``, ``compute_ood_stability``, ``compute_cri``) against the package's.

The inputs are C-ordered float32 embeddings (what ``np.load`` and ``tensor.numpy()`` give). The package passes the
caller's array to scikit-learn as it is, so its own numbers change with the memory layout of the same values (a
Fortran-ordered copy: checked below); prism-plugin hands the probe C-ordered rows whatever the layout
(tests/api/test_entry_points_agree.py), i.e. the package's C-order numbers.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

prism_bench = pytest.importorskip("prism_bench", reason="needs the PRISM package (prism-bench==0.3.0, in the "
                                                        "[test] extra: pip install '.[test]')")
import prism_bench.evaluator as package_evaluator  # noqa: E402
import prism_bench.metrics as package_metrics  # noqa: E402

from prism_plugin import compat  # noqa: E402
from prism_plugin.compat import EVALUATE_COLUMNS, PRISMEvaluator  # noqa: E402

GRID = dict(label_fractions=[0.01, 0.1, 1.0], seeds=[42, 123])
#: case -> (K, class separation, dim): a hard binary task (T at the search bound at some fractions), an easy one
#: (near-separable), and a multiclass one with a class forced at 1 %
CASES = {"binary": (2, 0.3, 32), "near_separable": (2, 3.0, 32), "multiclass": (4, 0.6, 24)}


def _public_release_logits(clf, X):
    """The package's earlier public release: binary decision values d -> [-d, d] (T = 2 is the identity)."""
    d = clf.decision_function(X)
    if d.ndim == 1:
        d = d.reshape(-1, 1)
        d = np.hstack([-d, d])
    return d


def _splits(case: str, sizes=(420, 150, 300)):
    k, sep, dim = CASES[case]
    rng = np.random.default_rng(dim + k)
    out = []
    for n in sizes:
        y = np.arange(n) % k
        X = rng.normal(size=(n, dim)) + sep * np.eye(k, dim)[y]
        out.append(((X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32), y))
    return out


def _package(monkeypatch, mode: str, train, val, test, X_test=None) -> pd.DataFrame:
    if mode == "doubled":
        monkeypatch.setattr(package_evaluator, "_logits", _public_release_logits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = prism_bench.PRISMEvaluator().evaluate(train[0], train[1], test[0] if X_test is None else X_test,
                                                    test[1], "pcam", "MyFM", val[0], val[1], **GRID)
    monkeypatch.undo()
    return out


def _ours(mode: str, train, val, test) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PRISMEvaluator().evaluate(train[0], train[1], test[0], test[1], "pcam", "MyFM", val[0], val[1],
                                         binary_temperature=mode, **GRID)


def _differences(ref: pd.DataFrame, ours: pd.DataFrame) -> dict[str, float]:
    """Column -> largest |difference| where ``==`` fails (NaN == NaN counts as equal); {} = bit for bit."""
    assert list(ours.columns) == EVALUATE_COLUMNS and set(ref.columns) == set(EVALUATE_COLUMNS)
    assert len(ref) == len(ours)
    out = {}
    for c in EVALUATE_COLUMNS:
        a, b = ref[c].tolist(), ours[c].tolist()
        bad = [(x, y) for x, y in zip(a, b) if not (x == y or (isinstance(x, float) and isinstance(y, float)
                                                              and math.isnan(x) and math.isnan(y)))]
        if bad:
            out[c] = max(abs(float(x) - float(y)) if not isinstance(x, str) else math.inf for x, y in bad)
    return out


@pytest.mark.parametrize("mode", ["natural", "doubled"])
@pytest.mark.parametrize("case", list(CASES))
def test_evaluate_equals_the_package_on_every_column(monkeypatch, case, mode):
    train, val, test = _splits(case)
    ref = _package(monkeypatch, mode, train, val, test)
    ours = _ours(mode, train, val, test)
    assert _differences(ref, ours) == {}
    if case == "binary":  # the data reach what the test is about: a T at the search bound, in both modes
        assert ((ref["temperature"] > 9.99) | (ref["temperature"] < 0.101)).any(), ref["temperature"].tolist()


def test_the_comparison_can_fail(monkeypatch):
    """What the previous arithmetic gave is told apart: scaled probabilities in float32 (the old float32 path) and a
    natural-scale T that was the doubled fit halved (a search box [0.05, 5])."""
    from prism_plugin.metrics.core import ece

    train, val, test = _splits("binary")
    ref = _package(monkeypatch, "natural", train, val, test)
    doubled = _ours("doubled", train, val, test)
    halved = doubled["temperature"] / 2
    assert (halved != ref["temperature"]).any()
    # one run, rescaled in float32 as before
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=1000, random_state=42).fit(train[0], train[1])
    d = clf.decision_function(test[0])
    T = float(doubled["temperature"].iloc[-1])
    z32 = np.column_stack([-d, d]) / np.float32(T)
    z32 = z32 - z32.max(axis=1, keepdims=True)
    s32 = np.exp(z32) / np.exp(z32).sum(axis=1, keepdims=True)
    assert s32.dtype == np.float32
    old = ece(test[1], s32.astype(np.float64), 15, "fixed")
    assert old != doubled["ece_scaled_fixed"].iloc[-1]


def test_the_package_itself_depends_on_the_memory_layout(monkeypatch):
    train, val, test = _splits("binary")
    c_order = _package(monkeypatch, "natural", train, val, test)
    fortran = _package(monkeypatch, "natural", train, val, test, X_test=np.asfortranarray(test[0]))
    assert _differences(c_order, fortran) != {}  # the package: layout-dependent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = PRISMEvaluator().evaluate(train[0], train[1], np.asfortranarray(test[0]), test[1], "pcam", "MyFM",
                                         val[0], val[1], **GRID)
    assert _differences(c_order, ours) == {}  # prism-plugin: the package's C-order numbers, whatever the layout


def test_standalone_functions_equal_the_package():
    rng = np.random.default_rng(11)
    y = rng.integers(0, 2, 400)
    d = (rng.normal(size=400) * 1.5 + y).astype(np.float32)
    p32 = (1 / (1 + np.exp(-d))).astype(np.float32)
    for probs in (p32, p32.astype(np.float64), np.column_stack([1 - p32, p32])):
        for binning in ("fixed", "adaptive"):
            assert compat.compute_ece(probs, y, 15, binning) == package_metrics.compute_ece(probs, y, 15, binning)
    assert compat.compute_brier(y, p32) == package_metrics.compute_brier(y, p32)
    assert compat.compute_auroc(y, p32) == package_metrics.compute_auroc(y, p32)
    yk = rng.integers(0, 4, 400)
    Z = rng.normal(size=(400, 4)) * 2 + 1.5 * np.eye(4)[yk]
    P = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
    assert compat.compute_ece(P, yk, 10, "adaptive") == package_metrics.compute_ece(P, yk, 10, "adaptive")
    assert compat.compute_auroc(yk, P) == package_metrics.compute_auroc(yk, P, multi_class=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a T at a bound is warned about by prism-plugin only
        for logits, labels in ((d, y), (Z, yk), (d * 0.05, y), (d * 40, y)):
            t = compat.temperature_scale(logits, labels)
            assert t == package_metrics.temperature_scale(logits, labels)
            assert np.array_equal(compat.apply_temperature(logits, t), package_metrics.apply_temperature(logits, t))
    pairs, ids = {("pcam", "mhist"): 0.62, ("mhist", "pcam"): 0.9}, {"pcam": 0.98, "mhist": 0.85}
    assert compat.compute_ood_stability(pairs, ids) == package_metrics.compute_ood_stability(pairs, ids)
    for rule in ("multiplicative", "arithmetic", "geometric", "worst_axis"):
        assert compat.compute_cri(0.93, 0.04, 0.81, rule) == package_metrics.compute_cri(0.93, 0.04, 0.81, rule)
