"""The report's own derived tables (report_cells, report_settings, fewshot_temperature),
the verdict built from them, and the rank points of the decoupling scatter, on
small hand-made results with hand-computed answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from prism_plugin.report import derived
from prism_plugin.report.basic import rank_points
from prism_plugin.report.verdict import build_verdict
from prism_plugin.report.verdict_rows import check_verdict, evidence_value
from prism_plugin.tables import RunTables


def _indomain() -> pd.DataFrame:
    rows = []
    # model A on D1 (binary): fractions 0.1 and 1.0, seeds 1 and 2
    spec = {
        0.1: dict(auroc=(0.6, 0.8), f1_macro=(0.5, 0.7), ece_fixed=(0.10, 0.20), ece_scaled_fixed=(0.20, 0.30),
                  temperature=(1.5, 2.5), degenerate=(True, False)),
        1.0: dict(auroc=(0.9, 0.9), f1_macro=(0.8, 0.8), ece_fixed=(0.05, 0.07), ece_scaled_fixed=(0.01, 0.03),
                  temperature=(3.0, 3.0), degenerate=(False, False)),
    }
    for f, cols in spec.items():
        for i, seed in enumerate((1, 2)):
            rows.append({"model": "A", "dataset": "D1", "fraction": f, "seed": seed, "n_classes": 2,
                         **{k: v[i] for k, v in cols.items()}})
    return pd.DataFrame(rows)


def _transfer(with_fewshot: bool = True) -> pd.DataFrame:
    rows = []
    spec = {
        0.1: dict(auroc=(0.7, 0.8), ece_fixed=(0.1, 0.1), ece_scaled_fixed=(0.05, 0.05), temperature_src=(2.0, 2.0),
                  ece_scaled_oracle=(0.04, 0.04), temperature_oracle=(4.0, 4.0),
                  temperature_fewshot_k4=(3.0, 3.0), ece_scaled_fewshot_k4=(0.05, 0.07),
                  temperature_fewshot_k16=(3.5, 3.5), ece_scaled_fewshot_k16=(0.05, 0.05)),
        1.0: dict(auroc=(0.8, 0.8), ece_fixed=(0.2, 0.2), ece_scaled_fixed=(0.25, 0.25), temperature_src=(1.0, 1.0),
                  ece_scaled_oracle=(0.05, 0.05), temperature_oracle=(5.0, 5.0),
                  temperature_fewshot_k4=(2.0, 2.0), ece_scaled_fewshot_k4=(0.10, 0.12),
                  temperature_fewshot_k16=(4.5, 4.5), ece_scaled_fewshot_k16=(0.06, 0.06)),
    }
    for f, cols in spec.items():
        for i, seed in enumerate((1, 2)):
            row = {"model": "A", "src": "D1", "tgt": "D2", "pair": "D1->D2", "fraction": f, "seed": seed,
                   "degenerate": False, **{k: v[i] for k, v in cols.items()}}
            if not with_fewshot:
                row = {k: v for k, v in row.items() if "fewshot" not in k}
            rows.append(row)
    return pd.DataFrame(rows)


def test_report_cells_by_hand():
    cells = derived.report_cells(RunTables(indomain=_indomain()))
    assert list(cells[["table", "model", "setting"]].drop_duplicates().itertuples(index=False, name=None)) == [
        ("indomain", "A", "D1")]
    lo = cells.loc[cells["fraction"] == 0.1].iloc[0]
    hi = cells.loc[cells["fraction"] == 1.0].iloc[0]
    assert lo["n_runs"] == 2 and lo["neutral_temperature"] == 2.0  # binary under [-d, d]
    assert lo["auroc_mean"] == pytest.approx(0.7) and lo["auroc_min"] == 0.6 and lo["auroc_max"] == 0.8
    assert lo["auroc_std"] == pytest.approx(math.sqrt(0.02))  # ddof = 1 of (0.6, 0.8)
    assert lo["ece_fixed_mean"] == pytest.approx(0.15) and lo["ece_scaled_fixed_mean"] == pytest.approx(0.25)
    assert lo["temperature_mean"] == 2.0 and lo["temperature_min"] == 1.5 and lo["temperature_max"] == 2.5
    assert lo["collapsed_runs"] == 1 and lo["collapsed_share"] == 0.5
    assert lo["scaling_helps"] is False or lo["scaling_helps"] == False  # noqa: E712 - 0.25 >= 0.15
    assert hi["scaling_helps"] == True  # noqa: E712 - 0.02 < 0.06
    assert hi["collapsed_runs"] == 0
    natural = derived.report_cells(RunTables(indomain=_indomain()), binary_logits="natural")
    assert set(natural["neutral_temperature"]) == {1.0}


def test_report_settings_by_hand():
    tables = RunTables(indomain=_indomain(), transfer=_transfer())
    cells = derived.report_cells(tables)
    fs = derived.fewshot_temperature(tables)
    s = derived.report_settings(cells, fs).set_index("table")
    ind = s.loc["indomain"]
    assert ind["collapsed_cells"] == 1 and ind["collapsed_fractions"] == "0.1"
    assert ind["largest_collapsed_fraction"] == 0.1 and ind["collapse_free_from"] == 1.0
    assert ind["scaling_cells"] == 2 and ind["scaling_not_helping_cells"] == 1
    assert ind["scaling_not_helping_fractions"] == "0.1" and ind["worst_scaling_fraction"] == 0.1
    assert ind["worst_scaling_gap"] == pytest.approx(0.10)
    assert ind["auroc_lo"] == pytest.approx(0.7) and ind["auroc_hi"] == pytest.approx(0.9)
    assert math.isnan(ind["transfer_auroc"])
    tr = s.loc["transfer"]
    assert tr["setting"] == "D1->D2" and tr["neutral_temperature"] == 2.0
    assert tr["transfer_auroc"] == pytest.approx((0.75 + 0.8) / 2)  # mean over fractions of seed means
    assert tr["target_ece_delta"] == pytest.approx(0.1) and tr["target_ece_rises"] == True  # noqa: E712
    assert tr["scaling_not_helping_cells"] == 1 and tr["scaling_not_helping_fractions"] == "1"
    # few-shot at 100 %: K=4 gap 0.11-0.05 = 0.06 (> 0.02), K=16 gap 0.01 -> 16 labels needed
    assert tr["fewshot_ks"] == "4;16" and tr["fewshot_k_needed"] == 16
    assert tr["fewshot_fractions_not_within"] == 0  # at 10 %: K=4 gap 0.02 (within), K=16 0.01


def test_fewshot_table_by_hand():
    fs = derived.fewshot_temperature(RunTables(transfer=_transfer()))
    assert list(fs.columns) == derived.FEWSHOT_COLUMNS
    row = fs.loc[(fs["fraction"] == 1.0) & (fs["k"] == 4)].iloc[0]
    assert row["ece_scaled_fewshot"] == pytest.approx(0.11) and row["ece_scaled_oracle"] == pytest.approx(0.05)
    assert row["gap"] == pytest.approx(0.06) and row["within"] == False  # noqa: E712
    assert row["temperature_fewshot"] == 2.0 and row["n_runs"] == 2
    tight = derived.fewshot_temperature(RunTables(transfer=_transfer()), tolerance=0.005)
    assert not tight["within"].astype(bool).any()
    assert derived.fewshot_temperature(RunTables(transfer=_transfer(with_fewshot=False))).empty


def test_summarize_hook_tables_and_notes():
    out = derived.summarize(RunTables(indomain=_indomain(), transfer=_transfer(with_fewshot=False)), {})
    assert set(out.tables) == {"report_cells", "report_settings"}
    assert any("fewshot_temperature not computed" in n for n in out.notes)
    assert derived.summarize(RunTables(), {}) is None


def test_verdict_lines_and_evidence():
    tables = RunTables(indomain=_indomain(), transfer=_transfer())
    out = derived.summarize(tables, {})
    v = build_verdict(out.tables["report_settings"])
    by_topic = {t: v.loc[v["topic"] == t] for t in v["topic"].unique()}
    collapse = by_topic["collapse"].iloc[0]
    assert collapse["setting"] == "D1" and "10 %" in collapse["text"] and "from 100 %" in collapse["text"]
    assert collapse["value"] == 0.1 and collapse["column"] == "largest_collapsed_fraction"
    scaling = by_topic["scaling"]
    assert set(scaling["value"]) == {1}
    transfer = by_topic["transfer"].iloc[0]
    assert transfer["level"] == "bad" and "0.775" in transfer["text"] and "0.85" in transfer["text"]
    fewshot = by_topic["fewshot"].iloc[0]
    assert fewshot["value"] == 16 and "16 labelled target samples" in fewshot["text"]
    assert check_verdict(v, out.tables) == []
    tampered = v.copy()
    tampered.loc[tampered["topic"] == "fewshot", "value"] = 8
    assert len(check_verdict(tampered, out.tables)) == 1
    where = json.loads(transfer["where"])
    assert evidence_value(out.tables["report_settings"], where, "transfer_auroc", "value") == pytest.approx(0.775)


def test_verdict_without_transfer_says_not_measured():
    out = derived.summarize(RunTables(indomain=_indomain()), {})
    v = build_verdict(out.tables["report_settings"])
    na = v.loc[v["level"] == "na"]
    assert len(na) == 1 and na.iloc[0]["topic"] == "transfer" and na.iloc[0]["source"] == ""


def test_rank_points_by_hand():
    cells = pd.DataFrame({
        "model": ["a", "b", "c", "a", "b"], "setting": ["D"] * 3 + ["E"] * 2, "fraction": [1.0] * 5,
        "auroc_mean": [0.9, 0.8, 0.8, 0.7, 0.6], "ece_scaled_fixed_mean": [0.3, 0.1, 0.2, 0.1, 0.2],
    })
    pts = rank_points(cells).set_index("model")
    assert list(pts.index) == ["a", "b", "c"]  # dataset E has 2 models: left out
    assert pts.loc["a", "rank_auroc"] == 1 and pts.loc["b", "rank_auroc"] == 2.5 and pts.loc["c", "rank_auroc"] == 2.5
    assert pts.loc["a", "rank_cal"] == 3 and pts.loc["b", "rank_cal"] == 1 and pts.loc["c", "rank_cal"] == 2
    assert rank_points(cells.loc[cells["setting"] == "E"]).empty


def test_hospital_settings_and_camelyon_transfer_are_binary():
    cam = pd.DataFrame({"model": ["A"] * 2, "hospital": [0, 3], "fraction": [1.0, 1.0], "seed": [1, 1],
                        "auroc": [0.9, 0.8], "ece_fixed": [0.1, 0.2], "ece_scaled_fixed": [0.05, 0.1],
                        "temperature": [2.5, 1.5], "degenerate": ["False", "True"]})
    cells = derived.report_cells(RunTables(camelyon17_indomain=cam))
    assert list(cells["setting"]) == ["h0", "h3"]
    assert list(cells["neutral_temperature"]) == [2.0, 2.0]
    assert list(cells["collapsed_runs"]) == [0.0, 1.0]  # "True"/"False" strings read as flags
    assert np.isnan(cells["f1_macro_mean"]).all()  # column absent -> NaN, not an error
