"""The task index: which task names exist, in which file, under which search path.

Search order: the user's ``--include-path`` folders first, then folders that
plugins return from the ``task_paths`` hook (the built-in catalogue among them).
The first file that defines a name wins. Files whose name starts with ``_`` are
include-only fragments, never tasks by themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from prism_plugin.errors import PrismError, UnknownNameError
from prism_plugin.tasks.loader import Located, deep_merge, parse_yaml, resolve_includes
from prism_plugin.tasks.schema import TaskConfig, build_task


@dataclass(frozen=True)
class TaskEntry:
    name: str
    file: Path
    search_path: Path
    description: str = ""


def parse_override(text: str) -> tuple[str, Any]:
    """``probe.C=0.1`` -> ("probe.C", 0.1); values are YAML scalars or flow lists."""
    if "=" not in text:
        raise PrismError(f"--set {text!r}: expected KEY=VALUE, e.g. --set probe.C=0.1")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise PrismError(f"--set {text!r}: the key is empty")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise PrismError(f"--set {text!r}: the value is not valid YAML (use [0.01,0.1] for lists)") from None
    return key, value


def apply_overrides(located: Located, overrides: Iterable[str]) -> Located:
    data = located.data
    for text in overrides:
        key, value = parse_override(text)
        nested: Any = value
        for part in reversed(key.split(".")):
            nested = {part: nested}
        data = deep_merge(data, nested)
        for k in [k for k in located.files if k == key or k.startswith(key + ".") or k.startswith(key + "[")]:
            located.files[k] = Path("--set")
        located.files[key] = Path("--set")
    return Located(data, located.file, located.lines, located.files)


class TaskIndex:
    def __init__(self, search_paths: Iterable[Path]):
        self.search_paths = [Path(p) for p in search_paths]
        self._entries: dict[str, TaskEntry] | None = None

    def entries(self) -> dict[str, TaskEntry]:
        if self._entries is None:
            found: dict[str, TaskEntry] = {}
            for root in self.search_paths:
                if not root.is_dir():
                    continue
                for file in sorted(root.rglob("*.yaml")):
                    if file.name.startswith("_"):
                        continue
                    try:
                        head = yaml.safe_load(file.read_text(encoding="utf-8"))
                    except (yaml.YAMLError, OSError, UnicodeDecodeError):
                        head = None
                    name = head.get("task") if isinstance(head, dict) else None
                    if not isinstance(name, str):
                        name = file.stem  # broken file: listed by stem so `validate` can report it
                    if name not in found:
                        desc = head.get("description", "") if isinstance(head, dict) else ""
                        found[name] = TaskEntry(name, file, root, str(desc))
            self._entries = found
        return self._entries

    def resolve_file(self, name_or_file: str) -> Path:
        p = Path(name_or_file)
        if p.suffix in (".yaml", ".yml") and p.is_file():
            return p
        entries = self.entries()
        if name_or_file not in entries:
            raise UnknownNameError("task", name_or_file, entries,
                                   hint="see `prism-run ls tasks`, or add a folder with --include-path")
        return entries[name_or_file].file

    def load(self, name_or_file: str, overrides: Iterable[str] = ()) -> TaskConfig:
        file = self.resolve_file(name_or_file)
        located = resolve_includes(parse_yaml(file), self.search_paths)
        located = apply_overrides(located, overrides)
        task = build_task(located)
        if task.is_transfer:
            self._resolve_transfer(task)
        return task

    def _resolve_transfer(self, task: TaskConfig) -> None:
        """Attach the source and target task configs and default the pair names."""
        for role in ("source", "target"):
            member = self.load(getattr(task, f"{role}_task"))
            if member.is_transfer:
                raise PrismError(f"{task.file}: {role}_task {member.name!r} is itself a transfer task; "
                                 "name an in-distribution task")
            setattr(task, f"{role}_config", member)
        src_cfg, tgt_cfg = task.source_config, task.target_config
        if task.target_split not in tgt_cfg.splits:
            raise PrismError(f"{task.file}: target task {tgt_cfg.name} has no {task.target_split!r} split")
        task.src = task.src or src_cfg.dataset
        task.tgt = task.tgt or tgt_cfg.dataset
        task.pair = task.pair or f"{task.src}->{task.tgt}"
        if task.dataset == task.name:
            task.dataset = task.pair


def default_index(host, include_paths: Iterable[Path] = ()) -> TaskIndex:
    paths: list[Path] = [Path(p) for p in include_paths]
    for p in paths:
        if not p.is_dir():
            raise PrismError(f"--include-path {p}: no such directory")
    for result in host.hook.task_paths():
        for p in result or ():
            if Path(p) not in paths:
                paths.append(Path(p))
    return TaskIndex(paths)
