"""One validator per setting: the Python API and a task file give the same message; a plugin head's
declared settings are checked and completed by both."""

from __future__ import annotations

import numpy as np
import pytest

import prism_plugin
from prism_plugin import hookimpl
from prism_plugin.errors import PrismError
from prism_plugin.heads.base import ProbeOutput, Setting
from prism_plugin.tasks.index import TaskIndex

TASK = ("task: t\ndataset: D\nclass_names: [a, b]\nsource: {type: precomputed}\n"
        "splits: {train: train, val: val, test: test}\n")


def _splits(n=120, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    return (rng.normal(size=(n, 6)) + 2.0 * y[:, None]).astype(np.float32), y


def _task_error(tmp_path, line: str) -> str:
    f = tmp_path / "t.yaml"
    f.write_text(TASK + line + "\n")
    with pytest.raises(PrismError) as err:
        TaskIndex([tmp_path]).load(str(f), [])
    return str(err.value).split(": ", 2)[-1]  # without "file:line: key: "


@pytest.mark.parametrize("line, kwargs", [
    ("label_fractions: [0.5, 0.5]", {"fractions": [0.5, 0.5]}),
    ("label_fractions: [1.5]", {"fractions": [1.5]}),
    ("seeds: [1, 1]", {"seeds": [1, 1]}),
    ("probe: {kind: logistic, C: -1}", {"probe": {"kind": "logistic", "C": -1}}),
    ("probe: {kind: knn1, C: 1}", {"probe": {"kind": "knn1", "C": 1}}),
])
def test_task_file_and_api_share_one_message(tmp_path, line, kwargs):
    in_task = _task_error(tmp_path, line)
    with pytest.raises(PrismError) as err:
        prism_plugin.evaluate(_splits(), _splits(seed=1), _splits(seed=2), **kwargs)
    assert str(err.value).endswith(in_task), (str(err.value), in_task)


class Shrunk:
    def __init__(self, seed=0, alpha=0.0):
        self.alpha = alpha

    def fit(self, X, y):
        means = np.stack([X[y == c].mean(axis=0) for c in np.unique(y)])
        self.means = (1 - self.alpha) * means + self.alpha * X.mean(axis=0)
        return self

    def evaluate(self, X):
        logits = -((np.asarray(X)[:, None, :] - self.means[None]) ** 2).sum(axis=2)
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        return ProbeOutput(logits, z / z.sum(axis=1, keepdims=True))


class ShrunkPlugin:
    @hookimpl
    def register_heads(self, register):
        register("shrunk", Shrunk, settings={"alpha": Setting(float, 0.25, lo=0.0, hi=1.0)})


def test_a_plugin_heads_declared_settings_are_checked_and_completed():
    args = (_splits(), _splits(seed=1), _splits(seed=2))
    runs = prism_plugin.evaluate(*args, fractions=[1.0], seeds=[0], probe={"kind": "shrunk"}, plugins=[ShrunkPlugin()])
    assert runs["probe"].tolist() == ["shrunk"] and runs["auroc"].iloc[0] > 0.9
    with pytest.raises(PrismError, match=r"probe.alpha: must be in \[0, 1\], got 3.0 \(probe head shrunk\)"):
        prism_plugin.evaluate(*args, probe={"kind": "shrunk", "alpha": 3}, plugins=[ShrunkPlugin()])
    with pytest.raises(PrismError, match=r"unknown key 'probe.C' for probe head 'shrunk' \(settings of shrunk: alpha"):
        prism_plugin.evaluate(*args, probe={"kind": "shrunk", "C": 1.0}, plugins=[ShrunkPlugin()])
