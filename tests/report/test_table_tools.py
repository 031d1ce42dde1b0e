"""Interface 4: every HTML table of a report is sortable and has a CSV link (a data: URI) whose content,
parsed back with pandas, is the table; raw HTML tables of a section get the same; the table of contents
marks every section with items it cannot show, with a body or without."""

from __future__ import annotations

import io
import re
from urllib.parse import unquote

import pandas as pd

from prism_plugin.contracts import ReportSection, ReportView
from prism_plugin.report.render import render_html
from prism_plugin.report.markdown import TABLE_SCRIPT, add_table_tools, markdown_table, plain, to_html

PREFIX = "data:text/csv;charset=utf-8,"


def _links(html: str) -> list[pd.DataFrame]:
    out = []
    for uri in re.findall(r'<a class="csv" download="[^"]+" href="([^"]+)"', html):
        assert uri.startswith(PREFIX) and '"' not in uri and "<" not in uri and " " not in uri
        out.append(pd.read_csv(io.StringIO(unquote(uri[len(PREFIX):])), dtype=str, keep_default_na=False))
    return out


def test_csv_link_round_trips_awkward_cells():
    df = pd.DataFrame({
        "model": ['a, "quoted" name', "pipe | inside", "**bold** and `code`", "ünïcode −0.24 ± 0.01", "#%&=+?"],
        "AUROC ↑": [0.91234, float("nan"), 1234.0, 0.5, 0.0],
    })
    md = markdown_table(df)
    html = to_html("intro\n\n" + md, table_name="my table")
    assert html.count('<table class="sortable">') == 1 and 'download="my-table.csv"' in html
    (back,) = _links(html)
    assert list(back.columns) == ["model", "AUROC ↑"]
    assert back["model"].tolist() == ['a, "quoted" name', "pipe | inside", "bold and code", "ünïcode −0.24 ± 0.01",
                                      "#%&=+?"]
    assert back["AUROC ↑"].tolist() == ["0.912", "–", "1,234", "0.500", "0.000"]
    # two tables in one body: two links, distinct file names
    html2 = to_html(md + "\n\ntext\n\n" + md, table_name="t")
    assert len(_links(html2)) == 2 and 'download="t.csv"' in html2 and 'download="t-2.csv"' in html2


def test_plain_reduces_inline_markdown_to_text():
    assert plain("**x** *y* `z` [label](https://a.b) ![alt](f.png)") == "x y z label alt"


def test_raw_html_tables_get_the_tools_once():
    raw = '<p>x</p><table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1 &amp; 2</td><td><span>' \
          'ok</span></td></tr></tbody></table>'
    out = add_table_tools(raw, "sec")
    assert '<table class="sortable">' in out
    (back,) = _links(out)
    assert back.to_numpy().tolist() == [["1 & 2", "ok"]] and list(back.columns) == ["a", "b"]
    assert add_table_tools(out, "sec") == out  # already sortable: left alone


def test_page_sortable_tables_and_toc_badges(tmp_path):
    table = "| k | v |\n|---|---|\n| a | 2 |\n| b | 10 |"
    sections = [
        ReportSection("Full", table, key="full"),
        ReportSection("Partly", table, key="partly", not_shown=["one thing", "another"]),
        ReportSection("Empty", "", key="empty", not_shown=["everything"]),
        ReportSection("Raw", "md twin", key="raw", html="<table><tr><th>x</th></tr><tr><td>1</td></tr></table>"),
    ]
    html = render_html("T", sections, ReportView(tmp_path), "")
    toc = html.split('<nav class="toc"', 1)[1].split("</nav>", 1)[0]
    items = re.findall(r"<li>(.*?)</li>", toc)
    assert len(items) == 4
    assert "toc-na" not in items[0]
    assert ">2 not shown</span>" in items[1]  # a body and items it cannot show: still marked
    assert ">not shown</span>" in items[2]
    assert html.count('class="sortable') == 3 and len(_links(html)) == 3
    assert html.count("<script>") == 1 and TABLE_SCRIPT.strip() in html
    assert len(TABLE_SCRIPT.strip().splitlines()) < 60
    assert "tabbar" not in html.split("<script>")[0].split("</style>")[1]  # no tabs on a plain report
