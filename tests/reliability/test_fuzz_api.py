"""Fuzz ``prism_plugin.api.evaluate``: a valid problem plus random damage -> a table or one PrismError.

A hypothesis generator builds a small valid train/val/test problem and applies
up to three mutations (NaN/inf, dtypes, 0/1 rows, 1-D or 3-D features,
mismatched lengths, float/str/out-of-range labels, a single class, classes only
in test, bad grid arguments); every mutation kind is the first one of a few
cases (derandomized), composed with random others. Every outcome must be either the per-run table
(the documented behaviour, e.g. AUROC NaN for a single-class test split) or a
PrismError with one line naming the split or argument; never another
exception, never a hang, never a file written, never the caller's arrays
modified. The hand-written corpus below pins the message of each case.
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism_plugin.api import evaluate
from prism_plugin.errors import PrismError

COUNTS = {"examples": 0, "tables": 0, "errors": 0}
NAMES = ("train", "val", "test", "n_classes", "label_fractions", "seeds", "C", "max_iter", "ece_bins",
         "binary_logits", "proportional_val", "probe", "features", "labels", "class")


def problem(n=(24, 12, 12), k=2, d=4, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, m in zip(("train", "val", "test"), n):
        y = np.arange(m) % k
        out[name] = [(rng.normal(size=(m, d)) + y[:, None]).astype(np.float32), y.astype(np.int64)]
    return out


def call(splits, **kwargs):
    """evaluate() in a clean folder; returns the table or the PrismError."""
    kwargs.setdefault("fractions", [0.5, 1.0])
    kwargs.setdefault("seeds", [42])
    before = {k: (None if v is None else [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in v])
              for k, v in splits.items()}
    cwd_before = set(os.listdir("."))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = evaluate(*(None if splits[s] is None else tuple(splits[s]) for s in ("train", "val", "test")),
                           **kwargs)
    except PrismError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and len(msg) < 400, repr(msg)
        assert any(name in msg for name in NAMES), msg
        out = exc
    assert set(os.listdir(".")) == cwd_before, "evaluate wrote files"
    for k, v in splits.items():  # the caller's arrays are never modified
        if v is None:
            continue
        for a, b in zip(v, before[k]):
            if isinstance(a, np.ndarray) and a.dtype.kind not in "OU":
                assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), k
    return out


def check_table(df, fractions, seeds):
    assert isinstance(df, pd.DataFrame)
    assert len(df) == len(fractions) * len(seeds)
    assert df["fraction"].tolist() == [f for f in sorted(fractions) for _ in seeds]
    for col in ("ece_fixed", "brier", "nll"):
        if col in df:
            v = pd.to_numeric(df[col], errors="coerce")
            # nll = -mean(log(p + 1e-12)) (PROTOCOL): a perfectly confident fit gives -1e-12
            assert (v.isna() | ((v >= -1e-11) & np.isfinite(v))).all(), (col, v.tolist())
    a = pd.to_numeric(df["auroc"], errors="coerce")
    assert (a.isna() | ((a >= 0) & (a <= 1))).all()


# -- mutations ------------------------------------------------------------------------------------------
def _set(splits, split, X=None, y=None):
    if splits[split] is None:
        return
    if X is not None:
        splits[split][0] = X
    if y is not None:
        splits[split][1] = y


ARRAY_MUTATIONS = {
    "nan": lambda s, sp, r: _set(s, sp, X=_with(s[sp][0], np.nan, r)),
    "inf": lambda s, sp, r: _set(s, sp, X=_with(s[sp][0], -np.inf, r)),
    "huge64": lambda s, sp, r: _set(s, sp, X=_with(np.asarray(s[sp][0], np.float64), 1e39, r)),
    "big32": lambda s, sp, r: _set(s, sp, X=_scaled(s[sp][0], 1e30)),
    "float16": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0]).astype(np.float16)),
    "float64": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0]).astype(np.float64)),
    "int8": lambda s, sp, r: _set(s, sp, X=(np.asarray(s[sp][0]) * 10).astype(np.int8)),
    "bool": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0]) > 0),
    "complex": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0]).astype(np.complex64)),
    "object": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0]).astype(object)),
    "strings": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0]).astype(str)),
    "list": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0]).tolist()),
    "ragged": lambda s, sp, r: _set(s, sp, X=[[1.0, 2.0], [1.0]] * 3),
    "none": lambda s, sp, r: _set(s, sp, X="features.npy"),
    "rows0": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0])[:0], y=np.asarray(s[sp][1])[:0]),
    "rows1": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0])[:1], y=np.asarray(s[sp][1])[:1]),
    "rows2": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0])[:2], y=np.asarray(s[sp][1])[:2]),
    "dims0": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0])[:, :0]),
    "1d": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0])[:, 0]),
    "3d": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0])[:, :, None]),
    "scalar": lambda s, sp, r: _set(s, sp, X=np.float32(1.0)),
    "dim_mismatch": lambda s, sp, r: _set(s, sp, X=np.asarray(s[sp][0])[:, :1]),
    "short_labels": lambda s, sp, r: _set(s, sp, y=np.asarray(s[sp][1])[:-1]),
    "long_labels": lambda s, sp, r: _set(s, sp, y=np.append(np.asarray(s[sp][1]), 0)),
    "labels_float_int": lambda s, sp, r: _set(s, sp, y=np.asarray(s[sp][1]).astype(np.float64)),
    "labels_float_frac": lambda s, sp, r: _set(s, sp, y=np.asarray(s[sp][1]) + 0.5),
    "labels_nan": lambda s, sp, r: _set(s, sp, y=_with(np.asarray(s[sp][1]).astype(float), np.nan, r)),
    "labels_huge_float": lambda s, sp, r: _set(s, sp, y=_with(np.asarray(s[sp][1]).astype(float), 1e300, r)),
    "labels_str": lambda s, sp, r: _set(s, sp, y=np.asarray(s[sp][1]).astype(str)),
    "labels_names": lambda s, sp, r: _set(s, sp, y=np.where(np.asarray(s[sp][1]) == 0, "normal", "tumour")),
    "labels_object": lambda s, sp, r: _set(s, sp, y=np.asarray(s[sp][1]).astype(object)),
    "labels_negative": lambda s, sp, r: _set(s, sp, y=np.asarray(s[sp][1]) - 1),
    "labels_uint_huge": lambda s, sp, r: _set(s, sp, y=_with(np.asarray(s[sp][1]).astype(np.uint64), 2**63 + 5, r)),
    "labels_out_of_range": lambda s, sp, r: _set(s, sp, y=_with(np.asarray(s[sp][1]), 7, r)),
    "labels_2d": lambda s, sp, r: _set(s, sp, y=np.asarray(s[sp][1])[:, None]),
    "labels_onehot": lambda s, sp, r: _set(s, sp, y=np.eye(2, dtype=int)[np.asarray(s[sp][1]) % 2]),
    "labels_bool": lambda s, sp, r: _set(s, sp, y=np.asarray(s[sp][1]).astype(bool)),
    "single_class": lambda s, sp, r: _set(s, sp, y=np.zeros_like(np.asarray(s[sp][1]))),
    "all_ones": lambda s, sp, r: _set(s, sp, y=np.ones_like(np.asarray(s[sp][1]))),
    "extra_class": lambda s, sp, r: _set(s, sp, y=_with(np.asarray(s[sp][1]), 2, r)),
    "not_a_pair": lambda s, sp, r: s.__setitem__(sp, [np.zeros((3, 2))] if s[sp] is not None else None),
}
SPLIT_ONLY = {"drop_val": lambda s: s.__setitem__("val", None)}
ARG_VALUES = {
    "n_classes": [None, 2, 3, 10, 1, 0, -1, "2", 2.0, True, np.int64(2)],
    "fractions": [[0.5], [1.0], [1e-9, 1.0], [], [0], [1.5], [float("nan")], [0.5, 0.5], "0.5", 0.5, ["a"], [True]],
    "seeds": [[42], [0, 2**32 - 1], [], [-1], [2**40], ["a"], [1.5], 42, [1, 1], [np.int64(7)]],
    "C": [1.0, 1e-6, 1e6, 0, -1, float("nan"), float("inf"), "1", None],
    "max_iter": [1, 5, 0, -3, 2.5, "100"],
    "ece_bins": [1, 15, 10_000, 0, -1, "15", 2.5],
    "binary_logits": ["symmetric", "natural", "x", None, 3],
    "proportional_val": [False, True, "yes", None],
}


def _scaled(arr, factor):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(arr, np.float32) * np.float32(factor)


def _with(arr, value, rng):
    arr = np.array(arr, copy=True)
    if arr.size:
        arr.flat[rng.randrange(arr.size)] = value
    return arr


#: the mutation kinds: each is the first mutation of a few cases of its own (composed with up to two random
#: others), besides the cases of 0-3 random mutations
KINDS = sorted(ARRAY_MUTATIONS) + sorted(SPLIT_ONLY)
_SETTINGS = dict(deadline=None, database=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
#: $PRISM_FUZZ_EXAMPLES: the cases of random mutations (the valid problem among them); 3 more per kind
FUZZ = settings(max_examples=int(os.environ.get("PRISM_FUZZ_EXAMPLES", "100")), **_SETTINGS)
FUZZ_EACH = settings(max_examples=3, **_SETTINGS)


@st.composite
def fuzz_case(draw, first: str = "random"):
    import random

    k = draw(st.sampled_from([2, 3]))
    splits = problem(n=(draw(st.integers(6, 24)), draw(st.integers(3, 12)), draw(st.integers(3, 12))), k=k,
                     d=draw(st.integers(1, 5)), seed=draw(st.integers(0, 3)))
    rng = random.Random(draw(st.integers(0, 10**6)))
    names = []
    chosen = [] if first == "random" else [first]
    chosen += [None] * draw(st.integers(0, 3 - len(chosen)))
    for name in chosen:
        name = name or draw(st.sampled_from(sorted(ARRAY_MUTATIONS) + sorted(SPLIT_ONLY)))
        if name in SPLIT_ONLY:
            SPLIT_ONLY[name](splits)
        else:
            split = draw(st.sampled_from(["train", "val", "test"]))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # NaN cast to int8 etc.: the damage we want
                    ARRAY_MUTATIONS[name](splits, split, rng)
            except (ValueError, TypeError, IndexError):
                continue  # this damage does not compose with an earlier one (e.g. a ragged list); skip it
            name = f"{name}@{split}"
        names.append(name)
    kwargs = {}
    for arg, values in ARG_VALUES.items():
        if draw(st.integers(0, 5)) == 0:
            kwargs[arg] = draw(st.sampled_from(values))
    return names, splits, kwargs


def _fuzz_one(tmp_path, monkeypatch, case):
    names, splits, kwargs = case
    monkeypatch.chdir(tmp_path)
    COUNTS["examples"] += 1
    out = call(splits, **kwargs)
    if isinstance(out, PrismError):
        COUNTS["errors"] += 1
    else:
        COUNTS["tables"] += 1
        fr = kwargs.get("fractions", [0.5, 1.0])
        sd = kwargs.get("seeds", [42])
        check_table(out, fr, sd)


@FUZZ
@given(case=fuzz_case())
def test_evaluate_fuzz(tmp_path, monkeypatch, case):
    _fuzz_one(tmp_path, monkeypatch, case)


@pytest.mark.parametrize("first", KINDS)
@FUZZ_EACH
@given(data=st.data())
def test_evaluate_fuzz_each_mutation(tmp_path, monkeypatch, first, data):
    case = data.draw(fuzz_case(first), label="case")
    assert case[0][0].split("@")[0] == first  # every kind is fuzzed, none skipped
    _fuzz_one(tmp_path, monkeypatch, case)


def test_fuzz_counts_report(capsys):
    with capsys.disabled():
        print(f"\n[fuzz] evaluate(): {COUNTS['examples']} inputs, {COUNTS['tables']} tables (documented behaviour), "
              f"{COUNTS['errors']} one-line PrismErrors, 0 other exceptions")


# -- the corpus -----------------------------------------------------------------------------------------
def _mut(name, split="train"):
    import random

    def build():
        s = problem()
        ARRAY_MUTATIONS[name](s, split, random.Random(0))
        return s, {}
    return build


def _arg(**kwargs):
    return lambda: (problem(), kwargs)


EVALUATE_CASES = [
    # (name, builder, expected substring of the error, or None = a table is the documented outcome)
    ("NaN in train features", _mut("nan"), "train features: features contain NaN or inf"),
    ("inf in test features", _mut("inf", "test"), "test features: features contain NaN or inf"),
    ("float64 beyond float32", _mut("huge64", "val"), "exceed the float32 range"),
    ("complex features", _mut("complex"), "must be real numbers"),
    ("object features", _mut("object"), "must be real numbers"),
    ("string features", _mut("strings"), "must be real numbers"),
    ("ragged list", _mut("ragged"), "rectangular array"),
    ("a file name for features", _mut("none"), "must be an array"),
    ("float16 features (cast)", _mut("float16"), None),
    ("int features (cast)", _mut("int8"), None),
    ("bool features", _mut("bool"), "must be real numbers"),
    ("empty train", _mut("rows0"), "train"),
    ("empty test", _mut("rows0", "test"), "test"),
    ("one-row train", _mut("rows1"), "absent from the training split"),
    ("one-row test", _mut("rows1", "test"), None),
    ("one-row val", _mut("rows1", "val"), None),
    ("1-D features", _mut("1d"), "reshape a single feature"),
    ("3-D features", _mut("3d", "val"), "2-D (samples x dims)"),
    ("0 feature columns", _mut("dims0"), "0 dimensions"),
    ("feature widths differ", _mut("dim_mismatch", "test"), "feature dimensions differ"),
    ("fewer labels than rows", _mut("short_labels"), "must have equal length"),
    ("more labels than rows", _mut("long_labels", "val"), "must have equal length"),
    ("integer-valued float labels", _mut("labels_float_int"), None),
    ("fractional labels", _mut("labels_float_frac"), "non-integer floats"),
    ("NaN label", _mut("labels_nan"), "NaN or inf"),
    ("1e300 label", _mut("labels_huge_float", "test"), "labels must be integers 0..K-1"),
    ("string labels", _mut("labels_str"), "map class names to integers"),
    ("class-name labels", _mut("labels_names", "test"), "map class names to integers"),
    ("negative labels", _mut("labels_negative"), "labels must be integers 0..K-1, found -1"),
    ("uint64 label 2**63", _mut("labels_uint_huge"), "not a plausible class index"),
    ("one-hot labels", _mut("labels_onehot"), "not one-hot"),
    ("bool labels", _mut("labels_bool"), None),
    ("single class everywhere", lambda: (_all(problem(), "single_class"), {}), "at least 2 classes"),
    ("single class in train", _mut("single_class"), "absent from the training split"),
    ("single class in test", _mut("single_class", "test"), None),  # AUROC NaN (PROTOCOL §3)
    ("class in test but not train", _mut("extra_class", "test"), "absent from the training split (they occur in test)"),
    ("label out of range for n_classes", lambda: (_mutd(problem(), "labels_out_of_range", "val"), {"n_classes": 2}),
     "out of range for n_classes = 2"),
    ("n_classes as string", _arg(n_classes="2"), "n_classes"),
    ("n_classes 1", _arg(n_classes=1), "n_classes"),
    ("n_classes True", _arg(n_classes=True), "n_classes"),
    ("n_classes above labels", _arg(n_classes=3), "absent from the training split"),
    ("no val split", lambda: ({**problem(), "val": None}, {}), None),
    ("not a pair", _mut("not_a_pair"), "pair"),
    ("fractions scalar", _arg(fractions=0.5), "label_fractions"),
    ("fractions empty", _arg(fractions=[]), "label_fractions"),
    ("fraction NaN", _arg(fractions=[float("nan")]), "label_fractions"),
    ("fractions duplicate", _arg(fractions=[0.5, 0.5]), "duplicates"),
    ("seeds empty", _arg(seeds=[]), "seeds"),
    ("seed negative", _arg(seeds=[-1]), "seeds"),
    ("seed too large", _arg(seeds=[2**40]), "seeds"),
    ("seed string", _arg(seeds=["a"]), "seeds"),
    ("seeds scalar", _arg(seeds=42), "seeds"),
    ("seeds duplicate", _arg(seeds=[1, 1]), "duplicates"),
    ("C zero", _arg(C=0), "C"),
    ("C NaN", _arg(C=float("nan")), "C"),
    ("C string", _arg(C="1"), "C"),
    ("max_iter zero", _arg(max_iter=0), "max_iter"),
    ("ece_bins zero", _arg(ece_bins=0), "ece_bins"),
    ("ece_bins string", _arg(ece_bins="15"), "ece_bins"),
    ("binary_logits typo", _arg(binary_logits="sym"), "binary_logits"),
    ("proportional_val string", _arg(proportional_val="yes"), "proportional_val"),
    ("probe unknown key", _arg(probe={"kind": "logistic", "CC": 1}), "probe"),
    ("probe unknown head", _arg(probe={"kind": "svm"}), "probe head"),
    ("tiny fraction (forced classes)", _arg(fractions=[1e-9]), None),
]


def _mutd(s, name, split):
    import random

    ARRAY_MUTATIONS[name](s, split, random.Random(0))
    return s


def _all(s, name):
    for split in ("train", "val", "test"):
        _mutd(s, name, split)
    return s


@pytest.mark.parametrize("name,build,needle", EVALUATE_CASES, ids=[c[0] for c in EVALUATE_CASES])
def test_evaluate_corpus(tmp_path, monkeypatch, name, build, needle):
    monkeypatch.chdir(tmp_path)
    splits, kwargs = build()
    out = call(splits, **kwargs)
    if needle is None:
        assert not isinstance(out, PrismError), f"{name}: {out}"
        check_table(out, kwargs.get("fractions", [0.5, 1.0]), kwargs.get("seeds", [42]))
        if name == "single class in test":
            assert out["auroc"].isna().all() and out["f1_macro"].notna().all()
    else:
        assert isinstance(out, PrismError), f"{name}: got a table"
        assert needle in str(out), str(out)


def test_pickled_object_arrays_are_refused_not_unpickled(tmp_path):
    """Object arrays saved with pickle: np.load(allow_pickle=False) refuses them before any code runs."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    arr = np.empty(2, dtype=object)
    arr[:] = [Evil(), Evil()]
    np.save(tmp_path / "evil.npy", arr, allow_pickle=True)
    from prism_plugin.embed.cache import load_npy

    with pytest.raises(ValueError):
        load_npy(tmp_path / "evil.npy")
    assert not marker.exists()
    assert math.isfinite(1.0)
