"""The shape of the house, checked on the source itself (AST, no imports).

Every import counts, also those inside functions and under ``TYPE_CHECKING``; the only exempt
ones are the lazy imports inside functions of the top (``cli``, ``commands``), which load a
command when it runs.

* No import circle anywhere in the package (relative imports, ``from pkg import submodule`` and
  the enclosing packages an import runs first, ``a/__init__`` for ``a.b``, resolved).
* The ground floor: ``errors`` and ``storage`` import nothing of prism-plugin but each other
  (``errors`` nothing at all); ``contracts`` imports nothing but the floor.
* Data flows one way: no module below the top imports ``prism_plugin.cli`` or
  ``prism_plugin.commands``, and nothing but the top and the executors imports the runner.
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
    """(module imported, names imported from it, line) for every absolute import, also inside functions."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names], node.lineno))
    return out


def _resolve(imported: str, name: str | None, modules) -> str | None:
    """The module an import binds: ``pkg.name`` when ``name`` is a submodule, else the nearest module."""
    if name and f"{imported}.{name}" in modules:
        return f"{imported}.{name}"
    while imported and imported not in modules:
        imported = imported.rpartition(".")[0]
    return imported or None


def _edges(module: str, path: Path, modules) -> list[tuple[str, int, bool]]:
    """(module imported, line, inside a function) for every import of ``path`` of a prism-plugin module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((_resolve(a.name, None, modules), child.lineno, in_function) for a in child.names
                           if a.name.startswith("prism_plugin"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    package = package[:len(package) - (child.level - 1)]
                    base = ".".join(package + ([child.module] if child.module else []))
                if base.startswith("prism_plugin"):
                    out.extend((_resolve(base, a.name, modules), child.lineno, in_function) for a in child.names)
            visit(child, inner)

    visit(tree, False)
    # importing a.b.c runs the packages a.b and a first: an edge to each enclosing package but the
    # root (``prism_plugin``) and the importer's own packages (already running)
    parents = [(".".join(t.split(".")[:i]), line, inside) for t, line, inside in out if t
               for i in range(2, t.count(".") + 1)]
    return [(target, line, inside) for target, line, inside in out + parents
            if target and target != module and target in modules and not module.startswith(target + ".")]


MODULES = _modules()
TOP = ("prism_plugin.cli", "prism_plugin.commands")


def _is_top(module: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in TOP)


#: module -> [(module imported, line)], every import counted but the top's lazy ones inside functions
GRAPH = {module: list(dict.fromkeys((t, line) for t, line, inside in _edges(module, path, MODULES)
                                    if not (inside and _is_top(module))))
         for module, path in MODULES.items()}


def _circles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child, _line in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _describe(component: list[str]) -> str:
    members = set(component)
    lines = [f"{MODULES[m].relative_to(REPO)}:{line} imports {t}"
             for m in component for t, line in GRAPH[m] if t in members]
    return f"circle of {len(component)} modules:\n  " + "\n  ".join(lines)


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


def test_the_graph_reader_sees_every_kind_of_import():
    """Function-level, TYPE_CHECKING and ``from pkg import submodule`` imports are edges; a circle is found."""
    paths = _edges("prism_plugin.paths", MODULES["prism_plugin.paths"], MODULES)
    assert any(inside for t, _, inside in paths if t == "prism_plugin.errors")  # inside a function
    assert any(t == "prism_plugin.contracts" for t, _ in GRAPH["prism_plugin.hookspecs"])  # TYPE_CHECKING
    assert _circles({"a": [("b", 1)], "b": [("c", 2)], "c": [("a", 3)], "d": [("a", 4)]}) == [["a", "b", "c"]]
    assert _resolve("prism_plugin.data", "labels", MODULES) == "prism_plugin.data.labels"
    # importing metrics.core runs the metrics package (its __init__) first
    assert any(t == "prism_plugin.metrics" for t, _ in GRAPH["prism_plugin.report.derived"])


def test_no_import_circle():
    circles = _circles(GRAPH)
    assert not circles, "\n".join(_describe(c) for c in circles)


FLOOR = {"prism_plugin.errors", "prism_plugin.storage"}


@pytest.mark.parametrize("module, allowed", [
    ("prism_plugin.errors", set()),
    ("prism_plugin.storage", {"prism_plugin.errors"}),
    ("prism_plugin.contracts", FLOOR),
])
def test_the_ground_floor_imports_nothing_above_it(module, allowed):
    offenders = [f"{MODULES[module].relative_to(REPO)}:{line} imports {t}" for t, line in GRAPH[module]
                 if t not in allowed]
    assert offenders == [], "\n".join(offenders)


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
