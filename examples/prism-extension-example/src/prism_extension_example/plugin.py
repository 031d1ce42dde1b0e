"""The plugin: every ``@hookimpl`` of prism-extension-example, in one module.

Published in ``pyproject.toml`` as::

    [project.entry-points.prism_plugin]
    prism_extension_example = "prism_extension_example.plugin"

prism-plugin imports this module at start, checks that every function marked ``@hookimpl`` names a
hook (a misspelling such as ``def run_metric(run)`` is an error naming this file), and fills each
registry by calling the matching ``register_*`` hook with a typed registrar. Heavy objects are
given as lazy ``"module:attr"`` strings, imported on first use (``prism-run ls`` stays fast).
"""

from __future__ import annotations

from pathlib import Path

from prism_plugin import hookimpl

from prism_extension_example import head
from prism_extension_example import metrics as m
from prism_extension_example import tables as t

TASKS = Path(__file__).resolve().parent / "tasks"
#: the task key the TTA method median_shift reads from its ``meta`` argument
QUANTILE_KEY = "example_median_quantile"


def check_quantile(value, ctx) -> float:
    """The task-key validator of ``example_median_quantile``: a number in (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) < 1:
        raise ctx.fail(QUANTILE_KEY, f"must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


# -- catalogues ----------------------------------------------------------------------------

@hookimpl
def register_heads(register):
    # a probe head (probe: {kind: example_centroid, alpha: 0.5}) with its declared settings and traits
    register("example_centroid", "prism_extension_example.head:CentroidHead", settings=head.SETTINGS,
             seed_invariant=True, linear=True,
             description="nearest class mean as a linear softmax head (example plugin)")


@hookimpl
def register_adaptation(register):
    # a test-time adaptation method: method(X, inputs, *, base_proba, y_true, cache, meta) -> Adapted
    register("median_shift", "prism_extension_example.tta:median_shift", default=True,
             description="re-centre the target batch on its per-feature median (source scale kept)")


@hookimpl
def register_sources(register):
    # a data source type: source.type: noise_tiles in a task YAML
    register("noise_tiles", "prism_extension_example.source:NoiseTilesSource",
             description="procedural RGB noise tiles, one colour per class (offline example)")
    # a feature source: vectors read from a CSV, no images (run with --model precomputed)
    register("csv_vectors", "prism_extension_example.vectors:CsvVectorsSource", kind="features",
             description="embedding vectors from one CSV: id,split,label,v0..vD (example)")


@hookimpl
def register_tables(register):
    # a per-run table kind (a task's reference_table: example_cohort) with what the report needs
    register(**t.COHORT)


@hookimpl
def register_task_keys(register):
    # a task YAML key with its validator; the value reaches run.meta["example_threshold"]
    register(m.THRESHOLD_KEY, m.check_threshold, default=m.DEFAULT_THRESHOLD,
             description="confidence threshold of example_confident_error, a number in (0, 1) (default 0.5)")
    # read by the TTA method median_shift from its meta argument
    register(QUANTILE_KEY, check_quantile, default=0.5,
             description="per-feature quantile median_shift re-centres on, in (0, 1) (default 0.5: the median)")


@hookimpl
def register_metrics(register):
    # what the run_metrics columns below mean: direction, aggregation, where they are shown
    register("example_brier_top", direction="lower", aggregation="mean", display="top-label Brier (example)",
             description="mean squared gap between top-label confidence and correctness", compare=True)
    register("example_confident_error", direction="lower", aggregation="mean", display="confident errors (example)",
             description="share of test examples predicted with confidence >= example_threshold and wrong")


@hookimpl
def register_commands(register):
    # a prism-run subcommand (a module with add_parser and run), imported only when used
    register("example-hello", "prism_extension_example.command",
             help="say hello to the runs of a results directory (example plugin)")


# -- per-run columns, tasks, report --------------------------------------------------------

@hookimpl
def run_metrics(run):
    threshold = float(run.meta.get(m.THRESHOLD_KEY, m.DEFAULT_THRESHOLD))
    return {"example_brier_top": m.brier_top(run.y_test, run.proba_test),
            "example_confident_error": m.confident_error(run.y_test, run.proba_test, threshold)}


@hookimpl
def task_paths():
    return [TASKS]


@hookimpl
def report_sections(view):
    from prism_extension_example.report import confident_error_section

    section = confident_error_section(view)
    return [section] if section is not None else None
