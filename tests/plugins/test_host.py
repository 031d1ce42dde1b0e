"""The plugin host: built-ins in code, registries, check_pending, the one dispatch helper, tracing."""

from __future__ import annotations

import sys
import textwrap
import tomllib
import types

import numpy as np
import pytest

from prism_plugin import hookimpl
from prism_plugin.errors import PrismError, UnknownNameError
from prism_plugin.plugins import CATALOGUES, DEFAULT_PLUGINS, PluginFailure, PluginHost
from prism_plugin.registry import Registry

from .test_architecture import REPO


def plugin(name: str, **hooks) -> types.ModuleType:
    """A plugin module object with the given @hookimpl functions."""
    mod = types.ModuleType(name)
    for hook, fn in hooks.items():
        fn.__name__ = hook
        setattr(mod, hook, hookimpl(fn))
    return mod


# -- the generic registry ------------------------------------------------------------------------

def test_registry_lazy_entries_are_imported_on_first_use(tmp_path, monkeypatch):
    (tmp_path / "lazy_thing_for_registry.py").write_text("class Thing:\n    kind = 'lazy'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("thing")
    reg.add("lazy", lazy="lazy_thing_for_registry:Thing", origin="test", aliases=("lz",))
    assert "lazy_thing_for_registry" not in sys.modules
    assert reg.entry("lz").name == "lazy" and reg.entry("lazy").lazy
    assert reg.get("lz").kind == "lazy"
    assert "lazy_thing_for_registry" in sys.modules and not reg.entry("lazy").lazy


def test_registry_errors_name_the_closest_and_the_available():
    reg = Registry("probe head", hint="see `prism-run ls heads`")
    for name in ("logistic", "knn1", "centroid"):
        reg.add(name, object, origin="built in")
    with pytest.raises(UnknownNameError) as exc:
        reg.get("logistc")
    msg = str(exc.value)
    assert "unknown probe head 'logistc'" in msg and "did you mean 'logistic'?" in msg
    assert "available: centroid, knn1, logistic" in msg and "prism-run ls heads" in msg
    with pytest.raises(PrismError, match="registered twice: by built in and by plugin x"):
        reg.add("knn1", object, origin="plugin x")


def test_registry_base_class_check():
    class Base:
        pass

    reg = Registry("widget", base=Base)
    reg.add("ok", type("Sub", (Base,), {}), origin="t")
    with pytest.raises(PrismError, match="widget 'bad' .* is a type, not a Base"):
        reg.add("bad", int, origin="t")


# -- built-ins in code, entry points for third parties ----------------------------------------

def test_builtins_are_listed_in_code_not_in_entry_points():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "prism_plugin" not in project.get("entry-points", {})
    host = PluginHost(third_party=False)
    assert [n for n in host.infos] == [n for n, _ in DEFAULT_PLUGINS]
    assert all(i.origin == "prism_plugin (built in)" for i in host.infos.values())


def test_every_catalogue_is_filled_by_its_hook():
    host = PluginHost(third_party=False)
    expected = {"adapters": "demo_vit", "heads": "logistic", "sources": "demo", "tables": "indomain",
                "task_keys": "sweep", "metrics": "auroc", "commands": "compare"}
    for name, member in expected.items():
        assert member in host.registry(name), name
    assert set(CATALOGUES) >= set(expected)
    traits = host.head_traits("logistic")
    assert traits["seed_invariant"] is True and traits["linear"] is True and "C" in traits["settings"]
    assert host.head_traits("knn1")["linear"] is False


@pytest.mark.parametrize("core", ["builtin_heads", "builtin_commands", "builtin_task_keys"])
def test_the_core_catalogues_cannot_be_disabled(core):
    with pytest.raises(PrismError, match=f"--disable {core}: this plugin holds a core catalogue"):
        PluginHost(disable=[core], third_party=False)


def test_a_disabled_builtin_removes_its_entries():
    host = PluginHost(disable=["builtin_adapters"], third_party=False)
    assert "demo_vit" not in host.registry("adapters")
    with pytest.raises(UnknownNameError, match="unknown adapter 'demo_vit'"):
        host.registry("adapters").get("demo_vit")


def test_a_plugin_fills_a_registry_like_a_builtin():
    class Head:
        def __init__(self, seed=0):
            self.seed = seed

    def register_heads(register):
        register("my_head", Head, seed_invariant=True)

    host = PluginHost(extra_plugins=[plugin("my_heads", register_heads=register_heads)], third_party=False)
    entry = host.registry("heads").entry("my_head")
    assert entry.origin == "passed in code" and entry.meta["seed_invariant"] is True
    assert host.head_factory("my_head")(seed=3).seed == 3
    with pytest.raises(PrismError, match="registered twice"):
        PluginHost(extra_plugins=[plugin("a", register_heads=register_heads),
                                  plugin("b", register_heads=register_heads)], third_party=False).registry("heads")


# -- check_pending ---------------------------------------------------------------------------

def test_a_misspelled_hook_fails_loudly_naming_plugin_function_and_closest_hook():
    bad = plugin("typo_plugin", run_metric=lambda run: {"x": 1.0})
    with pytest.raises(PrismError) as exc:
        PluginHost(extra_plugins=[bad], third_party=False)
    msg = str(exc.value)
    assert "plugin 'typo_plugin': run_metric" in msg and "did you mean 'run_metrics'?" in msg


def test_a_misspelled_hook_in_a_module_names_its_file_and_line(tmp_path, monkeypatch):
    (tmp_path / "typo_module_plugin.py").write_text(textwrap.dedent("""\
        from prism_plugin import hookimpl


        @hookimpl
        def summarise(tables, options):
            return None
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import typo_module_plugin

    with pytest.raises(PrismError, match=r"summarise \(.*typo_module_plugin.py:4\).*did you mean 'summarize'"):
        PluginHost(extra_plugins=[typo_module_plugin], third_party=False)


# -- the one dispatch helper -------------------------------------------------------------------

def _tiny_grid(host):
    from prism_plugin.protocol.grid import GridSpec, run_grid
    from prism_plugin.protocol.inputs import SplitArrays

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 20)
    X = (rng.normal(size=(40, 4)) + y[:, None]).astype(np.float32)
    split = SplitArrays(X, y, name="tiny")
    spec = GridSpec(fractions=(1.0,), seeds=(42,))
    return run_grid(split, split, split, 2, spec, host, {"task": "tiny", "adapter": "a", "model": "m",
                                                         "dataset": "d"})


def test_a_failing_metric_plugin_names_itself_and_the_hook():
    def run_metrics(run):
        raise ZeroDivisionError("boom")

    host = PluginHost(extra_plugins=[plugin("fragile", run_metrics=run_metrics)], third_party=False)
    with pytest.raises(PluginFailure) as exc:
        _tiny_grid(host)
    msg = str(exc.value)
    assert "plugin 'fragile' failed in hook run_metrics on tiny f1-s42: ZeroDivisionError: boom" in msg
    assert "--disable fragile" in msg and isinstance(exc.value.__cause__, ZeroDivisionError)


def test_a_prism_error_from_a_plugin_passes_through_unchanged():
    def run_metrics(run):
        raise PrismError("my_task.yaml:3: my_key: must be positive")

    host = PluginHost(extra_plugins=[plugin("strict", run_metrics=run_metrics)], third_party=False)
    with pytest.raises(PrismError, match=r"^my_task.yaml:3: my_key: must be positive$"):
        _tiny_grid(host)


def test_presentation_hooks_collect_failures_instead_of_raising():
    def report_sections(view):
        raise RuntimeError("cannot draw")

    host = PluginHost(extra_plugins=[plugin("painter", report_sections=report_sections)], third_party=False)
    results = host.call("report_sections", strict=False, view=None)
    failed = {r.plugin: r.failure for r in results if r.failure is not None}
    assert "plugin 'painter' failed in hook report_sections: RuntimeError: cannot draw" in str(failed["painter"])
    assert results[-1].plugin == "painter"  # every plugin was called, the failing one did not stop the others


def test_columns_of_a_metric_plugin_reach_the_row_in_registration_order():
    host = PluginHost(extra_plugins=[plugin("extra_cols", run_metrics=lambda run: {"zz_last": 1.0})],
                      third_party=False)
    row = next(iter(_tiny_grid(host).values()))
    cols = list(row)
    assert cols.index("zz_last") > cols.index("auroc")


def test_hook_tracing_goes_through_pluggy(monkeypatch):
    lines: list[str] = []
    host = PluginHost(third_party=False)
    host.enable_tracing(lines.append)
    host.call("task_paths")
    text = "".join(lines)
    assert "task_paths" in text and "builtin_tasks" in text


def test_hook_tracing_from_the_environment(run_cli):
    proc = run_cli("ls", "tasks", env={"PRISM_TRACE_HOOKS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "prism-run: trace:" in proc.stderr and "task_paths" in proc.stderr


@pytest.mark.parametrize("source,expected", [
    ("@hookimpl\ndef report_section(view):\n    return None\n", "did you mean 'report_sections'?"),
    ("@hookimpl\ndef register_adapter(register):\n    pass\n", "did you mean 'register_adapters'?"),
    ("@hookimpl\ndef registerheads(register):\n    pass\n", "did you mean 'register_heads'?"),
    ("def run_metrics(run):\n    return {'x': 1.0}\n", "named like the hook 'run_metrics' but is not marked @hookimpl"),
    ("class Holder:\n    @hookimpl\n    def summarise(self, tables, options):\n        return None\n"
     "holder = Holder()\n", "did you mean 'summarize'?"),
])
def test_hooks_that_would_never_run_fail_at_start(tmp_path, monkeypatch, source, expected):
    name = f"never_runs_{abs(hash(source)) % 10**8}"
    (tmp_path / f"{name}.py").write_text("from prism_plugin import hookimpl\n\n\n" + source)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    target = getattr(module, "holder", module)
    with pytest.raises(PrismError, match=expected.replace("(", r"\(").replace("?", r"\?")):
        PluginHost(extra_plugins=[target], third_party=False)


def test_a_hook_with_wrong_argument_names_is_refused_naming_the_plugin():
    bad = plugin("wrong_args", run_metrics=lambda ctx: {"x": 1.0})
    with pytest.raises(PrismError, match=r"plugin 'wrong_args' \(passed in code\).*ctx"):
        PluginHost(extra_plugins=[bad], third_party=False)


def test_a_broken_third_party_fails_in_one_line_through_the_cli(tmp_path):
    """A misspelled hook in an installed package stops prism-run at start with one line (the CLI in this process,
    the package's folder on sys.path: a fresh plugin host reads its entry point)."""
    from tests.conftest import installed_plugins, pip_install_target, run_main

    pkg = tmp_path / "typo-pkg"
    (pkg / "typo_pkg").mkdir(parents=True)
    (pkg / "typo_pkg" / "__init__.py").write_text(
        "from prism_plugin import hookimpl\n\n\n@hookimpl\ndef run_metric(run):\n    return {'x': 1.0}\n")
    (pkg / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=69"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "typo-pkg"
        version = "0.0.1"

        [project.entry-points.prism_plugin]
        typo = "typo_pkg"
        """))
    env = pip_install_target(pkg, tmp_path / "install")
    with installed_plugins(env["_TARGET"]):
        proc = run_main("ls", "plugins")
    assert proc.returncode == 2 and not proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "plugin 'typo': run_metric" in lines[0] and "did you mean 'run_metrics'?" in lines[0]


@pytest.mark.parametrize("seed_invariant,fits", [(True, 1), (False, 3)])
def test_the_seed_invariant_trait_decides_fit_reuse_for_a_plugin_head(seed_invariant, fits):
    """At 100 % labels the three seeds draw the same subset: a seed-invariant head is fitted once."""
    from prism_plugin.protocol.grid import GridSpec, run_grid
    from prism_plugin.protocol.inputs import SplitArrays
    from prism_plugin.heads.logistic import LogisticProbe

    count = {"fits": 0}

    class CountingHead(LogisticProbe):
        def fit(self, X, y):
            count["fits"] += 1
            return super().fit(X, y)

    def register_heads(register):
        register("counting", CountingHead, seed_invariant=seed_invariant, linear=True)

    host = PluginHost(extra_plugins=[plugin("counting_head", register_heads=register_heads)], third_party=False)
    rng = np.random.default_rng(1)
    y = np.repeat([0, 1], 30)
    X = (rng.normal(size=(60, 5)) + y[:, None]).astype(np.float32)
    split = SplitArrays(X, y, name="s")
    rows = run_grid(split, split, split, 2, GridSpec(fractions=(1.0,), probe={"kind": "counting"}), host,
                    {"task": "t", "adapter": "a", "model": "m", "dataset": "d"})
    assert len(rows) == 3 and count["fits"] == fits
    assert len({row["auroc"] for row in rows.values()}) == 1


def test_analysis_entries_carry_no_adapt_step_and_never_import_anything():
    from prism_plugin.registrars import NO_ADAPT_STEP

    reg = PluginHost(third_party=False).registry("adaptation")
    for name in ("calibration", "selectors", "decodability", "projection"):
        entry = reg.entry(name)
        assert not entry.lazy and reg.get(name) is NO_ADAPT_STEP and entry.meta["role"] != "method"
