"""The installed distribution carries every subpackage, the YAML catalogue and the built-in adapters."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import prism_plugin

REPO = Path(__file__).resolve().parents[2]


def test_every_source_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    src = REPO / "src"
    found = {".".join(p.parent.relative_to(src).parts) for p in src.rglob("__init__.py")}
    missing = sorted(found - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_installed_package_ships_tasks_and_adapters():
    from prism_plugin.tasks.builtin import builtin_task_dir

    yamls = list(builtin_task_dir().rglob("*.yaml"))
    assert any(p.name == "prism_demo.yaml" for p in yamls)
    repo_yamls = {p.relative_to(REPO / "tasks").as_posix() for p in (REPO / "tasks").rglob("*.yaml")}
    shipped = {p.relative_to(builtin_task_dir()).as_posix() for p in yamls}
    assert repo_yamls <= shipped, sorted(repo_yamls - shipped)[:5]
    adapters = resources.files("prism_plugin.model_adapters")
    assert adapters.joinpath("timm_generic.py").is_file()
    assert Path(prism_plugin.__file__).parent.name == "prism_plugin"
