"""YAML loading with line numbers, ``include:`` resolution and safe parsing only.

YAML is parsed with PyYAML's *safe* composer: tags that would build Python
objects are rejected, so no task file can execute code. Every mapping key keeps
its line number, so schema errors can say ``file:line: key``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from prism_plugin.errors import PrismError

MAX_INCLUDE_DEPTH = 32
#: A task file is a few dozen values: bound what aliases may expand to, and nesting.
MAX_NODES = 100_000
MAX_NESTING = 64
#: The YAML 1.1 types the safe loader builds (no python/*, no application tags).
SAFE_TAGS = frozenset("tag:yaml.org,2002:" + t for t in (
    "str", "int", "float", "bool", "null", "seq", "map", "timestamp", "binary", "set", "omap", "pairs"))


@dataclass
class Located:
    """A parsed YAML document plus the line of every key path (``"probe.C"`` -> 12)."""

    data: dict[str, Any]
    file: Path
    lines: dict[str, int] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)  # key path -> file that set it

    def where(self, key: str) -> str:
        f = self.files.get(key, self.file)
        if str(f) == "--set":
            return f"--set {key}"
        line = self.lines.get(key)
        if line is None:  # fall back to the closest parent key
            parts = key.split(".")
            while parts and line is None:
                parts.pop()
                line = self.lines.get(".".join(parts))
        return f"{f}:{line}" if line else str(f)


def _construct(node: yaml.Node, path: str, lines: dict[str, int], file: Path,
               _state: dict[str, Any] | None = None) -> Any:
    state = _state if _state is not None else {"nodes": 0, "active": set()}
    state["nodes"] += 1
    if state["nodes"] > MAX_NODES:
        raise PrismError(f"{file}: the YAML expands to more than {MAX_NODES} values (aliases repeated inside "
                         "aliases?); write the values out, a task file needs a few dozen")
    if id(node) in state["active"]:
        raise PrismError(f"{file}:{node.start_mark.line + 1}: an alias refers to its own anchor (a recursive "
                         "structure); task values must be plain mappings, lists and scalars")
    if len(state["active"]) >= MAX_NESTING:
        raise PrismError(f"{file}:{node.start_mark.line + 1}: values nest deeper than {MAX_NESTING} levels")
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        state["active"].add(id(node))
        try:
            return _construct_collection(node, path, lines, file, state)
        finally:
            state["active"].discard(id(node))
    if isinstance(node, yaml.ScalarNode):
        return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
    raise PrismError(f"{file}: unsupported YAML node")


def _construct_collection(node: yaml.Node, path: str, lines: dict[str, int], file: Path,
                          state: dict[str, Any]) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise PrismError(f"{file}:{key_node.start_mark.line + 1}: mapping keys must be plain strings")
            key = str(key_node.value)
            sub = f"{path}.{key}" if path else key
            if key in out:
                raise PrismError(f"{file}:{key_node.start_mark.line + 1}: key {sub!r} appears twice")
            lines[sub] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, sub, lines, file, state)
        return out
    return [_construct(v, f"{path}[{i}]", lines, file, state) for i, v in enumerate(node.value)]


def parse_yaml(file: Path) -> Located:
    """Parse one YAML file safely, recording key lines."""
    file = Path(file)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PrismError(f"{file}: cannot be read ({exc})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{file}:{mark.line + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PrismError(f"{loc}: YAML syntax error: {problem}") from None
    except (ValueError, RecursionError) as exc:
        raise PrismError(f"{file}: YAML cannot be parsed ({type(exc).__name__})") from None
    if node is None:
        raise PrismError(f"{file}: the file is empty; a task needs at least 'task:' and 'dataset:'")
    _reject_tags(node, file)
    lines: dict[str, int] = {}
    try:
        data = _construct(node, "", lines, file)
    except yaml.YAMLError as exc:
        raise PrismError(f"{file}: YAML value cannot be parsed ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise PrismError(f"{file}: a task file must be a mapping of keys, got a {type(data).__name__}")
    return Located(data=data, file=file, lines=lines, files={k: file for k in lines})


def _reject_tags(node: yaml.Node, file: Path) -> None:
    """Refuse every tag but the plain YAML types (python/*, !custom, application tags)."""
    stack = [node]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:  # aliases share nodes; recursive ones would loop forever
            continue
        seen.add(id(n))
        tag = n.tag or ""
        if tag not in SAFE_TAGS:
            raise PrismError(f"{file}:{n.start_mark.line + 1}: YAML tag {tag!r} is not allowed in task files "
                             "(only plain mappings, lists, strings, numbers and booleans; nothing is executed)")
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.extend((k, v))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` wins; nested mappings merge key by key; lists are replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def resolve_includes(located: Located, search_paths: list[Path], _stack: tuple[Path, ...] = ()) -> Located:
    """Apply ``include:`` (a file or list of files; local keys win), recursively, cycle-checked.

    Relative include names resolve next to the including file, then in the task
    search paths; an include must stay inside those folders unless it is an
    absolute path the user wrote themselves.
    """
    data = dict(located.data)
    inc = data.pop("include", None)
    if inc is None:
        return Located(data, located.file, dict(located.lines), dict(located.files))
    names = [inc] if isinstance(inc, str) else inc
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise PrismError(f"{located.where('include')}: include must be a file name or a list of file names")
    here = located.file.resolve()
    stack = _stack + (here,)
    if len(stack) > MAX_INCLUDE_DEPTH:
        raise PrismError(f"{located.where('include')}: includes nest deeper than {MAX_INCLUDE_DEPTH}")
    merged: dict[str, Any] = {}
    lines: dict[str, int] = {}
    files: dict[str, Path] = {}
    for name in names:
        target = _find_include(name, located, search_paths)
        if target.resolve() in stack:
            chain = " -> ".join(p.name for p in stack + (target.resolve(),))
            raise PrismError(f"{located.where('include')}: include cycle {chain}")
        sub = resolve_includes(parse_yaml(target), search_paths, stack)
        merged = deep_merge(merged, sub.data)
        lines.update(sub.lines)
        files.update(sub.files)
    merged = deep_merge(merged, data)
    lines.update({k: v for k, v in located.lines.items() if k != "include"})
    files.update({k: located.file for k in located.lines if k != "include"})
    return Located(merged, located.file, lines, files)


def _find_include(name: str, located: Located, search_paths: list[Path]) -> Path:
    p = Path(name)
    if p.is_absolute():
        if not p.is_file():
            raise PrismError(f"{located.where('include')}: included file {name} does not exist")
        return p
    roots = [located.file.parent] + [Path(s) for s in search_paths]
    allowed = [r.resolve() for r in roots]
    for root in roots:
        cand = (root / p).resolve()
        if not any(cand == a or a in cand.parents for a in allowed):
            raise PrismError(f"{located.where('include')}: include {name!r} points outside the task folders")
        if cand.is_file():
            return cand
        if cand.with_suffix(".yaml").is_file():
            return cand.with_suffix(".yaml")
    raise PrismError(f"{located.where('include')}: included file {name!r} not found next to {located.file.name} "
                     "or in the task search paths")
