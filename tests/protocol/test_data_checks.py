"""Checks across splits (prism_plugin.protocol.inputs.check_data) and the label rules, with a property test.

Real arrays, no mocks: identical and overlapping splits (by definition and by a content hash of
rows), all-zero rows, constant training features, extreme scales, a one-class test split, rare
classes; the API's argument checks; hypothesis-generated label arrays and planted split overlaps.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism_plugin.api import evaluate
from prism_plugin.errors import PrismError
from prism_plugin.protocol.inputs import (LARGE_SCALE, MAX_SCALE, SplitArrays, as_labels, check_data,
                                          check_overlap_allowance, check_splits, row_overlap)


def splits(n=(40, 20, 20), d=6, k=2, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, m in zip(("train", "val", "test"), n):
        y = np.arange(m) % k
        out[name] = SplitArrays((rng.normal(size=(m, d)) + y[:, None]).astype(np.float32), y.astype(np.int64))
    return out


def run_checks(s, **kw):
    check_splits(s["train"], s.get("val"), s["test"])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = check_data(s, **kw)
    return out, [str(w.message) for w in rec]


def by_check(checks, name):
    return [c for c in checks if c["check"] == name]


# ------------------------------------------------------------------ split identity and overlap
def test_identical_val_and_test_is_an_error_unless_allowed():
    s = splits()
    s["test"] = SplitArrays(s["val"].X.copy(), s["val"].y.copy())
    with pytest.raises(PrismError, match=r"splits val and test are the same data .*temperature would be fitted"):
        run_checks(s, where="task t")
    s = splits()
    s["test"] = SplitArrays(s["val"].X.copy(), s["val"].y.copy())
    checks, warned = run_checks(s, allowed=[["val", "test"]])
    allowed = by_check(checks, "split_overlap")
    assert [c["level"] for c in allowed] == ["allowed"] and allowed[0]["splits"] == ["val", "test"]
    assert allowed[0]["count"] == 20 and not any("same data" in w for w in warned)


def test_train_equal_test_by_definition_and_permuted_rows():
    s = splits()
    with pytest.raises(PrismError, match="splits train and test are the same data .both read 'x'.*own training"):
        run_checks(s, same={("test", "train"): "both read 'x'"})
    s = splits(n=(20, 20, 20))
    perm = np.random.default_rng(1).permutation(20)
    s["test"] = SplitArrays(s["train"].X[perm], s["train"].y[perm])
    with pytest.raises(PrismError, match="train and test are the same data .every row"):
        run_checks(s)


def test_partial_overlap_is_a_warning_with_counts():
    s = splits()
    s["test"].X[[2, 5, 11]] = s["train"].X[[0, 7, 30]]
    checks, warned = run_checks(s, where="task t")
    (c,) = by_check(checks, "split_overlap")
    assert (c["level"], c["count"], c["splits"]) == ("warning", 3, ["train", "test"])
    assert "3 of 20 test rows (15.0%) also occur in train" in c["message"]
    assert sum("also occur in train" in w for w in warned) == 1


def test_row_overlap_is_exact_with_duplicates_and_zero_rows():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(300, 5)).astype(np.float32)
    B = rng.normal(size=(200, 5)).astype(np.float32)
    A[:40] = 0.0
    B[-10:] = -0.0  # -0.0 == 0.0: the same values
    B[[1, 2, 3]] = A[[100, 100, 250]]
    B[4] = np.nextafter(A[7], np.float32(np.inf))  # differs in the last bit of every value: not a match
    got = row_overlap(A, B)
    assert np.flatnonzero(got).tolist() == [1, 2, 3] + list(range(190, 200))


def test_overlap_allowance_forms():
    assert check_overlap_allowance(["test", "val"]) == (("val", "test"),)
    assert check_overlap_allowance([["val", "test"], ["test", "train"]]) == (("val", "test"), ("train", "test"))
    for bad in ("val", ["val"], ["val", "val"], ["val", "tst"], [[1, 2]], 3):
        with pytest.raises(PrismError, match="allow_split_overlap"):
            check_overlap_allowance(bad, "allow_split_overlap")


# ------------------------------------------------------------------ degenerate inputs
def test_zero_rows_warned_and_constant_train_refused():
    s = splits()
    s["test"].X[:4] = 0.0
    checks, _ = run_checks(s)
    (z,) = by_check(checks, "zero_rows")
    assert z["count"] == 4 and z["splits"] == ["test"] and "4 of 20 test rows (20.0%)" in z["message"]
    s = splits()
    s["train"].X[:] = 0.0
    with pytest.raises(PrismError, match="train features are constant.*all zeros.*cannot learn"):
        run_checks(s)
    s = splits()
    s["train"].X[:] = s["train"].X[0]
    with pytest.raises(PrismError, match="all 40 training rows are identical"):
        run_checks(s)


def test_scales_large_warned_extreme_refused():
    s = splits()
    s["val"].X *= np.float32(LARGE_SCALE * 10)
    checks, _ = run_checks(s)
    assert by_check(checks, "extreme_scale")[0]["splits"] == ["val"]
    s = splits()
    for part in s.values():
        part.X *= np.float32(1e37)
    with pytest.raises(PrismError, match=r"beyond 1e\+19: float32 logistic regression overflows"):
        run_checks(s)
    assert MAX_SCALE == 1e19


def test_single_class_test_and_rare_classes():
    s = splits(n=(60, 20, 20), k=3)
    s["test"].y[:] = 1
    checks, warned = run_checks(s)
    (c,) = by_check(checks, "single_class_test")
    assert "test split has one class" in c["message"] and "AUROC undefined" in c["message"]
    s = splits(n=(24, 20, 30), k=3)  # 8 training samples per class
    checks, _ = run_checks(s)
    assert by_check(checks, "small_train_class")[0]["count"] == 3
    assert not by_check(checks, "few_test_samples_per_class")
    checks, _ = run_checks(splits(n=(24, 20, 30), k=3), small_classes=False)
    assert not by_check(checks, "small_train_class")


# ------------------------------------------------------------------ the Python API
def test_evaluate_refuses_missing_and_identical_splits():
    s = splits()
    tr, va, te = ((p.X, p.y) for p in (s["train"], s["val"], s["test"]))
    for args, needle in (((tr, va, None), "test: a test split is required"),
                         ((None, va, te), "train: a train split is required"),
                         ((tr, va, "x.npy"), "test: pass a (features, labels) pair"),
                         ((tr, va, 5), "test: pass a (features, labels) pair")):
        with pytest.raises(PrismError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            evaluate(*args, fractions=[1.0], seeds=[1])
    with pytest.raises(PrismError, match=r"allow_split_overlap=\['val', 'test'\]"):
        evaluate(tr, va, va, fractions=[1.0], seeds=[1])
    with pytest.raises(PrismError, match="disable"):
        evaluate(tr, va, te, fractions=[1.0], seeds=[1], disable=5)
    with pytest.raises(PrismError, match="plugins"):
        evaluate(tr, va, te, fractions=[1.0], seeds=[1], plugins=3)
    with pytest.raises(PrismError, match="model"):
        evaluate(tr, va, te, fractions=[1.0], seeds=[1], model=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = evaluate(tr, va, va, fractions=[1.0], seeds=[1], allow_split_overlap=["val", "test"])
    assert [c["level"] for c in df.attrs["data_checks"]] == ["allowed"]


# ------------------------------------------------------------------ property tests
LABEL_DTYPES = [np.int8, np.int64, np.uint8, np.uint64, np.float32, np.float64, np.bool_, np.str_, object]
PROPS = settings(max_examples=50, deadline=None, database=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])


@st.composite
def label_arrays(draw):
    shape = draw(st.sampled_from([(), (0,), (7,), (7, 1), (7, 3), (1, 7), (2, 3, 1)]))
    dtype = draw(st.sampled_from(LABEL_DTYPES))
    values = draw(st.lists(st.integers(-3, 4), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    arr = np.asarray(values, dtype=np.int64).reshape(shape)
    if draw(st.booleans()) and dtype in (np.float32, np.float64):
        arr = arr + 0.5
    return arr.astype(dtype)


@PROPS
@given(y=label_arrays(), strict=st.booleans(), column_ok=st.booleans())
def test_labels_accepted_only_as_1d_integers(y, strict, column_ok):
    try:
        out = as_labels(y, "f.npy", strict=strict, column_ok=column_ok)
    except PrismError as exc:
        msg = str(exc)
        assert msg.startswith("f.npy: ") and "\n" not in msg
        if y.ndim != 1 and not (column_ok and y.ndim > 1 and all(d == 1 for d in y.shape[1:])):
            assert "labels must be 1-D integers" in msg
        return
    assert out.ndim == 1 and out.dtype == np.int64 and (out >= 0).all()
    assert y.ndim == 1 or column_ok
    if strict:
        assert y.dtype.kind in "iu"
    assert np.array_equal(out, np.asarray(y).reshape(-1).astype(np.int64))


@PROPS
@given(data=st.data())
def test_overlap_detection_finds_exactly_the_planted_rows(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    d = data.draw(st.integers(1, 12))
    n_tr, n_te = data.draw(st.integers(4, 80)), data.draw(st.integers(2, 40))
    scale = data.draw(st.sampled_from([1e-6, 1.0, 1e3]))
    s = splits(n=(n_tr, 10, n_te), d=d, seed=int(rng.integers(1 << 30)))
    for part in s.values():
        part.X *= np.float32(scale)
    k = data.draw(st.integers(0, n_te))
    planted = rng.choice(n_te, size=k, replace=False)
    s["test"].X[planted] = s["train"].X[rng.integers(0, n_tr, size=k)]
    mask = row_overlap(s["train"].X, s["test"].X)
    truth = np.array([(s["train"].X == row).all(axis=1).any() for row in s["test"].X])
    assert np.array_equal(mask, truth) and set(planted) <= set(np.flatnonzero(mask))
    try:
        checks, _ = run_checks(s)
    except PrismError as exc:
        assert "same data" in str(exc) or "constant" in str(exc)
        assert truth.all() or (s["train"].X == s["train"].X[0]).all()
        return
    found = [c for c in checks if c["check"] == "split_overlap" and c["splits"] == ["train", "test"]]
    assert (found[0]["count"] if found else 0) == int(truth.sum())
