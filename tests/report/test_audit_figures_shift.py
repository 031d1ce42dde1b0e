"""Issue 15 (H5): the audit report's figures from hand-made audit tables, the notes when a table is
missing, and the `shift:` task key (validation, runs.csv column, table routing, verdict wording)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd

from prism_plugin.studies.hematology import figures as af

PNG = b"\x89PNG\r\n\x1a\n"
MODELS = ["EncA", "EncB", "EncC"]
TARGETS = ["Matek", "Raabin"]
CLASSES = ["neutrophil", "lymphocyte", "monocyte"]


def _png(data) -> None:
    assert isinstance(data, bytes) and data[:8] == PNG
    assert 3_000 < len(data) < 2_000_000
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert 200 <= w <= 6000 and 150 <= h <= 6000


def rank_matrix(ci: bool = True) -> pd.DataFrame:
    rows = []
    for task, (i, m) in itertools.product(["a_to_b"], enumerate(MODELS)):
        r = {"task": task, "probe": "logistic_std", "model": m, "id_f1_macro": 0.9 + 0.02 * i,
             "f1_macro": 0.7 - 0.05 * i, "id_rank": 3 - i, "target_rank": i + 1,
             "exposure": ["held_out", "in_pretraining", "unknown"][i]}
        if ci:
            r.update(id_f1_macro_ci_low=r["id_f1_macro"] - 0.01, id_f1_macro_ci_high=r["id_f1_macro"] + 0.01,
                     f1_macro_ci_low=r["f1_macro"] - 0.03, f1_macro_ci_high=r["f1_macro"] + 0.02)
        rows.append(r)
    return pd.DataFrame(rows)


def reliability() -> pd.DataFrame:
    rows = []
    for arm, m, b in itertools.product(["raw", "cbr"], MODELS, range(15)):
        conf = (b + 0.5) / 15
        rows.append({"task": "a_to_b", "probe": "logistic_std", "model": m, "arm": arm, "bin": b,
                     "confidence": conf, "accuracy": min(1.0, conf * 0.9 + 0.05), "count": 10 + b})
    return pd.DataFrame(rows)


def calibration_transfer() -> pd.DataFrame:
    rows = []
    for m, t in itertools.product(MODELS, TARGETS):
        r = {"task": f"src_to_{t}", "probe": "logistic_std", "pair": f"Src->{t}", "model": m}
        for arm, v in (("raw", 0.2), ("src", 0.15), ("oracle", 0.03), ("k4", 0.12), ("k8", 0.08), ("k16", 0.06),
                       ("k32", 0.04), ("cbr", 0.1)):
            r[f"calx_{arm}_ece_top"] = v
            r[f"calx_{arm}_nll"] = 3 * v
        rows.append(r)
    return pd.DataFrame(rows)


def scenarios() -> pd.DataFrame:
    rows = []
    for meth, prior, k in itertools.product(["tgtstd", "bbse", "cbr"], ["balanced", "neutrophil_heavy"], [16, 64, 256]):
        g = (0.02 if meth == "cbr" else -0.03 if prior == "neutrophil_heavy" else 0.01) * np.log2(k) / 8
        rows.append({"task": "src_to_Matek", "probe": "logistic_std", "prior": prior, "K": k, "method": meth,
                     "n_models": 3, "mean_gain": g, "min_gain": g - 0.01, "max_gain": g + 0.01, "models_hurt": int(g < 0)})
    return pd.DataFrame(rows)


def selector_regret() -> pd.DataFrame:
    rows = []
    for sel, prior in itertools.product(["id_acc", "entropy", "consensus"], ["target", "balanced", "skewed_a"]):
        cond = "target" if prior == "target" else "balanced" if prior == "balanced" else "skewed"
        rows.append({"task": "src_to_Matek", "probe": "logistic_std", "prior": prior, "K": None, "selector": sel,
                     "n_models": 3, "spearman": 0.5, "selected": "EncA", "oracle": "EncB",
                     "regret": 0.01 * (len(sel) % 4), "condition": cond})
    return pd.DataFrame(rows)


def exposure() -> pd.DataFrame:
    kinds = ["in_pretraining", "held_out", "unknown"]
    return pd.DataFrame([{"model": m, "task": f"src_to_{t}", "target_dataset": t, "exposure": kinds[(i + j) % 3],
                          "matched": t if kinds[(i + j) % 3] == "in_pretraining" else ""}
                         for i, m in enumerate(MODELS) for j, t in enumerate(TARGETS)])


def confusion() -> pd.DataFrame:
    rows = []
    for (i, m), t, tc, pc in itertools.product(enumerate(MODELS), TARGETS, CLASSES, CLASSES):
        count = (40 - 10 * i) if tc == pc else (5 + 5 * i if (tc, pc) == ("lymphocyte", "neutrophil") else 2)
        rows.append({"task": f"src_to_{t}", "probe": "logistic_std", "model": m, "target_dataset": t,
                     "true_class": tc, "pred_class": pc, "count": count})
    d = pd.DataFrame(rows)
    d["share"] = d["count"] / d.groupby(["model", "target_dataset", "true_class"])["count"].transform("sum")
    return d


def per_class_recall() -> pd.DataFrame:
    c = confusion()
    diag = c.loc[c["true_class"] == c["pred_class"]]
    return pd.DataFrame({"task": diag["task"], "probe": diag["probe"], "model": diag["model"],
                         "target_dataset": diag["target_dataset"], "class_name": diag["true_class"],
                         "recall": diag["share"], "n_true": 50})


def mechanism() -> pd.DataFrame:
    return pd.DataFrame([{"task": f"src_to_{t}", "probe": "logistic_std", "model": m, "target_dataset": t,
                          "synthetic": syn, "first_moment_shift": 0.3 + 0.2 * i + (0.5 if syn else 0),
                          "target_drop": 0.1 + 0.05 * i}
                         for i, m in enumerate(MODELS) for t in TARGETS for syn in (False, True)])


def effective_robustness() -> pd.DataFrame:
    m = rank_matrix(ci=False)
    m["line_f1"] = 0.65
    m["effective_robustness"] = m["f1_macro"] - m["line_f1"]
    m["x_spread"] = 0.016
    m["caveat"] = ""
    m["caveat"] = "in-domain spread tiny: the line is ill-posed"
    return m[["task", "probe", "model", "id_f1_macro", "f1_macro", "line_f1", "effective_robustness", "x_spread",
              "caveat"]]


FIGURES = {
    "rank_scatter": (af.rank_scatter, rank_matrix),
    "reliability": (af.reliability_diagrams, reliability),
    "k_curve": (af.k_curve, calibration_transfer),
    "gain_by_prior": (af.gain_by_prior, scenarios),
    "selector_regret": (af.selector_regret_figure, selector_regret),
    "exposure": (af.exposure_figure, exposure),
    "per_class_recall": (af.per_class_recall_figure, per_class_recall),
    "confusion": (af.confusion_figure, confusion),
    "mechanism": (af.mechanism_scatter, mechanism),
    "effective_robustness": (af.effective_robustness_figure, effective_robustness),
}


def test_each_figure_draws_nothing_without_its_table():
    for name, (draw, table) in FIGURES.items():
        assert draw(None) is None and draw(pd.DataFrame()) is None, name
        assert draw(table().iloc[:0]) is None, name  # the columns but no rows
        assert name in af.NOT_SHOWN


class _View:
    """The two things audit_sections reads of a report view: tables by stem and the headline."""

    def __init__(self, tables: dict[str, pd.DataFrame]):
        self.tables = {f"audit_{k}": v for k, v in tables.items()}
        self.headline = {}

    def table(self, stem):
        return self.tables.get(stem)


def test_audit_sections_draw_every_figure_and_say_why_when_a_table_is_missing():
    from prism_plugin.studies.hematology.sections import audit_sections

    full = {name: table() for name, (_draw, table) in FIGURES.items()}
    full["rank_matrix"] = full.pop("rank_scatter")
    full["adaptation_scenarios"] = full.pop("gain_by_prior")
    full["calibration_transfer"] = full.pop("k_curve")
    full["adaptation_methods"] = (full["adaptation_scenarios"].groupby(["probe", "K", "method"], as_index=False)
                                  .agg(mean_gain=("mean_gain", "mean"), range_low=("min_gain", "min"),
                                       range_high=("max_gain", "max")))
    sections = {s.key: s for s in audit_sections(_View(full))}
    figures = {name: s.figures[name] for s in sections.values() for name in s.figures}
    # every figure function, through the section that shows it: a PNG of a sensible size
    for name in ("audit-rank-scatter.png", "audit-reliability.png", "audit-k-curve.png", "audit-gain-by-prior.png",
                 "audit-selector-regret.png", "audit-exposure.png", "audit-per-class-recall.png", "audit-confusion.png",
                 "audit-mechanism.png", "audit-effective-robustness.png"):
        _png(figures[name])
    assert all(s.captions.get(n) for s in sections.values() for n in s.figures)
    assert not any(s.not_shown for s in sections.values())
    html = sections["audit-exposure"].html
    assert "held out</span>" in html and "<script" not in html and "http" not in html  # no external assets
    # only the rank matrix: each figure family's section says what is missing and why
    bare = {s.key: s for s in audit_sections(_View({"rank_matrix": rank_matrix(ci=False)}))}
    assert "audit-rank-scatter.png" in bare["audit-rank"].figures
    notes = {k: " ".join(s.not_shown) for k, s in bare.items()}
    assert "reliability diagrams: the audit has no reliability table" in notes["audit-calibration"]
    assert "few-shot K curve" in notes["audit-calibration"]
    assert "exposure grid: the audit has no exposure table" in notes["audit-exposure"]
    assert "per_class_recall" in notes["audit-per-class"] and "confusion" in notes["audit-per-class"]
    assert "mechanism" in notes["audit-mechanism"] and "effective_robustness" in notes["audit-effective-robustness"]
    assert not any(bare[k].figures for k in ("audit-calibration", "audit-exposure", "audit-per-class"))



# --------------------------------------------------------------------------- shift kinds
def _shift_workspace(root: Path) -> tuple[Path, Path]:
    from tests.conftest import write_precomputed

    emb = root / "emb"
    write_precomputed(emb / "S", {"train": 40, "val": 20, "test": 20}, dim=4)
    write_precomputed(emb / "T", {"train": 20, "test": 20}, dim=4, seed=1)
    tasks = root / "tasks"
    tasks.mkdir()
    grid = "label_fractions: [0.5, 1.0]\nseeds: [1]\n"
    (tasks / "s.yaml").write_text("task: s\ndataset: S\nclass_names: [a, b]\nsource: {type: precomputed}\n"
                                  "splits: {train: train, val: val, test: test}\n" + grid)
    (tasks / "t.yaml").write_text("task: t\ndataset: T\nclass_names: [a, b]\nsource: {type: precomputed}\n"
                                  "splits: {train: train, test: test}\n" + grid)
    for name, shift in (("site", "covariate"), ("labels", "label_definition"), ("plain", None)):
        (tasks / f"{name}.yaml").write_text(
            f"task: {name}\nkind: transfer\nsource_task: s\ntarget_task: t\nclass_names: [a, b]\npair: {name}\n"
            + (f"shift: {shift}\n" if shift else "") + grid)
    return emb, tasks


def test_shift_key_validation_and_validate_hint(tmp_path, capsys):
    from prism_plugin.cli import main

    _emb, tasks = _shift_workspace(tmp_path)
    (tasks / "typo.yaml").write_text("task: typo\nkind: transfer\nsource_task: s\ntarget_task: t\nshift: covarite\n")
    (tasks / "indom.yaml").write_text("task: indom\ndataset: S\nclass_names: [a, b]\nsource: {type: precomputed}\n"
                                      "splits: {train: train, val: val, test: test}\nshift: covariate\n")
    assert main(["validate", "typo", "--include-path", str(tasks)]) == 2
    err = capsys.readouterr().err
    assert "typo.yaml" in err and "shift" in err and "did you mean 'covariate'" in err
    assert main(["validate", "indom", "--include-path", str(tasks)]) == 2
    assert "only applies to kind: transfer" in capsys.readouterr().err
    assert main(["validate", "site", "plain", "--include-path", str(tasks)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok  ") == 2 and out.count("hint  ") == 1 and "hint  plain" in out and "`shift: covariate`" in out


def test_shift_kinds_reach_runs_tables_and_the_verdict(tmp_path, capsys):
    from prism_plugin.cli import main
    from prism_plugin.report import derived
    from prism_plugin.report.verdict import build_verdict
    from prism_plugin.report.verdict_rows import check_verdict
    from prism_plugin.summaries import mechanism
    from prism_plugin.tables import tables_from_results

    emb, tasks = _shift_workspace(tmp_path)
    out = tmp_path / "out"
    assert main(["--task", "site", "--task", "labels", "--task", "plain", "--include-path", str(tasks), "--model",
                 "precomputed", "--model-args", f"root={emb},name=M", "--quiet", "--no-report", "--disable",
                 "adaptation", "--disable", "temperature_transfer", "--output", str(out)]) == 0
    capsys.readouterr()
    runs = {n: pd.read_csv(next((out / n).rglob("runs.csv"))) for n in ("site", "labels", "plain")}
    assert runs["site"]["shift"].tolist() == ["covariate"] * 2
    assert runs["labels"]["shift"].tolist() == ["label_definition"] * 2
    assert "shift" not in runs["plain"].columns  # a task without the key: runs.csv as before
    tables = tables_from_results([out])
    assert set(tables.covariate_transfer["pair"]) == {"site"}  # never in the label-definition table
    assert dict(zip(tables.transfer["pair"], tables.transfer["shift"])) == {"labels": "label_definition",
                                                                            "plain": "undeclared"}
    summary = derived.summarize(tables, {})
    settings = summary.tables["report_settings"]
    assert dict(zip(settings["setting"], settings["shift"])) == {"labels": "label_definition", "plain": "undeclared",
                                                                 "site": "covariate"}
    v = build_verdict(settings)
    assert check_verdict(v, summary.tables) == []
    tr = {r.setting: r.text for r in v.loc[v["topic"] == "transfer"].itertuples()}
    assert "in the paper" in tr["labels"] and "label-definition bands" not in tr["labels"]
    assert "covariate shift" in tr["site"] and "not applied" in tr["site"] and "in the paper" not in tr["site"]
    assert "shift kind not declared" in tr["plain"] and "add `shift: covariate`" in tr["plain"]
    assert "in the paper" not in tr["plain"]
    glance = " ".join(v.loc[v["topic"] == "glance", "text"])
    assert "label-definition transfer (setting: labels)" in glance
    assert "covariate-shift transfer (setting: site)" in glance
    assert "transfer (shift kind not declared) (setting: plain)" in glance
    # the mechanism summary keeps the release designs apart from the declared and undeclared ones
    mech = mechanism.summarize(tables, {})
    designs = dict(zip(mech.tables["mechanism_summary"]["pair"], mech.tables["mechanism_summary"]["design"]))
    assert designs == {"labels": "label-definition", "site": "declared-covariate", "plain": "shift-undeclared"}
    assert any("without `shift:`" in n for n in mech.notes)


def test_release_transfer_table_keeps_its_label_definition_meaning():
    from prism_plugin.report import derived
    from prism_plugin.report.verdict import build_verdict
    from prism_plugin.tables import RunTables

    rows = [{"model": "M", "src": "A", "tgt": "B", "pair": "A->B", "fraction": f, "seed": s, "auroc": 0.7,
             "f1_macro": 0.6, "ece_fixed": 0.1 + f / 10, "ece_scaled_fixed": 0.1, "temperature_src": 1.5}
            for f in (0.1, 1.0) for s in (1, 2)]
    settings = derived.summarize(RunTables(transfer=pd.DataFrame(rows)), {}).tables["report_settings"]
    assert settings["shift"].tolist() == ["label_definition"]
    text = build_verdict(settings).query("topic == 'transfer'")["text"].iloc[0]
    assert "does not transfer well" in text and "0.85" in text
