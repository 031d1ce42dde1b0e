"""A metric described by a third-party plugin (``register_metrics``) reaches summary.json cells,
the report's metric table, the verdict and ``prism-run compare``; cell aggregation by closed form;
the report plugin failure policy; the one results discovery and the one Markdown table writer."""

from __future__ import annotations

import argparse
import json
import types

import numpy as np
import pandas as pd
import pytest

from prism_plugin.hookspecs import hookimpl
from prism_plugin.plugins import PluginHost
from prism_plugin.registrars import MetricInfo
from prism_plugin.report.verdict_rows import check_verdict, pct
from prism_plugin.aggregation import cell_stats

MODEL = "DemoViT-Tiny"
FRACTIONS = [0.5, 1.0]
SEEDS = [42, 123, 7]
#: today's summary.json cell metrics, in order (must stay bit-identical)
SUMMARY_TODAY = ["auroc", "f1_macro", "brier", "nll", "ece_fixed", "ece_adaptive", "temperature", "ece_scaled_fixed",
                 "ece_scaled_adaptive", "degeneracy_share", "temperature_src"]


def _score_plugin():
    """A third-party plugin: a per-run error rate, deliberately skewed for seed 7 so that the
    seed median and the seed mean differ; described as lower-is-better, aggregated by the median."""
    plugin = types.ModuleType("my_metric_plugin")

    @hookimpl
    def run_metrics(run):
        error = float(np.mean(run.pred_test != run.y_test))
        return {"my_score": error + (0.5 if run.seed == 7 else 0.0)}

    @hookimpl
    def register_metrics(register):
        register("my_score", direction="lower", aggregation="median", display="My score",
                 description="test error rate (skewed)", compare=True)

    plugin.run_metrics = run_metrics
    plugin.register_metrics = register_metrics
    return plugin


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The demo task run in-process with the plugin host (report included)."""
    from prism_plugin.runner import JobOptions, make_adapter, run_job
    from prism_plugin.tasks.index import default_index

    host = PluginHost(extra_plugins=[_score_plugin()])
    task = default_index(host, []).load_task(
        "prism_demo", [f"label_fractions={json.dumps(FRACTIONS)}", f"seeds={json.dumps(SEEDS)}"])
    out = tmp_path_factory.mktemp("scored") / "results"
    run_job(task, make_adapter(host, "demo_vit", {}), host,
            JobOptions(output=out, progress=False, log=lambda *_: None))
    return host, out


def _medians(runs: pd.DataFrame) -> pd.Series:
    return runs.groupby("fraction")["my_score"].agg(lambda v: float(np.median(v.to_numpy())))


# --------------------------------------------------------------------------- aggregation, closed form
def test_cell_stats_aggregates_as_described():
    df = pd.DataFrame({"model": "m", "fraction": [0.1] * 4 + [1.0] * 3,
                       "s": [1.0, 2.0, 10.0, np.nan, 3.0, 5.0, 4.0], "t": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]})
    infos = [MetricInfo("s", aggregation=a) for a in ("median", "max", "min", "sum", "first")]
    cells = cell_stats(df, ["model"], [*infos, "t", MetricInfo("absent")])
    a, b = cells
    assert (a["s_median"], a["s_max"], a["s_min"], a["s_sum"], a["s_first"]) == (2.0, 10.0, 1.0, 13.0, 1.0)
    assert (b["s_median"], b["s_max"], b["s_min"], b["s_sum"], b["s_first"]) == (4.0, 5.0, 3.0, 12.0, 3.0)
    assert "s_mean" not in a and "absent_mean" not in a and not any(k.startswith("absent") for k in a)
    # a name and a mean description give today's mean and seed std (ddof = 1), bit for bit
    assert a["t_mean"] == float(pd.Series([0.1, 0.2, 0.3, 0.4]).mean())
    assert a["t_std"] == float(pd.Series([0.1, 0.2, 0.3, 0.4]).std(ddof=1))
    assert cell_stats(df, ["model"], ["t"]) == cell_stats(df, ["model"], [MetricInfo("t")])
    one = cell_stats(df.iloc[:1], ["model"], ["t"])[0]
    assert one["n_runs"] == 1 and np.isnan(one["t_std"])


def test_builtin_descriptions_keep_todays_summary_and_band_metrics():
    from prism_plugin.metrics.descriptions import described_metrics, metric_infos
    from prism_plugin.report.derived import VERDICT_BAND_COLUMNS, band_metrics

    host = PluginHost()
    assert [i.column for i in metric_infos(host, "summary")] == SUMMARY_TODAY
    assert all(i.aggregation == "mean" for i in metric_infos(host, "summary"))
    assert band_metrics(host=host) == VERDICT_BAND_COLUMNS == ("auroc", "f1_macro", "ece_fixed", "ece_scaled_fixed")
    assert all(d.builtin for d in described_metrics(host))
    # a third party's band metric comes after the built-in ones
    plugin = types.ModuleType("band_plugin")
    plugin.register_metrics = hookimpl(lambda register: register("my_band", direction="higher", bands=True))
    assert band_metrics(host=PluginHost(extra_plugins=[plugin]))[-1] == "my_band"


# --------------------------------------------------------------------------- end to end
def test_plugin_metric_reaches_summary_json(scored):
    _, out = scored
    runs = pd.read_csv(out / "runs.csv")
    assert "my_score" in runs.columns and len(runs) == len(FRACTIONS) * len(SEEDS)
    summary = json.loads((out / "summary.json").read_text())
    cells = {c["fraction"]: c for c in summary["cells"]}
    med = _medians(runs)
    for f in FRACTIONS:
        assert cells[f]["my_score_median"] == pytest.approx(med[f], abs=0, rel=0)
        assert "my_score_mean" not in cells[f]
        # the built-in cells are untouched: today's keys, in today's order
        assert [k for k in cells[f] if k.endswith("_mean")] == [f"{m}_mean" for m in SUMMARY_TODAY if m in runs]
    # the skew makes mean and median differ: the median is really the median
    assert (runs.groupby("fraction")["my_score"].mean() - med).abs().min() > 0.1


def test_plugin_metric_in_report_table_and_verdict(scored):
    _, out = scored
    runs = pd.read_csv(out / "runs.csv")
    med = _medians(runs)
    md = (out / "report.md").read_text(encoding="utf-8")
    section = md.split('<a id="metrics"></a>')[1].split("<a id=")[0]
    def cells_of(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    header = next(cells_of(line) for line in section.splitlines() if line.startswith("| runs |"))
    row = [cells_of(line) for line in section.splitlines() if "| My score ↓ |" in line]
    assert len(row) == 1, section
    assert row[0][header.index("over seeds")] == "median"
    for f in FRACTIONS:  # each fraction's median in its own column
        assert row[0][header.index(pct(f))] == f"{med[f]:.4f}", (f, header, row[0])
    assert "From plugins: `my_score` (passed in code)" in section and "AUROC ↑" in section  # built-ins too
    cells = pd.read_csv(out / "summaries" / "metric_cells.csv")
    mine = cells.loc[cells["metric"] == "my_score"].set_index("fraction")
    np.testing.assert_array_equal(mine.loc[FRACTIONS, "value"].to_numpy(), med.loc[FRACTIONS].to_numpy())
    assert (mine["aggregation"] == "median").all() and mine["std"].isna().all()
    auroc = cells.loc[cells["metric"] == "auroc"].set_index("fraction")
    assert auroc.loc[1.0, "value"] == pytest.approx(runs.loc[runs["fraction"] == 1.0, "auroc"].mean(), abs=1e-12)
    # the verdict: one line for the plugin metric, its best (lowest) fraction, citing metric_cells.csv
    verdict = pd.read_csv(out / "summaries" / "verdict.csv", keep_default_na=False)
    verdict["value"] = pd.to_numeric(verdict["value"].replace("", np.nan))
    line = verdict.loc[verdict["topic"] == "metrics"]
    assert len(line) == 1 and line.iloc[0]["source"] == "metric_cells.csv"
    best = med.idxmin()
    assert json.loads(line.iloc[0]["where"])["fraction"] == best and line.iloc[0]["value"] == med[best]
    assert f"best at {best * 100:g} %" in line.iloc[0]["text"]
    settings = pd.read_csv(out / "summaries" / "report_settings.csv")
    assert check_verdict(verdict, {"report_settings": settings, "metric_cells": cells}) == []
    # every built-in verdict line still cites report_settings.csv
    assert set(verdict.loc[verdict["topic"] != "metrics", "source"]) <= {"report_settings.csv", ""}


def test_plugin_metric_in_compare(scored, tmp_path, capsys):
    from prism_plugin.commands import compare

    host, out = scored
    table = tmp_path / "ranked.csv"
    args = argparse.Namespace(results_dirs=[out], fraction=1.0, reference=None, aggregation="multiplicative",
                              ood_stability=[], output=table, prism_host=host)  # the host prism-run built
    assert compare.run(args) == 0
    text = capsys.readouterr().out
    header = [line for line in text.splitlines() if line.startswith("rank model")][0]
    assert header.rstrip().endswith("My score (median) ↓")
    med = _medians(pd.read_csv(out / "runs.csv"))
    mine = [line for line in text.splitlines() if f"{MODEL} *" in line][0]
    assert mine.split()[-1] == f"{med[1.0]:.4f}"
    ranked = pd.read_csv(table, index_col=0)
    assert ranked.at[MODEL, "my_score"] == pytest.approx(med[1.0], abs=1e-15)
    refs = ranked.drop(index=MODEL)
    assert len(refs) and refs["my_score"].isna().all()  # reference models lack it: n/a, never faked
    ref_lines = [line for line in text.splitlines() if line[:4].strip().endswith(".") and f"{MODEL}" not in line]
    assert ref_lines and all(line.split()[-1] == "n/a" for line in ref_lines)
    assert "were not measured with it (n/a)" in text
    # without the plugin the column is not there at all
    args.prism_host = PluginHost()
    assert compare.run(args) == 0
    assert "My score" not in capsys.readouterr().out


def test_failing_report_plugin_becomes_a_section(scored):
    from prism_plugin.report.build import build_view, collect_sections

    _, out = scored
    broken = types.ModuleType("broken_report")

    def report_sections(view):
        raise ValueError("boom")

    broken.report_sections = hookimpl(report_sections)
    host = PluginHost(extra_plugins=[broken])
    sections = collect_sections(build_view(out, host, write_tables=False), host)
    failed = [s for s in sections if s.title == "Report plugin broken_report failed"]
    assert len(failed) == 1
    assert "'broken_report' failed in hook report_sections" in failed[0].body and "ValueError: boom" in failed[0].body
    assert "--disable broken_report" in failed[0].body
    assert any(s.key == "metrics" for s in sections)  # the other plugins' sections are all there


# --------------------------------------------------------------------------- discovery and tables
def test_runs_files_is_the_tolerant_find_runs_files(tmp_path):
    from prism_plugin.report.build import source_dirs
    from prism_plugin.results import runs_files
    from prism_plugin.summaries.probe_sensitivity import load_runs
    from prism_plugin.results import find_runs_files

    for sub in ("b/x", "a/y"):
        (tmp_path / sub).mkdir(parents=True)
        pd.DataFrame({"model": ["m"], "fraction": [1.0], "seed": [1]}).to_csv(tmp_path / sub / "runs.csv", index=False)
    (tmp_path / "empty").mkdir()
    want = find_runs_files([tmp_path])
    assert want == [tmp_path / "a/y/runs.csv", tmp_path / "b/x/runs.csv"]
    assert runs_files([tmp_path, tmp_path / "missing", tmp_path / "empty", tmp_path / "a/y"]) == want
    assert source_dirs([tmp_path]) == [p.parent for p in want]
    assert list(load_runs([tmp_path, tmp_path / "b/x/runs.csv"])["results_dir"]) == [str(p.parent) for p in want]
    assert runs_files([tmp_path / "empty"]) == [] and load_runs([tmp_path / "empty"]).empty


def test_one_markdown_table_writer():
    from prism_plugin.report import basic, geometry_sections
    from prism_plugin.report.markdown import markdown_table, pipe_table

    assert basic.markdown_table is markdown_table
    df = pd.DataFrame({"a": [1, 2500], "b": [0.12345, float("nan")], "c": ["x|y", True]})
    assert markdown_table(df) == "| a | b | c |\n|---|---|---|\n| 1 | 0.123 | x\\|y |\n| 2,500 | – | yes |"
    assert geometry_sections._md_table(df, [("b", "B")], index="i") == pipe_table(["i", "B"], [["0", "0.123"],
                                                                                            ["1", "–"]])
