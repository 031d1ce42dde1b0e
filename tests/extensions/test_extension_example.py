"""The second example package adds one extension of each kind, with no edit to the core.

``examples/prism-extension-example`` is pip-installed (``--no-deps --no-build-isolation``, from a
copy, so the source tree stays clean) once per test session into a private ``--target`` folder
(``install_once``). One real ``prism-run`` subprocess (the folder on ``PYTHONPATH``) runs the example's
tasks with the offline ``demo_vit`` adapter on procedurally generated tiles; the listings, subcommands
and the other runs call the CLI in this process inside ``installed_plugins`` (the folder on
``sys.path``, a fresh plugin host reading its entry points; nothing of it is left after), so other
tests and other plugin hosts never see the plugin.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tests.conftest import installed_plugins, run_main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "prism-extension-example"
PACKAGE_SRC = EXAMPLE / "src" / "prism_extension_example"
ORIGIN = "prism-extension-example 0.1.0"
PLUGIN = "prism_extension_example"
TASK, TRANSFER = "example_noise_tiles", "example_noise_tiles_transfer"
MODEL_DIR = "DemoViT-Tiny"
SECTION = "Example extension: confident errors"
METRIC, METRIC_LABEL = "example_brier_top", "top-label Brier (example)"


def prism_run(env: dict, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("prism-run")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "prism_plugin.cli"]
    return subprocess.run(cmd + list(args), env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def load_module(name: str):
    """One module of the example by file (not importable in this process: keeps entry points private)."""
    spec = importlib.util.spec_from_file_location(f"_example_{name}", PACKAGE_SRC / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example_env(install_once, tmp_path_factory):
    env = install_once(EXAMPLE)  # the session's installation (shared with test_feature_source_example)
    target = Path(env["_TARGET"])
    assert (target / "prism_extension_example" / "tasks" / f"{TASK}.yaml").is_file()  # package data shipped
    root = tmp_path_factory.mktemp("extension-example")  # this module's own files (never into the target)
    return {"PYTHONPATH": env["PYTHONPATH"], "PRISM_CACHE_DIR": str(root / "cache"), "HF_HUB_OFFLINE": "1",
            "_TARGET": str(target), "_ROOT": str(root)}


@contextmanager
def example_cli(example_env):
    """``cli(*args)``: ``prism-run ARGS`` in this process with the example installed (its cache folder)."""
    with installed_plugins(example_env["_TARGET"]):
        yield lambda *args: run_main(*args, env={"PRISM_CACHE_DIR": example_env["PRISM_CACHE_DIR"]})


def variant_tasks(example_env) -> list[Path]:
    """Two copies of the example task: without example_threshold (default 0.5); with the example head."""
    text = task_text(example_env)
    default = re.sub(r"(?m)^example_threshold:.*\n", "", text).replace(f"task: {TASK}", "task: example_default")
    centroid = (text.replace(f"task: {TASK}", "task: example_centroid_task")
                .replace("probe: {kind: logistic, C: 1.0, max_iter: 1000}", "probe: {kind: example_centroid}")
                .replace("adaptation: [median_shift, tgtstd]", "adaptation: [median_shift, shot_im]"))
    assert default != text and "example_centroid}" in centroid and "shot_im" in centroid
    folder = Path(example_env["_ROOT"]) / "variants"
    folder.mkdir(exist_ok=True)
    (folder / "default.yaml").write_text(default)
    (folder / "centroid.yaml").write_text(centroid)
    return [folder / "default.yaml", folder / "centroid.yaml"]


@pytest.fixture(scope="module")
def results(example_env):
    """The example's tasks (in-distribution, transfer) and two variants, run once with demo_vit in a real
    ``prism-run`` process; the example task's report is then written by ``prism-run report`` (the builder a run
    ends with, the plugin host with the example) in this process: the figures of one task, not of four."""
    out = Path(example_env["_ROOT"]) / "results"
    tasks = [TASK, TRANSFER, *map(str, variant_tasks(example_env))]
    ok(prism_run(example_env, *[a for t in tasks for a in ("--task", t)], "--model", "demo_vit",
                 "--output", str(out), "--quiet", "--num-workers", "0", "--no-report"))
    with example_cli(example_env) as cli:
        ok(cli("report", str(out / TASK / MODEL_DIR)))
    return out


def task_text(example_env) -> str:
    return (Path(example_env["_TARGET"]) / "prism_extension_example" / "tasks" / f"{TASK}.yaml").read_text()


@pytest.fixture(scope="module")
def listings(example_env) -> dict[str, str]:
    wanted = ["ls sources", "ls adaptation", "ls metrics", "ls task-keys", "ls commands", "ls heads", "ls plugins",
              "ls tasks", "--help"]
    with example_cli(example_env) as cli:
        return {argv: ok(cli(*argv.split())).stdout for argv in wanted}


# -- the registries list the example's entries with its origin --------------------------------

@pytest.mark.parametrize("registry, name", [
    ("sources", "noise_tiles"), ("adaptation", "median_shift"), ("metrics", METRIC),
    ("metrics", "example_confident_error"), ("task-keys", "example_threshold"), ("commands", "example-hello"),
    ("heads", "example_centroid"),
])
def test_ls_shows_each_entry_with_its_origin(listings, registry, name):
    text = listings[f"ls {registry}"]
    lines = [line for line in text.splitlines() if line.split() and line.split()[0] == name]
    assert lines, f"{name} not in `prism-run ls {registry}`:\n{text}"
    assert ORIGIN in lines[0], lines[0]


def test_ls_plugins_tasks_and_help(listings):
    plugins = listings["ls plugins"]
    line = next(line for line in plugins.splitlines() if line.startswith(PLUGIN))
    for hook in ("register_adaptation", "register_sources", "register_heads", "register_metrics",
                 "register_task_keys", "register_commands", "run_metrics", "report_sections", "task_paths"):
        assert hook in line, line
    tasks = listings["ls tasks"]
    for name in (TASK, "example_noise_tiles_shifted", TRANSFER):
        assert re.search(rf"^{name}\s.*prism_extension_example", tasks, re.M), tasks
    assert "example-hello" in listings["--help"]


def test_disable_switches_the_whole_plugin_off(example_env, listings):
    with example_cli(example_env) as cli:
        proc = ok(cli("ls", "sources", "--disable", PLUGIN))
    assert "noise_tiles" not in proc.stdout and "imagefolder" in proc.stdout
    assert "noise_tiles" in listings["ls sources"]  # the same listing without --disable has it


# -- one run: TTA columns, metrics, summary cells, report -------------------------------------

def test_runs_csv_has_the_tta_and_metric_columns(results):
    runs = pd.read_csv(results / TASK / MODEL_DIR / "runs.csv")
    assert len(runs) == 4 and sorted(runs["fraction"].unique()) == [0.5, 1.0]
    for col in ("f1_macro_median_shift", "gain_median_shift", "ece_median_shift", "nll_median_shift",
                "f1_macro_tgtstd", METRIC, "example_confident_error"):
        assert col in runs, col
        assert runs[col].notna().all(), col
    np.testing.assert_allclose(runs["gain_median_shift"], runs["f1_macro_median_shift"] - runs["f1_macro"])
    assert runs[METRIC].between(0, 1).all()
    assert (runs["f1_macro"] < 1).all()  # the tiles overlap: the example metrics have something to count


def test_transfer_runs_the_default_tta_method(results):
    runs = pd.read_csv(results / TRANSFER / MODEL_DIR / "runs.csv")
    # no adaptation: key in the transfer task: median_shift (default=True) runs beside the built-ins
    assert {"f1_macro_median_shift", "gain_median_shift", "f1_macro_cbr"} <= set(runs.columns)
    # the shift moves every tile; re-centring on the target median recovers most of the loss
    assert (runs["gain_median_shift"] > 0).all()


def test_summary_cells_carry_the_example_metric(results):
    runs = pd.read_csv(results / TASK / MODEL_DIR / "runs.csv")
    cells = json.loads((results / TASK / MODEL_DIR / "summary.json").read_text())["cells"]
    assert len(cells) == 2
    for cell in cells:
        rows = runs[runs["fraction"] == cell["fraction"]]
        assert cell[f"{METRIC}_mean"] == pytest.approx(rows[METRIC].mean())
        assert cell[f"{METRIC}_std"] == pytest.approx(rows[METRIC].std(ddof=1), nan_ok=True)
        assert cell["example_confident_error_mean"] == pytest.approx(rows["example_confident_error"].mean())


def test_report_has_the_example_section_and_metric(results):
    html = (results / TASK / MODEL_DIR / "report.html").read_text()
    assert SECTION in html
    assert "example_confident_error" in html  # the section's own table
    assert METRIC_LABEL in html, "the described metric is not in the report's metric table"


# -- the task key ----------------------------------------------------------------------------

def test_task_key_value_reaches_the_metric(results):
    """Default 0.5 (binary: every prediction is confident) counts every error; the task's 0.6 fewer."""
    shipped = pd.read_csv(results / TASK / MODEL_DIR / "runs.csv").sort_values(["fraction", "seed"])
    at_half = pd.read_csv(results / "example_default" / MODEL_DIR / "runs.csv").sort_values(["fraction", "seed"])
    a, b = at_half["example_confident_error"].to_numpy(), shipped["example_confident_error"].to_numpy()
    assert (a > 0).all() and (a >= b).all() and (a > b).any(), (a, b)


def test_third_party_head_is_fitted_and_adapted(results):
    runs = pd.read_csv(results / "example_centroid_task" / MODEL_DIR / "runs.csv")
    assert len(runs) == 4 and set(runs["probe"]) == {"example_centroid"}
    assert runs["auroc"].between(0.5, 1).all()
    # linear=True: SHOT-IM can update its (W, b); a non-linear head would give NaN here
    assert runs["f1_macro_shot_im"].notna().all() and runs["f1_macro_median_shift"].notna().all()


def resolved_probes(cases) -> list:
    """Each case's task loaded by a fresh index of the shared host: its resolved probe, or the one-line error."""
    from prism_plugin.errors import PrismError
    from prism_plugin.plugins import get_host
    from prism_plugin.tasks.index import default_index

    out = []
    for target, overrides in cases:
        try:
            out.append(default_index(get_host()).load_task(target, overrides).probe)
        except PrismError as exc:
            out.append(str(exc))
    return out


def test_head_settings_are_declared_and_switching_the_head_drops_them(example_env, tmp_path):
    alpha = task_text(example_env).replace(f"task: {TASK}", "task: example_alpha").replace(
        "probe: {kind: logistic, C: 1.0, max_iter: 1000}", "probe: {kind: example_centroid, alpha: 0.5}")
    (tmp_path / "alpha.yaml").write_text(alpha)
    (tmp_path / "override.yaml").write_text("task: example_override\ninclude: alpha.yaml\nprobe: {kind: logistic}\n")
    (tmp_path / "explicit.yaml").write_text("task: example_explicit\ninclude: alpha.yaml\n"
                                            "probe: {kind: logistic, alpha: 0.5}\n")
    (tmp_path / "bad.yaml").write_text("task: example_bad\ninclude: alpha.yaml\nprobe: {alpha: 2}\n")
    a, o, e, b = (str(tmp_path / f"{n}.yaml") for n in ("alpha", "override", "explicit", "bad"))
    cases = [(a, []), (a, ["probe.kind=logistic"]), (a, ["probe.kind=logistic", "probes=null"]), (o, []), (e, []),
             (b, []), (a, ["probe.kind=example_centroid", "probe.alpa=1"])]
    with example_cli(example_env) as cli:
        own, set_kind, flag, include, explicit, bad, typo = resolved_probes(cases)
        # and a real run with --probe logistic on the task written for the plugin head
        ok(cli("--task", a, "--model", "demo_vit", "--probe", "logistic", "--no-report", "--quiet",
               "--num-workers", "0", "--output", str(tmp_path / "out")))
    assert own == {"kind": "example_centroid", "temperature": 0.05, "alpha": 0.5}  # the default filled in
    logistic = {"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": "sklearn"}
    assert set_kind == flag == include == logistic  # --set probe.kind, --probe, include + override
    assert f"{e}:3: probe.alpha: unknown key 'probe.alpha' for probe head 'logistic'" in explicit
    assert "(settings of logistic: C, max_iter, tol, backend)" in explicit
    assert "probe.alpha: must be in [0, 1], got 2.0 (probe head example_centroid)" in bad
    assert "--set probe.alpa: probe.alpa: unknown key 'probe.alpa' for probe head 'example_centroid'; did you mean " \
           "'alpha'? (settings of example_centroid: temperature, alpha)" in typo
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert len(runs) == 4 and runs["auroc"].notna().all()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["resolved_task"]["probe"] == logistic


def test_bad_task_key_value_is_one_line_with_file_and_line(example_env, tmp_path):
    text = task_text(example_env).replace("example_threshold: 0.6", "example_threshold: 1.5")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line_no = text.splitlines().index("example_threshold: 1.5") + 1
    with example_cli(example_env) as cli:
        proc = cli("--task", str(path), "--model", "demo_vit", "--output", str(tmp_path / "o"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr
    assert f"{path}:{line_no}: example_threshold: must be a number strictly between 0 and 1, got 1.5" in errors[0]


# -- the subcommand and compare --------------------------------------------------------------

def test_example_hello_subcommand(example_env, results):
    with example_cli(example_env) as cli:
        proc = ok(cli("example-hello", str(results / TASK)))
    runs = pd.read_csv(results / TASK / MODEL_DIR / "runs.csv")
    assert "4 runs of 1 model(s) (DemoViT-Tiny) on 1 task(s) (example_noise_tiles)" in proc.stdout
    assert f"mean {METRIC}: {runs[METRIC].mean():.4f}" in proc.stdout


def test_compare_shows_the_example_metric(example_env, results):
    # the variants repeat the example task's dataset: compare the shipped tasks only
    with example_cli(example_env) as cli:
        proc = ok(cli("compare", str(results / TASK), str(results / TRANSFER)))
    assert METRIC_LABEL in proc.stdout, proc.stdout  # a column of the ranking (compare=True)


# -- the pieces, in this process (loaded by file) ---------------------------------------------

def test_metric_functions_by_hand():
    m = load_module("metrics")
    y = np.array([0, 1, 1, 0])
    proba = np.array([[0.9, 0.1], [0.3, 0.7], [0.8, 0.2], [0.45, 0.55]])
    # conf 0.9 ok, 0.7 ok, 0.8 wrong, 0.55 wrong
    assert m.brier_top(y, proba) == pytest.approx(((0.1) ** 2 + 0.3 ** 2 + 0.8 ** 2 + 0.55 ** 2) / 4)
    assert m.confident_error(y, proba, 0.5) == pytest.approx(0.5)
    assert m.confident_error(y, proba, 0.6) == pytest.approx(0.25)
    assert m.confident_error(y, proba, 0.85) == 0.0


def test_median_shift_recentres_on_the_median():
    from prism_plugin.adaptation.tta import AdaptationInputs, source_moments
    from prism_plugin.heads.logistic import LogisticProbe

    tta = load_module("tta")
    rng = np.random.default_rng(0)
    Xs = rng.normal(size=(60, 4)).astype(np.float32)
    ys = (Xs[:, 0] > 0).astype(int)
    head = LogisticProbe(seed=0).fit(Xs, ys)
    Xt = (Xs + 3.0).astype(np.float32)
    Xt[0] += 1000.0  # one outlier: the median ignores it, the mean would not
    src = source_moments(Xs)
    a = tta.median_shift(Xt, AdaptationInputs(head=head, source=src, n_classes=2))
    expected = head.evaluate((src.mean + Xt - np.median(Xt, axis=0)).astype(np.float32)).proba
    np.testing.assert_allclose(a.proba, expected, rtol=1e-6)
    assert a.method == "median_shift" and a.pred.shape == (60,)
    assert (a.pred[1:] == ys[1:]).mean() > 0.9  # the shift is undone
    # the task key example_median_quantile reaches the method through its meta argument
    q = tta.median_shift(Xt, AdaptationInputs(head=head, source=src, n_classes=2),
                         meta={"example_median_quantile": 0.9})
    expected = head.evaluate((src.mean + Xt - np.quantile(Xt, 0.9, axis=0)).astype(np.float32)).proba
    np.testing.assert_allclose(q.proba, expected, rtol=1e-6)


def test_source_fingerprint_depends_on_content():
    src_mod = load_module("source")
    task = SimpleNamespace(name="t", file="t.yaml", dataset="d", n_classes=2, class_names=("a", "b"), split=None,
                           splits={"test": SimpleNamespace(name="test")})
    one = src_mod.NoiseTilesSource(task, n_per_class=3, size=8, seed=0).split("test")
    again = src_mod.NoiseTilesSource(task, n_per_class=3, size=8, seed=0).split("test")
    other = src_mod.NoiseTilesSource(task, n_per_class=3, size=8, seed=1).split("test")
    shifted = src_mod.NoiseTilesSource(task, n_per_class=3, size=8, seed=0, shift=10).split("test")
    assert len(one) == 6 and one.labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert one.fingerprint == again.fingerprint
    assert len({one.fingerprint, other.fingerprint, shifted.fingerprint}) == 3
    from prism_plugin.errors import PrismError

    with pytest.raises(PrismError, match=r"t.yaml: source.size: must be an integer in \[8, 512\]"):
        src_mod.NoiseTilesSource(task, size=2)


def test_the_example_is_left_nowhere_in_this_process(example_env, listings):
    """After the in-process calls (``listings`` saw the plugin): no entry point, module, path or cached host of
    the example is left for the next tests of this worker."""
    from importlib.metadata import entry_points

    from prism_plugin.plugins import get_host

    target = example_env["_TARGET"]
    assert PLUGIN in listings["ls plugins"]
    assert target not in sys.path
    assert PLUGIN not in {ep.name for ep in entry_points(group="prism_plugin")}
    assert not [n for n, m in list(sys.modules.items()) if str(getattr(m, "__file__", "") or "").startswith(target)]
    assert PLUGIN not in get_host().infos
