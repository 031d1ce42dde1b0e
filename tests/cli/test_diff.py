"""``prism-run diff A B``: matching, deltas, paired CIs, verdicts and the exit status of the gate.

Two real runs of ``prism_demo`` on tiny precomputed embeddings (same labels, B's features drawn with
another seed: a "new checkpoint"), in-process. The bootstrap replicates are either the bootstrap
plugin's own (when it is installed) or written here in the documented ``.npz`` format with a chosen
noise, so that the same pair of runs is a regression beyond noise or within noise; every CI is checked
against numpy by hand from the replicate files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import reseal, run_main, write_precomputed

GRID = ["--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[1,2]"]
METRICS = ("auroc", "brier", "ece_fixed", "nll")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    out = {}
    for name, seed in (("A", 0), ("B", 5)):
        emb = write_precomputed(root / f"emb{name}" / "Demo-Binary", {"train": 40, "val": 20, "test": 20}, dim=4,
                                seed=seed).parent
        run_main("--task", "prism_demo", "--model", "precomputed", "--model-args", f"root={emb},name=fm{name}",
                 "--quiet", "--no-report", "--output", str(root / name), "--cache-dir", str(root / "cache"), *GRID,
                 check=True)
        out[name] = root / name
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def write_reps(folder: Path, shared: float, own: float, seed: int, digest: str = "d" * 64) -> None:
    """Fixture replicates in the bootstrap plugin's format: point + shared(b) + own noise, 200 x 4."""
    runs = pd.read_csv(folder / "runs.csv")
    boot = folder / "artifacts" / "bootstrap"
    shutil.rmtree(boot, ignore_errors=True)
    boot.mkdir(parents=True)
    common = np.random.default_rng(99).normal(size=(200, 1))  # the same resamples on both sides
    for k, r in runs.iterrows():
        point = r[list(METRICS)].to_numpy(float)
        rng = np.random.default_rng([seed, k])
        reps = point + shared * common + own * rng.normal(size=(200, len(METRICS)))
        np.savez(boot / f"prism_demo--f{r['fraction']:g}-s{r['seed']}.npz", format=np.array("prism-bootstrap/1"),
                 metrics=np.array(METRICS),
                 replicates=reps, point=point, n=200, seed=0, level=0.95, test_digest=digest)
    reseal(folder)  # as if the run had written these replicates


def diff(*args: str):
    return run_main("diff", *map(str, args))


def one_line(proc) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.strip() and not x.startswith("prism-run: warning: ")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def seed_mean_ci(a: Path, b: Path, fraction: str, metric: str, level: float = 0.95) -> tuple[float, float]:
    """By hand: the mean over seeds of each side's replicate vectors, then percentiles of B - A."""
    def mean_reps(folder):
        vecs = []
        for s in (1, 2):
            with np.load(folder / "artifacts" / "bootstrap" / f"prism_demo--f{fraction}-s{s}.npz") as z:
                vecs.append(z["replicates"][:, list(z["metrics"]).index(metric)])
        return np.mean(vecs, axis=0)

    d = mean_reps(b) - mean_reps(a)
    return tuple(np.percentile(d, [50 * (1 - level), 50 * (1 + level)]))


def test_regression_beyond_noise_fails_the_gate_and_cis_match_numpy(runs, tmp_path):
    a, b = copy(runs["A"], tmp_path / "A"), copy(runs["B"], tmp_path / "B")
    write_reps(a, 0.05, 0.002, 1)
    write_reps(b, 0.05, 0.002, 2)
    out = tmp_path / "report"
    proc = diff(a, b, "--fail-on", "auroc", "--tol", "0.01", "--output", out)
    ra, rb = pd.read_csv(a / "runs.csv"), pd.read_csv(b / "runs.csv")
    table = pd.read_csv(out / "diff.csv")
    # per run: delta = B - A of runs.csv, matched by fraction + seed although the models differ
    one = table.loc[(table["scope"] == "run") & (table["metric"] == "auroc") & (table["fraction"] == 1.0)
                    & (table["seed"].astype(str) == "2")].iloc[0]
    pick = lambda df: float(df.loc[(df["fraction"] == 1.0) & (df["seed"] == 2), "auroc"].iloc[0])  # noqa: E731
    assert one["delta"] == pytest.approx(pick(rb) - pick(ra), abs=1e-12)
    with np.load(a / "artifacts/bootstrap/prism_demo--f1-s2.npz") as za, \
            np.load(b / "artifacts/bootstrap/prism_demo--f1-s2.npz") as zb:
        d = zb["replicates"][:, 0] - za["replicates"][:, 0]
    assert (one["ci_low"], one["ci_high"]) == pytest.approx(tuple(np.percentile(d, [2.5, 97.5])), abs=1e-12)
    # seed mean: mean over seeds of the replicate vectors, then the percentile interval of the difference
    cell = table.loc[(table["scope"] == "seed mean") & (table["metric"] == "auroc") & (table["fraction"] == 1.0)]
    cell = cell.iloc[0]
    assert cell["ci_method"] == "paired bootstrap" and cell["verdict"] == "worse"
    assert (cell["ci_low"], cell["ci_high"]) == pytest.approx(seed_mean_ci(a, b, "1", "auroc"), abs=1e-12)
    assert cell["delta"] == pytest.approx(rb.loc[rb.fraction == 1.0, "auroc"].mean()
                                          - ra.loc[ra.fraction == 1.0, "auroc"].mean(), abs=1e-12)
    assert cell["delta"] < -0.01 and cell["ci_high"] < 0
    # the gate: worse than tol beyond noise -> rc 1, naming the cell
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "**FAIL** `auroc` worse by" in proc.stdout and "prism_demo · 100 % labels" in proc.stdout
    assert "| AUROC ↑ (`auroc`) |" in proc.stdout  # the console shows the Markdown table
    html = (out / "diff.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<table" in html and "src=\"http" not in html
    assert (out / "diff.md").read_text().startswith("# prism-run diff")
    # within tolerance: pass; a looser tolerance per metric wins over the bare one
    worst = float(table.loc[(table["scope"] == "seed mean") & (table["metric"] == "auroc"), "delta"].min())
    assert diff(a, b, "--fail-on", "auroc", "--tol", f"auroc={-worst + 0.01}").returncode == 0
    assert diff(a, b, "--tol", f"auroc={-worst - 0.01}").returncode == 1  # --tol METRIC=V also gates
    # lower is better: brier got worse too (B's features are noisier)
    brier = table.loc[(table["scope"] == "seed mean") & (table["metric"] == "brier") & (table["fraction"] == 1.0)]
    assert brier.iloc[0]["delta"] > 0 and brier.iloc[0]["verdict"] == "worse"


def test_within_noise_passes_unless_noise_is_ignored(runs, tmp_path):
    a, b = copy(runs["A"], tmp_path / "A"), copy(runs["B"], tmp_path / "B")
    write_reps(a, 0.0, 0.4, 1)  # independent, wide noise: the difference is not distinguishable from 0
    write_reps(b, 0.0, 0.4, 2)
    proc = diff(a, b, "--fail-on", "auroc", "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = pd.read_csv(tmp_path / "out" / "diff.csv").query("scope == 'seed mean' and metric == 'auroc'")
    assert set(cells["verdict"]) == {"within noise"} and (cells["ci_low"] < 0).all() and (cells["ci_high"] > 0).all()
    lo, hi = seed_mean_ci(a, b, "0.5", "auroc")
    assert (cells.iloc[0]["ci_low"], cells.iloc[0]["ci_high"]) == pytest.approx((lo, hi), abs=1e-12)
    assert "**Result: pass**" in proc.stdout
    assert diff(a, b, "--fail-on", "auroc", "--ignore-noise").returncode == 1


def test_unpaired_when_the_test_labels_differ_and_only_common_runs_are_diffed(runs, tmp_path):
    a, b = copy(runs["A"], tmp_path / "A"), copy(runs["B"], tmp_path / "B")
    write_reps(a, 0.05, 0.002, 1)
    write_reps(b, 0.05, 0.002, 2, digest=hashlib.sha256(b"other").hexdigest())
    rb = pd.read_csv(b / "runs.csv")
    rb.loc[rb["fraction"] == 0.5].to_csv(b / "runs.csv", index=False)  # B has only the 50 % runs
    reseal(b)
    proc = diff(a, b, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "**Caution**: prism_demo: the test labels differ" in proc.stdout
    assert "only in A (2 run(s), not diffed): prism_demo · probe logistic · 100 % labels · seed 1" in proc.stdout
    table = pd.read_csv(tmp_path / "out" / "diff.csv")
    assert set(table["fraction"]) == {0.5} and "paired bootstrap" not in set(table["ci_method"])


def test_bad_input_is_one_line(runs, tmp_path):
    a, b = runs["A"], runs["B"]
    line = one_line(diff(a, b, "--fail-on", "aucroc"))
    assert "--fail-on 'aucroc'" in line and "did you mean 'auroc'" in line
    assert "did you mean 'auroc'" in one_line(diff(a, b, "--tol", "aurc=0.1"))
    assert "not a number" in one_line(diff(a, b, "--fail-on", "auroc", "--tol", "x"))
    assert "no registered direction" in one_line(diff(a, b, "--fail-on", "temperature"))
    assert "applies to the --fail-on metrics" in one_line(diff(a, b, "--tol", "0.1"))
    assert "inside A" in one_line(diff(a, b, "--output", a / "d"))
    assert "no such directory" in one_line(diff(tmp_path / "nope", b))
    other = copy(b, tmp_path / "other")
    rows = pd.read_csv(other / "runs.csv")
    rows.assign(fraction=rows["fraction"] * 0.3).to_csv(other / "runs.csv", index=False)
    reseal(other)
    line = one_line(diff(a, other))
    assert str(a) in line and str(other) in line and "no run in common" in line
    bins = copy(b, tmp_path / "bins")
    summary = json.loads((bins / "summary.json").read_text())
    summary["resolved_task"]["ece_bins"] = 10
    (bins / "summary.json").write_text(json.dumps(summary))
    line = one_line(diff(a, bins))
    assert "'ece_bins' differs (A: 15, B: 10)" in line
    assert not (Path(a) / "d").exists()


def test_fallback_cis_without_replicates():
    """Unpaired normal (from the CI columns) and the seed spread (Welch), against closed forms."""
    from scipy import stats

    from prism_plugin.diffing import Side, diff

    def side(label, auroc, lows, highs, model):
        df = pd.DataFrame({"model": model, "task": "t", "fraction": 1.0, "seed": [1, 2, 3], "auroc": auroc,
                           "auroc_ci_low": lows, "auroc_ci_high": highs, "_base": "/nonexistent",
                           "_run_id": ["f1-s1", "f1-s2", "f1-s3"], "_file": "x"})
        return Side(label, Path(label), df)

    a = side("A", [0.80, 0.82, 0.81], [0.70, 0.72, 0.71], [0.90, 0.92, 0.91], "m")
    b = side("B", [0.85, 0.88, 0.86], [0.80, 0.83, 0.81], [0.90, 0.93, 0.91], "m2")
    cell = diff(a, b).cells.iloc[0]
    z = stats.norm.ppf(0.975)
    se = np.hypot(0.2 / (2 * z), 0.1 / (2 * z))
    d = np.mean([0.85, 0.88, 0.86]) - np.mean([0.80, 0.82, 0.81])
    assert cell["ci_method"] == "unpaired normal"
    assert (cell["ci_low"], cell["ci_high"]) == pytest.approx((d - z * se, d + z * se), abs=1e-12)
    assert cell["verdict"] == "within noise"
    # a cell resting on few samples of a class says so where its numbers are shown
    from prism_plugin.commands.diff import render_markdown

    b.runs["min_test_class_count"] = [6, 6, 6]
    result = diff(a, b)
    assert result.cells.iloc[0]["few_test_class"] == 6
    assert "**Few samples**: the rarest test class has 6 samples" in render_markdown(result, [], {}, False)
    a.runs = a.runs.drop(columns=["auroc_ci_low", "auroc_ci_high"])
    cell = diff(a, b).cells.iloc[0]
    welch = stats.ttest_ind([0.85, 0.88, 0.86], [0.80, 0.82, 0.81], equal_var=False).confidence_interval(0.95)
    assert cell["ci_method"] == "seed spread (Welch)" and cell["verdict"] == "better"
    assert (cell["ci_low"], cell["ci_high"]) == pytest.approx((welch.low, welch.high), abs=1e-12)


def test_paired_ci_from_the_bootstrap_plugins_own_artifacts(runs, tmp_path):
    """When the bootstrap plugin ran with the pipeline, its artifacts pair A and B (same test labels)."""
    if not (runs["A"] / "artifacts" / "bootstrap").is_dir():
        pytest.skip("the bootstrap plugin is not among the default plugins: no replicate artifacts were written")
    proc = diff(runs["A"], runs["B"], "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    cells = pd.read_csv(tmp_path / "out" / "diff.csv").query("scope == 'seed mean'").set_index(["fraction", "metric"])
    for fraction, text in ((0.5, "0.5"), (1.0, "1")):
        for metric in ("auroc", "ece_scaled_fixed", "nll"):
            r = cells.loc[(fraction, metric)]
            assert r["ci_method"] == "paired bootstrap"
            lo, hi = seed_mean_ci(runs["A"], runs["B"], text, metric)
            assert (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi), abs=1e-12)
