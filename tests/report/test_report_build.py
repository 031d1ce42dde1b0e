"""The HTML report and its Markdown twin: written at the end of a real demo run
(``prism-run --task prism_demo --model demo_vit``), every image embedded and a
valid PNG, the HTML parses, the verdict agrees with the tables it cites (and with
runs.csv recomputed independently), the reliability artifacts agree with
runs.csv; a multi-model report on reference rows; the report without matplotlib."""

from __future__ import annotations

import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from prism_plugin.report.verdict_rows import check_verdict, evidence_value
from tests.conftest import REFERENCE, run_main


class _Report(HTMLParser):
    """Collects <img> sources, element ids, verdict items and callout text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.images: list[str] = []
        self.ids: list[str] = []
        self.verdicts: list[dict] = []
        self.text: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src", ""))
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "li" and "verdict" in (a.get("class") or "").split():
            self.verdicts.append(a)

    def handle_data(self, data):
        self.text.append(data)


def _valid_png(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = Image.open(io.BytesIO(data))
    img.verify()  # raises on a truncated / corrupt file
    img = Image.open(io.BytesIO(data))
    assert img.format == "PNG"
    return img.size


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "results"
    proc = run_main("--task", "prism_demo", "--model", "demo_vit", "--output", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def parsed(demo_dir) -> _Report:
    p = _Report()
    p.feed((demo_dir / "report.html").read_text(encoding="utf-8"))
    p.close()
    return p


def test_report_written_by_the_run(demo_dir):
    for name in ("report.html", "report.md", "runs.csv", "summary.json"):
        assert (demo_dir / name).is_file(), name
    for name in ("report_cells.csv", "report_settings.csv", "verdict.csv", "findings.json",
                 "degeneracy_audit.csv", "seed_variability_auroc.csv"):
        assert (demo_dir / "summaries" / name).is_file(), name
    assert len(list((demo_dir / "reliability").glob("*.json"))) == 18  # one artifact per run
    runs = pd.read_csv(demo_dir / "runs.csv")
    assert not any("reliab" in c for c in runs.columns)  # runs.csv keeps its columns


def test_html_parses_and_every_image_is_an_embedded_png(parsed):
    assert {"overview", "verdict", "discrimination", "calibration", "reliability", "temperature", "collapse",
            "decoupling", "transfer", "cri", "notes"} <= set(parsed.ids)
    assert len(parsed.images) >= 5
    for src in parsed.images:
        assert src.startswith("data:image/png;base64,"), src[:60]
        w, h = _valid_png(base64.b64decode(src.split(",", 1)[1], validate=True))
        assert w > 300 and h > 150
    text = " ".join(parsed.text)
    # what is not shown is said, with the reason
    assert "needs at least 3 models" in text and "1 model (DemoViT-Tiny)" in text
    assert "no transfer runs" in text


def test_markdown_twin_references_existing_pngs(demo_dir):
    md = (demo_dir / "report.md").read_text(encoding="utf-8")
    refs = re.findall(r"!\[[^\]]*\]\((figures/[^)]+)\)", md)
    assert len(refs) >= 5 and "figures/reliability.png" in refs
    for ref in refs:
        _valid_png((demo_dir / ref).read_bytes())
    assert sorted(p.name for p in (demo_dir / "figures").glob("*.png")) == sorted(Path(r).name for r in refs)
    assert "## Verdict" in md and "Not shown:" in md


def test_verdict_lines_match_the_tables_they_cite(demo_dir, parsed):
    settings = pd.read_csv(demo_dir / "summaries" / "report_settings.csv")
    assert parsed.verdicts, "no verdict lines"
    cited = 0
    for item in parsed.verdicts:
        if "data-source" not in item:
            continue
        cited += 1
        assert item["data-source"] == "report_settings.csv"
        got = evidence_value(settings, json.loads(item["data-where"]), item["data-column"], item["data-agg"])
        want = float(item["data-value"])
        assert (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want, abs=1e-12), item
    assert cited >= 3
    verdict = pd.read_csv(demo_dir / "summaries" / "verdict.csv", keep_default_na=False)
    verdict["value"] = pd.to_numeric(verdict["value"].replace("", np.nan))
    assert check_verdict(verdict, {"report_settings": settings}) == []
    # ... and the cited numbers agree with runs.csv, recomputed here independently
    runs = pd.read_csv(demo_dir / "runs.csv")
    cells = runs.groupby("fraction")[["auroc", "ece_fixed", "ece_scaled_fixed"]].mean()
    row = verdict.loc[verdict["column"] == "auroc_hi"].iloc[0]
    assert row["value"] == pytest.approx(cells.loc[1.0, "auroc"], abs=1e-12)
    worse = int((cells["ece_scaled_fixed"] >= cells["ece_fixed"]).sum())
    scaling = verdict.loc[verdict["column"] == "scaling_not_helping_cells"]
    assert scaling["value"].sum() == worse
    collapsed = int(runs.groupby("fraction")["collapsed"].any().sum())  # the prevalence-aware rule
    coll = verdict.loc[verdict["topic"] == "collapse"]
    if collapsed == 0:
        assert list(coll.loc[coll["level"] != "info", "column"]) == ["collapsed_cells"]
        assert coll.loc[coll["column"] == "collapsed_cells", "value"].sum() == 0
    else:
        frac = runs.loc[runs["collapsed"], "fraction"].max()
        assert coll.loc[coll["column"] == "largest_collapsed_fraction", "value"].max() == frac
    degenerate = int(runs.groupby("fraction")["degenerate"].any().sum())  # PRISM's, stated where it differs
    prism = coll.loc[coll["column"] == "degenerate_cells", "value"]
    assert (prism.sum() if len(prism) else collapsed) == degenerate


def test_reliability_artifacts_agree_with_runs(demo_dir):
    runs = pd.read_csv(demo_dir / "runs.csv")
    for r in runs.itertuples():
        data = json.loads((demo_dir / "reliability" / f"prism_demo--f{r.fraction:g}-s{r.seed}.json").read_text())
        assert data["raw"]["ece"] == pytest.approx(r.ece_fixed, abs=1e-12)
        assert data["scaled"]["ece"] == pytest.approx(r.ece_scaled_fixed, abs=1e-12)
        assert data["scaled"]["temperature"] == pytest.approx(r.temperature, abs=1e-12)
        assert sum(data["raw"]["count"]) + data["raw"]["outside"] == r.n_test


def test_findings_on_results_dirs_writes_report(demo_dir, tmp_path, capsys):
    from prism_plugin.cli import main

    out = tmp_path / "findings"
    assert main(["findings", str(demo_dir), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "report:" in printed and "not defined" in printed  # one model: rank statistics are not defined
    head = json.loads((out / "findings.json").read_text())
    assert head["headline"]["ts_indomain_cells_worse_total"] == 6
    assert str(head["headline"]["decoupling_pooled_rho_1pct"]).startswith("not defined")
    assert (out / "report.html").is_file() and (out / "verdict.csv").is_file()
    assert "figures/reliability.png" in (out / "report.md").read_text()  # artifacts found through the sources


def test_report_without_matplotlib_says_so(demo_dir, tmp_path, monkeypatch):
    import shutil

    from prism_plugin.plugins import get_host
    from prism_plugin.report import build, plots

    copy = tmp_path / "copy"
    shutil.copytree(demo_dir, copy, ignore=shutil.ignore_patterns("figures", "summaries", "report.*"))
    monkeypatch.setattr(plots, "available", lambda: False)
    build.write_report(copy, get_host())
    html = (copy / "report.html").read_text()
    assert "<img" not in html and "figures need matplotlib" in html
    assert not list((copy / "figures").glob("*.png")) if (copy / "figures").exists() else True


@pytest.fixture(scope="module")
def multi_model_report(tmp_path_factory) -> Path:
    """Three reference models on two datasets and their two transfer pairs."""
    if not REFERENCE.is_dir():
        pytest.skip(f"shared reference tables not found at {REFERENCE} (set PRISM_SHARED)")
    from prism_plugin.plugins import get_host
    from prism_plugin.report.build import write_report
    from prism_plugin.tables import RunTables, tables_from_reference_dir

    ref = tables_from_reference_dir(REFERENCE)
    models = ["CLIP", "UNI", "VIRCHOW2"]
    ind = ref.indomain.loc[ref.indomain["model"].isin(models) & ref.indomain["dataset"].isin(["PCam", "MHIST"])]
    tr = ref.transfer.loc[ref.transfer["model"].isin(models) & ref.transfer["pair"].isin(["PCam->MHIST",
                                                                                          "MHIST->PCam"])]
    out = tmp_path_factory.mktemp("multi")
    write_report(out, get_host(), sources=[out], run_tables=RunTables(indomain=ind.reset_index(drop=True),
                                                                      transfer=tr.reset_index(drop=True)),
                 tables_dir=out, reference=True)
    return out


def test_multi_model_report(multi_model_report):
    out = multi_model_report
    p = _Report()
    p.feed((out / "report.html").read_text(encoding="utf-8"))
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "figures/rank-scatter.png" in md and "figures/transfer-transfer.png" in md
    assert "figures/transfer-temperature-transfer.png" in md  # source vs oracle temperature
    for src in p.images:
        _valid_png(base64.b64decode(src.split(",", 1)[1]))
    verdict = pd.read_csv(out / "verdict.csv", keep_default_na=False)
    assert list(dict.fromkeys(verdict["model"])) == ["CLIP", "UNI", "VIRCHOW2"]
    verdict["value"] = pd.to_numeric(verdict["value"].replace("", np.nan))
    settings = pd.read_csv(out / "report_settings.csv")
    assert check_verdict(verdict, {"report_settings": settings}) == []
    # transfer verdict against the published mechanism table: auroc_mean of §6.10 is the same number
    mech = pd.read_csv(out / "mechanism_summary.csv")
    for r in verdict.loc[verdict["topic"] == "transfer"].itertuples():
        m = mech.loc[(mech["model"] == r.model) & (mech["pair"] == r.setting), "auroc_mean"]
        assert float(m.iloc[0]) == pytest.approx(r.value, abs=1e-12)
    assert "CRI at 100 % labels" in md and (out / "cri_variants_100.csv").is_file()
    assert "published per-run tables hold no per-run probabilities" in md  # reliability: not shown, why
