"""Built-in metric plugin: collapse detection (degeneracy share > 0.99)."""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.core import degeneracy_share

DEGENERACY_THRESHOLD = 0.99


@hookimpl
def run_metrics(run):
    share = degeneracy_share(run.pred_test, run.n_classes)
    return {"degeneracy_share": share, "degenerate": bool(share > DEGENERACY_THRESHOLD)}
