"""benchmarks/gpu_check.sh runs end to end in --cpu-smoke mode; its summary table and JSON are well formed.

No timing is asserted: the smoke sizes say nothing about the GPU targets (their status is SMOKE).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STATUSES = {"PASS", "FAIL", "ERROR", "SKIP", "SMOKE", "INFO"}

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


def run(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "OUT"}  # $OUT only where a test sets it
    environ.update({"PYTHON": sys.executable, "TMPDIR": str(tmp_path), **env})
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=environ, cwd=tmp_path)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_check")
    out = tmp / "out"
    out.mkdir()
    # through $OUT, as on the device machine: the JSON and one log per step land there
    proc = run("--cpu-smoke", tmp_path=tmp, OUT=str(out))
    return proc, out


def test_smoke_run_succeeds_and_writes_json(smoke):
    proc, out = smoke
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "gpu_check.json").read_text())
    assert data["mode"] == "smoke" and data["verdict"] == "smoke run complete"
    assert data["environment"]["python"] and data["environment"]["missing"] == []
    checks = {c["check"]: c for c in data["checks"]}
    # (b) extraction: pipeline, bare and their ratio; (a) the grid in regime A; (c) workers: the one-GPU branch
    assert {"extract_pipeline", "extract_bare", "extract_ratio", "grid_A", "workers_identical"} <= set(checks)
    for c in data["checks"]:
        assert c["status"] in STATUSES and c["status"] not in ("ERROR", "FAIL", "PASS"), c
        assert isinstance(c["seconds"], (int, float)) and c["seconds"] >= 0
        assert c["figure"] and isinstance(c["detail"], str)
    for name in ("extract_pipeline", "extract_bare", "extract_ratio", "grid_A"):
        value = checks[name]["value"]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, checks[name]
    assert checks["extract_pipeline"]["target"] == 700 and checks["extract_ratio"]["target"] == 0.9
    assert checks["grid_A"]["target"] == 20 and checks["grid_A"]["unit"] == "x"
    assert checks["workers_identical"]["status"] == "SKIP" and "GPU" in checks["workers_identical"]["detail"]
    counts = data["counts"]
    assert sum(counts.values()) == len(data["checks"]) and counts["SKIP"] == 1
    for step in ("setup", "extract", "grid_A"):
        assert (out / f"gpu_check_{step}.log").is_file(), step


def test_smoke_summary_table_matches_json(smoke):
    proc, out = smoke
    data = json.loads((out / "gpu_check.json").read_text())
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("== gpu_check summary (smoke;"))
    header, rule = lines[start + 1], lines[start + 2]
    assert header.split() == ["figure", "value", "target", "status", "seconds"] and set(rule) == {"-"}
    rows = lines[start + 3:start + 3 + len(data["checks"])]
    for row, check in zip(rows, data["checks"]):
        assert row.startswith(check["figure"]), (row, check)
        assert row.split()[-2:] == [check["status"], f"{check['seconds']:.0f}"]
    assert lines[-1].startswith("gpu_check: smoke run complete: ") and str(out / "gpu_check.json") in lines[-1]
    # every step printed its elapsed seconds
    assert any(line.strip().startswith("[extract] done in ") for line in lines)
    assert any(line.strip().startswith("[grid_A] done in ") for line in lines)


def test_bad_arguments_and_no_gpu_are_one_line(tmp_path):
    proc = run("--frobnicate", tmp_path=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "gpu_check: unknown argument '--frobnicate'; see --help (e.g. bash benchmarks/gpu_check.sh --cpu-smoke)"]
    proc = run("--cpu-smoke", "--budget", "soon", tmp_path=tmp_path)
    assert proc.returncode == 2 and "--budget needs whole seconds" in proc.stderr
    proc = run("--json", str(tmp_path / "env.json"), tmp_path=tmp_path, PYTHON=str(tmp_path / "no-such-python"))
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1
    assert "no Python interpreter" in proc.stderr
    assert json.loads((tmp_path / "env.json").read_text())["verdict"] == "environment failed"


def test_gpu_mode_without_a_gpu_stops_with_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the full check would run")
    if shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi is installed but torch sees no GPU: the script would try to build an environment")
    proc = run("--json", str(tmp_path / "g.json"), tmp_path=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"gpu_check: no CUDA GPU visible here (nvidia-smi lists none, {sys.executable}'s torch sees none); "
        "run it on a GPU machine, or use --cpu-smoke"]
    assert json.loads((tmp_path / "g.json").read_text())["verdict"] == "no GPU"
