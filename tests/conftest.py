"""Shared test fixtures: an isolated cache, the shared reference folder, subprocess helpers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

# One BLAS thread in every test process and every prism-run it spawns: two xdist workers on two cores with
# multi-threaded OpenBLAS oversubscribe the machine (a scikit-learn fit 10-20x slower under load), and one
# setting everywhere keeps in-process and subprocess runs the same bits. torch's own threads are left alone.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PRISM_SHARED", REPO.parent / "shared"))
REFERENCE = SHARED / "reference" / "prism_results_v2"


#: words in a test (or in one of its fixtures) that mean it reads ../shared: such tests get the ``shared`` marker,
#: and ``.ci/run`` runs them once more with ../shared hidden (``-m shared``) to prove they skip cleanly without it
SHARED_WORDS = ("SHARED", "REFERENCE", "SPLIT_DIR", "reference_dir", "reference_tables", "PROTOCOL.md", "papers")


def _reads_shared(item) -> bool:
    import inspect

    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        funcs.extend(d.func for d in defs)
    for func in funcs:
        try:
            source = inspect.getsource(func)
        except (OSError, TypeError):
            continue
        if any(word in source for word in SHARED_WORDS):
            return True
    return False


def pytest_configure(config):
    config.addinivalue_line("markers", "shared: reads ../shared (PRISM_SHARED); must skip cleanly without it")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _reads_shared(item):
            item.add_marker(pytest.mark.shared)


@pytest.fixture(scope="session", autouse=True)
def _one_blas_thread():
    """The OpenBLAS limit above also for a numpy that was imported before this file (a plugin of pytest)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=int(os.environ["OPENBLAS_NUM_THREADS"]), user_api="blas"):
        yield


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


def prism_run(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int | None = None,
              check: bool = False) -> subprocess.CompletedProcess:
    """Run the installed ``prism-run`` console script in a subprocess."""
    exe = Path(sys.executable).with_name("prism-run")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "prism_plugin.cli"]
    proc = subprocess.run(cmd + list(args), cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"prism-run {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def network_attempts(monkeypatch) -> list[tuple[str, object]]:
    """Every network attempt of this process during the test, as ``(kind, address)``: name lookups and socket
    connects (each still goes through). "Fails fast offline" is asserted by counting attempts (none offline, one
    when a hub is unreachable: no retries), not by a wall-clock limit that a loaded machine could break."""
    import socket

    seen: list[tuple[str, object]] = []
    real_connect, real_connect_ex, real_lookup = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def connect(self, address):
        seen.append(("connect", address))
        return real_connect(self, address)

    def connect_ex(self, address):
        seen.append(("connect", address))
        return real_connect_ex(self, address)

    def lookup(host, *args, **kwargs):
        seen.append(("lookup", host))
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    return seen


#: the optional extra (pyproject.toml) that ships each optional library the tests use
EXTRA_OF = {"ray": "ray", "datasets": "hf", "pyarrow": "hf", "transformers": "transformers", "open_clip": "clip",
            "conch": "conch", "eva": "eva", "lightning": "eva"}


def needs(module: str):
    """``pytest.importorskip`` for an optional library: the skip names the extra that installs it, so a run with
    only ``.[test]`` says what it left out (``pip install ".[test,all]"`` runs everything, as CI does)."""
    extra = EXTRA_OF[module.split(".")[0]]
    return pytest.importorskip(module, reason=f"needs the [{extra}] extra (pip install '.[{extra}]')")


def reseal(folder: Path) -> Path:
    """Record a results folder's stamps again (``summary.json``'s ``runs_sha256`` and file manifest) after a test
    rewrote its files on purpose (hand-made replicates, a cut-down runs.csv): what a run writing those files would
    have recorded. Without it every reader refuses the folder (its files no longer belong together)."""
    import json

    from prism_plugin.results import ResultsDir

    data = json.loads((Path(folder) / "summary.json").read_text(encoding="utf-8"))
    ResultsDir(folder).write_json("summary.json", {k: v for k, v in data.items() if k != "stale"})
    return Path(folder)


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


@pytest.fixture(scope="session")
def install_once(tmp_path_factory):
    """``install_once(package)``: :func:`pip_install_target` of ``package`` at most once per test session (with
    xdist: per worker), into a session folder; every test file that needs the package reuses it (never write
    into ``env["_TARGET"]``). Skips when the package folder is absent."""
    installs: dict[Path, dict[str, str]] = {}

    def install(package: Path) -> dict[str, str]:
        key = Path(package).resolve()
        if key not in installs:
            if not key.is_dir():
                pytest.skip(f"{key} not found")
            installs[key] = pip_install_target(key, tmp_path_factory.mktemp(f"install-{key.name}"))
        return dict(installs[key])

    return install


@contextlib.contextmanager
def installed_plugins(target: str | Path):
    """In this process, for the ``with`` block: the packages ``pip install --target``-ed into ``target`` importable
    and their entry points read by every plugin host built there (:func:`run_main` gets a fresh one); afterwards
    nothing is left: ``sys.path``, the modules imported from ``target`` (copies of the same names imported from
    elsewhere are set aside and put back), the cached hosts and importlib's path caches."""
    import importlib

    from prism_plugin import plugins

    target = str(Path(target).resolve())
    names = {p.name.split(".")[0] for p in Path(target).iterdir() if not p.name.endswith((".dist-info", ".egg-info"))
             and (p.suffix == ".py" or (p / "__init__.py").is_file())}

    def ours(name: str) -> bool:
        return name.split(".")[0] in names

    set_aside = {name: mod for name, mod in sys.modules.items() if ours(name)}
    for name in set_aside:
        del sys.modules[name]
    hosts = dict(plugins._DEFAULT)
    plugins._DEFAULT.clear()
    sys.path.insert(0, target)
    importlib.invalidate_caches()
    try:
        yield Path(target)
    finally:
        while target in sys.path:
            sys.path.remove(target)
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(set_aside)
        plugins._DEFAULT.clear()
        plugins._DEFAULT.update(hosts)
        importlib.invalidate_caches()


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
