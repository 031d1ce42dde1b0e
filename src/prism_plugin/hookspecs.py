"""Every hook of prism-plugin, in one place.

A plugin is any module or object whose functions are decorated with :data:`prism_plugin.hookimpl` and whose names
match a stub below. Built-ins (listed in :data:`prism_plugin.plugins.DEFAULT_PLUGINS`) use these same hooks; third
parties publish theirs in the ``prism_plugin`` entry-point group (docs/extending/).

Hooks return ``None`` when they have nothing to add. Every hook is called through
:meth:`prism_plugin.plugins.PluginHost.call` (one failure policy; set ``PRISM_TRACE_HOOKS=1`` to trace the calls).
A function marked ``@hookimpl`` whose name is not a hook below is an error at load time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import pluggy

PROJECT = "prism_plugin"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from prism_plugin.contracts import ReportSection, ReportView, RunContext, RunTables, SummaryOutput
    from prism_plugin.registrars import (AdapterRegistrar, AdaptationRegistrar, CheckRegistrar, CommandRegistrar,
                                         HeadRegistrar, MetricRegistrar, PerturbationRegistrar, SourceRegistrar,
                                         TableRegistrar, TaskKeyRegistrar)

#: deprecated hook -> its replacement (a plugin implementing one gets a DeprecationWarning when it loads)
DEPRECATED = {"probe_heads": "register_heads"}


@hookspec
def register_adapters(register: "AdapterRegistrar") -> None:
    """Register model adapters: ``register(name, factory, *, description, aliases, dim, preprocessing, licence)``.

    Contract and a worked example: docs/extending/register_adapters.md."""


@hookspec
def register_heads(register: "HeadRegistrar") -> None:
    """Register probe heads: ``register(kind, factory, *, description, settings, seed_invariant, linear)``.

    Contract and a worked example: docs/extending/register_heads.md."""


@hookspec
def probe_heads(register: "HeadRegistrar") -> None:
    """Deprecated on 2026-12-01, removed after 2027-06-01: implement :func:`register_heads` (same registrar).

    Still called for existing plugins, with a ``DeprecationWarning`` naming the replacement."""


@hookspec
def register_sources(register: "SourceRegistrar") -> None:
    """Register data source types: ``register(type, source_class, *, description, aliases, kind)``.

    Contract and a worked example: docs/extending/register_sources.md."""


@hookspec
def register_adaptation(register: "AdaptationRegistrar") -> None:
    """Register test-time adaptation methods: ``register(name, method, *, role, default, description)``.

    Contract and a worked example: docs/extending/register_adaptation.md."""


@hookspec
def register_tables(register: "TableRegistrar") -> None:
    """Register per-run table kinds: ``register(name, file, required_columns, *, renames, drops, key_columns,
    **report)``.

    Contract and a worked example: docs/extending/register_tables.md."""


@hookspec
def register_task_keys(register: "TaskKeyRegistrar") -> None:
    """Register task YAML keys owned by a plugin: ``register(key, validator, *, kinds, description)``.

    Contract and a worked example: docs/extending/register_task_keys.md."""


@hookspec
def register_metrics(register: "MetricRegistrar") -> None:
    """Describe per-run metric columns: ``register(column, *, direction, aggregation, display, ...)``.

    Contract and a worked example: docs/extending/register_metrics.md."""


@hookspec
def register_checks(register: "CheckRegistrar") -> None:
    """Register run-quality checks: ``register(name, check, *, description)``.

    Contract and a worked example: docs/extending/register_checks.md."""


@hookspec
def register_perturbations(register: "PerturbationRegistrar") -> None:
    """Register synthetic image transforms of the ``perturb:`` task key:
    ``register(name, transform, *, params, description)``.

    Contract and a worked example: docs/extending/register_perturbations.md."""


@hookspec
def register_commands(register: "CommandRegistrar") -> None:
    """Register ``prism-run`` subcommands: ``register(name, command, *, help)``.

    Contract and a worked example: docs/extending/register_commands.md."""


@hookspec
def task_paths() -> list[Path] | None:
    """Return extra folders to search for task YAML files (the first file found for a name wins).

    Contract and a worked example: docs/extending/task_paths.md."""


@hookspec
def run_metrics(run: "RunContext") -> Mapping[str, Any] | None:
    """Compute named per-run values; each key becomes a column of ``runs.csv`` (scalars only).

    Contract and a worked example: docs/extending/run_metrics.md."""


@hookspec
def summarize(tables: "RunTables", options: Mapping[str, Any]) -> "SummaryOutput | None":
    """Derive named tables (a :class:`~prism_plugin.contracts.SummaryOutput`) from the per-run tables.

    Contract and a worked example: docs/extending/summarize.md."""


@hookspec
def report_sections(view: "ReportView") -> "list[ReportSection] | None":
    """Return report sections (title, Markdown body, optional PNG figures), ordered by ``order``.

    Contract and a worked example: docs/extending/report_sections.md."""


__all__ = ["hookimpl", "hookspec", "DEPRECATED", "PROJECT"]
