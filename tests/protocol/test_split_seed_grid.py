"""The audit's protocol as grid dimensions: ``split_seeds`` x ``probes`` x fraction x seed.

Precomputed pools (``all_features.npy``) split by the task's ``split:`` procedure for every split
seed; a tiny image folder for the embedding reuse across split seeds (extractions counted).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from prism_plugin import cli
from prism_plugin.errors import PrismError
from tests.conftest import write_precomputed

POOLED = """task: {name}
dataset: {dataset}
class_names: [a, b]
source: {{type: precomputed}}
split: {{procedure: stratified, seed: 0, parts: {{train: 0.7, heldout: 0.3}}}}
splits: {{train: train, val: heldout, test: heldout}}
allow_split_overlap: [val, test]
label_fractions: [1.0]
adaptation: []
"""
GRID = "split_seeds: [0, 1]\nprobes: [logistic_std, knn1]\nseeds: [0]\ntemperature_bounds: [0.9, 1.1]\n"
PLAIN = """task: plain
dataset: plainset
class_names: [a, b]
source: {type: precomputed}
splits: {train: train, val: val, test: test}
label_fractions: [0.5, 1.0]
seeds: [0, 1]
"""


@pytest.fixture
def setup(tmp_path):
    emb = tmp_path / "emb"
    write_precomputed(emb / "Gset", {"all": 48}, n_classes=2)
    write_precomputed(emb / "Tset", {"all": 40}, n_classes=2, seed=3)
    write_precomputed(emb / "plainset", {"train": 24, "val": 12, "test": 12}, n_classes=2, seed=1)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "gt.yaml").write_text(POOLED.format(name="gt", dataset="Gset") + GRID)
    (tasks / "tt.yaml").write_text(POOLED.format(name="tt", dataset="Tset"))
    (tasks / "tr.yaml").write_text("task: tr\nkind: transfer\nsource_task: gt\ntarget_task: tt\nclass_names: [a, b]\n"
                                   "label_fractions: [1.0]\nseeds: [0]\nsplit_seeds: [0, 1, 2]\nprobes: [knn1]\n"
                                   "adaptation: []\n")
    (tasks / "plain.yaml").write_text(PLAIN)
    (tasks / "g.yaml").write_text("group: g\ntasks: [gt, plain]\n")
    return tmp_path


def run(setup, capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(["--include-path", str(setup / "tasks"), "--model", "precomputed", "--model-args",
                   f"root={setup / 'emb'}", "--no-report", "--cache-dir", str(setup / "cache"), *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_grid_columns_group_and_resume(setup, capsys):
    out = setup / "res"
    rc, stdout, err = run(setup, capsys, "--task", "g", "--output", str(out))
    assert rc == 0, err
    runs = pd.read_csv(out / "g" / "gt" / "emb" / "runs.csv")
    # split seed x probe x fraction x seed, in that order; the probe column names the kind
    assert list(zip(runs["split_seed"], runs["probe"])) == [
        (sp, pr) for sp in (0, 1) for pr in ("logistic_std", "knn1")]
    assert list(runs.columns[:5]) == ["model", "dataset", "fraction", "seed", "split_seed"]
    assert (runs["n_train"] == 33).all() and (runs["n_test"] == 15).all()
    cells = sorted(p.stem for p in (out / "g" / "gt" / "emb" / "cells").iterdir())
    assert cells == sorted(f"gt--f1-s0-split{sp}-{pr}" for sp in (0, 1) for pr in ("logistic_std", "knn1"))
    summary = json.loads((out / "g" / "gt" / "emb" / "summary.json").read_text())
    assert summary["pretraining_data"] is None and summary["n_runs"] == 4
    assert summary["grid"]["split_seeds"] == [0, 1] and summary["grid"]["probes"] == ["logistic_std", "knn1"]
    data = summary["fingerprints"]["data"]
    assert data["split_seed=0"]["train"] != data["split_seed=1"]["train"]  # other splits of the same pool
    assert [(c["probe"], c["n_runs"]) for c in summary["cells"]] == [("logistic_std", 2), ("knn1", 2)]
    bound = [f for f in summary["flags"] if f["flag"] == "temperature_at_bound"]
    assert bound and all(c.startswith("f1-s") and "-split" in c for c in bound[0]["cells"])
    # the console table: one line per probe and fraction, flags counted per probe
    assert "logistic_std         1" in stdout and "knn1                 1" in stdout and "T@bound" in stdout
    # the group table: both members, split_seed blank for the task without split_seeds
    group = pd.read_csv(out / "g" / "runs.csv")
    assert len(group) == 4 + 4 and group["split_seed"].isna().sum() == 4
    header, first_row = (out / "g" / "runs.csv").read_text().splitlines()[:2]
    assert first_row.split(",")[header.split(",").index("split_seed")] == "0"  # an integer, not 0.0
    # a task without split_seeds/probes keeps its run ids, cells and columns
    plain = out / "g" / "plain" / "emb"
    assert sorted(p.stem for p in (plain / "cells").iterdir()) == [f"plain--f{f}-s{s}" for f in ("0.5", "1")
                                                                  for s in (0, 1)]
    assert "split_seed" not in pd.read_csv(plain / "runs.csv")
    plain_before = (plain / "runs.csv").read_bytes()
    # resume: one deleted cell is the only run recomputed; runs.csv is byte-identical
    before = (out / "g" / "gt" / "emb" / "runs.csv").read_bytes()
    (out / "g" / "gt" / "emb" / "cells" / "gt--f1-s0-split1-knn1.json").unlink()
    rc, stdout, err = run(setup, capsys, "--task", "g", "--output", str(out), "--quiet")
    assert rc == 0, err
    summary = json.loads((out / "g" / "gt" / "emb" / "summary.json").read_text())
    assert summary["reused_cells"] == ["f1-s0-split0-logistic_std", "f1-s0-split0-knn1", "f1-s0-split1-logistic_std"]
    assert (out / "g" / "gt" / "emb" / "runs.csv").read_bytes() == before
    assert (plain / "runs.csv").read_bytes() == plain_before
    # a smaller grid would drop finished runs: refused, naming them
    rc, _, err = run(setup, capsys, "--task", "gt", "--output", str(out / "g" / "gt" / "emb"),
                     "--set", "split_seeds=[0]")
    assert rc == 2 and "f1-s0-split1" in err and "--overwrite" in err


def test_probe_flag_means_one_probe_and_transfer_keeps_its_target(setup, capsys):
    out = setup / "one"
    rc, _, err = run(setup, capsys, "--task", "gt", "--output", str(out), "--quiet", "--probe", "knn1",
                     "--set", "split_seeds=[1]")
    assert rc == 0, err
    runs = pd.read_csv(out / "runs.csv")
    assert runs["probe"].tolist() == ["knn1"] and runs["split_seed"].tolist() == [1]
    assert [p.stem for p in (out / "cells").iterdir()] == ["gt--f1-s0-split1"]
    # a transfer task varies its source split only: the target's held-out examples are the same
    rc, _, err = run(setup, capsys, "--task", "tr", "--output", str(setup / "tr"), "--quiet")
    assert rc == 0, err
    runs = pd.read_csv(setup / "tr" / "runs.csv")
    assert runs["split_seed"].tolist() == [0, 1, 2] and (runs["probe"] == "knn1").all()
    # a one-probe `probes:` task: its run ids (cells, flags, artifacts) carry the probe, and runs.csv says so
    ids = [f"f1-s0-split{sp}-knn1" for sp in (0, 1, 2)]
    assert runs["run_id"].tolist() == ids
    assert sorted(p.stem for p in (setup / "tr" / "cells").iterdir()) == [f"tr--{i}" for i in ids]
    from prism_plugin.quality import all_run_ids

    assert all_run_ids(runs) == ids  # read back from the file, without the runner's attrs
    data = json.loads((setup / "tr" / "summary.json").read_text())["fingerprints"]["data"]
    assert len({d["target_test"] for d in data.values()}) == 1
    assert len({d["source_train"] for d in data.values()}) == 3


@pytest.mark.filterwarnings("ignore:task it")  # a pool of 12 images: few per class, on purpose
def test_pool_embeddings_are_reused_across_split_seeds(tmp_path, monkeypatch):
    from prism_plugin.embed import load
    from prism_plugin.plugins import get_host
    from prism_plugin.runner import JobOptions, run_job
    from prism_plugin.tasks.index import default_index

    from tests.conftest import mean_colour_adapter

    Means = mean_colour_adapter(8)

    rng = np.random.default_rng(0)
    for c, cls in enumerate(("a", "b")):
        (tmp_path / "img" / cls).mkdir(parents=True)
        for k in range(6):
            pixels = rng.integers(0, 120, (8, 8, 3)) + 100 * c
            Image.fromarray(pixels.astype(np.uint8)).save(tmp_path / "img" / cls / f"{k}.png")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "it.yaml").write_text(
        POOLED.format(name="it", dataset="It").replace("{type: precomputed}", f"{{type: imagefolder, root: "
                                                       f"{tmp_path / 'img'}, layout: flat}}")
        + "split_seeds: [0, 1]\nseeds: [0]\n")
    extracted: list[int] = []
    real = load.extract_split

    def counting(adapter, images, entry, **kw):
        extracted.append(len(images))
        return real(adapter, images, entry, **kw)

    monkeypatch.setattr(load, "extract_split", counting)
    host = get_host()
    index = default_index(host, [tmp_path / "tasks"])

    def job(out: str, *overrides: str):
        opts = JobOptions(output=tmp_path / out, cache_dir=tmp_path / "cache", device="cpu", num_workers=0,
                          progress=False, report=False, log=lambda _m: None)
        return run_job(index.load_task("it", list(overrides)), Means(normalize=False), host, opts)

    result = job("a")
    assert sum(extracted) == 12  # the pool once: split seed 0's train and held-out split
    assert result.summary["embedding_cache"]["split_seed=1"] == {"train": "reused", "val": "reused", "test": "reused"}
    assert result.summary["timings"]["reused_tiles"] == 4 + (8 + 4 + 4)  # 8/4 = the 70/30 split of 12
    assert result.runs["split_seed"].tolist() == [0, 1]
    # another split seed later (another folder): gathered from the cached entries of split.seed 0
    other = job("b", "split_seeds=[7]")
    assert sum(extracted) == 12 and other.summary["embedding_cache"]["train"] == "reused"
    # the rows of split seed 0 match a run of the same split without split_seeds (its own entries)
    plain = job("c", "split_seeds=null")
    assert sum(extracted) == 12 + 4  # that task's test entry was never extracted (val's rows served it)
    cols = ["f1_macro", "auroc", "ece_fixed"]
    assert np.array_equal(plain.runs[cols].to_numpy(float), result.runs[cols].to_numpy(float)[:1], equal_nan=True)


BAD = [
    ("split_seeds: [0, 0]\n", r"split_seeds: split seed 0 appears twice"),
    ("split_seeds: [a]\n", r"split_seeds: must list integers"),
    ("probes: [logistic_std, knn]\n", r":\d+: probes\[1\].kind: unknown probe head 'knn'.*knn1"),
    ("probes: [knn1, {kind: knn1}]\n", r"probes: kind 'knn1' appears twice"),
    ("probes: [logistic_std]\nsweep: {probe.C: [0.1, 1]}\n", r"probes: cannot be combined with sweep.*--probe"),
]


def test_bad_grid_keys_name_file_line_and_key(tmp_path):
    from prism_plugin.plugins import get_host
    from prism_plugin.tasks.index import TaskIndex

    for i, (extra, _) in enumerate(BAD):
        (tmp_path / f"t{i}.yaml").write_text(POOLED.format(name=f"t{i}", dataset="d") + extra)
    index = TaskIndex([tmp_path], get_host())
    for i, (_, message) in enumerate(BAD):
        with pytest.raises(PrismError, match=message) as info:
            index.load_task(f"t{i}")
        assert str(tmp_path / f"t{i}.yaml") in str(info.value)


def test_split_seeds_need_a_split_procedure(tmp_path):
    from prism_plugin.plugins import get_host
    from prism_plugin.tasks.builtin import builtin_task_dir
    from prism_plugin.tasks.index import TaskIndex

    (tmp_path / "plain.yaml").write_text(PLAIN + "split_seeds: [0, 1]\n")
    (tmp_path / "tr.yaml").write_text("task: tr\nkind: transfer\nsource_task: plain2\ntarget_task: plain2\n"
                                      "class_names: [a, b]\nsplit_seeds: [0, 1]\n")
    (tmp_path / "plain2.yaml").write_text(PLAIN.replace("task: plain", "task: plain2"))
    index = TaskIndex([tmp_path, builtin_task_dir()], get_host())
    with pytest.raises(PrismError, match=r"plain.yaml:\d+: split_seeds: needs a split: procedure"):
        index.load_task("plain")
    with pytest.raises(PrismError, match=r"tr.yaml:\d+: split_seeds: the source task plain2 .* has no split:"):
        index.load_task("tr")
    hema = index.load_task("hema_matek")  # the audit's protocol by default
    assert hema.split_seeds == (0, 1, 2, 3, 4) and [p["kind"] for p in hema.probes] == ["logistic_std", "knn1"]
    assert hema.probes[0]["C"] == 1.0 and hema.n_runs == 10
    assert index.load_task("hema_matek", ["split_seeds=[0]", "probes=null"]).n_runs == 1
