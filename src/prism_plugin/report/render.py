"""Render report sections: the Markdown twin (``report.md``, figures linked from ``figures/``) and
the self-contained HTML page (``report.html``: figures embedded as base64 PNG, tables sortable).

Names in titles, bodies, notes and captions are escaped alike in both (:func:`~prism_plugin.report.markdown.md_safe`
for the Markdown, :func:`~prism_plugin.report.markdown.html_text` and :func:`~prism_plugin.report.markdown.to_html` for
the page): markup in a model's or class's name is inert text, and no control character reaches either file.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html as _html
from typing import Iterable

from prism_plugin.errors import printable
from prism_plugin.report.markdown import TABLE_SCRIPT, add_table_tools, html_text, inline, md_safe, to_html
from prism_plugin.report.sections import ReportSection, ReportView

HTML_NAME = "report.html"


MD_NAME = "report.md"


FIGURES = "figures"


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
        from prism_plugin.report.derived import report_kinds, table_label

        kinds = report_kinds(view.options)
        parts.append(", ".join(table_label(t, kinds=kinds) for t in view.run_tables.present()))
    if view.reference:
        parts.append("published PRISM reference tables")
    stamp = runs_stamp_of(view)
    if stamp:
        parts.append(f"runs.csv sha256 {stamp[:12]}")
    return " · ".join(parts)


def render_markdown(title: str, sections: list[ReportSection], view: ReportView, rel_tables: str) -> str:
    from prism_plugin import __version__

    parts = [f"# {md_safe(title)}\n", f"*{md_safe(_subtitle(view))} · prism-plugin {__version__}. The HTML version "
             f"(`{HTML_NAME}`) holds the same content with the figures embedded.*\n"]
    parts.append("**Contents:** " + " · ".join(f"[{md_safe(s.title)}](#{_anchor(s)})" for s in sections) + "\n")
    parts += render_sections_md(sections)
    return "\n".join(parts) + "\n" + stamp_comment(runs_stamp_of(view))


def render_sections_md(sections: Iterable[ReportSection], figures_dir: str = FIGURES) -> list[str]:
    """The Markdown blocks of ``sections`` (join them with ``"\\n"``): anchor, title, what is not
    shown, body and the figures linked from ``figures_dir`` with their captions. Every text goes through
    :func:`~prism_plugin.report.markdown.md_safe`: a name in it is inert."""
    parts: list[str] = []
    for s in sections:
        parts.append(f'<a id="{_anchor(s)}"></a>\n\n## {md_safe(s.title)}\n')
        for line in s.not_shown:
            parts.append(f"> **Not shown:** {md_safe(line)}\n")
        if s.body.strip():
            parts.append(md_safe(s.body.rstrip()) + "\n")
        for name in s.figures:
            cap = md_safe(s.captions.get(name, ""))
            parts.append(f"![{cap or md_safe(name)}]({figures_dir}/{name})\n" + (f"\n*{cap}*\n" if cap else ""))
    return parts


def _anchor(s: ReportSection) -> str:
    """The section's anchor as an HTML attribute value (quotes and markup escaped)."""
    return html_text(s.anchor)


def _img(data: bytes, alt: str) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img src="data:image/png;base64,{b64}" alt="{html_text(alt)}" loading="lazy">'


def _toc_item(s: ReportSection) -> str:
    """One table-of-contents entry: the title, its teaser and, when the section has items it cannot
    show, a badge (``not shown`` for a section with nothing else; ``N not shown`` beside a body)."""
    badge = ""
    if s.not_shown:
        empty = not s.figures and not s.body.strip() and not s.html.strip()
        label = "not shown" if empty else f"{len(s.not_shown)} not shown"
        badge = (f'<span class="toc-na" title="{html_text("; ".join(s.not_shown))}">'
                 f"{label}</span>")
    return (f'<li><a href="#{_anchor(s)}">{html_text(s.title)}</a>'
            + (f'<span class="toc-sub">{html_text(s.summary)}</span>' if s.summary else "")
            + badge + "</li>")


def render_section_html(s: ReportSection, image) -> str:
    """One section as an HTML card: its "not shown" callouts, body (sortable tables with CSV links) and figures."""
    chunk = [f'<section id="{_anchor(s)}" class="card"><h2>{html_text(s.title)}</h2>']
    for line in s.not_shown:
        chunk.append(f'<div class="callout na"><strong>Not shown.</strong> {inline(line)}</div>')
    raw = "\n".join(printable(line) for line in s.html.split("\n")) if s.html else ""  # no control characters
    chunk.append(add_table_tools(raw, s.anchor) if raw else to_html(s.body, image, table_name=s.anchor))
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
        return f"<span class=\"missing\">[image {html_text(src)} not embedded]</span>"

    tabbar = ""
    if tabs:
        groups = _tab_groups(sections, tabs)
        toc = "".join(f'<li class="toc-tab"><a href="#{html_text(tid)}">{html_text(tt)}</a>'
                      f'<ol>{"".join(_toc_item(s) for s in members)}</ol></li>' for tid, tt, members in groups)
        tabbar = ('<nav class="tabbar" aria-label="Tabs"><div class="wrap">'
                  + "".join(f'<a href="#{html_text(tid)}">{html_text(tt)}</a>'
                            for tid, tt, _ in groups) + "</div></nav>")
        body = [f'<div class="tab-panel" id="{html_text(tid)}"><h2 class="tab-title">'
                f'{html_text(tt)}</h2>\n' + "\n".join(render_section_html(s, image) for s in members) + "</div>"
                for tid, tt, members in groups]
    else:
        toc = "".join(_toc_item(s) for s in sections)
        body = [render_section_html(s, image) for s in sections]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    footer = footer or DEFAULT_FOOTER.format(tables=html_text(rel_tables or "."))
    return TEMPLATE.format(
        title=html_text(title), subtitle=html_text(_subtitle(view)), toc=toc, body="\n".join(body),
        version=_html.escape(__version__), stamp=stamp, css=CSS, tabbar=tabbar, kicker=html_text(kicker),
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
