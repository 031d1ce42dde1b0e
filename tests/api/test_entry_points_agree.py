"""One computation whatever the entry point (issue 26).

The same float32 embeddings go through

* ``prism-run`` in a real subprocess, reading them from a precomputed feature folder (``source: {type:
  precomputed}``, memory-mapped ``.npy`` files, as the embedding cache is read);
* ``prism_plugin.evaluate()`` on the arrays in memory, in several layouts and dtypes (C-ordered float32, a
  Fortran-ordered copy, a strided view, float64 copies of the same values);
* ``PRISMEvaluator.evaluate()`` (the PRISM package's API), on the results_v2 scale (``binary_temperature=
  "doubled"``, the grid's ``[-d, d]`` logits) and on prism-plugin's float64 metric arithmetic;

and every numeric column of runs.csv (its shortest round-trip text, read back exactly) equals the in-memory value
with ``==``: no tolerance, the bootstrap intervals included. The data kinds: binary, multiclass (K = 4) and a near-separable binary problem
(AUROC and F1 of 1). The reference's float32 path
(``probability_dtype: float32``, PRISMEvaluator's default) is checked the same way against a ``prism-run --set
probability_dtype=float32``.

The layouts are a real variant: scikit-learn's binary ``decision_function`` on a Fortran-ordered copy of the same
values rounds differently (checked below), which moved Brier, ECE, NLL and T by up to ~1e-7 before the array
validator (:func:`prism_plugin.protocol.array_checks.as_features`) handed every entry point C-ordered rows.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import prism_plugin
from prism_plugin.compat import PRISMEvaluator
from tests.conftest import prism_run

FRACTIONS, SEEDS = [0.1, 1.0], [42, 7]
SIZES = {"train": 160, "val": 60, "test": 100}
#: kind -> (K, class separation)
KINDS = {"binary": (2, 0.6), "multiclass": (4, 0.8), "near_separable": (2, 6.0)}
#: identity columns: the CLI names the task and the adapter, the API the dataset and the model
IDENTITY = {"task", "adapter", "model", "dataset"}
LAYOUTS = {
    "float32": lambda X: X,
    "fortran": np.asfortranarray,
    "strided": lambda X: np.repeat(X, 2, axis=1)[:, ::2],
    "float64": lambda X: X.astype(np.float64),
    "float64_fortran": lambda X: np.asfortranarray(X.astype(np.float64)),
}


def _arrays(kind: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    k, sep = KINDS[kind]
    rng = np.random.default_rng(len(kind) + k)
    out = {}
    for split, n in SIZES.items():
        y = np.arange(n) % k
        X = rng.normal(size=(n, 24)) + sep * np.eye(k, 24)[y]
        out[split] = ((X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32), y)
    return out


def _task(kind: str) -> str:
    k, _ = KINDS[kind]
    return (f"task: agree_{kind}\ndataset: Agree\nclass_names: {[f'c{i}' for i in range(k)]}\n"
            "source: {type: precomputed}\nsplits: {train: train, val: val, test: test}\n"
            f"label_fractions: {FRACTIONS}\nseeds: {SEEDS}\n")


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """kind -> (arrays, runs.csv of prism-run on them); plus ("binary", "float32") with probability_dtype=float32."""
    root = tmp_path_factory.mktemp("agree")
    (root / "tasks").mkdir()
    out = {}
    for kind in KINDS:
        arrays = _arrays(kind)
        folder = root / "emb" / "FM" / "Agree"
        folder.mkdir(parents=True, exist_ok=True)
        for split, (X, y) in arrays.items():
            np.save(folder / f"{split}_features.npy", X)
            np.save(folder / f"{split}_labels.npy", y)
        (root / "tasks" / f"agree_{kind}.yaml").write_text(_task(kind))
        variants = {kind: ()} if kind != "binary" else {kind: (), (kind, "float32"): ("--set",
                                                                                       "probability_dtype=float32")}
        for key, extra in variants.items():
            dest = root / "out" / (key if isinstance(key, str) else "-".join(key))
            prism_run("--task", f"agree_{kind}", "--include-path", str(root / "tasks"), "--model", "precomputed",
                      "--model-args", f"root={root / 'emb' / 'FM'}", *extra, "--output", str(dest), "--quiet",
                      "--no-report", check=True)
            out[key] = (arrays, pd.read_csv(dest / "runs.csv"))
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return a == b


def _assert_columns_equal(runs: pd.DataFrame, table: pd.DataFrame, what: str, columns=None) -> int:
    """Every numeric column of ``runs`` that ``table`` has (or ``columns``): equal with ``==``; the count."""
    assert len(table) == len(runs), what
    checked = 0
    for c in columns or runs.columns:
        if c in IDENTITY or c not in table.columns or not pd.api.types.is_numeric_dtype(runs[c]):
            continue
        for i, (a, b) in enumerate(zip(runs[c].tolist(), table[c].tolist())):
            a = float(a) if isinstance(a, (int, float, np.number)) and not isinstance(a, bool) else a
            b = float(b) if isinstance(b, (int, float, np.number)) and not isinstance(b, bool) else b
            assert _same(a, b), f"{what}: column {c}, run {i}: runs.csv {a!r} != {b!r}"
        checked += 1
    return checked


def _evaluate(arrays, layout: str, **kw) -> pd.DataFrame:
    f = LAYOUTS[layout]
    splits = {s: (f(X), y) for s, (X, y) in arrays.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return prism_plugin.evaluate(splits["train"], splits["val"], splits["test"], fractions=FRACTIONS,
                                     seeds=SEEDS, model="FM", dataset="Agree", **kw)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_evaluate_in_memory_equals_prism_run_on_the_same_arrays(cli_runs, kind, layout):
    arrays, runs = cli_runs[kind]
    api = _evaluate(arrays, layout)
    checked = _assert_columns_equal(runs, api, f"{kind}/{layout}")
    # the columns the issue named are among them
    assert {"brier", "ece_fixed", "ece_adaptive", "nll", "temperature", "ece_scaled_fixed", "auroc"} <= set(
        c for c in runs.columns if c in api.columns) and checked >= 20
    if kind == "near_separable":  # the data kind is what it says: the classes separate perfectly
        assert (runs["auroc"] == 1.0).all() and (runs["f1_macro"] == 1.0).all()


@pytest.mark.parametrize("kind", list(KINDS))
def test_prism_evaluator_is_in_the_same_family(cli_runs, kind):
    """PRISMEvaluator on the results_v2 scale with prism-plugin's float64 arithmetic: prism-run's numbers."""
    arrays, runs = cli_runs[kind]
    (Xtr, ytr), (Xva, yva), (Xte, yte) = arrays["train"], arrays["val"], arrays["test"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = PRISMEvaluator().evaluate(np.asfortranarray(Xtr), ytr, Xte, yte, "Agree", "FM", Xva, yva,
                                        label_fractions=FRACTIONS, seeds=SEEDS, binary_temperature="doubled",
                                        probability_dtype="float64")
    assert _assert_columns_equal(runs, res, f"compat/{kind}") == 15  # every README column but model, dataset


def test_the_reference_float32_path_is_one_computation_too(cli_runs):
    arrays, runs = cli_runs[("binary", "float32")]
    _, default = cli_runs["binary"]
    api = _evaluate(arrays, "fortran", probability_dtype="float32")
    _assert_columns_equal(runs, api, "float32 path")
    (Xtr, ytr), (Xva, yva), (Xte, yte) = arrays["train"], arrays["val"], arrays["test"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = PRISMEvaluator().evaluate(Xtr.astype(np.float64), ytr, Xte, yte, "Agree", "FM", Xva, yva,
                                        label_fractions=FRACTIONS, seeds=SEEDS, binary_temperature="doubled")
    _assert_columns_equal(runs, res, "compat float32 path")
    # the path changes only the raw-probability columns, and does change them (the test can fail)
    raw = ["brier", "ece_fixed", "ece_adaptive"]
    assert any(not (runs[c] == default[c]).all() for c in raw)
    same = [c for c in runs.columns if c not in raw and c not in IDENTITY and pd.api.types.is_numeric_dtype(runs[c])]
    _assert_columns_equal(default, runs, "float32 vs float64 path", columns=same)


def test_the_layouts_are_a_real_variant():
    """scikit-learn's own binary decision values depend on the layout of X: the variants above test something."""
    from sklearn.linear_model import LogisticRegression

    (Xtr, ytr), _, (Xte, _) = _arrays("binary").values()
    clf = LogisticRegression(max_iter=1000).fit(Xtr, ytr)
    c_order = clf.decision_function(Xte)
    assert c_order.dtype == np.float32
    others = [clf.decision_function(LAYOUTS[name](Xte).astype(np.float32, copy=False)) for name in ("fortran",
                                                                                                   "strided")]
    assert any(not np.array_equal(c_order, o) for o in others)
