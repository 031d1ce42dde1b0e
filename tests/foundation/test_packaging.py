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


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _req_name(req: str) -> str:
    import re

    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower().replace("_", "-")


def test_every_extra_a_message_or_page_names_exists():
    """`pip install 'prism-plugin[X]'` in an error message, a page or the README names a real extra."""
    import re

    extras = set(_extras())
    files = [*(REPO / "src").rglob("*.py"), *(REPO / "model_adapters").rglob("*.py"), *(REPO / "docs").rglob("*.md"),
             REPO / "README.md"]
    named = {(f.relative_to(REPO).as_posix(), x) for f in files
             for group in re.findall(r"prism-plugin\[([\w,-]+)\]", f.read_text(encoding="utf-8"))
             for x in group.split(",")}
    assert named, "no message names an extra: the pattern went stale"
    wrong = sorted((f, x) for f, x in named if x not in extras)
    assert not wrong, f"extras named but not in pyproject.toml ({sorted(extras)}): {wrong}"


def test_all_is_every_optional_part_and_test_holds_only_test_tools():
    """`all` installs every other optional extra (what CI installs beside `test`); `test` adds no optional part,
    so the default routes stay small."""
    extras = {k: {_req_name(r) for r in v} for k, v in _extras().items()}
    optional = set().union(*(v for k, v in extras.items() if k not in ("all", "test")))
    assert extras["all"] == optional, sorted(optional ^ extras["all"])
    assert not extras["test"] & optional, sorted(extras["test"] & optional)
    core = {_req_name(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert not core & {"ray", "conch-fork", "transformers", "open-clip-torch", "datasets", "pyarrow"}
