"""CRI / OOD stability summaries (PROTOCOL §6.1-6.4)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pluggy
import pytest

import prism_plugin.hookspecs as hookspecs
from prism_plugin.errors import PrismError, UnknownNameError
from prism_plugin.summaries import budget, collapse_audit, conventions, cri, seeds
from prism_plugin.tables import RunTables, SummaryOutput

from tests.conftest import SHARED
REFERENCE = SHARED / "reference" / "prism_results_v2"


@pytest.fixture(scope="module")
def reference_summary(reference_tables) -> SummaryOutput:
    return cri.summarize(reference_tables, {})


def _compare_published(got: pd.DataFrame, stem: str) -> None:
    ref = pd.read_csv(REFERENCE / f"{stem}.csv", index_col=0)
    assert got.index.name == "model"
    assert list(got.columns) == list(ref.columns)
    assert list(got.index) == list(ref.index)
    np.testing.assert_allclose(got.to_numpy(dtype=float), ref.to_numpy(dtype=float), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- reference reproduction
@pytest.mark.parametrize("stem", ["cri_variants_1", "cri_variants_100", "cri_components", "camelyon17_cri_components"])
def test_reproduces_published_tables(reference_summary, stem):
    _compare_published(reference_summary.tables[stem], stem)


def test_reference_summary_shape_and_headline(reference_summary):
    out = reference_summary
    assert set(out.tables) == {
        "cri_variants_1", "cri_variants_5", "cri_variants_10", "cri_variants_25", "cri_variants_50",
        "cri_variants_100", "cri_components", "cri_components_per_pair", "camelyon17_cri_components",
    }
    assert out.notes == []
    # README: "Rankings agree across all four at Kendall tau 0.71-1.00" (1 % and 100 % files).
    assert out.headline["cri_rule_kendall_tau_min"] == pytest.approx(5 / 7)
    assert out.headline["cri_rule_kendall_tau_max"] == pytest.approx(1.0)
    assert out.headline["cri_rule_kendall_tau_min_50"] == pytest.approx(9 / 14)
    # the published file's stability is the same at every fraction
    for name, table in out.tables.items():
        if name.startswith("cri_variants_"):
            pd.testing.assert_series_equal(table["ood_stability"], out.tables["cri_variants_100"]["ood_stability"])


def test_reference_per_pair_table(reference_summary):
    per_pair = reference_summary.tables["cri_components_per_pair"]
    assert list(per_pair.columns) == ["model", "pair", "id_auroc", "ood_auroc", "drop"]
    assert len(per_pair) == 32
    assert list(per_pair["model"].iloc[::4]) == list(conventions.MODEL_ORDER)
    assert list(per_pair["pair"].iloc[:4]) == ["BRACS->CRC", "CRC->BRACS", "MHIST->PCam", "PCam->MHIST"]
    comps = reference_summary.tables["cri_components"]
    # drop_worst of the published components = max of the unrounded per-pair drops
    worst = per_pair.groupby("model", sort=False)["drop"].max()
    np.testing.assert_allclose(worst.loc[comps.index], comps["drop_worst"], atol=5e-5)
    assert (per_pair[["id_auroc", "ood_auroc", "drop"]] == per_pair[["id_auroc", "ood_auroc", "drop"]].round(4)).all().all()


def test_reference_stability_clipping_binds_once_on_camelyon(reference_tables):
    pairs = cri.ood_pairs(reference_tables.camelyon17_indomain, reference_tables.camelyon17_transfer)
    assert len(pairs) == 160
    raw = pairs["ood_auroc"] / pairs["id_auroc"]
    clipped = pairs.loc[raw > 1]
    assert list(zip(clipped["model"], clipped["pair"])) == [("VIRCHOW2", "h4->h2")]
    assert raw.max() == pytest.approx(1.0005, abs=5e-5)
    main = cri.ood_pairs(reference_tables.indomain, reference_tables.transfer)
    assert (main["ood_auroc"] / main["id_auroc"]).max() < 1  # never binds on the 4 pairs


# --------------------------------------------------------------------------- hand-made tables
def _indomain_rows():
    # model, dataset, fraction, seed, auroc, ece_scaled_fixed
    rows = [
        ("UNI", "D1", 1.0, 1, 0.9, 0.1), ("UNI", "D1", 1.0, 2, 0.8, 0.2),
        ("UNI", "D2", 1.0, 1, 0.7, 0.05), ("UNI", "D2", 1.0, 2, 0.7, 0.05),
        ("CLIP", "D1", 1.0, 1, 0.6, 0.3), ("CLIP", "D1", 1.0, 2, 0.6, 0.3),
        ("CLIP", "D2", 1.0, 1, 1.0, 0.1), ("CLIP", "D2", 1.0, 2, 0.8, 0.1),
        # a lower fraction, to check that stability is reused and rows are picked by fraction
        ("UNI", "D1", 0.5, 1, 0.6, 0.4), ("UNI", "D1", 0.5, 2, 0.6, 0.4),
        ("UNI", "D2", 0.5, 1, 0.5, 0.2), ("UNI", "D2", 0.5, 2, 0.5, 0.2),
        ("CLIP", "D1", 0.5, 1, 0.5, 0.5), ("CLIP", "D1", 0.5, 2, 0.5, 0.5),
        ("CLIP", "D2", 0.5, 1, 0.5, 0.3), ("CLIP", "D2", 0.5, 2, 0.5, 0.3),
    ]
    return pd.DataFrame(rows, columns=["model", "dataset", "fraction", "seed", "auroc", "ece_scaled_fixed"])


def _transfer_rows():
    rows = [
        ("UNI", "D1", "D2", 1.0, 1, 0.68), ("UNI", "D1", "D2", 1.0, 2, 0.68),
        ("UNI", "D2", "D1", 1.0, 1, 0.77), ("UNI", "D2", "D1", 1.0, 2, 0.77),
        ("CLIP", "D1", "D2", 1.0, 1, 0.2), ("CLIP", "D1", "D2", 1.0, 2, 0.4),
        ("CLIP", "D2", "D1", 1.0, 1, 0.72), ("CLIP", "D2", "D1", 1.0, 2, 0.72),
        ("CLIP", "D2", "D1", 0.5, 1, 0.10), ("CLIP", "D2", "D1", 0.5, 2, 0.10),  # ignored: not 100 %
    ]
    df = pd.DataFrame(rows, columns=["model", "src", "tgt", "fraction", "seed", "auroc"])
    df["pair"] = df["src"] + "->" + df["tgt"]
    return df


# Hand computation at fraction 1.0:
#   UNI : A_id(D1)=0.85, A_id(D2)=0.70; a=(0.85+0.70)/2=0.775; e=(0.15+0.05)/2=0.10
#         D1->D2: 0.68/0.85=0.8; D2->D1: 0.77/0.70=1.1 -> 1;  stab=0.9
#         drops 0.17, -0.07 -> mean 0.05, worst 0.17; ood mean 0.725
#   CLIP: A_id(D1)=0.60, A_id(D2)=0.90; a=0.75; e=(0.3+0.1)/2=0.2
#         D1->D2: 0.3/0.6=0.5; D2->D1: 0.72/0.9=0.8; stab=0.65
#         drops 0.3, 0.18 -> mean 0.24, worst 0.3; ood mean 0.51
HAND = {
    "UNI": dict(a=0.775, e=0.10, s=0.9),
    "CLIP": dict(a=0.75, e=0.2, s=0.65),
}


def test_ood_pairs_and_stability_by_hand():
    pairs = cri.ood_pairs(_indomain_rows(), _transfer_rows())
    assert list(pairs["model"]) == ["CLIP", "CLIP", "UNI", "UNI"]  # display order: CLIP before UNI
    assert list(pairs["pair"]) == ["D1->D2", "D2->D1"] * 2
    np.testing.assert_allclose(pairs["id_auroc"], [0.6, 0.9, 0.85, 0.7], atol=1e-15)
    np.testing.assert_allclose(pairs["ood_auroc"], [0.3, 0.72, 0.68, 0.77], atol=1e-15)
    np.testing.assert_allclose(pairs["drop"], [0.3, 0.18, 0.17, -0.07], atol=1e-15)
    np.testing.assert_allclose(pairs["ratio"], [0.5, 0.8, 0.8, 1.0], atol=1e-15)
    stab = cri.ood_stability(_indomain_rows(), _transfer_rows())
    assert stab.name == "ood_stability" and list(stab.index) == ["CLIP", "UNI"]
    np.testing.assert_allclose(stab.to_numpy(), [0.65, 0.9], atol=1e-15)


def test_cri_variants_by_hand():
    ind = _indomain_rows()
    stab = cri.ood_stability(ind, _transfer_rows())
    table = cri.cri_variants(ind, stab, 1.0)
    assert list(table.columns) == cri.CRI_VARIANT_COLUMNS
    assert list(table.index) == ["CLIP", "UNI"] and table.index.name == "model"
    for model, v in HAND.items():
        a, e, s = v["a"], v["e"], v["s"]
        row = table.loc[model]
        assert row["auroc"] == pytest.approx(a, abs=1e-15)
        assert row["ece_scaled"] == pytest.approx(e, abs=1e-15)
        assert row["ood_stability"] == pytest.approx(s, abs=1e-15)
        assert row["cri_multiplicative"] == pytest.approx(a * (1 - e) * s, abs=1e-15)
        assert row["cri_arithmetic"] == pytest.approx((a + 1 - e + s) / 3, abs=1e-15)
        assert row["cri_geometric"] == pytest.approx((a * (1 - e) * s) ** (1 / 3), abs=1e-15)
        assert row["cri_worst_axis"] == pytest.approx(min(a, 1 - e, s), abs=1e-15)
    assert table.loc["UNI", "cri_multiplicative"] == pytest.approx(0.62775, abs=1e-15)
    assert table.loc["CLIP", "cri_multiplicative"] == pytest.approx(0.39, abs=1e-15)
    assert table.loc["CLIP", "cri_worst_axis"] == pytest.approx(0.65, abs=1e-15)
    # at 50 % the 100 %-based stability is reused; UNI a=0.55, e=0.3; CLIP a=0.5, e=0.4
    half = cri.cri_variants(ind, stab, 0.5)
    assert half.loc["UNI", "cri_multiplicative"] == pytest.approx(0.55 * 0.7 * 0.9, abs=1e-15)
    assert half.loc["CLIP", "cri_multiplicative"] == pytest.approx(0.5 * 0.6 * 0.65, abs=1e-15)


def test_ece_is_clipped_to_unit_interval():
    ind = pd.DataFrame({"model": ["M", "M", "N"], "dataset": ["D", "E", "D"], "fraction": [1.0] * 3,
                        "seed": [1] * 3, "auroc": [0.8, 0.6, 0.9], "ece_scaled_fixed": [1.5, 1.1, -0.2]})
    t = cri.cri_variants(ind, {"M": 0.5, "N": 0.4}, 1.0)
    assert t.loc["M", "ece_scaled"] == 1.0 and t.loc["N", "ece_scaled"] == 0.0
    assert t.loc["M", "cri_multiplicative"] == 0.0
    assert t.loc["M", "cri_arithmetic"] == pytest.approx((0.7 + 0.0 + 0.5) / 3)
    assert t.loc["N", "cri_multiplicative"] == pytest.approx(0.9 * 0.4)


def test_cri_components_by_hand():
    comp = cri.cri_components(_indomain_rows(), _transfer_rows())
    assert list(comp.columns) == cri.CRI_COMPONENT_COLUMNS
    assert list(comp.index) == ["CLIP", "UNI"]
    np.testing.assert_allclose(comp.loc["UNI"].to_numpy(), [0.775, 0.725, 0.05, 0.17, 0.9, 0.62775], atol=1e-15)
    np.testing.assert_allclose(comp.loc["CLIP"].to_numpy(), [0.75, 0.51, 0.24, 0.3, 0.65, 0.39], atol=1e-15)
    per_pair = cri.cri_components_per_pair(_indomain_rows(), _transfer_rows())
    assert per_pair.to_dict("list") == {
        "model": ["CLIP", "CLIP", "UNI", "UNI"],
        "pair": ["D1->D2", "D2->D1", "D1->D2", "D2->D1"],
        "id_auroc": [0.6, 0.9, 0.85, 0.7],
        "ood_auroc": [0.3, 0.72, 0.68, 0.77],
        "drop": [0.3, 0.18, 0.17, -0.07],
    }


def test_camelyon_variant_by_hand():
    cam_id = pd.DataFrame(
        [("M", 0, 1.0, s, 0.9, 0.1) for s in (1, 2)] + [("M", 1, 1.0, s, 0.8, 0.3) for s in (1, 2)]
        + [("M", 0, 0.5, 1, 0.1, 0.9)],
        columns=["model", "hospital", "fraction", "seed", "auroc", "ece_scaled_fixed"],
    )
    # h0->h1: 3 seeds (0.6, 0.7, 0.8) -> 0.7; h1->h0: 1 seed 0.88 (> A_id 0.8: ratio clipped to 1)
    cam_tr = pd.DataFrame(
        [("M", 0, 1, "h0->h1", 1.0, s, v) for s, v in ((1, 0.6), (2, 0.7), (3, 0.8))]
        + [("M", 1, 0, "h1->h0", 1.0, 1, 0.88)],
        columns=["model", "src", "tgt", "pair", "fraction", "seed", "auroc"],
    )
    comp = cri.camelyon17_cri_components(cam_id, cam_tr)
    assert list(comp.columns) == cri.CAMELYON_COMPONENT_COLUMNS
    row = comp.loc["M"]
    assert row["id_auroc"] == pytest.approx(0.85, abs=1e-15)
    assert row["ood_auroc"] == pytest.approx((0.6 + 0.7 + 0.8 + 0.88) / 4, abs=1e-15)  # mean of runs
    assert row["drop_mean"] == pytest.approx((0.2 + (-0.08)) / 2, abs=1e-15)
    assert row["drop_worst"] == pytest.approx(0.2, abs=1e-15)
    s = (0.7 / 0.9 + 1.0) / 2
    assert row["ood_stability"] == pytest.approx(s, abs=1e-15)
    assert row["cri"] == pytest.approx(0.85 * (1 - 0.2) * s, abs=1e-15)
    np.testing.assert_allclose(cri.ood_stability(cam_id, cam_tr).to_numpy(), [s], atol=1e-15)


def test_model_order_reference_then_appearance():
    assert conventions.model_order(["zeta", "UNI", "alpha", "CLIP", "UNI", "MIDNIGHT"]) == [
        "CLIP", "UNI", "MIDNIGHT", "zeta", "alpha"]


def test_aggregation_registry_and_ranking():
    assert set(cri.AGGREGATIONS) == {"multiplicative", "arithmetic", "geometric", "worst_axis"}
    assert cri.cri(0.8, 0.25, 0.5, "multiplicative") == pytest.approx(0.3)
    assert cri.cri(0.8, 0.25, 0.5, "arithmetic") == pytest.approx((0.8 + 0.75 + 0.5) / 3)
    assert cri.cri(0.8, 0.25, 0.5, "geometric") == pytest.approx(0.3 ** (1 / 3))
    assert cri.cri(0.8, 0.25, 0.5, "worst_axis") == pytest.approx(0.5)
    assert cri.cri(0.8, 1.7, 0.5, "arithmetic") == pytest.approx((0.8 + 0.0 + 0.5) / 3)  # e clipped to 1
    with pytest.raises(UnknownNameError, match="did you mean 'geometric'"):
        cri.get_aggregation("geometrik")
    table = cri.cri_variants(_indomain_rows(), pd.Series({"UNI": 0.9, "CLIP": 0.65}), 1.0)
    ranked = cri.rank_by_cri(table, "worst_axis")
    assert list(ranked.index) == ["UNI", "CLIP"] and list(ranked["rank"]) == [1, 2]
    # computed from the axes when the column is missing
    ranked2 = cri.rank_by_cri(table.drop(columns=["cri_arithmetic"]), "arithmetic")
    np.testing.assert_allclose(ranked2["cri_arithmetic"], table.loc[ranked2.index, "cri_arithmetic"], atol=1e-15)


def test_summarize_hand_tables_has_no_imputed_column():
    out = cri.summarize(RunTables(indomain=_indomain_rows(), transfer=_transfer_rows()), {})
    assert set(out.tables) == {"cri_variants_50", "cri_variants_100", "cri_components", "cri_components_per_pair"}
    assert "ood_stability_imputed" not in out.tables["cri_variants_100"].columns
    # two models: UNI ahead on every rule -> tau = 1 between all rules
    assert out.headline["cri_rule_kendall_tau_min_100"] == pytest.approx(1.0)
    assert any("camelyon" in n.lower() for n in out.notes) is False


# --------------------------------------------------------------------------- imputation and missing inputs
def _with_third_model():
    ind = _indomain_rows()
    extra = ind.loc[ind["model"] == "UNI"].assign(model="NewNet")
    return pd.concat([ind, extra], ignore_index=True)


def test_imputed_stability_mean_of_measured():
    out = cri.summarize(RunTables(indomain=_with_third_model(), transfer=_transfer_rows()), {})
    table = out.tables["cri_variants_100"]
    assert list(table.index) == ["CLIP", "UNI", "NewNet"]
    assert list(table.columns) == cri.CRI_VARIANT_COLUMNS + ["ood_stability_imputed"]
    assert table["ood_stability_imputed"].tolist() == [False, False, True]
    assert table.loc["NewNet", "ood_stability"] == pytest.approx((0.9 + 0.65) / 2, abs=1e-15)
    assert table.loc["NewNet", "cri_multiplicative"] == pytest.approx(0.775 * 0.9 * 0.775, abs=1e-15)
    assert any("imputed=mean" in n and "NewNet" in n for n in out.notes)
    # components list only measured models
    assert list(out.tables["cri_components"].index) == ["CLIP", "UNI"]


def test_imputed_stability_user_and_default():
    tables = RunTables(indomain=_with_third_model(), transfer=_transfer_rows())
    out = cri.summarize(tables, {"ood_stability": {"NewNet": 0.5}, "default_ood_stability": 0.1})
    t = out.tables["cri_variants_100"]
    assert t.loc["NewNet", "ood_stability"] == 0.5 and bool(t.loc["NewNet", "ood_stability_imputed"])
    assert any("imputed=user" in n for n in out.notes)
    out = cri.summarize(tables, {"default_ood_stability": 0.1})
    assert out.tables["cri_variants_100"].loc["NewNet", "ood_stability"] == 0.1
    assert any("imputed=default" in n for n in out.notes)
    # a user value replaces a measured one, and is flagged
    out = cri.summarize(tables, {"ood_stability": {"UNI": 0.2}})
    t = out.tables["cri_variants_100"]
    assert t.loc["UNI", "ood_stability"] == 0.2 and bool(t.loc["UNI", "ood_stability_imputed"])
    assert t.loc["NewNet", "ood_stability"] == pytest.approx((0.9 + 0.65) / 2)  # mean of measured, not of user values
    with pytest.raises(PrismError, match="outside"):
        cri.summarize(tables, {"ood_stability": {"NewNet": 1.5}})
    with pytest.raises(PrismError, match="must map model names"):
        cri.summarize(tables, {"ood_stability": 0.5})


def test_resolve_ood_stability_sources():
    measured = pd.Series({"A": 0.4, "B": 0.8})
    r = cri.resolve_ood_stability(["C", "B", "A", "D"], measured, overrides={"D": 0.3})
    assert r["source"].to_dict() == {"C": "mean", "B": "measured", "A": "measured", "D": "user"}
    assert r.loc["C", "ood_stability"] == pytest.approx(0.6)
    r = cri.resolve_ood_stability(["A", "C"], pd.Series(dtype=float))
    assert r.loc["C", "source"] == "none" and np.isnan(r.loc["C", "ood_stability"])


def test_no_transfer_and_no_override_gives_note_only():
    out = cri.summarize(RunTables(indomain=_indomain_rows()), {})
    assert out.tables == {}
    assert any("CRI not computed" in n for n in out.notes)
    assert cri.summarize(RunTables(), {}) is None


def test_no_transfer_with_override_computes_cri_without_components():
    out = cri.summarize(RunTables(indomain=_indomain_rows()), {"default_ood_stability": 0.5})
    assert set(out.tables) == {"cri_variants_50", "cri_variants_100"}
    t = out.tables["cri_variants_100"]
    assert t["ood_stability_imputed"].all()
    assert t.loc["UNI", "cri_multiplicative"] == pytest.approx(0.775 * 0.9 * 0.5, abs=1e-15)
    assert any("cri_components not computed" in n for n in out.notes)


def test_partial_override_without_transfer_drops_uncovered_models():
    out = cri.summarize(RunTables(indomain=_indomain_rows()), {"ood_stability": {"UNI": 0.5, "Ghost": 0.2}})
    assert list(out.tables["cri_variants_100"].index) == ["UNI"]
    assert any("CRI not computed for CLIP" in n for n in out.notes)
    assert any("'Ghost'" in n for n in out.notes)


def test_transfer_without_full_fraction_is_not_measured():
    tr = _transfer_rows()
    tr = tr.loc[tr["fraction"] != 1.0]
    out = cri.summarize(RunTables(indomain=_indomain_rows(), transfer=tr), {})
    assert out.tables == {}
    assert any("transfer runs lack fraction 1" in n for n in out.notes)


def test_single_model_kendall_not_defined():
    ind = _indomain_rows()
    ind = ind.loc[ind["model"] == "UNI"]
    out = cri.summarize(RunTables(indomain=ind, transfer=_transfer_rows()), {})
    assert len(out.tables["cri_variants_100"]) == 1
    assert "cri_rule_kendall_tau_min" not in out.headline
    assert any("Kendall tau between CRI rules not defined" in n for n in out.notes)


def test_pair_with_unmeasured_source_is_left_out():
    tr = pd.concat([_transfer_rows(), pd.DataFrame(
        [("UNI", "D9", "D1", "D9->D1", 1.0, 1, 0.1)],
        columns=["model", "src", "tgt", "pair", "fraction", "seed", "auroc"])], ignore_index=True)
    out = cri.summarize(RunTables(indomain=_indomain_rows(), transfer=tr), {})
    assert out.tables["cri_variants_100"].loc["UNI", "ood_stability"] == pytest.approx(0.9)
    assert any("UNI D9->D1" in n for n in out.notes)


def test_camelyon_missing_half_is_a_note():
    cam = pd.DataFrame({"model": ["M"], "hospital": [0], "fraction": [1.0], "seed": [1],
                        "auroc": [0.9], "ece_scaled_fixed": [0.1]})
    out = cri.summarize(RunTables(camelyon17_indomain=cam), {})
    assert out.tables == {}
    assert any("camelyon17_transfer runs are missing" in n for n in out.notes)


# --------------------------------------------------------------------------- all summary hooks through pluggy
def test_all_summary_hooks_through_pluggy(reference_tables):
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for module in (cri, budget, collapse_audit, seeds):
        pm.register(module)
    results = pm.hook.summarize(tables=reference_tables, options={})
    assert len(results) == 4
    merged = SummaryOutput()
    for r in results:
        merged.merge(r)
    for stem in ("cri_variants_100", "label_budget_accounting", "camelyon17_label_budget",
                 "degeneracy_audit", "breaking_points_by_threshold", "seed_variability_auroc",
                 "seed_variability_ece"):
        assert stem in merged.tables
    # only modules with inputs answer
    assert pm.hook.summarize(tables=RunTables(), options={}) == []
