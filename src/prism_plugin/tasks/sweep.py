"""Task sweeps: one YAML task expanded into one variant per value of a probe setting.

A task may carry ``sweep: {probe.C: [...]}`` (also ``probe.kind: [...]`` or whole ``probe: [{...}, ...]``
mappings; docs/protocol.md). The nested spelling ``sweep: {probe: {C: [...]}}`` (what ``--set sweep.probe.C=[...]``
produces) means the same as ``probe.C``. One setting per sweep; the values
are validated with the task schema's own probe rules when the task is loaded.

:func:`expand_sweeps` turns such a task into variants named
``<task>@<key>=<value>`` (e.g. ``prism_demo@probe.C=0.01``): each has its own
results directory, the swept probe settings, no ``sweep`` of its own, and three
extra identity columns in every run row: ``sweep_key`` (``probe.C``),
``sweep_value`` (``0.01``) and, for variants whose head has a C, ``probe_C`` (the
variant's C). A ``probe.kind`` sweep keeps the task's other probe settings only for
the kind they were written for (an ``mlp`` variant of a ``{kind: logistic, C: 1}``
probe runs with the MLP defaults); a value the swept head does not declare is an
error naming the setting and the head's settings.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable

from prism_plugin.errors import PrismError
from prism_plugin.heads.base import DEFAULT_KIND, probe_settings

SWEEP_KEY = "sweep"
MAX_VALUES = 100
#: Identity columns a sweep variant adds to every run row.
SWEEP_COLUMNS = ("sweep_key", "sweep_value", "probe_C")


def format_value(value: Any) -> str:
    """The value as it appears in a variant name: ``0.01``, ``100``, ``mlp``, ``kind=mlp,hidden=512``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, dict):
        return ",".join(f"{k}={format_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


def _flatten(raw: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, full + "."))
        else:
            out[full] = value
    return out


def parse_sweep(d: dict, checker, probe_of: Callable[[dict], dict]) -> dict[str, Any]:
    """Validate the ``sweep`` key of a task mapping ``d``.

    ``checker`` is the schema's checker (for file:line locations); ``probe_of(mapping)`` validates a task mapping
    and returns its normalised ``probe``. Returns ``{}`` without a sweep, else ``{"key": ..., "values": [...],
    "probes": [normalised probe of each value]}``.
    """
    if SWEEP_KEY not in d:
        return {}
    where = checker.loc.where
    raw = d[SWEEP_KEY]
    example = "e.g. sweep: {probe.C: [0.01, 0.1, 1, 10, 100]}"
    if not isinstance(raw, dict) or not raw:
        raise PrismError(f"{where(SWEEP_KEY)}: sweep: must map one probe setting to a list of values, {example}")
    flat = _flatten(raw)
    if len(flat) != 1:
        raise PrismError(f"{where(SWEEP_KEY)}: sweep: sweeps one setting at a time, got {len(flat)} "
                         f"({', '.join(flat)}); write one task per sweep, {example}")
    key, values = next(iter(flat.items()))
    loc = where(f"{SWEEP_KEY}.{key}")
    parts = key.split(".")
    if parts[0] != "probe" or len(parts) > 2 or (len(parts) == 2 and not parts[1]):
        raise PrismError(f"{loc}: sweep.{key}: only probe settings can be swept (probe.C, probe.kind, "
                         f"probe.<setting> or probe as whole mappings), {example}")
    if not isinstance(values, list) or not values:
        raise PrismError(f"{loc}: sweep.{key}: must be a non-empty list of values, {example}")
    if len(values) > MAX_VALUES:
        raise PrismError(f"{loc}: sweep.{key}: {len(values)} values; at most {MAX_VALUES} per sweep")
    names = [format_value(v) for v in values]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PrismError(f"{loc}: sweep.{key}: value {dup[0]} appears twice")
    base = d.get("probe") if isinstance(d.get("probe"), dict) else {}
    base_kind = base.get("kind", DEFAULT_KIND)
    probes = []
    for value in values:
        if key == "probe":
            if not isinstance(value, dict):
                raise PrismError(f"{loc}: sweep.probe: each value must be a probe mapping such as "
                                 f"{{kind: mlp, hidden: 256}}, got {value!r}")
            new_probe = dict(value)
        elif key == "probe.kind":
            new_probe = {**base, "kind": value} if value == base_kind else {"kind": value}
        else:
            new_probe = {**base, parts[1]: value}
        variant = {k: v for k, v in d.items() if k != SWEEP_KEY}
        variant["probe"] = new_probe
        try:
            probes.append(probe_of(variant))
        except PrismError as exc:
            detail = str(exc).split(": ", 1)[-1]
            raise PrismError(f"{loc}: sweep.{key}: value {format_value(value)}: {detail}") from None
    return {"key": key, "values": list(values), "probes": probes}


def variant_name(task_name: str, key: str, value: Any) -> str:
    return f"{task_name}@{key}={format_value(value)}"


def expand_task(task) -> list:
    """The variants of one task (the task itself, unchanged, when it has no sweep)."""
    sweep = getattr(task, "sweep", None) or {}
    if not sweep:
        return [task]
    key = sweep["key"]
    out = []
    for value, probe in zip(sweep["values"], sweep["probes"]):
        columns = {**task.columns, "sweep_key": key,
                   "sweep_value": value if isinstance(value, (int, float, str)) and not isinstance(value, bool)
                   else format_value(value)}
        if "C" in probe:  # the variant's C, when its head has one
            columns["probe_C"] = float(probe["C"])
        desc = f"{task.description} (sweep {key} = {format_value(value)})".strip()
        out.append(dataclasses.replace(task, name=variant_name(task.name, key, value), probe=dict(probe),
                                       sweep={}, columns=columns, description=desc))
    return out


def check_probe(task, host) -> None:
    """Build each of the task's probe heads once (no fit; ``probe``, or every entry of ``probes``) so bad
    settings fail before any extraction."""
    for probe in getattr(task, "grid_probes", None) or (task.probe,):
        settings, kind = probe_settings(probe), str(probe.get("kind", DEFAULT_KIND))
        factory = host.head_factory(kind)
        try:
            factory(seed=int(task.seeds[0]) if task.seeds else 0, **settings)
        except TypeError as exc:
            raise PrismError(f"{task.file}: task {task.name}: probe settings {json.dumps(settings, default=str)} "
                             f"rejected by head {kind!r}: {exc}") from None
        except PrismError as exc:
            raise PrismError(f"{task.file}: task {task.name}: {exc}") from None


def expand_sweeps(tasks: Iterable, host=None) -> list:
    """Every task with its sweep expanded into variants (order kept; tasks without a sweep pass through).

    Items are tasks or ``(group, task)`` pairs (as the task index's group expansion yields them); a pair's variants
    keep its group. With ``host`` (a :class:`~prism_plugin.plugins.PluginHost`), every resulting task's probe head
    is also built once, so an unknown head kind or a setting the head rejects is reported before any embedding is
    extracted.
    """
    out = []
    for item in tasks:
        if isinstance(item, tuple):
            group, task = item
            out.extend((group, variant) for variant in expand_task(task))
        else:
            out.extend(expand_task(item))
    plain = [item[1] if isinstance(item, tuple) else item for item in out]
    names = [(item[0] if isinstance(item, tuple) else "", t.name) for item, t in zip(out, plain) if "@" in t.name]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PrismError(f"sweep variant {dup[0][1]!r} appears twice (the same task given twice?); "
                         "pass each task once")
    if host is not None:
        for task in plain:
            check_probe(task, host)
    return out


__all__ = ["SWEEP_COLUMNS", "SWEEP_KEY", "check_probe", "expand_sweeps", "expand_task", "format_value",
           "parse_sweep", "variant_name"]
