"""Every hook of prism-plugin, in one place.

A plugin is any module or object whose functions are decorated with
:data:`prism_plugin.hookimpl` and whose names match a stub below. Built-in
metrics, summaries, adapters and tasks are registered through these same hooks
(listed in code: :data:`prism_plugin.plugins.DEFAULT_PLUGINS`); third parties
publish theirs in the ``prism_plugin`` entry-point group::

    # my_package/plugin.py
    from prism_plugin import hookimpl

    @hookimpl
    def run_metrics(run):
        return {"my_score": float((run.pred == run.y_test).mean())}

    # pyproject.toml of my_package
    [project.entry-points.prism_plugin]
    my_plugin = "my_package.plugin"

Hooks return ``None`` when they have nothing to add. Every hook is called
through :meth:`prism_plugin.plugins.PluginHost.call` (one failure policy; set
``PRISM_TRACE_HOOKS=1`` to trace the calls). A function marked ``@hookimpl``
whose name is not a hook below is an error at load time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pluggy

PROJECT = "prism_plugin"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from prism_plugin.contracts import ReportSection, ReportView, RunContext, RunTables, SummaryOutput
    from prism_plugin.registrars import (AdapterRegistrar, AdaptationRegistrar, CheckRegistrar, CommandRegistrar,
                                         HeadRegistrar, MetricRegistrar, PerturbationRegistrar, SourceRegistrar,
                                         TableRegistrar, TaskKeyRegistrar)

#: The typed registrar objects passed to the ``register_*`` hooks live in
#: :mod:`prism_plugin.registrars`; each is called like a function.
AdapterRegister = Callable[..., None]


@hookspec
def register_adapters(register: "AdapterRegistrar") -> None:
    """Register model adapters: ``register(name, factory, *, description, aliases, dim, preprocessing, licence)``.

    ``factory`` (an :class:`~prism_plugin.embed.adapter.Adapter` subclass, a callable or a lazy
    ``"module:attr"`` string) is called with the user's ``--model-args`` as keyword arguments.
    ``name`` is what users pass to ``--model``; a name ending in ``:`` is a family
    (``timm:`` matches ``timm:<arch>``). ``dim``, ``preprocessing`` and ``licence`` are shown by
    ``prism-run ls adapters`` (read from the class when not given). Adapters may also be published
    directly through the ``prism_plugin.adapters`` entry-point group.
    """


@hookspec
def register_heads(register: "HeadRegistrar") -> None:
    """Register probe heads: ``register(kind, factory, *, description, seed_invariant, linear)``.

    ``factory(seed=..., **settings)`` returns an object with ``fit(X, y)`` and
    ``evaluate(X) -> ProbeOutput(decision, proba)`` (see :mod:`prism_plugin.protocol.probe`).
    Traits: ``seed_invariant=True`` when the fit does not depend on the seed once the training
    subset is fixed (identical subsets then share one fit); ``linear=True`` when the fitted head
    offers ``linear_params() -> (W, b)`` in the space of ``transform(X)`` (identity when absent), so
    test-time methods that update a linear head (SHOT/IM) work on it.
    """


@hookspec
def probe_heads(register: "HeadRegistrar") -> None:
    """Older name of :func:`register_heads` (same registrar); kept for existing plugins."""


@hookspec
def register_sources(register: "SourceRegistrar") -> None:
    """Register data source types: ``register(type, source_class, *, description, aliases)``.

    ``source_class`` subclasses :class:`prism_plugin.data.base.Source`; ``type`` is what a task
    writes as ``source.type``. The class's ``OPTIONS`` are the ``source:`` keys it accepts.
    """


@hookspec
def register_adaptation(register: "AdaptationRegistrar") -> None:
    """Register test-time adaptation methods: ``register(name, method, *, role, default, description)``.

    ``method(X, inputs, *, base_proba, y_true, cache) -> Adapted`` (see
    :mod:`prism_plugin.adaptation.tta`) adapts one unlabelled target batch. ``role`` is
    ``"method"`` (gets ``f1_macro_<name>``, ``gain_<name>``, ``ece_<name>``, ``nll_<name>`` columns,
    takes part in the class-prior stress test and the audit tables), ``"analysis"`` or
    ``"diagnostic"``. ``default=True`` methods run on transfer tasks without an ``adaptation:`` key.
    """


@hookspec
def register_tables(register: "TableRegistrar") -> None:
    """Register per-run table kinds: ``register(name, file, required_columns, *, renames, drops, key_columns)``.

    A task's ``reference_table`` names one; summaries read it as ``tables[name]``.
    """


@hookspec
def register_task_keys(register: "TaskKeyRegistrar") -> None:
    """Register task YAML keys owned by a plugin: ``register(key, validator, *, kinds, description)``.

    ``validator(value, ctx) -> value`` checks and normalises the key's value; ``ctx.fail(key,
    message)`` builds the error naming file, line and key. The validated value reaches every run as
    ``run.meta[key]`` and is part of the run fingerprint.
    """


@hookspec
def register_metrics(register: "MetricRegistrar") -> None:
    """Describe per-run metric columns: ``register(column, *, direction, aggregation, display, ...)``.

    ``direction`` is ``"higher"`` or ``"lower"`` (which is better) or ``None``; ``aggregation``
    how runs combine into a cell (``"mean"`` with the seed standard deviation, ``"median"``,
    ``"max"``, ``"min"``, ``"sum"``). Described columns appear in ``summary.json`` cells
    (``summary=True``), the report's metric table (``report=True``), the transfer band table
    (``bands=True``) and ``prism-run compare`` (``compare=True``).
    """


@hookspec
def register_checks(register: "CheckRegistrar") -> None:
    """Register run-quality checks: ``register(name, check, *, description)``.

    ``check(runs, ctx) -> list[Flag]`` (:class:`prism_plugin.quality.Flag`, ``ctx`` a
    :class:`~prism_plugin.quality.QualityContext`) reads a finished runs table; its flags reach the
    console, ``summary.json`` (``flags``, ``qualified``) and the verdict like the built-in ones.
    """


@hookspec
def register_perturbations(register: "PerturbationRegistrar") -> None:
    """Register synthetic image transforms of the ``perturb:`` task key:
    ``register(name, transform, *, params, description)``.

    ``transform(img, rng, **params) -> img`` maps an ``H x W x 3`` uint8 image to one of the same shape,
    drawing randomness only from ``rng`` (the image's own seeded stream); ``params`` maps each
    parameter to a :class:`prism_plugin.data.perturb.Param` (default, bounds), validated with file,
    line and key in task files.
    """


@hookspec
def register_commands(register: "CommandRegistrar") -> None:
    """Register ``prism-run`` subcommands: ``register(name, command, *, help)``.

    ``command`` (a module, an object or a lazy ``"module"`` / ``"module:attr"`` string) has
    ``add_parser(subparsers) -> ArgumentParser`` and ``run(args) -> int``.
    """


@hookspec
def task_paths() -> list[Path] | None:
    """Return extra folders to search for task YAML files.

    Later folders do not shadow earlier ones: the first file found for a task
    name wins, and ``prism-run ls tasks`` shows where each task came from.
    """


@hookspec
def run_metrics(run: "RunContext") -> Mapping[str, Any] | None:
    """Compute named per-run values; each key becomes a column of ``runs.csv``.

    ``run`` carries the labels, probabilities, logits (binary logit convention
    of PROTOCOL §2.4), predictions, the calibration splits from which a
    temperature can be fitted (``run.temperature(name)`` caches the fit), the
    grid coordinates and the task metadata. Values must be scalars
    (float, int, bool or str). Two plugins returning the same key is an error.
    """


@hookspec
def summarize(tables: "RunTables", options: Mapping[str, Any]) -> "SummaryOutput | None":
    """Derive named tables from per-run tables.

    ``tables`` holds the per-run tables in the reference (results_v2) schema:
    ``indomain``, ``transfer``, ``camelyon17_indomain``, ``camelyon17_transfer``
    and ``indomain_propval``; any may be ``None`` when not measured. Return a
    :class:`~prism_plugin.tables.SummaryOutput` whose ``tables`` map a file stem
    (e.g. ``"cri_variants_100"``) to a DataFrame, whose ``headline`` holds
    scalar numbers for ``findings.json``, and whose ``notes`` say what could not
    be computed and why. ``options`` carries user choices such as
    ``ood_stability`` overrides.
    """


@hookspec
def report_sections(view: "ReportView") -> "list[ReportSection] | None":
    """Return report sections (title, Markdown body, optional PNG figures).

    ``view`` exposes the results directory: the per-run table, summary tables
    and ``summary.json``. Sections are ordered by their ``order`` attribute.
    """


__all__ = ["hookimpl", "hookspec", "AdapterRegister", "PROJECT"]
