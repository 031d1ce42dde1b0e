"""Where a plugin's summary.json block and runs.csv's column order come from: a task key's own
``summary=`` (the bootstrap plugin's cells[].ci the same way, never named by the runner) and
``metrics.descriptions.METRIC_PLUGIN_ORDER``, not the plugin list's order."""

from __future__ import annotations

import json
import types

import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.descriptions import METRIC_PLUGIN_ORDER, PRISM_METRIC_ORDER, in_plugin_order, metric_infos
from prism_plugin.plugins import PluginHost

GRID = ["label_fractions=[1.0]", "seeds=[1,2]"]


def _note_plugin():
    """A third party's task key ``note`` whose summary block counts the cells and runs it saw, and a
    metric column ``aa_first`` (named to sort first alphabetically)."""
    plugin = types.ModuleType("note_plugin")

    def summary(value, *, cells, runs, run_ids, artifact_dir, task, cell_by):
        return {"value": value, "cells": len(cells), "runs": len(run_ids), "task": task, "by": list(cell_by)}

    @hookimpl
    def register_task_keys(register):
        register("note", lambda value, ctx: value, summary=summary, description="a label with a summary block")

    @hookimpl
    def run_metrics(run):
        return {"aa_first": 1.0}

    plugin.register_task_keys = register_task_keys
    plugin.run_metrics = run_metrics
    return plugin


def _run(tmp_path, host, extra=()):
    from prism_plugin.runner import JobOptions, make_adapter, run_job
    from prism_plugin.tasks.index import default_index

    task = default_index(host, []).load_task("prism_demo", [*GRID, *extra])
    out = tmp_path / "results"
    run_job(task, make_adapter(host, "demo_vit", {}), host,
            JobOptions(output=out, progress=False, report=False, log=lambda *_: None))
    return pd.read_csv(out / "runs.csv"), json.loads((out / "summary.json").read_text())


def test_a_task_keys_summary_block_and_the_column_order(tmp_path):
    runs, summary = _run(tmp_path, PluginHost(extra_plugins=[_note_plugin()]), ["note=hello"])
    assert summary["note"] == {"value": "hello", "cells": 1, "runs": 2, "task": "prism_demo", "by": ["model", "dataset"]}
    assert summary["bootstrap"]["n"] == 200 and "ci" in summary["cells"][0]  # the bootstrap key's own block
    cols = list(runs.columns)
    # built-in metric plugins in METRIC_PLUGIN_ORDER (collapse < classwise < bootstrap), a third party after them
    order = [cols.index(c) for c in ("collapsed", "ece_classwise", "auroc_ci_low", "n_test_min_class", "aa_first")]
    assert order == sorted(order)
    assert METRIC_PLUGIN_ORDER.index("collapse") < METRIC_PLUGIN_ORDER.index("bootstrap")
    assert [i.column for i in metric_infos(PluginHost(), "summary")] == list(PRISM_METRIC_ORDER)


def test_disabling_the_bootstrap_plugin_drops_its_key_block_and_columns(tmp_path):
    runs, summary = _run(tmp_path, PluginHost(disable=["bootstrap"]))
    assert "bootstrap" not in summary and not any("ci" in c for c in summary["cells"])
    assert not any(c.endswith("_ci_low") for c in runs.columns) and "n_test_min_class" not in runs
    assert "bootstrap" not in PluginHost(disable=["bootstrap"]).task_keys


def test_the_declared_order_not_the_call_order_places_columns():
    called = [types.SimpleNamespace(plugin=p) for p in ("third_party", *reversed(METRIC_PLUGIN_ORDER), "other")]
    assert [r.plugin for r in in_plugin_order(called)] == [*METRIC_PLUGIN_ORDER, "third_party", "other"]
