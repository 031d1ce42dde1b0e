"""`sweep:` in task YAML: validation, expansion into variants, and a C sweep run end to end on the demo."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy import stats

from prism_plugin.cli import main
from prism_plugin.errors import PrismError
from prism_plugin.heads.mlp import DEFAULTS
from prism_plugin.plugins import get_host
from prism_plugin.runner import default_output
from prism_plugin.tasks.index import default_index
from prism_plugin.tasks.sweep import expand_sweeps

#: two small random-weight ViTs that embed differently (64 px; 80 items per split keep extraction short)
TWO_MODELS = ["--model", "demo_vit", "--model-args", "pretrained=false,img_size=64",
              "--model", "timm:vit_tiny_r_s16_p8_224", "--model-args", "pretrained=false,img_size=64",
              "--limit", "80"]


def _task_file(tmp_path: Path, body: str, name: str = "swept") -> Path:
    f = tmp_path / f"{name}.yaml"
    f.write_text(f"task: {name}\ninclude: prism_demo\nlabel_fractions: [0.5, 1.0]\nseeds: [42]\n{body}\n")
    return f


def _load(tmp_path, body, overrides=()):
    return default_index(get_host()).load_task(str(_task_file(tmp_path, body)), overrides)


def test_c_sweep_expands_into_named_variants_with_distinct_results_dirs(tmp_path):
    task = _load(tmp_path, "sweep: {probe.C: [0.01, 0.1, 1, 10, 100]}")
    assert task.sweep["key"] == "probe.C" and task.sweep["values"] == [0.01, 0.1, 1, 10, 100]
    variants = expand_sweeps([task], get_host())
    assert [v.name for v in variants] == [f"swept@probe.C={c}" for c in ("0.01", "0.1", "1", "10", "100")]
    assert [v.probe["C"] for v in variants] == [0.01, 0.1, 1.0, 10.0, 100.0]
    assert all(v.probe["kind"] == "logistic" and v.probe["max_iter"] == 1000 and not v.sweep for v in variants)
    assert [v.columns["probe_C"] for v in variants] == [0.01, 0.1, 1.0, 10.0, 100.0]
    assert {v.columns["sweep_key"] for v in variants} == {"probe.C"}
    dirs = {default_output(tmp_path, v.name, "M") for v in variants}
    assert len(dirs) == 5
    # the nested spelling and the --set override mean the same
    nested = _load(tmp_path, "sweep: {probe: {C: [0.5, 2]}}")
    over = _load(tmp_path, "", overrides=["sweep.probe.C=[0.5,2]"])
    assert nested.sweep["values"] == over.sweep["values"] == [0.5, 2]
    # a task without a sweep passes through untouched, and (group, task) pairs keep their group
    plain = _load(tmp_path, "")
    assert expand_sweeps([plain]) == [plain]
    pairs = expand_sweeps([("g", nested)])
    assert [g for g, _ in pairs] == ["g", "g"]


def test_kind_and_whole_probe_sweeps(tmp_path):
    task = _load(tmp_path, "probe: {kind: logistic, C: 0.5}\nsweep: {probe.kind: [logistic, mlp]}")
    lin, mlp = expand_sweeps([task], get_host())
    assert lin.probe == {"kind": "logistic", "C": 0.5, "max_iter": 1000, "backend": "sklearn"}
    assert lin.columns["probe_C"] == 0.5
    assert mlp.probe == {"kind": "mlp", **DEFAULTS} and "probe_C" not in mlp.columns and mlp.name == "swept@probe.kind=mlp"
    task = _load(tmp_path, "sweep: {probe: [{kind: logistic}, {kind: mlp, hidden: 64}]}")
    names = [v.name for v in expand_sweeps([task], get_host())]
    assert names == ["swept@probe=kind=logistic", "swept@probe=kind=mlp,hidden=64"]


@pytest.mark.parametrize("body, fragment", [
    ("sweep: {probe.C: [1, 10], probe.max_iter: [100]}", "one setting at a time"),
    ("sweep: {ece_bins: [10, 15]}", "only probe settings can be swept"),
    ("sweep: {probe.C: []}", "non-empty list"),
    ("sweep: {probe.C: [1, -1]}", "sweep.probe.C: value -1: probe.C: must be in"),
    ("sweep: {probe.C: [1, 1.0]}", "appears twice"),
    ("sweep: [1, 2]", "must map one probe setting"),
    ("sweep: {probe: [5]}", "each value must be a probe mapping"),
])
def test_bad_sweeps_name_file_line_and_key(tmp_path, body, fragment):
    with pytest.raises(PrismError) as err:
        _load(tmp_path, body)
    msg = str(err.value)
    assert fragment in msg and "swept.yaml:5" in msg


def test_bad_head_settings_fail_before_any_work(tmp_path):
    with pytest.raises(PrismError, match=r"swept\.yaml.*did you mean 'hidden'"):
        expand_sweeps([_load(tmp_path, "probe: {kind: mlp, hiden: 8}")], get_host())
    # the logistic settings the protocol include gives every task are dropped by `probe: {kind: mlp}`
    task = _load(tmp_path, "probe: {kind: mlp, hidden: 8}")
    assert "C" not in task.probe and task.probe["hidden"] == 8 and expand_sweeps([task], get_host()) == [task]
    with pytest.raises(PrismError, match=r"sweep.probe.C: value 0.1: .*unknown key 'probe.C' for probe head 'mlp'"):
        _load(tmp_path, "probe: {kind: mlp}\nsweep: {probe.C: [0.1, 1]}")
    with pytest.raises(PrismError, match="did you mean 'mlp'"):
        expand_sweeps([_load(tmp_path, "sweep: {probe.kind: [logistic, mlpp]}")], get_host())


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """One C sweep of the demo for two small random-weight ViTs (one process, shared embedding cache)."""
    root = tmp_path_factory.mktemp("sweep")
    task = root / "demo_sweep.yaml"
    task.write_text("task: demo_sweep\ninclude: prism_demo\nlabel_fractions: [0.5, 1.0]\nseeds: [42, 123]\n"
                    "sweep: {probe.C: [0.1, 1, 10]}\n")
    out = root / "out"
    assert main(["--task", str(task), *TWO_MODELS, "--output", str(out), "--quiet", "--no-report"]) == 0
    return task, out


def _png_ok(path: Path) -> None:
    with Image.open(path) as im:
        im.verify()
        assert im.format == "PNG"


def test_sweep_end_to_end_one_model_says_not_defined(sweep_run, tmp_path, capsys):
    _, out = sweep_run
    demo = "DemoViT-Tiny-img_size-64-pretrained-false"  # the label of demo_vit with TWO_MODELS' options
    dirs = sorted(out.glob(f"demo_sweep@*/{demo}")) or sorted(out.glob(f"demo_sweep_probe.C_*/{demo}"))
    assert len(dirs) == 3
    for d in dirs:
        runs = pd.read_csv(d / "runs.csv")
        assert runs["sweep_key"].eq("probe.C").all() and runs["probe_C"].nunique() == 1
        assert runs["task"].iloc[0].startswith("demo_sweep@probe.C=")
    capsys.readouterr()
    assert main(["sensitivity", *map(str, dirs), "--output", str(tmp_path / "one")]) == 0
    printed = capsys.readouterr().out
    assert "not defined: needs ≥ 2 models" in printed
    table = pd.read_csv(tmp_path / "one" / "c_ranking.csv")
    assert len(table) == 4 and table["kendall_auroc"].isna().all()
    assert table["note"].str.startswith("not defined: needs ≥ 2 models").all()
    md = (tmp_path / "one" / "report.md").read_text()
    assert "Probe sensitivity" in md and "needs ≥ 2 models" in md
    assert f"need at least two; these results hold one model ({demo})" in md


def test_sweep_end_to_end_two_models_ranking_table_and_report(sweep_run, capsys):
    _, out = sweep_run
    runs = pd.concat([pd.read_csv(f) for f in out.rglob("runs.csv")], ignore_index=True)
    assert len(runs) == 2 * 3 * 2 * 2 and runs["model"].nunique() == 2  # models x C x fractions x seeds
    capsys.readouterr()
    assert main(["sensitivity", str(out)]) == 0
    assert "c_ranking" in capsys.readouterr().out
    table = pd.read_csv(out / "c_ranking.csv")
    assert sorted(table["C"].unique()) == [0.1, 10.0] and (table["n_models"] == 2).all()
    # independent recomputation from the run rows: seed means, then SciPy's Kendall tau against C = 1
    cells = runs.groupby(["probe_C", "fraction", "model"])[["auroc", "ece_fixed"]].mean()
    for _, r in table.iterrows():
        for metric, col in (("auroc", "kendall_auroc"), ("ece_fixed", "kendall_ece")):
            at_c = cells.loc[(r["C"], r["fraction"])][metric]
            at_1 = cells.loc[(1.0, r["fraction"])][metric]
            if at_c.nunique() < 2 or at_1.nunique() < 2:
                assert np.isnan(r[col])
            else:
                assert r[col] == pytest.approx(stats.kendalltau(at_c, at_1.loc[at_c.index]).statistic)
    head = json.loads((out / "sensitivity.json").read_text())["headline"]
    assert head["c_ranking_auroc_comparisons"] + head["c_ranking_ece_comparisons"] >= 1
    md = (out / "report.md").read_text()
    assert "Regularisation sweep (C vs C = 1)" in md and "| Demo-Binary |" in md
    assert "Mutual k-NN alignment" in md and "Reliability radar" in md
    assert "dendrogram: needs ≥ 2 models and ≥ 2 datasets" in md  # one dataset here: said, not drawn
    for name in ("probe_sensitivity_tau.png", "embedding_alignment.png", "reliability_radar.png"):
        if name == "probe_sensitivity_tau.png" and not np.isfinite(table[["kendall_auroc", "kendall_ece"]]).any().any():
            continue
        _png_ok(out / "figures" / name)
    assert "<html" in (out / "report.html").read_text()


def test_geometry_command_on_the_cached_embeddings(sweep_run, capsys):
    from prism_plugin.summaries.geometry import cached_test_embeddings, mutual_knn_alignment

    _, out = sweep_run
    capsys.readouterr()
    assert main(["geometry", "--task", "prism_demo", *TWO_MODELS, "--k", "20", "--output", str(out), "--quiet"]) == 0
    assert "chance" in capsys.readouterr().out
    matrix = pd.read_csv(out / "geometry" / "alignment_Demo-Binary.csv", index_col=0)
    meta = json.loads((out / "geometry" / "alignment_Demo-Binary.json").read_text())
    assert meta["k"] == 20 and meta["n_samples"] == 80 and list(matrix.index) == meta["models"]
    assert np.allclose(np.diag(matrix.to_numpy()), 1.0)
    # the same number straight from the cached arrays of the finished runs
    dirs = [p.parent for p in out.glob("*@probe.C=1/*/summary.json")] or \
        [p.parent for p in out.glob("*probe.C_1/*/summary.json")]
    found, notes = cached_test_embeddings(dirs)
    assert not notes and set(found) == {"Demo-Binary"}
    embs = found["Demo-Binary"]
    a, b = list(matrix.index)
    direct = mutual_knn_alignment(embs[a], embs[b], k=20)
    assert matrix.loc[a, b] == pytest.approx(direct, abs=1e-6)
    assert meta["chance"] < matrix.loc[a, b] < 1.0
