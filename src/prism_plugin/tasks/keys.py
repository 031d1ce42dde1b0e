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


def _allow_split_overlap(value: Any, ctx: TaskKeyContext):
    from prism_plugin.errors import PrismError
    from prism_plugin.protocol.inputs import ALLOW_KEY, check_overlap_allowance

    try:
        pairs = check_overlap_allowance(value, "x")
    except PrismError as exc:
        raise ctx.fail(ALLOW_KEY, str(exc).split(": ", 1)[-1]) from None
    splits = ctx.data.get("splits")
    if ctx.kind != "transfer" and isinstance(splits, dict):
        missing = sorted({s for pair in pairs for s in pair if s not in splits})
        if missing:
            raise ctx.fail(ALLOW_KEY, f"names split(s) {missing} that the task does not have")
    return [list(p) for p in pairs]


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
    register("allow_split_overlap", _allow_split_overlap, default=[],
             description="split pairs allowed to be the same data or to share rows, e.g. [val, test] (the temperature "
             "is then fitted on the evaluation split); without it identical val/test or train/test is an error. "
             "Recorded in summary.json as a data check of level 'allowed'")
