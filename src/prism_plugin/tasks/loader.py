"""YAML loading with line numbers, ``include:`` resolution and safe parsing only.

YAML is parsed with PyYAML's *safe* composer: tags that would build Python objects are rejected, so no task file
can execute code. Every mapping key keeps its line number, so schema errors can say ``file:line: key``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from prism_plugin.errors import PrismError

MAX_INCLUDE_DEPTH = 32
#: A task file (or an include) is a few kB; anything larger is not a task file.
MAX_FILE_BYTES = 1024 * 1024
#: How deeply collections may nest: checked on the text before parsing, so no parser recursion runs deep.
MAX_NESTING = 64
#: The file name endings an include may name (``include: _base`` means ``_base.yaml``).
TASK_SUFFIXES = (".yaml", ".yml")
#: A task file is a few dozen values: bound what aliases may expand to, and nesting.
MAX_NODES = 100_000
MAX_NESTING = 64
#: The YAML 1.1 types the safe loader builds (no python/*, no application tags).
YAML_TAG_PREFIX = "tag:yaml.org,2002:"
SAFE_TAGS = frozenset(YAML_TAG_PREFIX + t for t in (
    "str", "int", "float", "bool", "null", "seq", "map", "timestamp", "binary", "set", "omap", "pairs"))


class Argument(str):
    """Where a YAML value came from when it is no file: a command-line argument (``--set seeds``). Its
    problems name the argument, without a line number."""


def _at(file: Path | Argument, node: yaml.Node) -> str:
    """``file:line`` of ``node`` (the argument itself for a command-line value)."""
    return str(file) if isinstance(file, Argument) else f"{file}:{node.start_mark.line + 1}"


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
        at = f" (at {path.split('[')[0].split('.')[0]})" if path else ""
        raise PrismError(f"{file}: the YAML expands to more than {MAX_NODES:,} values{at}: a list that long, or "
                         "aliases repeated inside aliases; a task file needs a few dozen values")
    if id(node) in state["active"]:
        raise PrismError(f"{_at(file, node)}: an alias refers to its own anchor (a recursive "
                         "structure); task values must be plain mappings, lists and scalars")
    if len(state["active"]) >= MAX_NESTING:
        raise PrismError(f"{_at(file, node)}: values nest deeper than {MAX_NESTING} levels")
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
                raise PrismError(f"{_at(file, key_node)}: mapping keys must be plain strings")
            key = str(key_node.value)
            sub = f"{path}.{key}" if path else key
            if key in out:
                raise PrismError(f"{_at(file, key_node)}: key {sub!r} appears twice")
            lines[sub] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, sub, lines, file, state)
        return out
    return [_construct(v, f"{path}[{i}]", lines, file, state) for i, v in enumerate(node.value)]


def read_task_text(file: Path, what: str = "task file") -> str:
    """The text of a task file: a regular file of at most :data:`MAX_FILE_BYTES` UTF-8 text.

    Errors name the file and the rule, never its content (it may not be a task file at all).
    """
    try:
        if file.is_dir():
            raise PrismError(f"{file}: is a folder, not a {what} (name a .yaml file)")
        if not file.is_file():
            if file.exists():
                raise PrismError(f"{file}: is not a regular file; a {what} is a .yaml text file")
            raise PrismError(f"{file}: no such {what}")
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise PrismError(f"{file}: {size:,} bytes; a {what} is a few kB of YAML (at most "
                             f"{MAX_FILE_BYTES // 1024} KiB)")
        with open(file, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except PermissionError:
        raise PrismError(f"{file}: cannot be read (permission denied)") from None
    except OSError as exc:
        raise PrismError(f"{file}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if b"\0" in raw:
        raise PrismError(f"{file}: is a binary file, not a {what} (YAML text)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PrismError(f"{file}: is not UTF-8 text (byte {exc.start}); a {what} is UTF-8 YAML") from None


def nesting_depth(text: str) -> int:
    """An upper bound of how deeply the YAML text nests: block indentation levels plus open flow brackets
    (outside quotes and comments). Cheap and recursion-free."""
    indents, flow, deepest = [0], 0, 0
    for line in text.splitlines():
        body = line.lstrip(" ")
        if flow == 0 and body and not body.startswith("#"):
            indent = len(line) - len(body)
            while indent < indents[-1]:
                indents.pop()
            if indent > indents[-1]:
                indents.append(indent)
        quote, prev = "", " "
        for ch in body:
            if quote:
                quote = "" if ch == quote and prev != "\\" else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "#" and prev in " \t":
                break
            elif ch in "[{":
                flow += 1
            elif ch in "]}":
                flow = max(flow - 1, 0)
            deepest = max(deepest, len(indents) + flow)
            prev = ch
    return deepest


def parse_yaml(file: Path) -> Located:
    """Parse one YAML file safely, recording key lines."""
    file = Path(file)
    text = read_task_text(file)
    depth = nesting_depth(text)
    if depth > MAX_NESTING:
        raise PrismError(f"{file}: YAML cannot be parsed (collections nest {depth} deep; at most {MAX_NESTING})")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{file}:{mark.line + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or type(exc).__name__  # never the quoted lines of the file
        raise PrismError(f"{loc}: YAML syntax error: {_clip(problem)}") from None
    except (ValueError, RecursionError) as exc:
        raise PrismError(f"{file}: YAML cannot be parsed ({type(exc).__name__})") from None
    if node is None:
        raise PrismError(f"{file}: the file is empty; a task needs at least 'task:' and 'dataset:'")
    _reject_tags(node, file)
    lines: dict[str, int] = {}
    try:
        data = _construct(node, "", lines, file)
    except yaml.YAMLError as exc:
        raise PrismError(f"{file}: YAML value cannot be parsed ({_clip(str(exc).splitlines()[0])})") from None
    if not isinstance(data, dict):
        raise PrismError(f"{file}: a task file must be a mapping of keys, got a {type(data).__name__}")
    return Located(data=data, file=file, lines=lines, files={k: file for k in lines})


def shown_tag(tag: str) -> str:
    """A resolved tag as it is written: ``!!python/object/apply:os.system``, ``!function``."""
    if tag.startswith(YAML_TAG_PREFIX):
        return "!!" + tag[len(YAML_TAG_PREFIX):]
    return tag if tag.startswith("!") else f"!<{tag}>"


def _reject_tags(node: yaml.Node, file: Path | Argument) -> None:
    """Refuse every tag but the plain YAML types (python/*, !custom, application tags), naming the first
    (in document order) and where it is: ``file:line``, or the command-line argument."""
    stack = [node]
    seen: set[int] = set()
    what = f"{file.split()[0]} values" if isinstance(file, Argument) and file.strip() else "task files"
    while stack:
        n = stack.pop()
        if id(n) in seen:  # aliases share nodes; recursive ones would loop forever
            continue
        seen.add(id(n))
        tag = n.tag or ""
        if tag not in SAFE_TAGS:
            raise PrismError(f"{_at(file, n)}: YAML tags are not allowed in {what} "
                             f"(`{_clip(shown_tag(tag), 80)}`); write plain mappings, lists, strings, numbers and "
                             "booleans (nothing is ever executed)")
        if isinstance(n, yaml.MappingNode):
            for k, v in reversed(n.value):
                stack.extend((v, k))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(reversed(n.value))


def parse_value(text: str, where: str) -> Any:
    """A YAML value given on the command line (``--set KEY=VALUE``, ``--option``), read as a task file is:
    the safe composer, no tags, bounded nesting and alias expansion; ``where`` (``--set seeds``) names it in
    every problem. A blank value is ``""``."""
    if not text.strip():
        return ""
    arg = Argument(where)
    if nesting_depth(text) > MAX_NESTING:
        raise PrismError(f"{arg}: the value nests deeper than {MAX_NESTING} levels")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise PrismError(f"{arg}: the value is not valid YAML ({_clip(problem)}); quote text, write lists as "
                         "[0.01,0.1]") from None
    except (ValueError, RecursionError) as exc:
        raise PrismError(f"{arg}: the value cannot be parsed ({type(exc).__name__})") from None
    if node is None:  # only a comment
        return None
    _reject_tags(node, arg)
    try:
        return _construct(node, "", {}, arg)
    except yaml.YAMLError as exc:
        raise PrismError(f"{arg}: the value cannot be parsed ({_clip(str(exc).splitlines()[0])})") from None


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` wins; nested mappings merge key by key; lists are replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def resolve_includes(located: Located, search_paths: list[Path], _stack: tuple[Path, ...] = (),
                     _roots: tuple[Path, ...] | None = None) -> Located:
    """Apply ``include:`` (a file or list of files; local keys win), recursively, cycle-checked.

    Confinement: an include names a ``.yaml``/``.yml`` file (``_base`` means ``_base.yaml``) that, after following
    symlinks, lies inside the folder of the task file being loaded (and below) or inside a task search path,
    whether written relative or absolute. Relative names resolve next to the including file, then in the search
    paths. Anything else (``/etc/passwd``, ``../../x.yaml``, a symlink out of the tree, a folder, a binary or huge
    file) is refused in one line naming the including file and line; the content of a refused file is never read.
    """
    data = dict(located.data)
    inc = data.pop("include", None)
    if inc is None:
        return Located(data, located.file, dict(located.lines), dict(located.files))
    names = [inc] if isinstance(inc, str) else inc
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise PrismError(f"{located.where('include')}: include must be a file name or a list of file names")
    here = located.file.resolve()
    if _roots is None:
        _roots = tuple(dict.fromkeys([here.parent] + [Path(p).resolve() for p in search_paths]))
    stack = _stack + (here,)
    if len(stack) > MAX_INCLUDE_DEPTH:
        raise PrismError(f"{located.where('include')}: includes nest deeper than {MAX_INCLUDE_DEPTH}")
    merged: dict[str, Any] = {}
    lines: dict[str, int] = {}
    files: dict[str, Path] = {}
    for name in names:
        target = _find_include(name, located, search_paths, _roots)
        if target in stack:
            chain = " -> ".join(p.name for p in stack + (target,))
            raise PrismError(f"{located.where('include')}: include cycle {chain}")
        sub = resolve_includes(parse_yaml(target), search_paths, stack, _roots)
        merged = deep_merge(merged, sub.data)
        lines.update(sub.lines)
        files.update(sub.files)
    merged = deep_merge(merged, data)
    lines.update({k: v for k, v in located.lines.items() if k != "include"})
    files.update({k: located.file for k in located.lines if k != "include"})
    return Located(merged, located.file, lines, files)


def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _find_include(name: str, located: Located, search_paths: list[Path], roots: tuple[Path, ...]) -> Path:
    """The resolved (symlink-free) file an include names, confined to ``roots``."""
    where = located.where("include")
    rule = ("an include must be a .yaml file inside the task's folder or a task search path "
            "(--include-path)")
    if any(not ch.isprintable() for ch in name):
        raise PrismError(f"{where}: include {_clip(repr(name), 60)}: contains a control character; {rule}")
    p = Path(name).expanduser() if name.startswith("~") else Path(name)
    if p.suffix.lower() not in TASK_SUFFIXES:
        if p.suffix:  # x.txt, /etc/shadow.bak: not a task file; plain `_base` means `_base.yaml`
            raise PrismError(f"{where}: include {_clip(repr(name), 60)} is not a task file; {rule}")
        p = p.with_name(p.name + ".yaml")
    bases = [None] if p.is_absolute() else [located.file.parent] + [Path(s) for s in search_paths]
    for base in bases:
        cand = p if base is None else base / p
        try:
            real = cand.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            raise PrismError(f"{where}: include {_clip(repr(name), 60)} cannot be resolved (a symlink loop?)") from None
        if not _inside(real, roots):
            raise PrismError(f"{where}: include {_clip(repr(name), 60)} points outside the task folders; {rule}")
        if real.is_dir():
            raise PrismError(f"{where}: include {_clip(repr(name), 60)} is a folder; {rule}")
        if real.exists():
            try:
                read_task_text(real)  # a fifo, binary or huge file: refused here, naming the including line
            except PrismError as exc:
                detail = str(exc).removeprefix(f"{real}: ")
                raise PrismError(f"{where}: include {_clip(repr(name), 60)}: {detail}") from None
            return real
    raise PrismError(f"{where}: included file {_clip(repr(name), 60)} not found next to {located.file.name} "
                     "or in the task search paths")
