"""Markdown for the report: the one pipe-table writer, and a small Markdown-to-HTML converter.

:func:`pipe_table` (cells already text) and :func:`markdown_table` (a DataFrame, numbers
formatted by :func:`fmt`) are the only Markdown table writers of prism-plugin; every report
section and the audit use them.

The converter turns report section bodies into HTML.

Covers what report sections use: ATX headings, paragraphs, pipe tables (with
``:--`` alignment), bullet and numbered lists (one level), fenced code blocks,
block quotes, horizontal rules and the inline forms ``code``, **bold**,
*italic*, [links](url) and ![images](src). Everything else is escaped text,
so a section can never inject markup. Images are resolved through a callback
(the report embeds figures as base64 data URIs).
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, Callable, Iterable, Mapping

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
    """A cell's text with ``|`` escaped (so it cannot split the row)."""
    return str(text).replace("|", "\\|")


def pipe_table(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    """A Markdown pipe table from the header and the rows' cell texts (``|`` in cells escaped)."""
    head = [str(h) for h in header]
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


# --------------------------------------------------------------------------- Markdown -> HTML
def _safe_url(url: str) -> str:
    if re.match(r"^(https?:|mailto:|#|data:image/png;base64,)", url) or not re.match(r"^[a-zA-Z][\w+.-]*:", url):
        return html.escape(url, quote=True)
    return "#"


def inline(text: str, image: Callable[[str, str], str] | None = None) -> str:
    """Inline Markdown of one line/paragraph to HTML (text escaped)."""
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


def to_html(md: str, image: Callable[[str, str], str] | None = None) -> str:
    """Convert a Markdown body to an HTML fragment."""
    lines = md.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    para: list[str] = []
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
            out.append(_table(header, body, align, image))
            i = j
            continue
        if stripped.startswith(">"):
            flush_para()
            quote = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                quote.append(lines[i].strip()[1:].lstrip())
                i += 1
            out.append("<blockquote>" + to_html("\n".join(quote), image) + "</blockquote>")
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


def _table(header: list[str], body: list[list[str]], align: list[str], image) -> str:
    n = len(header)

    def style(k: int, text: str) -> str:
        a = align[k] if k < len(align) and align[k] else ("right" if _numeric(text) else "")
        return f' class="{a}"' if a else ""

    rows = ["<thead><tr>" + "".join(f"<th{style(k, '')}>{inline(h, image)}</th>" for k, h in enumerate(header))
            + "</tr></thead>"]
    trs = []
    for r in body:
        r = (r + [""] * n)[:n]
        trs.append("<tr>" + "".join(f"<td{style(k, c)}>{inline(c, image)}</td>" for k, c in enumerate(r)) + "</tr>")
    rows.append("<tbody>" + "".join(trs) + "</tbody>")
    return '<div class="table-wrap"><table>' + "".join(rows) + "</table></div>"


__all__ = ["escape_cell", "fmt", "inline", "markdown_table", "pipe_table", "to_html"]
