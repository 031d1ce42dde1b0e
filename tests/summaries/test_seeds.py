"""Breaking points (PROTOCOL §6.15) and seed variability (§6.16)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from prism_plugin.errors import PrismError
from prism_plugin.summaries import seeds
from prism_plugin.tables import RunTables, tables_from_reference_dir

from tests.conftest import SHARED
REFERENCE = SHARED / "reference" / "prism_results_v2"


@pytest.fixture(scope="module")
def reference_out():
    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"reference tables not found under {REFERENCE} (set PRISM_SHARED)")
    return seeds.summarize(tables_from_reference_dir(REFERENCE), {})


def test_reference_breaking_points(reference_out):
    bp = reference_out.tables["breaking_points_by_threshold"]
    assert list(bp.columns) == ["dataset", "model", "thr_0.4", "thr_0.5", "thr_0.6", "thr_0.7", "thr_0.8"]
    assert len(bp) == 48
    assert bp["dataset"].iloc[::8].tolist() == ["PCam", "BRACS", "CRC", "MHIST", "LungHist700", "SPIDER-Breast"]
    assert bp["model"].iloc[:8].tolist() == ["CLIP", "PLIP", "CONCH", "VIRCHOW2", "UNI", "GigaPath",
                                             "H-Optimus-0", "MIDNIGHT"]
    mhist_v2 = bp.loc[(bp["dataset"] == "MHIST") & (bp["model"] == "VIRCHOW2")].iloc[0]
    assert mhist_v2[2:].tolist() == [0.1, 0.25, 0.25, 0.5, 1.0]
    assert bp.loc[(bp["dataset"] == "LungHist700") & (bp["model"] == "CLIP"), "thr_0.4"].isna().all()
    # CHANGELOG: "moves by 0.64 on MHIST and 0.72 on LungHist700"
    assert reference_out.headline["breaking_point_moves_by_MHIST"] == pytest.approx(0.6375, abs=1e-12)
    assert reference_out.headline["breaking_point_moves_by_LungHist700"] == pytest.approx(0.71857142857, abs=1e-10)
    assert reference_out.headline["breaking_point_moves_by_PCam"] == 0.0


def test_reference_seed_variability(reference_out):
    for stem, col in (("seed_variability_auroc", "auroc"), ("seed_variability_ece", "ece_scaled_fixed")):
        t = reference_out.tables[stem]
        assert list(t.columns) == ["model", "dataset", "fraction", "mean", "std", "min", "max"]
        assert len(t) == 288
        assert t["model"].iloc[0] == "CLIP" and t["dataset"].iloc[0] == "BRACS" and t["fraction"].iloc[0] == 0.01
        # (mean of identical seeds may differ from them by one ulp)
        assert (t["min"] <= t["mean"] + 1e-15).all() and (t["mean"] <= t["max"] + 1e-15).all()
        # PROTOCOL §2.2: at f = 1 the three seeds fit the same probe -> std 0
        assert t.loc[t["fraction"] == 1.0, "std"].abs().max() < 1e-12
    auc = reference_out.tables["seed_variability_auroc"]
    first = auc.iloc[0]
    runs = [0.6584071093220386, 0.692112905595282]
    assert first["min"] == pytest.approx(runs[0]) and first["min"] <= runs[1]
    assert reference_out.notes == []


def _f1_table():
    # seed-mean f1 per fraction; two seeds each with symmetric noise
    curves = {
        ("D", "UNI"): {0.1: 0.45, 0.5: 0.62, 1.0: 0.81},   # reaches 0.4@0.1 0.5@0.5 0.6@0.5 0.7@1 0.8@1
        ("D", "CLIP"): {0.1: 0.30, 0.5: 0.55, 1.0: 0.58},  # 0.4@0.5 0.5@0.5
        ("D", "Other"): {0.1: 0.2, 0.5: 0.35, 1.0: 0.41},  # only 0.4@1 -> excluded from 'moves by'
        ("E", "UNI"): {0.1: 0.1, 0.5: 0.1, 1.0: 0.1},      # nothing reached
    }
    rows = []
    for (dataset, model), curve in curves.items():
        for f, v in curve.items():
            rows.append((model, dataset, f, 1, v - 0.01, 0.8))
            rows.append((model, dataset, f, 2, v + 0.01, 0.9))
    return pd.DataFrame(rows, columns=["model", "dataset", "fraction", "seed", "f1_macro", "auroc"]).assign(
        ece_scaled_fixed=lambda d: d["auroc"] / 10)


def test_breaking_points_by_hand():
    bp = seeds.breaking_points_by_threshold(_f1_table())
    assert bp["dataset"].tolist() == ["D", "D", "D", "E"]
    assert bp["model"].tolist() == ["CLIP", "UNI", "Other", "UNI"]
    np.testing.assert_array_equal(bp.iloc[1, 2:].to_numpy(float), [0.1, 0.5, 0.5, 1.0, 1.0])
    np.testing.assert_array_equal(bp.iloc[0, 2:].to_numpy(float), [0.5, 0.5, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(bp.iloc[2, 2:].to_numpy(float), [1.0] + [np.nan] * 4)
    assert bp.iloc[3, 2:].isna().all()
    moves = seeds.breaking_point_moves(bp)
    # D: UNI spread 0.9, CLIP spread 0.0, Other excluded (1 reached) -> 0.45; E: not defined
    assert moves["dataset"].tolist() == ["D", "E"]
    assert moves.loc[0, "moves_by"] == pytest.approx(0.45)
    assert moves.loc[0, "n_models"] == 2
    assert np.isnan(moves.loc[1, "moves_by"]) and moves.loc[1, "n_models"] == 0

    out = seeds.summarize(RunTables(indomain=_f1_table()), {})
    assert out.headline == {"breaking_point_moves_by_D": pytest.approx(0.45)}
    assert any("not defined for E" in n for n in out.notes)
    custom = seeds.summarize(RunTables(indomain=_f1_table()), {"breaking_point_thresholds": [0.3]})
    assert list(custom.tables["breaking_points_by_threshold"].columns) == ["dataset", "model", "thr_0.3"]


def test_threshold_reached_when_equal():
    ind = pd.DataFrame({"model": ["M"] * 4, "dataset": ["D"] * 4, "fraction": [0.1, 0.1, 0.25, 0.25],
                        "seed": [1, 2, 1, 2], "f1_macro": [0.5, 0.5, 0.6, 0.6]})
    bp = seeds.breaking_points_by_threshold(ind, thresholds=[0.5, 0.6, 0.61])
    np.testing.assert_array_equal(bp.iloc[0, 2:].to_numpy(float), [0.1, 0.25, np.nan])


def test_seed_variability_by_hand():
    ind = pd.DataFrame({
        "model": ["B", "B", "B", "A"], "dataset": ["D"] * 4, "fraction": [0.5] * 4, "seed": [1, 2, 3, 1],
        "auroc": [0.1, 0.2, 0.3, 0.9], "ece_scaled_fixed": [0.05, 0.05, 0.2, 0.1],
    })
    t = seeds.seed_variability_auroc(ind)
    assert t["model"].tolist() == ["A", "B"]  # sorted group order
    np.testing.assert_allclose(t.loc[1, ["mean", "std", "min", "max"]].to_numpy(float), [0.2, 0.1, 0.1, 0.3])
    assert np.isnan(t.loc[0, "std"])  # single run: ddof=1 std not defined
    e = seeds.seed_variability_ece(ind)
    np.testing.assert_allclose(e.loc[1, ["mean", "min", "max"]].to_numpy(float), [0.1, 0.05, 0.2])
    assert e.loc[1, "std"] == pytest.approx(np.std([0.05, 0.05, 0.2], ddof=1))
    out = seeds.summarize(RunTables(indomain=ind.assign(f1_macro=0.5)), {})
    assert any("std not defined" in n and "1 cell" in n for n in out.notes)


def test_missing_inputs():
    assert seeds.summarize(RunTables(), {}) is None
    with pytest.raises(PrismError, match="f1_macro"):
        seeds.breaking_points_by_threshold(_f1_table().drop(columns=["f1_macro"]))
