"""`prism-run compare` on a demo transfer results directory (subprocesses)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REFERENCE, prism_run

MODEL = "DemoViT-Tiny"


@pytest.fixture(scope="module")
def demo_results(tmp_path_factory) -> Path:
    """The offline demo: the source task in distribution and the transfer task (reduced grid)."""
    out = tmp_path_factory.mktemp("compare") / "results"
    prism_run("--task", "prism_demo", "--task", "prism_demo_transfer", "--model", "demo_vit", "--output", str(out),
              "--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[42,123]", "--quiet", "--no-report", check=True)
    return out


@pytest.fixture(scope="module")
def shared_ref() -> Path:
    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"shared reference tables not found at {REFERENCE} (set PRISM_SHARED)")
    return REFERENCE


def test_compare_ranks_the_demo_model_among_the_eight(demo_results, shared_ref, tmp_path):
    table_file = tmp_path / "ranked.csv"
    proc = prism_run("compare", str(demo_results), "--reference", str(shared_ref), "--output", str(table_file),
                     check=True)
    text = proc.stdout
    ranked = pd.read_csv(table_file, index_col=0)
    assert len(ranked) == 9 and MODEL in ranked.index
    assert ranked["cri_multiplicative"].is_monotonic_decreasing
    assert ranked["rank"].tolist() == list(range(1, 10))
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
    # printed side by side, yours marked, with the transfer diagnostics and the caveat
    row = [line for line in text.splitlines() if f"{MODEL} *" in line][0]
    assert row.split()[0] == f"{int(mine['rank'])}." and f"{mine['cri_multiplicative']:.4f}" in row
    assert "Transfer of DemoViT-Tiny at 100 % source labels" in text
    assert "ECE oracle-T" in text and "K=64" in text and "not deployable" in text
    assert "source-fitted T" in text
    assert "screening heuristic" in text and "little in-distribution AUROC to lose looks stable" in text


def test_compare_imputes_the_reference_mean_stability_and_accepts_a_user_value(demo_results, shared_ref, tmp_path):
    out = tmp_path / "imputed.csv"
    proc = prism_run("compare", str(demo_results / "prism_demo"), "--reference", str(shared_ref),
                     "--aggregation", "worst_axis", "--output", str(out), check=True)
    ranked = pd.read_csv(out, index_col=0)
    ref_mean = pd.read_csv(shared_ref / "cri_variants_100.csv", index_col=0)["ood_stability"].mean()
    assert ranked.at[MODEL, "ood_stability"] == pytest.approx(ref_mean, abs=1e-12)
    assert ranked.at[MODEL, "stability_source"] == "imputed (ref. mean)"
    assert "imputed (ref. mean)" in proc.stdout and "pass --ood-stability" in proc.stdout
    assert ranked["cri_worst_axis"].is_monotonic_decreasing
    # a user value, and the shipped paper figures when no per-run reference is at hand
    proc = prism_run("compare", str(demo_results), "--ood-stability", "0.25", "--output", str(out),
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
    assert "have no runs at that fraction (they have 0.5, 1)" in err(str(demo_results), "--fraction", "0.1")
    assert "outside [0, 1]" in err(str(demo_results), "--ood-stability", "1.5")
    assert "'UNI' is not one of your models" in err(str(demo_results), "--ood-stability", "UNI=0.5")


def test_aggregation_help_lists_the_registry():
    from prism_plugin.commands.compare import AGGREGATION_HELP
    from prism_plugin.summaries.cri import AGGREGATIONS

    assert [w.strip() for w in AGGREGATION_HELP.replace(" (default)", "").split(",")] == list(AGGREGATIONS)
