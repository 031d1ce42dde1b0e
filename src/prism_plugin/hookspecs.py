"""Every hook of prism-plugin, in one place.

A plugin is any module or object whose functions are decorated with
:data:`prism_plugin.hookimpl` and whose names match a stub below. Built-in
metrics, summaries, adapters and tasks are registered through these same hooks,
from the ``prism_plugin`` entry-point group, exactly as a third party's would be::

    # my_package/plugin.py
    from prism_plugin import hookimpl

    @hookimpl
    def run_metrics(run):
        return {"my_score": float((run.pred == run.y_test).mean())}

    # pyproject.toml of my_package
    [project.entry-points.prism_plugin]
    my_plugin = "my_package.plugin"

Hooks return ``None`` when they have nothing to add.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pluggy

PROJECT = "prism_plugin"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from prism_plugin.report.sections import ReportSection, ReportView
    from prism_plugin.run import RunContext
    from prism_plugin.tables import RunTables, SummaryOutput

#: ``register(name, factory, *, description="", aliases=())`` as passed to
#: :func:`register_adapters`. ``factory(**model_args)`` returns an
#: :class:`prism_plugin.embed.adapter.Adapter`.
AdapterRegister = Callable[..., None]


@hookspec
def register_adapters(register: AdapterRegister) -> None:
    """Register model adapters by calling ``register(name, factory, ...)``.

    ``factory`` is called with the user's ``--model-args`` as keyword arguments
    and must return an :class:`~prism_plugin.embed.adapter.Adapter`. ``name``
    is what users pass to ``--model``. Adapters may also be published directly
    through the ``prism_plugin.adapters`` entry-point group (the entry point
    names the factory).
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


@hookspec
def probe_heads(register: Callable[..., None]) -> None:
    """Register probe heads by calling ``register(kind, factory)``.

    ``factory(seed=..., **settings)`` returns an object with ``fit(X, y)`` and
    ``evaluate(X) -> ProbeOutput(decision, proba)`` (see
    :mod:`prism_plugin.protocol.probe`): ``decision`` is ``(N,)`` for a binary
    head (turned into ``[-d, d]`` logits by the grid) or ``(N, K)`` logits, and
    ``proba`` the head's own probabilities. The PRISM logistic probe (kind
    ``logistic``) is built in.
    """


__all__ = ["hookimpl", "hookspec", "AdapterRegister", "PROJECT"]
