"""Built-in plugin: what the built-in per-run metric columns mean (``register_metrics``).

A description says which way is better (``direction``), how runs combine into a cell
(``aggregation``) and where the column is used: ``summary.json`` cells, the report's metric table,
the transfer band table, ``prism-run compare``. A third party describes its own columns the same
way, and they then appear in all of those places.
"""

from __future__ import annotations

from dataclasses import dataclass

from prism_plugin.hookspecs import hookimpl
from prism_plugin.registrars import MetricInfo

#: (column, direction, display, where) in summary.json order; where: s=summary, r=report, b=bands, c=compare
BUILTIN_METRICS: tuple[tuple[str, str | None, str, str], ...] = (
    ("auroc", "higher", "AUROC", "srbc"),
    ("f1_macro", "higher", "macro-F1", "srb"),
    ("brier", "lower", "Brier", "sr"),
    ("nll", "lower", "NLL", "sr"),
    ("ece_fixed", "lower", "ECE (fixed bins)", "srbc"),
    ("ece_adaptive", "lower", "ECE (adaptive bins)", "sr"),
    ("temperature", None, "temperature T", "sr"),
    ("ece_scaled_fixed", "lower", "ECE after T (fixed)", "srbc"),
    ("ece_scaled_adaptive", "lower", "ECE after T (adaptive)", "sr"),
    ("degeneracy_share", None, "largest predicted-class share", "sr"),
    ("temperature_src", None, "source-fitted temperature", "s"),
    ("f1_binary", "higher", "F1 (positive class)", ""),
    ("nll_scaled", "lower", "NLL after T", "r"),
    # prevalence-aware collapse (prism_plugin.metrics.collapse; not PRISM columns, so not in summary.json cells)
    ("min_class_recall", "higher", "smallest per-class recall", "r"),
    ("top_class_true_share", None, "true share of the most predicted class", ""),
    ("other_class_recall_max", None, "best recall outside the most predicted class", ""),
    ("collapsed", None, "prevalence-aware collapse (share of seeds)", ""),
    ("n_test_classes", None, "classes in the test split", ""),
    ("min_test_class_count", None, "samples of the rarest test class", ""),
    # class-wise calibration (prism_plugin.metrics.classwise; multiclass only, NaN for K = 2)
    ("ece_classwise", "lower", "class-wise ECE (mean over classes)", "r"),
    ("ece_classwise_scaled", "lower", "class-wise ECE after T", "r"),
    ("ece_classwise_max", "lower", "worst class's one-vs-rest ECE", ""),
    # test-set bootstrap intervals (prism_plugin.metrics.bootstrap): bounds, not scores (no direction); a
    # cell's interval of the seed mean is summary.json's cells[].ci, not the mean of these bounds
    *((f"{m}_ci_{side}", None, f"{label} CI {'lower' if side == 'low' else 'upper'} bound", "")
      for m, label in (("auroc", "AUROC"), ("f1_macro", "macro-F1"), ("brier", "Brier"), ("nll", "NLL"),
                       ("nll_scaled", "NLL after T"), ("ece_fixed", "ECE (fixed bins)"),
                       ("ece_adaptive", "ECE (adaptive bins)"), ("ece_scaled_fixed", "ECE after T (fixed)"),
                       ("ece_scaled_adaptive", "ECE after T (adaptive)"))
      for side in ("low", "high")),
    ("n_test_min_class", None, "test samples of the rarest class (bootstrap)", ""),
)

#: One-line meanings of the built-in columns whose name does not say it all (``prism-run ls metrics``).
DESCRIPTIONS: dict[str, str] = {
    "degeneracy_share": "PRISM: share of test predictions in the most predicted class (degenerate = > 0.99)",
    "min_class_recall": "smallest recall over the classes present in the test split (0 = a class never found)",
    "top_class_true_share": "true test share of the class the probe predicts most (compare degeneracy_share)",
    "other_class_recall_max": "best recall among the test classes other than the most predicted one",
    "collapsed": "prevalence-aware collapse: predicts one class more often than it occurs and recalls no other "
                 "test class above 0.05 (never on a one-class test split)",
    "n_test_classes": "number of classes present in the test split",
    "min_test_class_count": "test samples of the rarest class present",
    "ece_classwise": "mean over the K classes of the one-vs-rest fixed-bin ECE (p_k vs 1[y = k], ece_bins bins); "
                     "multiclass only: NaN for K = 2, where it repeats ece_fixed",
    "ece_classwise_scaled": "ece_classwise after the fitted temperature (the one of ece_scaled_fixed)",
    "ece_classwise_max": "the largest per-class one-vs-rest ECE (raw); which class: artifacts/classwise/*.json",
    **{f"{m}_ci_{side}": f"{'lower' if side == 'low' else 'upper'} bound of the test-set bootstrap interval of {m} "
                         "(stratified percentile at bootstrap.level, temperature fixed; NaN when the metric is NaN or "
                         "bootstrap.n = 0)"
       for m in ("auroc", "f1_macro", "brier", "nll", "nll_scaled", "ece_fixed", "ece_adaptive", "ece_scaled_fixed",
                 "ece_scaled_adaptive") for side in ("low", "high")},
    "n_test_min_class": "smallest class count of the test labels: the sample a bootstrap interval rests on",
}


#: The adaptation plugin's columns described here (listed by ``prism-run ls metrics``; used by no table):
#: (column, direction, display, description). ``brier_<m>`` exists for every adaptation method m.
ADAPTATION_METRICS: tuple[tuple[str, str | None, str, str], ...] = (
    ("first_moment_shift", None, "first-moment shift (source SDs)",
     "adaptation plugin: RMS over features of (target mean - source-train mean) / source-train SD; the audit's "
     "mechanism table puts it beside the target drop"),
    *((f"brier_{m}", "lower", f"Brier after {m}",
       f"adaptation plugin: multiclass Brier on the target after the adaptation method {m}")
      for m in ("tgtstd", "cbr", "cbr_mean", "bbse", "cbr_bbse", "shot_im", "oracle_cb")),
)


@hookimpl
def register_metrics(register) -> None:
    for column, direction, display, where in BUILTIN_METRICS:
        register(column, direction=direction, display=display, description=DESCRIPTIONS.get(column, ""),
                 summary="s" in where, report="r" in where, bands="b" in where, compare="c" in where)
    for column, direction, display, description in ADAPTATION_METRICS:
        register(column, direction=direction, display=display, description=description,
                 summary=False, report=False, bands=False, compare=False)


# --------------------------------------------------------------------------- reading the descriptions
@dataclass(frozen=True)
class DescribedMetric:
    """A metric description with the plugin that registered it (``origin``)."""

    info: MetricInfo
    origin: str

    @property
    def builtin(self) -> bool:
        from prism_plugin.plugins import BUILTIN_ORIGIN

        return self.origin == BUILTIN_ORIGIN

    @property
    def column(self) -> str:
        return self.info.column


#: the usage flags of a description: summary.json cells, report table, band table, compare
USES = ("summary", "report", "bands", "compare")


def described_metrics(host=None, use: str | None = None) -> list[DescribedMetric]:
    """Every metric description of ``host`` (default: the shared host), in registration order.

    ``use`` keeps those used there: ``"summary"``, ``"report"``, ``"bands"`` or ``"compare"``.
    """
    if use is not None and use not in USES:
        raise ValueError(f"use must be one of {', '.join(USES)}, got {use!r}")
    from prism_plugin.plugins import host_or_shared

    host = host_or_shared(host)
    reg = host.metrics
    out = []
    for entry in reg.entries():
        info = reg.get(entry.name)
        if use is None or getattr(info, use):
            out.append(DescribedMetric(info, entry.origin))
    return out


def metric_infos(host=None, use: str | None = None) -> list[MetricInfo]:
    """The :class:`MetricInfo` of :func:`described_metrics` (e.g. the summary.json cell metrics)."""
    return [d.info for d in described_metrics(host, use)]
