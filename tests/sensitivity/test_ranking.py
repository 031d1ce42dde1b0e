"""Kendall τ and sign inversions of model orderings across probe settings (PROTOCOL §6.17), by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from prism_plugin.summaries import probe_sensitivity as ps
from prism_plugin.tables import RunTables

MODELS = ["A", "B", "C", "D"]


def test_kendall_on_hand_made_orderings():
    base = [0.9, 0.8, 0.7, 0.6]
    assert ps.kendall(base, [0.95, 0.85, 0.75, 0.65]) == (1.0, "")        # same ordering
    assert ps.kendall(base, [0.6, 0.7, 0.8, 0.9])[0] == pytest.approx(-1)  # reversed
    # one adjacent swap: 5 concordant, 1 discordant pair out of 6 -> (5 - 1) / 6
    assert ps.kendall(base, [0.9, 0.7, 0.8, 0.6])[0] == pytest.approx(4 / 6)
    # two swaps: (4 - 2) / 6
    assert ps.kendall(base, [0.8, 0.9, 0.6, 0.7])[0] == pytest.approx(2 / 6)
    assert ps.count_inversions([1.0, -1.0, 4 / 6, -1 / 3, float("nan"), 0.0]) == 2


def test_kendall_undefined_cases_say_why():
    tau, why = ps.kendall([0.9], [0.8])
    assert math.isnan(tau) and why.startswith(ps.NEEDS)
    tau, why = ps.kendall([0.9, float("nan")], [0.8, 0.7])  # one model has no value at one setting
    assert math.isnan(tau) and "1 with values" in why
    tau, why = ps.kendall([0.9, 0.9, 0.9], [0.1, 0.2, 0.3])
    assert math.isnan(tau) and "equal values" in why


def _runs(values: dict, seeds=(42, 123), dataset="D1", fraction=1.0, probe="logistic") -> list[dict]:
    """values: {C: {model: (auroc, ece)}}; two seeds straddle each value by ±0.01 (seed mean = value)."""
    rows = []
    for c, per_model in values.items():
        for m, (a, e) in per_model.items():
            for s, delta in zip(seeds, (-0.01, 0.01)):
                rows.append({"model": m, "dataset": dataset, "fraction": fraction, "seed": s, "auroc": a + delta,
                             "ece_fixed": e - delta, "probe": probe, "probe_C": c, "reference_table": "indomain"})
    return rows


def test_c_ablation_and_c_ranking_against_hand_counts():
    auroc = {1.0: [0.9, 0.8, 0.7, 0.6], 0.1: [0.91, 0.79, 0.72, 0.62], 10.0: [0.9, 0.81, 0.69, 0.61]}
    ece = {1.0: [0.05, 0.10, 0.15, 0.20], 0.1: [0.20, 0.15, 0.10, 0.05], 10.0: [0.10, 0.05, 0.15, 0.20]}
    values = {c: {m: (auroc[c][i], ece[c][i]) for i, m in enumerate(MODELS)} for c in auroc}
    runs = pd.DataFrame(_runs(values))
    abl = ps.c_ablation(runs)
    assert list(abl.columns) == ps.ABLATION_COLUMNS
    assert len(abl) == 12 and set(abl["n_seeds"]) == {2}
    got = abl.set_index(["model", "C"])
    for c in auroc:
        for i, m in enumerate(MODELS):
            assert got.loc[(m, c), "auroc"] == pytest.approx(auroc[c][i], abs=1e-12)
            assert got.loc[(m, c), "ece_fixed"] == pytest.approx(ece[c][i], abs=1e-12)
    rank = ps.c_ranking(abl).set_index("C")
    assert sorted(rank.index) == [0.1, 10.0]           # C = 1 is the reference, not compared with itself
    # AUROC: C = 0.1 keeps the order (τ = 1); C = 10 keeps it too
    assert rank.loc[0.1, "kendall_auroc"] == pytest.approx(1.0)
    assert rank.loc[10.0, "kendall_auroc"] == pytest.approx(1.0)
    # ECE: C = 0.1 reverses it (τ = -1, inverted); C = 10 swaps the first two (τ = 4/6)
    assert rank.loc[0.1, "kendall_ece"] == pytest.approx(-1.0) and rank.loc[0.1, "ece_inverted"]
    assert rank.loc[10.0, "kendall_ece"] == pytest.approx(4 / 6) and not rank.loc[10.0, "ece_inverted"]
    # independent check against SciPy on the seed means
    x = abl[abl["C"] == 1.0].set_index("model")["ece_fixed"]
    y = abl[abl["C"] == 10.0].set_index("model")["ece_fixed"]
    assert rank.loc[10.0, "kendall_ece"] == pytest.approx(stats.kendalltau(x.loc[MODELS], y.loc[MODELS]).statistic)
    head = ps.headline(ps.c_ranking(abl), "c_ranking")
    assert head["c_ranking_auroc_inversions"] == 0 and head["c_ranking_ece_inversions"] == 1
    assert head["c_ranking_ece_tau_mean"] == pytest.approx((-1 + 4 / 6) / 2)
    assert head["c_ranking_auroc_comparisons"] == 2


def test_one_model_is_not_defined_with_the_reason():
    runs = pd.DataFrame(_runs({1.0: {"A": (0.9, 0.1)}, 0.1: {"A": (0.8, 0.2)}}))
    out = ps.sensitivity_tables(runs)
    rank = out.tables["c_ranking"]
    assert rank["kendall_auroc"].isna().all() and rank["note"].str.startswith(ps.NEEDS).all()
    assert any(ps.NEEDS in n for n in out.notes)
    assert out.headline["c_ranking_auroc_comparisons"] == 0


def test_missing_baseline_and_duplicate_runs():
    runs = pd.DataFrame(_runs({0.1: {"A": (0.9, 0.1), "B": (0.8, 0.2)}, 10.0: {"A": (0.9, 0.1), "B": (0.8, 0.2)}}))
    rank = ps.c_ranking(ps.c_ablation(runs))
    assert rank["note"].str.contains("no runs at C = 1").all()
    twice = pd.concat([runs, runs.iloc[:2]], ignore_index=True)  # the same two runs again
    notes: list[str] = []
    abl = ps.c_ablation(twice, notes=notes)
    assert abl["n_seeds"].eq(2).all() and len(abl) == 4 and any("appear twice" in n for n in notes)


def test_linear_vs_mlp_ranking():
    lin = _runs({1.0: {"A": (0.9, 0.05), "B": (0.8, 0.10), "C": (0.7, 0.15)}})
    mlp = _runs({float("nan"): {"A": (0.92, 0.15), "B": (0.83, 0.05), "C": (0.71, 0.10)}}, probe="mlp")
    runs = pd.DataFrame(lin + mlp)
    table = ps.mlp_ranking(runs)
    assert len(table) == 1
    r = table.iloc[0]
    assert r["kendall_auroc"] == pytest.approx(1.0)
    # ECE order A<B<C becomes B<C<A: pairs (A,B) discordant, (A,C) discordant, (B,C) concordant -> -1/3
    assert r["kendall_ece"] == pytest.approx(-1 / 3) and r["ece_inverted"]
    assert r["n_models"] == 3


def test_transfer_rows_give_ood_tables():
    rows = _runs({1.0: {"A": (0.9, 0.1), "B": (0.7, 0.3)}, 100.0: {"A": (0.85, 0.3), "B": (0.6, 0.1)}})
    for r in rows:
        r.update(reference_table="transfer", pair="X->Y", src="X", tgt="Y")
        r.pop("dataset")
    out = ps.sensitivity_tables(pd.DataFrame(rows))
    assert set(out.tables) == {"ood_c_ablation", "ood_c_ranking"}
    r = out.tables["ood_c_ranking"].iloc[0]
    assert r["pair"] == "X->Y" and r["kendall_auroc"] == pytest.approx(1) and r["kendall_ece"] == pytest.approx(-1)
    assert out.headline["ood_c_ranking_ece_inversions"] == 1


def test_summarize_hook_only_speaks_when_there_is_a_comparison():
    plain = pd.DataFrame(_runs({1.0: {"A": (0.9, 0.1), "B": (0.8, 0.2)}})).drop(columns=["probe_C"])
    assert ps.summarize(tables=RunTables(indomain=plain), options={}) is None
    swept = pd.DataFrame(_runs({1.0: {"A": (0.9, 0.1), "B": (0.8, 0.2)}, 0.01: {"A": (0.7, 0.1), "B": (0.8, 0.3)}}))
    out = ps.summarize(tables=RunTables(indomain=swept), options={})
    assert out.tables["c_ranking"]["kendall_auroc"].iloc[0] == pytest.approx(-1.0)
    assert out.headline["c_ranking_auroc_inversions"] == 1
