"""Every reader of a results folder verifies it (issue 25): ``summary.json`` records the SHA-256 of ``runs.csv`` and of
every per-run file (``prism_plugin.manifest``); diff, report, leaderboard, findings, sensitivity, compare and audit
refuse a folder whose files no longer belong together, naming the file, and a rerun recomputes exactly the runs whose
files changed. Inputs that are not results folders are refused by name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism_plugin import manifest
from prism_plugin.results import folder_problem
from tests.conftest import prism_run, run_main, write_precomputed

GRID = ["--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[1,2]"]
LIGHT = ["--disable", "report_basic", "--disable", "geometry_report", "--disable", "audit"]


def _run(emb: Path, out: Path, *extra: str, task: str = "prism_demo"):
    return run_main("--task", task, "--model", "precomputed", "--model-args", f"root={emb}", "--quiet",
                    "--output", str(out), *GRID, "--no-report", *extra)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One finished results folder (4 runs, bootstrap and reliability artifacts) and its embeddings root."""
    root = tmp_path_factory.mktemp("verified")
    emb = write_precomputed(root / "emb" / "Demo-Binary", {"train": 40, "val": 20, "test": 20}, dim=4).parent
    out = root / "clean"
    proc = _run(emb, out)
    assert proc.returncode == 0, proc.stderr
    return emb, out


def _copy(made, tmp_path: Path, name: str = "r") -> Path:
    target = tmp_path / name
    shutil.copytree(made[1], target)
    return target


def _first(folder: Path, sub: str) -> Path:
    return sorted((folder / sub).rglob("*.*"))[0]


def _edit_runs(folder: Path) -> str:
    df = pd.read_csv(folder / "runs.csv")
    df.loc[1, "auroc"] = 0.5
    df.to_csv(folder / "runs.csv", index=False)
    return "runs.csv"


def _swap_bootstrap(folder: Path) -> str:
    files = sorted((folder / "artifacts" / "bootstrap").glob("*.npz"))
    shutil.copyfile(files[0], files[1])  # another run's replicates under this run's name
    return files[1].relative_to(folder).as_posix()


def _remove_reliability(folder: Path) -> str:
    f = _first(folder, "reliability")
    f.unlink()
    return f.relative_to(folder).as_posix()


def _add_artifact(folder: Path) -> str:
    src = sorted((folder / "artifacts" / "bootstrap").glob("*.npz"))[0]
    extra = src.with_name("prism_demo--f0.25-s9.npz")
    shutil.copyfile(src, extra)
    return extra.relative_to(folder).as_posix()


def _edit_reliability(folder: Path) -> str:
    f = _first(folder, "reliability")
    data = json.loads(f.read_text())
    data["n"] = int(data.get("n", 0)) + 1
    f.write_text(json.dumps(data))
    return f.relative_to(folder).as_posix()


def _edit_cell(folder: Path) -> str:
    f = _first(folder, "cells")
    data = json.loads(f.read_text())
    data["row"]["auroc"] = 0.5
    f.write_text(json.dumps(data, allow_nan=True))
    return f.relative_to(folder).as_posix()


TAMPERS = {"runs.csv edited": _edit_runs, "bootstrap file of another run": _swap_bootstrap,
           "reliability file removed": _remove_reliability, "artifact added": _add_artifact,
           "reliability file edited": _edit_reliability, "cell file edited": _edit_cell}


def _refused(proc, name: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.args, proc.stdout, proc.stderr)
    assert lines and lines[-1].startswith("prism-run: error: ") and name in lines[-1], (proc.args, proc.stderr)
    assert "rerun the same prism-run command" in lines[-1]


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_every_change_is_named_and_fails_the_gate(made, tmp_path, tamper):
    clean = _copy(made, tmp_path, "a")
    bad = _copy(made, tmp_path, "b")
    name = TAMPERS[tamper](bad)
    assert folder_problem(clean) is None
    assert name in (folder_problem(bad) or ""), folder_problem(bad)
    _refused(run_main("diff", str(clean), str(bad), "--fail-on", "auroc"), name)
    _refused(run_main("diff", str(bad), str(clean)), name)


READERS = {
    "diff": lambda a, b, o: ("diff", a, b, "--fail-on", "auroc"),
    "report": lambda a, b, o: ("report", b, *LIGHT),
    "leaderboard": lambda a, b, o: ("report", a, b, "--output", o, *LIGHT),
    "findings": lambda a, b, o: ("findings", b, "--output", o),
    "sensitivity": lambda a, b, o: ("sensitivity", a, b),
    "audit": lambda a, b, o: ("audit", b, "--output", o),
    "compare": lambda a, b, o: ("compare", b),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_an_inconsistent_folder(made, tmp_path, reader):
    clean = _copy(made, tmp_path, "a")
    bad = _copy(made, tmp_path, "b")
    name = _swap_bootstrap(bad)
    out = tmp_path / "out"
    _refused(run_main(*READERS[reader](str(clean), str(bad), str(out))), name)
    assert not out.exists()


def test_gate_on_an_edited_table_fails_as_a_process(made, tmp_path):
    """The issue's case, as a real subprocess: B's AUROC edited to 0.5, the bootstrap files untouched."""
    a, b = _copy(made, tmp_path, "a"), _copy(made, tmp_path, "b")
    _edit_runs(b)
    proc = prism_run("diff", str(a), str(b), "--fail-on", "auroc")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "within noise" not in proc.stdout and "runs.csv" in proc.stderr and str(b) in proc.stderr


@pytest.mark.parametrize("tamper", ["runs.csv edited", "bootstrap file of another run", "reliability file removed",
                                    "reliability file edited", "cell file edited"])
def test_the_rerun_recomputes_what_changed_and_restores_every_file(made, tmp_path, tamper):
    emb, clean = made
    bad = _copy(made, tmp_path)
    TAMPERS[tamper](bad)
    proc = _run(emb, bad)
    assert proc.returncode == 0, proc.stderr
    assert folder_problem(bad) is None
    before, after = manifest.build(clean), manifest.build(bad)
    assert after == before  # every listed file byte-identical to the clean run's
    data = json.loads((bad / "summary.json").read_text())
    assert data[manifest.MANIFEST_KEY] == before
    proc = run_main("diff", str(clean), str(bad), "--fail-on", "auroc")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_changed_bootstrap_file_is_named_when_the_run_is_recomputed(made, tmp_path):
    emb, _ = made
    bad = _copy(made, tmp_path)
    name = _swap_bootstrap(bad)
    proc = _run(emb, bad, "--quiet")
    assert proc.returncode == 0
    said = proc.stdout + proc.stderr
    assert name in said and "recomputed 1 saved run" in said, said


def test_inputs_that_are_not_results_folders_are_named(made, tmp_path):
    clean = _copy(made, tmp_path, "a")
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "sub" / "notes.txt").write_text("x")
    stray = tmp_path / "file.txt"
    stray.write_text("x")
    for other in (empty, stray, tmp_path / "missing"):
        for args in (("report", str(clean), str(other), "--output", str(tmp_path / "lb")),
                     ("diff", str(clean), str(other)), ("diff", str(other), str(clean)),
                     ("findings", str(other)), ("sensitivity", str(clean), str(other)),
                     ("audit", str(other), "--output", str(tmp_path / "au"))):
            proc = run_main(*args)
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            assert proc.returncode == 2 and len(lines) == 1 and str(other) in lines[0], (args, proc.stderr)
    assert not (tmp_path / "lb").exists() and not (tmp_path / "au").exists()


def test_group_table_is_verified_against_its_members(tmp_path):
    emb = write_precomputed(tmp_path / "emb" / "Demo-Binary", {"train": 40, "val": 20, "test": 20}, dim=4).parent
    group = tmp_path / "g.yaml"
    group.write_text("group: g2\ntasks:\n  - prism_demo\n")
    out = tmp_path / "out"
    proc = _run(emb, out, task=str(group))
    assert proc.returncode == 0, proc.stderr
    combined = next(out.rglob("group.json")).parent
    assert folder_problem(combined) is None
    df = pd.read_csv(combined / "runs.csv")
    df.loc[0, "auroc"] = 0.5
    df.to_csv(combined / "runs.csv", index=False)
    proc = run_main("report", str(combined), *LIGHT)
    assert proc.returncode == 2 and str(combined / "runs.csv") in proc.stderr, proc.stderr
    proc = _run(emb, out, task=str(group))  # the group run combines the members again
    assert proc.returncode == 0 and folder_problem(combined) is None, proc.stderr


def test_manifest_lists_every_per_run_file(made):
    _, clean = made
    recorded = json.loads((clean / "summary.json").read_text())[manifest.MANIFEST_KEY]
    on_disk = {p.relative_to(clean).as_posix() for sub in manifest.COVERED for p in (clean / sub).rglob("*")
               if p.is_file()} | {"runs.csv"}
    assert set(recorded) == on_disk and len(on_disk) > 3 * 4
    assert all(len(v) == 64 and int(v, 16) >= 0 for v in recorded.values())
    assert np.all([not n.startswith(("figures/", "summaries/", "report")) for n in recorded])
