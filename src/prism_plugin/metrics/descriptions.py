"""Reading the metric descriptions: which way is better (``direction``), how runs combine into a cell
(``aggregation``) and where a column is used (``summary.json`` cells, the report's metric table, the
transfer band table, ``prism-run compare``).

Every metric plugin describes the columns it computes in its own ``register_metrics`` hook, the built-in ones
(:mod:`.discrimination`, :mod:`.calibration`, ...) as a third party does.

**Order**, declared here: runs.csv's metric columns are the PRISM reference columns
(:data:`prism_plugin.results.LEADING_COLUMNS`), then those of the plugins named in
:data:`METRIC_PLUGIN_ORDER`, in that order, then any other plugin's in load order. Every list of
metric descriptions (summary.json cells, report tables, ``ls metrics``) is :data:`PRISM_METRIC_ORDER`,
then the rest by :data:`METRIC_PLUGIN_ORDER` the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, TypeVar

from prism_plugin.registrars import MetricInfo

#: The built-in metric plugins in the order of their runs.csv columns (and their descriptions); a
#: plugin not named here comes after them, in load order.
METRIC_PLUGIN_ORDER = ("adaptation", "discrimination", "calibration", "collapse", "temperature_transfer", "classwise",
                       "bootstrap")

#: The PRISM reference's summary metrics, in the order of its cells.
PRISM_METRIC_ORDER = ("auroc", "f1_macro", "brier", "nll", "ece_fixed", "ece_adaptive", "temperature", "ece_scaled_fixed",
                      "ece_scaled_adaptive", "degeneracy_share", "temperature_src")

T = TypeVar("T")


def in_plugin_order(items: Iterable[T]) -> list[T]:
    """``items`` (hook results, registry entries: a ``.plugin``) by :data:`METRIC_PLUGIN_ORDER` (stable)."""
    rank = {name: i for i, name in enumerate(METRIC_PLUGIN_ORDER)}
    return sorted(items, key=lambda item: rank.get(item.plugin, len(rank)))


def in_declared_order(entries: Iterable[T]) -> list[T]:
    """Metric registry entries: :data:`PRISM_METRIC_ORDER`, then by :func:`in_plugin_order`."""
    lead = {c: i for i, c in enumerate(PRISM_METRIC_ORDER)}
    return sorted(in_plugin_order(entries), key=lambda e: lead.get(e.name, len(lead)))


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
    """Every metric description of ``host`` (default: the shared host), in the declared order (module doc).

    ``use`` keeps those used there: ``"summary"``, ``"report"``, ``"bands"`` or ``"compare"``.
    """
    if use is not None and use not in USES:
        raise ValueError(f"use must be one of {', '.join(USES)}, got {use!r}")
    from prism_plugin.plugins import host_or_shared

    host = host_or_shared(host)
    reg = host.metrics
    out = []
    for entry in in_declared_order(reg.entries()):
        info = reg.get(entry.name)
        if use is None or getattr(info, use):
            out.append(DescribedMetric(info, entry.origin))
    return out


def metric_infos(host=None, use: str | None = None) -> list[MetricInfo]:
    """The :class:`MetricInfo` of :func:`described_metrics` (e.g. the summary.json cell metrics)."""
    return [d.info for d in described_metrics(host, use)]
