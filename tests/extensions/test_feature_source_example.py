"""A third party's feature source reads vectors without images: the example package's ``csv_vectors``
(id, split, label, v0..vD per row) runs a task end to end with ``--model precomputed`` in a real
``prism-run`` process, where decoding any image fails; runs.csv and the report are written and
nothing is extracted or cached."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "prism-extension-example"
ORIGIN = "prism-extension-example 0.1.0"

#: the CLI in a process where PIL cannot open an image: a feature source must never decode one
SCRIPT = """
import sys
import PIL.Image

def refuse(*args, **kwargs):
    raise AssertionError("an image was decoded")

PIL.Image.open = refuse
from prism_plugin.cli import main
for argv in (a.split("|") for a in sys.argv[1:]):
    print("=== " + " ".join(argv), flush=True)
    rc = main(argv)
    sys.stdout.flush()
    print(f"=== rc {rc}", flush=True)
"""

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


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    from tests.conftest import pip_install_target

    if not EXAMPLE.is_dir():
        pytest.skip(f"{EXAMPLE} not found")
    root = tmp_path_factory.mktemp("feature-source")
    env = pip_install_target(EXAMPLE, root)
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "csv_demo.yaml").write_text(TASK.format(file=vectors_csv(root / "vectors.csv")))
    env = {**os.environ, "PYTHONPATH": env["PYTHONPATH"], "PRISM_CACHE_DIR": str(root / "cache")}
    out = root / "out"
    run = ["--task", "csv_demo", "--include-path", str(tasks), "--model", "precomputed", "--model-args",
           "name=CsvEncoder", "--output", str(out)]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "ls|sources", "|".join(run), "|".join(run)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.stdout.count("=== rc 0") == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    return SimpleNamespace(root=root, out=out, stdout=proc.stdout)


def test_ls_sources_lists_the_feature_source_with_its_kind_and_origin(example):
    line = next(line for line in example.stdout.splitlines() if line.startswith("csv_vectors"))
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
    first, second = example.stdout.split("=== --task")[1:]
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
