"""How the layers of a task combine: its includes < the groups it is in < its own file < ``--set``.

:func:`apply_overrides` lays ``--set KEY=VALUE`` on top, :func:`inherit` fills in a group's keys, and
:func:`reset_replaced_source` drops the options of a ``source`` whose ``type`` a higher layer replaced.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable

from prism_plugin.errors import PrismError
from prism_plugin.tasks.loader import Located, deep_merge, parse_value

SET_FILE = Path("--set")
WHERE_ONLY = object()  # an inherited entry that only says where a parent key was written


def parse_override(text: str) -> tuple[str, Any]:
    """``probe.C=0.1`` -> ("probe.C", 0.1); values are YAML scalars or flow lists, read as task files are
    (:func:`~prism_plugin.tasks.loader.parse_value`: no tags, bounded nesting)."""
    if "=" not in text:
        raise PrismError(f"--set {text!r}: expected KEY=VALUE, e.g. --set probe.C=0.1")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise PrismError(f"--set {text!r}: the key is empty")
    return key, parse_value(raw, f"--set {key}")


def leaves(value: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        out = []
        for k, v in value.items():
            out.extend(leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [(prefix, value)]


def apply_overrides(located: Located, overrides: Iterable[str]) -> Located:
    data = located.data
    lines, files = dict(located.lines), dict(located.files)
    for text in overrides:
        key, value = parse_override(text)
        nested: Any = value
        for part in reversed(key.split(".")):
            nested = {part: nested}
        data = deep_merge(data, nested)
        for path, _ in [(key, value)] + leaves(value, key):
            lines.setdefault(path, 0)
            files[path] = SET_FILE
    return Located(data, located.file, lines, files)


def _get_path(data: dict, path: str) -> tuple[dict | None, str]:
    parts = path.split(".")
    node: Any = data
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node:
            return None, parts[-1]
        node = node[part]
    return (node if isinstance(node, dict) else None), parts[-1]


def delete_path(data: dict, path: str) -> bool:
    parent, last = _get_path(data, path)
    if parent is None or last not in parent:
        return False
    del parent[last]
    return True


def _set_path(data: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = copy.deepcopy(value)


def is_parent(a: str, b: str) -> bool:
    """Is key path ``a`` equal to or above ``b``?"""
    return a == b or b.startswith(a + ".")


def _rank(file: Any, own: Path) -> int:
    """Precedence of the layer that set a key: --set 3, the task's own file 2, an include 1."""
    if file is None:
        return 0
    if Path(file) == SET_FILE:
        return 3
    try:
        return 2 if Path(file).resolve() == own else 1
    except OSError:  # pragma: no cover
        return 1


def reset_replaced_source(located: Located, host=None) -> Located:
    """A layer that sets ``source.type`` switches the source: options of lower layers (an included file, or the
    task file under ``--set``) that the new type does not take are dropped instead of reported."""
    from prism_plugin.data.catalogue import accepted_options

    source = located.data.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if not isinstance(kind, str) or "source.type" not in located.files:
        return located
    accepted = accepted_options(kind, host)
    if accepted is None:  # unknown type (reported by the schema)
        return located
    own = located.file.resolve()
    type_rank = _rank(located.files.get("source.type"), own)
    drop = [k for k in source if k != "type" and k not in accepted
            and max((_rank(f, own) for p, f in located.files.items() if is_parent(f"source.{k}", p)), default=0)
            < type_rank]
    if not drop:
        return located
    data = copy.deepcopy(located.data)
    for k in drop:
        del data["source"][k]
    return Located(data, located.file, dict(located.lines), dict(located.files))


def inherit(located: Located, inherited: dict[str, tuple[Any, Path, int]]) -> Located:
    """Group keys fill every leaf the member's own file does not set (fragments it includes lose)."""
    if not inherited:
        return located
    own = located.file.resolve()
    data = copy.deepcopy(located.data)
    lines, files = dict(located.lines), dict(located.files)
    for path, (value, gfile, gline) in inherited.items():
        if value is WHERE_ONLY or _rank(files.get(path), own) >= 2:
            continue
        _set_path(data, path, value)
        lines[path], files[path] = gline, gfile
        parts = path.split(".")
        for i in range(1, len(parts)):  # parent keys point at the group too (for errors about the whole value)
            parent = ".".join(parts[:i])
            if parent in inherited and _rank(files.get(parent), own) < 2:
                lines[parent], files[parent] = inherited[parent][2], inherited[parent][1]
    return Located(data, located.file, lines, files)
