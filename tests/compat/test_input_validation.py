"""Invalid input to any public entry point of prism_plugin.compat (and prism_plugin.evaluate) is one line, a
ValueError naming the argument, never a plausible number; degenerate but valid input is warned about.

Every entry point goes through prism_plugin.protocol.array_checks, so the cases are parametrized over the entry
points: NaN / inf / -inf in each argument, out-of-range values, wrong shapes, rows not summing to 1, labels out of
the columns' range, empty arrays, one-class labels."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.special import expit, softmax

import prism_plugin
from prism_plugin import compat
from prism_plugin.compat import PRISMEvaluator
from prism_plugin.errors import PrismError
from prism_plugin.protocol.array_checks import ArrayError, QualifiedResultWarning, TemperatureAtBoundWarning

RNG = np.random.default_rng(11)
N = 40
Y2 = np.arange(N) % 2
D = RNG.normal(size=N) + 2.0 * (Y2 - 0.5)          # binary decision values
P1 = expit(D)                                        # p(class 1)
P2 = np.column_stack([1 - P1, P1])
Y4 = np.arange(N) % 4
Z4 = RNG.normal(size=(N, 4)) + 2.0 * np.eye(4)[Y4]   # logit matrix
P4 = softmax(Z4, axis=1)


def _one_line_value_error(call, needle: str, error=ValueError) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error) as info:
            call()
    msg = str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, PrismError)
    assert msg and "\n" not in msg and len(msg) < 400, msg
    assert needle in msg, (needle, msg)
    return msg


def _with(arr, value, at=(3,)):
    out = np.array(arr, dtype=np.float64, copy=True)
    out[at if out.ndim == len(at) else at + (0,) * (out.ndim - len(at))] = value
    return out


# ----------------------------------------------------------------- the issue's examples
def test_the_issue_examples_raise_instead_of_returning_a_number():
    y = Y2
    bad_p = _with(P1, np.nan)
    _one_line_value_error(lambda: compat.compute_auroc(y, bad_p), "compute_auroc probs: NaN at row 3",
                          compat.CompatError)  # was 0.5-ish
    rows = P2.copy()
    rows[3] = [0.9, 0.9]  # sums to 1.8
    msg = _one_line_value_error(lambda: compat.compute_ece(rows, y), "compute_ece probs: row 3 sums to 1.8, not 1")
    assert "softmax" in msg
    _one_line_value_error(lambda: compat.compute_ece(np.array([-0.5, 1.5] * (N // 2)), y), "outside [0, 1]")
    _one_line_value_error(lambda: compat.compute_ece(np.array([[-0.5, 1.5]] * N), y), "outside [0, 1]")
    _one_line_value_error(lambda: compat.compute_ece(_with(P1, np.inf), y), "compute_ece probs: inf at row 3")
    _one_line_value_error(lambda: compat.temperature_scale(_with(D, np.nan), y),
                          "temperature_scale logits: NaN at row 3")
    _one_line_value_error(lambda: compat.compute_cri(1.5, 0.05, 0.9), "compute_cri auroc: 1.5 is outside [0, 1]")


def test_one_class_labels_and_a_temperature_at_its_bound_are_warned_about():
    from prism_plugin.quality import bound_side

    ones = np.ones(N, dtype=int)
    with pytest.warns(TemperatureAtBoundWarning, match=r"labels hold one class \(class 1, 40 samples\)") as rec:
        t = compat.temperature_scale(D, ones)
    assert bound_side(t) == "high" and "upper bound" in str(rec[0].message)  # was T at the bound, silently
    assert issubclass(TemperatureAtBoundWarning, QualifiedResultWarning) and issubclass(QualifiedResultWarning,
                                                                                         UserWarning)
    # perfectly separated logits: the NLL keeps falling as T shrinks -> the lower bound
    with pytest.warns(TemperatureAtBoundWarning, match="lower bound of the search box") as rec:
        t = compat.temperature_scale(2.0 * (Y2 - 0.5), Y2)
    assert bound_side(t) == "low" and "labels hold one class" not in str(rec[0].message)
    with pytest.warns(TemperatureAtBoundWarning, match=r"T = 0\.1\d* sits at the lower bound"):
        compat.temperature_scale(np.eye(4)[Y4], Y4)  # (N, K): T on its own scale
    # an ordinary fit warns nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = compat.temperature_scale(D, Y2)
        compat.temperature_scale(Z4, Y4)
    assert not bound_side(t)
    # AUROC of one class: NaN, qualified
    with pytest.warns(QualifiedResultWarning, match="AUROC is undefined: the labels hold one class"):
        assert math.isnan(compat.compute_auroc(ones, P1))
    with pytest.warns(QualifiedResultWarning, match="2 of the 4 classes"):
        assert math.isnan(compat.compute_auroc(Y2, P4))


# ----------------------------------------------------------------- every entry point, every argument
def _evaluator(**kw):
    X = RNG.normal(size=(60, 4)).astype(np.float32)
    y = np.arange(60) % 2
    args = dict(train_features=X, train_labels=y, test_features=X[:40] + 1, test_labels=y[:40],
                val_features=X[:30] - 1, val_labels=y[:30], dataset="pcam", label_fractions=[1.0], seeds=[1])
    args.update(kw)
    return lambda: PRISMEvaluator().evaluate(**args)


def _api(**kw):
    X = RNG.normal(size=(60, 4)).astype(np.float32)
    y = np.arange(60) % 2
    splits = {"train": (X, y), "val": (X[:30] - 1, y[:30]), "test": (X[:40] + 1, y[:40])}
    for key, value in kw.items():
        split, part = key.split("_")
        splits[split] = (value, splits[split][1]) if part == "X" else (splits[split][0], value)
    return lambda: prism_plugin.evaluate(splits["train"], splits["val"], splits["test"], fractions=[1.0], seeds=[1])


def _prob_cases(fn, order):
    """``fn(labels, probs)`` (or ``fn(probs, labels)``): the probability and label family."""
    def call(labels, probs):
        return (lambda: fn(labels, probs)) if order == "lp" else (lambda: fn(probs, labels))

    name = fn.__name__
    rows = P4.copy()
    rows[5] *= 0.5
    return [
        ("nan p", call(Y2, _with(P1, np.nan)), f"{name} probs: NaN at row 3"),
        ("inf p", call(Y2, _with(P1, np.inf)), f"{name} probs: inf at row 3"),
        ("-inf p", call(Y2, _with(P1, -np.inf)), f"{name} probs: -inf at row 3"),
        ("nan matrix", call(Y4, _with(P4, np.nan, (7, 2))), "NaN at row 7, column 2"),
        ("negative p", call(Y2, _with(P1, -0.2)), "-0.2 at row 3 is outside [0, 1]"),
        ("p above 1", call(Y2, _with(P1, 1.2)), "1.2 at row 3 is outside [0, 1]"),
        ("logits for probs", call(Y4, Z4), "outside [0, 1]"),
        ("rows sum to 0.5", call(Y4, rows), "row 5 sums to 0.5"),
        ("3-D probs", call(Y2, P2[:, :, None]), "got shape (40, 2, 1)"),
        ("scalar probs", call(Y2, 0.5), "got shape ()"),
        ("string probs", call(Y2, P1.astype(str)), "must be real numbers"),
        ("short probs", call(Y2, P1[:-1]), "39 probability rows but 40 labels"),
        ("empty", call(Y2[:0], P1[:0]), "empty (0 samples)"),
        ("label out of columns", call(np.where(Y2 == 1, 2, 0), P1), "label 2 is out of range for 2 probability"),
        ("label out of K columns", call(Y4 + 1, P4), "label 4 is out of range for 4 probability columns"),
        ("nan label", call(_with(Y2, np.nan), P1), f"{name} labels: labels contain NaN or inf"),
        ("inf label", call(_with(Y2, np.inf), P1), f"{name} labels: labels contain NaN or inf"),
        ("fractional label", call(Y2 + 0.5, P1), "non-integer floats"),
        ("negative label", call(Y2 - 1, P1), "found -1"),
        ("2-D labels", call(np.eye(2)[Y2], P1), "not one-hot"),
        ("string labels", call(Y2.astype(str), P1), "map class names to integers"),
    ]


def _logit_cases(fn):
    name = fn.__name__
    second = (lambda z: (lambda: fn(z, Y2))) if name == "temperature_scale" else (lambda z: (lambda: fn(z, 1.5)))
    return [
        ("nan logit", second(_with(D, np.nan)), f"{name} logits: NaN at row 3"),
        ("inf logit", second(_with(D, np.inf)), f"{name} logits: inf at row 3"),
        ("-inf logit", second(_with(D, -np.inf)), f"{name} logits: -inf at row 3"),
        ("3-D logits", second(D[:, None, None] * np.ones((1, 2, 2))), "got shape (40, 2, 2)"),
        ("empty logits", second(D[:0]), "empty (0 samples)"),
        ("string logits", second(D.astype(str)), "must be real numbers"),
        ("bool logits", second(D > 0), "got bool"),
        ("overflowing logits", (lambda: fn(D * 1e307, Y2)) if name == "temperature_scale" else
         (lambda: fn(D * 1e307, 1e-3)), "overflow"),
    ]


TEMPERATURE_LABELS = [
    ("nan label", lambda: compat.temperature_scale(D, _with(Y2, np.nan)), "temperature_scale labels: labels contain"),
    ("label out of columns", lambda: compat.temperature_scale(D, Y2 * 2), "label 2 is out of range for 2 logit"),
    ("label out of K columns", lambda: compat.temperature_scale(Z4, Y4 + 1), "label 4 is out of range for 4 logit"),
    ("short labels", lambda: compat.temperature_scale(D, Y2[:-1]), "40 logit rows but 39 labels"),
    ("negative label", lambda: compat.temperature_scale(D, Y2 - 1), "found -1"),
    ("bounds nan", lambda: compat.temperature_scale(D, Y2, (float("nan"), 10)), "temperature_scale bounds"),
    ("bounds zero", lambda: compat.temperature_scale(D, Y2, (0, 10)), "temperature_scale bounds: 0 is outside"),
    ("bounds reversed", lambda: compat.temperature_scale(D, Y2, (10, 0.1)), "must be below high"),
    ("bounds scalar", lambda: compat.temperature_scale(D, Y2, 10), "pass two numbers"),
]
APPLY_T = [(f"T={t!r}", (lambda t=t: compat.apply_temperature(D, t)), "apply_temperature T")
           for t in (float("nan"), float("inf"), -float("inf"), 0.0, -1.0, "2", True, None, np.array([1.0, 2.0]))]


def _score_cases():
    good = {"auroc": 0.9, "ece_scaled": 0.05, "ood_stability": 0.7}
    out = []
    for arg in good:
        for bad in (float("nan"), float("inf"), -float("inf"), -0.1, 1.5, "0.9", None, True, [0.9]):
            kw = {**good, arg: bad}
            out.append((f"{arg}={bad!r}", (lambda kw=kw: compat.compute_cri(**kw)), f"compute_cri {arg}"))
    return out


def _stability_cases():
    ood, ids = {("a", "b"): 0.8}, {"a": 0.9}
    out = []
    for bad in (float("nan"), float("inf"), -float("inf"), -0.1, 1.5, "x", None):
        out.append((f"ood {bad!r}", (lambda b=bad: compat.compute_ood_stability({("a", "b"): b}, ids)),
                    "compute_ood_stability ood_aurocs[('a', 'b')]"))
        out.append((f"id {bad!r}", (lambda b=bad: compat.compute_ood_stability(ood, {"a": b})),
                    "compute_ood_stability id_aurocs['a']"))
    out += [
        ("id zero", lambda: compat.compute_ood_stability(ood, {"a": 0.0}), "0 is outside (0, 1]"),
        ("empty ood", lambda: compat.compute_ood_stability({}, ids), "ood_aurocs: empty"),
        ("empty id", lambda: compat.compute_ood_stability(ood, {}), "id_aurocs: empty"),
        ("not a pair", lambda: compat.compute_ood_stability({"a": 0.8}, ids), "is not a (source, target) pair"),
        ("not a mapping", lambda: compat.compute_ood_stability([0.8], ids), "pass a mapping"),
    ]
    return out


def _array_entry_cases(make, prefix):
    """The features/labels family for PRISMEvaluator.evaluate (``prefix`` "c") and prism_plugin.evaluate ("a")."""
    X = RNG.normal(size=(60, 4)).astype(np.float32)
    y = np.arange(60) % 2
    names = {"c": {"train_X": "train_features", "train_y": "train_labels", "test_X": "test_features",
                   "test_y": "test_labels", "val_X": "val_features", "val_y": "val_labels"}}.get(prefix)

    def at(key, value):
        return make(**({names[key]: value} if names else {key: value}))

    out = []
    for split, n in (("train", 60), ("val", 30), ("test", 40)):
        for value in (np.nan, np.inf, -np.inf):
            out.append((f"{split} features {value}", at(f"{split}_X", _with(X[:n], value, (2, 1))),
                        f"{split} features: features contain NaN or inf"))
        out += [
            (f"{split} nan label", at(f"{split}_y", _with(y[:n], np.nan)), f"{split} labels: labels contain NaN"),
            (f"{split} negative label", at(f"{split}_y", y[:n] - 1), f"{split} labels: labels must be integers"),
            (f"{split} 3-D features", at(f"{split}_X", X[:n, :, None]), f"{split} features: features must be a 2-D"),
            (f"{split} short labels", at(f"{split}_y", y[:n - 1]), "must have equal length"),
            (f"{split} empty", make(**({names[f"{split}_X"]: X[:0], names[f"{split}_y"]: y[:0]} if names else
                                       {f"{split}_X": X[:0], f"{split}_y": y[:0]})), f"{split}: the split is empty"),
        ]
    return out


CASES = (
    [("compute_auroc", *c) for c in _prob_cases(compat.compute_auroc, "lp")]
    + [("compute_brier", *c) for c in _prob_cases(compat.compute_brier, "lp")]
    + [("compute_ece", *c) for c in _prob_cases(compat.compute_ece, "pl")]
    + [("temperature_scale", *c) for c in _logit_cases(compat.temperature_scale) + TEMPERATURE_LABELS]
    + [("apply_temperature", *c) for c in _logit_cases(compat.apply_temperature) + APPLY_T]
    + [("compute_cri", *c) for c in _score_cases()]
    + [("compute_ood_stability", *c) for c in _stability_cases()]
    + [("PRISMEvaluator.evaluate", *c) for c in _array_entry_cases(_evaluator, "c")]
)
API_CASES = [("prism_plugin.evaluate", *c) for c in _array_entry_cases(_api, "a")]


@pytest.mark.parametrize("entry, case, call, needle", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_every_compat_entry_point_refuses_invalid_input_in_one_line(entry, case, call, needle):
    _one_line_value_error(call, needle, compat.CompatError)


@pytest.mark.parametrize("entry, case, call, needle", API_CASES, ids=[f"{c[0]}-{c[1]}" for c in API_CASES])
def test_evaluate_refuses_the_same_inputs_with_a_value_error(entry, case, call, needle):
    _one_line_value_error(call, needle, ArrayError)


def test_compat_and_evaluate_share_one_validator_and_its_messages():
    """The same bad labels give the same words after the argument's name, wherever they are passed."""
    nan_labels = _with(Y2, np.nan)
    words = set()
    for call in (lambda: compat.compute_auroc(nan_labels, P1), lambda: compat.compute_ece(P1, nan_labels),
                 lambda: compat.temperature_scale(D, nan_labels), _api(train_y=_with(np.arange(60) % 2, np.nan)),
                 _evaluator(test_labels=_with(np.arange(40) % 2, np.nan))):
        msg = _one_line_value_error(call, "labels contain NaN or inf")
        words.add(msg.split("labels: ", 1)[1])
    assert len(words) == 1, words


def test_compare_validates_its_scores(tmp_path):
    import pandas as pd

    res = pd.DataFrame({"model": "m", "dataset": "pcam", "fraction": [0.1], "seed": 1, "auroc": 0.9,
                        "ece_fixed": 0.1, "ece_scaled_fixed": 0.05})
    ev = PRISMEvaluator(results_dir=tmp_path / "nowhere")  # the checks come before the reference is read
    for column, value, needle in (("auroc", 1.5, "custom_results column auroc: 1.5 (row 0) is outside [0, 1]"),
                                  ("ece_scaled_fixed", np.inf, "column ece_scaled_fixed: inf"),
                                  ("ece_fixed", -0.1, "column ece_fixed: -0.1"),
                                  ("auroc", "high", "'high' (row 0) is not a number"),
                                  ("fraction", 0.0, "column fraction: 0 (row 0) is outside (0, 1]")):
        bad = res.copy()
        bad[column] = [value]
        _one_line_value_error(lambda: ev.compare(bad, dataset="pcam"), needle, compat.CompatError)
    for value in (float("nan"), 1.5, -0.1, "0.5"):
        _one_line_value_error(lambda: ev.compare(res, dataset="pcam", custom_ood_stability=value),
                              "custom_ood_stability", compat.CompatError)


# ----------------------------------------------------------------- valid input is still accepted
def test_valid_inputs_of_every_dtype_and_layout_are_accepted():
    p32 = softmax(RNG.normal(size=(500, 9)) * 3, axis=1).astype(np.float32)  # rows miss 1 by float32 rounding
    y9 = np.arange(500) % 9
    assert np.abs(p32.sum(axis=1, dtype=np.float64) - 1).max() > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert 0 <= compat.compute_ece(p32, y9) <= 1 and 0 <= compat.compute_auroc(y9, p32) <= 1
        assert compat.compute_auroc(Y2, P1) == compat.compute_auroc(Y2, P2) == compat.compute_auroc(Y2, P1[:, None])
        assert compat.compute_auroc(Y2.astype(float), P1) == compat.compute_auroc(Y2.astype(bool), P1)
        assert compat.compute_ece(np.where(Y2 == 1, 1, 0), Y2) == 0.0  # hard 0/1 predictions (ints) are valid
        assert compat.compute_cri(1.0, 0.0, 1.0) == 1.0 and compat.compute_cri(np.float32(0.5), 1.0, 0.5) == 0.0
        assert compat.compute_cri(np.array(0.9), 0.1, 0.5) == pytest.approx(0.9 * 0.9 * 0.5)
        assert compat.apply_temperature(D[:, None], 1.0).shape == (N, 2)
    # ECE on one class is defined (calibration of p vs the label), no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compat.compute_ece(P1, np.ones(N, dtype=int)) > 0


def test_prism_run_evaluate_notes_the_flags_and_refuses_bad_arrays_in_one_line(tmp_path, monkeypatch):
    """The note in this process; the refusal from a real ``prism-run`` (one line on stderr, nothing else)."""
    from tests.conftest import prism_run, run_main

    rng = np.random.default_rng(2)
    for split, n in (("train", 80), ("val", 40), ("test", 40)):
        y = np.arange(n) % 2
        np.save(tmp_path / f"X_{split}.npy", (rng.normal(size=(n, 4)) + y[:, None]).astype(np.float32))
        np.save(tmp_path / f"y_{split}.npy", y)
    args = ["evaluate", "--train-features", "X_train.npy", "--train-labels", "y_train.npy", "--test-features",
            "X_test.npy", "--test-labels", "y_test.npy", "--val-features", "X_val.npy", "--val-labels", "y_val.npy",
            "--dataset", "pcam", "--label-fractions", "1.0", "--seeds", "1"]
    monkeypatch.chdir(tmp_path)
    ok = run_main(*args, "--C", "1e-5")  # T at the lower bound of the box
    assert ok.returncode == 0, ok.stderr
    assert "note: fitted temperature (temperature) is at the lower bound" in ok.stdout
    X = np.load(tmp_path / "X_test.npy")
    X[5, 1] = np.nan
    np.save(tmp_path / "X_test.npy", X)
    bad = prism_run(*args, cwd=tmp_path, timeout=None)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "test features: features contain NaN or inf" in bad.stderr and "Traceback" not in bad.stderr
