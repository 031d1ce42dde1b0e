"""End to end on tiny precomputed embeddings: a probe stopped after one iteration and a
probe so regularised that its temperature hits the lower end of the search box give flags on the console, in summary.json and in the
report's verdict (prism-run in process)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from prism_plugin import cli

TASK = """task: flagged
dataset: Flagged
class_names: [a, b]
source: {type: precomputed}
splits: {train: train, val: val, test: test}
label_fractions: [0.5, 1.0]
seeds: [42]
probe: {kind: logistic, C: 1.0e-5, max_iter: 1}
"""


def _embeddings(root):
    rng = np.random.default_rng(3)
    folder = root / "FlagFM" / "Flagged"
    folder.mkdir(parents=True)
    for split, (n0, n1) in {"train": (30, 30), "val": (15, 15), "test": (36, 4)}.items():
        y = np.array([0] * n0 + [1] * n1)
        X = (rng.normal(size=(len(y), 8)) + 3.0 * y[:, None]).astype(np.float32)
        np.save(folder / f"{split}_features.npy", X)
        np.save(folder / f"{split}_labels.npy", y)
    return root / "FlagFM"


def test_flags_reach_console_summary_and_verdict(tmp_path, capsys):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "flagged.yaml").write_text(TASK)
    out = tmp_path / "out"
    rc = cli.main(["--task", "flagged", "--include-path", str(tmp_path / "tasks"), "--model", "precomputed",
                   "--model-args", f"root={_embeddings(tmp_path / 'emb')}", "--output", str(out),
                   "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    captured = capsys.readouterr()
    printed = captured.out
    assert rc == 0
    runs = pd.read_csv(out / "runs.csv")
    assert not runs["probe_converged"].any() and (runs["temperature"] <= 0.101).all()
    assert list(runs["min_test_class_count"]) == [4, 4] and "collapsed" in runs
    summary = json.loads((out / "summary.json").read_text())
    flags = {f["flag"]: f for f in summary["flags"]}
    assert summary["qualified"] is True
    assert {"probe_not_converged", "temperature_at_bound", "few_test_samples_per_class"} <= set(flags)
    assert flags["probe_not_converged"]["cells"] == ["f0.5-s42", "f1-s42"]
    assert flags["temperature_at_bound"]["detail"]["bounds"] == [0.1, 10.0]
    assert flags["temperature_at_bound"]["fractions"] == [0.5, 1.0]
    # console: one line per warning, and the markers in the table-free --quiet output
    lines = [line for line in printed.splitlines() if "FlagFM on flagged: warning:" in line]
    warned = [f for f in summary["flags"] if f["level"] == "warning"]
    assert len(lines) == len([f for f in warned if f["source"] != "data"]) >= 2
    # the loader's data checks are printed once, as warnings on stderr, not again on stdout
    assert any(f["source"] == "data" for f in warned), warned  # the 4-sample minority class of test
    for f in warned:
        if f["source"] == "data":
            assert f["message"] in captured.err and f["message"] not in printed
    assert any("did not converge" in line for line in lines)
    # the verdict says both, with evidence
    verdict = pd.read_csv(out / "summaries" / "verdict.csv", keep_default_na=False)
    probe = verdict.loc[verdict["topic"] == "probe"]
    assert len(probe) == 1 and "did not converge" in probe.iloc[0]["text"] and probe.iloc[0]["level"] == "bad"
    scaling = " ".join(verdict.loc[verdict["topic"] == "scaling", "text"])
    assert "lower search bound" in scaling
    assert "lowered ECE in every cell" not in scaling or "not as a clean success" in scaling
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "**Probe fit**" in md and "did not converge" in md


def test_a_plugin_registers_its_own_quality_check(tmp_path, capsys):
    """A third-party check, registered like the built-ins (``register_checks``), reaches the console
    and summary.json; ``prism-run ls checks`` lists it with its plugin's origin."""
    import types

    from prism_plugin.hookspecs import hookimpl
    from prism_plugin.plugins import PluginHost
    from prism_plugin.quality import Flag

    def low_f1(runs, ctx):
        bad = runs.loc[runs["f1_macro"] < 2.0]  # every run: f1 <= 1
        return [Flag("low_f1", "warning", f"{ctx.name}: macro-F1 below 2 in {len(bad)} run(s)", len(bad), len(runs))]

    plugin = types.ModuleType("my_checks")
    plugin.register_checks = hookimpl(lambda register: register("low_f1", low_f1, description="macro-F1 < 2"))
    host = PluginHost(extra_plugins=[plugin])
    assert host.checks.names()[:2] == ["test_classes", "convergence"] and "low_f1" in host.checks
    assert cli.main(["ls", "checks"], host=host) == 0
    assert "low_f1" in capsys.readouterr().out
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "flagged.yaml").write_text(TASK.replace("label_fractions: [0.5, 1.0]",
                                                                  "label_fractions: [1.0]"))
    out = tmp_path / "out"
    rc = cli.main(["--task", "flagged", "--include-path", str(tmp_path / "tasks"), "--model", "precomputed",
                   "--model-args", f"root={_embeddings(tmp_path / 'emb')}", "--output", str(out),
                   "--cache-dir", str(tmp_path / "cache"), "--quiet", "--no-report"], host=host)
    assert rc == 0
    assert "flagged: macro-F1 below 2 in 1 run(s)" in capsys.readouterr().out
    flags = {f["flag"]: f for f in json.loads((out / "summary.json").read_text())["flags"]}
    assert flags["low_f1"]["count"] == 1 and flags["low_f1"]["level"] == "warning"
