"""`prism-run compare` on a demo transfer results directory (in-process `prism_plugin.cli.main`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REFERENCE, run_main

MODEL = "DemoViT-Tiny"


@pytest.fixture(scope="module")
def demo_results(tmp_path_factory) -> Path:
    """The offline demo: the source task in distribution and the transfer task (reduced grid)."""
    out = tmp_path_factory.mktemp("compare") / "results"
    run_main("--task", "prism_demo", "--task", "prism_demo_transfer", "--model", "demo_vit", "--output", str(out),
             "--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[42,123]", "--quiet", "--no-report", check=True)
    return out


@pytest.fixture(scope="module")
def shared_ref() -> Path:
    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"shared reference tables not found at {REFERENCE} (set PRISM_SHARED)")
    return REFERENCE


def test_compare_lists_the_demo_model_apart_from_the_eight(demo_results, shared_ref, tmp_path):
    """The demo's synthetic dataset is not a reference dataset: its model is shown, unranked, and why."""
    table_file = tmp_path / "ranked.csv"
    proc = run_main("compare", str(demo_results), "--reference", str(shared_ref), "--output", str(table_file),
                    check=True)
    text = proc.stdout
    ranked = pd.read_csv(table_file, index_col=0)
    assert len(ranked) == 9 and ranked.index[-1] == MODEL
    assert not ranked.at[MODEL, "comparable"] and np.isnan(ranked.at[MODEL, "rank"])
    assert "Demo-Binary" in ranked.at[MODEL, "not_comparable_reason"]
    ref_part = ranked.loc[ranked["comparable"].astype(bool)]
    assert ref_part["cri_multiplicative"].is_monotonic_decreasing
    assert ref_part["rank"].tolist() == list(range(1, 9))
    # its CRI would top the table; it is not ranked above the reference models
    assert ranked.at[MODEL, "cri_multiplicative"] > ref_part["cri_multiplicative"].max()
    lines = text.splitlines()
    reason = [line for line in lines if line.startswith(f"not comparable: {MODEL}: not ranked")]
    assert len(reason) == 1 and "not on a reference dataset" in reason[0] and "PCam" in reason[0]
    # the eight reference rows are the published ones
    published = pd.read_csv(shared_ref / "cri_variants_100.csv", index_col=0)
    ref_rows = ranked.loc[published.index, published.columns]
    np.testing.assert_allclose(ref_rows.to_numpy(float), published.to_numpy(float), rtol=0, atol=1e-12)
    assert (ranked.loc[published.index, "stability_source"] == "measured").all()
    # the demo row, recomputed by hand from the runs.csv files (PROTOCOL §6.1-6.2)
    ind = pd.read_csv(demo_results / "prism_demo" / MODEL / "runs.csv")
    tr = pd.read_csv(demo_results / "prism_demo_transfer" / MODEL / "runs.csv")
    a = ind.loc[ind["fraction"] == 1.0, "auroc"].mean()
    e = min(max(ind.loc[ind["fraction"] == 1.0, "ece_scaled_fixed"].mean(), 0.0), 1.0)
    s = min(tr.loc[tr["fraction"] == 1.0, "auroc"].mean() / a, 1.0)
    mine = ranked.loc[MODEL]
    assert mine["auroc"] == pytest.approx(a, abs=1e-12)
    assert mine["ece"] == pytest.approx(ind.loc[ind["fraction"] == 1.0, "ece_fixed"].mean(), abs=1e-12)
    assert mine["ood_stability"] == pytest.approx(s, abs=1e-12)
    assert mine["cri_multiplicative"] == pytest.approx(a * (1 - e) * s, abs=1e-12)
    assert mine["stability_source"] == "measured"
    # printed apart from the ranking, yours marked, with the transfer diagnostics and the caveat
    row = [line for line in lines if f"{MODEL} *" in line][0]
    assert row.split()[0] == "-" and f"{mine['cri_multiplicative']:.4f}" in row
    assert lines.index(row) > max(i for i, line in enumerate(lines) if line.startswith(" 8. "))
    assert "Transfer of DemoViT-Tiny at 100 % source labels" in text
    assert "ECE oracle-T" in text and "K=64" in text and "not deployable" in text
    assert "source-fitted T" in text
    assert "screening heuristic" in text and "little in-distribution AUROC to lose looks stable" in text


def test_compare_imputes_the_reference_mean_stability_and_accepts_a_user_value(demo_results, shared_ref, tmp_path):
    out = tmp_path / "imputed.csv"
    proc = run_main("compare", str(demo_results / "prism_demo"), "--reference", str(shared_ref),
                    "--aggregation", "worst_axis", "--output", str(out), check=True)
    ranked = pd.read_csv(out, index_col=0)
    ref_mean = pd.read_csv(shared_ref / "cri_variants_100.csv", index_col=0)["ood_stability"].mean()
    assert ranked.at[MODEL, "ood_stability"] == pytest.approx(ref_mean, abs=1e-12)
    assert ranked.at[MODEL, "stability_source"] == "imputed (ref. mean)"
    assert "imputed (ref. mean)" in proc.stdout and "pass --ood-stability" in proc.stdout
    assert ranked.loc[ranked["comparable"].astype(bool), "cri_worst_axis"].is_monotonic_decreasing
    assert ranked.index[-1] == MODEL and not ranked.at[MODEL, "comparable"]  # listed apart, not ranked
    # a user value, and the shipped paper figures when no per-run reference is at hand
    proc = run_main("compare", str(demo_results), "--ood-stability", "0.25", "--output", str(out),
                    env={"PRISM_CACHE_DIR": str(tmp_path / "empty-cache")}, check=True)
    ranked = pd.read_csv(out, index_col=0)
    assert len(ranked) == 7 and ranked.index[-1] == MODEL  # 6 paper models + yours, last with s = 0.25
    assert ranked.at[MODEL, "ood_stability"] == 0.25 and ranked.at[MODEL, "stability_source"] == "imputed (user)"
    assert "PRISM paper appendix" in proc.stdout and "H-Optimus-0 and MIDNIGHT" in proc.stdout


def test_compare_bad_input(demo_results, tmp_path, capsys):
    from prism_plugin.cli import main

    def err(*args: str) -> str:
        assert main(["compare", *args, "--reference", str(REFERENCE)]) == 2
        text = capsys.readouterr().err
        assert len(text.strip().splitlines()) == 1
        return text

    assert "no in-distribution runs (only transfer)" in err(str(demo_results / "prism_demo_transfer"))
    assert "did you mean 'geometric'" in err(str(demo_results), "--aggregation", "geometricc")
    assert "no runs.csv" in err(str(tmp_path))
    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"the checks below read the shared reference tables, not found at {REFERENCE}")
    assert "have no runs at that fraction (they have 0.5, 1)" in err(str(demo_results), "--fraction", "0.1")
    assert "outside [0, 1]" in err(str(demo_results), "--ood-stability", "1.5")
    assert "'UNI' is not one of your models" in err(str(demo_results), "--ood-stability", "UNI=0.5")


def test_aggregation_help_lists_the_registry():
    from prism_plugin.commands.compare import AGGREGATION_HELP
    from prism_plugin.summaries.cri import AGGREGATIONS

    assert [w.strip() for w in AGGREGATION_HELP.replace(" (default)", "").split(",")] == list(AGGREGATIONS)


def test_compare_ranks_a_model_on_reference_datasets_only(tmp_path, capsys):
    """Runs on a reference dataset are ranked; the same model's runs on another dataset are left out, said."""
    from prism_plugin.cli import main

    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"shared reference tables not found at {REFERENCE}")
    rows = [{"model": "Mine", "dataset": ds, "fraction": 1.0, "seed": 42, "n_train": 100, "n_classes": 2,
             "auroc": a, "f1_macro": 0.9, "ece_fixed": 0.05, "temperature": 1.0, "ece_scaled_fixed": e,
             "degeneracy_share": 0.5, "degenerate": False, "reference_table": "indomain"}
            for ds, a, e in (("PCam", 0.95, 0.03), ("Demo-Binary", 0.99, 0.01))]
    folder = tmp_path / "res" / "mine"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "runs.csv", index=False)
    out = tmp_path / "ranked.csv"
    assert main(["compare", str(tmp_path / "res"), "--reference", str(REFERENCE), "--ood-stability", "0.5",
                 "--output", str(out)]) == 0
    text = capsys.readouterr().out
    ranked = pd.read_csv(out, index_col=0)
    assert ranked["comparable"].all() and ranked["rank"].tolist() == list(range(1, 10))
    assert ranked.at["Mine", "auroc"] == pytest.approx(0.95) and ranked.at["Mine", "ece_scaled"] == pytest.approx(0.03)
    assert "runs on Demo-Binary are left out of the ranking" in text
    assert "measured on 1 of the 6 reference datasets (PCam)" in text and "not comparable" not in text
