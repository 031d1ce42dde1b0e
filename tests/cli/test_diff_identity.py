"""``prism-run diff`` says when A's and B's embeddings differ in identity (precision, weights, hub commit,
preprocessing), per model and with both values, in the console, diff.md and diff.json, and fails on it with
``--require-same``; results that predate the identity records get one line, not a crash.

Real ``prism-run`` runs of the demo task (subprocesses): the default DemoViT, a second one with other weights
(``seed=1``), and one asking for bf16 on the CPU (computed, cached and recorded as fp32: the same embedding). A
precision difference (fp16 weights can only be computed on CUDA) and an old results folder are made from copies
of a real output, resealed as a run writing those files would have sealed them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import prism_run, reseal


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff-identity")
    out = {}
    for name, args in (("base", ()), ("seed1", ("--model-args", "seed=1")), ("bf16", ("--model-args", "dtype=bf16"))):
        prism_run("--task", "prism_demo", "--model", "demo_vit", "--no-report", "--quiet", "--output",
                  str(root / name), "--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[42]", *args, check=True)
        out[name] = root / name
    out["root"] = root
    return out


def diff(*args, check_rc: int | None = None):
    proc = prism_run("diff", *map(str, args))
    assert "Traceback" not in proc.stderr, proc.stderr
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stdout + proc.stderr
    return proc


def edit(src: Path, dst: Path, runs=None, summary=None) -> Path:
    """A copy of a results folder with runs.csv / summary.json edited, resealed."""
    shutil.copytree(src, dst)
    df = pd.read_csv(dst / "runs.csv")
    if runs is not None:
        df = runs(df)
        df.to_csv(dst / "runs.csv", index=False)
    data = json.loads((dst / "summary.json").read_text())
    if summary is not None:
        summary(data)
        (dst / "summary.json").write_text(json.dumps(data, indent=2))
    return reseal(dst)


def identity_of(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())["embedding_identity"]


def test_other_weights_are_said_with_both_values(demo, tmp_path):
    wa, wb = identity_of(demo["base"])["weights"], identity_of(demo["seed1"])["weights"]
    assert wa != wb and "seed=0" in wa and "seed=1" in wb
    proc = diff(demo["base"], demo["seed1"], "--output", tmp_path / "out", check_rc=0)
    assert "**Embeddings differ**" in proc.stdout
    line = next(x for x in proc.stdout.splitlines() if x.startswith("> - "))
    assert "weights differs" in line and f"A {wa}" in line and f"B {wb}" in line
    assert "DemoViT-Tiny (A) vs DemoViT-Tiny-seed-1 (B)" in line
    assert "precision" not in line  # only the field that differs
    warn = [x for x in proc.stderr.splitlines() if x.startswith("prism-run diff: warning:")]
    assert len(warn) == 1 and "differ in weights" in warn[0] and wa in warn[0] and wb in warn[0]
    md = (tmp_path / "out" / "diff.md").read_text()
    assert "Embeddings differ" in md and wa in md and wb in md
    data = json.loads((tmp_path / "out" / "diff.json").read_text())
    ident = data["embedding_identity"]
    assert ident["same"] is False and data["like_for_like"] is False and data["exit_status"] == 0
    n_runs = len(pd.read_csv(demo["base"] / "runs.csv"))
    assert n_runs == 2  # the fixture's grid: 2 label fractions x 1 seed
    assert [(d["field"], d["a"], d["b"], d["n_runs"]) for d in ident["differences"]] == [("weights", [wa], [wb], n_runs)]
    assert {"precision", "weights", "weights_revision", "preprocessing"} <= set(ident["compared"])
    # a gate's verdict never reads as a like-for-like pass
    gated = diff(demo["base"], demo["seed1"], "--fail-on", "brier", "--tol", "1")
    assert "**Result: pass** — embeddings differ (weights): not a like-for-like comparison" in gated.stdout
    assert gated.returncode == 0
    # --require-same: the exit status says it
    req = diff(demo["base"], demo["seed1"], "--require-same", "weights", check_rc=1)
    assert "## Embedding identity gate" in req.stdout and "**FAIL** DemoViT-Tiny (A)" in req.stdout
    assert diff(demo["base"], demo["seed1"], "--require-same", "precision,preprocessing", check_rc=0)


def test_same_identity_is_said_once_and_never_warned(demo, tmp_path):
    """bf16 asked for on the CPU computes fp32: the same embeddings as the default, no warning."""
    ident = identity_of(demo["bf16"])
    assert (ident["precision"], ident["precision_requested"]) == ("fp32", "bf16")
    proc = diff(demo["base"], demo["bf16"], "--require-same", "all", "--output", tmp_path / "out", check_rc=0)
    assert "Embeddings differ" not in proc.stdout and "warning" not in proc.stderr
    assert "- embeddings: the same identity on both sides" in proc.stdout
    assert "precision fp32" in proc.stdout
    assert "**Result: pass** (the same precision, weights, weights_revision, preprocessing on both sides)" in proc.stdout
    data = json.loads((tmp_path / "out" / "diff.json").read_text())
    assert data["embedding_identity"]["same"] is True and data["like_for_like"] is True
    assert data["embedding_identity"]["differences"] == []


def test_precision_and_commit_differences_per_model(demo, tmp_path):
    """A folder of two models on each side: only the model whose embeddings differ is named, with each field."""
    sha_a, sha_b = "1" * 40, "2" * 40

    def as_fp16_hub(df):
        return df.assign(precision="fp16", weights="hub:org/m", weights_revision=sha_b)

    def summary_fp16_hub(s):
        s["embedding_identity"].update(precision="fp16", weights="hub:org/m", weights_revision=sha_b)

    def hub_a(df):
        return df.assign(weights="hub:org/m", weights_revision=sha_a)

    def summary_hub_a(s):
        s["embedding_identity"].update(weights="hub:org/m", weights_revision=sha_a)

    left, right = tmp_path / "A", tmp_path / "B"
    edit(demo["base"], left / "base", hub_a, summary_hub_a)
    shutil.copytree(demo["bf16"], left / "bf16")
    edit(demo["base"], right / "base", as_fp16_hub, summary_fp16_hub)
    shutil.copytree(demo["bf16"], right / "bf16")
    proc = diff(left, right, "--output", tmp_path / "out", check_rc=0)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("> - ")]
    assert len(lines) == 2, proc.stdout
    assert lines[0] == "> - DemoViT-Tiny: precision differs: A fp32; B fp16"
    assert lines[1] == f"> - DemoViT-Tiny: hub commit of the weights (`weights_revision`) differs: A {sha_a}; B {sha_b}"
    assert "bf16" not in " ".join(lines)  # the other model's embeddings are alike
    data = json.loads((tmp_path / "out" / "diff.json").read_text())
    assert {d["field"] for d in data["embedding_identity"]["differences"]} == {"precision", "weights_revision"}
    assert {d["model_a"] for d in data["embedding_identity"]["differences"]} == {"DemoViT-Tiny"}
    req = diff(left, right, "--require-same", "precision", check_rc=1)
    assert "precision differs: A fp32; B fp16" in req.stdout


def test_preprocessing_difference(demo, tmp_path):
    def crop(s):
        s["adapter"]["preprocessing"]["crop"] = 112

    other = edit(demo["base"], tmp_path / "crop", summary=crop)
    proc = diff(demo["base"], other, check_rc=0)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("> - "))
    assert line.startswith("> - DemoViT-Tiny: preprocessing differs: A {") and '"crop":96' in line
    assert '"crop":112' in line


def test_old_results_say_not_recorded_in_one_line(demo, tmp_path):
    def drop(df):
        return df.drop(columns=["precision", "weights", "weights_revision"])

    def forget(s):
        s.pop("embedding_identity")

    old = edit(demo["base"], tmp_path / "old", drop, forget)
    proc = diff(old, demo["seed1"], "--output", tmp_path / "out", check_rc=0)
    said = [x for x in proc.stdout.splitlines() if "not recorded" in x]
    assert len(said) == 1 and f"not recorded in A ({old})" in said[0], proc.stdout
    assert "Embeddings differ" not in proc.stdout  # nothing to compare but the preprocessing, which is the same
    data = json.loads((tmp_path / "out" / "diff.json").read_text())
    assert data["embedding_identity"]["not_recorded"] == ["A"] and data["embedding_identity"]["same"] is None
    assert data["like_for_like"] is False
    both = diff(old, old, check_rc=0)
    assert "not recorded in A" in both.stdout and "and B" in both.stdout
    req = diff(old, demo["seed1"], "--require-same", "precision", check_rc=1)
    assert "precision is not recorded on both sides" in req.stdout


def test_bad_require_same_is_one_line(demo):
    proc = diff(demo["base"], demo["base"], "--require-same", "precisoin", check_rc=2)
    err = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and "--require-same 'precisoin'" in err[0] and "precision" in err[0]
