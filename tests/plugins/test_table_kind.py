"""A per-run table kind registered by a plugin: a task joins it, summaries read it, nothing else changes."""

from __future__ import annotations

import json

import pytest

from prism_plugin.contracts import SummaryOutput
from prism_plugin.errors import PrismError
from prism_plugin.plugins import PluginHost

from .test_host import plugin

SEEN: dict[str, object] = {}


def _cohort_plugin():
    def register_tables(register):
        register("my_cohort", "my_cohort_all.csv", ("model", "dataset", "fraction", "seed", "auroc"),
                 renames={"ece_fixed": "ece"}, description="a lab's own cohort")

    def summarize(tables, options):
        df = tables["my_cohort"]
        SEEN["tables"] = tables.present()
        if df is None:
            return None
        return SummaryOutput(tables={"my_cohort_auroc": df.groupby("fraction")["auroc"].mean().reset_index()},
                             headline={"my_cohort_runs": int(len(df)), "renamed": "ece" in df})

    return plugin("cohort", register_tables=register_tables, summarize=summarize)


@pytest.fixture(scope="module")
def cohort_run(tmp_path_factory):
    from prism_plugin.runner import JobOptions, make_adapter, run_job
    from prism_plugin.tasks.index import default_index

    host = PluginHost(extra_plugins=[_cohort_plugin()], third_party=False)
    task = default_index(host, []).load_task(
        "prism_demo", ["reference_table=my_cohort", "label_fractions=[0.5,1.0]", "seeds=[42]"])
    out = tmp_path_factory.mktemp("cohort") / "results"
    run_job(task, make_adapter(host, "demo_vit", {}), host,
            JobOptions(output=out, progress=False, report=False, log=lambda *_: None))
    return host, out


def test_a_task_joins_a_plugin_table_kind_and_summaries_read_it(cohort_run):
    from prism_plugin.summaries.engine import run_summaries
    from prism_plugin.tables import tables_from_results

    host, out = cohort_run
    tables = tables_from_results([out], host)
    assert tables.present() == ["my_cohort"] and tables.indomain is None
    assert "ece" in tables["my_cohort"] and "ece_fixed" not in tables["my_cohort"]  # the kind's renames
    summary = run_summaries(tables, {}, host, only=["cohort"])
    assert summary.headline == {"my_cohort_runs": 2, "renamed": True}
    assert list(summary.tables["my_cohort_auroc"]["fraction"]) == [0.5, 1.0]
    assert json.loads((out / "summary.json").read_text())["resolved_task"]["reference_table"] == "my_cohort"


def test_without_the_plugin_the_kind_is_unknown_with_the_available_ones(cohort_run, tmp_path):
    from prism_plugin.tables import tables_from_results
    from prism_plugin.tasks.index import default_index

    _, out = cohort_run
    host = PluginHost(third_party=False)
    with pytest.raises(PrismError, match=r"unknown reference_table 'my_cohort'.*table kinds: indomain, transfer"):
        tables_from_results([out], host)
    with pytest.raises(PrismError, match=r"reference_table: must be a table kind \(indomain, transfer, .*'my_cohort'"):
        default_index(host, []).load_task("prism_demo", ["reference_table=my_cohort"])
    with pytest.raises(PrismError, match="did you mean 'transfer'"):
        default_index(host, []).load_task("prism_demo", ["reference_table=transfr"])


def test_a_table_kind_file_must_be_a_plain_csv_name():
    def register_tables(register):
        register("bad", "../outside.csv", ("model",))

    host = PluginHost(extra_plugins=[plugin("bad_tables", register_tables=register_tables)], third_party=False)
    with pytest.raises(PrismError, match="file must be a plain '<stem>.csv' name"):
        host.tables


# -- a plugin table kind declares what the report needs, and the report and leaderboard show it ----

def _lab_plugin():
    def register_tables(register):
        register("lab_cohort", "lab_cohort.csv", ("model", "dataset", "fraction", "seed", "auroc"),
                 role="in_distribution", label="lab cohort (in-house slides)", order=15, description="a lab's cohort")

    return plugin("lab_tables", register_tables=register_tables)


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory):
    from prism_plugin.runner import JobOptions, make_adapter, run_job
    from prism_plugin.tasks.index import default_index

    host = PluginHost(extra_plugins=[_lab_plugin()], third_party=False)
    task = default_index(host, []).load_task(
        "prism_demo", ["reference_table=lab_cohort", "label_fractions=[0.5,1.0]", "seeds=[42]"])
    out = tmp_path_factory.mktemp("lab") / "results"
    run_job(task, make_adapter(host, "demo_vit", {}), host,
            JobOptions(output=out, progress=False, report=False, log=lambda *_: None))
    return host, out


def test_a_plugin_table_kind_appears_in_the_report(lab_run):
    from prism_plugin.report.build import write_report

    host, out = lab_run
    write_report(out, host)
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (md, page):
        assert "lab cohort (in-house slides)" in text  # the kind's label: overview, verdict, figures, cells
        assert "no in-distribution runs could be read" not in text and "(only transfer)" not in text
    assert "figures/discrimination-lab_cohort.png" in md and "figures/ece-lab_cohort.png" in md
    cells = (out / "summaries" / "report_cells.csv").read_text()
    assert cells.splitlines()[1].startswith("lab_cohort,")


def test_a_plugin_table_kind_appears_in_the_leaderboard(lab_run, tmp_path):
    from prism_plugin.cli import main

    host, out = lab_run
    assert main(["report", str(out), "--output", str(tmp_path / "lb")], host=host) == 0
    md = (tmp_path / "lb" / "report.md").read_text()
    per_dataset = md[md.index("## Per dataset"):md.index("## Per transfer pair")]
    assert "| lab cohort (in-house slides) | Demo-Binary | 100 % |" in per_dataset
    assert "lab cohort (in-house slides)" in (tmp_path / "lb" / "report.html").read_text()


def test_a_table_kind_declaration_names_the_bad_argument():
    def register_tables(register):
        register("odd", "odd.csv", role="transfr")

    host = PluginHost(extra_plugins=[plugin("odd_tables", register_tables=register_tables)], third_party=False)
    with pytest.raises(PrismError, match=r"table kind 'odd' .*role 'transfr' is not one of .*did you mean 'transfer'"):
        host.tables

    def register_tables(register):  # noqa: F811
        register("odd", "odd.csv", lable="Odd")

    host = PluginHost(extra_plugins=[plugin("odd_tables", register_tables=register_tables)], third_party=False)
    with pytest.raises(PrismError, match=r"unknown argument 'lable'; did you mean 'label'"):
        host.tables


def test_the_example_package_declares_a_table_kind_the_report_reads(monkeypatch):
    import importlib
    from pathlib import Path

    from prism_plugin.report.derived import report_kinds
    from prism_plugin.report.build import summary_options

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples/prism-extension-example/src"))
    example = importlib.import_module("prism_extension_example.plugin")
    host = PluginHost(extra_plugins=[example], third_party=False)
    kinds = report_kinds(summary_options({}, host, [])[0])
    assert list(kinds)[:2] == ["indomain", "example_cohort"]  # order 15: after indomain (10)
    cohort = kinds["example_cohort"]
    assert (cohort.role, cohort.setting, cohort.label, cohort.leaderboard) == (
        "in_distribution", "dataset", "example cohort (plugin table kind)", "show")
    assert "example_cohort" not in report_kinds(summary_options({}, PluginHost(third_party=False), [])[0])
