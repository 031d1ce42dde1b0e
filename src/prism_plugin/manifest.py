"""The file manifest of a results folder: what the run that wrote ``summary.json`` wrote with it.

``summary.json`` carries, under ``files``, the SHA-256 of ``runs.csv`` and of every per-run file of the folder
(``cells/``, ``artifacts/``, ``reliability/``) as they stood when it was written. A reader compares them
(:func:`problems`) before it trusts anything in the folder: a file edited, removed or added since (a ``runs.csv``
edited by hand, a bootstrap file copied from another folder, a killed rerun) makes the folder inconsistent, and the
readers (diff, report, leaderboard, compare, findings, audit; see :func:`prism_plugin.results.check_folder`) refuse
it, naming the file and the fix, instead of reading numbers that no longer belong together.

The report's own outputs (``report.*``, ``figures/``, ``summaries/``) are derived from these files and are rebuilt by
``prism-run report``; they are not listed. Imports only the ground floor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from prism_plugin.storage import update_from_file

#: the key of summary.json holding the manifest
MANIFEST_KEY = "files"
#: the folders of a results folder whose files the manifest lists (with runs.csv)
COVERED = ("cells", "artifacts", "reliability")
RUNS_FILE = "runs.csv"


def listing(folder: str | os.PathLike) -> dict[str, Path]:
    """``relative name -> path`` of ``runs.csv`` and every regular file below :data:`COVERED` (temporary files of
    a write under way, ``.*.tmp``, left out), in sorted order."""
    folder = Path(folder)
    out: dict[str, Path] = {}
    runs = folder / RUNS_FILE
    if runs.is_file():
        out[RUNS_FILE] = runs
    for sub in COVERED:
        base = folder / sub
        if not base.is_dir() or base.is_symlink():
            continue
        for root, dirs, files in os.walk(base):
            dirs.sort()
            for name in sorted(files):
                if name.startswith(".") and name.endswith(".tmp"):
                    continue
                path = Path(root) / name
                if path.is_file():
                    out[path.relative_to(folder).as_posix()] = path
    return out


def _sha256(path: Path) -> str:
    import hashlib

    return update_from_file(hashlib.sha256(), path).hexdigest()


def build(folder: str | os.PathLike) -> dict[str, str]:
    """The manifest of ``folder`` as it stands: ``relative name -> SHA-256``."""
    return {name: _sha256(path) for name, path in listing(folder).items()}


_MEMO: dict[tuple, list[str]] = {}


def _stat_key(folder: Path, files: Mapping[str, Path], recorded: Mapping[str, str]) -> tuple:
    stats = []
    for name, path in files.items():
        try:
            st = path.stat()
        except OSError:
            return ()
        stats.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
    return (str(folder), tuple(stats), tuple(sorted(recorded.items())))


def _differences(files: Mapping[str, Path], recorded: Mapping[str, str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name, digest in recorded.items():
        path = files.get(name)
        if path is None:
            found.append((name, "is missing"))
        elif _sha256(path) != digest:
            found.append((name, "was changed"))
    found.extend((name, "was added") for name in files if name not in recorded)
    return found


def tampered(folder: str | os.PathLike, runs: Mapping[str, str]) -> dict[str, str]:
    """The runs whose per-run files were edited, removed or added since ``folder/summary.json`` was written:
    ``run id -> reason``. ``runs`` maps each run's file base name (``<task>--<run id>``, as its cell and artifacts
    are named) to its run id. Nothing when the summary is absent, unreadable, marked stale or has no manifest
    (then nothing says what the files were)."""
    import json

    folder = Path(folder)
    try:
        data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    recorded = data.get(MANIFEST_KEY) if isinstance(data, dict) and not data.get("stale") else None
    if not isinstance(recorded, dict):
        return {}
    out: dict[str, str] = {}
    for name, what in _differences(listing(folder), recorded):
        if name == RUNS_FILE or name.startswith("cells/"):
            continue  # runs.csv is reassembled from the cells, and each cell carries its own checksum
        base = Path(name).name.rsplit(".", 1)[0]
        if base in runs:
            out.setdefault(runs[base], f"{name} {what} since the run wrote it")
    return out


def problems(folder: str | os.PathLike, recorded: Mapping[str, str]) -> list[str]:
    """What differs between ``folder`` and the manifest ``recorded`` (empty: nothing): one phrase per file,
    ``"runs.csv was changed"``, ``"cells/x.json is missing"``, ``"artifacts/y.npz was added"``.

    Remembered per process while no listed file's size, time or inode changes (the report reads a folder many
    times)."""
    folder = Path(folder)
    files = listing(folder)
    key = _stat_key(folder, files, recorded)
    if key and key in _MEMO:
        return list(_MEMO[key])
    found = [f"{name} {what}" for name, what in _differences(files, recorded)]
    if key:
        if len(_MEMO) > 256:
            _MEMO.clear()
        _MEMO[key] = list(found)
    return found


def describe(found: list[str], limit: int = 3) -> str:
    """The first ``limit`` phrases of :func:`problems`, then how many more."""
    head = "; ".join(found[:limit])
    return head + (f" (and {len(found) - limit} more)" if len(found) > limit else "")


__all__ = ["COVERED", "MANIFEST_KEY", "build", "describe", "listing", "problems", "tampered"]
