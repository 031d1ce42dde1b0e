"""eva users' embeddings folders (feature source ``eva``, ``prism-run eva DIR``) on files eva's own writer wrote.

Every folder here comes from ``eva.core.callbacks.writers.embeddings.ClassificationEmbeddingsWriter`` run through a
real Lightning ``predict`` (tests/eva/eva_writer.py); the bad-input cases damage a copy of such a folder.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import needs, prism_run, run_main

needs("lightning")
needs("eva.core.callbacks.writers.embeddings")

from tests.eva.eva_writer import write_eva_embeddings  # noqa: E402

FAST = ("--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[42,123]", "--bootstrap", "0")


@pytest.fixture(scope="module")
def eva_folder(tmp_path_factory) -> Path:
    """eva's layout EMBEDDINGS_ROOT/<model>/<dataset>: 3 classes, train/val/test."""
    root = tmp_path_factory.mktemp("eva") / "my_backbone" / "toy_bach"
    return write_eva_embeddings(root, n_classes=3, sizes=(("train", 60), ("val", 30), ("test", 45)))


def _independent(folder: Path, split: str) -> tuple[np.ndarray, list[int]]:
    """The split's vectors and targets read with csv + torch.load, not through prism_plugin."""
    import torch

    with open(folder / "manifest.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["split"] == split]
    vectors = []
    for r in rows:
        saved = torch.load(folder / r["embeddings"], map_location="cpu")
        assert isinstance(saved, list) and len(saved) == 1  # what eva's writer saves for one sample
        vectors.append(saved[0].numpy())
    return np.stack(vectors), [int(r["target"]) for r in rows]


def _copy(folder: Path, tmp_path: Path) -> Path:
    dest = tmp_path / folder.parent.name / folder.name
    shutil.copytree(folder, dest)
    return dest


def _source(folder: Path, class_names=("a", "b", "c"), **options):
    from types import SimpleNamespace

    from prism_plugin.data.eva import EvaEmbeddingsSource

    task = SimpleNamespace(name="t", file="t.yaml", dataset="d", class_names=tuple(class_names),
                           n_classes=len(class_names), splits={}, split=None, extras={})
    return EvaEmbeddingsSource(task, root=str(folder), **options)


def test_the_writer_wrote_what_eva_writes(eva_folder):
    header = (eva_folder / "manifest.csv").read_text().splitlines()[0]
    assert header == "origin,embeddings,target,split"
    assert sorted(p.name for p in eva_folder.iterdir()) == ["manifest.csv", "test", "train", "val"]


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_features_are_the_tensors_eva_saved(eva_folder, split):
    X, targets = _independent(eva_folder, split)
    got = _source(eva_folder).features(split)
    assert got.X.dtype == np.float32 and got.X.shape == X.shape
    np.testing.assert_array_equal(got.X, X)
    assert got.y.tolist() == targets


def test_fingerprint_changes_with_one_vector(eva_folder, tmp_path):
    import torch

    folder = _copy(eva_folder, tmp_path)
    before = _source(folder).features("test").fingerprint
    assert _source(folder).features("test").fingerprint == before  # stable
    file = folder / "test" / "sample_0003.pt"
    saved = torch.load(file)
    saved[0] = saved[0] + 1e-3
    torch.save(saved, file)
    assert _source(folder).features("test").fingerprint != before


def test_one_command_report_and_resume(eva_folder, tmp_path):
    """`prism-run eva DIR`: a real subprocess writes runs.csv, summary.json and the report; the same command
    again reuses every run and writes a byte-identical runs.csv."""
    out = tmp_path / "results"
    args = ("eva", str(eva_folder), "--class-names", "normal,benign,tumour", "--output", str(out), *FAST)
    first = prism_run(*args, check=True)
    assert "task " in first.stdout and "eva_tasks" in first.stdout
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and set(runs["model"]) == {"my_backbone"} and set(runs["task"]) == {"eva_toy_bach"}
    assert runs["auroc"].between(0, 1).all()
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    assert "tumour" in (out / "report.md").read_text()  # the class names given reach the report
    csv_bytes = (out / "runs.csv").read_bytes()
    prism_run(*args, check=True)
    assert (out / "runs.csv").read_bytes() == csv_bytes
    assert len(json.loads((out / "summary.json").read_text())["reused_cells"]) == 4


def test_classes_are_inferred_from_the_targets(eva_folder, tmp_path):
    out = tmp_path / "r"
    task_file = tmp_path / "t.yaml"
    res = run_main("eva", str(eva_folder), "--task-file", str(task_file), "--output", str(out), "--no-report",
                   "--quiet", *FAST)
    assert res.returncode == 0, res.stderr
    assert 'class_names: ["class_0", "class_1", "class_2"]' in task_file.read_text()
    # the written task runs as it is, with the main job
    again = run_main("--task", str(task_file), "--model", "precomputed", "--output", str(tmp_path / "r2"),
                     "--no-report", "--quiet", *FAST)
    assert again.returncode == 0, again.stderr
    a, b = pd.read_csv(out / "runs.csv"), pd.read_csv(tmp_path / "r2" / "runs.csv")
    assert a["auroc"].tolist() == b["auroc"].tolist()


def test_transfer_between_two_eva_folders(eva_folder, tmp_path):
    """Two eva folders as tasks (source type eva) and a transfer task between them."""
    other = write_eva_embeddings(tmp_path / "my_backbone" / "toy_shifted", n_classes=3, seed=7,
                                 sizes=(("train", 30), ("val", 15), ("test", 30)))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, root in (("eva_a", eva_folder), ("eva_b", other)):
        (tasks / f"{name}.yaml").write_text(
            f"task: {name}\ninclude: _prism_protocol.yaml\ndataset: {name}\nclass_names: [x, y, z]\n"
            f"source: {{type: eva, root: {root}}}\nsplits: {{train: train, val: val, test: test}}\n")
    (tasks / "eva_a_to_b.yaml").write_text(
        "task: eva_a_to_b\nkind: transfer\nshift: covariate\ninclude: _prism_protocol.yaml\n"
        "source_task: eva_a\ntarget_task: eva_b\nclass_names: [x, y, z]\n")
    res = run_main("--task", "eva_a_to_b", "--include-path", str(tasks), "--model", "precomputed",
                   "--output", str(tmp_path / "out"), "--no-report", "--quiet", *FAST)
    assert res.returncode == 0, res.stderr
    assert len(pd.read_csv(tmp_path / "out" / "runs.csv")) == 4


def test_multi_embedding_files_are_refused_or_averaged(tmp_path):
    import torch

    folder = write_eva_embeddings(tmp_path / "m" / "mil", shared_names=True,
                                  sizes=(("train", 24), ("val", 12), ("test", 12)))
    saved = torch.load(folder / "test" / "sample_0000.pt")
    assert len(saved) == 2  # eva's writer put both predictions of the shared name in one file
    with pytest.raises(Exception, match="holds 2 embeddings.*source.aggregate: mean"):
        _source(folder, ("a", "b")).features("test")
    got = _source(folder, ("a", "b"), aggregate="mean").features("test")
    np.testing.assert_allclose(got.X[0], (saved[0] + saved[1]).numpy() / 2, rtol=1e-6)
    assert len(got.X) == 6


def _error(*args) -> str:
    res = run_main(*args, "--no-report", "--quiet", *FAST)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("prism-run: error:")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def test_bad_folders_give_one_line(eva_folder, tmp_path):
    out = str(tmp_path / "out")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "manifest.csv: no eva manifest here" in _error("eva", str(empty), "--output", out)
    assert "does not exist" in _error("eva", str(tmp_path / "nowhere"), "--output", out)

    folder = _copy(eva_folder, tmp_path)
    assert "no split 'holdout' for PRISM's test split" in _error("eva", str(folder), "--test", "holdout",
                                                                  "--output", out)
    assert "--class-names lists 2 names" in _error("eva", str(folder), "--class-names", "a,b", "--output", out)

    (folder / "test" / "sample_0002.pt").unlink()
    line = _error("eva", str(folder), "--output", out)
    assert "sample_0002.pt: listed in the manifest but missing" in line


def test_bad_tensors_and_targets_give_one_line(eva_folder, tmp_path):
    import torch

    out = str(tmp_path / "out")
    folder = _copy(eva_folder, tmp_path)
    torch.save([torch.zeros(197, 16)], folder / "val" / "sample_0001.pt")  # patch tokens, not one vector
    assert "an embedding of shape (197, 16)" in _error("eva", str(folder), "--output", out)

    folder = _copy(eva_folder, tmp_path / "b")
    torch.save([torch.zeros(8)], folder / "train" / "sample_0001.pt")
    assert "mixes embedding lengths" in _error("eva", str(folder), "--output", out)

    folder = _copy(eva_folder, tmp_path / "c")
    text = (folder / "manifest.csv").read_text().splitlines()
    text[5] = ",".join(text[5].split(",")[:2] + ["", text[5].split(",")[3]])
    (folder / "manifest.csv").write_text("\n".join(text) + "\n")
    assert "manifest.csv:6: no target" in _error("eva", str(folder), "--output", out)

    (folder / "manifest.csv").write_text("path,label\nx.pt,1\n")
    assert "not an eva embeddings manifest" in _error("eva", str(folder), "--output", out)


def test_source_type_is_a_feature_source():
    from prism_plugin.plugins import PluginHost

    host = PluginHost(third_party=False)
    assert host.sources.meta("eva", "kind") == "features"
    assert "eva" in host.commands.names()
