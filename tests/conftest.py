"""Shared test fixtures: an isolated cache, the shared reference folder, subprocess helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PRISM_SHARED", REPO.parent / "shared"))
REFERENCE = SHARED / "reference" / "prism_results_v2"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Every test (and every prism-run it spawns) uses a session-private cache, never ~/.cache."""
    cache = tmp_path_factory.mktemp("prism-cache")
    old = os.environ.get("PRISM_CACHE_DIR")
    os.environ["PRISM_CACHE_DIR"] = str(cache)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    yield cache
    if old is None:
        os.environ.pop("PRISM_CACHE_DIR", None)
    else:
        os.environ["PRISM_CACHE_DIR"] = old


@pytest.fixture
def reference_dir() -> Path:
    if not REFERENCE.is_dir():
        pytest.skip(f"shared reference tables not found at {REFERENCE} (set PRISM_SHARED)")
    return REFERENCE


def prism_run(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600,
              check: bool = False) -> subprocess.CompletedProcess:
    """Run the installed ``prism-run`` console script in a subprocess."""
    exe = Path(sys.executable).with_name("prism-run")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "prism_plugin.cli"]
    proc = subprocess.run(cmd + list(args), cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"prism-run {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_main(*args: str, env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """``prism-run ARGS`` in this process (``prism_plugin.cli.main``): the same exit status, stdout and
    stderr as :func:`prism_run`, without a fresh interpreter importing torch (seconds per call).

    Use :func:`prism_run` where the behaviour is a process one (console script, signals, entry
    points of a package installed for the test, a clean import state); ``env`` is set for the call.
    """
    import contextlib
    import io

    from prism_plugin.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    proc = subprocess.CompletedProcess(["prism-run", *args], int(code or 0), out.getvalue(), err.getvalue())
    if check and proc.returncode != 0:
        raise AssertionError(f"prism-run {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def mean_colour_adapter(size: int = 8):
    """A real, tiny image adapter class (no network): the per-channel mean of each ``size`` px image, 3-d."""
    from prism_plugin.embed.adapter import Adapter, Preprocessing

    class Means(Adapter):
        name, display_name, embed_dim = "means", "Means", 3
        preprocessing = Preprocessing(resize=size, crop=size, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                                      interpolation="bilinear")

        def weights_fingerprint(self):
            return "none"

        def build(self, device):
            pass

        def forward(self, batch):
            return batch.flatten(2).mean(dim=2)

    return Means


def write_precomputed(folder: Path, sizes: dict[str, int], *, dim: int = 8, n_classes: int = 2,
                      seed: int = 0) -> Path:
    """``folder/{split}_features.npy`` / ``_labels.npy`` for the ``precomputed`` adapter: per split
    (in ``sizes`` order, one generator), labels ``arange(n) % n_classes`` and features
    ``normal(n, dim) + label`` (float32), so the classes are separable on average."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in sizes.items():
        y = np.arange(n) % n_classes
        np.save(folder / f"{split}_features.npy", (rng.normal(size=(n, dim)) + y[:, None]).astype(np.float32))
        np.save(folder / f"{split}_labels.npy", y)
    return folder


def pip_install_target(package: Path, root: Path) -> dict[str, str]:
    """``pip install --target`` a copy of ``package`` under ``root``; the env that makes it visible.

    Never into the test environment itself: tests run in parallel workers, and another worker's
    fresh plugin host would see the package's entry points. Subprocesses get the returned
    ``PYTHONPATH``; an in-process test prepends ``env["_TARGET"]`` to ``sys.path`` itself.
    """
    import shutil

    src = root / package.name
    shutil.copytree(package, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = root / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-input", "--target", str(target), str(src)], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"could not pip-install {package.name}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    path = os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path, "_TARGET": str(target)}


@pytest.fixture
def run_cli():
    return prism_run


@pytest.fixture(scope="module")
def reference_tables():
    """The published per-run tables as RunTables (skips when ../shared is absent)."""
    from prism_plugin.tables import tables_from_reference_dir

    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"reference tables not found under {REFERENCE} (set PRISM_SHARED)")
    return tables_from_reference_dir(REFERENCE)
