"""Label budget tables (PROTOCOL §6.14)."""

from __future__ import annotations


import pandas as pd
import pytest

from prism_plugin.errors import PrismError
from prism_plugin.summaries import budget
from prism_plugin.tables import RunTables, tables_from_reference_dir

from tests.conftest import SHARED
REFERENCE = SHARED / "reference" / "prism_results_v2"


@pytest.fixture(scope="module")
def reference_tables() -> RunTables:
    if not (REFERENCE / "indomain_propval.csv").exists():
        pytest.skip(f"reference tables not found under {REFERENCE} (set PRISM_SHARED)")
    return tables_from_reference_dir(REFERENCE)


def test_reproduces_label_budget_accounting(reference_tables):
    got = budget.label_budget_accounting(reference_tables.indomain_propval)
    ref = pd.read_csv(REFERENCE / "label_budget_accounting.csv")
    pd.testing.assert_frame_equal(got, ref, check_exact=True)


def test_reproduces_camelyon17_label_budget_from_tables(reference_tables):
    out = budget.summarize(reference_tables, {})
    ref = pd.read_csv(REFERENCE / "camelyon17_label_budget.csv")
    pd.testing.assert_frame_equal(out.tables["camelyon17_label_budget"], ref, check_exact=True)
    pd.testing.assert_frame_equal(out.tables["label_budget_accounting"],
                                  pd.read_csv(REFERENCE / "label_budget_accounting.csv"), check_exact=True)
    assert out.notes == []  # closed form agrees with every run's n_train


def test_camelyon17_label_budget_explicit_hospitals():
    ref = pd.read_csv(REFERENCE / "camelyon17_label_budget.csv") if REFERENCE.exists() else None
    got = budget.camelyon17_label_budget(range(5))
    assert len(got) == 30
    if ref is not None:
        pd.testing.assert_frame_equal(got, ref, check_exact=True)
    out = budget.summarize(RunTables(), {"camelyon17_hospitals": [0, 1, 2, 3, 4]})
    assert out.tables["camelyon17_label_budget"].equals(got)
    assert "label_budget_accounting" not in out.tables
    assert any("label_budget_accounting not computed" in n for n in out.notes)


def test_camelyon17_closed_form_by_hand():
    row = budget.camelyon17_budget_row(0.01)
    assert row == {"fraction": 0.01, "n_train": 140, "val_full": 3000, "val_prop": 30,
                   "total_full": 3140, "total_prop": 170, "val_share_full": 3000 / 3140}
    # floor and the max(1, .) floor of the closed form: 14000*0.001/2 = 7, 3000*0.001/2 = 1.5 -> 1
    row = budget.camelyon17_budget_row(0.001)
    assert (row["n_train"], row["val_prop"]) == (14, 2)
    row = budget.camelyon17_budget_row(0.0001)  # 0.7 and 0.15 -> max(1, 0) = 1
    assert (row["n_train"], row["val_prop"], row["total_prop"]) == (2, 2, 4)
    with pytest.raises(PrismError):
        budget.camelyon17_label_budget([0], [1.5])


def test_camelyon17_hospitals_present_only():
    cam_id = pd.DataFrame({"model": ["M"] * 2, "hospital": [3, 1], "fraction": [0.5, 1.0], "seed": [1, 1],
                           "n_train": [7000, 14000]})
    cam_tr = pd.DataFrame({"model": ["M"], "src": [4], "tgt": [1], "pair": ["h4->h1"], "fraction": [1.0],
                           "seed": [1], "n_train": [14001]})
    out = budget.summarize(RunTables(camelyon17_indomain=cam_id, camelyon17_transfer=cam_tr), {})
    t = out.tables["camelyon17_label_budget"]
    assert t["hospital"].tolist() == [1, 1, 3, 3, 4, 4]
    assert t["fraction"].tolist() == [0.5, 1.0] * 3
    assert t["n_train"].tolist() == [7000, 14000] * 3
    assert t["val_prop"].tolist() == [1500, 3000] * 3
    assert any("1 run(s) of camelyon17_transfer" in n for n in out.notes)


def _propval():
    rows = [
        # dataset X: mean n_train at 0.5 = 32/3 = 10.67 -> int 10 (truncation); n_val 14/3 = 4.67 -> 4
        ("A", "X", 0.5, 1, 10, 4), ("B", "X", 0.5, 1, 11, 5), ("C", "X", 0.5, 1, 11, 5),
        ("A", "X", 1.0, 1, 21, 9), ("B", "X", 1.0, 1, 21, 9),
        # dataset PCam listed after X in the file but first in the reference order
        ("A", "PCam", 0.1, 1, 100, 30), ("A", "PCam", 1.0, 1, 1000, 300),
        # dataset Y has no fraction 1.0 -> full validation size unknown
        ("A", "Y", 0.5, 1, 50, 5),
    ]
    return pd.DataFrame(rows, columns=["model", "dataset", "fraction", "seed", "n_train", "n_val"])


def test_label_budget_accounting_by_hand():
    got = budget.label_budget_accounting(_propval())
    assert list(got.columns) == budget.LABEL_BUDGET_COLUMNS
    assert got.to_dict("list") == {
        "dataset": ["PCam", "PCam", "X", "X"],
        "fraction": [0.1, 1.0, 0.5, 1.0],
        "n_train": [100, 1000, 10, 21],
        "val_original": [300, 300, 9, 9],
        "val_proportional": [30, 300, 4, 9],
        "total_original": [400, 1300, 19, 30],
        "total_proportional": [130, 1300, 14, 30],
        "val_share_original": [300 / 400, 300 / 1300, 9 / 19, 9 / 30],
    }
    out = budget.summarize(RunTables(indomain_propval=_propval()), {})
    assert any("not defined for Y" in n for n in out.notes)
    assert "camelyon17_label_budget" not in out.tables


def test_missing_inputs():
    assert budget.summarize(RunTables(), {}) is None
    with pytest.raises(PrismError, match="n_val"):
        budget.label_budget_accounting(_propval().drop(columns=["n_val"]))
