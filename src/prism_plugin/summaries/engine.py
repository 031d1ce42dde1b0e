"""Run the ``summarize`` hooks and write what they return.

Data flows one way: per-run tables (:class:`~prism_plugin.tables.RunTables`)
-> every registered ``summarize`` hook implementation -> one merged
:class:`~prism_plugin.tables.SummaryOutput` -> ``<stem>.csv`` files plus
``findings.json`` in an output folder. Used by ``prism-run reference``,
``prism-run compare`` and ``prism-run findings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.storage import atomic_write_text, dumps, write_csv
from prism_plugin.contracts import RunTables, SummaryOutput

FINDINGS_FILE = "findings.json"


def summary_plugins(host, *, leaderboard: bool = False) -> list[str]:
    """Names of the registered plugins that implement ``summarize``, in call order; ``leaderboard``:
    only those whose module declares ``LEADERBOARD = True`` (their tables are what the leaderboard
    page reads; the others, e.g. decoupling's bootstrap, are ``prism-run findings``' job)."""
    names = host.implementations("summarize")
    return [n for n in names if getattr(host.pm.get_plugin(n), "LEADERBOARD", False)] if leaderboard else names


def plugin_name_of(host, module: Any) -> str | None:
    """The registered name of a plugin object (e.g. a module), or None if not registered."""
    for name, plugin in host.pm.list_name_plugin():
        if plugin is module:
            return name
    return None


def run_summaries(
    tables: RunTables,
    options: Mapping[str, Any] | None,
    host,
    *,
    only: Iterable[str] | None = None,
) -> SummaryOutput:
    """Call every ``summarize`` hook implementation (or those named in ``only``) and merge.

    A plugin that returns ``None`` adds nothing. Two plugins producing the same table or headline key is an error
    naming both. Failures follow the host's one policy (:meth:`prism_plugin.plugins.PluginHost.call`): a
    :class:`PrismError` passes on; any other exception becomes a ``PluginFailure`` naming the plugin.
    """
    options = dict(options or {})
    wanted = None if only is None else set(only)
    if wanted is not None:
        known = set(summary_plugins(host))
        missing = sorted(wanted - known)
        if missing:
            raise PrismError(
                f"summary plugin(s) {', '.join(missing)} not registered or disabled "
                f"(registered: {', '.join(sorted(known)) or 'none'}); see `prism-run ls plugins`"
            )
    out = SummaryOutput()
    origins: dict[str, str] = {}
    for result in host.call("summarize", only=wanted, tables=tables, options=options):  # registration order
        value = result.value
        if value is None:
            continue
        if not isinstance(value, SummaryOutput):
            raise PrismError(
                f"summary plugin {result.plugin!r} returned a {type(value).__name__}; "
                "summarize must return a SummaryOutput or None"
            )
        clash = [n for n in value.tables if n in out.tables] + [k for k in value.headline if k in out.headline]
        if clash:
            first = clash[0]
            raise PrismError(
                f"summary {first!r} produced by both {origins.get(first, '?')!r} and {result.plugin!r}; "
                "disable one of them"
            )
        for name in list(value.tables) + list(value.headline):
            origins[name] = result.plugin
        out.merge(value, result.plugin)
    return out


def _has_named_index(df: pd.DataFrame) -> bool:
    return any(name is not None for name in df.index.names)


def write_summaries(output_dir: str | Path, output: SummaryOutput) -> list[Path]:
    """Write ``<stem>.csv`` per table and ``findings.json``, each atomically.

    A table is written with its index only when the index has a name (e.g. ``model``), so ``cri_variants_100.csv``
    starts with a ``model`` column and a RangeIndex table has no unnamed first column. ``findings.json`` holds
    ``headline``, ``notes`` and the list of table files. Returns the paths written.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for stem, table in output.tables.items():
        if not stem or "/" in stem or "\\" in stem or stem.startswith("."):
            raise PrismError(f"summary table name {stem!r} is not a plain file stem")
        path = output_dir / f"{stem}.csv"
        write_csv(path, table, index=_has_named_index(table))
        written.append(path)
    findings = {
        "headline": dict(output.headline),
        "notes": list(output.notes),
        "tables": [f"{stem}.csv" for stem in output.tables],
    }
    path = output_dir / FINDINGS_FILE
    atomic_write_text(path, dumps(findings))
    written.append(path)
    return written


__all__ = ["FINDINGS_FILE", "plugin_name_of", "run_summaries", "summary_plugins", "write_summaries"]
