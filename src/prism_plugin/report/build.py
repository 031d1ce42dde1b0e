"""Build the report: ``report.html`` (self-contained, figures embedded as base64 PNG) and its Markdown twin
``report.md`` (figures in ``figures/``).

Flow (one way): per-run tables -> every ``summarize`` plugin (written to the tables folder as CSV +
``findings.json``) -> every ``report_sections`` plugin -> the two renderings. :func:`write_report` is called at the
end of every ``prism-run`` job (unless ``--no-report``), by ``prism-run report DIR`` and by ``prism-run findings``
(which passes the summaries it has already computed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from prism_plugin.errors import PrismError
from prism_plugin.report.render import FIGURES, HTML_NAME, MD_NAME, render_html, render_markdown
from prism_plugin.report.sections import ReportSection, ReportView, read_view
from prism_plugin.storage import atomic_write_bytes, atomic_write_text, write_csv


# --------------------------------------------------------------------------- inputs
def source_dirs(sources: Iterable[Path]) -> list[Path]:
    """Every results directory (folder holding runs.csv) under the given sources."""
    from prism_plugin.results import runs_files

    return list(dict.fromkeys(f.parent for f in runs_files(sources)))


def _resolved_tasks(dirs: Iterable[Path]) -> list[dict[str, Any]]:
    from prism_plugin.results import read_summary

    out = []
    for d in dirs:
        data = read_summary(d)  # {} when absent, or when it does not describe its runs.csv
        if data:
            task = data.get("resolved_task")
            out.append(task if isinstance(task, dict) else {})
    return out


def binary_convention(dirs: list[Path]) -> tuple[str, list[str]]:
    seen = {t.get("binary_logits", "symmetric") for t in _resolved_tasks(dirs)}
    seen.discard(None)
    if len(seen) > 1:
        return "symmetric", ["results mix binary logit conventions (symmetric and natural): binary temperatures "
                             "are read against T = 2 (the reference's [-d, d] convention)"]
    return (seen.pop() if seen else "symmetric"), []


def temperature_box(dirs: list[Path]) -> tuple[list[float] | None, list[str]]:
    """The temperature search box the results in ``dirs`` used (``None``: the default [0.1, 10])."""
    seen = set()
    for task in _resolved_tasks(dirs):
        bounds = task.get("temperature_bounds")
        if not bounds:
            continue
        try:
            seen.add(tuple(float(b) for b in bounds))
        except (TypeError, ValueError):
            continue
    if len(seen) > 1:
        return None, ["results mix temperature search boxes: bound-limited temperatures are checked against "
                      "[0.1, 10]"]
    return (list(seen.pop()) if seen else None), []


def summary_options(options: Mapping[str, Any] | None, host, dirs: Iterable[Path],
                    described=None) -> tuple[dict[str, Any], list[str]]:
    """The summary options with the report's defaults filled in, and the notes they raise.

    ``band_metrics``: the transfer band metrics of the host (``register_metrics`` ``bands=True``),
    for the report_tables summary; ``binary_logits``: the convention of the results in ``dirs``
    (:func:`binary_convention`); ``temperature_bounds``: their temperature search box
    (:func:`temperature_box`); ``table_kinds``: the host's table kinds in report order. Keys already set are kept. ``described``: the host's
    :func:`~prism_plugin.metrics.descriptions.described_metrics`, when the caller has them.
    """
    dirs = list(dirs)
    opts = dict(options or {})
    notes: list[str] = []
    if "band_metrics" not in opts:
        if described is None:
            from prism_plugin.metrics.descriptions import described_metrics

            described = described_metrics(host)
        opts["band_metrics"] = [d.column for d in described if d.info.bands]
    if "table_kinds" not in opts:
        from prism_plugin.tables import table_kinds

        opts["table_kinds"] = table_kinds(host)
    if "binary_logits" not in opts:
        opts["binary_logits"], more = binary_convention(dirs)
        notes += more
    if "temperature_bounds" not in opts:
        box, more = temperature_box(dirs)
        notes += more
        if box is not None:
            opts["temperature_bounds"] = box
    return opts, notes


def compute_summaries(run_tables, options: Mapping[str, Any], host, *, into=None,
                      skip: Iterable[str] = ()) -> tuple[Any, list[str]]:
    """Every ``summarize`` plugin via the engine, one at a time, so a failing plugin costs its own tables only
    (named in the returned notes).

    ``into``: a :class:`~prism_plugin.tables.SummaryOutput` already computed (e.g. a summary run strictly first)
    that the other plugins' outputs are merged into; a clash with it is a note, like any other. ``skip``: plugin
    names not run (the leaderboard skips the bootstrap rank correlations of ``decoupling``).
    """
    from prism_plugin.summaries.engine import run_summaries, summary_plugins
    from prism_plugin.tables import SummaryOutput

    out = SummaryOutput() if into is None else into
    notes: list[str] = []
    skip = set(skip)
    for name in summary_plugins(host):
        if name in skip:
            continue
        try:
            part = run_summaries(run_tables, options, host, only=[name])
        except Exception as exc:  # the report must still render; the failure is shown in it
            notes.append(f"summary plugin {name!r} failed, its tables are missing: {exc}")
            continue
        try:
            out.merge(part, name)
        except PrismError as exc:
            notes.append(str(exc))
    return out, notes


def probes_apart(run_tables):
    """The run tables with ``model`` = ``"<model> · <probe>"`` wherever one model has runs of several
    probe heads (a task with ``probes:``, e.g. the hematology audit's logistic_std and knn1): the
    report's cells, bands and verdict then describe each probe on its own instead of pooling them.
    Tables where every model has one probe are returned unchanged (the same objects)."""
    if run_tables is None:
        return None
    from prism_plugin.tables import RunTables

    several = several_probe_models(run_tables)
    if not several:
        return run_tables
    out = {}
    for name in run_tables.present():
        df = run_tables[name]
        if "probe" in df and "model" in df and df["model"].isin(several).any():
            mask = df["model"].isin(several)
            df = df.copy()
            df.loc[mask, "model"] = df.loc[mask, "model"].astype(str) + PROBE_SEP + df.loc[mask, "probe"].astype(str)
        out[name] = df
    return RunTables(out)


#: between a model and its probe in the report's labels (:func:`probes_apart`)
PROBE_SEP = " · "


def several_probe_models(run_tables) -> set[str]:
    """The models with runs of more than one probe head, over all the given tables together."""
    probes: dict[str, set[str]] = {}
    for name in run_tables.present():
        df = run_tables[name]
        if "probe" in df and "model" in df:
            for model, probe in df[["model", "probe"]].drop_duplicates().itertuples(index=False):
                probes.setdefault(str(model), set()).add(str(probe))
    return {m for m, p in probes.items() if len(p) > 1}


def build_view(path: Path, host, *, sources: Iterable[Path] | None = None, run_tables=None, summaries=None,
               tables_dir: Path | None = None, options: Mapping[str, Any] | None = None, title: str = "",
               reference: bool = False, write_tables: bool = True) -> ReportView:
    """Everything the sections read, computed once."""
    from prism_plugin.metrics import reliability
    from prism_plugin.tables import tables_from_results

    path = Path(path)
    sources = [path] if sources is None else [Path(s) for s in sources]
    dirs = source_dirs(sources)
    notes: list[str] = []
    from prism_plugin.results import check_folder

    for d in dirs:  # a folder whose files do not belong together is refused, naming the file (results.check_folder)
        check_folder(d)
    for d in dirs:  # artifacts buffered by this process's runs (see metrics.reliability)
        reliability.flush(d)
    if run_tables is None and dirs:
        from prism_plugin.summaries.probe_sensitivity import with_sweep_variants

        try:
            run_tables = tables_from_results(dirs, host)
        except PrismError as exc:
            if "probe-sweep run" not in str(exc):  # a sweep's variants are read below, one model per value
                notes.append(f"per-run tables could not be assembled: {exc}")
        run_tables = with_sweep_variants(run_tables, dirs, host)
    # each probe of a model its own line, in the summaries, the tables and the diagrams alike
    several = several_probe_models(run_tables) if run_tables is not None else set()
    run_tables = probes_apart(run_tables)
    from prism_plugin.metrics.descriptions import described_metrics

    described = described_metrics(host)
    opts, more = summary_options(options, host, dirs, described)
    notes.extend(more)
    tables_dir = Path(tables_dir) if tables_dir is not None else path / "summaries"
    if summaries is None and run_tables is not None:
        from prism_plugin.summaries.engine import write_summaries

        summaries, failed = compute_summaries(run_tables, opts, host)
        notes.extend(failed)
        if write_tables:
            write_summaries(tables_dir, summaries)
    rel = []
    for d in dirs:
        rel.extend(reliability.load_reliability(d))
    for payload in rel:
        if payload.get("model") in several:
            payload["model"] = f"{payload['model']}{PROBE_SEP}{payload.get('probe')}"
    return read_view(path, host, sources=tuple(sources), tables_dir=tables_dir, run_tables=run_tables,
                     summaries=summaries, reliability=rel, notes=notes, title=title, reference=reference,
                     options=opts, metrics=described)


def collect_sections(view_or_path, host) -> list[ReportSection]:
    """Sections of every ``report_sections`` plugin, by ``order``; a plugin that
    fails becomes a section saying so."""
    view = view_or_path if isinstance(view_or_path, ReportView) else build_view(Path(view_or_path), host)
    sections: list[ReportSection] = []
    for result in host.call("report_sections", strict=False, context="the report", view=view):
        if result.failure is not None:  # the one failure policy; presented as a section, not raised
            sections.append(failure_section(result.plugin, result.failure))
            continue
        sections.extend(result.value or [])
    return sorted(sections, key=lambda s: (s.order, s.title))


def failure_section(plugin: str, failure) -> ReportSection:
    """The section standing in for a report plugin that raised: the :class:`PluginFailure`
    message (it names the plugin, the hook and how to disable it)."""
    return ReportSection(f"Report plugin {plugin} failed",
                         f"{failure}. Its sections are missing from this report.", order=998)


# --------------------------------------------------------------------------- writing
def write_report(path: Path, host, *, sources: Iterable[Path] | None = None, run_tables=None, summaries=None,
                 tables_dir: Path | None = None, options: Mapping[str, Any] | None = None, title: str = "",
                 reference: bool = False, write_tables: bool = True) -> Path:
    """Write ``report.html`` and ``report.md`` into ``path``; return the HTML path.

    ``path`` alone: a prism-run results directory (its summaries are computed and written to ``path/summaries``).
    ``prism-run findings`` passes ``sources`` (the results directories), the ``run_tables`` and ``summaries`` it
    computed and ``tables_dir`` (its output folder).
    """
    view = build_view(Path(path), host, sources=sources, run_tables=run_tables, summaries=summaries,
                      tables_dir=tables_dir, options=options, title=title, reference=reference,
                      write_tables=write_tables)
    return write_view(view, host, write_tables=write_tables)[0]


def sweep_leftovers(path: Path, tables_dir: Path | None = None) -> int:
    """Remove the temporary files (``figures/.x.png.<random>.tmp``) that a report killed while writing left in
    the folders a report writes (``path``, ``figures/``, ``summaries/``, ``tables_dir``), whatever their age:
    the report writes its folder alone (one writer per results folder, :mod:`prism_plugin.folder_lock`).
    Returns how many were removed."""
    from prism_plugin.results import ResultsDir

    removed = ResultsDir(path).sweep_tmp(min_age_s=float("-inf")) if Path(path).is_dir() else 0
    extra = Path(tables_dir) if tables_dir is not None else None
    if extra is not None and extra.is_dir() and extra.resolve() not in (Path(path).resolve(),
                                                                     (Path(path) / "summaries").resolve()):
        for tmp in extra.glob(".*.tmp"):
            try:
                tmp.unlink()
                removed += 1
            except OSError:
                pass
    return removed


def write_view(view: ReportView, host, *, write_tables: bool = True) -> tuple[Path, list[ReportSection]]:
    """Write the report of a built view (:func:`build_view`) into ``view.path``: its sections are collected once.
    Returns the HTML path and the sections written, figures under the names they were saved as in ``figures/``."""
    sections = collect_sections(view, host)
    sections.append(notes_section(sections, view))
    return write_sections(view, sections, write_tables=write_tables), sections


def write_sections(view: ReportView, sections: list[ReportSection], *, write_tables: bool = True, title: str = "",
                   **page: Any) -> Path:
    """Write ``sections`` (their figures renamed to unique ``figures/`` names, in place) as ``report.md``
    and ``report.html`` into ``view.path``, and each section's ``tables`` as CSV into ``view.tables_dir``;
    ``page``: the :func:`render_html` keywords (``tabs``, ``kicker``, ``footer``). Returns the HTML path."""
    path = Path(view.path)
    sweep_leftovers(path, Path(view.tables_dir))  # what a report killed while writing left behind
    figures = _assign_figure_names(sections)
    if write_tables:
        for s in sections:
            for stem, df in s.tables.items():
                write_csv(Path(view.tables_dir) / f"{stem}.csv", df)
    fig_dir = path / FIGURES
    for name, data in figures.items():
        atomic_write_bytes(fig_dir / name, data)
    if fig_dir.is_dir():  # drop figures of an earlier report that this one no longer has
        for old in fig_dir.glob("*.png"):
            if old.name not in figures:
                old.unlink()
    title = title or view.title or _default_title(view)
    rel_tables = _relpath(Path(view.tables_dir), path)
    atomic_write_text(path / MD_NAME, render_markdown(title, sections, view, rel_tables))
    target = path / HTML_NAME
    atomic_write_text(target, render_html(title, sections, view, rel_tables, **page))
    return target


def _relpath(target: Path, base: Path) -> str:
    try:
        rel = target.resolve().relative_to(base.resolve())
        return str(rel) if str(rel) != "." else ""
    except ValueError:
        return str(target)


def _assign_figure_names(sections: list[ReportSection]) -> dict[str, bytes]:
    """Unique ``figures/`` file names; renames a clashing figure in place."""
    used: dict[str, bytes] = {}
    for s in sections:
        renamed: dict[str, bytes] = {}
        for name, data in s.figures.items():
            final = name if name.endswith(".png") else f"{name}.png"
            stem, k = final[:-4], 2
            while final in used:
                final = f"{stem}-{k}.png"
                k += 1
            used[final] = data
            renamed[final] = data
            if final != name and name in s.captions:
                s.captions[final] = s.captions.pop(name)
        s.figures = renamed
    return used


def _default_title(view: ReportView) -> str:
    summ = view.source_summaries
    models = sorted({str(s.get("model", "")) for s in summ if s.get("model")})
    tasks = sorted({str(s.get("task", "")) for s in summ if s.get("task")})
    if len(models) == 1 and len(tasks) == 1:
        return f"PRISM report: {models[0]} on {tasks[0]}"
    if models:
        return models_title("PRISM report", models)
    return "PRISM report"


def models_title(prefix: str, models: Iterable[str], most: int = 4) -> str:
    """``"<prefix>: a, b, c, d …"``: a report title naming the first ``most`` models."""
    models = [str(m) for m in models]
    return f"{prefix}: {', '.join(models[:most])}{' …' if len(models) > most else ''}"


def compact_notes(notes: list[str]) -> list[str]:
    """Merge notes that differ only in "at fraction X" into one line listing the fractions."""
    import re

    pat = re.compile(r"^(.*?) at fraction ([0-9.eE+-]+)(:.*)$")
    groups: dict[tuple[str, str], list[str]] = {}
    order: list[Any] = []
    for n in notes:
        m = pat.match(n)
        if not m:
            order.append(n)
            continue
        key = (m.group(1), m.group(3))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(m.group(2))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
        else:
            fr = groups[item]
            label = "fraction" if len(fr) == 1 else "fractions"
            out.append(f"{item[0]} at {label} {', '.join(fr)}{item[1]}")
    return list(dict.fromkeys(out))


def notes_section(sections: list[ReportSection], view: ReportView) -> ReportSection:
    """The last section: everything not shown (with the reason) and every note of the summaries."""
    lines = [f"- **{s.title}:** {line}" for s in sections for line in s.not_shown]
    notes = compact_notes(list(view.notes) + list(getattr(view.summaries, "notes", []) or []))
    body = []
    if lines:
        body.append("What this report would show but cannot, and why:\n\n" + "\n".join(lines))
    else:
        body.append("Every section of the report could be drawn from these results.")
    if notes:
        body.append("Notes from the summary tables (statistics that are not defined here, with the reason):\n\n"
                    + "\n".join(f"- {n}" for n in notes))
    return ReportSection("Not shown, and why", "\n\n".join(body), order=999, key="notes",
                         summary=f"{len(lines)} items, {len(notes)} notes")


__all__ = ["build_view", "collect_sections", "compute_summaries", "models_title", "summary_options", "write_report",
           "write_sections", "write_view"]
