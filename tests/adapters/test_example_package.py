"""The third-party example package installs with pip and runs through prism-run by name.

The package (``examples/prism-adapter-example``) registers an adapter through
the ``prism_plugin.adapters`` entry-point group and a metric through
``prism_plugin``. It is installed with ``pip install --no-deps --no-build-isolation
--target`` (from a copy, so the source tree stays clean) once per test session into a private
folder, never into the test environment, and made visible through ``PYTHONPATH`` (the real
``prism-run`` subprocess) or, in this process, by ``installed_plugins`` (nothing of it left after).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from .adapters_support import REPO

EXAMPLE = REPO / "examples" / "prism-adapter-example"


@pytest.fixture(scope="module")
def installed_example(install_once):
    """The example installed into a private folder (never into the test environment itself)."""
    return install_once(EXAMPLE)


def test_example_is_listed_by_name(installed_example):
    from prism_plugin.plugins import PluginHost
    from tests.conftest import installed_plugins

    with installed_plugins(installed_example["_TARGET"]):
        host = PluginHost()  # a fresh host reads the entry points installed a moment ago
        entry = host.adapter_factory("example_colour_stats")
    assert "prism-adapter-example 0.1.0" in entry.origin
    assert "run_metrics" in host.infos["example_metrics"].hooks


def test_prism_run_with_the_example_adapter_and_metric(installed_example, run_cli, tiny_task, tmp_path):
    out = tmp_path / "results"
    proc = run_cli("--task", str(tiny_task), "--model", "example_colour_stats", "--model-args", "size=24",
                   "--output", str(out), "--quiet", "--no-report", "--num-workers", "0",
                   env={"PYTHONPATH": installed_example["PYTHONPATH"]}, check=True)
    assert f"results: {out}" in proc.stdout
    runs = pd.read_csv(out / "runs.csv")
    # labelled by its display name and the option it was given (one rule, alone or beside other option sets)
    assert list(runs["model"]) == ["ColourStats-size-24"] and list(runs["adapter"]) == ["example_colour_stats"]
    value = float(runs["example_balanced_accuracy"].iloc[0])
    assert 0.5 <= value <= 1.0  # colour separates the two tiny classes
    # the metric plugin itself against scikit-learn
    from sklearn.metrics import balanced_accuracy_score

    from tests.conftest import installed_plugins

    rng = np.random.default_rng(0)
    y, pred = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    with installed_plugins(installed_example["_TARGET"]):
        from prism_adapter_example.metrics import balanced_accuracy

        assert balanced_accuracy(y, pred) == pytest.approx(balanced_accuracy_score(y, pred))
