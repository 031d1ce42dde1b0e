"""``prism-run report A B --output OUT [--reference REF]``: the leaderboard page over real demo results
(two models x an in-distribution and a transfer task): files, tabs whose content is static HTML (not
built by the script), figures embedded as valid PNGs, no external assets, each table's CSV link parsed
back with pandas and compared with the table, the leaderboard's numbers against runs.csv recomputed
independently, and, where ../shared holds the published tables, the reference FMs beside the user's
models with numbers checked against the published CSV files."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tests.conftest import REFERENCE, run_main

#: the demo ViT and its mean-pooled readout, at 64 px (16 patches: the test time budget)
SPECS = ("demo_vit[img_size=64]", "demo_vit[img_size=64,pooling=mean]")
MODELS = ("DemoViT-Tiny-img_size-64", "DemoViT-Tiny-img_size-64-pooling-mean")
#: small and fast: one seed, two fractions, 32 tiles per split, no bootstrap
FAST = ("--set", "seeds=[42]", "--set", "label_fractions=[0.25,1.0]", "--set", "bootstrap.n=0", "--limit", "32",
        "--no-report", "--quiet")
LOW = 0.25


class _Page(HTMLParser):
    """Tab panels and the section ids inside each, tables (cell texts) with their CSV links, images, scripts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.panels: dict[str, list[str]] = {}
        self.panel: str | None = None
        self.depth = 0
        self.tables: list[dict] = []
        self.csv_links: list[str] = []
        self.images: list[str] = []
        self.scripts: list[dict] = []
        self.links: list[dict] = []
        self.tabbar: list[str] = []
        self._in_tabbar = False
        self._cell: list[str] | None = None
        self._script = False
        self.script_text = ""
        self.section_of_table: list[str | None] = []
        self.section: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div":
            if "tab-panel" in (a.get("class") or "").split():
                self.panel, self.depth = a["id"], 0
                self.panels[self.panel] = []
            if self.panel is not None:
                self.depth += 1
        if tag == "nav" and a.get("class") == "tabbar":
            self._in_tabbar = True
        if tag == "a" and self._in_tabbar:
            self.tabbar.append(a["href"])
        if tag == "section":
            self.section = a.get("id")
            if self.panel is not None:
                self.panels[self.panel].append(a["id"])
        if tag == "a" and a.get("class") == "csv":
            self.csv_links.append(a["href"])
        if tag == "table":
            self.tables.append({"class": a.get("class", ""), "rows": []})
            self.section_of_table.append(self.section)
        if tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        if tag in ("td", "th"):
            self._cell = []
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "script":
            self.scripts.append(a)
            self._script = True
        if tag == "link":
            self.links.append(a)

    def handle_endtag(self, tag):
        if tag == "div" and self.panel is not None:
            self.depth -= 1
            if self.depth == 0:
                self.panel = None
        if tag == "nav":
            self._in_tabbar = False
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        if tag == "script":
            self._script = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._script:
            self.script_text += data


def _parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p


def _csv(uri: str) -> pd.DataFrame:
    prefix = "data:text/csv;charset=utf-8,"
    assert uri.startswith(prefix)
    return pd.read_csv(io.StringIO(unquote(uri[len(prefix):])), dtype=str, keep_default_na=False)


def _png(src: str) -> tuple[int, int]:
    assert src.startswith("data:image/png;base64,")
    img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
    img.verify()
    return Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).size


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lb") / "results"
    proc = run_main("--task", "prism_demo", "--task", "prism_demo_transfer", "--model", SPECS[0], "--model", SPECS[1],
                    *FAST, "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def board(results) -> Path:
    out = results.parent / "board"
    proc = run_main("report", str(results / "prism_demo"), str(results / "prism_demo_transfer"), "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"leaderboard: {out / 'report.html'}" in proc.stdout
    return out


def test_leaderboard_page_is_static_html_in_tabs(board):
    for name in ("report.html", "report.md", "tables/leaderboard.csv", "tables/report_cells.csv"):
        assert (board / name).is_file(), name
    page = _parse(board / "report.html")
    # every tab is a panel already in the HTML, with its sections (the script only hides the others)
    assert page.tabbar == [f"#{p}" for p in page.panels]
    assert list(page.panels) == ["tab-overview", "tab-indist", "tab-calibration", "tab-transfer", "tab-cri",
                                 "tab-tables"]
    assert page.panels["tab-overview"][0] == "leaderboard"
    assert {"lb-auroc", "lb-breaking", "lb-rank"} <= set(page.panels["tab-indist"])
    assert "lb-recoverability" in page.panels["tab-calibration"] and "lb-cri" in page.panels["tab-cri"]
    assert page.panels["tab-tables"][-1] == "notes"
    # figures embedded and valid; nothing loaded from elsewhere; one small inline script
    assert len(page.images) == 5  # AUROC, breaking points, recoverability, transfer, CRI (rank: needs 3 models)
    for src in page.images:
        w, h = _png(src)
        assert w > 300 and h > 200
    html = (board / "report.html").read_text(encoding="utf-8")
    assert not page.links and all("src" not in s for s in page.scripts) and len(page.scripts) == 1
    assert not re.search(r"""(src|href)=["']https?:""", html)
    assert len(page.script_text.strip().splitlines()) < 60
    assert "--reference DIR" in html  # without reference data: how to add the eight reference FMs
    # the Markdown twin has the tables but no script or CSV link
    md = (board / "report.md").read_text(encoding="utf-8")
    assert "| # | model |" in md and "<script" not in md and "data:text/csv" not in md


def test_every_table_has_a_csv_link_that_parses_back(board):
    page = _parse(board / "report.html")
    assert len(page.tables) >= 4 and len(page.csv_links) == len(page.tables)
    for table, uri in zip(page.tables, page.csv_links):
        assert "sortable" in table["class"].split()
        df = _csv(uri)
        header, *body = table["rows"]
        assert list(df.columns) == header
        assert df.to_numpy().tolist() == body


def test_leaderboard_numbers_against_runs_csv(results, board):
    lb = pd.read_csv(board / "tables" / "leaderboard.csv")
    assert list(lb["model"]) == sorted(MODELS, key=lambda m: -lb.set_index("model").at[m, "auroc_100"])
    assert set(lb["whose"]) == {"yours"}
    for model in MODELS:
        runs = pd.read_csv(results / "prism_demo" / model / "runs.csv")
        row = lb.loc[lb["model"] == model].iloc[0]
        for metric in ("auroc", "f1_macro", "ece_fixed", "ece_scaled_fixed", "brier", "nll"):
            at = {f: runs.loc[np.isclose(runs["fraction"], f), metric].mean() for f in (1.0, LOW)}
            assert row[f"{metric}_100"] == pytest.approx(at[1.0], abs=1e-12), metric
            assert row[f"{metric}_low"] == pytest.approx(at[LOW], abs=1e-12), metric
        tr = pd.read_csv(results / "prism_demo_transfer" / model / "runs.csv")
        assert row["transfer_auroc"] == pytest.approx(tr.loc[np.isclose(tr["fraction"], 1.0), "auroc"].mean())
        # CRI = AUROC x (1 - scaled ECE) x min(target AUROC / source AUROC, 1) at 100 % (PROTOCOL §6.2)
        src = runs.loc[np.isclose(runs["fraction"], 1.0)]
        cri = src["auroc"].mean() * (1 - src["ece_scaled_fixed"].mean()) * min(row["transfer_auroc"] /
                                                                                src["auroc"].mean(), 1.0)
        assert row["cri_100"] == pytest.approx(cri, abs=1e-9)
        assert row["lowest_fraction"] == pytest.approx(LOW) and row["datasets"] == 1
        # every warning flag of the model's summary.json files is named in its row
        warned = {f["flag"] for task in ("prism_demo", "prism_demo_transfer")
                  for f in json.loads((results / task / model / "summary.json").read_text())["flags"]
                  if f["level"] == "warning"}
        assert warned and all(name in str(row["flags"]) for name in warned)
    # the HTML leaderboard shows the same numbers (3 decimals), and qualifies flagged cells
    page = _parse(board / "report.html")
    header, *body = page.tables[0]["rows"]
    col = header.index("AUROC ↑ 100 %")
    shown = {r[1]: r for r in body}
    for model in MODELS:
        assert shown[model][col] == f"{lb.set_index('model').at[model, 'auroc_100']:.3f}"
        q = int(lb.set_index("model").at[model, "qualified_cells"])
        assert shown[model][header.index("qualified cells (all runs)")].startswith(f"{q} of ")
        assert (q == 0) or "⚠" in shown[model][header.index("qualified cells (all runs)")]


def test_output_inside_an_input_is_refused(results):
    a, b = results / "prism_demo", results / "prism_demo_transfer"
    proc = run_main("report", str(a), str(b), "--output", str(a / "lb"))
    assert proc.returncode == 2 and "lies inside the input results directory" in proc.stderr
    assert "Traceback" not in proc.stderr and not (a / "lb").exists()
    proc = run_main("report", str(a), str(results / "nope"))
    assert proc.returncode == 2 and "nope: no such directory" in proc.stderr


def test_script_is_valid_javascript(board):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the inline script's syntax is not checked")
    page = _parse(board / "report.html")
    js = board.parent / "script.js"
    js.write_text(page.script_text, encoding="utf-8")
    proc = subprocess.run([node, "--check", str(js)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_beside_the_reference_models(results, tmp_path):
    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"reference tables not found under {REFERENCE} (set PRISM_SHARED)")
    out = tmp_path / "board"
    proc = run_main("report", str(results / "prism_demo"), str(results / "prism_demo_transfer"),
                    "--reference", str(REFERENCE), "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lb = pd.read_csv(out / "tables" / "leaderboard.csv").set_index("model")
    ref = pd.read_csv(REFERENCE / "indomain_all_v2.csv")
    assert len(lb) == len(MODELS) + ref["model"].nunique() == 10
    assert set(lb.loc[list(MODELS), "whose"]) == {"yours"} and (lb["whose"] == "PRISM reference").sum() == 8
    # VIRCHOW2: mean over its six datasets of the seed-mean AUROC at 100 %, and the published CRI
    v = ref.loc[(ref["model"] == "VIRCHOW2") & np.isclose(ref["fraction"], 1.0)]
    assert lb.at["VIRCHOW2", "auroc_100"] == pytest.approx(v.groupby("dataset")["auroc"].mean().mean(), abs=1e-12)
    cri = pd.read_csv(REFERENCE / "cri_variants_100.csv").set_index("model")
    assert lb.at["VIRCHOW2", "cri_100"] == pytest.approx(cri.at["VIRCHOW2", "cri_multiplicative"], abs=1e-9)
    assert np.isnan(lb.at["VIRCHOW2", "nll_100"])  # the published tables have no NLL
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "--reference DIR" not in html  # the "how to add them" note is gone
    page = _parse(out / "report.html")
    assert len(page.csv_links) == len(page.tables)
    header, *body = page.tables[0]["rows"]
    assert {r[header.index("whose")] for r in body} == {"yours", "PRISM reference"}


def test_one_adapter_in_two_folders_is_two_models(results, tmp_path):
    """Two checkpoints of one adapter run into two folders (the same model name and task in both) are
    two leaderboard models labelled by folder; the same model across two task folders stays one."""
    from prism_plugin.errors import PrismError
    from prism_plugin.tables import tables_from_results

    one = next(p for p in (results / "prism_demo").iterdir() if (p / "runs.csv").is_file())
    for name in ("v1", "v2"):
        shutil.copytree(one, tmp_path / name / one.name)
    model = str(pd.read_csv(one / "runs.csv")["model"].iloc[0])
    with pytest.raises(PrismError, match="the same run appears twice"):
        tables_from_results([tmp_path / "v1", tmp_path / "v2"])
    tables = tables_from_results([tmp_path / "v1", tmp_path / "v2"], label_models_by_input=True)
    assert sorted(tables["indomain"]["model"].unique()) == [f"{model} · v1", f"{model} · v2"]
    across = tables_from_results([results / "prism_demo", results / "prism_demo_transfer"], label_models_by_input=True)
    assert not any(" · prism_demo" in str(m) for t in across.present() for m in across[t]["model"].unique())
    proc = run_main("report", str(tmp_path / "v1"), str(tmp_path / "v2"), "--output", str(tmp_path / "lb"))
    assert proc.returncode == 0, proc.stderr
    assert f"{model} · v1" in (tmp_path / "lb" / "report.md").read_text(encoding="utf-8")
