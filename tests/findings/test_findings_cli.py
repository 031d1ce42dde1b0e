"""``prism-run findings``: the published derived tables and the paper's headline
numbers from the reference per-run tables (subprocess, as a user runs it), the
published file names / columns, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REFERENCE, run_main

#: Derived tables shipped in results_v2: reproduced to 1e-12, same columns.
SHIPPED = ["label_budget_accounting", "camelyon17_label_budget", "cri_variants_1", "cri_variants_100",
           "cri_components", "camelyon17_cri_components"]
#: Columns of the derived tables that are not shipped (PROTOCOL §6.5-6.16 / the published repository).
PUBLISHED_COLUMNS = {
    "rank_correlations": ["dataset", "fraction", "n_models", "spearman", "kendall", "ci_lo", "ci_hi"],
    "rank_correlations_seedlevel": ["fraction", "rho", "ci_lo", "ci_hi"],
    "rank_diff_by_fraction": ["dataset", "0.01", "0.05", "0.1", "0.25", "0.5", "1.0"],
    "mechanism_bands": ["band", "n", "rises", "rate", "mean_delta", "designs"],
    "camelyon17_ece_trend": ["model", "pair", "lo", "hi", "delta", "rises", "monotone"],
    "degeneracy_audit": ["dataset", "model", "fraction", "degenerate", "scope"],
    "breaking_points_by_threshold": ["dataset", "model", "thr_0.4", "thr_0.5", "thr_0.6", "thr_0.7", "thr_0.8"],
    "seed_variability_auroc": ["model", "dataset", "fraction", "mean", "std", "min", "max"],
    "seed_variability_ece": ["model", "dataset", "fraction", "mean", "std", "min", "max"],
}
#: The paper's Table 7 (n, rising, rate %, mean delta ECE), rounded as printed.
TABLE7 = [(16, 14, 88, 0.081), (17, 15, 88, 0.089), (7, 6, 86, 0.110), (13, 1, 8, -0.074), (139, 2, 1, -0.172)]


@pytest.fixture(scope="module")
def reference_findings(tmp_path_factory) -> Path:
    if not REFERENCE.is_dir():
        pytest.skip(f"shared reference tables not found at {REFERENCE} (set PRISM_SHARED)")
    out = tmp_path_factory.mktemp("findings-ref")
    proc = run_main("findings", "--reference", str(REFERENCE), "--output", str(out), "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert "findings.json" in proc.stdout
    return out


def _assert_frames_match(got: pd.DataFrame, ref: pd.DataFrame, name: str) -> None:
    assert list(got.columns) == list(ref.columns), name
    assert len(got) == len(ref), name
    for col in ref.columns:
        a, b = got[col], ref[col]
        if pd.api.types.is_numeric_dtype(b) and not pd.api.types.is_bool_dtype(b):
            diff = np.nanmax(np.abs(a.to_numpy(float) - b.to_numpy(float))) if len(b) else 0.0
            assert diff <= 1e-12, f"{name}.{col}: max |diff| {diff}"
            assert (a.isna() == b.isna()).all(), f"{name}.{col}: NaN pattern differs"
        else:
            assert a.astype(str).tolist() == b.astype(str).tolist(), f"{name}.{col}"


def test_shipped_tables_reproduced(reference_findings):
    for stem in SHIPPED:
        ref = pd.read_csv(REFERENCE / f"{stem}.csv")
        got = pd.read_csv(reference_findings / f"{stem}.csv")
        _assert_frames_match(got, ref, stem)
    # label budget: byte-for-byte in values, including integer dtypes
    for stem in ("label_budget_accounting", "camelyon17_label_budget"):
        pd.testing.assert_frame_equal(pd.read_csv(reference_findings / f"{stem}.csv"),
                                      pd.read_csv(REFERENCE / f"{stem}.csv"), check_exact=False, rtol=0, atol=1e-12)


def test_published_names_and_columns(reference_findings):
    listed = json.loads((reference_findings / "findings.json").read_text())["tables"]
    for stem, cols in PUBLISHED_COLUMNS.items():
        assert f"{stem}.csv" in listed, stem
        assert list(pd.read_csv(reference_findings / f"{stem}.csv").columns) == cols, stem
    assert len(pd.read_csv(reference_findings / "degeneracy_audit.csv")) == 28 + 119
    assert len(pd.read_csv(reference_findings / "mechanism_summary.csv")) == 192
    assert len(pd.read_csv(reference_findings / "rank_correlations.csv")) == 36


def test_headline_numbers_of_the_paper(reference_findings):
    h = json.loads((reference_findings / "findings.json").read_text())["headline"]
    # decoupling (§6.6, §6.8, §6.9): rho -0.24 at 1 %, 0.52 at 100 %, I^2 67 % and 0 %
    assert round(h["decoupling_pooled_rho_1pct"], 3) == -0.238
    assert round(h["decoupling_pooled_rho_100pct"], 3) == 0.516
    assert round(h["decoupling_i2_1pct"], 1) == 67.1 and h["decoupling_i2_100pct"] == 0.0
    assert [round(h[k], 3) for k in ("decoupling_pooled_contrast", "decoupling_pooled_contrast_ci_lo",
                                     "decoupling_pooled_contrast_ci_hi")] == [0.754, 0.190, 1.270]
    assert [round(h[k], 3) for k in ("decoupling_seedlevel_contrast", "decoupling_seedlevel_contrast_ci_lo",
                                     "decoupling_seedlevel_contrast_ci_hi")] == [0.616, 0.075, 1.127]
    # temperature scaling (§6.12): 49 of 288, 189 of 192, 117 of 192
    assert (h["ts_indomain_cells_worse"], h["ts_indomain_cells_worse_total"]) == (49, 288)
    assert (h["ts_multiclass_cells_T_lt_1"], h["ts_multiclass_cells_T_lt_1_total"]) == (189, 192)
    assert (h["ts_transfer_cells_worse"], h["ts_transfer_cells_worse_total"]) == (117, 192)
    # mechanism (§6.10): 28 of 32 vs 10 of 160, Spearman -0.78
    assert (h["mechanism_label_definition_rises"], h["mechanism_label_definition_n"]) == (28, 32)
    assert (h["mechanism_covariate_rises"], h["mechanism_covariate_n"]) == (10, 160)
    assert round(h["mechanism_spearman_slope_all"], 3) == -0.782
    assert round(h["mechanism_spearman_slope_covariate"], 3) == -0.647
    assert round(h["mechanism_spearman_slope_nondegenerate"], 3) == -0.664
    assert (h["degenerate_cells_indomain"], h["degenerate_cells_ood"]) == (28, 119)


def test_table7_bands(reference_findings):
    bands = pd.read_csv(reference_findings / "mechanism_bands.csv")
    assert len(bands) == len(TABLE7)
    for r, (n, rising, rate, delta) in zip(bands.itertuples(), TABLE7):
        assert (int(r.n), int(r.rises), int(round(r.rate))) == (n, rising, rate)
        assert r.mean_delta == pytest.approx(delta, abs=6e-4)  # the table keeps 4 decimals, the paper 3


def test_bad_input_is_one_line(tmp_path, capsys):
    from prism_plugin.cli import main

    def err(*argv):
        code = main(["findings", *argv])
        text = capsys.readouterr().err
        assert code == 2 and text.count("\n") == 1 and "Traceback" not in text, text
        return text

    assert "RESULTS_DIR" in err("--output", str(tmp_path / "x"))
    assert "--reference" in err("--reference", str(tmp_path / "missing"))
    assert "KEY=VALUE" in err(str(tmp_path), "--option", "novalue")
    assert "nothing-here" in err(str(tmp_path / "nothing-here"))
    assert "runs.csv" in err(str(tmp_path))  # a folder without results
