"""Every hook is documented and exercised by a third party's plugin through the real host.

Like datasette's ``test_plugin_hooks_have_tests``: each hookspec of ``prism_plugin/hookspecs.py``
needs (a) its page ``docs/extending/<hook>.md`` (a deprecated hook: its replacement's page, and the
extending index names it), (b) an ``@hookimpl`` of it outside the built-ins (``examples/*`` or a
plugin module under ``tests/``), and (c) a ``test_hook_<hook>`` below that loads such a plugin into
a real :class:`~prism_plugin.plugins.PluginHost` and uses what it registered or returned.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism_plugin import hookspecs
from prism_plugin.contracts import ReportView, RunContext, RunTables
from prism_plugin.plugins import PluginHost
from prism_plugin.protocol.grid import SCALING
from prism_plugin.quality import QualityContext

from tests.plugins import thirdparty_hooks

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SRC = REPO / "examples" / "prism-extension-example" / "src"
HOOKS = sorted(name for name, obj in vars(hookspecs).items() if hasattr(obj, f"{hookspecs.PROJECT}_spec"))


def _third_party_impls() -> dict[str, list[str]]:
    """hook name -> ``file:line`` of every ``@hookimpl`` function outside ``src/`` (examples, tests)."""
    files = [p for p in sorted((REPO / "examples").rglob("*.py")) if "build" not in p.parts]
    files += sorted((REPO / "tests").rglob("*.py"))
    out: dict[str, list[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef) and any(
                    "hookimpl" in ast.unparse(d) for d in node.decorator_list):
                out.setdefault(node.name, []).append(f"{path.relative_to(REPO)}:{node.lineno}")
    return out


IMPLS = _third_party_impls()


def test_the_hooks_are_found():
    assert {"register_heads", "probe_heads", "run_metrics", "report_sections"} <= set(HOOKS)
    assert "register_checks" in IMPLS and "hookimpl" not in HOOKS


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented(hook):
    page = REPO / "docs" / "extending" / f"{hookspecs.DEPRECATED.get(hook, hook)}.md"
    assert page.is_file(), f"{hook}: no page {page.relative_to(REPO)}"
    if hook in hookspecs.DEPRECATED:
        assert hook in (REPO / "docs" / "extending" / "index.md").read_text(), f"{hook}: not named in the index"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_third_party_implementation(hook):
    assert IMPLS.get(hook), f"{hook}: no @hookimpl outside src/ (examples/* or a plugin module under tests/)"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_run_through_the_host_by_a_test(hook):
    assert callable(globals().get(f"test_hook_{hook}")), f"{hook}: no test_hook_{hook} in {__file__}"


# -- the plugins, loaded into a real host --------------------------------------------------

@pytest.fixture(scope="module")
def example():
    """The host with prism-extension-example's plugin module (imported from its source folder)."""
    sys.path.insert(0, str(EXAMPLE_SRC))
    try:
        module = importlib.import_module("prism_extension_example.plugin")
        yield PluginHost(extra_plugins=[module], third_party=False), module.__name__
    finally:
        sys.path.remove(str(EXAMPLE_SRC))


@pytest.fixture(scope="module")
def ours():
    with pytest.warns(DeprecationWarning):  # probe_heads, read when the heads registry fills
        host = PluginHost(extra_plugins=[thirdparty_hooks], third_party=False)
        host.registry("heads")
    return host, thirdparty_hooks.__name__


def _entry(host, catalogue, name, plugin):
    entry = host.registry(catalogue).entry(name)
    assert entry.plugin == plugin and entry.origin == "passed in code"
    return entry


def _runs() -> pd.DataFrame:
    return pd.DataFrame({"model": ["M"] * 4, "fraction": [0.1, 0.1, 1.0, 1.0], "seed": [0, 1, 0, 1],
                         "auroc": [0.6, 0.7, 0.8, 0.9], "example_brier_top": [0.2, 0.3, 0.1, 0.1],
                         "example_confident_error": [0.1, 0.2, 0.0, 0.1]})


def test_hook_register_adapters(ours):
    host, name = ours
    _entry(host, "adapters", "thirdparty_mean_colour", name)
    assert host.adapter_factory("thirdparty_mean_colour").factory(size=4).size == 4


def test_hook_register_heads(example):
    host, name = example
    entry = _entry(host, "heads", "example_centroid", name)
    assert entry.meta["seed_invariant"] is True and "alpha" in entry.meta["settings"]


def test_hook_probe_heads():
    with pytest.warns(DeprecationWarning, match="probe_heads is deprecated, implement register_heads"):
        host = PluginHost(extra_plugins=[thirdparty_hooks], third_party=False)
        assert host.head_factory("thirdparty_legacy")(seed=3).seed == 3
    assert host.head_traits("thirdparty_legacy")["seed_invariant"] is True


def test_hook_register_sources(example):
    host, name = example
    assert _entry(host, "sources", "csv_vectors", name).meta["kind"] == "features"
    _entry(host, "sources", "noise_tiles", name)


def test_hook_register_adaptation(example):
    host, name = example
    _entry(host, "adaptation", "median_shift", name)
    assert callable(host.registry("adaptation").get("median_shift"))


def test_hook_register_tables(example):
    host, name = example
    _entry(host, "tables", "example_cohort", name)


def test_hook_register_task_keys(example):
    host, name = example
    _entry(host, "task_keys", "example_threshold", name)


def test_hook_register_metrics(example):
    host, name = example
    _entry(host, "metrics", "example_brier_top", name)


def test_hook_register_checks(ours):
    host, name = ours
    _entry(host, "checks", "thirdparty_few_seeds", name)
    [flag] = host.checks.get("thirdparty_few_seeds")(_runs(), QualityContext())
    assert flag.flag == "thirdparty_few_seeds" and flag.count == 2


def test_hook_register_perturbations(ours):
    host, name = ours
    kind = _entry(host, "perturbations", "thirdparty_invert", name).obj
    img = np.full((4, 4, 3), 10, dtype=np.uint8)
    assert kind.params["strength"].default == 1.0
    assert (kind.transform(img, np.random.default_rng(0), strength=1.0) == 245).all()


def test_hook_register_commands(example):
    host, name = example
    _entry(host, "commands", "example-hello", name)


def test_hook_task_paths(example):
    host, name = example
    [result] = host.call("task_paths", only=[name])
    assert any(sorted(Path(p).glob("*.yaml")) for p in result.value)


def test_hook_run_metrics(example):
    host, name = example
    y = np.array([0, 1, 1, 0])
    logits = np.array([[2.0, -2.0], [-1.0, 1.0], [1.0, -1.0], [0.5, -0.5]])
    run = RunContext(task="t", adapter="a", model="M", dataset="d", fraction=1.0, seed=0, n_classes=2, n_train=4,
                     forced_classes=0, y_test=y, proba_test=SCALING.apply(logits, 1.0), logits_test=logits,
                     meta={"example_threshold": 0.6}, scaling=SCALING)
    [result] = host.call("run_metrics", only=[name], run=run)
    assert 0 < result.value["example_confident_error"] <= 0.5


def test_hook_summarize(ours):
    host, name = ours
    [result] = host.call("summarize", only=[name], tables=RunTables(indomain=_runs()), options={})
    assert result.value.headline == {"thirdparty_models": 1}
    assert float(result.value.tables["thirdparty_mean_auroc"]["auroc"].iloc[0]) == pytest.approx(0.75)


def test_hook_report_sections(example, tmp_path):
    host, name = example
    [result] = host.call("report_sections", only=[name], strict=False, view=ReportView(tmp_path, runs=_runs()))
    [section] = result.value
    assert "| M | 0.1 |" in section.body
