"""The adaptation plugin through the run grid, and ``prism-run audit`` on the resulting directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from prism_plugin.adaptation.config import check_priors
from prism_plugin.cli import main
from prism_plugin.errors import PrismError
from prism_plugin.plugins import get_host
from prism_plugin.protocol.grid import GridSpec, run_grid
from prism_plugin.results import ResultsDir, rows_to_frame

from tests.adaptation.shift_data import WBC, encoder_views

PRIORS = {"names": ["balanced", "neutrophil_heavy"], "batch_sizes": [64], "draws": 3}
SEEDS = (1, 2)


def _fail(key, msg):
    return PrismError(f"{key}: {msg}")


def write_results(root: Path, views, probe: str = "logistic_std", artifacts: bool = True) -> list[Path]:
    """What the runner writes for each (task, model), with the task's adaptation settings in meta."""
    host = get_host()
    priors = check_priors(PRIORS, _fail)
    dirs = []
    for model, s in views.items():
        out = root / probe / model
        ident = {"task": "gen_transfer", "adapter": "gen", "model": model, "dataset": "src->tgt",
                 "class_names": WBC, "columns": {"src": "src", "tgt": "tgt", "pair": "src->tgt"},
                 "reference_table": "transfer",
                 # results_dir as the runner gives it: the reliability artifacts are written with the runs,
                 # before summary.json records the folder's files
                 "meta": {"kind": "transfer", "src": "src", "tgt": "tgt", "pair": "src->tgt", "priors": priors,
                          "results_dir": str(out)},
                 "artifact_dir": (out / "artifacts") if artifacts else None}
        spec = GridSpec(fractions=(1.0,), seeds=SEEDS, probe={"kind": probe})
        rows = run_grid(s["train"], s["val"], s["test"], 5, spec, host, ident)
        res = ResultsDir(out)
        res.write_runs(rows_to_frame(list(rows.values())))
        res.write_json("summary.json", {"resolved_task": {"name": "gen_transfer", "class_names": list(WBC),
                                                          "n_classes": 5, "priors": priors}})
        dirs.append(out)
    return dirs


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("audit")
    views = encoder_views()
    write_results(root, views)
    return root, views


def test_plugin_columns_and_artifacts(results):
    root, _ = results
    runs = pd.read_csv(root / "logistic_std" / "enc_a" / "runs.csv")
    assert len(runs) == 2  # 2 seeds
    for col in ("id_f1_macro", "gain_cbr", "ece_tgtstd", "f1_macro_oracle_cb", "calx_cbr_src_ece_top",
                "calx_k32_brier", "sel_marg_ent", "prior__neutrophil_heavy__k64__f1_cbr",
                "prior__balanced__k64__sel_conf"):
        assert col in runs.columns, col
    r = runs.iloc[-1]
    assert r["gain_cbr"] == pytest.approx(r["f1_macro_cbr"] - r["f1_macro"])
    files = sorted((root / "logistic_std" / "enc_a" / "artifacts").glob("*.npz"))
    assert [f.name for f in files] == ["gen_transfer--f1-s1.npz", "gen_transfer--f1-s2.npz"]
    with np.load(files[-1]) as z:
        assert z["pred_test"].shape == (300,) and z["proba_test"].shape == (300, 5)
        assert z["pred_val"].shape == (150,)
        acc = float(np.mean(z["pred_val"] == z["y_val"]))
    assert acc == pytest.approx(runs.iloc[-1]["id_accuracy"])


def test_in_domain_runs_are_untouched():
    views = encoder_views(1)
    s = views["enc_a"]
    ident = {"task": "t", "adapter": "a", "model": "m", "dataset": "d", "meta": {"kind": "indomain"}}
    spec = GridSpec(fractions=(1.0,), seeds=(0,), probe={"kind": "logistic"})
    row = next(iter(run_grid(s["train"], s["val"], s["val"], 5, spec, get_host(), ident).values()))
    assert not any(c.startswith(("gain_", "calx_", "sel_", "prior__")) for c in row)
    ident["meta"] = {"kind": "indomain", "adaptation": ("cbr",)}
    row = next(iter(run_grid(s["train"], s["val"], s["val"], 5, spec, get_host(), ident).values()))
    assert "gain_cbr" in row and "gain_tgtstd" not in row and "calx_raw_nll" not in row


def test_audit_command_tables(results, tmp_path, monkeypatch):
    from prism_plugin.studies.hematology import sections
    from prism_plugin.studies.hematology.tables import TABLES

    drawn = []
    rank_figure = sections.rank_figure
    monkeypatch.setattr(sections, "rank_figure", lambda *a, **k: drawn.append(1) or rank_figure(*a, **k))
    root, _ = results
    out = tmp_path / "audit"
    assert main(["audit", str(root), "--output", str(out), "--bootstrap", "200"]) == 0
    assert len(drawn) == 1  # one view, its sections collected once for report.* and audit.md
    for name in ("rank_matrix", "rank_transfer", "calibration_transfer", "calibration_summary", "adaptation_full",
                 "adaptation_scenarios", "adaptation_methods", "selector_regret", "selector_summary",
                 "paired_bootstrap"):
        assert (out / f"{name}.csv").exists(), name
    headline = json.loads((out / "audit.json").read_text())
    assert headline["models"] == ["enc_a", "enc_b", "enc_c"] and headline["fraction"] == [1.0]
    assert headline["tables"] == [t for t in TABLES if (out / f"{t}.csv").exists()]
    md = (out / "audit.md").read_text()
    assert "Rank transfer" in md and "](figures/audit-rank-transfer.png)" in md
    # audit.md links the figures the report wrote, and holds only the audit's sections
    import re

    linked = re.findall(r"\]\(figures/([^)]+)\)", md)
    assert linked and all((out / "figures" / name).exists() for name in linked)
    assert "## Not shown, and why" not in md
    # the same kind of report as a run: report.html (figures embedded) + report.md, audit sections included
    html = (out / "report.html").read_text()
    for title in ("Rank transfer across acquisition domains", "Calibration transfer across domains",
                  "Test-time adaptation", "Label-free encoder selection", "Encoder differences and shift diagnostics"):
        assert f"<h2>{title}</h2>" in html, title
    assert html.count("data:image/png;base64,") >= 2 and 'alt="In-domain (source held-out) vs target' in html
    assert 'alt="Mean macro-F1 gain per adaptation method' in html
    for fig in ("audit-rank-transfer.png", "audit-adaptation-gain.png"):
        assert (out / "figures" / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Rank transfer across acquisition domains" in (out / "report.md").read_text()

    matrix = pd.read_csv(out / "rank_matrix.csv")
    runs = pd.concat(pd.read_csv(p) for p in root.rglob("runs.csv"))
    full = runs[runs["fraction"] == 1.0].groupby("model")[["id_f1_macro", "f1_macro"]].mean()
    m = matrix.set_index("model")
    np.testing.assert_allclose(m.loc[full.index, "f1_macro"], full["f1_macro"])
    rt = pd.read_csv(out / "rank_transfer.csv").iloc[0]
    assert rt["n_models"] == 3
    assert rt["spearman_rho"] == pytest.approx(spearmanr(full["id_f1_macro"], full["f1_macro"]).statistic)
    best_id, best_tgt = full["id_f1_macro"].idxmax(), full["f1_macro"].idxmax()
    assert rt["id_best"] == best_id and rt["target_best"] == best_tgt
    assert bool(rt["dethroned"]) == (best_id != best_tgt)
    assert rt["regret_id_accuracy"] >= 0

    scen = pd.read_csv(out / "adaptation_scenarios.csv")
    assert set(scen["prior"]) == {"balanced", "neutrophil_heavy"} and set(scen["K"]) == {64}
    methods = pd.read_csv(out / "adaptation_methods.csv").set_index("method")
    assert methods.loc["cbr", "n_scenarios"] == 2 and methods.loc["cbr", "cells"] == 6
    assert methods.loc["cbr", "range_low"] <= methods.loc["cbr", "mean_gain"] <= methods.loc["cbr", "range_high"]
    assert bool(methods.loc["oracle_cb", "upper_bound"])
    heavy = scen[scen["prior"] == "neutrophil_heavy"].set_index("method")
    assert heavy.loc["cbr", "mean_gain"] > heavy.loc["tgtstd", "mean_gain"]

    sel = pd.read_csv(out / "selector_regret.csv")
    assert {"conf", "marg_ent", "id_acc", "consensus", "agl_acc"} <= set(sel["selector"])
    assert set(sel["prior"]) == {"target", "balanced", "neutrophil_heavy"}
    assert (sel["regret"] >= 0).all()
    summary = pd.read_csv(out / "selector_summary.csv")
    assert set(summary["condition"]) == {"target", "balanced", "skewed"}
    pb = pd.read_csv(out / "paired_bootstrap.csv")
    assert len(pb) == 3 and (pb["n_seeds"] == 2).all() and (pb["B"] == 200).all()
    cal = pd.read_csv(out / "calibration_summary.csv").set_index("arm")
    assert cal.loc["oracle", "nll"] <= cal.loc["raw", "nll"] + 1e-9
    assert cal.loc["raw", "cells_ece_improved"] == 0


def test_audit_plugins_are_silent_unless_asked(results, tmp_path):
    """An ordinary report of the same runs has no audit tables or sections; asked, without the results
    directories, the per-example tables are skipped with a note."""
    from prism_plugin.report.sections import read_view
    from prism_plugin.studies.hematology import plugin as audit_plugin
    from prism_plugin.studies.hematology.inputs import result_files
    from prism_plugin.tables import tables_from_results

    root, _ = results
    files = result_files([root])
    assert len(files) == 3 and all(f.name == "runs.csv" for f in files)
    tables = tables_from_results(files)
    assert audit_plugin.summarize(tables, {}) is None
    assert audit_plugin.report_sections(read_view(tmp_path, get_host(), sources=(root,))) is None
    out = audit_plugin.summarize(tables, {"audit": {"bootstrap": 100}})
    assert "audit_rank_transfer" in out.tables and "audit_paired_bootstrap" not in out.tables
    assert any("options['results_dirs']" in n for n in out.notes)
    assert not any("no per-example predictions" in n for n in out.notes)  # one note for one cause
    assert out.headline["audit"]["notes"] == [n[len("audit: "):] for n in out.notes]
    assert out.headline["audit"]["tables"] == [t[len("audit_"):] for t in out.tables]
    assert out.headline["audit"]["models"] == ["enc_a", "enc_b", "enc_c"]
    with pytest.raises(PrismError, match="unknown key.*bootstrapp"):
        audit_plugin.summarize(tables, {"audit": {"bootstrapp": 100}})


def test_audit_reads_group_members_not_the_group_table(results, tmp_path):
    root, _ = results
    group = tmp_path / "group"
    import shutil

    shutil.copytree(root / "logistic_std", group)
    pd.concat(pd.read_csv(p) for p in sorted(group.rglob("runs.csv"))).to_csv(group / "runs.csv", index=False)
    from prism_plugin.studies.hematology.inputs import result_files

    assert sorted(f.parent.name for f in result_files([group])) == ["enc_a", "enc_b", "enc_c"]
    assert sorted(f.parent.name for f in result_files([tmp_path])) == ["enc_a", "enc_b", "enc_c"]


def test_audit_bad_input(tmp_path, capsys):
    assert main(["audit", str(tmp_path / "nope")]) == 2
    assert "nope: no such directory" in capsys.readouterr().err
    (tmp_path / "r").mkdir()
    pd.DataFrame({"model": ["m"], "task": ["t"], "fraction": [1.0], "seed": [0], "f1_macro": [0.5]}).to_csv(
        tmp_path / "r" / "runs.csv", index=False)
    assert main(["audit", str(tmp_path / "r")]) == 2
    assert "adaptation plugin" in capsys.readouterr().err
    assert main(["audit", str(tmp_path / "r"), "--compare", "a-b"]) == 2


TASKS = {
    "gen_src.yaml": "task: gen_src\ndataset: GenSrc\nclass_names: [{names}]\nsource: {{type: precomputed}}\n"
                    "splits: {{train: train, val: val, test: test}}\nlabel_fractions: [1.0]\nseeds: [1, 2]\n",
    "gen_tgt.yaml": "task: gen_tgt\ndataset: GenTgt\nclass_names: [{names}]\nsource: {{type: precomputed}}\n"
                    "splits: {{train: train, test: test}}\nlabel_fractions: [1.0]\nseeds: [1, 2]\n",
    "gen_transfer.yaml": "task: gen_transfer\nkind: transfer\nsource_task: gen_src\ntarget_task: gen_tgt\n"
                         "class_names: [{names}]\nlabel_fractions: [1.0]\nseeds: [1, 2]\n"
                         "probe: {{kind: logistic_std}}\n",
}


def _precomputed(root: Path, views) -> None:
    for model, s in views.items():
        for key, splits in (("GenSrc", ("train", "val", "test")), ("GenTgt", ("train", "test"))):
            folder = root / model / key
            folder.mkdir(parents=True)
            for split in splits:
                arr = s["test"] if key == "GenTgt" else s[split]
                np.save(folder / f"{split}_features.npy", arr.X)
                np.save(folder / f"{split}_labels.npy", arr.y)


def test_prism_run_transfer_then_audit(tmp_path):
    """The real command line: `prism-run --task ... --model precomputed` per encoder, then `prism-run audit`."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, body in TASKS.items():
        (tasks / name).write_text(body.format(names=", ".join(WBC)))
    views = encoder_views(2)
    _precomputed(tmp_path / "emb", views)
    for model in views:
        code = main(["--task", "gen_transfer", "--model", "precomputed", "--model-args",
                     f"root={tmp_path / 'emb' / model}", "--include-path", str(tasks), "--output",
                     str(tmp_path / "res" / model), "--quiet", "--no-report"])
        assert code == 0
    runs = pd.read_csv(tmp_path / "res" / "enc_a" / "runs.csv")
    assert (runs["probe"] == "logistic_std").all()
    for col in ("id_f1_macro", "gain_cbr", "calx_cbr_src_ece_top", "sel_neg_shift", "temperature_oracle"):
        assert col in runs.columns, col
    out = tmp_path / "audit"
    assert main(["audit", str(tmp_path / "res"), "--output", str(out), "--bootstrap", "100"]) == 0
    rt = pd.read_csv(out / "rank_transfer.csv")
    assert rt["n_models"].tolist() == [2] and rt["task"].tolist() == ["gen_transfer"]
    assert (out / "adaptation_full.csv").exists() and (out / "calibration_summary.csv").exists()
    # --probe is sugar for --set probe.kind=...
    code = main(["--task", "gen_transfer", "--model", "precomputed", "--model-args",
                 f"root={tmp_path / 'emb' / 'enc_a'}", "--include-path", str(tasks), "--output",
                 str(tmp_path / "knn"), "--quiet", "--no-report", "--probe", "knn1"])
    assert code == 0
    knn = pd.read_csv(tmp_path / "knn" / "runs.csv")
    assert (knn["probe"] == "knn1").all() and knn["gain_shot_im"].isna().all()


def test_prism_run_passes_priors_and_artifacts_to_the_plugin(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, body in TASKS.items():
        (tasks / name).write_text(body.format(names=", ".join(WBC)))
    with open(tasks / "gen_transfer.yaml", "a") as fh:
        fh.write("adaptation: [cbr, tgtstd, selectors]\npriors: {names: [neutrophil_heavy], batch_sizes: [64], draws: 2}\n")
    views = encoder_views(1)
    _precomputed(tmp_path / "emb", views)
    assert main(["--task", "gen_transfer", "--model", "precomputed", "--model-args",
                 f"root={tmp_path / 'emb' / 'enc_a'}", "--include-path", str(tasks), "--output",
                 str(tmp_path / "res"), "--quiet", "--no-report"]) == 0
    runs = pd.read_csv(tmp_path / "res" / "runs.csv")
    assert "prior__neutrophil_heavy__k64__f1_cbr" in runs.columns
    assert "gain_bbse" not in runs.columns and "calx_raw_nll" not in runs.columns
    assert len(list((tmp_path / "res" / "artifacts").glob("*.npz"))) == 2
