"""The acquisition-shift audit as ordinary summary and report plugins (plugin name ``audit``).

* ``summarize(tables, options)`` turns the per-run rows that carry the adaptation plugin's columns
  (``id_f1_macro``, ``gain_<m>``, ``calx_*``, ``sel_*``, ``prior__*``) into the audit's tables (:mod:`.tables`)
  under the stems ``audit_<table>``. It runs only when the caller asks with ``options["audit"]`` (``True`` or a
  mapping of :data:`USER_KEYS`; ``prism-run audit`` does), so ordinary run reports are unchanged. The per-example
  tables read the ``artifacts/`` of ``options["results_dirs"]``; without them they are skipped with a note.
* ``report_sections(view)`` shows those tables with their figures (:mod:`.sections`); nothing when the view has no
  audit tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from prism_plugin.errors import PrismError
from prism_plugin.hookspecs import hookimpl

#: the prefix of the audit's notes among the report's summary notes
NOTE_PREFIX = "audit: "
#: the settings a user may give under ``options["audit"]``
USER_KEYS = ("fraction", "bootstrap", "seed", "compare", "held_out_only")
#: settings a caller passes along with them (``host``: the plugin host whose adaptation registry
#: gives the methods' order and traits)
INTERNAL_KEYS = ("host",)


def audit_options(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The audit's settings from the summary options, or ``None`` when the audit was not asked for."""
    raw = options.get("audit") if options else None
    if not raw:
        return None
    if raw is True:
        return {}
    if not isinstance(raw, Mapping):
        raise PrismError(f"summary option audit: give true or a mapping with {', '.join(USER_KEYS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(USER_KEYS) - set(INTERNAL_KEYS))
    if unknown:
        raise PrismError(f"summary option audit: unknown key(s) {', '.join(map(str, unknown))} "
                         f"(allowed: {', '.join(USER_KEYS)})")
    return dict(raw)


@hookimpl
def summarize(tables, options):
    from prism_plugin.adaptation import stats
    from prism_plugin.studies.hematology import inputs
    from prism_plugin.studies.hematology.sections import stem
    from prism_plugin.studies.hematology.tables import TABLES, build
    from prism_plugin.tables import SummaryOutput

    opts = audit_options(options)
    if opts is None:
        return None
    dirs = [Path(d) for d in (options.get("results_dirs") or ())]
    inp = inputs.prepare(inputs.audited_rows(tables), opts.get("fraction"), dirs, host=opts.get("host"))
    if not dirs:
        inp.notes.append("the results directories were not given (options['results_dirs']): the per-example "
                         "tables (consensus, agl_acc, paired bootstrap) are skipped")
    compare = [tuple(pair) for pair in (opts.get("compare") or ())]
    built, headline = build(inp, B=int(opts.get("bootstrap") or stats.BOOTSTRAP_B), seed=int(opts.get("seed", 0)),
                            compare=compare, held_out_only=bool(opts.get("held_out_only")))
    notes = list(headline.pop("notes", []))
    written = [name for name in TABLES if not built[name].empty]
    # the headline is audit.json as `prism-run audit` writes it: the tables present and the notes
    headline["tables"] = written
    headline["notes"] = notes
    return SummaryOutput(tables={stem(name): built[name] for name in written}, headline={"audit": headline},
                         notes=[NOTE_PREFIX + n for n in notes])


@hookimpl
def report_sections(view):
    from prism_plugin.studies.hematology.sections import audit_sections

    return audit_sections(view) or None
