"""Fixtures of the reliability suite: one warm demo cache and reference run per session, kill helpers.

Every subprocess run here uses a small grid (4 fractions x 2 seeds), 64 tiles per
split and 16-tile shards, so a cold extraction writes 12 shards and a grid writes
8 cells: enough points to kill a run at, cheap enough for CI. The demo images
live in the session cache (``$PRISM_CACHE_DIR``, set by ``tests/conftest.py``);
each test points ``--cache-dir`` at its own embedding cache.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import prism_run

SHARD = 16
LIMIT = 64
N_TILES = 3 * LIMIT  # train, val, test
N_SHARDS = 3 * (LIMIT // SHARD)
FRACTIONS = "[0.1,0.25,0.5,1.0]"
SEEDS = "[42,123]"
N_CELLS = 8
#: a fake hub token present in the environment of every run of this suite: it must never be written anywhere
SECRET = "hf_rel9SECRETtokenDoNotLeakXYZ"

SMALL_ARGS = ["--task", "prism_demo", "--model", "demo_vit", "--set", f"label_fractions={FRACTIONS}",
              "--set", f"seeds={SEEDS}", "--limit", str(LIMIT), "--num-workers", "0", "--quiet"]


def run_env(**extra: str) -> dict[str, str]:
    env = {"PRISM_SHARD_SIZE": str(SHARD), "HF_TOKEN": SECRET, "HUGGING_FACE_HUB_TOKEN": SECRET,
           "PYTHONFAULTHANDLER": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.update(extra)
    return env


def cli_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("prism-run")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "prism_plugin.cli"]


def small_run(cache: Path, out: Path, *extra: str, env: dict | None = None, timeout: int = 300):
    proc = prism_run(*SMALL_ARGS, "--cache-dir", str(cache), "--output", str(out), *extra,
                     env=run_env(**(env or {})), timeout=timeout)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def start(args: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """A prism-run in its own process group (so SIGKILL takes its DataLoader workers too)."""
    fh = open(log, "wb")
    proc = subprocess.Popen(cli_cmd() + args, stdout=fh, stderr=subprocess.STDOUT,
                            env={**os.environ, **run_env(**(env or {}))}, start_new_session=True)
    proc._log_handle = fh  # type: ignore[attr-defined]
    return proc


def kill_when(proc: subprocess.Popen, when: Callable[[], bool], timeout: float = 240.0,
              delay: float = 0.0) -> str:
    """SIGKILL ``proc`` (whole group) once ``when()`` holds (+ ``delay`` s); 'killed' or 'finished'."""
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout:
            if proc.poll() is not None:
                return "finished"
            if when():
                if delay:
                    time.sleep(delay)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                return "killed" if proc.returncode == -signal.SIGKILL else "finished"
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("run neither reached the kill point nor finished in time")
    finally:
        proc._log_handle.close()  # type: ignore[attr-defined]


def shard_progress(cache: Path) -> int:
    """Shards finished so far: shard records of partial entries + shards of complete ones."""
    base = cache / "embeddings"
    if not base.is_dir():
        return 0
    n = 0
    for d in base.glob("??/*"):
        if not d.is_dir() or d.parent.name == ".trash":
            continue
        m = d / "manifest.json"
        if m.exists():
            try:
                n += int(json.loads(m.read_text()).get("n_shards", 0))
            except (ValueError, OSError):
                pass
        else:
            n += len(list((d / "shards").glob("*.json")))
    return n


def cell_progress(out: Path) -> int:
    return len(list((out / "cells").glob("*.json")))


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="session")
def ref(tmp_path_factory):
    """An uninterrupted small demo run: its warm cache, its output folder and its runs.csv bytes (no report:
    the runs that test the report, such as test_security's, write their own)."""
    root = tmp_path_factory.mktemp("rel-ref")
    cache, out = root / "cache", root / "out"
    proc = small_run(cache, out, "--no-report")
    return {"cache": cache, "out": out, "runs": (out / "runs.csv").read_bytes(), "stdout": proc.stdout,
            "stderr": proc.stderr, "root": root}


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@pytest.fixture
def copy_cache(tmp_path, ref):
    """A private copy of the warm reference cache; ``embeddings=False``: a cold embedding cache.

    Either way the demo tiles the reference run generated under its cache (``datasets/``, read only once
    complete) are hard-linked in, so a run on the copy does not draw the 480 tiles again."""
    def make(name: str = "cache", embeddings: bool = True) -> Path:
        dst = tmp_path / name
        if embeddings:
            shutil.copytree(ref["cache"] / "embeddings", dst / "embeddings",
                            ignore=shutil.ignore_patterns("*.lock", ".trash"))
        if (ref["cache"] / "datasets").is_dir():
            shutil.copytree(ref["cache"] / "datasets", dst / "datasets", copy_function=_link_or_copy,
                            ignore=shutil.ignore_patterns("*.lock", ".*"))
        dst.mkdir(parents=True, exist_ok=True)
        return dst
    return make
