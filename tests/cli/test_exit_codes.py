"""The exit-status contract (docs/exit-codes.md), for every kind of outcome, with and without ``--debug``, the
global options before or after the subcommand.

0 ok, 1 a gate failed, 2 bad input or refused, 70 internal error (a bug, also a plugin's), 130 Ctrl-C, 143 SIGTERM.
``--debug`` (anywhere) adds the traceback, keeps the status and never ends with "rerun with --debug".
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prism_plugin import errors
from prism_plugin.cli import hoist_globals, main
from prism_plugin.plugins import PluginHost
from tests.conftest import REPO, write_precomputed
from tests.reliability import blocking_run

TASK = ("task: toy\ndataset: Toy\nclass_names: [a, b]\nsource: {type: precomputed}\n"
        "splits: {train: train, val: val, test: test}\nlabel_fractions: [1.0]\nseeds: [1, 2]\n")
HINT = "rerun with --debug"


def test_the_contract_has_one_place_and_distinct_codes():
    codes = {"ok": errors.EXIT_OK, "gate": errors.EXIT_GATE, "bad input": errors.EXIT_BAD_INPUT,
             "internal": errors.EXIT_INTERNAL, "interrupted": errors.EXIT_INTERRUPTED,
             "terminated": errors.EXIT_TERMINATED}
    assert codes == {"ok": 0, "gate": 1, "bad input": 2, "internal": 70, "interrupted": 130, "terminated": 143}
    table = (REPO / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    for code in codes.values():
        assert f"| {code} |" in table, code


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    """Two tiny results folders of one task: A on separable features, B on pure noise (a regression)."""
    root = tmp_path_factory.mktemp("exit")
    (root / "tasks").mkdir()
    (root / "tasks" / "toy.yaml").write_text(TASK)
    (root / "bad.yaml").write_text("task: bad\ndataset: 5\n")
    write_precomputed(root / "embA" / "Toy", {"train": 80, "val": 40, "test": 80})
    noise = write_precomputed(root / "embB" / "Toy", {"train": 80, "val": 40, "test": 80})
    rng = np.random.default_rng(3)
    for split, n in (("train", 80), ("val", 40), ("test", 80)):
        np.save(noise / f"{split}_features.npy", rng.normal(size=(n, 8)).astype(np.float32))
    for side in ("A", "B"):
        assert call(*toy_run(root, side))[0] == 0
    return root


def toy_run(root: Path, side: str, *extra: str) -> list[str]:
    return ["--task", "toy", "--include-path", str(root / "tasks"), "--model", "precomputed", "--model-args",
            f"root={root / f'emb{side}'}", "--output", str(root / side), "--cache-dir", str(root / "cache"),
            "--quiet", "--no-report", *extra]


def call(*argv: str, host=None) -> tuple[int, str]:
    """``prism-run ARGV`` in this process: (exit status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv), host=host)
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, err.getvalue()


def placements(argv: list[str]) -> list[tuple[list[str], bool]]:
    """``argv`` without --debug, with it before the subcommand (or first) and with it last."""
    return [(argv, False), (["--debug", *argv], True), ([*argv, "--debug"], True)]


def check(code: int, err: str, expected: int, debug: bool, traceback: bool | None = None) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    assert code == expected, (code, err)
    if debug:
        assert HINT not in last, last
    if traceback is not None:
        assert ("Traceback (most recent call last)" in err) == (traceback and debug), err
    return last


def kinds(toy: Path) -> dict[str, tuple[list[str], int]]:
    a, b = str(toy / "A"), str(toy / "B")
    return {
        "ok: ls": (["ls", "heads"], 0),
        "ok: validate": (["validate", "toy", "--include-path", str(toy / "tasks")], 0),
        "ok: diff without a gate": (["diff", a, b], 0),
        "gate failed: diff --fail-on": (["diff", a, b, "--fail-on", "auroc", "--ignore-noise"], 1),
        "bad input: validate": (["validate", str(toy / "bad.yaml")], 2),
        "bad input: the run": (["--task", str(toy / "bad.yaml"), "--model", "demo_vit"], 2),
        "bad input: unknown command": (["lss", "heads"], 2),
        "bad input: a diff option": (["diff", a, b, "--level", "7"], 2),
        "bad input: argparse": (["ls", "heads", "--no-such-flag"], 2),
    }


@pytest.mark.parametrize("kind", ["ok: ls", "ok: validate", "ok: diff without a gate", "gate failed: diff --fail-on",
                                  "bad input: validate", "bad input: the run", "bad input: unknown command",
                                  "bad input: a diff option", "bad input: argparse"])
def test_each_outcome_has_its_status_with_and_without_debug(toy, kind):
    argv, expected = kinds(toy)[kind]
    for args, debug in placements(argv):
        code, err = call(*args)
        last = check(code, err, expected, debug)
        if expected == 2 and not kind.endswith(("validate", "argparse")):
            assert last.startswith("prism-run: error: "), err
            assert ("Traceback (most recent call last)" in err) == debug, err


def test_an_internal_error_is_70_not_a_gate_and_not_bad_input(toy, monkeypatch):
    import prism_plugin.commands.ls as ls
    import prism_plugin.commands.run as run

    def bug(args):
        raise ValueError("a bug in the command")

    monkeypatch.setattr(ls, "run", bug)
    for args, debug in placements(["ls", "heads"]):
        last = check(*call(*args), errors.EXIT_INTERNAL, debug, traceback=True)
        assert last.startswith("prism-run: internal error: command 'ls' (plugin 'builtin_commands'"), last
        assert "ValueError: a bug in the command" in last and (HINT in last) == (not debug)
    monkeypatch.setattr(run, "run", bug)
    for args, debug in placements(toy_run(toy, "A")):
        last = check(*call(*args), errors.EXIT_INTERNAL, debug, traceback=True)
        assert last.startswith("prism-run: internal error: ValueError: a bug in the command"), last


def test_a_plugin_hook_that_raises_is_an_internal_error(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_TEST_GATE", "raise-hook")
    host = PluginHost(extra_plugins=[blocking_run.plugin()])
    argv = toy_run(toy, "A", "--output", str(tmp_path / "out"))
    for args, debug in placements(argv):
        last = check(*call(*args, host=host), errors.EXIT_INTERNAL, debug, traceback=True)
        assert last.startswith("prism-run: internal error: plugin 'test_gate' failed in hook run_metrics"), last
        assert "ZeroDivisionError" in last and "--disable test_gate" in last and (HINT in last) == (not debug)


def test_global_options_work_before_the_subcommand(toy):
    assert hoist_globals(["--debug", "--disable", "x", "--include-path=d", "ls", "heads"]) == [
        "ls", "--debug", "--disable", "x", "--include-path=d", "heads"]
    assert hoist_globals(["--debug", "--task", "t"]) == ["--debug", "--task", "t"]  # the main job: unchanged
    tasks = str(toy / "tasks")
    for before, after in ((["--include-path", tasks, "validate", "toy"], ["validate", "toy", "--include-path", tasks]),
                          (["--disable", "adaptation", "ls", "heads"], ["ls", "heads", "--disable", "adaptation"]),
                          (["--disable", "nope", "ls", "heads"], ["ls", "heads", "--disable", "nope"])):
        assert call(*before) == call(*after)
    assert call("--disable", "nope", "ls", "heads")[0] == 2  # an unknown plugin: bad input either way


def _blocked(toy: Path, out: Path, *extra: str) -> subprocess.Popen:
    # SIGINT as a terminal delivers it: a shell without job control starts background commands with SIGINT
    # ignored, and the run would inherit that
    proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.blocking_run",
                             *toy_run(toy, "A", "--output", str(out), *extra)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PRISM_TEST_GATE": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stdout:
        if line.strip() == "gate: inside":
            return proc
    proc.wait()
    raise AssertionError(f"the run ended before its gate (rc {proc.returncode}): {proc.stderr.read()}")


@pytest.mark.parametrize("sig, expected, word, debug", [(signal.SIGINT, 130, "interrupted", False),
                                                        (signal.SIGTERM, 143, "terminated (SIGTERM)", True)])
def test_interrupted_and_terminated_runs(toy, tmp_path, sig, expected, word, debug):
    """Each signal in a real process, one without --debug and one with it (the traceback, the same last line)."""
    proc = _blocked(toy, tmp_path / "out", *(["--debug"] if debug else []))
    proc.send_signal(sig)
    _, err = proc.communicate()
    last = check(proc.returncode, err, expected, debug, traceback=True)
    assert last == f"prism-run: {word}; finished runs are kept, rerun the same command to resume", err


def test_the_console_script_exits_with_the_contract(toy, tmp_path):
    """A real process: a plugin's check raising is 70, one line, no traceback (with --debug: the in-process
    placements above, and a real process's traceback in the SIGTERM case)."""
    env = {**os.environ, "PRISM_TEST_GATE": "raise"}
    proc = subprocess.run([sys.executable, "-m", "tests.reliability.blocking_run",
                           *toy_run(toy, "A", "--output", str(tmp_path / "out"))],
                          cwd=REPO, capture_output=True, text=True, env=env)
    last = check(proc.returncode, proc.stderr, errors.EXIT_INTERNAL, False, traceback=True)
    assert "internal error: ZeroDivisionError: the test plugin divided by zero" in last, proc.stderr
    assert HINT in last
