"""Temperature-scaling counts (PROTOCOL §6.12): reference numbers and hand-made tables."""

from __future__ import annotations


import pandas as pd
import pluggy
import pytest

import prism_plugin.hookspecs as hookspecs
from prism_plugin.summaries import temperature_counts as tc
from prism_plugin.tables import RunTables, SummaryOutput

from tests.conftest import SHARED
REFERENCE = SHARED / "reference" / "prism_results_v2"


@pytest.fixture(scope="module")
def summary(reference_tables) -> SummaryOutput:
    return tc.summarize(reference_tables, {})


# --------------------------------------------------------------------------- reference
def test_scaling_fails_49_of_288(summary):
    h = summary.headline
    assert (h["ts_indomain_cells_worse"], h["ts_indomain_cells_worse_total"]) == (49, 288)
    split = {d: h[f"ts_indomain_cells_worse_{d}"] for d in
             ("MHIST", "PCam", "LungHist700", "BRACS", "SPIDER-Breast", "CRC")}
    assert split == {"MHIST": 16, "PCam": 13, "LungHist700": 11, "BRACS": 5, "SPIDER-Breast": 4, "CRC": 0}
    # nearby definitions (§6.12): adaptive bins 42, majority of seeds 50, per run 158/864
    assert h["ts_indomain_cells_worse_adaptive"] == 42
    assert h["ts_indomain_cells_worse_majority"] == 50
    assert (h["ts_indomain_runs_worse"], h["ts_indomain_runs_worse_total"]) == (158, 864)


def test_temperature_below_one(summary):
    h = summary.headline
    assert (h["ts_multiclass_cells_T_lt_1"], h["ts_multiclass_cells_T_lt_1_total"]) == (189, 192)
    assert h["ts_multiclass_cells_T_ge_1"] == "BRACS 1pct CLIP; BRACS 1pct H-Optimus-0; BRACS 1pct PLIP"
    assert (h["ts_multiclass_runs_T_lt_1"], h["ts_multiclass_runs_T_lt_1_total"]) == (565, 576)
    assert (h["ts_binary_cells_T_lt_1"], h["ts_binary_cells_T_lt_1_total"]) == (0, 96)
    assert (h["ts_binary_cells_T_lt_2"], h["ts_binary_cells_T_lt_2_total"]) == (63, 96)


def test_transfer_counts(summary):
    h = summary.headline
    assert (h["ts_transfer_cells_worse"], h["ts_transfer_cells_worse_total"]) == (117, 192)
    assert round(h["ts_transfer_cells_worse_pct"], 1) == 60.9
    assert round(h["ts_transfer_runs_worse_pct"], 1) == 60.6
    assert (h["ts_transfer_combos_worse_100pct"], h["ts_transfer_combos_worse_100pct_total"]) == (17, 32)
    assert h["ts_transfer_combos_worse_1pct"] == 15
    assert h["ts_transfer_combos_worse_allfractions"] == 21
    for pair in ("MHIST->PCam", "CRC->BRACS"):
        assert h[f"ts_transfer_models_worse_{pair}_100pct"] == 8
        assert h[f"ts_transfer_models_worse_{pair}_100pct_total"] == 8
    assert round(h["ts_camelyon17_runs_worse_pct"], 1) == 15.6
    assert h["ts_camelyon17_runs_worse_total"] == 2880
    assert summary.notes == []


def test_table_layout(summary):
    t = summary.tables["temperature_scaling_counts"]
    assert list(t.columns) == ["scope", "subset", "unit", "rule", "count", "total", "percent"]
    first = t.iloc[0]
    assert (first["scope"], first["unit"], first["count"], first["total"]) == ("in-distribution", "cell", 49, 288)
    assert len(t) < 40
    assert (t["count"] <= t["total"]).all()


# --------------------------------------------------------------------------- hand-made
def _indomain() -> pd.DataFrame:
    rows = []
    # dataset, n_classes, model, fraction, [(ece_fixed, ece_scaled_fixed, temperature) per seed]
    spec = [
        ("Bin", 2, "A", 0.1, [(0.10, 0.12, 1.5), (0.10, 0.06, 2.5)]),   # mean 0.10 vs 0.09: improves; T 2.0
        ("Bin", 2, "B", 0.1, [(0.10, 0.11, 1.8), (0.10, 0.11, 1.9)]),   # worse; T < 2
        ("Bin", 2, "A", 1.0, [(0.10, 0.10, 0.9), (0.10, 0.10, 0.9)]),   # equal: not worse; T < 1
        ("Multi", 5, "A", 0.1, [(0.30, 0.05, 0.5), (0.30, 0.05, 0.7)]),  # T < 1
        ("Multi", 5, "B", 0.1, [(0.30, 0.35, 1.2), (0.30, 0.20, 0.7)]),  # 0.30 vs 0.275; T 0.95 < 1
        ("Multi", 5, "A", 1.0, [(0.30, 0.31, 1.0), (0.30, 0.31, 1.0)]),  # worse; T = 1 not < 1
    ]
    for dataset, k, model, f, seeds in spec:
        for s, (raw, scaled, t) in zip((1, 2), seeds):
            rows.append({"model": model, "dataset": dataset, "fraction": f, "seed": s, "n_classes": k,
                         "ece_fixed": raw, "ece_scaled_fixed": scaled, "temperature": t,
                         "ece_adaptive": raw, "ece_scaled_adaptive": raw - 0.01})
    return pd.DataFrame(rows)


def test_hand_made_indomain_counts():
    table, h, notes = tc.temperature_scaling_counts(RunTables(indomain=_indomain()))
    assert (h["ts_indomain_cells_worse"], h["ts_indomain_cells_worse_total"]) == (2, 6)
    assert h["ts_indomain_cells_worse_Bin"] == 1 and h["ts_indomain_cells_worse_Multi"] == 1
    assert h["ts_indomain_cells_worse_adaptive"] == 0
    # per run: B/0.1 both seeds, A/0.1 seed 1, Multi B seed 1, Multi A/1.0 both seeds
    assert (h["ts_indomain_runs_worse"], h["ts_indomain_runs_worse_total"]) == (6, 12)
    # majority (> half) of seeds: Bin B, Multi A 1.0 (2 of 2); 1 of 2 is not a majority
    assert h["ts_indomain_cells_worse_majority"] == 2
    assert (h["ts_multiclass_cells_T_lt_1"], h["ts_multiclass_cells_T_lt_1_total"]) == (2, 3)
    assert h["ts_multiclass_cells_T_ge_1"] == "Multi 100pct A"
    assert (h["ts_multiclass_runs_T_lt_1"], h["ts_multiclass_runs_T_lt_1_total"]) == (3, 6)
    assert (h["ts_binary_cells_T_lt_1"], h["ts_binary_cells_T_lt_2"], h["ts_binary_cells_T_lt_2_total"]) == (1, 2, 3)
    assert notes == []
    assert table.loc[0, "percent"] == pytest.approx(100 * 2 / 6)


def test_missing_n_classes_not_defined():
    ind = _indomain().drop(columns=["n_classes"])
    _, h, notes = tc.temperature_scaling_counts(RunTables(indomain=ind))
    assert h["ts_indomain_cells_worse"] == 2
    assert h["ts_multiclass_cells_T_lt_1"].startswith("not defined")
    assert "n_classes" in h["ts_multiclass_cells_T_lt_1"]
    assert any("not defined" in n for n in notes)


def test_hand_made_transfer_counts():
    rows = []
    for model, pair, f, raw, scaled in [
        ("A", "X->Y", 0.01, 0.2, 0.3), ("A", "X->Y", 1.0, 0.2, 0.1),
        ("B", "X->Y", 0.01, 0.2, 0.1), ("B", "X->Y", 1.0, 0.2, 0.25),
        ("A", "Y->X", 0.01, 0.2, 0.2), ("A", "Y->X", 1.0, 0.2, 0.5),
    ]:
        for s in (1, 2):
            rows.append({"model": model, "pair": pair, "fraction": f, "seed": s,
                         "ece_fixed": raw, "ece_scaled_fixed": scaled})
    tr = pd.DataFrame(rows)
    cam = tr.assign(pair="h0->h1")
    _, h, _ = tc.temperature_scaling_counts(RunTables(transfer=tr, camelyon17_transfer=cam))
    assert (h["ts_transfer_cells_worse"], h["ts_transfer_cells_worse_total"]) == (3, 6)
    assert (h["ts_transfer_runs_worse"], h["ts_transfer_runs_worse_total"]) == (6, 12)
    assert (h["ts_transfer_combos_worse_1pct"], h["ts_transfer_combos_worse_100pct"]) == (1, 2)
    # all-fraction means: A X->Y 0.2 vs 0.2 (no), B X->Y 0.2 vs 0.175 (no), A Y->X 0.2 vs 0.35 (yes)
    assert h["ts_transfer_combos_worse_allfractions"] == 1
    assert (h["ts_transfer_models_worse_X->Y_100pct"], h["ts_transfer_models_worse_X->Y_100pct_total"]) == (1, 2)
    assert h["ts_transfer_models_worse_Y->X_100pct"] == 1
    assert h["ts_camelyon17_runs_worse_pct"] == pytest.approx(50.0)
    assert "ts_indomain_cells_worse" not in h


def test_hook():
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(tc)
    [out] = pm.hook.summarize(tables=RunTables(indomain=_indomain()), options={})
    assert set(out.tables) == {"temperature_scaling_counts"}
    assert out.headline["ts_indomain_cells_worse"] == 2
    assert pm.hook.summarize(tables=RunTables(), options={}) == []
