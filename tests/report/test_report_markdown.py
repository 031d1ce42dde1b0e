"""The Markdown-to-HTML converter of the report (section bodies)."""

from __future__ import annotations

from html.parser import HTMLParser

from prism_plugin.report.markdown import to_html


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _parse(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    p.close()
    return p


def test_tables_lists_inline_and_escaping():
    md = "\n".join([
        "Intro with **bold**, *italic*, `a<b>` and a [link](https://example.org).",
        "",
        "| name | value |",
        "|---|---|",
        "| x | 0.25 |",
        "| <script> | 1 % |",
        "",
        "- first",
        "- second with `code`",
        "",
        "1. one",
        "2. two",
        "",
        "> **Not shown:** reason",
        "",
        "### Sub heading",
    ])
    html = to_html(md)
    p = _parse(html)
    for tag in ("p", "strong", "em", "code", "a", "table", "th", "td", "ul", "ol", "li", "blockquote", "h4"):
        assert tag in p.tags, tag
    assert "script" not in p.tags  # escaped, shown as text
    assert "<script>" in "".join(p.text)
    assert '<td class="right">0.25</td>' in html and '<td class="right">1 %</td>' in html


def test_unsafe_link_and_images_through_callback():
    html = to_html("[x](javascript:alert(1)) ![fig](figures/a.png)", image=lambda alt, src: f"<img data-src='{src}'>")
    assert 'href="#"' in html
    assert "data-src='figures/a.png'" in html


def test_fenced_code_is_verbatim():
    html = to_html("```\n| not | a table |\n**x**\n```")
    assert "<table" not in html and "**x**" in html and html.startswith("<pre><code>")
