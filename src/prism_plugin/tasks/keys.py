"""Built-in plugin: the task YAML keys owned by plugins, registered through ``register_task_keys``.

The core schema (:mod:`prism_plugin.tasks.schema`) knows only the protocol's own keys; every other
top-level key of a task file is a registered task key with its validator. A third party adds one
the same way (its value reaches every run as ``run.meta[key]``).
"""

from __future__ import annotations

from typing import Any

from prism_plugin.hookspecs import hookimpl
from prism_plugin.registrars import TaskKeyContext


def _adaptation(value: Any, ctx: TaskKeyContext):
    from prism_plugin.adaptation.config import check_adaptation

    return check_adaptation(value, ctx.fail, host=ctx.host)


def _priors(value: Any, ctx: TaskKeyContext):
    if value is None:
        return None
    from prism_plugin.adaptation.config import check_priors

    return check_priors(value, ctx.fail, ctx.data.get("class_names"), ctx.n_classes)


def _sweep(value: Any, ctx: TaskKeyContext):
    from prism_plugin.tasks.sweep import parse_sweep

    return parse_sweep(dict(ctx.data), ctx.checker, lambda variant: ctx.settings(variant)["probe"])


@hookimpl
def register_task_keys(register) -> None:
    register("adaptation", _adaptation, description="test-time adaptation methods, analyses and diagnostics to run "
             "(see `prism-run ls adaptation`); [] switches the adaptation plugin off")
    register("priors", _priors, description="class-prior stress test: {names, custom, batch_sizes, draws, seed}")
    register("sweep", _sweep, default={}, description="one task variant per value of a probe setting, "
             "e.g. {probe.C: [0.01, 0.1, 1]}")
