"""Markdown for the report: the one pipe-table writer, and a small Markdown-to-HTML converter.

:func:`pipe_table` (cells already text) and :func:`markdown_table` (a DataFrame, numbers
formatted by :func:`fmt`) are the only Markdown table writers of prism-plugin; every report
section and the audit use them.

The converter (report section bodies to HTML) covers what report sections use: ATX headings, paragraphs, pipe
tables (with ``:--`` alignment), bullet and numbered lists (one level), fenced code blocks, block quotes,
horizontal rules and the inline forms ``code``, **bold**, *italic*, [links](url) and ![images](src). Everything
else is escaped text, so a section can never inject markup. Images are resolved through a callback (the report
embeds figures as base64 data URIs).

A section body holds names as they are (a model's, a dataset's, a class's); the two renderings escape them alike:
:func:`to_html` for ``report.html`` and :func:`md_safe` for ``report.md``, so ``<script>`` or ``<img onerror=...>`` in
a name is inert text in both, and no control or bidi character reaches either (:func:`prism_plugin.errors.printable`).

Every HTML table is ``<table class="sortable">`` (the page's :data:`TABLE_SCRIPT` sorts it by a click on a header;
without JavaScript it is a plain table) and comes with a ``CSV`` link: a ``data:text/csv`` URI of the table's cell
texts (inline Markdown reduced to its text), so each table can be downloaded from a self-contained page.
:func:`add_table_tools` gives tables written as raw HTML (a section's ``html``) the same link and class.
"""

from __future__ import annotations

import csv
import html
import io
import math
import re
from html.parser import HTMLParser
from urllib.parse import quote
from typing import Any, Callable, Iterable, Mapping

from prism_plugin.errors import printable

_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+(.*)$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE = re.compile(
    r"(?P<code>`[^`]+`)"
    r"|(?P<img>!\[[^\]]*\]\([^)\s]+\))"
    r"|(?P<link>\[[^\]]+\]\([^)\s]+\))"
    r"|(?P<bold>\*\*[^*]+\*\*)"
    r"|(?P<ital>(?<![\w*])\*[^*\s][^*]*\*(?![\w*]))"
)


# --------------------------------------------------------------------------- writing tables
def fmt(v: Any, digits: int = 3) -> str:
    """A table cell: ``–`` for missing, ``yes``/``no``, integers with thousands separators."""
    import numpy as np

    if v is None:
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return "–"
        if float(v).is_integer() and abs(v) >= 1 and digits <= 3:
            return f"{int(v):,}"
        return f"{v:.{digits}f}"
    return str(v)


def escape_cell(text: Any) -> str:
    """A cell's text with ``|`` escaped (so it cannot split the row) and control characters written as escapes (so
    it cannot break the line)."""
    return printable(text).replace("|", "\\|")


def pipe_table(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    """A Markdown pipe table from the header and the rows' cell texts (``|`` in header and cells escaped)."""
    head = [escape_cell(h) for h in header]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(escape_cell(c) for c in row) + " |")
    return "\n".join(lines)


def markdown_table(df, digits: int = 3, formats: Mapping[str, Any] | None = None) -> str:
    """A DataFrame as a pipe table: each cell through ``formats[column]`` (a callable) or :func:`fmt`."""
    formats = formats or {}
    cols = [str(c) for c in df.columns]
    rows = []
    for row in df.itertuples(index=False):
        cells = []
        for c, v in zip(cols, row):
            f = formats.get(c)
            cells.append(f(v) if callable(f) else fmt(v, digits))
        rows.append(cells)
    return pipe_table(cols, rows)


# --------------------------------------------------------------------------- report.md: names made inert
#: a code span as both renderings read it: single backticks, not touching another backtick, on one line
_MD_CODE = re.compile(r"(?<!`)`[^`\n]+`(?!`)")
_MD_LINK = re.compile(r"(?P<bang>!?)\[(?P<label>[^\]]*)\]\((?P<url>[^)\s]+)\)")
#: ``&`` that a Markdown renderer would read as the start of a character reference (``&lt;``, ``&#60;``)
_MD_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")


def _url_ok(url: str) -> bool:
    """A link or image target that may stay as it is: a web, mail, in-page or embedded-PNG address, or a relative
    path (no ``javascript:`` and the like), without characters that could close the link or open markup."""
    return (not re.search(r"[<>\"'`\\]", url)
            and bool(re.match(r"^(https?:|mailto:|#|data:image/png;base64,)", url) or not re.match(r"^[a-zA-Z][\w+.-]*:", url)))


def md_escape(text: Any) -> str:
    """Plain text (a name, a phrase holding names) as inert Markdown text: control and bidi characters as escapes,
    ``<`` / ``>`` / ``&`` (where it would start a character reference) as entities, so a renderer shows them as they are
    and never reads a tag, an autolink or an entity."""
    return _MD_ENTITY.sub("&amp;", printable(text)).replace("<", "&lt;").replace(">", "&gt;")


def _md_inline(line: str) -> str:
    """One line of a section body, its text escaped by :func:`md_escape`: code spans are kept (shown literally), link
    and image labels escaped and an unsafe target replaced by ``#``, as :func:`to_html` renders them."""
    out, pos = [], 0
    for m in re.finditer(f"{_MD_CODE.pattern}|{_MD_LINK.pattern}", line):
        out.append(md_escape(line[pos:m.start()]))
        tok = m.group(0)
        if tok.startswith("`"):
            out.append(tok)
        else:
            url = m.group("url")
            out.append(f"{m.group('bang')}[{_md_inline(m.group('label'))}]({url if _url_ok(url) else '#'})")
        pos = m.end()
    out.append(md_escape(line[pos:]))
    return "".join(out)


def md_safe(body: str) -> str:
    """A Markdown section body (or title, caption, note) as ``report.md`` writes it: every name in it inert.

    Per line: control and bidi characters written as escapes everywhere; outside fenced code and code spans ``<``,
    ``>`` and ``&`` as entities (:func:`md_escape`), a line's leading ``>`` (a block quote) kept; link targets other
    than web, mail, in-page, PNG data or relative addresses replaced by ``#``. The result renders as :func:`to_html`
    renders the body: the same text, the same structure, no markup from a name.
    """
    out: list[str] = []
    fence = None
    for line in str(body).replace("\r\n", "\n").split("\n"):
        line = printable(line)
        m = _FENCE.match(line)
        if fence is not None or m:
            if m and fence is None:
                fence = m.group(1)
            elif m and m.group(1) == fence:
                fence = None
            out.append(line)
            continue
        quote = re.match(r"^(\s*(?:>\s?)+)", line)
        lead = quote.group(1) if quote else ""
        out.append(lead + _md_inline(line[len(lead):]))
    return "\n".join(out)


# --------------------------------------------------------------------------- Markdown -> HTML
def _safe_url(url: str) -> str:
    if re.match(r"^(https?:|mailto:|#|data:image/png;base64,)", url) or not re.match(r"^[a-zA-Z][\w+.-]*:", url):
        return html.escape(url, quote=True)
    return "#"


def html_text(text: Any) -> str:
    """Plain text for HTML: control and bidi characters as escapes (:func:`prism_plugin.errors.printable`), then
    ``&``, ``<``, ``>`` and quotes as entities."""
    return html.escape(printable(text), quote=True)


def inline(text: str, image: Callable[[str, str], str] | None = None) -> str:
    """Inline Markdown of one line/paragraph to HTML (text escaped, control characters as escapes)."""
    text = printable(text)
    out = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()], quote=False))
        tok = m.group(0)
        if m.group("code"):
            out.append(f"<code>{html.escape(tok[1:-1], quote=False)}</code>")
        elif m.group("img"):
            alt, src = re.match(r"!\[([^\]]*)\]\(([^)\s]+)\)", tok).groups()
            out.append(image(alt, src) if image else
                       f'<img alt="{html.escape(alt, quote=True)}" src="{_safe_url(src)}">')
        elif m.group("link"):
            label, url = re.match(r"\[([^\]]+)\]\(([^)\s]+)\)", tok).groups()
            out.append(f'<a href="{_safe_url(url)}">{inline(label, image)}</a>')
        elif m.group("bold"):
            out.append(f"<strong>{inline(tok[2:-2], image)}</strong>")
        else:
            out.append(f"<em>{inline(tok[1:-1], image)}</em>")
        pos = m.end()
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out)


def _cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    parts = re.split(r"(?<!\\)\|", s)
    return [p.strip().replace("\\|", "|") for p in parts]


def _align(sep: str) -> list[str]:
    out = []
    for c in _cells(sep):
        left, right = c.startswith(":"), c.endswith(":")
        out.append("center" if left and right else "right" if right else "left" if left else "")
    return out


def _numeric(text: str) -> bool:
    return bool(re.match(r"^[−+-]?\d[\d,]*(\.\d+)?(e[−+-]?\d+)?\s*%?$", text.strip(), re.I))


def to_html(md: str, image: Callable[[str, str], str] | None = None, table_name: str = "table") -> str:
    """Convert a Markdown body to an HTML fragment; ``table_name``: the download name of its
    tables' CSV links (``<table_name>.csv``, then ``<table_name>-2.csv``, ...)."""
    lines = [printable(line) for line in md.replace("\r\n", "\n").split("\n")]
    out: list[str] = []
    para: list[str] = []
    n_tables = [0]
    i = 0

    def flush_para() -> None:
        if para:
            out.append("<p>" + inline(" ".join(s.strip() for s in para), image) + "</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            flush_para()
            i += 1
            continue
        if stripped.startswith("```"):
            flush_para()
            j = i + 1
            code = []
            while j < len(lines) and not lines[j].strip().startswith("```"):
                code.append(lines[j])
                j += 1
            out.append("<pre><code>" + html.escape("\n".join(code), quote=False) + "</code></pre>")
            i = j + 1
            continue
        m = _HEADING.match(stripped)
        if m:
            flush_para()
            level = min(6, len(m.group(1)) + 1)  # section titles are h2; body headings start at h3
            out.append(f"<h{level}>{inline(m.group(2), image)}</h{level}>")
            i += 1
            continue
        if re.match(r"^(-{3,}|\*{3,}|_{3,})$", stripped):
            flush_para()
            out.append("<hr>")
            i += 1
            continue
        if "|" in stripped and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]):
            flush_para()
            header = _cells(line)
            align = _align(lines[i + 1])
            j = i + 2
            body = []
            while j < len(lines) and lines[j].strip() and "|" in lines[j]:
                body.append(_cells(lines[j]))
                j += 1
            n_tables[0] += 1
            out.append(_table(header, body, align, image, _download_name(table_name, n_tables[0])))
            i = j
            continue
        if stripped.startswith(">"):
            flush_para()
            quote = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                quote.append(lines[i].strip()[1:].lstrip())
                i += 1
            out.append("<blockquote>" + to_html("\n".join(quote), image, f"{table_name}-quote") + "</blockquote>")
            continue
        for pattern, tag in ((_BULLET, "ul"), (_NUMBERED, "ol")):
            if pattern.match(line):
                flush_para()
                items: list[str] = []
                while i < len(lines) and lines[i].strip():
                    mm = pattern.match(lines[i])
                    if mm:
                        items.append(mm.group(1))
                    elif items and lines[i].startswith((" ", "\t")):
                        items[-1] += " " + lines[i].strip()
                    else:
                        break
                    i += 1
                out.append(f"<{tag}>" + "".join(f"<li>{inline(it, image)}</li>" for it in items) + f"</{tag}>")
                break
        else:
            para.append(line)
            i += 1
            continue
    flush_para()
    return "\n".join(out)


def _table(header: list[str], body: list[list[str]], align: list[str], image, name: str = "table") -> str:
    n = len(header)

    def style(k: int, text: str) -> str:
        a = align[k] if k < len(align) and align[k] else ("right" if _numeric(text) else "")
        return f' class="{a}"' if a else ""

    rows = ["<thead><tr>" + "".join(f"<th{style(k, '')}>{inline(h, image)}</th>" for k, h in enumerate(header))
            + "</tr></thead>"]
    trs = []
    padded = []
    for r in body:
        r = (r + [""] * n)[:n]
        padded.append(r)
        trs.append("<tr>" + "".join(f"<td{style(k, c)}>{inline(c, image)}</td>" for k, c in enumerate(r)) + "</tr>")
    rows.append("<tbody>" + "".join(trs) + "</tbody>")
    csv_text = csv_of([plain(h) for h in header], [[plain(c) for c in r] for r in padded])
    return (_tools(csv_text, name) + '<div class="table-wrap"><table class="sortable">' + "".join(rows)
            + "</table></div>")


# --------------------------------------------------------------------------- tables: CSV and sorting
def plain(text: str) -> str:
    """The text a reader sees of one line of inline Markdown (``code``, **bold**, links, images reduced
    to their text; ``\\|`` unescaped): what a table cell holds in its CSV download."""
    out = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(text[pos:m.start()])
        tok = m.group(0)
        if m.group("code"):
            out.append(tok[1:-1])
        elif m.group("img"):
            out.append(re.match(r"!\[([^\]]*)\]", tok).group(1))
        elif m.group("link"):
            out.append(plain(re.match(r"\[([^\]]+)\]", tok).group(1)))
        elif m.group("bold"):
            out.append(plain(tok[2:-2]))
        else:
            out.append(plain(tok[1:-1]))
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def csv_of(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    """RFC 4180 CSV text (``csv`` module quoting; ``\\n`` line ends) of a header and rows of cell texts."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([str(h) for h in header])
    for r in rows:
        w.writerow([str(c) for c in r])
    return buf.getvalue()


def csv_data_uri(csv_text: str) -> str:
    """A ``data:text/csv`` URI of ``csv_text`` (UTF-8, every reserved byte percent-encoded: safe in an
    HTML attribute)."""
    return "data:text/csv;charset=utf-8," + quote(csv_text, safe="")


def _download_name(base: str, k: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(base)).strip("-") or "table"
    return slug if k == 1 else f"{slug}-{k}"


def _tools(csv_text: str, name: str) -> str:
    return (f'<div class="table-tools"><a class="csv" download="{html.escape(name, quote=True)}.csv" '
            f'href="{csv_data_uri(csv_text)}" title="download this table as CSV">CSV</a></div>')


class _TableText(HTMLParser):
    """The cell texts of one HTML table, row by row (header row included)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            if not self.rows:
                self.rows.append([])
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


_RAW_TABLE = re.compile(r"<table(?![^>]*\bsortable\b)(?P<attrs>[^>]*)>(?P<inner>.*?)</table>", re.S | re.I)


def add_table_tools(fragment: str, table_name: str = "table") -> str:
    """Give every table of an HTML fragment that is not yet sortable (raw HTML of a section) the
    ``sortable`` class and a CSV link of its cell texts; tables written by :func:`to_html` are kept."""
    k = [0]

    def repl(m: re.Match) -> str:
        k[0] += 1
        parser = _TableText()
        parser.feed(m.group(0))
        parser.close()
        rows = [r for r in parser.rows if r]
        attrs = m.group("attrs")
        if re.search(r'\bclass="', attrs):
            attrs = re.sub(r'\bclass="', 'class="sortable ', attrs, count=1)
        else:
            attrs = ' class="sortable"' + attrs
        table = f"<table{attrs}>{m.group('inner')}</table>"
        if not rows:
            return table
        return _tools(csv_of(rows[0], rows[1:]), _download_name(f"{table_name}-html", k[0])) + table

    return _RAW_TABLE.sub(repl, fragment)


#: The page's one script (inline, no external assets): click (or Enter on) a header of a
#: ``table.sortable`` to sort its rows, numbers by value (``1,234``, ``0.95 ± 0.01``, ``25 %``,
#: ``−0.2``), text alphabetically, empty/``–`` cells last; and, where the page has a ``.tabbar``,
#: show one ``.tab-panel`` at a time. Without JavaScript every table is static and every panel shown.
TABLE_SCRIPT = r"""
(function(){
function key(t){t=(t||"").trim().replace(/\u2212/g,"-");if(t===""||t==="\u2013"||t==="-")return null;
var m=t.match(/^[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?/i);
if(m&&!/^[A-Za-z_]/.test(t.slice(m[0].length)))return parseFloat(m[0].replace(/,/g,""));return t.toLowerCase();}
function cmp(a,b){if(a===null||b===null)return a===b?0:(a===null?1:-1);
var na=typeof a==="number",nb=typeof b==="number";if(na!==nb)return na?-1:1;return a<b?-1:a>b?1:0;}
function sortBy(tb,i,th){var asc=th.getAttribute("aria-sort")!=="ascending",body=tb.tBodies[0];if(!body)return;
Array.prototype.forEach.call(th.parentNode.cells,function(c){c.removeAttribute("aria-sort");});
th.setAttribute("aria-sort",asc?"ascending":"descending");
var rows=Array.prototype.map.call(body.rows,function(r,j){var c=r.cells[i];return[key(c?c.textContent:""),j,r];});
rows.sort(function(a,b){var k=cmp(a[0],b[0]);if(a[0]!==null&&b[0]!==null&&!asc)k=-k;return k||a[1]-b[1];});
rows.forEach(function(r){body.appendChild(r[2]);});}
document.querySelectorAll("table.sortable").forEach(function(tb){if(!tb.tHead)return;
Array.prototype.forEach.call(tb.tHead.rows[0].cells,function(th,i){th.tabIndex=0;th.title="click to sort";
th.classList.add("sort");th.addEventListener("click",function(){sortBy(tb,i,th);});
th.addEventListener("keydown",function(e){if(e.key==="Enter"||e.key===" "){e.preventDefault();sortBy(tb,i,th);}});});});
var bar=document.querySelector(".tabbar");if(!bar)return;
var tabs=Array.prototype.slice.call(bar.querySelectorAll("a[href^='#']"));
function show(id){var hit=false;tabs.forEach(function(a){var on=a.getAttribute("href")==="#"+id;hit=hit||on;
a.classList.toggle("active",on);a.setAttribute("aria-selected",on?"true":"false");});if(!hit)return false;
document.querySelectorAll(".tab-panel").forEach(function(p){p.hidden=p.id!==id;});return true;}
function route(){var h=decodeURIComponent(location.hash.slice(1)),el=h&&document.getElementById(h);
var p=el&&(el.classList.contains("tab-panel")?el:el.closest(".tab-panel"));
if(!show(p?p.id:tabs[0].getAttribute("href").slice(1)))return;if(el&&el!==p&&el.scrollIntoView)el.scrollIntoView();}
document.body.classList.add("js-tabs");window.addEventListener("hashchange",route);route();
})();
"""


__all__ = ["TABLE_SCRIPT", "add_table_tools", "csv_data_uri", "csv_of", "escape_cell", "fmt", "html_text", "inline",
           "markdown_table", "md_escape", "md_safe", "pipe_table", "plain", "to_html"]
