"""The PRISM package's API (``prism_bench``) as a drop-in, backed by prism-plugin.

Code written for the PRISM package runs after changing only its import line::

    from prism_plugin.compat import PRISMEvaluator          # was: from prism_bench import PRISMEvaluator
    from prism_plugin.compat import (compute_auroc, compute_ece, compute_brier, compute_cri,
                                     compute_ood_stability, temperature_scale, apply_temperature)

* :class:`PRISMEvaluator` ``(results_dir=None)``: ``evaluate()``, ``compare()``, ``reference_cri()`` with the PRISM
  package README's signatures, defaults and return columns (:mod:`prism_plugin.compat.evaluator`).
* the standalone metric functions (:mod:`prism_plugin.compat.metrics`).
* the ``prism evaluate / compare / reference`` command line: ``python -m prism_plugin.compat ...`` with the same
  flags (``prism-run evaluate`` is the same ``evaluate``).

prism-plugin does not bundle the reference results: ``results_dir=None`` uses the copy that ``prism-run reference
pull`` installs, else raises a one-line error saying how to get them. Numbers follow the reference's floating-point
path (float32 ``predict_proba`` output, metrics on it), so they equal a reference-style computation exactly; binary
temperatures are on the probe's own scale (T = 1 = unchanged; results_v2's column is 2x that).
"""

#: public name -> defining module (imported on first use, so ``prism-run evaluate --help`` stays light)
_EXPORTS = {
    **{name: "prism_plugin.compat.evaluator" for name in (
        "PRISMEvaluator", "COMPARE_COLUMNS", "DATASETS", "EVALUATE_COLUMNS", "LABEL_FRACTIONS", "REFERENCE_MODELS",
        "SEEDS")},
    **{name: "prism_plugin.compat.metrics" for name in (
        "compute_auroc", "compute_ece", "compute_brier", "compute_cri", "compute_ood_stability", "temperature_scale",
        "apply_temperature", "DEFAULT_N_BINS", "QualifiedResultWarning", "TemperatureAtBoundWarning")},
    "CompatError": "prism_plugin.compat.errors",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'prism_plugin.compat' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
