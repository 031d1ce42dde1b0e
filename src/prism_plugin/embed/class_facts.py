"""What an adapter class declares (``embed_dim``, ``preprocessing``, ``licence``, ...), read without importing it.

``prism-run ls adapters`` lists adapters registered lazily (``register("x", "pkg.adapters:MyAdapter")``, or an entry
point of the ``prism_plugin.adapters`` group) without importing their modules: such a module typically imports
torch and the model's library at its top. :func:`class_of_ref` gives a stand-in class carrying the facts the class
states as plain class attributes, read from the module's source: literals (``embed_dim = 384``, ``licence =
"MIT"``, ``licence_date = "2026-12-02"``, ``gated = False``), tuples and dicts of them, ``Preprocessing(...)``
with such arguments, and names bound to those at the module's top or imported from a module that is already
loaded (``IMAGENET_MEAN``). Attributes inherited from a base class in the same module, or in another module found
the same way, count too; an attribute computed at run time (or in ``__init__``) is not known here and stays "at
build".

The module is located through the import system's finders (no module code runs) and parsed with :mod:`ast`; a
module that is already imported is not read again, its class is used as it is.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

#: the class attributes read (what ``ls adapters`` shows, and what it derives them from)
FACT_ATTRS = ("embed_dim", "preprocessing", "licence", "licence_source", "licence_date", "licence_note",
              "pretraining_data", "input_kind", "poolings", "default_pooling", "profiles", "default_profile",
              "display_name", "hub_id", "gated", "paper_dim", "arch_short")
_MAX_DEPTH = 6


class _Unknown(Exception):
    """An expression that is not a plain declaration (computed at run time)."""


def class_of_ref(ref: str) -> type | None:
    """The class a ``"module:Class"`` reference names: itself when its module is already imported, else a stand-in
    subclass of :class:`~prism_plugin.embed.adapter.Adapter` with the facts its source declares; ``None`` when the
    module or class cannot be found (or the reference names something else than a top-level class)."""
    module, _, attr = str(ref or "").partition(":")
    if not module or not attr.isidentifier():
        return None
    loaded = sys.modules.get(module)
    if loaded is not None:
        obj = getattr(loaded, attr, None)
        return obj if isinstance(obj, type) else None
    try:
        found = _static_class(module, attr, 0)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    if found is None:
        return None
    base, attrs = found
    return type(attr, (base,), {**attrs, "__module__": module, "__qualname__": attr,
                                "__doc__": f"{module}:{attr} as its source declares it (not imported)"})


# --------------------------------------------------------------------------- finding and parsing a module
_TREES: dict[str, ast.Module | None] = {}


def _module_file(module: str) -> Path | None:
    """The ``.py`` file of ``module``, found by the import system's finders without running any module code."""
    parts = module.split(".")
    path = None
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        last = i == len(parts) - 1
        pkg = sys.modules.get(name)
        if pkg is not None and not last:
            path = list(getattr(pkg, "__path__", []) or [])
            if not path:
                return None
            continue
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(name, path)
            except Exception:  # a finder that cannot answer: ask the next one
                spec = None
            if spec is not None:
                break
        if spec is None:
            return None
        if not last:
            path = list(spec.submodule_search_locations or [])
            if not path:
                return None
            continue
        origin = getattr(spec, "origin", None)
        return Path(origin) if origin and origin.endswith(".py") else None
    return None


def _tree(module: str) -> ast.Module | None:
    if module not in _TREES:
        file = _module_file(module)
        _TREES[module] = ast.parse(file.read_text(encoding="utf-8"), str(file)) if file is not None else None
    return _TREES[module]


# --------------------------------------------------------------------------- evaluating plain declarations
class _Module:
    """One module's top level: its classes, plain assignments and ``from X import Y`` names."""

    def __init__(self, name: str, tree: ast.Module, depth: int):
        self.name, self.depth = name, depth
        self.classes: dict[str, ast.ClassDef] = {}
        self.assigns: dict[str, ast.expr] = {}
        self.imports: dict[str, tuple[str, str]] = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assigns[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.assigns[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (node.module, alias.name)
        self._busy: set[str] = set()

    def name_value(self, name: str) -> Any:
        if name in self.assigns and name not in self._busy:
            self._busy.add(name)
            try:
                return self.value(self.assigns[name])
            finally:
                self._busy.discard(name)
        if name in self.imports:
            return _imported(*self.imports[name], self.depth)
        raise _Unknown(name)

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.value(e) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self.value(node.operand)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = self.value(node.left), self.value(node.right)
            if isinstance(a, (tuple, int, float, str)) and isinstance(b, (tuple, int, float, str)):
                try:
                    return a + b if isinstance(node.op, ast.Add) else a * b
                except TypeError:
                    raise _Unknown("operands") from None
        if isinstance(node, ast.Name):
            return self.name_value(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            from prism_plugin.embed.adapter import Preprocessing

            if self._callee(node.func.id) is Preprocessing and not any(isinstance(a, ast.Starred) for a in node.args):
                args = [self.value(a) for a in node.args]
                kwargs = {k.arg: self.value(k.value) for k in node.keywords if k.arg}
                if len(kwargs) != len(node.keywords):
                    raise _Unknown("**kwargs")
                try:
                    return Preprocessing(*args, **kwargs)
                except TypeError:
                    raise _Unknown("Preprocessing arguments") from None
        raise _Unknown(type(node).__name__)

    def _callee(self, name: str) -> Any:
        if name in self.imports:
            module, attr = self.imports[name]
            loaded = sys.modules.get(module)
            return getattr(loaded, attr, None) if loaded is not None else None
        return None

    def class_facts(self, name: str) -> tuple[type, dict[str, Any]] | None:
        """(the Python base for the stand-in, the facts declared along the class's bases and by itself)."""
        from prism_plugin.embed.adapter import Adapter

        node = self.classes.get(name)
        if node is None:
            return None
        base: type = Adapter
        facts: dict[str, Any] = {}
        for b in reversed(node.bases):  # the first base wins, as in the MRO
            got = self._base(b)
            if got is None:
                continue
            got_base, got_facts = got
            if got_base is not Adapter:
                base = got_base
            facts.update(got_facts)
        for stmt in node.body:
            target, value = _assignment(stmt)
            if target in FACT_ATTRS:
                try:
                    facts[target] = self.value(value)
                except _Unknown:
                    facts.pop(target, None)  # set at run time: not known here
        return base, facts

    def _base(self, node: ast.expr) -> tuple[type, dict[str, Any]] | None:
        from prism_plugin.embed.adapter import Adapter

        if not isinstance(node, ast.Name):
            return None
        if node.id in self.classes and self.depth < _MAX_DEPTH:
            inner = _Module(self.name, _tree(self.name), self.depth + 1)
            return inner.class_facts(node.id)
        if node.id in self.imports:
            module, attr = self.imports[node.id]
            loaded = sys.modules.get(module)
            if loaded is not None:
                obj = getattr(loaded, attr, None)
                return (obj, {}) if isinstance(obj, type) and issubclass(obj, Adapter) else None
            return _static_class(module, attr, self.depth + 1)
        return None


def _assignment(stmt: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id, stmt.value
    return None, None


def _imported(module: str, attr: str, depth: int) -> Any:
    loaded = sys.modules.get(module)
    if loaded is not None:
        if hasattr(loaded, attr):
            return getattr(loaded, attr)
        raise _Unknown(attr)
    tree = _tree(module) if depth < _MAX_DEPTH else None
    if tree is None:
        raise _Unknown(module)
    return _Module(module, tree, depth + 1).name_value(attr)


def _static_class(module: str, attr: str, depth: int) -> tuple[type, dict[str, Any]] | None:
    if depth > _MAX_DEPTH:
        return None
    tree = _tree(module)
    if tree is None:
        return None
    return _Module(module, tree, depth).class_facts(attr)


__all__ = ["FACT_ATTRS", "class_of_ref"]
