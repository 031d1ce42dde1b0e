"""The prevalence-aware collapse columns of the built-in collapse plugin, on constructed
predictions with hand-computed answers; PRISM's degeneracy_share / degenerate stay as defined."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prism_plugin.metrics import collapse
from prism_plugin.metrics.collapse import RECALL_FLOOR, collapse_stats


def _run(y, pred, k=2):
    return collapse.run_metrics(SimpleNamespace(y_test=np.asarray(y), pred_test=np.asarray(pred), n_classes=k))


def test_skewed_target_predicted_nearly_right_is_not_collapse():
    # 977 of 1000 test samples are class 0; the probe predicts 992 zeros and finds 8 of the 23 ones
    y = np.array([0] * 977 + [1] * 23)
    pred = y.copy()
    pred[977 + 8:] = 0
    out = _run(y, pred)
    assert out["degeneracy_share"] == pytest.approx(0.992) and out["degenerate"] is True  # PRISM: > 0.99
    assert out["top_class_true_share"] == pytest.approx(0.977)
    assert out["min_class_recall"] == pytest.approx(8 / 23) and out["other_class_recall_max"] == pytest.approx(8 / 23)
    assert out["collapsed"] is False
    assert out["n_test_classes"] == 2 and out["min_test_class_count"] == 23


def test_share_below_099_with_zero_minority_recall_is_collapse():
    # 900 / 100 test split; 98.8 % predicted class 0, the 12 predicted ones are all wrong
    y = np.array([0] * 900 + [1] * 100)
    pred = np.zeros(1000, dtype=int)
    pred[:12] = 1
    out = _run(y, pred)
    assert out["degeneracy_share"] == pytest.approx(0.988) and out["degenerate"] is False
    assert out["min_class_recall"] == 0.0 and out["other_class_recall_max"] == 0.0
    assert out["collapsed"] is True


def test_recall_floor_is_inclusive_and_prevalence_matters():
    y = np.array([0] * 80 + [1] * 20)
    pred = np.zeros(100, dtype=int)
    pred[80] = 1  # one of the 20 ones found: recall 0.05 = the floor -> still collapsed
    assert _run(y, pred)["collapsed"] is True
    pred[81] = 1  # recall 0.10 > floor
    assert _run(y, pred)["collapsed"] is False
    assert RECALL_FLOOR == 0.05


def test_one_class_test_split_is_never_collapsed():
    out = _run(np.zeros(50, dtype=int), np.zeros(50, dtype=int))
    assert out["degenerate"] is True and out["collapsed"] is False
    assert out["n_test_classes"] == 1 and np.isnan(out["other_class_recall_max"])
    assert out["min_class_recall"] == 1.0 and out["top_class_true_share"] == 1.0


def test_multiclass_collapse_onto_one_class_and_onto_an_absent_class():
    y = np.repeat([0, 1, 2, 3], 25)
    out = _run(y, np.full(100, 2), k=4)
    assert out["collapsed"] is True and out["top_class_true_share"] == 0.25 and out["min_class_recall"] == 0.0
    # predicted class 3 never occurs in the test split: true share 0, every present class missed
    out = _run(np.repeat([0, 1, 2], 10), np.full(30, 3), k=4)
    assert out["collapsed"] is True and out["top_class_true_share"] == 0.0 and out["n_test_classes"] == 3
    # one class missed while the others are recalled: not a collapse onto one class
    pred = y.copy()
    pred[y == 3] = 0
    out = _run(y, pred, k=4)
    assert out["min_class_recall"] == 0.0 and out["other_class_recall_max"] == 1.0 and out["collapsed"] is False


def test_empty_test_split():
    out = collapse_stats(np.array([], dtype=int), np.array([], dtype=int), 2)
    assert out["collapsed"] is False and np.isnan(out["min_class_recall"]) and out["min_test_class_count"] == 0


def test_prism_columns_keep_their_definition():
    y = np.array([0, 1] * 50)
    pred = np.array([0] * 99 + [1])
    out = _run(y, pred)
    assert out["degeneracy_share"] == 0.99 and out["degenerate"] is False  # strict > 0.99 (PROTOCOL §3)
    assert list(out)[:2] == ["degeneracy_share", "degenerate"]
    assert tuple(list(out)[2:]) == collapse.COLLAPSE_COLUMNS


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4).flatmap(lambda k: st.tuples(
    st.just(k), st.lists(st.tuples(st.integers(0, k - 1), st.integers(0, k - 1)), min_size=1, max_size=60))))
def test_collapse_invariants(case):
    k, pairs = case
    y, pred = (np.array(v) for v in zip(*pairs))
    out = collapse_stats(y, pred, k)
    assert 0.0 <= out["min_class_recall"] <= 1.0
    assert out["n_test_classes"] == len(set(y.tolist()))
    if out["collapsed"]:
        share = np.bincount(pred, minlength=k).max() / len(pred)
        assert share > out["top_class_true_share"] and out["other_class_recall_max"] <= RECALL_FLOOR
        assert out["n_test_classes"] >= 2
    assert collapse_stats(y, y, k)["collapsed"] is False  # perfect predictions never collapse
