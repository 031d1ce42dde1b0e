"""Build the report: ``report.html`` (self-contained, figures embedded as base64
PNG) and its Markdown twin ``report.md`` (figures in ``figures/``).

Flow (one way): per-run tables -> every ``summarize`` plugin (written to the
tables folder as CSV + ``findings.json``) -> every ``report_sections`` plugin
-> the two renderings. :func:`write_report` is called at the end of every
``prism-run`` job (unless ``--no-report``), by ``prism-run report DIR`` and by
``prism-run findings`` (which passes the summaries it has already computed).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html as _html
from pathlib import Path
from typing import Any, Iterable, Mapping

from prism_plugin.errors import PrismError
from prism_plugin.report.markdown import TABLE_SCRIPT, add_table_tools, inline, to_html
from prism_plugin.report.sections import ReportSection, ReportView
from prism_plugin.results import atomic_write_bytes, atomic_write_text, write_csv

HTML_NAME = "report.html"
MD_NAME = "report.md"
FIGURES = "figures"


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
    (:func:`temperature_box`). Keys already set are kept. ``described``: the host's
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
    """Every ``summarize`` plugin via the engine, one at a time, so a failing
    plugin costs its own tables only (named in the returned notes).

    ``into``: a :class:`~prism_plugin.tables.SummaryOutput` already computed (e.g. a summary
    run strictly first) that the other plugins' outputs are merged into; a clash with it is a
    note, like any other. ``skip``: plugin names not run (the leaderboard skips the bootstrap
    rank correlations of ``decoupling``).
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
    from prism_plugin.results import summary_problem

    for d in dirs:  # a summary.json that does not describe its runs.csv is not read (see results.summary_dirs)
        problem = summary_problem(d)
        if problem is not None:
            notes.append(f"summary.json not used: {problem}")
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
    return ReportView(path, sources=tuple(sources), tables_dir=tables_dir, run_tables=run_tables,
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

    ``path`` alone: a prism-run results directory (its summaries are computed
    and written to ``path/summaries``). ``prism-run findings`` passes
    ``sources`` (the results directories), the ``run_tables`` and
    ``summaries`` it computed and ``tables_dir`` (its output folder).
    """
    view = build_view(Path(path), host, sources=sources, run_tables=run_tables, summaries=summaries,
                      tables_dir=tables_dir, options=options, title=title, reference=reference,
                      write_tables=write_tables)
    return write_view(view, host, write_tables=write_tables)[0]


def write_view(view: ReportView, host, *, write_tables: bool = True) -> tuple[Path, list[ReportSection]]:
    """Write the report of a built view (:func:`build_view`) into ``view.path``: its sections are
    collected once. Returns the HTML path and the sections written, figures under the names
    they were saved as in ``figures/``."""
    sections = collect_sections(view, host)
    sections.append(notes_section(sections, view))
    return write_sections(view, sections, write_tables=write_tables), sections


def write_sections(view: ReportView, sections: list[ReportSection], *, write_tables: bool = True, title: str = "",
                   **page: Any) -> Path:
    """Write ``sections`` (their figures renamed to unique ``figures/`` names, in place) as ``report.md``
    and ``report.html`` into ``view.path``, and each section's ``tables`` as CSV into ``view.tables_dir``;
    ``page``: the :func:`render_html` keywords (``tabs``, ``kicker``, ``footer``). Returns the HTML path."""
    path = Path(view.path)
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
    summ = view.source_summaries()
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


def runs_stamp_of(view: ReportView) -> str | None:
    """The SHA-256 of the ``runs.csv`` file(s) the report is built from (:func:`prism_plugin.results.runs_stamp`);
    ``None`` when it reads none (published reference tables only)."""
    from prism_plugin.results import runs_files, runs_stamp

    return runs_stamp(runs_files(view.sources))


def stamp_comment(stamp: str | None) -> str:
    """The machine-readable line (Markdown and HTML alike) naming the runs.csv digest a report describes."""
    from prism_plugin.results import RUNS_DIGEST_KEY

    return f"<!-- prism-plugin {RUNS_DIGEST_KEY}: {stamp} -->\n" if stamp else ""


def _subtitle(view: ReportView) -> str:
    runs = view.runs
    parts = []
    if not runs.empty and "model" in runs:
        models = list(view.models) or list(dict.fromkeys(runs["model"].astype(str)))
        parts.append(f"{len(models)} model{'s' if len(models) != 1 else ''}")
        parts.append(f"{len(runs)} runs")
    if view.run_tables is not None:
        from prism_plugin.report.derived import TABLE_LABELS

        parts.append(", ".join(TABLE_LABELS.get(t, t) for t in view.run_tables.present()))
    if view.reference:
        parts.append("published PRISM reference tables")
    stamp = runs_stamp_of(view)
    if stamp:
        parts.append(f"runs.csv sha256 {stamp[:12]}")
    return " · ".join(parts)


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


def render_markdown(title: str, sections: list[ReportSection], view: ReportView, rel_tables: str) -> str:
    from prism_plugin import __version__

    parts = [f"# {title}\n", f"*{_subtitle(view)} · prism-plugin {__version__}. The HTML version "
             f"(`{HTML_NAME}`) holds the same content with the figures embedded.*\n"]
    parts.append("**Contents:** " + " · ".join(f"[{s.title}](#{s.anchor})" for s in sections) + "\n")
    parts += render_sections_md(sections)
    return "\n".join(parts) + "\n" + stamp_comment(runs_stamp_of(view))


def render_sections_md(sections: Iterable[ReportSection], figures_dir: str = FIGURES) -> list[str]:
    """The Markdown blocks of ``sections`` (join them with ``"\\n"``): anchor, title, what is not
    shown, body and the figures linked from ``figures_dir`` with their captions."""
    parts: list[str] = []
    for s in sections:
        parts.append(f'<a id="{s.anchor}"></a>\n\n## {s.title}\n')
        for line in s.not_shown:
            parts.append(f"> **Not shown:** {line}\n")
        if s.body.strip():
            parts.append(s.body.rstrip() + "\n")
        for name in s.figures:
            cap = s.captions.get(name, "")
            parts.append(f"![{cap or name}]({figures_dir}/{name})\n" + (f"\n*{cap}*\n" if cap else ""))
    return parts


def _img(data: bytes, alt: str) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img src="data:image/png;base64,{b64}" alt="{_html.escape(alt, quote=True)}" loading="lazy">'


def _toc_item(s: ReportSection) -> str:
    """One table-of-contents entry: the title, its teaser and, when the section has items it cannot
    show, a badge (``not shown`` for a section with nothing else; ``N not shown`` beside a body)."""
    badge = ""
    if s.not_shown:
        empty = not s.figures and not s.body.strip() and not s.html.strip()
        label = "not shown" if empty else f"{len(s.not_shown)} not shown"
        badge = (f'<span class="toc-na" title="{_html.escape("; ".join(s.not_shown), quote=True)}">'
                 f"{label}</span>")
    return (f'<li><a href="#{s.anchor}">{_html.escape(s.title)}</a>'
            + (f'<span class="toc-sub">{_html.escape(s.summary)}</span>' if s.summary else "")
            + badge + "</li>")


def render_section_html(s: ReportSection, image) -> str:
    """One section as an HTML card: its "not shown" callouts, body (sortable tables with CSV links)
    and figures."""
    chunk = [f'<section id="{s.anchor}" class="card"><h2>{_html.escape(s.title)}</h2>']
    for line in s.not_shown:
        chunk.append(f'<div class="callout na"><strong>Not shown.</strong> {inline(line)}</div>')
    chunk.append(add_table_tools(s.html, s.anchor) if s.html else to_html(s.body, image, table_name=s.anchor))
    for name, data in s.figures.items():
        cap = s.captions.get(name, "")
        chunk.append(f'<figure>{_img(data, cap or name)}'
                     + (f"<figcaption>{inline(cap)}</figcaption>" if cap else "") + "</figure>")
    chunk.append("</section>")
    return "\n".join(chunk)


def _tab_groups(sections: list[ReportSection], tabs) -> list[tuple[str, str, list[ReportSection]]]:
    """``tabs`` = [(tab id, tab title, [section key or anchor, ...])]: the sections of each tab in the
    order given; a section no tab names goes to the last tab."""
    by_key = {}
    for s in sections:
        by_key.setdefault(s.key or s.anchor, s)
        by_key.setdefault(s.anchor, s)
    used: set[int] = set()
    groups = []
    for tab_id, tab_title, keys in tabs:
        members = []
        for k in keys:
            s = by_key.get(k)
            if s is not None and id(s) not in used:
                used.add(id(s))
                members.append(s)
        groups.append((tab_id, tab_title, members))
    rest = [s for s in sections if id(s) not in used]
    if rest and groups:
        groups[-1][2].extend(rest)
    return [g for g in groups if g[2]]


def render_html(title: str, sections: list[ReportSection], view: ReportView, rel_tables: str, *,
                tabs=None, kicker: str = "PRISM reliability report", footer: str = "") -> str:
    """The self-contained HTML page: a contents column, the sections as cards, every figure embedded,
    every table sortable with a CSV link (:data:`~prism_plugin.report.markdown.TABLE_SCRIPT`).

    ``tabs`` = [(tab id, tab title, [section key, ...])] groups the sections into tabs (one shown at a
    time with JavaScript; without it the tabs are a row of links and the panels follow one another)."""
    from prism_plugin import __version__

    figs_by_name = {n: d for s in sections for n, d in s.figures.items()}

    def image(alt: str, src: str) -> str:
        name = src.split("/")[-1]
        if name in figs_by_name:
            return _img(figs_by_name[name], alt)
        return f"<span class=\"missing\">[image {_html.escape(src)} not embedded]</span>"

    tabbar = ""
    if tabs:
        groups = _tab_groups(sections, tabs)
        toc = "".join(f'<li class="toc-tab"><a href="#{_html.escape(tid, quote=True)}">{_html.escape(tt)}</a>'
                      f'<ol>{"".join(_toc_item(s) for s in members)}</ol></li>' for tid, tt, members in groups)
        tabbar = ('<nav class="tabbar" aria-label="Tabs"><div class="wrap">'
                  + "".join(f'<a href="#{_html.escape(tid, quote=True)}">{_html.escape(tt)}</a>'
                            for tid, tt, _ in groups) + "</div></nav>")
        body = [f'<div class="tab-panel" id="{_html.escape(tid, quote=True)}"><h2 class="tab-title">'
                f'{_html.escape(tt)}</h2>\n' + "\n".join(render_section_html(s, image) for s in members) + "</div>"
                for tid, tt, members in groups]
    else:
        toc = "".join(_toc_item(s) for s in sections)
        body = [render_section_html(s, image) for s in sections]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    footer = footer or DEFAULT_FOOTER.format(tables=_html.escape(rel_tables or "."))
    return TEMPLATE.format(
        title=_html.escape(title), subtitle=_html.escape(_subtitle(view)), toc=toc, body="\n".join(body),
        version=_html.escape(__version__), stamp=stamp, css=CSS, tabbar=tabbar, kicker=_html.escape(kicker),
        footer=footer, script=TABLE_SCRIPT,
    ) + stamp_comment(runs_stamp_of(view))


CSS = """
:root{--ink:#1f2937;--muted:#6b7280;--line:#e5e7eb;--bg:#f6f7f9;--card:#fff;--accent:#0b5cad;
--good:#15803d;--warn:#b45309;--bad:#b91c1c;--info:#0b5cad;--na:#6b7280}
*{box-sizing:border-box}
html{scroll-behavior:smooth}
body{margin:0;font:15px/1.55 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:var(--ink);background:var(--bg)}
.hero{background:linear-gradient(120deg,#0b3d6e,#0b5cad 55%,#1d7fbf);color:#fff;padding:34px 0 30px}
.hero .wrap{max-width:1320px;margin:0 auto;padding:0 28px}
.kicker{text-transform:uppercase;letter-spacing:.12em;font-size:12px;opacity:.8}
.hero h1{margin:6px 0 6px;font-size:28px;font-weight:700;line-height:1.2}
.hero .meta{margin:0;opacity:.9;font-size:14px}
.layout{max-width:1320px;margin:0 auto;padding:22px 28px 40px;display:grid;grid-template-columns:250px 1fr;gap:26px}
nav.toc{position:sticky;top:16px;align-self:start;background:var(--card);border:1px solid var(--line);
border-radius:12px;padding:14px 14px 10px;font-size:13.5px;max-height:calc(100vh - 32px);overflow:auto}
.toc-title{font-weight:700;margin-bottom:6px;color:var(--muted);text-transform:uppercase;font-size:11.5px;
letter-spacing:.08em}
nav.toc ol{margin:0;padding-left:18px}
nav.toc li{margin:5px 0}
nav.toc a{color:var(--ink);text-decoration:none}
nav.toc a:hover{color:var(--accent);text-decoration:underline}
.toc-sub{display:block;color:var(--muted);font-size:12px}
.toc-na{margin-left:6px;font-size:11px;color:var(--na);border:1px solid var(--line);border-radius:8px;padding:0 5px}
main{min-width:0}
.card{background:var(--card);border:1px solid var(--line);border-radius:14px;padding:20px 24px;margin:0 0 20px;
box-shadow:0 1px 2px rgba(0,0,0,.03)}
.card h2{margin:0 0 10px;font-size:20px}
.card h3{margin:18px 0 8px;font-size:16px}
.card h4{margin:14px 0 6px;font-size:14.5px}
p{margin:8px 0}
code{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f3f4f6;border-radius:4px;
padding:1px 4px}
pre{background:#f3f4f6;border-radius:8px;padding:10px 12px;overflow:auto}
a{color:var(--accent)}
figure{margin:14px 0 6px;text-align:center}
figure img{max-width:100%;height:auto;border:1px solid var(--line);border-radius:10px;background:#fff}
figcaption{color:var(--muted);font-size:13px;margin-top:6px;text-align:left}
.table-wrap{overflow:auto;margin:10px 0;border:1px solid var(--line);border-radius:10px;max-height:560px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);vertical-align:top}
th{white-space:nowrap}
th{background:#f9fafb;text-align:left;position:sticky;top:0;font-weight:600}
tbody tr:nth-child(even){background:#fcfcfd}
tbody tr:hover{background:#eef5ff}
td.right,th.right{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.center,th.center{text-align:center}
blockquote{margin:10px 0;padding:8px 14px;border-left:4px solid #93c5fd;background:#eff6ff;border-radius:6px}
.callout{border-radius:10px;padding:10px 14px;margin:10px 0;font-size:14px}
.callout.na{background:#f3f4f6;border:1px dashed #cbd5e1;color:#374151}
.verdict-model{border:1px solid var(--line);border-radius:12px;margin:14px 0;overflow:hidden}
.verdict-model>summary{list-style:none;cursor:pointer}
.verdict-model>summary::-webkit-details-marker{display:none}
.verdict-model>summary h3{margin:0;padding:10px 16px;background:#f9fafb;border-bottom:1px solid var(--line);
font-size:16px}
.verdict-model>summary h3:before{content:"\\25B8";display:inline-block;width:18px;color:var(--muted)}
.verdict-model[open]>summary h3:before{content:"\\25BE"}
.verdict-model .counts{float:right;font-weight:400;font-size:12.5px;color:var(--muted)}
.verdict-topic{display:grid;grid-template-columns:190px 1fr;gap:10px;padding:10px 16px;
border-bottom:1px solid var(--line)}
.verdict-topic:last-child{border-bottom:0}
.verdict-topic .topic{font-weight:600;color:#374151}
.verdict-topic ul{list-style:none;margin:0;padding:0}
.verdict-topic li{position:relative;padding-left:22px;margin:3px 0 7px}
.verdict-topic li:before{content:"";position:absolute;left:3px;top:.42em;width:11px;height:11px;border-radius:50%;
background:var(--na)}
li.lv-good:before{background:var(--good)} li.lv-warn:before{background:#f59e0b}
li.lv-bad:before{background:var(--bad)} li.lv-info:before{background:var(--info)}
li.lv-na:before{background:#fff;border:2px solid var(--na);width:9px;height:9px}
.evidence{display:block;color:var(--muted);font-size:12px}
.legend-dots span{display:inline-block;margin-right:14px;font-size:13px;color:var(--muted)}
.legend-dots i{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:5px;vertical-align:-1px}
.kpis{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px;margin:12px 0}
.kpi{border:1px solid var(--line);border-radius:12px;padding:12px 14px;background:#fbfcfe}
.kpi .v{font-size:22px;font-weight:700}
.kpi .l{color:var(--muted);font-size:12.5px}
.missing{color:var(--bad)}
footer{max-width:1320px;margin:0 auto;padding:0 28px 40px;color:var(--muted);font-size:12.5px}
.table-tools{display:flex;justify-content:flex-end;margin:10px 0 -6px}
.table-tools a.csv{font-size:12px;font-weight:600;text-decoration:none;border:1px solid var(--line);border-radius:6px;
padding:1px 8px;background:#f9fafb}
.table-tools a.csv:hover{background:#eef5ff}
th.sort{cursor:pointer;user-select:none}
th.sort:after{content:" \\2195";color:#9ca3af;font-weight:400}
th[aria-sort=ascending]:after{content:" \\25B2";color:var(--accent)}
th[aria-sort=descending]:after{content:" \\25BC";color:var(--accent)}
nav.tabbar{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid var(--line);
box-shadow:0 1px 3px rgba(0,0,0,.05)}
nav.tabbar .wrap{max-width:1320px;margin:0 auto;padding:0 28px;display:flex;flex-wrap:wrap;gap:2px}
nav.tabbar a{padding:11px 14px 9px;color:var(--ink);text-decoration:none;font-weight:600;font-size:14px;
border-bottom:3px solid transparent}
nav.tabbar a:hover{color:var(--accent)}
nav.tabbar a.active{color:var(--accent);border-bottom-color:var(--accent)}
.tab-title{font-size:13px;text-transform:uppercase;letter-spacing:.08em;color:var(--muted);margin:6px 0 10px}
.js-tabs .tab-title{display:none}
nav.toc li.toc-tab>a{font-weight:700}
nav.tabbar~.layout nav.toc{top:62px;max-height:calc(100vh - 78px)}
nav.tabbar~.layout .card,nav.tabbar~.layout .tab-panel{scroll-margin-top:64px}
nav.toc li.toc-tab>ol{padding-left:14px}
.who-yours{font-weight:700;color:#111827}
.who-ref{color:var(--muted)}
@media (max-width:900px){.layout{grid-template-columns:1fr}nav.toc{position:static;max-height:none}
.verdict-topic{grid-template-columns:1fr}}
@media print{nav.toc,nav.tabbar{display:none}.layout{display:block}.hero{background:#0b5cad}
.tab-panel[hidden]{display:block}}
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="prism-plugin {version}">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header class="hero"><div class="wrap">
<div class="kicker">{kicker}</div>
<h1>{title}</h1>
<p class="meta">{subtitle}</p>
</div></header>
{tabbar}
<div class="layout">
<nav class="toc" aria-label="Contents"><div class="toc-title">Contents</div><ol>{toc}</ol></nav>
<main>
{body}
</main>
</div>
<footer>Written by prism-plugin {version} on {stamp}. {footer}</footer>
<script>{script}</script>
</body>
</html>
"""

DEFAULT_FOOTER = """Self-contained: every figure is embedded in this file.
The numbers come from the CSV tables in <code>{tables}</code> (and <code>findings.json</code> there); the Markdown
twin <code>report.md</code> shows the same content with the figures in <code>figures/</code>. Click a table header to
sort it; the CSV link above a table downloads it."""

__all__ = ["HTML_NAME", "MD_NAME", "build_view", "collect_sections", "compute_summaries", "models_title",
           "render_html", "render_markdown", "render_section_html", "render_sections_md", "summary_options",
           "write_report", "write_sections", "write_view"]
