"""The audit's split-seed CIs, exposure, effective robustness, per-class recall / confusion, mechanism and
reliability tables (``prism-run audit``), with closed-form checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import confusion_matrix

from prism_plugin.adaptation import stats
from prism_plugin.adaptation.calibration import reliability_sums, top_label_ece
from prism_plugin.adaptation.plugin import first_moment_shift
from prism_plugin.cli import main
from prism_plugin.plugins import get_host
from prism_plugin.protocol.grid import GridSpec, run_grid
from prism_plugin.protocol.inputs import SplitArrays
from prism_plugin.studies.hematology import exposure as ex
from prism_plugin.studies.hematology import inputs, per_example
from prism_plugin.studies.hematology import tables as at
from prism_plugin.results import ResultsDir, rows_to_frame

from tests.adaptation.shift_data import WBC, encoder_views

SPLITS = (0, 1)
#: what each encoder's results directory declares (enc_c: nothing -> the registry -> unknown)
PRETRAINING = {"enc_a": [" LABanon "], "enc_b": ["Acevedo", "ImageNet-1k"]}


def _split_train(train: SplitArrays, split: int) -> SplitArrays:
    """A different 80 % of the source train split per split seed (so the split means differ)."""
    idx = np.sort(np.random.default_rng(split).permutation(len(train))[: int(0.8 * len(train))])
    return SplitArrays(train.X[idx], train.y[idx])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Three encoders, two source splits each (the runner's split_seed / run id), calibration transfer only."""
    root = tmp_path_factory.mktemp("audit_tables")
    host = get_host()
    views = encoder_views()
    for model, s in views.items():
        out = root / model
        rows = []
        for split in SPLITS:
            ident = {"task": "gen_transfer", "adapter": "gen", "model": model, "dataset": "src->tgt",
                     "class_names": WBC, "columns": {"src": "src", "tgt": "GenTgt", "pair": "src->GenTgt", "shift": "covariate"},
                     "reference_table": "transfer", "split_seed": split, "run_suffix": f"-split{split}",
                     # kind indomain: the transfer-temperature plugin stays out (test time); the audit reads
                     # the task's kind from summary.json
                     "meta": {"kind": "indomain", "adaptation": ("calibration",), "results_dir": str(out)},
                     "artifact_dir": out / "artifacts"}
            spec = GridSpec(fractions=(1.0,), seeds=(1,), probe={"kind": "logistic_std"})
            rows += list(run_grid(_split_train(s["train"], split), s["val"], s["test"], 5, spec, host, ident).values())
        res = ResultsDir(out)
        res.write_runs(rows_to_frame(rows))
        summary = {"resolved_task": {"name": "gen_transfer", "kind": "transfer", "class_names": list(WBC),
                                     "n_classes": 5, "priors": {},
                                     "target_config": {"dataset": "GenTgt", "extras": {"dataset_aliases": ["LabAnon"]}}}}
        if model in PRETRAINING:
            summary["pretraining_data"] = PRETRAINING[model]
        res.write_json("summary.json", summary)
    return root, views


def _inputs(root: Path) -> inputs.AuditInputs:
    from prism_plugin.tables import tables_from_results

    files = inputs.result_files([root])
    return inputs.prepare(inputs.audited_rows(tables_from_results(files)), None, [f.parent for f in files])


def test_plugin_columns_artifacts_and_split_means(results):
    root, views = results
    runs = pd.read_csv(root / "enc_a" / "runs.csv")
    assert runs["split_seed"].tolist() == list(SPLITS)
    names = sorted(p.name for p in (root / "enc_a" / "artifacts").glob("*.npz"))
    assert names == [f"gen_transfer--f1-s1-split{s}.npz" for s in SPLITS]  # <task>--<run_id>.npz
    with np.load(root / "enc_a" / "artifacts" / names[1]) as z:
        assert int(z["split_seed"]) == 1 and str(z["probe"]) == "logistic_std"
        y, proba = z["y_test"], z["proba_test"]
        rel = dict(zip(z["reliability_arms"].tolist(), z["reliability"]))["raw"]
    # the raw arm's bin sums are exact: every sample once, the ECE recomputed from them
    assert rel.shape == (3, 15) and rel[0].sum() == len(y)
    np.testing.assert_allclose(rel, reliability_sums(y, proba))
    assert np.abs(rel[2] - rel[1]).sum() / len(y) == pytest.approx(runs.iloc[1]["calx_raw_ece_top"], abs=1e-6)
    assert top_label_ece(y, proba) == pytest.approx(runs.iloc[1]["calx_raw_ece_top"], abs=1e-6)
    # first-moment shift of the run, by hand
    tr = _split_train(views["enc_a"]["train"], 1).X.astype(np.float64)
    te = views["enc_a"]["test"].X.astype(np.float64)
    by_hand = np.sqrt(np.mean(((te.mean(0) - tr.mean(0)) / tr.std(0)) ** 2))
    assert runs.iloc[1]["first_moment_shift"] == pytest.approx(by_hand, rel=1e-5)

    inp = _inputs(root)
    assert {k: sorted(v) for k, v in inp.artifacts.items()} == {
        ("gen_transfer", "logistic_std", m): [(0, 1), (1, 1)] for m in views}
    matrix, transfer = at.rank_tables(inp, 400, 0)
    a = matrix.set_index("model").loc["enc_a"]
    assert a["n_split_seeds"] == 2 and a["n_seeds"] == 1 and transfer["n_split_seeds"].tolist() == [2]
    assert a["f1_macro"] == pytest.approx(runs["f1_macro"].mean())
    for metric in ("id_f1_macro", "f1_macro"):
        lo, hi = a[f"{metric}_ci_low"], a[f"{metric}_ci_high"]
        assert lo <= a[metric] <= hi and lo == pytest.approx(runs[metric].min()) and hi == pytest.approx(runs[metric].max())


def test_split_ci_brackets_the_mean_and_collapses_with_one_split():
    rng = np.random.default_rng(0)
    v = 0.8 + 0.05 * rng.normal(size=5)
    ci = stats.mean_ci(v, B=2000, seed=1)
    assert ci["ci_low"] < ci["mean"] < ci["ci_high"] and ci["mean"] == pytest.approx(v.mean())
    assert stats.mean_ci(v, B=2000, seed=1) == ci  # seeded
    assert stats.mean_ci([0.7], B=100) == {"mean": 0.7, "ci_low": 0.7, "ci_high": 0.7, "n": 1}
    # through prepare: 2 models x 5 split seeds x 2 probe seeds; the encoder's mean is the mean of split means
    rows = []
    for m, base in (("m1", 0.9), ("m2", 0.8)):
        for split in range(5):
            for seed in (0, 1, 2)[: 2 if split else 3]:  # unbalanced: split 0 has three probe seeds
                rows.append({"task": "t", "model": m, "fraction": 1.0, "seed": seed, "split_seed": split,
                             "id_f1_macro": base + 0.01 * split + 0.001 * seed, "f1_macro": base - 0.02 * split})
    df = pd.DataFrame(rows)
    inp = inputs.prepare(df.copy())
    matrix, _ = at.rank_tables(inp, 1000, 0)
    r = matrix.set_index("model").loc["m1"]
    split_means = df[df.model == "m1"].groupby("split_seed")["id_f1_macro"].mean()
    assert r["id_f1_macro"] == pytest.approx(split_means.mean()) and r["n_split_seeds"] == 5
    assert r["id_f1_macro_ci_low"] < r["id_f1_macro"] < r["id_f1_macro_ci_high"]
    # results without a split_seed column: one split, the CI is the point
    old = inputs.prepare(df[df.split_seed == 0].drop(columns="split_seed"))
    r1 = at.rank_tables(old, 1000, 0)[0].set_index("model").loc["m1"]
    assert r1["n_split_seeds"] == 1 and r1["f1_macro_ci_low"] == r1["f1_macro"] == r1["f1_macro_ci_high"]


def test_effective_robustness_on_a_constructed_line():
    x = np.array([0.6, 0.7, 0.8, 0.9])
    e = 0.01 * np.array([1.0, -1.0, -1.0, 1.0])  # orthogonal to 1 and x: least squares recovers the line
    y = 0.1 + 0.5 * x + e
    er = stats.effective_robustness(x, y)
    assert er["slope"] == pytest.approx(0.5) and er["intercept"] == pytest.approx(0.1)
    np.testing.assert_allclose(er["residual"], e, atol=1e-12)
    np.testing.assert_allclose(er["line"], 0.1 + 0.5 * x)
    assert er["x_spread"] == pytest.approx(np.std(x)) and er["caveat"] == ""
    # saturated in-domain scores (the audit's 0.98-0.997): still reported, with the caveat
    tiny = stats.effective_robustness([0.985, 0.99, 0.995, 0.997], [0.6, 0.7, 0.5, 0.8])
    assert np.isfinite(tiny["residual"]).all() and "ill-posed" in tiny["caveat"]
    flat = stats.effective_robustness([0.99, 0.99, 0.99], [0.6, 0.7, 0.8])
    np.testing.assert_allclose(flat["residual"], [-0.1, 0.0, 0.1], atol=1e-12)
    assert flat["caveat"] and "fewer than 3" in stats.effective_robustness([0.5, 0.9], [0.4, 0.6])["caveat"]
    # the table: one row per encoder of each (task, probe)
    means = pd.DataFrame({"task": "t", "probe": "p", "model": ["a", "b", "c", "d"], "id_f1_macro": x, "f1_macro": y})
    table = at.effective_robustness_table(inputs.AuditInputs(runs=means, means=means))
    assert list(table.columns) == at.ER_COLUMNS
    np.testing.assert_allclose(table["effective_robustness"], e, atol=1e-12)
    assert (table["caveat"] == "").all()


def test_first_moment_shift_on_a_known_offset():
    rng = np.random.default_rng(0)
    src = rng.normal(size=(400, 4)) * np.array([1.0, 2.0, 3.0, 0.0]) + 5.0  # the last feature is constant
    mu, sd = src.mean(0), src.std(0)
    offset = np.array([1.0, -2.0, 0.5, 3.0])  # in source SDs (a zero SD counts as 1)
    tgt = src + offset * np.where(sd > 0, sd, 1.0)
    safe = np.where(sd > 0, sd, 1.0)
    assert first_moment_shift(tgt, mu, safe) == pytest.approx(np.sqrt(np.mean(offset ** 2)))
    assert first_moment_shift(src, mu, safe) == pytest.approx(0.0, abs=1e-12)


def test_confusion_and_per_class_recall_match_sklearn(results):
    root, _ = results
    inp = _inputs(root)
    recall, conf = per_example.class_tables(inp)
    files = inp.artifacts[("gen_transfer", "logistic_std", "enc_a")]
    ref = sum(confusion_matrix(z["y_test"], z["pred_test"], labels=range(5))
              for z in (np.load(f) for f in files.values()))  # pooled over the split seeds
    got = conf[conf.model == "enc_a"].pivot(index="true_class", columns="pred_class", values="count")
    np.testing.assert_array_equal(got.loc[list(WBC), list(WBC)].to_numpy(), ref)
    assert set(conf["target_dataset"]) == {"GenTgt"} and len(conf) == 3 * 25
    lymph = conf[(conf.model == "enc_a") & (conf.true_class == "lymphocyte") & (conf.pred_class == "neutrophil")]
    assert lymph["share"].iloc[0] == pytest.approx(ref[1, 0] / ref[1].sum())
    assert conf.groupby(["model", "true_class"])["share"].sum().to_numpy() == pytest.approx(1.0)
    r = recall[recall.model == "enc_a"].set_index("class_name")
    np.testing.assert_allclose(r.loc[list(WBC), "recall"], np.diag(ref) / ref.sum(1))
    assert r["n_true"].tolist() == ref.sum(1).tolist()
    # reliability: the raw arm pools every target example of both split seeds once
    rel = per_example.reliability_table(inp)
    raw = rel[(rel.model == "enc_a") & (rel.arm == "raw")]
    assert raw["count"].sum() == ref.sum() and raw["bin"].between(0, 14).all()
    assert {"raw", "src", "oracle", "k4", "cbr", "cbr_src"} <= set(rel["arm"])
    # mechanism: the shift beside the drop, real targets
    mech, summary = at.mechanism_table(inp)
    assert list(mech.columns) == at.MECHANISM_COLUMNS and not mech["synthetic"].any()
    m = inp.means.set_index("model")
    np.testing.assert_allclose(mech.set_index("model").loc[m.index, "target_drop"], m["id_f1_macro"] - m["f1_macro"])
    assert summary["logistic_std"]["real"]["n_cells"] == 3


def test_exposure_marking():
    ident = ex.task_identity({"kind": "transfer", "target_config": {"dataset": "MLL23",
                                                                   "extras": {"dataset_aliases": ["LabAnonymous"]}}})
    assert ident == {"dataset": "MLL23", "names": ("MLL23", "LabAnonymous"), "synthetic": False}
    assert ex.classify(("Acevedo", "labanonymous"), ident["names"]) == ("in_pretraining", "labanonymous")
    assert ex.classify((" mll23 ",), ident["names"]) == ("in_pretraining", " mll23 ")
    assert ex.classify(("Acevedo",), ident["names"]) == ("held_out", "")
    assert ex.classify((), ident["names"]) == ("held_out", "")
    assert ex.classify(None, ident["names"]) == ("unknown", "")
    assert ex.as_names("A+B") == ("A", "B") and ex.as_names("none") == () and ex.as_names(None) is None
    assert ex.task_identity({"kind": "transfer", "target_config": {"dataset": "D", "extras": {"perturb": {"seed": 0}}}}
                            )["synthetic"]

    from prism_plugin.errors import PrismError
    from prism_plugin.tasks.keys import _dataset_aliases

    class Ctx:
        @staticmethod
        def fail(key, msg):
            return PrismError(f"{key}: {msg}")

    assert _dataset_aliases(["LabAnonymous "], Ctx()) == ["LabAnonymous"] and _dataset_aliases("X", Ctx()) == ["X"]
    with pytest.raises(PrismError, match="dataset_aliases: must be a list of dataset names"):
        _dataset_aliases([""], Ctx())

    class Adapter:  # a registered adapter class declaring its pretraining data
        pretraining_data = ("LVD-142M",)

    class Host:
        def registry(self, name):
            return {"enc": Adapter, "fn": lambda **kw: None}

    assert ex.registry_pretraining("enc", Host()) == (True, ("LVD-142M",))
    assert ex.registry_pretraining("fn", Host()) == (False, None)
    assert ex.registry_pretraining("none", Host()) == (False, None)


def test_exposure_table_and_held_out_only(results, tmp_path, monkeypatch):
    root, _ = results
    inp = _inputs(root)
    tables, headline = at.build(inp, B=200)
    exp = tables["exposure"].set_index("model")
    assert exp.loc["enc_a", "exposure"] == "in_pretraining" and exp.loc["enc_a", "matched"] == "LABanon"
    assert exp.loc["enc_b", "exposure"] == "held_out" and exp.loc["enc_c", "exposure"] == "unknown"
    assert set(exp["target_dataset"]) == {"GenTgt"}
    assert tables["rank_matrix"].set_index("model")["exposure"].to_dict() == exp["exposure"].to_dict()
    assert headline["exposure"] == {"in_pretraining": 1, "held_out": 1, "unknown": 1}
    out = tmp_path / "audit"
    # test time: the audit's own sections only, without figures (the report's figure tests draw them)
    light = ["--disable", "report_basic", "--disable", "geometry_report"]
    from prism_plugin.report import plots

    monkeypatch.setattr(plots, "available", lambda: False)
    assert main(["audit", str(root), "--output", str(out), "--bootstrap", "100", "--held-out-only", *light]) == 0
    assert pd.read_csv(out / "rank_matrix.csv")["model"].tolist() == ["enc_b"]
    assert pd.read_csv(out / "effective_robustness.csv")["model"].tolist() == ["enc_b"]
    assert len(pd.read_csv(out / "exposure.csv")) == 3 and len(pd.read_csv(out / "per_class_recall.csv")) == 15
    head = json.loads((out / "audit.json").read_text())
    assert head["held_out_only"] and any("--held-out-only: 2 of 3" in n for n in head["notes"])
    assert {"exposure", "effective_robustness", "per_class_recall", "confusion", "mechanism",
            "reliability"} <= set(head["tables"])
    md = (out / "audit.md").read_text()
    assert "`confusion.csv`" in md and "`exposure.csv`" in md
