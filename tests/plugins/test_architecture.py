"""The shape of the house, checked on the source itself (AST, no imports).

* Data flows one way: no module below the top (``cli``, ``commands``) imports ``prism_plugin.cli``
  or ``prism_plugin.commands``, and nothing but the top and the executors imports the runner.
* The contract types live in ``prism_plugin.contracts``, which imports nothing of prism-plugin but
  ``errors`` at import time.
* Private helpers (``_name``) are not imported across modules.
* Every hook call goes through ``PluginHost.call``: no ``get_hookimpls`` loop outside ``plugins.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "prism_plugin"
ADAPTERS = REPO / "model_adapters"


def _module_name(path: Path) -> str:
    if path.is_relative_to(ADAPTERS):
        rel = path.relative_to(ADAPTERS).with_suffix("")
        parts = ["prism_plugin", "model_adapters", *rel.parts]
    else:
        rel = path.relative_to(SRC).with_suffix("")
        parts = ["prism_plugin", *rel.parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    files = sorted(SRC.rglob("*.py")) + sorted(ADAPTERS.rglob("*.py"))
    return {_module_name(p): p for p in files}


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module imported, names imported from it, line) for every import, also inside functions."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names], node.lineno))
    return out


MODULES = _modules()
TOP = ("prism_plugin.cli", "prism_plugin.commands")


def _is_top(module: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in TOP)


def test_the_source_tree_is_found():
    assert "prism_plugin.plugins" in MODULES and "prism_plugin.runner" in MODULES
    assert "prism_plugin.model_adapters.demo" in MODULES


def test_nothing_imports_upward_into_the_cli_or_the_commands():
    offenders = []
    for module, path in MODULES.items():
        if _is_top(module):
            continue
        for imported, names, line in _imports(path):
            targets = [imported] + [f"{imported}.{n}" for n in names]
            if any(_is_top(t) for t in targets):
                offenders.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    # the plugin host loads the built-in command catalogue (registrations only) from DEFAULT_PLUGINS by
    # name, never by import statement, so it does not appear here
    assert offenders == []


def test_only_the_top_and_the_executors_import_the_runner():
    allowed = {"prism_plugin.executors"}
    offenders = []
    for module, path in MODULES.items():
        if _is_top(module) or module in allowed or module == "prism_plugin.runner":
            continue
        for imported, names, line in _imports(path):
            if imported == "prism_plugin.runner" or (imported == "prism_plugin" and "runner" in names):
                offenders.append(f"{path.relative_to(REPO)}:{line}")
    assert offenders == []


def test_contracts_are_the_ground_floor():
    imported = {m for m, _, _ in _imports(SRC / "contracts.py")
                if m.startswith("prism_plugin")}
    # import-time dependencies only (the module imports numerical helpers inside methods)
    tree = ast.parse((SRC / "contracts.py").read_text())
    top_level = {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module
                 and n.module.startswith("prism_plugin")}
    assert top_level <= {"prism_plugin.errors"}, top_level
    assert imported  # it does use helpers lazily


def test_private_helpers_are_not_imported_across_modules():
    offenders = []
    for module, path in MODULES.items():
        for imported, names, line in _imports(path):
            if not imported.startswith("prism_plugin") or imported == module:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                offenders.append(f"{path.relative_to(REPO)}:{line} imports {', '.join(private)} from {imported}")
    assert offenders == []


def test_hooks_are_called_only_through_the_host():
    offenders = []
    for module, path in MODULES.items():
        if module == "prism_plugin.plugins":
            continue
        text = path.read_text()
        for needle in ("get_hookimpls(", ".pm.hook.", "host.hook."):
            if needle in text:
                line = text[:text.index(needle)].count("\n") + 1
                offenders.append(f"{path.relative_to(REPO)}:{line} uses {needle}")
    assert offenders == []


@pytest.mark.parametrize("name", ["METHODS", "SOURCE_TYPES", "TOP_KEYS", "COMMAND_MODULES",
                                  "SEED_INVARIANT_HEADS", "SUMMARY_METRICS", "BAND_METRICS"])
def test_closed_catalogue_constants_are_gone(name):
    """The module constants issue 13 named are registries now."""
    offenders = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []
