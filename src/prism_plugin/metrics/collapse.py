"""Built-in metric plugin: collapse detection.

PRISM's columns, exactly as PROTOCOL §3 defines them (unchanged):

* ``degeneracy_share``: the share of test predictions in the most predicted class;
* ``degenerate``: ``degeneracy_share > 0.99`` (strict), whatever the test prevalence.

A fixed 0.99 share misjudges skewed test splits: on a split that is 97.7 % one class, predicting 99 % of it is
nearly right; a 0.988 share that never recalls the minority class is a collapse. The prevalence-aware columns
(:func:`collapse_stats`):

* ``n_test_classes``: classes present in the test split; ``min_test_class_count``: samples of its rarest present
  class;
* ``min_class_recall``: the smallest per-class recall over the classes present in the test split;
* ``top_class_true_share``: the true test share of the class the probe predicts most (compare with
  ``degeneracy_share``);
* ``other_class_recall_max``: the best recall among the present classes other than that one;
* ``collapsed``: the prevalence-aware collapse (:data:`COLLAPSE_RULE`): the test split has at least two classes,
  the probe predicts its top class more often than that class occurs (``degeneracy_share > top_class_true_share``)
  and recalls no other class above :data:`RECALL_FLOOR` (``other_class_recall_max <= 0.05``). A one-class test
  split is never "collapsed" (there is nothing to collapse onto): :mod:`prism_plugin.quality` flags it instead.
"""

from __future__ import annotations

import numpy as np

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.core import degeneracy_share

DEGENERACY_THRESHOLD = 0.99
#: The best recall of any other class up to which a probe that over-predicts one class has collapsed.
RECALL_FLOOR = 0.05
COLLAPSE_RULE = (f"prevalence-aware collapse: the probe predicts one class more often than it occurs and recalls "
                 f"no other test class above {RECALL_FLOOR:g}")
#: The prevalence-aware columns, in runs.csv order.
COLLAPSE_COLUMNS = ("n_test_classes", "min_test_class_count", "min_class_recall", "top_class_true_share",
                    "other_class_recall_max", "collapsed")

NAN = float("nan")


def collapse_stats(y_test, pred, n_classes: int) -> dict[str, float | int | bool]:
    """The prevalence-aware collapse columns (module docstring) of test labels and predictions."""
    y = np.asarray(y_test, dtype=np.int64).ravel()
    p = np.asarray(pred, dtype=np.int64).ravel()
    if y.size == 0 or p.size != y.size:
        return {"n_test_classes": int(np.unique(y).size), "min_test_class_count": 0, "min_class_recall": NAN,
                "top_class_true_share": NAN, "other_class_recall_max": NAN, "collapsed": False}
    k = int(max(n_classes, y.max() + 1, p.max() + 1))
    true_counts = np.bincount(y, minlength=k)
    pred_counts = np.bincount(p, minlength=k)
    hits = np.bincount(y[p == y], minlength=k)
    present = np.flatnonzero(true_counts)
    recall = hits[present] / true_counts[present]
    top = int(pred_counts.argmax())
    share = pred_counts[top] / y.size
    true_share = true_counts[top] / y.size
    others = present[present != top]
    other_max = float((hits[others] / true_counts[others]).max()) if others.size else NAN
    collapsed = bool(present.size >= 2 and share > true_share and other_max <= RECALL_FLOOR)
    return {"n_test_classes": int(present.size), "min_test_class_count": int(true_counts[present].min()),
            "min_class_recall": float(recall.min()), "top_class_true_share": float(true_share),
            "other_class_recall_max": other_max, "collapsed": collapsed}


@hookimpl
def register_metrics(register) -> None:
    register("degeneracy_share", display="largest predicted-class share",
             description="PRISM: share of test predictions in the most predicted class (degenerate = > 0.99)")
    # the prevalence-aware columns: not PRISM's, so not in summary.json cells
    for column, direction, display, where, description in (
        ("min_class_recall", "higher", "smallest per-class recall", "r",
         "smallest recall over the classes present in the test split (0 = a class never found)"),
        ("top_class_true_share", None, "true share of the most predicted class", "",
         "true test share of the class the probe predicts most (compare degeneracy_share)"),
        ("other_class_recall_max", None, "best recall outside the most predicted class", "",
         "best recall among the test classes other than the most predicted one"),
        ("collapsed", None, "prevalence-aware collapse (share of seeds)", "",
         "prevalence-aware collapse: predicts one class more often than it occurs and recalls no other test class "
         "above 0.05 (never on a one-class test split)"),
        ("n_test_classes", None, "classes in the test split", "", "number of classes present in the test split"),
        ("min_test_class_count", None, "samples of the rarest test class", "", "test samples of the rarest class present"),
    ):
        register(column, direction=direction, display=display, description=description, summary=False,
                 report="r" in where)


@hookimpl
def run_metrics(run):
    share = degeneracy_share(run.pred_test, run.n_classes)
    return {"degeneracy_share": share, "degenerate": bool(share > DEGENERACY_THRESHOLD),
            **collapse_stats(run.y_test, run.pred_test, run.n_classes)}


__all__ = ["COLLAPSE_COLUMNS", "COLLAPSE_RULE", "DEGENERACY_THRESHOLD", "RECALL_FLOOR", "collapse_stats",
           "register_metrics", "run_metrics"]
