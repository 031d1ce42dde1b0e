"""Run-quality flags (prism_plugin.quality) on constructed runs tables with hand-computed answers,
the console table's markers, and the verdict lines they turn into (report_settings evidence)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prism_plugin import quality
from prism_plugin.report import derived
from prism_plugin.report.verdict import build_verdict
from prism_plugin.report.verdict_rows import check_verdict
from prism_plugin.commands.run import compact_table
from prism_plugin.tables import RunTables


def _runs(**cols) -> pd.DataFrame:
    """Six runs: fractions 0.1 / 1.0 x seeds 1, 2, 3 with neutral defaults; ``cols`` override columns."""
    base = {"model": "M", "dataset": "D", "fraction": [0.1] * 3 + [1.0] * 3, "seed": [1, 2, 3] * 2,
            "n_train": [20] * 3 + [200] * 3, "n_classes": 2, "auroc": 0.9, "f1_macro": 0.8, "ece_fixed": 0.10,
            "ece_scaled_fixed": 0.05, "temperature": 1.5, "nll": 0.5, "nll_scaled": 0.4,
            "degeneracy_share": 0.6, "degenerate": False, "collapsed": False, "n_test_classes": 2,
            "min_test_class_count": 50, "min_class_recall": 0.7, "top_class_true_share": 0.5,
            "probe_converged": True}
    base.update(cols)
    return pd.DataFrame({k: (v if isinstance(v, list) else [v] * 6) for k, v in base.items()})


def _by_name(flags):
    return {f.flag: f for f in flags}


def test_clean_runs_have_no_warning():
    flags = quality.run_flags(_runs())
    assert flags == [] and quality.qualified(flags) is False


def test_probe_not_converged_counts_and_cells():
    runs = _runs(probe_converged=[True, "False", False, True, True, "True"])  # CSV strings too
    f = _by_name(quality.run_flags(runs))["probe_not_converged"]
    assert (f.level, f.count, f.total) == ("warning", 2, 6)
    assert f.cells == ("f0.1-s2", "f0.1-s3") and f.fractions == (0.1,)
    assert "did not converge" in f.message and "2 of 6 runs (fraction 10 %)" in f.message
    assert quality.qualified([f.to_dict()]) is True


def test_temperature_at_either_bound_within_0001():
    runs = _runs(temperature=[0.1, 0.1009, 0.102, 5.0, 9.9995, np.nan])
    f = _by_name(quality.run_flags(runs))["temperature_at_bound"]
    assert f.count == 3 and f.cells == ("f0.1-s1", "f0.1-s2", "f1-s2")
    assert f.detail["low"] == 2 and f.detail["high"] == 1 and f.detail["bounds"] == [0.1, 10.0]
    assert "lower bound T = 0.1" in f.message and "upper bound T = 10" in f.message
    # the task's own search box is the one checked
    assert quality.run_flags(_runs(temperature=0.5), t_bounds=(0.5, 4.0))[0].count == 6
    assert quality.run_flags(runs.assign(temperature=0.5)) == []
    # transfer runs: the source-fitted temperature
    tr = runs.drop(columns="temperature").assign(temperature_src=10.0)
    f = _by_name(quality.run_flags(tr))["temperature_at_bound"]
    assert f.count == 6 and f.detail["column"] == "temperature_src" and "source-fitted" in f.message


def test_nll_worse_after_scaling():
    runs = _runs(nll_scaled=[0.6, 0.4, 0.5, 0.5 + 1e-7, 0.45, np.nan])
    f = _by_name(quality.run_flags(runs))["nll_worse_after_scaling"]
    assert f.count == 1 and f.cells == ("f0.1-s1",) and f.detail["worst_increase"] == pytest.approx(0.1)


def test_collapse_prevalence_aware_and_prism_disagreement():
    runs = _runs(collapsed=[True, False, False, False, False, False],
                 degenerate=[True, True, False, False, False, False], degeneracy_share=0.995,
                 top_class_true_share=0.98)
    flags = _by_name(quality.run_flags(runs))
    assert flags["collapsed"].count == 1 and flags["collapsed"].detail == {"rule": "prevalence", "degenerate": 1}
    info = flags["degenerate_not_collapsed"]
    assert info.level == "info" and info.cells == ("f0.1-s2",)
    # results without the prevalence-aware column: PRISM's rule, said so
    old = runs.drop(columns=["collapsed", "n_test_classes"])
    f = _by_name(quality.run_flags(old))["collapsed"]
    assert f.count == 2 and f.detail["rule"] == "prism" and "PRISM rule" in f.message


def test_single_class_test_is_not_collapse_and_few_samples():
    runs = _runs(n_test_classes=1, degenerate=True, collapsed=False, min_test_class_count=40)
    flags = _by_name(quality.run_flags(runs.drop(columns="collapsed")))  # even on the PRISM fallback
    assert set(flags) == {"single_class_test"} and "test split has one class" in flags["single_class_test"].message
    few = _by_name(quality.run_flags(_runs(min_test_class_count=3)))["few_test_samples_per_class"]
    assert few.count == 6 and few.detail["min_count"] == 3
    train = _by_name(quality.run_flags(_runs(n_train=[2, 2, 2, 200, 200, 200])))["few_train_samples_per_class"]
    assert train.level == "info" and train.fractions == (0.1,)


def test_data_checks_come_first_and_are_not_repeated():
    checks = [{"check": "split_overlap", "level": "warning", "message": "val and test  share 12 rows\n(val.npy)",
               "splits": ["val", "test"], "count": 12},
              {"check": "single_class_test", "level": "allowed", "message": "test has one class", "splits": ["test"],
               "count": 1}, "not a mapping"]
    flags = quality.run_flags(_runs(n_test_classes=1), data_checks=checks)
    assert [f.flag for f in flags] == ["split_overlap", "single_class_test"]
    assert flags[0].message == "val and test share 12 rows (val.npy)" and flags[0].source == "data"
    assert flags[0].to_dict()["cells"] == ["val", "test"] and flags[1].level == "allowed"
    assert quality.qualified(flags[1:]) is False


def test_compact_table_marks_fractions():
    runs = _runs(temperature=[0.1, 0.1, 0.1, 1.5, 1.5, 1.5], probe_converged=[True] * 5 + [False],
                 collapsed=[False] * 5 + [True])
    text = compact_table(runs)
    lines = text.splitlines()
    assert lines[0].endswith("collapsed  flags")
    assert lines[1].rstrip().endswith("0/3  T@bound 3") and "1/3  not-converged 1" in lines[2]
    # flags given explicitly (as run_job attaches them): the task's bounds
    flags = [f.to_dict() for f in quality.run_flags(runs.assign(temperature=0.5), t_bounds=(0.5, 2.0))]
    assert "T@bound 3" in compact_table(runs, flags).splitlines()[2]


def _verdict(runs: pd.DataFrame, **kw):
    out = derived.summarize(RunTables(indomain=runs), kw)
    settings = out.tables["report_settings"]
    v = build_verdict(settings)
    assert check_verdict(v, out.tables) == []
    return v, settings


def test_verdict_lowered_ece_is_not_a_plain_success_when_qualified():
    v, _ = _verdict(_runs())
    good = v.loc[v["topic"] == "scaling"]
    assert list(good["level"]) == ["good"] and "lowered ECE in every cell" in good.iloc[0]["text"]
    v, settings = _verdict(_runs(temperature=[0.1] * 6, nll_scaled=[0.6, 0.4, 0.4, 0.4, 0.4, 0.4]))
    assert settings.iloc[0]["t_bound_cells"] == 2 and settings.iloc[0]["t_bound_side"] == "low"
    assert settings.iloc[0]["nll_worse_cells"] == 1 and settings.iloc[0]["nll_worse_fractions"] == "0.1"
    sc = v.loc[v["topic"] == "scaling"]
    head = sc.iloc[0]
    assert head["level"] == "warn" and "not as a clean success" in head["text"]
    bound = sc.loc[sc["column"] == "t_bound_cells"].iloc[0]
    assert bound["value"] == 2 and "lower search bound in 2 of 2 label fractions" in bound["text"]
    nll = sc.loc[sc["column"] == "nll_worse_cells"].iloc[0]
    assert nll["value"] == 1 and "NLL got worse" in nll["text"] and "10 %" in nll["text"]
    # the task's own bounds reach the report through the summary options
    _, s2 = _verdict(_runs(temperature=[0.5] * 6), temperature_bounds=[0.5, 4.0])
    assert s2.iloc[0]["t_bound_cells"] == 2


def test_verdict_says_non_convergence_collapse_and_one_class_test():
    v, _ = _verdict(_runs(probe_converged=[False, True, True, True, True, True]))
    probe = v.loc[v["topic"] == "probe"].iloc[0]
    assert probe["level"] == "warn" and "did not converge" in probe["text"] and probe["value"] == 1
    v, _ = _verdict(_runs(collapsed=[True, False, False, False, False, False], degenerate=True,
                          degeneracy_share=0.995))
    coll = v.loc[v["topic"] == "collapse"]
    assert "prevalence-aware" in coll.iloc[0]["text"] and coll.iloc[0]["column"] == "largest_collapsed_fraction"
    prism = coll.loc[coll["column"] == "degenerate_cells"].iloc[0]
    assert prism["level"] == "info" and "marks 2 of 2 cells, the prevalence-aware rule 1" in prism["text"]
    v, _ = _verdict(_runs(n_test_classes=1, degenerate=True))
    coll = v.loc[v["topic"] == "collapse"]
    assert len(coll) == 1 and "test split has one class" in coll.iloc[0]["text"]
    assert "probe collapses" not in " ".join(v["text"])


def test_verdict_data_check_lines():
    out = derived.summarize(RunTables(indomain=_runs()), {})
    flags = [{"model": "M", "task": "t", "flag": "split_overlap", "level": "warning", "source": "data",
              "message": "val and test are the same file"},
             {"model": "other", "task": "t", "level": "warning", "source": "data", "message": "not M's"},
             {"model": "M", "task": "t", "level": "warning", "source": "runs", "message": "run flag"}]
    v = build_verdict(out.tables["report_settings"], flags=flags)
    data = v.loc[v["topic"] == "data"]
    assert list(data["text"]) == ["t: val and test are the same file"] and list(data["level"]) == ["warn"]


def test_loader_single_class_check_overrides_the_prism_fallback():
    old = _runs(degenerate=True).drop(columns=["collapsed", "n_test_classes"])
    checks = [{"check": "single_class_test", "level": "warning", "message": "test has one class", "splits": ["test"],
               "count": 1}]
    assert [f.flag for f in quality.run_flags(old, data_checks=checks)] == ["single_class_test"]
    from prism_plugin.runner import _collapse_fractions

    rows = old.to_dict("records")
    assert _collapse_fractions(rows, one_class=True) == ([], [0.1, 1.0])
    assert _collapse_fractions(rows) == ([0.1, 1.0], [0.1, 1.0])


def test_one_t_at_a_bound_test_for_the_run_flags_and_the_report_counts():
    box = (0.1, 10.0)
    assert [quality.bound_side(t, box) for t in (0.1, 0.1009, 0.1011, 5.0, 9.9991, 10.0, float("nan"))] == [
        "low", "low", "", "", "high", "high", ""]
    assert not hasattr(quality, "at_bound")
    from prism_plugin.protocol import temperature

    assert not hasattr(temperature, "at_bound")
