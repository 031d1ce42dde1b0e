"""Processes: pool workers die with prism-run (kill -9 included) and let `prism-run ... | tee` end;
SIGTERM unwinds like Ctrl-C (temporary files removed, workers stopped) with its own exit status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


from prism_plugin.cli import main
from tests.conftest import REPO, write_precomputed


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited (only its parent has not reaped it)


def test_kill_9_of_a_jobs_2_run_takes_its_workers_and_closes_the_pipe(tmp_path):
    write_precomputed(tmp_path / "emb" / "Toy", {"train": 3000, "val": 300, "test": 300}, dim=128, n_classes=3)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "toy.yaml").write_text(
        "task: toy\ndataset: Toy\nclass_names: [a, b, c]\nsource: {type: precomputed}\n"
        "splits: {train: train, val: val, test: test}\nlabel_fractions: [0.5, 1.0]\nseeds: [1, 2, 3, 4, 5]\n")
    exe = Path(sys.executable).with_name("prism-run")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "prism_plugin.cli"]
    proc = subprocess.Popen(
        cmd + ["--task", "toy", "--include-path", str(tmp_path / "tasks"), "--model", "precomputed",
               "--model-args", f"root={tmp_path / 'emb'}", "--output", str(tmp_path / "out"), "--jobs", "2",
               "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 600  # a hang guard, not a speed limit
        while time.monotonic() < deadline and proc.poll() is None:
            seen |= _children(proc.pid)
            if len(seen) >= 3:  # the resource tracker and two pool workers
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(seen) >= 3, f"no pool workers seen ({seen}); rc={proc.poll()}"
        time.sleep(0.3)  # let them start their units
        os.kill(proc.pid, signal.SIGKILL)  # the driver only, as `kill -9 PID` does
        proc.wait()  # the driver was killed: it is gone, however loaded the machine
        drained = threading.Event()
        reader = threading.Thread(target=lambda: (proc.stdout.read(), drained.set()), daemon=True)
        reader.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 300 and any(_alive(p) for p in seen):  # a hang guard, not a speed limit
            time.sleep(0.05)
        left = [p for p in seen if _alive(p)]
        assert not left, f"still alive {time.monotonic() - t0:.1f} s after kill -9: {left}"
        assert drained.wait(5), "the output pipe stayed open (a child still holds it)"
    finally:
        for pid in seen | {proc.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.stdout.close()


def test_sigterm_unwinds_like_ctrl_c_with_exit_143(monkeypatch, capsys):
    import prism_plugin.commands.ls as ls

    cleaned, slept = [], []

    def slow(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            slept.append(True)  # reached only if SIGTERM did not unwind the sleep
        finally:
            cleaned.append(True)  # finally blocks run: temporary files are removed, pools stopped
        return 0

    monkeypatch.setattr(ls, "run", slow)
    # main() turns SIGTERM into an unwind only under the default disposition; a library an earlier test of this
    # worker used (Ray installs its own handler) must not decide whether SIGTERM ends the test process
    inherited = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert main(["ls", "tasks"]) == 143
        assert slept == [] and cleaned == [True]
        err = capsys.readouterr().err.strip()
        assert err == "prism-run: terminated (SIGTERM); finished runs are kept, rerun the same command to resume"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored for whoever called main()
    finally:
        signal.signal(signal.SIGTERM, inherited)
