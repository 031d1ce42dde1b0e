"""prism_plugin.evaluate() carries the qualifications prism-run gives the same runs: every runs.csv column (with
equal values) and the summary.json flags, run by run (``flags``, ``qualified``) and in ``attrs["flags"]``; a
temperature at its search bound is never a plain number in the API's table."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import prism_plugin
from prism_plugin.api import QUALIFICATION_COLUMNS
from prism_plugin.protocol.array_checks import QualifiedResultWarning
from tests.conftest import prism_run

#: a probe so regularised that the temperature hits the lower end of the box and stopped after one iteration; a
#: label fraction so small that classes are forced; a test split with a rare class (a data check)
TASK = """task: qualified
dataset: Qualified
class_names: [a, b, c]
source: {type: precomputed}
splits: {train: train, val: val, test: test}
label_fractions: [0.01, 1.0]
seeds: [42, 7]
probe: {kind: logistic, C: 1.0e-5, max_iter: 1}
"""
SETTINGS = dict(fractions=[0.01, 1.0], seeds=[42, 7], probe={"kind": "logistic", "C": 1.0e-5, "max_iter": 1})
#: identity columns: the CLI names the task and the adapter, the API the dataset and the model
IDENTITY = {"task", "adapter"}


def _arrays(root, counts=None, seed=5):
    rng = np.random.default_rng(seed)
    counts = counts or {"train": (40, 40, 40), "val": (20, 20, 20), "test": (30, 30, 4)}
    folder = root / "QFM" / "Qualified"
    folder.mkdir(parents=True)
    out = {}
    for split, per_class in counts.items():
        y = np.repeat(np.arange(3), per_class)
        X = (rng.normal(size=(len(y), 6)) + 2.5 * np.eye(3, 6)[y]).astype(np.float32)
        np.save(folder / f"{split}_features.npy", X)
        np.save(folder / f"{split}_labels.npy", y)
        out[split] = (X, y)
    return out


def _expected_flags(summary_flags, run_ids):
    """Per run id: the warning flags of summary.json that cover it (a data check covers every run)."""
    return [[f["flag"] for f in summary_flags
             if f["level"] == "warning" and (f["source"] == "data" or rid in f["cells"])] for rid in run_ids]


def test_evaluate_carries_every_qualification_of_runs_csv_and_summary_json(tmp_path):
    arrays = _arrays(tmp_path / "emb")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "qualified.yaml").write_text(TASK)
    out = tmp_path / "out"
    prism_run("--task", "qualified", "--include-path", str(tmp_path / "tasks"), "--model", "precomputed",
              "--model-args", f"root={tmp_path / 'emb' / 'QFM'}", "--output", str(out), "--quiet", "--no-report",
              timeout=None, check=True)
    runs = pd.read_csv(out / "runs.csv")
    summary = json.loads((out / "summary.json").read_text())
    with pytest.warns(QualifiedResultWarning, match=r"fitted temperature \(temperature\) is at the lower bound"):
        api = prism_plugin.evaluate(arrays["train"], arrays["val"], arrays["test"], model="QFM", dataset="Qualified",
                                    **SETTINGS)

    # the runs are qualified several ways: the test must be able to fail on each
    assert (runs["temperature"] <= 0.101).all() and not runs["probe_converged"].any()
    assert (runs["forced_classes"] > 0).any()
    names = {f["flag"] for f in summary["flags"]}
    assert {"temperature_at_bound", "probe_not_converged", "few_test_samples_per_class"} <= names

    # every runs.csv column, with equal values (csv round trip: compare as the file reads back)
    missing = [c for c in runs.columns if c not in api.columns]
    assert missing == []
    api_csv = pd.read_csv(pd.io.common.StringIO(api.to_csv(index=False)))
    for c in runs.columns:
        if c in IDENTITY:
            continue
        pd.testing.assert_series_equal(api_csv[c], runs[c], check_dtype=False, check_exact=False, rtol=0,
                                       atol=0, obj=c)
    # the summary.json flags: the same flags of the same runs
    key = lambda f: (f["flag"], f["level"], f["source"], tuple(f["cells"]), f["count"], tuple(f["fractions"]))  # noqa
    assert sorted(map(key, api.attrs["flags"])) == sorted(map(key, summary["flags"]))
    assert api.attrs["qualified"] is summary["qualified"] is True
    # ... and run by run, as columns after the runs.csv ones
    assert list(api.columns[-len(QUALIFICATION_COLUMNS):]) == list(QUALIFICATION_COLUMNS)
    ids = [f"f{f:g}-s{s}" for f, s in zip(runs["fraction"], runs["seed"])]
    expected = _expected_flags(summary["flags"], ids)
    assert [v.split(";") if v else [] for v in api["flags"]] == expected
    assert api["qualified"].tolist() == [bool(e) for e in expected] == [True] * len(runs)
    assert all("temperature_at_bound" in v and "probe_not_converged" in v for v in api["flags"])


def test_clean_runs_carry_empty_qualifications(tmp_path):
    # (seed 7: a draw on which the fitted temperature also lowers the test NLL)
    arrays = _arrays(tmp_path / "emb", {"train": (60, 60, 60), "val": (30, 30, 30), "test": (40, 40, 40)}, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error", QualifiedResultWarning)
        api = prism_plugin.evaluate(arrays["train"], arrays["val"], arrays["test"], fractions=[1.0], seeds=[1])
    assert api["flags"].tolist() == [""] and api["qualified"].tolist() == [False]
    assert api.attrs["flags"] == [] and api.attrs["qualified"] is False


def test_prism_evaluator_warns_and_keeps_the_flags(tmp_path):
    from prism_plugin.compat import PRISMEvaluator

    a = _arrays(tmp_path / "emb")
    with pytest.warns(QualifiedResultWarning, match="is at the lower bound"):
        res = PRISMEvaluator().evaluate(a["train"][0], a["train"][1], a["test"][0], a["test"][1], "pcam",
                                        val_features=a["val"][0], val_labels=a["val"][1], label_fractions=[1.0],
                                        seeds=[1], C=1e-5, extra_columns=True)
    assert res.attrs["qualified"] is True and "temperature_at_bound" in {f["flag"] for f in res.attrs["flags"]}
    assert "temperature_at_bound" in res["flags"].iloc[0] and bool(res["qualified"].iloc[0])
