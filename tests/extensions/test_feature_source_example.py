"""A third party's feature source reads vectors without images: the example package's ``csv_vectors``
(id, split, label, v0..vD per row) runs a task end to end with ``--model precomputed``, the CLI called in
this process with the example package installed (``install_once``: the session's pip installation, its entry
points read by a fresh plugin host inside ``installed_plugins``) and ``PIL.Image.open`` refusing to decode
any image; runs.csv and the report are written and nothing is extracted or cached. (The example's real
``prism-run`` subprocess run is in test_extension_example.py.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "prism-extension-example"
ORIGIN = "prism-extension-example 0.1.0"

TASK = """\
task: csv_demo
dataset: CsvDemo
class_names: [benign, malignant]
source: {{type: csv_vectors, file: {file}}}
splits: {{train: train, val: val, test: test}}
label_fractions: [0.5, 1.0]
seeds: [42]
"""


def vectors_csv(path: Path, d: int = 6, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    rows = []
    for split, n in (("train", 40), ("val", 16), ("test", 24)):
        for i in range(n):
            y = i % 2
            rows.append({"id": f"{split}-{i:03d}", "split": split, "label": ("benign", "malignant")[y],
                         **{f"v{k}": float(v) for k, v in enumerate(rng.normal(size=d) + 1.5 * y)}})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def refuse(*args, **kwargs):
    raise AssertionError("an image was decoded")


@pytest.fixture(scope="module")
def example(install_once, tmp_path_factory):
    import PIL.Image

    from tests.conftest import installed_plugins, run_main

    target = install_once(EXAMPLE)["_TARGET"]
    root = tmp_path_factory.mktemp("feature-source")
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "csv_demo.yaml").write_text(TASK.format(file=vectors_csv(root / "vectors.csv")))
    out = root / "out"
    run = ["--task", "csv_demo", "--include-path", str(tasks), "--model", "precomputed", "--model-args",
           "name=CsvEncoder", "--output", str(out)]
    env = {"PRISM_CACHE_DIR": str(root / "cache")}
    # PIL cannot open an image in these calls: a feature source must never decode one
    with pytest.MonkeyPatch.context() as mp, installed_plugins(target):
        mp.setattr(PIL.Image, "open", refuse)
        procs = [run_main(*argv, env=env) for argv in (["ls", "sources"], run, run)]
    for proc in procs:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return SimpleNamespace(root=root, out=out, ls=procs[0].stdout, first=procs[1].stdout, second=procs[2].stdout)


def test_ls_sources_lists_the_feature_source_with_its_kind_and_origin(example):
    line = next(line for line in example.ls.splitlines() if line.startswith("csv_vectors"))
    assert line.split()[1] == "features" and ORIGIN in line, line


def test_a_task_on_csv_vectors_runs_with_no_image_and_no_extraction(example):
    runs = pd.read_csv(example.out / "runs.csv")
    assert len(runs) == 2 and set(runs["model"]) == {"CsvEncoder"} and set(runs["fraction"]) == {0.5, 1.0}
    assert runs["f1_macro"].min() > 0.7  # the classes are separable in the vectors
    summary = json.loads((example.out / "summary.json").read_text())
    assert summary["timings"]["extracted_tiles"] == 0
    cache = example.root / "cache"
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))
    assert "CsvDemo" in (example.out / "report.html").read_text()


def test_the_second_run_resumes_every_run(example):
    first, second = example.first, example.second
    assert "CsvEncoder on csv_demo (2 runs;" in first and "CsvEncoder on csv_demo (2 runs, 2 reused;" in second


def _module():
    spec = importlib.util.spec_from_file_location(
        "_example_vectors", EXAMPLE / "src" / "prism_extension_example" / "vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fingerprint_follows_ids_labels_and_values(tmp_path):
    from prism_plugin.errors import PrismError

    mod = _module()
    task = SimpleNamespace(name="t", file="t.yaml", dataset="d", n_classes=2, class_names=("benign", "malignant"))
    csv = vectors_csv(tmp_path / "v.csv")
    one = mod.CsvVectorsSource(task, file=str(csv)).features("test")
    assert one.X.shape == (24, 6) and one.y.tolist() == [0, 1] * 12
    assert mod.CsvVectorsSource(task, file=str(csv)).features("test").fingerprint == one.fingerprint
    table = pd.read_csv(csv)
    table.loc[table["split"] == "test", "v3"] += 1e-3
    table.to_csv(csv, index=False)
    changed = mod.CsvVectorsSource(task, file=str(csv)).features("test")
    assert changed.fingerprint != one.fingerprint
    assert mod.CsvVectorsSource(task, file=str(csv)).features("train").fingerprint != changed.fingerprint
    with pytest.raises(PrismError, match=r"no rows with split 'heldout' \(splits there: test, train, val\)"):
        mod.CsvVectorsSource(task, file=str(csv)).features("heldout")
