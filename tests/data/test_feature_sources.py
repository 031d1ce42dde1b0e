"""Feature sources: a kind of the sources registry (``precomputed`` is one), run with ``--model precomputed``;
image adapters refuse them, and the features adapter refuses an image source without ``root=``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from prism_plugin.cli import main
from prism_plugin.data.catalogue import open_source
from prism_plugin.data.features import FeatureSource
from prism_plugin.data.splits import SPLIT_PROCEDURES, check_split_spec, run_split_procedure
from prism_plugin.errors import PrismError
from prism_plugin.hookspecs import hookimpl
from prism_plugin.plugins import PluginHost
from prism_plugin.tasks.index import TaskIndex

TASK = ("task: toy\ndataset: Toy\nclass_names: [a, b]\nsource: {source}\n"
        "splits: {{train: train, val: val, test: test}}\nlabel_fractions: [1.0]\nseeds: [42]\n")


def _arrays(root: Path) -> Path:
    folder = root / "emb" / "Toy"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 30), ("val", 12), ("test", 16)):
        y = np.arange(n) % 2
        np.save(folder / f"{split}_features.npy", (rng.normal(size=(n, 4)) + y[:, None]).astype(np.float32))
        np.save(folder / f"{split}_labels.npy", y)
    return root / "emb"


def _run(tmp_path, name: str, source: str, *args: str) -> int:
    tasks = tmp_path / f"tasks_{name}"
    tasks.mkdir()
    (tasks / "toy.yaml").write_text(TASK.format(source=source))
    return main(["--task", "toy", "--include-path", str(tasks), "--output", str(tmp_path / name), "--quiet",
                 "--no-report", *args])


def test_ls_sources_shows_each_kind(capsys):
    assert main(["ls", "sources"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:] if line.split()}
    assert rows["precomputed"][1] == "features"
    assert {rows[name][1] for name in ("imagefolder", "demo", "hf", "records", "hema_demo")} == {"images"}


def test_precomputed_from_the_task_or_from_model_args_gives_the_same_runs(tmp_path, capsys):
    root = _arrays(tmp_path)
    assert _run(tmp_path, "own", f"{{type: precomputed, root: {root}}}", "--model", "precomputed") == 0, \
        capsys.readouterr().err
    assert _run(tmp_path, "args", "{type: precomputed}", "--model", "precomputed", "--model-args",
                f"root={root}", "--model-args", "name=precomputed") == 0, capsys.readouterr().err
    own, args = ((tmp_path / d / "runs.csv").read_bytes() for d in ("own", "args"))
    assert own == args and own.count(b"\n") == 2  # header and the one run


def test_adapters_refuse_the_other_kind(tmp_path, capsys):
    root = _arrays(tmp_path)
    assert _run(tmp_path, "img", f"{{type: precomputed, root: {root}}}", "--model", "demo_vit") == 2
    err = capsys.readouterr().err
    assert "source type precomputed yields embedding vectors, not images" in err and "--model precomputed" in err
    assert main(["--task", "prism_demo", "--model", "precomputed", "--output", str(tmp_path / "demo"), "--quiet",
                 "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "source type demo yields images" in err and "root=DIR" in err
    assert _run(tmp_path, "none", "{type: precomputed}", "--model", "precomputed") == 2
    assert "needs the embeddings folder" in capsys.readouterr().err


class _Vectors(FeatureSource):
    type_name = "vectors"

    def features(self, name):
        X = np.arange(12, dtype=np.float32).reshape(6, 2)
        return self.rows(X, ["a", "b", "a", "b", "c", "a"], [f"r{i}" for i in range(6)], f"vectors {name}")


def _host(**kind) -> PluginHost:
    class Plugin:
        @hookimpl
        def register_sources(self, register):
            register("vectors", _Vectors, **kind)

    return PluginHost(extra_plugins=[Plugin()], third_party=False)


def test_a_feature_source_maps_labels_and_fingerprints_its_rows(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "v.yaml").write_text("task: v\ndataset: V\nclass_names: [a, b]\n"
                                  "source: {type: vectors, drop_classes: [c]}\nsplits: {train: train, test: test}\n")
    host = _host()
    assert host.sources.meta("vectors", "kind") == "features"  # from the class's input_kind
    split = open_source(TaskIndex([tasks], host).load_task("v"), host=host).features("train")
    assert split.y.tolist() == [0, 1, 0, 1, 0] and split.X[:, 0].tolist() == [0, 2, 4, 6, 10]
    (tasks / "v.yaml").write_text((tasks / "v.yaml").read_text().replace("drop_classes: [c]",
                                                                         "class_map: {a: [a, c], b: [b]}"))
    mapped = open_source(TaskIndex([tasks], host).load_task("v"), host=host).features("train")
    assert mapped.y.tolist() == [0, 1, 0, 1, 0, 0] and mapped.fingerprint != split.fingerprint


def test_a_registration_with_the_wrong_kind_is_refused(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "v.yaml").write_text("task: v\ndataset: V\nclass_names: [a, b]\nsource: {type: vectors}\n"
                                  "splits: {train: train, test: test}\n")
    with pytest.raises(PrismError, match=r"registered as kind 'images' but its class _Vectors yields 'features'"):
        TaskIndex([tasks], _host(kind="images")).load_task("v")
    with pytest.raises(PrismError, match="kind must be one of images, features"):
        _host(kind="vectors").sources.names()


def test_perturb_is_refused_for_any_feature_source(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "v.yaml").write_text("task: v\ndataset: V\nclass_names: [a, b]\nsource: {type: vectors}\n"
                                  "splits: {train: train, test: test}\nperturb: {transforms: [{kind: blur}]}\n")
    with pytest.raises(PrismError, match=r"v\.yaml:6: perturb: .*vectors is a feature source.*no images to perturb"):
        TaskIndex([tasks], _host()).load_task("v")


def test_split_procedures_are_declared_in_one_table():
    fail = lambda key, msg: PrismError(f"{key}: {msg}")  # noqa: E731
    for name, rule in SPLIT_PROCEDURES.items():
        parts = {"a": 0.5, "b": "rest"} if rule.rest else {"a": 0.5, "b": 0.5}
        spec = check_split_spec({"procedure": name, "seed": 1, "parts": parts}, fail)
        got = run_split_procedure(spec, np.arange(20) % 2)
        assert sorted(np.concatenate(list(got.values())).tolist()) == list(range(20)), name
        assert ("remainder" in spec) == rule.remainder
    with pytest.raises(PrismError, match=r"pool P: a stratified split needs >= 2 items per class; class counts \[5, 1\]"):
        run_split_procedure({"procedure": "stratified", "seed": 0, "parts": {"a": 0.5, "b": 0.5}},
                            np.array([0, 0, 0, 0, 0, 1]), "pool P")
    with pytest.raises(PrismError, match="split.remainder: only applies to procedure random_split"):
        check_split_spec({"procedure": "shuffle", "seed": 1, "parts": {"a": 0.5, "b": "rest"}, "remainder": "last"},
                         fail)


def test_precomputed_takes_root_or_path(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "z.yaml").write_text("task: z\ndataset: Z\nclass_names: [a, b]\nsource: {type: precomputed, root: x, "
                                  "path: y}\nsplits: {train: train, test: test}\n")
    with pytest.raises(PrismError, match=r"z\.yaml:4: source\.path: give source\.root .* not both"):
        TaskIndex([tasks]).load_task("z")
