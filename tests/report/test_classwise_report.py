"""The "Class-wise calibration" report section (``classwise_report``) on real runs.

A tiny four-class precomputed task (one class with 6 test samples) is run through the CLI in
process; the section's table must equal the seed means of the per-run artifacts, agree with
``runs.csv``'s ``ece_classwise`` (the mean over the table's classes), be sorted worst first and
flag the rare class; a binary-only result gets the section as "not shown", with the reason.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from prism_plugin.plugins import get_host
from prism_plugin.report.sections import read_view
from prism_plugin.metrics.classwise import FEW_SAMPLES
from prism_plugin.report.classwise import FEW_NOTE, classwise_section
from prism_plugin.errors import PrismError
from tests.conftest import reseal, run_main, write_precomputed

TASK = """task: cw_t
dataset: CwSet
class_names: [{names}]
source: {{type: precomputed}}
splits: {{train: train, val: val, test: test}}
label_fractions: [0.5, 1.0]
seeds: [0, 1]
"""


def _write(folder, counts, seed):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, per_class in counts.items():
        y = np.repeat(np.arange(len(per_class)), per_class)
        np.save(folder / f"{split}_features.npy", (rng.normal(size=(len(y), 6)) + 1.2 * np.eye(6)[y]).astype(np.float32))
        np.save(folder / f"{split}_labels.npy", y)


@pytest.fixture(scope="module")
def multiclass_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("cw")
    _write(root / "emb" / "CwSet", {"train": [20, 20, 20, 12], "val": [10, 10, 10, 6], "test": [30, 25, 20, 6]}, 5)
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "cw_t.yaml").write_text(TASK.format(names="alpha, beta, gamma, rare"))
    out = root / "out"
    proc = run_main("--task", "cw_t", "--include-path", str(tasks), "--model", "precomputed", "--model-args",
                    f"root={root / 'emb'}", "--output", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return out


def test_section_table_matches_the_artifacts_and_runs_csv(multiclass_results):
    out = multiclass_results
    runs = pd.read_csv(out / "runs.csv")
    assert runs["ece_classwise"].notna().all() and runs["ece_classwise_scaled"].notna().all()
    sec = classwise_section(read_view(out, get_host()))
    assert sec.title == "Class-wise calibration" and not sec.not_shown
    table = sec.tables["classwise_ece"]
    full = table[np.isclose(table["fraction"], 1.0)]
    # independent: seed means straight from the artifact files
    arts = [json.loads(p.read_text()) for p in sorted((out / "artifacts" / "classwise").glob("*--f1-s*.json"))]
    assert len(arts) == 2
    for i, name in enumerate(["alpha", "beta", "gamma", "rare"]):
        row = full[full["class"] == name].iloc[0]
        assert row["n_min"] == row["n_max"] == [30, 25, 20, 6][i]
        assert row["ece_raw"] == pytest.approx(np.mean([a["classes"][i]["raw"]["ece"] for a in arts]), abs=1e-12)
        assert row["ece_scaled"] == pytest.approx(np.mean([a["classes"][i]["scaled"]["ece"] for a in arts]),
                                                  abs=1e-12)
        assert (row["note"] == FEW_NOTE) == ([30, 25, 20, 6][i] < FEW_SAMPLES)
    # mean over the classes = runs.csv's seed-mean ece_classwise at 100 %
    want = runs[np.isclose(runs["fraction"], 1.0)]["ece_classwise"].mean()
    assert full["ece_raw"].mean() == pytest.approx(want, abs=1e-12)
    # the Markdown table of the 100 % cell: sorted worst first, the rare class flagged where it is shown
    block = sec.body.split("100 % labels", 1)[1]
    lines = [ln for ln in block.splitlines() if ln.startswith("| ") and not ln.startswith("| class")]
    shown = [float(ln.split("|")[3]) for ln in lines]
    assert shown == sorted(shown, reverse=True) and len(lines) == 4
    assert any("rare" in ln and FEW_NOTE in ln for ln in lines)
    assert "1 of 4 classes have fewer than 10 test samples" in sec.body
    assert len(sec.figures) == 1 and next(iter(sec.figures.values()))[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_report_carries_the_section_figure_and_csv(multiclass_results):
    out = multiclass_results
    md = (out / "report.md").read_text()
    assert "## Class-wise calibration" in md and "(#classwise)" in md
    figs = list((out / "figures").glob("classwise-*.png"))
    assert len(figs) == 1 and figs[0].name in md
    csv = pd.read_csv(out / "summaries" / "classwise_ece.csv")
    assert set(csv["class"]) == {"alpha", "beta", "gamma", "rare"} and len(csv) == 8  # 2 fractions x 4 classes


def test_a_stale_artifact_is_ignored_and_said(multiclass_results, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(multiclass_results, out)
    art = next((out / "artifacts" / "classwise").glob("*--f1-s0.json"))
    data = json.loads(art.read_text())
    data["classes"][0]["raw"]["accuracy"] = [None if a is None else 1.0 - a for a in data["classes"][0]["raw"]["accuracy"]]
    art.write_text(json.dumps(data))
    with pytest.raises(PrismError, match="classwise.*was changed"):  # edited after the run: the folder is refused
        read_view(out, get_host())
    reseal(out)  # as if an earlier configuration had left it there when the run wrote summary.json
    sec = classwise_section(read_view(out, get_host()))
    assert any("1 class-wise artifact(s)" in n and "ignored" in n for n in sec.not_shown)
    assert int(sec.tables["classwise_ece"].query("fraction == 1.0")["n_runs"].max()) == 1


def test_binary_only_results_say_why_the_section_is_not_shown(tmp_path):
    emb = tmp_path / "emb"
    write_precomputed(emb / "BinSet", {"train": 30, "val": 12, "test": 12})
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "b_t.yaml").write_text(TASK.replace("cw_t", "b_t").replace("CwSet", "BinSet")
                                    .replace("[0.5, 1.0]", "[1.0]").replace("[0, 1]", "[0]").format(names="a, b"))
    out = tmp_path / "out"
    proc = run_main("--task", "b_t", "--include-path", str(tasks), "--model", "precomputed", "--model-args",
                    f"root={emb}", "--output", str(out), "--quiet", "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert pd.read_csv(out / "runs.csv")["ece_classwise"].isna().all()
    assert not (out / "artifacts" / "classwise").exists()
    sec = classwise_section(read_view(out, get_host()))
    assert not sec.figures and not sec.body
    assert len(sec.not_shown) == 1 and "only binary tasks" in sec.not_shown[0] and "ece_fixed" in sec.not_shown[0]
