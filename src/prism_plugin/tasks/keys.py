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


#: The shift kinds a transfer task may declare (``shift:``); the report compares a transfer with the
#: PRISM label-definition bands only when it says ``label_definition``.
SHIFT_KINDS = ("covariate", "label_definition", "prior")


def _shift(value: Any, ctx: TaskKeyContext):
    from prism_plugin.errors import suggest
    from prism_plugin.paths import short_repr

    text = value.strip().replace("-", "_").lower() if isinstance(value, str) else None
    if text not in SHIFT_KINDS:
        hint = suggest(text, SHIFT_KINDS) if text else ""
        raise ctx.fail("shift", f"must be one of {', '.join(SHIFT_KINDS)}, got {short_repr(value)}{hint} "
                                "(covariate: same labels, other site/scanner/stain; label_definition: the classes "
                                "are defined differently on the target; prior: class proportions differ)")
    return text


def _perturb(value: Any, ctx: TaskKeyContext):
    from prism_plugin.data.perturb import check_task_perturb

    return check_task_perturb(value, ctx)


def _dataset_aliases(value: Any, ctx: TaskKeyContext):
    """Other names of the task's dataset (e.g. a cohort name an encoder's paper uses), matched
    case-insensitively against encoders' declared pretraining data by ``prism-run audit``."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ctx.fail("dataset_aliases", f"must be a list of dataset names, e.g. [LabAnonymous], got {value!r}")
    return [v.strip() for v in value]


def _split_seeds(value: Any, ctx: TaskKeyContext):
    from prism_plugin.tasks.grid_keys import check_split_seeds

    return check_split_seeds(value, ctx)


def _probes(value: Any, ctx: TaskKeyContext):
    from prism_plugin.tasks.grid_keys import check_probes

    return check_probes(value, ctx)


def _probability_dtype(value: Any, ctx: TaskKeyContext):
    from prism_plugin.errors import PrismError
    from prism_plugin.protocol.float32_path import check_probability_dtype

    try:
        dtype = check_probability_dtype(value, "x")
    except PrismError as exc:
        raise ctx.fail("probability_dtype", str(exc).split(": ", 1)[-1]) from None
    return None if dtype == "float64" else dtype  # the default: same fingerprint as leaving the key out


@hookimpl
def register_task_keys(register) -> None:
    register("adaptation", _adaptation, description="test-time adaptation methods, analyses and diagnostics to run "
             "(see `prism-run ls adaptation`); [] switches the adaptation plugin off")
    register("perturb", _perturb, kinds=("indomain",), description="SYNTHETIC perturbation domain: "
             "{seed, transforms: [{kind: hed_jitter | hsv_jitter | blur | jpeg | scale, ...}]} applied to every image "
             "the task's source yields (seeded per image; part of the images fingerprint)")
    register("priors", _priors, description="class-prior stress test: {names, custom, batch_sizes, draws, seed}")
    register("sweep", _sweep, default={}, description="one task variant per value of a probe setting, "
             "e.g. {probe.C: [0.01, 0.1, 1]}")
    register("probability_dtype", _probability_dtype, description="float32: Brier and every ECE column on the "
             "reference's floating-point path (float32 predict_proba output), equal to it bit for bit; float64 (absent) "
             "does the metric arithmetic in float64 (differences of about 1e-8)")
    register("shift", _shift, kinds=("transfer",), description="what differs between source and target: covariate "
             "(site, scanner, stain), label_definition (the classes are defined differently) or prior (class "
             "proportions); the verdict compares only label_definition transfers with the PRISM bands", results=False)
    register("dataset_aliases", _dataset_aliases, kinds=("indomain",), description="other names of this task's "
             "dataset (e.g. [LabAnonymous]): the exposure audit matches them, like `dataset`, case-insensitively "
             "against each encoder's declared pretraining data", results=False)
    register("allow_split_overlap", _allow_split_overlap, default=[],
             description="split pairs allowed to be the same data or to share rows, e.g. [val, test] (the temperature "
             "is then fitted on the evaluation split); without it identical val/test or train/test is an error. "
             "Recorded in summary.json as a data check of level 'allowed'")
    register("split_seeds", _split_seeds, default=(), description="grid dimension: the split: procedure runs with each "
             "seed in turn (a transfer task: its source task's; the target keeps its own split), e.g. [0, 1, 2, 3, 4]; "
             "runs.csv gains a split_seed column")
    register("probes", _probes, default=(), description="grid dimension: each probe in turn, e.g. [logistic_std, "
             "knn1] or [{kind: logistic_std, C: 1.0}, knn1]; --probe KIND runs that one probe instead")
