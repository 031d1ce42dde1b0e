"""One writer per results folder: real concurrent ``prism-run`` processes into one folder.

A run is stopped in the middle by a test plugin (:mod:`tests.reliability.blocking_run`: it says ``gate: inside``
and waits for a line on stdin), so the test knows without any clock that the run holds its folder; or the test
process holds a folder itself with :mod:`prism_plugin.folder_lock`. No step waits for a time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from prism_plugin import folder_lock
from prism_plugin.folder_lock import LOCK_NAME
from tests.conftest import REPO, prism_run, run_main, write_precomputed
from tests.reliability.conftest import cli_cmd

BUSY = "another prism-run is writing here"
TASK = ("task: {name}\ndataset: Toy\nclass_names: [a, b]\nsource: {{type: precomputed}}\n"
        "splits: {{train: train, val: val, test: test}}\nlabel_fractions: [0.5, 1.0]\nseeds: [1, 2]\n")


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lock")
    write_precomputed(root / "emb" / "Toy", {"train": 60, "val": 30, "test": 30})
    (root / "tasks").mkdir()
    for name in ("toy", "toy2"):
        (root / "tasks" / f"{name}.yaml").write_text(TASK.format(name=name))
    (root / "tasks" / "pair.yaml").write_text("group: pair\ntasks: [toy, toy2]\n")
    return root


def args(toy: Path, out: Path, *extra: str, task: str = "toy") -> list[str]:
    return ["--task", task, "--include-path", str(toy / "tasks"), "--model", "precomputed", "--model-args",
            f"root={toy / 'emb'}", "--output", str(out), "--cache-dir", str(toy / "cache"), "--quiet", "--no-report",
            *extra]


def blocked_run(toy: Path, out: Path, *extra: str) -> subprocess.Popen:
    """A prism-run into ``out`` that is inside its run (cells and runs.csv written, folder held) on return."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.blocking_run", *args(toy, out, *extra)],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PRISM_TEST_GATE": "1"})
    for line in proc.stdout:
        if line.strip() == "gate: inside":
            return proc
    proc.wait()
    raise AssertionError(f"the blocked run ended before its gate (rc {proc.returncode}): {proc.stderr.read()}")


def let_go(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate("\n")
    return proc.returncode, err


def lines_until(stream, needle: str) -> str:
    """Read ``stream`` line by line up to the first line holding ``needle`` (EOF: what was read)."""
    seen = []
    for line in stream:
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"{needle!r} never came: {''.join(seen)}")


def errors(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.strip() and not x.startswith("prism-run: warning:")]


def test_a_second_run_into_a_fresh_folder_stops_at_once_naming_the_holder(toy, tmp_path):
    """The issue's case: C = 1 and C = 0.1 into one fresh folder. The second stops before any work, in one line
    naming the first (PID, command, start time); the first finishes with a table of its own runs only."""
    out = tmp_path / "out"
    first = blocked_run(toy, out, "--set", "probe.C=1")
    try:
        holder = folder_lock.holder(out)
        assert holder["pid"] == first.pid and holder["command"].startswith("prism-run --task toy --include-path")
        second = prism_run(*args(toy, out, "--set", "probe.C=0.1"))
        lines = errors(second.stderr)
        assert second.returncode == 2 and len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
        assert lines[0].startswith(f"prism-run: error: {out}: {BUSY} (PID {first.pid}, `prism-run --task toy ")
        assert lines[0].endswith(f"started {holder['started']}); wait for it, or pass --wait"), lines[0]
    finally:
        rc, err = let_go(first)
    assert rc == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resolved_task"]["probe"]["C"] == 1 and summary["n_runs"] == 4
    assert len(list((out / "cells").glob("*.json"))) == 4 and (out / "runs.csv").is_file()
    assert not (out / LOCK_NAME).exists()  # released and removed with the run


def test_wait_waits_for_the_holder_and_then_reuses_its_runs(toy, tmp_path):
    out = tmp_path / "out"
    first = blocked_run(toy, out)
    second = subprocess.Popen(cli_cmd() + args(toy, out, "--wait"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        line = lines_until(second.stderr, "waiting for")
        assert f"{out}: waiting for PID {first.pid}, `prism-run --task toy" in line
        assert second.poll() is None  # the first is held at its gate: the second cannot have gone on
    finally:
        rc, err = let_go(first)
    assert rc == 0, err
    _, rest = second.communicate()
    assert second.returncode == 0, rest
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["reused_cells"]) == 4  # it ran after the first, on the first's finished runs


def test_a_lock_left_by_a_killed_run_is_taken_over_in_one_line(toy, tmp_path):
    out = tmp_path / "out"
    first = blocked_run(toy, out)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    assert folder_lock.holder(out)["pid"] == first.pid  # the record stays, the kernel lock went with the process
    again = prism_run(*args(toy, out))
    assert again.returncode == 0, again.stderr
    taken = [x for x in again.stderr.splitlines() if "taking over the lock" in x]
    assert len(taken) == 1 and f"{out}: taking over the lock left by PID {first.pid}" in taken[0], again.stderr
    assert taken[0].startswith("prism-run: warning: ") and "which ended without releasing it" in taken[0]
    assert "still holds" not in taken[0] and "`prism-run --task toy " in taken[0]
    assert len(json.loads((out / "summary.json").read_text())["reused_cells"]) == 4
    assert not (out / LOCK_NAME).exists()


def test_a_group_run_takes_every_folder_before_any_work(toy, tmp_path):
    """A group writes its members' folders and its own runs.csv: a held group folder stops the whole group before
    any member is written, naming the holder (here: this test process)."""
    root = tmp_path / "res"
    with folder_lock.writing(root / "pair"):
        proc = prism_run(*args(toy, root, task="pair"))
        assert proc.returncode == 2 and f"{root / 'pair'}: {BUSY} (PID {os.getpid()}," in proc.stderr, proc.stderr
    assert not list(root.rglob("cells")) and not list(root.rglob("runs.csv"))
    assert not (root / "pair").exists()  # the folder the lock made, empty, went with the lock
    proc = prism_run(*args(toy, root, task="pair"))
    assert proc.returncode == 0, proc.stderr
    assert (root / "pair" / "runs.csv").is_file() and not list(root.rglob(LOCK_NAME))


def test_report_and_output_folders_are_locked_and_wait_works(toy, tmp_path):
    out, other = tmp_path / "out", tmp_path / "other"
    run_main(*args(toy, out), check=True)
    with folder_lock.writing(out):
        busy = prism_run("report", str(out))
        assert busy.returncode == 2 and errors(busy.stderr) == [errors(busy.stderr)[0]], busy.stderr
        assert f"{out}: {BUSY} (PID {os.getpid()}," in busy.stderr and not (out / "report.md").exists()
        waiting = subprocess.Popen(cli_cmd() + ["report", str(out), "--wait"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        lines_until(waiting.stderr, "waiting for")
        assert waiting.poll() is None
    _, err = waiting.communicate()  # released: the report is written now
    assert waiting.returncode == 0 and (out / "report.md").is_file(), err
    with folder_lock.writing(other):
        busy = prism_run("diff", str(out), str(out), "--output", str(other))
        assert busy.returncode == 2 and f"{other}: {BUSY}" in busy.stderr, busy.stderr
        assert not (other / "diff.md").exists()


def test_the_lock_is_reentrant_and_leaves_nothing_behind(tmp_path):
    fresh = tmp_path / "a" / "b"
    with folder_lock.writing(fresh):
        assert folder_lock.held(fresh) and folder_lock.holder(fresh)["pid"] == os.getpid()
        with folder_lock.writing(fresh):  # the run writes its report under the lock it holds
            assert (fresh / LOCK_NAME).is_file()
        assert (fresh / LOCK_NAME).is_file()  # still held: one release per hold
    assert not (tmp_path / "a").exists()  # made by the lock, nothing written: removed with it
    with folder_lock.writing(fresh):
        (fresh / "runs.csv").write_text("x\n")
    assert sorted(p.name for p in fresh.iterdir()) == ["runs.csv"]  # written into: kept, without the lock file
    with folder_lock.scope():
        folder_lock.take([fresh, tmp_path / "c"])
        assert folder_lock.held(fresh) and folder_lock.held(tmp_path / "c")
    assert not folder_lock.held(fresh) and not (tmp_path / "c").exists()


def test_the_lock_file_is_not_part_of_the_results_layout(toy, tmp_path):
    """A lock file left in a finished folder (its writer killed) changes nothing for readers and the checks."""
    from prism_plugin.results import LAYOUT, check_layout, results_inputs

    out = tmp_path / "out"
    run_main(*args(toy, out), check=True)
    (out / LOCK_NAME).write_text(json.dumps({"pid": 999999999, "command": "prism-run gone", "started": "x"}))
    assert LOCK_NAME not in LAYOUT
    check_layout(out)
    assert results_inputs([out]) == [out]
    proc = run_main("report", str(out))
    assert proc.returncode == 0 and "taking over the lock left by PID 999999999" in proc.stderr, proc.stderr
    assert not (out / LOCK_NAME).exists()


def test_every_command_that_writes_a_folder_has_wait():
    from prism_plugin.cli import command_parser, main_parser
    from prism_plugin.plugins import get_host

    host = get_host(())
    assert "--wait" in main_parser(host)._option_string_actions
    for name in ("report", "audit", "diff", "findings", "sensitivity", "geometry", "reference"):
        parser, _, _ = command_parser(host, name)
        sub = next(a for a in parser._actions if a.dest == "command").choices[name]
        assert "--wait" in sub._option_string_actions, name
