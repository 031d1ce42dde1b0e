"""Descriptive task keys (``results=False``: ``shift``, ``dataset_aliases``) and the report per probe.

* Declaring a descriptive key on a task whose runs are finished keeps every run reusable (no
  ``--overwrite``), and the resumed ``runs.csv`` (now with its ``shift`` column) equals a fresh
  run's byte for byte.
* A key that changes numbers (``priors``) still makes the finished runs "computed from other inputs".
* ``report.build.probes_apart`` gives each probe of a model (over all its tables) its own ``model``
  line, and leaves results where every model has one probe untouched.
"""

from __future__ import annotations

import json

import pandas as pd

from prism_plugin import cli
from tests.conftest import write_precomputed

SOURCE = """task: src_t
dataset: Sset
class_names: [a, b]
source: {type: precomputed}
splits: {train: train, val: val, test: test}
"""
TARGET = SOURCE.replace("src_t", "tgt_t").replace("Sset", "Tset")
TRANSFER = """task: tr_t
kind: transfer
source_task: src_t
target_task: tgt_t
class_names: [a, b]
label_fractions: [0.5, 1.0]
seeds: [0]
adaptation: []
"""


def _setup(tmp_path):
    emb = tmp_path / "emb"
    write_precomputed(emb / "Sset", {"train": 30, "val": 12, "test": 12})
    write_precomputed(emb / "Tset", {"train": 30, "val": 12, "test": 12}, seed=4)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "src_t.yaml").write_text(SOURCE)
    (tasks / "tgt_t.yaml").write_text(TARGET)
    (tasks / "tr_t.yaml").write_text(TRANSFER)
    return tasks, emb


def _run(capsys, tasks, emb, out, *extra):
    rc = cli.main(["--task", "tr_t", "--include-path", str(tasks), "--model", "precomputed", "--model-args",
                   f"root={emb}", "--output", str(out), "--quiet", "--no-report", *extra])
    captured = capsys.readouterr()
    return rc, captured.err


def test_declaring_shift_later_reuses_every_finished_run(tmp_path, capsys):
    tasks, emb = _setup(tmp_path)
    out = tmp_path / "out"
    assert _run(capsys, tasks, emb, out)[0] == 0
    assert "shift" not in pd.read_csv(out / "runs.csv")
    (tasks / "tr_t.yaml").write_text(TRANSFER + "shift: covariate\n")
    rc, err = _run(capsys, tasks, emb, out)
    assert rc == 0, err
    assert len(json.loads((out / "summary.json").read_text())["reused_cells"]) == 2
    resumed = (out / "runs.csv").read_bytes()
    fresh = tmp_path / "fresh"
    assert _run(capsys, tasks, emb, fresh)[0] == 0
    assert resumed == (fresh / "runs.csv").read_bytes()
    assert set(pd.read_csv(fresh / "runs.csv")["shift"]) == {"covariate"}


def test_a_key_that_changes_numbers_still_refuses_the_finished_runs(tmp_path, capsys):
    tasks, emb = _setup(tmp_path)
    out = tmp_path / "out"
    assert _run(capsys, tasks, emb, out)[0] == 0
    (tasks / "tr_t.yaml").write_text(TRANSFER.replace("adaptation: []\n", "") +
                                     "adaptation: [tgtstd]\n")
    rc, err = _run(capsys, tasks, emb, out)
    assert rc == 2 and "computed from other inputs" in err and "--overwrite" in err


def test_probes_apart_labels_each_probe_and_keeps_single_probe_tables():
    from prism_plugin.report.build import probes_apart
    from prism_plugin.tables import RunTables

    two = pd.DataFrame({"model": ["M", "M", "N"], "probe": ["logistic_std", "knn1", "logistic"], "auroc": [1, 2, 3]})
    one = pd.DataFrame({"model": ["M", "N"], "probe": ["logistic", "logistic"], "auroc": [1, 2]})
    got = probes_apart(RunTables(indomain=two, transfer=one))
    assert got.indomain.model.tolist() == ["M · logistic_std", "M · knn1", "N"]
    # M has several probes over the tables together: labelled per probe in every table (one label per line)
    assert got.transfer.model.tolist() == ["M · logistic", "N"]
    assert two.model.tolist() == ["M", "M", "N"] and one.model.tolist() == ["M", "N"]  # inputs not modified
    same = RunTables(indomain=one)
    assert probes_apart(same) is same
