"""A third-party metric plugin: plain accuracy and its gap to macro-F1."""

from prism_plugin import hookimpl


@hookimpl
def run_metrics(run):
    acc = float((run.pred_test == run.y_test).mean())
    return {"thirdparty_accuracy": acc}
