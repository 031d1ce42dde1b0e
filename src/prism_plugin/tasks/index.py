"""The task index: which tasks and groups exist, in which file, under which search path.

Search order: the user's ``--include-path`` folders first, then folders that plugins return from the ``task_paths``
hook (the built-in catalogue among them). The first file that defines a name wins. Files whose name starts with
``_`` are include-only fragments, never tasks by themselves.

A **group** file has ``group: NAME`` and ``tasks: [...]`` (task or group names) and may set protocol keys
(:data:`PROPAGATED_KEYS`) that every member inherits. Precedence, lowest to highest: a member's included fragments
(e.g. ``_prism_protocol.yaml``) < the outer group < the inner group < the member file's own keys < ``--set``.
:meth:`TaskIndex.expand` turns a group into its member tasks, in order (a ``sweep:`` task's variants:
:mod:`.sweep`). How the layers combine: :mod:`.layers`.
"""

from __future__ import annotations

import copy
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from prism_plugin.errors import PrismError, UnknownNameError, suggest
from prism_plugin.tasks.layers import (
    WHERE_ONLY, apply_overrides, delete_path, inherit, is_parent, leaves, parse_override, reset_replaced_source,
)
from prism_plugin.tasks.loader import MAX_NESTING, Located, nesting_depth, parse_yaml, read_task_text, resolve_includes
from prism_plugin.paths import name_problem, safe_component, short_repr
from prism_plugin.tasks.schema import TaskConfig, build_task

#: Keys a group passes down to its members (unless a member sets them in its own file).
PROPAGATED_KEYS = ("label_fractions", "seeds", "probe", "ece_bins", "binary_logits", "temperature_bounds",
                   "proportional_val", "split_seeds", "probes")
GROUP_KEYS = frozenset({"group", "description", "tasks", "include", "tags", *PROPAGATED_KEYS})
#: ``--set`` keys that a transfer task hands to its source and target tasks (it has no data of its own).
FORWARDED_TO_MEMBERS = ("split",)
MAX_PROBLEMS = 25


@dataclass(frozen=True)
class TaskEntry:
    name: str
    file: Path
    search_path: Path
    description: str = ""
    kind: str = "task"                  # "task" or "group"
    members: tuple[str, ...] = ()       # a group's direct members, as written


@dataclass
class GroupConfig:
    """A validated group: its members expanded into task configs (in order).

    The attributes ``n_classes``, ``splits``, ``label_fractions`` and ``seeds``
    summarise the members, so a group prints like a task in ``prism-run validate``.
    """

    name: str
    file: str
    description: str
    members: tuple[str, ...]
    tasks: list[TaskConfig] = field(default_factory=list)
    is_group = True
    is_transfer = False

    @property
    def n_classes(self) -> str:
        ks = sorted({t.n_classes for t in self.tasks})
        return str(ks[0]) if len(ks) == 1 else f"{ks[0]}-{ks[-1]}" if ks else "0"

    @property
    def splits(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for t in self.tasks:
            for s in (t.splits or {"train": None, "val": None, "test": None}):
                out.setdefault(s, None)
        return out

    @property
    def label_fractions(self) -> tuple[float, ...]:
        return tuple(sorted({f for t in self.tasks for f in t.label_fractions}))

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(sorted({s for t in self.tasks for s in t.seeds}))

    @property
    def n_runs(self) -> int:
        return sum(t.n_runs for t in self.tasks)

    def grid_text(self) -> str:
        """``16 tasks, 160 runs`` (per model): the size of the group's grid."""
        return f"{len(self.tasks)} task{'s' if len(self.tasks) != 1 else ''}, {self.n_runs} runs"


#: the safe loader with libyaml's parser when PyYAML was built with it (the same constructor as yaml.safe_load)
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _head(file: Path) -> Any:
    """The file's top-level mapping for the index (None when it is no readable task file: a folder,
    a fifo, a binary or huge file, broken YAML; `validate` reports why)."""
    try:
        text = read_task_text(file)
        if nesting_depth(text) > MAX_NESTING:
            return None
        loader = FAST_LOADER(text)  # libyaml's parser: every catalogue file is read on every command
        try:
            return loader.get_single_data()
        except yaml.YAMLError:  # what the pure-Python parser, which the loader's file:line errors use, says
            return yaml.safe_load(text)
        finally:
            loader.dispose()
    except (PrismError, yaml.YAMLError, OSError, ValueError, RecursionError):
        return None


def _is_group_head(head: Any) -> bool:
    return isinstance(head, dict) and "group" in head and "task" not in head


def _item_lines(file: Path, key: str) -> list[int]:
    """1-based line of every item of the top-level sequence ``key`` (empty if it cannot be found)."""
    try:
        text = read_task_text(file)
        node = yaml.compose(text, Loader=yaml.SafeLoader) if nesting_depth(text) <= MAX_NESTING else None
    except (PrismError, yaml.YAMLError, OSError, ValueError, RecursionError):
        return []
    if not isinstance(node, yaml.MappingNode):
        return []
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key and isinstance(v, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in v.value]
    return []


def _line_number(problem: str) -> int:
    """The line a ``file:line: ...`` problem names (0 for one without a line: a missing key, --set)."""
    m = re.match(r"[^\n]*?:(\d+): ", problem)
    return int(m.group(1)) if m else 0


def _problem_lines(exc: PrismError) -> list[str]:
    return [line for line in str(exc).split("\n") if line.strip()]


class TaskIndex:
    def __init__(self, search_paths: Iterable[Path], host=None):
        self.search_paths = [Path(p) for p in search_paths]
        #: the plugin host whose registries (task keys, sources, table kinds) validate tasks
        self.host = host
        self._entries: dict[str, TaskEntry] | None = None
        self._groups: dict[str, TaskEntry] = {}
        self._shadowed: dict[str, list[TaskEntry]] = {}
        self._warned: set[tuple] = set()
        self._members = 0  # > 0 while a transfer task loads its source and target tasks

    # ------------------------------------------------------------------ discovery
    def _scan(self) -> None:
        tasks: dict[str, TaskEntry] = {}
        groups: dict[str, TaskEntry] = {}
        shadowed: dict[str, list[TaskEntry]] = {}

        def add(table: dict[str, TaskEntry], entry: TaskEntry) -> None:
            first = table.setdefault(entry.name, entry)
            if first is not entry:  # the earlier search path (or file, in sorted order) wins
                shadowed.setdefault(f"{entry.kind}:{entry.name}", []).append(entry)

        for root in self.search_paths:
            if not root.is_dir():
                continue
            files = sorted(set(root.rglob("*.yaml")) | set(root.rglob("*.yml")))
            for file in files:
                if file.name.startswith("_") or not file.is_file():  # fragments; a folder named x.yaml
                    continue
                head = _head(file)
                desc = str(head.get("description", "") or "") if isinstance(head, dict) else ""
                if _is_group_head(head) and isinstance(head.get("group"), str):
                    members = head.get("tasks")
                    members = tuple(m for m in members if isinstance(m, str)) if isinstance(members, list) else ()
                    add(groups, TaskEntry(head["group"], file, root, desc, "group", members))
                    continue
                name = head.get("task") if isinstance(head, dict) else None
                if not isinstance(name, str):
                    name = file.stem  # broken file: listed by stem so `validate` can report it
                add(tasks, TaskEntry(name, file, root, desc))
        self._entries, self._groups, self._shadowed = tasks, groups, shadowed

    def _warn_shadow(self, kind: str, name: str) -> None:
        """One warning per name used, when another file defines the same task/group name further down
        the search order (a user task that hides a built-in one, or two files with one name)."""
        hidden = self._shadowed.get(f"{kind}:{name}")
        if not hidden or (kind, name) in self._warned:
            return
        self._warned.add((kind, name))
        used = (self._entries if kind == "task" else self._groups)[name]
        others = ", ".join(str(e.file) for e in hidden)
        warnings.warn(f"{kind} {name!r}: {used.file} is used; it shadows the {kind} of the same name in {others} "
                      f"(earlier --include-path folders win; rename one {kind} to keep both)", stacklevel=3)

    def entries(self) -> dict[str, TaskEntry]:
        """Tasks (not groups) by name."""
        if self._entries is None:
            self._scan()
        return self._entries

    def groups(self) -> dict[str, TaskEntry]:
        if self._entries is None:
            self._scan()
        return self._groups

    def kind_of(self, name_or_file: str, files: bool = True) -> str:
        """``"task"`` or ``"group"``; an unknown name is an error with suggestions. With ``files=False``
        (a group's members, a transfer task's source and target) only index names count, never file paths."""
        p = Path(name_or_file)
        if files and p.suffix in (".yaml", ".yml") and p.is_file():
            return "group" if _is_group_head(_head(p)) else "task"
        tasks, groups = self.entries(), self.groups()
        if name_or_file in tasks and name_or_file in groups:
            raise PrismError(f"{name_or_file!r} is both a task ({tasks[name_or_file].file}) and a group "
                             f"({groups[name_or_file].file}); rename one of them")
        if name_or_file in groups:
            return "group"
        if name_or_file in tasks:
            return "task"
        raise UnknownNameError("task", name_or_file, list(tasks) + list(groups),
                               hint="a task or group name: see `prism-run ls tasks` / `prism-run ls groups`, or add "
                                    "a folder with --include-path")

    def is_group(self, name_or_file: str) -> bool:
        try:
            return self.kind_of(name_or_file) == "group"
        except UnknownNameError:
            return False

    def resolve_file(self, name_or_file: str, files: bool = True) -> Path:
        p = Path(name_or_file)
        if files and p.suffix in (".yaml", ".yml") and p.is_file():
            return p
        entries = self.entries()
        if name_or_file not in entries:
            if name_or_file in self.groups():
                raise PrismError(f"{name_or_file!r} is a group ({self.groups()[name_or_file].file}), not a task; "
                                 "name one task here")
            raise UnknownNameError("task", name_or_file, entries,
                                   hint="see `prism-run ls tasks`, or add a folder with --include-path")
        self._warn_shadow("task", name_or_file)
        return entries[name_or_file].file

    # ------------------------------------------------------------------ tasks
    def load(self, name_or_file: str, overrides: Iterable[str] = ()) -> TaskConfig | GroupConfig:
        """A task config, or for a group name/file a :class:`GroupConfig` with every member validated."""
        if self.kind_of(name_or_file) == "group":
            return self.load_group(name_or_file, overrides)
        return self.load_task(name_or_file, overrides)

    def load_task(self, name_or_file: str, overrides: Iterable[str] = (),
                  inherited: dict[str, tuple[Any, Path, int]] | None = None, files: bool = True) -> TaskConfig:
        file = self.resolve_file(name_or_file, files)
        if file.name.startswith("_"):
            raise PrismError(f"{file}: an include-only fragment (its name starts with '_'), not a task; it is "
                             "checked through the tasks that include it")
        overrides = list(overrides)
        located = resolve_includes(parse_yaml(file), self.search_paths)
        forwarded: list[str] = []
        if located.data.get("kind") == "transfer":
            forwarded = [o for o in overrides if parse_override(o)[0].split(".")[0] in FORWARDED_TO_MEMBERS]
            overrides = [o for o in overrides if o not in forwarded]
        located = inherit(located, inherited or {})
        located = apply_overrides(located, overrides)
        located = reset_replaced_source(located, self.host)
        task = self._build(located, self.host)
        self._warn_file_shadow("task", task.name, file)
        if task.is_transfer:
            self._resolve_transfer(task, forwarded, located)
        if task.split_seeds and not self._members and ("split.seed",) not in self._warned and any(
                parse_override(o)[0] in ("split.seed", "split") for o in overrides + forwarded):
            self._warned.add(("split.seed",))  # once per command, not once per group member
            what = "the source split; the target keeps its split.seed" if task.is_transfer else "the splits"
            warnings.warn(f"task {task.name}: --set split.seed does not choose the split seed of a task with "
                          f"split_seeds {list(task.split_seeds)} (they set {what}); pass --set split_seeds=[N] to "
                          "run split seed N alone", stacklevel=2)
        return task

    def _warn_file_shadow(self, kind: str, name: str, file: Path) -> None:
        """A task (group) file given by path whose name is also an indexed task (group) in another file."""
        table = self.entries() if kind == "task" else self.groups()
        entry = table.get(name)
        if entry is None or (kind, name, "file") in self._warned:
            return
        try:
            same = entry.file.resolve() == Path(file).resolve()
        except OSError:
            same = False
        if not same:
            self._warned.add((kind, name, "file"))
            warnings.warn(f"{kind} {name!r} of {file} has the name of the {kind} in {entry.file}; its results "
                          f"carry the same name (rename it in its '{kind}:' key to keep them apart)", stacklevel=3)

    @staticmethod
    def _build(located: Located, host=None) -> TaskConfig:
        """build_task, collecting every independent problem (each with file, line and key), each once.

        build_task already reports every key that fails on its own; a validator that stops at
        its first problem inside one key (a source's options, a plugin key) is looked past by
        removing the failed key and validating again. A problem of a later round about a removed
        key (or a key above or below it, e.g. "missing required key") is a consequence, not reported.
        """
        data = copy.deepcopy(located.data)
        first: PrismError | None = None
        lines: list[str] = []
        removed: list[str] = []
        task = None
        for round_ in range(MAX_PROBLEMS):
            try:
                task = build_task(Located(data, located.file, located.lines, located.files), host)
                break
            except PrismError as exc:
                first = first or exc
                keys: list[str] = []
                for err in getattr(exc, "errors", None) or [exc]:
                    key = getattr(err, "key", None)
                    if round_ and (key is None or any(is_parent(key, r) or is_parent(r, key) for r in removed)):
                        continue  # a consequence of a key removed to look past an earlier problem
                    lines.extend(line for line in str(err).split("\n") if line.strip() and line not in lines)
                    if key:
                        keys.append(key)
                deleted = [k for k in dict.fromkeys(keys) if delete_path(data, k)]
                if not deleted:
                    break
                removed.extend(deleted)
        if first is None:
            return task
        if len(lines) <= 1:
            raise first
        raise PrismError("\n".join(sorted(lines, key=_line_number)))  # in file order (stable)

    def _resolve_transfer(self, task: TaskConfig, forwarded: Iterable[str] = (), located: Located | None = None) -> None:
        """Attach the source and target task configs, default the pair names and check the link.

        ``src``/``tgt`` are what OOD stability and the CRI match against the in-distribution runs (the source's
        ``dataset``, or for Camelyon17 its ``hospital`` column): a ``src`` that names neither the source task's
        dataset nor one of its identity ``columns`` values would silently drop the pair from both, so it is an
        error naming both tasks and files. A pair meant to stand outside OOD stability (a label-definition variant
        such as BRACS-DCIS+IC->CRC) says so with ``ood_stability: false``.
        """
        where = located.where if located is not None else (lambda key: task.file)
        for role in ("source", "target"):
            name = getattr(task, f"{role}_task")
            self._members += 1
            try:
                member = self.load_task(name, forwarded, files=False)
            except UnknownNameError as exc:
                raise PrismError(f"{where(role + '_task')}: {role}_task: {exc}") from None
            finally:
                self._members -= 1
            if member.is_transfer:
                raise PrismError(f"{where(role + '_task')}: {role}_task {member.name!r} is itself a transfer task; "
                                 "name an in-distribution task")
            setattr(task, f"{role}_config", member)
        src_cfg, tgt_cfg = task.source_config, task.target_config
        if len(task.split_seeds) == 1 and not src_cfg.split:  # fixed source splits are one split
            task.split_seeds = ()
        if task.split_seeds and not src_cfg.split:
            raise PrismError(f"{where('split_seeds')}: split_seeds: the source task {src_cfg.name} ({src_cfg.file}) has "
                             "no split: procedure to vary; give it one (split: {procedure: stratified, seed: 0, parts: "
                             "{train: 0.7, heldout: 0.3}}) or set split_seeds: [0] or null (its one split)")
        if task.target_split not in tgt_cfg.splits:
            raise PrismError(f"{where('target_split')}: target task {tgt_cfg.name} has no {task.target_split!r} split")
        linked = not (located is not None and located.data.get("ood_stability") is False)
        if linked:
            problems = []
            for key, value, cfg in (("src", task.src, src_cfg), ("tgt", task.tgt, tgt_cfg)):
                accepted = [cfg.dataset] + [str(v) for v in cfg.columns.values()]
                if value and value not in accepted:
                    role = "source" if key == "src" else "target"
                    cols = "".join(f", {c}: {v}" for c, v in cfg.columns.items())
                    problems.append(
                        f"{where(key)}: {key}: {short_repr(value)} is not the dataset of the {role} task "
                        f"{cfg.name} ({cfg.file}: dataset {cfg.dataset!r}{cols}); OOD "
                        f"stability and CRI match {key} against it and would silently leave this pair out. "
                        f"Write {key}: {cfg.dataset} (or drop {key}), or set ood_stability: false for a pair "
                        "outside OOD stability")
            if problems:
                raise PrismError("\n".join(problems))
        task.src = task.src or src_cfg.dataset
        task.tgt = task.tgt or tgt_cfg.dataset
        task.pair = task.pair or f"{task.src}->{task.tgt}"
        if task.dataset == task.name:
            task.dataset = task.pair

    # ------------------------------------------------------------------ groups
    def _group_file(self, name_or_file: str, files: bool = True) -> Path:
        p = Path(name_or_file)
        if files and p.suffix in (".yaml", ".yml") and p.is_file():
            return p
        self._warn_shadow("group", name_or_file)
        return self.groups()[name_or_file].file

    def load_group(self, name_or_file: str, overrides: Iterable[str] = ()) -> GroupConfig:
        """Expand and validate a group; every problem of the group and its members in one error."""
        overrides = list(overrides)
        for o in overrides:
            parse_override(o)  # a malformed --set is one error, not one per member
        tasks: list[tuple[TaskConfig, str]] = []
        problems: list[str] = []
        info = self._expand(name_or_file, overrides, {}, (), tasks, problems)
        seen: dict[str, str] = {}
        for task, where in tasks:
            if task.name in seen:
                problems.append(f"{where}: task {task.name!r} appears twice in group {info[0]!r} (first at "
                                f"{seen[task.name]}); each task runs once per group")
            seen.setdefault(task.name, where)
        if problems:
            raise PrismError("\n".join(dict.fromkeys(problems)))
        name, file, desc, members = info
        return GroupConfig(name=name, file=str(file), description=desc, members=members,
                           tasks=[t for t, _ in tasks])

    def expand(self, name_or_file: str, overrides: Iterable[str] = ()) -> list[TaskConfig]:
        """The tasks a name stands for: a task -> [it]; a group -> its members, flattened, in order."""
        if self.kind_of(name_or_file) == "group":
            return self.load_group(name_or_file, overrides).tasks
        return [self.load_task(name_or_file, overrides)]

    def expand_args(self, names: Iterable[str], overrides: Iterable[str] = ()) -> list[tuple[str, TaskConfig]]:
        """``--task`` values -> [(group name or "", task)], all validated before any work starts."""
        out: list[tuple[str, TaskConfig]] = []
        problems: list[str] = []
        for name in names:
            try:
                if self.kind_of(name) == "group":
                    group = self.load_group(name, overrides)
                    out.extend((group.name, t) for t in group.tasks)
                else:
                    out.append(("", self.load_task(name, overrides)))
            except PrismError as exc:
                problems.extend(_problem_lines(exc))
        if problems:
            raise PrismError("\n".join(dict.fromkeys(problems)))
        return out

    def _expand(self, name_or_file: str, overrides: list[str], inherited: dict, stack: tuple[str, ...],
                out: list[tuple[TaskConfig, str]], problems: list[str],
                files: bool = True) -> tuple[str, Path, str, tuple[str, ...]]:
        file = self._group_file(name_or_file, files)
        try:
            located = resolve_includes(parse_yaml(file), self.search_paths)
        except PrismError as exc:
            problems.extend(_problem_lines(exc))
            return str(name_or_file), file, "", ()
        d = located.data
        name = d.get("group")
        problem = name_problem(name, "group name")
        if problem:  # a group name becomes the folder of its runs.csv: never a path
            problems.append(f"{located.where('group')}: group: {problem}")
            name = safe_component(name if isinstance(name, str) else name_or_file)
        else:
            self._warn_file_shadow("group", name, file)
        for key in d:
            if key == "task":
                problems.append(f"{located.where('task')}: task: a file is either a task (task:) or a group "
                                "(group: + tasks:), not both")
            elif key not in GROUP_KEYS:
                problems.append(f"{located.where(key)}: unknown key {key!r} in a group{suggest(str(key), GROUP_KEYS)} "
                                f"(allowed: {', '.join(sorted(GROUP_KEYS))})")
        members = d.get("tasks")
        if not isinstance(members, list) or not members:
            problems.append(f"{located.where('tasks')}: tasks: must be a non-empty list of task or group names")
            members = []
        own: dict[str, tuple[Any, Path, int]] = {}
        for key in PROPAGATED_KEYS:
            if key in d:
                for path, value in leaves(d[key], key):
                    own[path] = (value, located.files.get(path, located.files.get(key, file)),
                                 located.lines.get(path, located.lines.get(key, 0)))
                for path in located.lines:
                    if is_parent(key, path) and path not in own:
                        own[path] = (WHERE_ONLY, located.files.get(path, file), located.lines[path])
        merged = {**inherited, **own}
        item_lines = _item_lines(file, "tasks") if located.files.get("tasks", file) == file else []
        here = stack + (name,)
        for i, member in enumerate(members):
            line = item_lines[i] if i < len(item_lines) else located.lines.get("tasks", 0)
            where = f"{file}:{line}" if line else str(file)
            if not isinstance(member, str) or not member:
                problems.append(f"{where}: tasks[{i}]: must be a task or group name, got {short_repr(member)}")
                continue
            try:
                kind = self.kind_of(member, files=False)
            except PrismError as exc:
                problems.append(f"{where}: tasks[{i}]: {exc}")
                continue
            if kind == "group":
                sub = self.groups()[member].name if member in self.groups() else member
                if sub in here:
                    problems.append(f"{where}: tasks[{i}]: group cycle {' -> '.join(here + (sub,))}")
                    continue
                self._expand(member, overrides, merged, here, out, problems, files=False)
                continue
            try:
                out.append((self.load_task(member, overrides, merged, files=False), where))
            except PrismError as exc:
                problems.extend(_problem_lines(exc))
        desc = str(d.get("description", "") or "")
        return name, file, desc, tuple(m for m in members if isinstance(m, str))


def default_index(host, include_paths: Iterable[Path] = ()) -> TaskIndex:
    paths: list[Path] = [Path(p) for p in include_paths]
    for p in paths:
        if not p.is_dir():
            raise PrismError(f"--include-path {p}: no such directory")
    for result in host.call("task_paths"):
        for p in result.value or ():
            if Path(p) not in paths:
                paths.append(Path(p))
    return TaskIndex(paths, host)
