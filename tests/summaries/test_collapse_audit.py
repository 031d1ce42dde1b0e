"""Degeneracy audit (PROTOCOL §6.13)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from prism_plugin.errors import PrismError
from prism_plugin.summaries import collapse_audit
from prism_plugin.tables import RunTables

from tests.conftest import SHARED
REFERENCE = SHARED / "reference" / "prism_results_v2"


def test_reference_audit_has_28_plus_119_rows(reference_tables):
    out = collapse_audit.summarize(reference_tables, {})
    table = out.tables["degeneracy_audit"]
    assert list(table.columns) == ["dataset", "model", "fraction", "degenerate", "scope"]
    assert (table["scope"] == "in-distribution").sum() == 28
    assert (table["scope"] == "ood").sum() == 119
    assert out.headline == {"degenerate_cells_indomain": 28, "degenerate_cells_ood": 119}
    # in-distribution part first, each part in sorted key order
    assert table["scope"].tolist() == ["in-distribution"] * 28 + ["ood"] * 119
    for scope in ("in-distribution", "ood"):
        part = table.loc[table["scope"] == scope, ["dataset", "model", "fraction"]]
        keys = list(part.itertuples(index=False, name=None))
        assert keys == sorted(keys)
    # three seeds: shares are 1/3, 2/3 or 1
    assert np.isin(np.round(table["degenerate"] * 3), [1, 2, 3]).all()
    first = table.iloc[0]
    assert (first["dataset"], first["model"], first["fraction"]) == ("BRACS", "CLIP", 0.01)
    assert first["degenerate"] == pytest.approx(1 / 3)
    assert set(table.loc[table["scope"] == "ood", "dataset"]) <= {"BRACS->CRC", "CRC->BRACS", "MHIST->PCam", "PCam->MHIST"}


def test_audit_by_hand():
    ind = pd.DataFrame({
        "model": ["B", "B", "B", "A", "A", "A", "A"],
        "dataset": ["D2", "D2", "D2", "D1", "D1", "D1", "D1"],
        "fraction": [0.1, 0.1, 0.1, 0.1, 0.1, 1.0, 1.0],
        "seed": [1, 2, 3, 1, 2, 1, 2],
        "degenerate": [True, False, True, False, False, True, True],
    })
    tr = pd.DataFrame({
        "model": ["A", "A", "A"], "pair": ["D1->D2"] * 3, "src": ["D1"] * 3, "tgt": ["D2"] * 3,
        "fraction": [0.5, 0.5, 0.5], "seed": [1, 2, 3], "degenerate": ["False", "True", "False"],
    })
    got = collapse_audit.degeneracy_audit(ind, tr)
    assert got["dataset"].tolist() == ["D1", "D2", "D1->D2"]
    assert got["model"].tolist() == ["A", "B", "A"]
    assert got["fraction"].tolist() == [1.0, 0.1, 0.5]
    np.testing.assert_allclose(got["degenerate"], [1.0, 2 / 3, 1 / 3])
    assert got["scope"].tolist() == ["in-distribution", "in-distribution", "ood"]


def test_missing_parts():
    assert collapse_audit.summarize(RunTables(), {}) is None
    ind = pd.DataFrame({"model": ["A"], "dataset": ["D"], "fraction": [1.0], "degenerate": [False]})
    out = collapse_audit.summarize(RunTables(indomain=ind), {})
    assert out.tables["degeneracy_audit"].empty
    assert out.headline == {"degenerate_cells_indomain": 0}
    assert any("no transfer runs" in n for n in out.notes)
    bad = ind.assign(degenerate=["maybe"])
    with pytest.raises(PrismError, match="non-boolean"):
        collapse_audit.degeneracy_audit(bad, None)
