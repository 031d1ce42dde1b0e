"""Built-in metric plugin: discrimination (AUROC, macro-F1, binary F1)."""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.core import auroc, f1_binary, f1_macro


@hookimpl
def register_metrics(register) -> None:
    register("auroc", direction="higher", display="AUROC", bands=True, compare=True)
    register("f1_macro", direction="higher", display="macro-F1", bands=True)
    register("f1_binary", direction="higher", display="F1 (positive class)", summary=False, report=False)


@hookimpl
def run_metrics(run):
    return {
        "auroc": auroc(run.y_test, run.proba_test),
        "f1_macro": f1_macro(run.y_test, run.pred_test),
        "f1_binary": f1_binary(run.y_test, run.pred_test, run.n_classes),
    }
