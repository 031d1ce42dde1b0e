"""Issue 14 follow-ups found by the adversarial battery (tests/battery): every case in process.

* `validate` reports what a run would refuse from the task alone: identical val/test splits, a
  dataset name that would be read as a path outside the embeddings root, an unknown probe head;
* the precomputed adapter never reads outside ``root=``;
* a runs.csv that is not a readable table is one error naming it (report and friends).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from prism_plugin.cli import main
from prism_plugin.errors import PrismError
from prism_plugin.results import read_runs

BASE = ("task: {name}\ndataset: {dataset}\nclass_names: [a, b]\nsource: {{type: precomputed}}\n"
        "splits: {{train: train, val: {val}, test: test}}\n{extra}")


def _task(tmp_path, name="t", dataset="Toy", val="val", extra=""):
    f = tmp_path / f"{name}.yaml"
    f.write_text(BASE.format(name=name, dataset=dataset, val=val, extra=extra))
    return f


@pytest.mark.parametrize("kwargs, key, words", [
    ({"val": "test"}, "val", "allow_split_overlap"),
    ({"dataset": "../../../decoy"}, "dataset", "embeddings_key"),
    ({"dataset": "/abs/decoy"}, "dataset", "absolute"),
    ({"extra": "probe: {kind: mpl}\n"}, "probe.kind", "did you mean 'mlp'"),
])
def test_validate_refuses_from_the_task_alone(tmp_path, capsys, kwargs, key, words):
    f = _task(tmp_path, **kwargs)
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert words in err and (key in err), err
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err


def test_val_equal_test_is_valid_when_allowed(tmp_path, capsys):
    f = _task(tmp_path, val="test", extra="allow_split_overlap: [val, test]\n")
    assert main(["validate", str(f)]) == 0, capsys.readouterr().err


def test_precomputed_adapter_never_reads_outside_its_root(tmp_path):
    from prism_plugin.plugins import PluginHost
    from prism_plugin.runner import make_adapter

    root = tmp_path / "emb" / "M"
    (root / "Toy").mkdir(parents=True)
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    np.save(decoy / "train_features.npy", np.ones((4, 2), np.float32))
    np.save(decoy / "train_labels.npy", np.array([0, 1, 0, 1]))
    adapter = make_adapter(PluginHost(), "precomputed", {"root": str(root)})
    for key in ("../../decoy", "/" + str(decoy).lstrip("/"), "Toy/../../../decoy"):
        task = SimpleNamespace(name="t", file="t.yaml", embeddings_key=key)
        with pytest.raises(PrismError, match="dataset key"):
            adapter.feature_source(task).features("train")


@pytest.mark.parametrize("content", [b"\xd1\x80\xff\xfe" * 50, b""])
def test_unreadable_runs_csv_is_one_error_naming_it(tmp_path, capsys, content):
    out = tmp_path / "out"
    out.mkdir()
    (out / "runs.csv").write_bytes(content)
    with pytest.raises(PrismError, match="runs.csv: not a readable runs table"):
        read_runs(out / "runs.csv")
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("prism-run: error:") == 1 and "runs.csv" in err and "Traceback" not in err
