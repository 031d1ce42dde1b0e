"""Mechanism summaries (PROTOCOL §6.10-6.11): reference numbers and hand-made tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pluggy
import pytest

import prism_plugin.hookspecs as hookspecs
from prism_plugin.summaries import mechanism as mech
from prism_plugin.tables import RunTables, SummaryOutput, tables_from_reference_dir

from tests.conftest import SHARED
REFERENCE = SHARED / "reference" / "prism_results_v2"
MODELS = ["CLIP", "CONCH", "GigaPath", "H-Optimus-0", "MIDNIGHT", "PLIP", "UNI", "VIRCHOW2"]


@pytest.fixture(scope="module")
def reference_tables() -> RunTables:
    if not (REFERENCE / "ood_all_v2.csv").exists():
        pytest.skip(f"reference tables not found under {REFERENCE} (set PRISM_SHARED)")
    return tables_from_reference_dir(REFERENCE)


@pytest.fixture(scope="module")
def summary(reference_tables) -> SummaryOutput:
    return mech.summarize(reference_tables, {})


def make_transfer(combos: dict, seeds=(1, 2)) -> pd.DataFrame:
    """combos: {(model, pair): {fraction: (ece_fixed, auroc, degenerate)}}; every
    seed gets the same values except ``degenerate`` which is set on the first seed only."""
    rows = []
    for (model, pair), by_f in combos.items():
        for f, (ece, auroc, degenerate) in by_f.items():
            for i, s in enumerate(seeds):
                rows.append({"model": model, "pair": pair, "src": pair.split("->")[0], "tgt": pair.split("->")[1],
                             "fraction": f, "seed": s, "ece_fixed": ece, "auroc": auroc,
                             "degeneracy_share": 1.0 if (degenerate and i == 0) else 0.5,
                             "degenerate": bool(degenerate and i == 0)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- reference
def test_summary_layout(summary):
    s = summary.tables["mechanism_summary"]
    assert list(s.columns) == mech.SUMMARY_COLUMNS == [
        "design", "model", "pair", "ece_lo", "ece_hi", "ece_delta", "ece_slope", "rises",
        "auroc_lo", "auroc_hi", "auroc_mean", "auroc_dist", "degeneracy", "degenerate_share"]
    assert len(s) == 192
    assert list(s["design"]) == ["label-definition"] * 32 + ["covariate"] * 160
    assert list(s["model"][:32]) == [m for m in MODELS for _ in range(4)]
    assert list(s["pair"][:4]) == ["BRACS->CRC", "CRC->BRACS", "MHIST->PCam", "PCam->MHIST"]
    assert list(s["pair"][32:36]) == ["h0->h1", "h0->h2", "h0->h3", "h0->h4"]
    assert s["rises"].dtype == bool


def test_summary_values_match_published(summary):
    s = summary.tables["mechanism_summary"].set_index(["design", "model", "pair"])
    # published mechanism_summary.csv rows (upstream results_v2)
    published = {
        ("label-definition", "CLIP", "BRACS->CRC"): [
            0.21480456430819891, 0.2999201632964821, 0.08511559898828316, 0.04210680296971747, True,
            0.6672765126380277, 0.5265005905456619, 0.5288376377647818, 0.028837637764781765,
            0.7547296296296298, 0.16666666666666666],
        ("label-definition", "PLIP", "MHIST->PCam"): [
            0.2158091462338754, 0.2067550421375808, -0.00905410409629459, -0.00623546042293007, False,
            0.4970365341310334, 0.5750009498560672, 0.5510678519064033, 0.05106785190640328,
            0.9884440104166666, 0.6666666666666666],
        ("covariate", "CLIP", "h3->h4"): [
            0.17814956878720867, 0.4619809610369197, 0.28383139224971105, None, True,
            0.7192364444444445, 0.7936164444444445, 0.7634052345679011, 0.2634052345679011,
            0.996462962962963, 1.0],
    }
    cols = mech.SUMMARY_COLUMNS[3:]
    for key, values in published.items():
        row = s.loc[key, cols]
        for col, want in zip(cols, values):
            if want is None:
                continue
            if isinstance(want, bool):
                assert bool(row[col]) is want
            else:
                assert row[col] == pytest.approx(want, abs=4e-16), (key, col)


def test_headline(summary):
    h = summary.headline
    assert round(h["mechanism_spearman_slope_all"], 3) == -0.782
    assert h["mechanism_spearman_slope_all_n"] == 192
    assert round(h["mechanism_spearman_slope_covariate"], 3) == -0.647
    assert round(h["mechanism_spearman_slope_nondegenerate"], 3) == -0.664
    assert h["mechanism_spearman_slope_nondegenerate_n"] == 163
    assert (h["mechanism_label_definition_rises"], h["mechanism_label_definition_n"]) == (28, 32)
    assert round(h["mechanism_label_definition_mean_delta"], 4) == 0.0820
    assert (h["mechanism_covariate_rises"], h["mechanism_covariate_n"]) == (10, 160)
    assert round(h["mechanism_covariate_mean_delta"], 4) == -0.1492
    assert round(h["mechanism_covariate_CLIP_auroc_mean"], 3) == 0.849
    assert (h["mechanism_covariate_CLIP_rises"], h["mechanism_covariate_CLIP_n"]) == (8, 20)
    assert (h["mechanism_covariate_others_rises"], h["mechanism_covariate_others_n"]) == (2, 140)
    assert round(h["mechanism_covariate_others_auroc_mean_min"], 2) == 0.97
    assert round(h["mechanism_covariate_others_auroc_mean_max"], 2) == 0.99
    assert h["mechanism_slope_endpoint_disagreements"] == 1
    assert summary.notes == []


def test_bands_match_published(summary):
    b = summary.tables["mechanism_bands"]
    published = pd.DataFrame({
        "band": ["[0.00, 0.55)", "[0.55, 0.70)", "[0.70, 0.85)", "[0.85, 0.95)", "[0.95, 1.01)"],
        "n": [16, 17, 7, 13, 139],
        "rises": [14, 15, 6, 1, 2],
        "rate": [87.5, 88.2, 85.7, 7.7, 1.4],
        "mean_delta": [0.0808, 0.0892, 0.1098, -0.0735, -0.1718],
        "designs": ["label-definition", "covariate, label-definition", "covariate, label-definition",
                    "covariate", "covariate"],
    })
    assert list(b.columns) == ["band", "n", "rises", "rate", "mean_delta", "designs"]
    assert b["band"].tolist() == published["band"].tolist()
    assert b["designs"].tolist() == published["designs"].tolist()
    for col in ("n", "rises", "rate", "mean_delta"):
        assert b[col].tolist() == published[col].tolist(), col


def test_camelyon17_ece_trend(summary):
    t = summary.tables["camelyon17_ece_trend"]
    assert list(t.columns) == ["model", "pair", "lo", "hi", "delta", "rises", "monotone"]
    assert len(t) == 160
    assert int(t["rises"].sum()) == 10 and int(t["monotone"].sum()) == 5
    clip = t.loc[t["model"] == "CLIP"]
    assert int(clip["rises"].sum()) == 8
    assert set(clip.loc[clip["monotone"], "pair"]) == {"h0->h4", "h2->h1", "h3->h4", "h4->h1", "h4->h3"}
    first = t.iloc[0]
    assert (first["model"], first["pair"]) == ("CLIP", "h0->h1")
    assert first["lo"] == 0.26377162886218497 and first["hi"] == 0.0779017677671327
    assert first["delta"] == -0.18586986109505227
    # same numbers as the covariate rows of mechanism_summary
    cov = summary.tables["mechanism_summary"].query("design == 'covariate'")
    np.testing.assert_array_equal(cov["ece_lo"].to_numpy(), t["lo"].to_numpy())
    np.testing.assert_array_equal(cov["rises"].to_numpy(), t["rises"].to_numpy())


# --------------------------------------------------------------------------- hand-made
def test_hand_computed_rows_and_bands():
    tr = make_transfer({
        # e: 0.1 -> 0.3 over log10 f = -2 -> 0: slope 0.1; auroc mean 0.6 -> band [0.55, 0.70)
        ("M1", "A->B"): {0.01: (0.1, 0.5, True), 1.0: (0.3, 0.7, False)},
        # auroc mean exactly 0.55 -> half-open: also [0.55, 0.70)
        ("M1", "B->A"): {0.01: (0.2, 0.5, False), 1.0: (0.2, 0.6, False)},
        # auroc mean 0.96, ECE falls -> [0.95, 1.01)
        ("M2", "A->B"): {0.01: (0.3, 0.95, False), 1.0: (0.1, 0.97, False)},
    })
    s = mech.mechanism_summary(tr)
    r = s.iloc[0]
    assert (r["design"], r["model"], r["pair"]) == ("label-definition", "M1", "A->B")
    assert r["ece_delta"] == pytest.approx(0.2)
    assert r["ece_slope"] == pytest.approx(0.1)
    assert bool(r["rises"]) is True
    assert r["auroc_mean"] == pytest.approx(0.6) and r["auroc_dist"] == pytest.approx(0.1)
    assert r["degeneracy"] == pytest.approx((1.0 + 0.5 + 0.5 + 0.5) / 4)
    assert r["degenerate_share"] == pytest.approx(0.25)
    assert bool(s.iloc[1]["rises"]) is False  # equal endpoints do not rise
    bands = mech.mechanism_bands(s)
    assert bands["band"].tolist() == ["[0.55, 0.70)", "[0.95, 1.01)"]
    assert bands["n"].tolist() == [2, 1]
    assert bands["rises"].tolist() == [1, 0]
    assert bands["rate"].tolist() == [50.0, 0.0]
    assert bands["mean_delta"].tolist() == [0.1, -0.2]
    assert bands["designs"].tolist() == ["label-definition", "label-definition"]


def test_slope_uses_all_fractions_and_rises_uses_endpoints():
    # endpoints rise (0.20 -> 0.21) but the middle dips: slope < 0 while rises is True
    tr = make_transfer({("M", "A->B"): {0.01: (0.20, 0.6, False), 0.1: (0.0, 0.6, False),
                                         0.5: (0.0, 0.6, False), 1.0: (0.21, 0.6, False)}})
    s = mech.mechanism_summary(tr)
    x = np.log10([0.01, 0.1, 0.5, 1.0])
    assert s.loc[0, "ece_slope"] == pytest.approx(np.polyfit(x, [0.20, 0.0, 0.0, 0.21], 1)[0])
    assert bool(s.loc[0, "rises"]) is True
    h, _ = mech.mechanism_headline(s)
    assert h["mechanism_slope_endpoint_disagreements"] == 1


def test_trend_monotone_tolerance():
    cam = make_transfer({
        ("M", "h0->h1"): {0.01: (0.2, 0.9, False), 0.1: (0.2 - 5e-10, 0.9, False), 1.0: (0.3, 0.9, False)},
        ("M", "h1->h0"): {0.01: (0.2, 0.9, False), 0.1: (0.2 - 1e-6, 0.9, False), 1.0: (0.3, 0.9, False)},
    })
    t = mech.camelyon17_ece_trend(cam)
    assert t["monotone"].tolist() == [True, False]
    assert t["rises"].tolist() == [True, True]
    assert t["delta"].tolist() == pytest.approx([0.1, 0.1])


def test_missing_endpoint_is_not_defined():
    tr = make_transfer({
        ("M1", "A->B"): {0.01: (0.1, 0.6, False), 1.0: (0.2, 0.6, False)},
        ("M2", "A->B"): {0.01: (0.1, 0.6, False), 0.5: (0.2, 0.6, False)},
    })
    s = mech.mechanism_summary(tr)
    assert math.isnan(s.loc[1, "ece_hi"]) and bool(s.loc[1, "rises"]) is False
    assert not math.isnan(s.loc[1, "ece_slope"])
    assert any("not defined" in n and "M2/A->B" in n for n in s.attrs["notes"])
    assert mech.mechanism_bands(s)["n"].tolist() == [1]


def test_too_few_combinations_not_defined():
    tr = make_transfer({("M1", "A->B"): {0.01: (0.1, 0.6, False), 1.0: (0.2, 0.7, False)}})
    out = mech.summarize(RunTables(transfer=tr), {})
    assert out.headline["mechanism_spearman_slope_all"].startswith("not defined")
    assert any("not defined" in n for n in out.notes)
    assert "camelyon17_ece_trend" not in out.tables


def test_hook_designs_present_and_none():
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(mech)
    cam = make_transfer({("M", f"h{a}->h{b}"): {0.01: (0.1 * a, 0.9, False), 1.0: (0.05 * b, 0.95, False)}
                         for a in range(3) for b in range(3) if a != b})
    [out] = pm.hook.summarize(tables=RunTables(camelyon17_transfer=cam), options={})
    assert set(out.tables) == {"mechanism_summary", "mechanism_bands", "camelyon17_ece_trend"}
    assert set(out.tables["mechanism_summary"]["design"]) == {"covariate"}
    assert "mechanism_label_definition_n" not in out.headline
    assert out.headline["mechanism_covariate_n"] == 6
    assert pm.hook.summarize(tables=RunTables(), options={}) == []
