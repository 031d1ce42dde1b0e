"""A group of tiny user tasks run end to end by `prism-run` in a subprocess; a catalogue task run on an
embedding tree in the PRISM release layout."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from tests.conftest import run_main


def _images(root: Path, layout: dict[str, dict[str, int]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    for split, classes in layout.items():
        for k, (cname, n) in enumerate(classes.items()):
            for i in range(n):
                base = np.full((32, 32, 3), (60 + 120 * k, 90, 160 - 80 * k), dtype=np.int16)
                img = np.clip(base + rng.integers(-40, 40, base.shape), 0, 255).astype(np.uint8)
                (root / split / cname).mkdir(parents=True, exist_ok=True)
                Image.fromarray(img).save(root / split / cname / f"{i:02d}.png")


def test_group_of_tiny_tasks_runs_and_writes_one_table(tmp_path, capsys):
    data, tasks, out = tmp_path / "data", tmp_path / "tasks", tmp_path / "out"
    _images(data / "tiny", {s: {"normal": 6, "tumour": 6} for s in ("train", "val", "test")}, 0)
    _images(data / "tiny_flat", {"": {"normal": 10, "tumour": 10}}, 1)
    tasks.mkdir()
    (tasks / "tiny_one.yaml").write_text(textwrap.dedent("""\
        task: tiny_one
        dataset: Tiny-One
        class_names: [normal, tumour]
        source: {type: imagefolder, root: tiny}
        splits: {train: train, val: val, test: test}
        """))
    (tasks / "tiny_two.yaml").write_text(textwrap.dedent("""\
        task: tiny_two
        dataset: Tiny-Two
        class_names: [normal, tumour]
        source: {type: imagefolder, root: tiny_flat, layout: flat}
        split: {procedure: stratified, seed: 0, parts: {train: 0.6, heldout: 0.4}}
        splits: {train: train, val: heldout, test: heldout}
        allow_split_overlap: [val, test]
        seeds: [1, 2]
        """))
    (tasks / "tiny_transfer.yaml").write_text(textwrap.dedent("""\
        task: tiny_transfer
        kind: transfer
        source_task: tiny_one
        target_task: tiny_two
        class_names: [normal, tumour]
        """))
    (tasks / "tinygroup.yaml").write_text(textwrap.dedent("""\
        group: tinygroup
        description: three tiny tasks
        label_fractions: [1.0]
        seeds: [42]
        tasks: [tiny_one, tiny_two, tiny_transfer]
        """))
    env = {"PRISM_DATA_DIR": str(data), "PRISM_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_main("--task", "tinygroup", "--model", "demo_vit", "--include-path", str(tasks), "--limit", "8",
                    "--output", str(out), "--no-report", "--quiet", "--num-workers", "0", env=env)
    assert proc.returncode == 0, proc.stderr
    combined = pd.read_csv(out / "tinygroup" / "runs.csv")
    assert combined.task.tolist() == ["tiny_one", "tiny_two", "tiny_two", "tiny_transfer"]  # group order
    assert combined.seed.tolist() == [42, 1, 2, 42]  # tiny_two's own seeds beat the group's
    assert combined.dataset.tolist()[:3] == ["Tiny-One", "Tiny-Two", "Tiny-Two"]
    assert combined.pair.tolist()[-1] == "Tiny-One->Tiny-Two"
    parts = []
    for name in ("tiny_one", "tiny_two", "tiny_transfer"):
        d = out / "tinygroup" / name / "DemoViT-Tiny"
        parts.append(pd.read_csv(d / "runs.csv"))
        summary = json.loads((d / "summary.json").read_text())
        assert summary["fingerprints"]["data"], name  # the dataset fingerprint of every split
    assert len(pd.concat(parts)) == len(combined)
    assert summary["fingerprints"]["data"]["target_test"] == json.loads(
        (out / "tinygroup" / "tiny_two" / "DemoViT-Tiny" / "summary.json").read_text())["fingerprints"]["data"]["test"]
    assert combined.n_train.tolist()[0] == 8  # --limit 8 items per split
    from prism_plugin.cli import main

    assert main(["ls", "groups", "--include-path", str(tasks)]) == 0
    assert str(tasks / "tinygroup.yaml") in capsys.readouterr().out


def test_catalogue_task_reads_the_prism_embedding_release_layout(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "embeddings" / "UNI"
    for split, n in (("train", 483), ("val", 103), ("test", 105)):
        y = np.arange(n) % 7
        X = rng.normal(size=(n, 8)) + np.eye(7, 8)[y] * 3
        (root / "lunghist700").mkdir(parents=True, exist_ok=True)
        np.save(root / "lunghist700" / f"{split}_features.npy", (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32))
        np.save(root / "lunghist700" / f"{split}_labels.npy", y)
    out = tmp_path / "out"
    proc = run_main("--task", "prism_lunghist700", "--model", "precomputed", "--model-args", f"root={root}",
                    "--set", "label_fractions=[0.25,1.0]", "--set", "seeds=[42]", "--output", str(out),
                    "--no-report", "--quiet")
    assert proc.returncode == 0, proc.stderr
    runs = pd.read_csv(out / "runs.csv")
    assert runs.dataset.unique().tolist() == ["LungHist700"] and runs.model.unique().tolist() == ["UNI"]
    assert runs.n_train.tolist() == [7 * 17, 483] and (runs.auroc > 0.9).all()
