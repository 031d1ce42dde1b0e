"""The results directory: runs.csv, summary.json, per-run cells, atomic writes, resume.

Layout of a results directory::

    runs.csv        one row per run (fraction x seed), grid order
    summary.json    cell means/stds, resolved task, versions, fingerprints, timings
    cells/          one JSON file per finished run, written as it completes
    report.md       the report (and report.html when the report plugin is present)

Every file is written to a temporary name in the same folder and renamed, so a
reader sees either the old complete file or the new complete one; files get the
permissions the umask gives (0644 under umask 022), not the temporary file's 0600.
A killed run restarted with the same arguments reuses every cell whose inputs
fingerprint matches and recomputes the rest; the assembled ``runs.csv`` is
byte-identical.

Integrity:

* every cell carries a SHA-256 of its content (:func:`cell_checksum`); an edited or
  damaged cell is recomputed ("checksum mismatch (edited or corrupt)");
* ``summary.json`` and the report carry the SHA-256 of the ``runs.csv`` they describe
  (``runs_sha256``). Before a rerun replaces ``runs.csv`` with other content, the old
  ``summary.json`` is marked ``"stale"`` and the old report removed, so a run killed
  between the two writes leaves no summary or report that silently disagrees with
  ``runs.csv``; readers (:func:`summary_problem`, :func:`read_summary`,
  :func:`summary_dirs`) skip and name a summary that does not match;
* a grid that would drop runs of the folder's existing ``runs.csv`` is refused
  (:func:`check_grid_kept`) unless ``--overwrite``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from prism_plugin.registrars import AGGREGATIONS  # how runs combine into a cell (register_metrics)

#: Canonical leading columns (the reference's indomain_all_v2 order), then the
#: extra per-run metrics, then metadata. Unknown plugin columns go in between.
LEADING_COLUMNS = [
    "model", "dataset", "src", "tgt", "pair", "hospital", "fraction", "seed", "split_seed", "n_train", "n_classes",
    "auroc", "f1_macro", "f1_binary", "brier", "ece_fixed", "ece_adaptive", "temperature", "temperature_src",
    "ece_scaled_fixed", "ece_scaled_adaptive", "temperature_oracle", "ece_scaled_oracle",
    "temperature_prop", "ece_scaled_prop", "degeneracy_share", "degenerate", "forced_classes",
    "nll", "nll_scaled",
]
TRAILING_COLUMNS = [
    "n_val", "n_val_prop", "forced_val_classes", "n_test", "task", "adapter", "probe", "probe_converged", "probe_backend",
    # what the fast solver did (prism_plugin.protocol.probe.FAST_COLUMNS; fast mode only)
    "probe_solver", "probe_iter", "probe_grad_max", "probe_step_max", "probe_decision_bound", "probe_init",
    "reference_table",
]


def order_columns(columns: Iterable[str]) -> list[str]:
    cols = list(dict.fromkeys(columns))
    lead = [c for c in LEADING_COLUMNS if c in cols]
    trail = [c for c in TRAILING_COLUMNS if c in cols]
    middle = [c for c in cols if c not in lead and c not in trail]
    return lead + middle + trail


def rows_to_frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    return df[order_columns(df.columns)] if len(df.columns) else df


def read_runs(path: str | Path) -> pd.DataFrame:
    """Read a ``runs.csv``; a file that is not a readable CSV (binary, truncated, not UTF-8) is one
    PrismError naming it and the fix."""
    from prism_plugin.errors import PrismError

    path = Path(path)
    try:
        return pd.read_csv(path)
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise PrismError(f"{path}: not a readable runs table ({type(exc).__name__}); rerun the job that wrote it, "
                         "or remove the file") from None


def runs_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every ``runs.csv`` under ``paths`` (:func:`prism_plugin.tables.find_runs_files`, the one
    results discovery), but a path holding none adds nothing instead of raising: the report and
    the summaries read whatever results there are."""
    from prism_plugin.errors import PrismError
    from prism_plugin.tables import find_runs_files

    found: list[Path] = []
    for p in paths:
        try:
            found.extend(find_runs_files([p]))
        except PrismError:
            continue
    return list(dict.fromkeys(found))


def summary_dirs(paths: Iterable[str | Path], *, verified: bool = True) -> list[Path]:
    """The results directories (folders with a ``summary.json``) of ``paths``: a path holding one
    itself, else every one below it (a group folder's combined runs.csv has no summary.json of its
    own, its members do).

    ``verified`` (default): a folder whose ``summary.json`` does not describe its ``runs.csv``
    (:func:`summary_problem`: a rerun killed between the two writes, or an edited file) is left
    out, with one warning naming it and the fix."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / SUMMARY_NAME).is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(f.parent for f in sorted(p.rglob(SUMMARY_NAME)) if f.is_file())
    out = list(dict.fromkeys(out))
    if verified:
        kept = []
        for folder in out:
            problem = summary_problem(folder)
            if problem is None:
                kept.append(folder)
            else:
                warn_once(problem)
        out = kept
    return out


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable (best effort; not every filesystem supports it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask (read from ``/proc`` where it can be, else set and restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def honour_umask(target: int | str | os.PathLike, mode: int = 0o666) -> None:
    """Give a file (descriptor or path) made by :mod:`tempfile` (always 0600, 0700 for a folder)
    the permissions an ordinary ``open`` would: ``mode & ~umask``. Folders: pass ``mode=0o777``.
    Best effort: a file system that refuses ``chmod`` keeps the private mode."""
    wanted = mode & ~current_umask()
    try:
        if isinstance(target, int):
            os.fchmod(target, wanted)
        else:
            os.chmod(target, wanted)
    except (OSError, NotImplementedError):
        pass


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a unique temporary name beside ``path``, fsync, rename over ``path``.

    A reader (or a process killed at any instant) sees the old complete file or
    the new complete one, never a mixture; concurrent writers of the same path
    each rename a complete file and the last one wins. The file gets the
    permissions the umask gives (``0o666 & ~umask``). An ``OSError`` names
    ``path`` (not its temporary sibling).
    """
    from prism_plugin.fsfaults import naming

    path = Path(path)
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            honour_umask(fd)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
    _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _clean(obj: Any):
    """NaN/inf -> None so the JSON is standard."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(_clean(obj), indent=2, default=_json_default, sort_keys=False) + "\n"


def csv_text(df: pd.DataFrame, index: bool = False) -> str:
    """The exact text :func:`write_csv` writes (``runs.csv`` bytes are compared and hashed)."""
    return df.to_csv(index=index, lineterminator="\n")


def write_csv(path: Path, df: pd.DataFrame, index: bool = False) -> None:
    atomic_write_text(path, csv_text(df, index))


# --------------------------------------------------------------------------- integrity
RUNS_NAME = "runs.csv"
SUMMARY_NAME = "summary.json"
REPORT_NAMES = ("report.html", "report.md")
#: the key of summary.json (and the stamp of the report) holding the SHA-256 of the runs.csv it describes
RUNS_DIGEST_KEY = "runs_sha256"
#: what to do about a summary or report that does not describe its folder's runs.csv
REWRITE_FIX = ("rerun the same prism-run command into this folder to rewrite it (finished runs are reused), "
               "or `prism-run report DIR` for the report alone")
#: what each name of a results directory must be (prism-run writes them; anything else there is refused)
LAYOUT = {"cells": "folder", RUNS_NAME: "file", SUMMARY_NAME: "file", "report.html": "file", "report.md": "file",
          "figures": "folder", "summaries": "folder", "artifacts": "folder", "reliability": "folder"}

_WARNED: set[str] = set()


def warn_once(message: str, *, always: bool = False) -> None:
    """``warnings.warn(message)`` the first time this process says it (several readers meet one stale
    file); ``always``: say it now in any case (a command's own check), the readers then stay quiet."""
    if always or message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def runs_digest(path: str | Path) -> str | None:
    """SHA-256 of a ``runs.csv`` file's bytes; ``None`` when it is absent or unreadable."""
    try:
        return sha256_hex(Path(path).read_bytes())
    except (OSError, ValueError):
        return None


def runs_stamp(files: Iterable[str | Path]) -> str | None:
    """The digest a report is stamped with: the ``runs.csv`` SHA-256 of a single source, or a SHA-256
    over ``name=sha256`` lines of several (sorted); ``None`` for none."""
    digests = sorted((str(Path(f)), runs_digest(f) or "missing") for f in files)
    if not digests:
        return None
    if len(digests) == 1:
        return digests[0][1]
    return sha256_hex("\n".join(f"{name}={d}" for name, d in digests).encode())


def check_layout(folder: str | Path, where: str | None = None) -> None:
    """Refuse a results folder in which a name prism-run writes is the wrong kind of thing
    (``cells`` a file, ``runs.csv`` a folder, ...) or cannot be written: one line naming it."""
    from prism_plugin.errors import PrismError

    folder = Path(folder)
    where = where or f"--output {folder}"
    for name, kind in LAYOUT.items():
        path = folder / name
        if path.is_symlink() and not path.exists():
            what = "a broken link"
        elif not path.exists():
            continue
        elif kind == "folder" and not path.is_dir():
            what = "a file"
        elif kind == "file" and path.is_dir():
            what = "a folder"
        elif kind == "file" and not path.is_file():
            what = "not a regular file"
        else:
            if kind == "folder" and not os.access(path, os.W_OK | os.X_OK):
                raise PrismError(f"{where}: {path} is not writable; make it writable or choose another --output")
            continue
        raise PrismError(f"{where}: {path} is {what}, where prism-run keeps its {name} {kind}; "
                         "move it aside or choose another --output")


def summary_problem(folder: str | Path) -> str | None:
    """Why ``folder/summary.json`` does not describe ``folder/runs.csv`` (one line with the fix), or
    ``None`` when it does, or when there is no summary, or it predates the ``runs_sha256`` stamp."""
    folder = Path(folder)
    path = folder / SUMMARY_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return f"{path} is unreadable (truncated or corrupt); {REWRITE_FIX}"
    if not isinstance(data, dict):
        return f"{path} is not a prism-run summary (not a JSON object); {REWRITE_FIX}"
    if data.get("stale"):
        return f"{path} is out of date: {data['stale']}"
    stamp = data.get(RUNS_DIGEST_KEY)
    if stamp is None:
        return None  # written before summaries were stamped: nothing to compare it with
    digest = runs_digest(folder / RUNS_NAME)
    if digest is None:
        return f"{path} describes a {RUNS_NAME} that is not in {folder}; {REWRITE_FIX}"
    if digest != stamp:
        return (f"{path} describes another {RUNS_NAME} than the one in {folder} (a rerun stopped before it "
                f"finished, or {RUNS_NAME} was edited); {REWRITE_FIX}")
    return None


def report_stamp(text: str) -> str | None:
    """The ``runs.csv`` digest a report (Markdown or HTML) was stamped with (``None``: unstamped)."""
    import re

    m = re.search(r"<!-- prism-plugin " + RUNS_DIGEST_KEY + r": ([0-9a-f]{64}) -->", text)
    return m.group(1) if m else None


def report_problem(folder: str | Path) -> str | None:
    """Why the report in a results directory does not describe its ``runs.csv`` (``None``: it does, or
    there is no report, or the report is unstamped)."""
    folder = Path(folder)
    for name in REPORT_NAMES:
        path = folder / name
        try:
            stamp = report_stamp(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if stamp is not None and stamp != runs_digest(folder / RUNS_NAME):
            return (f"{path} describes another {RUNS_NAME} than the one in {folder}; "
                    f"`prism-run report {folder}` rebuilds it")
    return None


def read_summary(folder: str | Path) -> dict[str, Any]:
    """``folder/summary.json`` when it describes ``folder/runs.csv``; ``{}`` when it is absent, or
    does not (then one warning names it and the fix: nothing is read from a stale summary)."""
    folder = Path(folder)
    problem = summary_problem(folder)
    if problem is not None:
        warn_once(problem)
        return {}
    try:
        data = json.loads((folder / SUMMARY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _run_id(fraction: Any, seed: Any) -> str:
    return f"f{float(fraction):g}-s{int(seed)}"  # prism_plugin.protocol.grid.RunKey.id


def _grid_suffix(run: tuple, probe: bool) -> str:
    """``-split3`` / ``-knn1``: what tells a run of the grid dimensions apart in a message."""
    return (f"-split{run[4]}" if run[4] is not None else "") + (f"-{run[5]}" if probe and run[5] else "")


def existing_runs(path: str | Path, extended: bool = False) -> tuple[list[tuple], str | None]:
    """The ``(task, model, fraction, seed)`` of every intact row of the ``runs.csv`` at ``path``
    (rows with another number of fields, or an unreadable fraction or seed, are left out), and
    ``None``; or ``([], why)`` when the file is not a prism-run table. A missing or empty file: ``([], None)``.
    ``extended``: ``(task, model, fraction, seed, split seed or None, probe or None)``."""
    import csv
    import io

    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], f"unreadable ({exc.strerror or type(exc).__name__})"
    if not raw.strip():
        return [], None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [], "not a prism-run table (not UTF-8 text)"
    if not text.endswith("\n"):  # a cut-off last line is not a run
        text = text[: text.rfind("\n") + 1]
    try:
        table = list(csv.reader(io.StringIO(text)))
    except csv.Error:
        return [], "not a prism-run table (not CSV)"
    if not table or "fraction" not in table[0] or "seed" not in table[0]:
        return [], "not a prism-run table (no fraction and seed columns)"
    header = table[0]
    col = {name: header.index(name) for name in ("task", "model", "fraction", "seed", "split_seed", "probe")
           if name in header}
    out = []
    for fields in table[1:]:
        if len(fields) != len(header):
            continue
        try:
            fraction, seed = float(fields[col["fraction"]]), int(float(fields[col["seed"]]))
        except (ValueError, OverflowError):
            continue
        if not math.isfinite(fraction):
            continue
        row = (fields[col["task"]] if "task" in col else None, fields[col["model"]] if "model" in col else None,
               fraction, seed)
        if extended:
            try:
                split = int(float(fields[col["split_seed"]])) if "split_seed" in col and fields[col["split_seed"]] \
                    else None
            except (ValueError, OverflowError):
                split = None
            row = row + (split, (fields[col["probe"]] or None) if "probe" in col else None)
        out.append(row)
    return out, None


def describe_runs(runs: Iterable[tuple]) -> str:
    """``task T, model M: label_fractions [0.1, 1] x seeds [0, 1]`` (one part per task and model; with
    ``split_seeds [..] x probes [..]`` in front for runs that carry them)."""
    groups: dict[tuple[Any, Any], tuple[set, set, set, set]] = {}
    for run in runs:
        task, model, fraction, seed = run[:4]
        fr, sd, sp, pr = groups.setdefault((task, model), (set(), set(), set(), set()))
        fr.add(float(fraction))
        sd.add(int(seed))
        if len(run) > 4:
            if run[4] is not None:
                sp.add(int(run[4]))
            if run[5]:
                pr.add(str(run[5]))
    parts = []
    for (task, model), (fr, sd, sp, pr) in groups.items():
        grid = f"label_fractions [{', '.join(f'{f:g}' for f in sorted(fr))}] x seeds [{', '.join(map(str, sorted(sd)))}]"
        if len(pr) > 1:
            grid = f"probes [{', '.join(sorted(pr))}] x {grid}"
        if sp:
            grid = f"split_seeds [{', '.join(map(str, sorted(sp)))}] x {grid}"
        parts.append(f"task {task}, model {model}: {grid}")
    shown = "; ".join(parts[:3]) + (f"; ... ({len(parts)} task/model pairs)" if len(parts) > 3 else "")
    return shown or "no runs"


def check_grid_kept(runs_csv: str | Path, planned: Iterable[tuple[Any, Any, float, int]], *, overwrite: bool,
                    where: str) -> None:
    """Refuse a run that would replace ``runs_csv`` by a table without some of its runs.

    ``planned``: the ``(task, model, fraction, seed)`` of every run the new table will hold, or for a
    task with the ``split_seeds`` / ``probes`` grid dimensions ``(task, model, fraction, seed, split seed,
    probe kind)`` (:func:`prism_plugin.runner.planned_runs`). The same grid or a larger one passes (its
    cells are reused); a grid that drops runs present in ``runs_csv`` (other fractions, seeds, split
    seeds, probes, task or model) is refused with one line naming ``where``, both grids and the fix,
    unless ``overwrite``. A 4-tuple keeps a row of the same task, model, fraction and seed that has no
    split seed; a 6-tuple keeps the row of the same split seed and probe. Saved cells are never
    deleted either way.
    """
    from prism_plugin.errors import PrismError

    if overwrite:
        return
    planned = list(planned)
    old, problem = existing_runs(runs_csv, extended=True)
    if problem is not None:
        raise PrismError(f"{where}: {runs_csv} is {problem}; move it aside, choose another --output, "
                         "or pass --overwrite to replace it")
    plain = {(str(p[0]), str(p[1]), _run_id(p[2], p[3])) for p in planned if len(p) == 4}
    gridded = {(str(p[0]), str(p[1]), _run_id(p[2], p[3]), p[4], str(p[5])) for p in planned if len(p) > 4}

    def kept(r) -> bool:
        ident = (str(r[0]), str(r[1]), _run_id(r[2], r[3]))
        return (r[4] is None and ident in plain) or (ident + (r[4], str(r[5])) in gridded)

    dropped = [r for r in old if not kept(r)]
    if not dropped:
        return
    several = len({r[5] for r in old}) > 1
    sample = ", ".join(dict.fromkeys(_run_id(r[2], r[3]) + _grid_suffix(r, several) for r in dropped[:3]))
    raise PrismError(
        f"{where}: its {RUNS_NAME} holds {len(old)} run(s) ({describe_runs(old)}) and this run's grid "
        f"({describe_runs(planned)}) would drop {len(dropped)} of them (e.g. {sample}); run a grid that "
        f"includes them (a larger grid keeps them and reuses their cells), choose another --output, or pass "
        f"--overwrite to replace the table (saved cells are kept)")


#: Bumped when the layout of a cell file changes; older cells are recomputed. 2: a ``checksum``
#: (format 1 cells had none, so an edit could not be told from a result: they are recomputed once).
CELL_FORMAT = 2


def _plain(obj: Any) -> Any:
    """``obj`` as JSON gives it back (numpy scalars -> numbers, tuples -> lists): what a cell reads."""
    return json.loads(json.dumps(obj, default=_json_default, allow_nan=True))


def cell_checksum(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces) of a cell's content: every key but
    ``checksum`` (format, scope, run id, fingerprint, inputs and the row)."""
    body = {k: v for k, v in payload.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=True)
    return sha256_hex(text.encode("utf-8"))


def explain_change(old: Any, new: Any) -> str:
    """Why two fingerprint breakdowns (see ``runner.fingerprint_parts``) differ, in words."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "computed from other inputs (the cell predates input tracking)"
    reasons = []
    old_task, new_task = old.get("task") or {}, new.get("task") or {}
    if old_task != new_task:
        keys = sorted(k for k in set(old_task) | set(new_task) if old_task.get(k) != new_task.get(k))
        reasons.append("task config changed (" + ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "") + ")")
    if old.get("adapter") != new.get("adapter"):
        reasons.append("adapter changed (architecture, weights, pooling, preprocessing or normalisation)")
    old_emb, new_emb = old.get("embeddings") or {}, new.get("embeddings") or {}
    if old_emb != new_emb:
        splits = sorted(k for k in set(old_emb) | set(new_emb) if old_emb.get(k) != new_emb.get(k))
        reasons.append("embeddings of " + ", ".join(splits) + " changed (other data or re-extracted features)")
    old_v, new_v = old.get("versions") or {}, new.get("versions") or {}
    for lib in sorted(set(old_v) | set(new_v)):
        if old_v.get(lib) != new_v.get(lib):
            reasons.append(f"{lib} {old_v.get(lib)} -> {new_v.get(lib)}")
    old_p, new_p = old.get("plugins") or {}, new.get("plugins") or {}
    if old_p != new_p:
        gone = sorted(set(old_p) - set(new_p))
        added = sorted(set(new_p) - set(old_p))
        changed = sorted(k for k in set(old_p) & set(new_p) if old_p[k] != new_p[k])
        bits = ([f"disabled/removed {', '.join(gone)}"] if gone else []) + \
            ([f"added {', '.join(added)}"] if added else []) + ([f"updated {', '.join(changed)}"] if changed else [])
        reasons.append("metric plugins changed (" + "; ".join(bits) + ")")
    for key in sorted(set(old) | set(new)):
        if key not in ("task", "adapter", "embeddings", "versions", "plugins") and old.get(key) != new.get(key):
            reasons.append(f"{key} changed")
    return "; ".join(reasons) or "computed from other inputs"


class ResultsDir:
    """One results directory; cells are persisted as they finish.

    A cell file holds one finished run (one row of ``runs.csv``) with the
    fingerprint of every input it depends on and, when given, the breakdown of
    that fingerprint (``parts``) so a stale cell can say what changed. Cells are
    scoped by task name inside the results directory, so a group run that
    writes one directory per task resumes each task on its own.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.cells_dir = self.path / "cells"
        #: what the last :meth:`write_runs` invalidated (summary.json, report.*)
        self.invalidated: list[str] = []

    def cell_path(self, scope: str, run_id: str) -> Path:
        safe = "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in f"{scope}--{run_id}")
        if len(safe) > 200:  # stay below the usual 255-byte file name limit
            digest = hashlib.sha256(f"{scope}--{run_id}".encode()).hexdigest()[:16]
            safe = safe[:180] + "-" + digest
        return self.cells_dir / f"{safe}.json"

    def save_cell(self, scope: str, run_id: str, fingerprint: str, row: dict,
                  parts: dict[str, Any] | None = None) -> None:
        payload = _plain({"format": CELL_FORMAT, "scope": scope, "run_id": run_id, "fingerprint": fingerprint,
                          "inputs": parts, "row": row})
        payload["checksum"] = cell_checksum(payload)
        atomic_write_text(self.cell_path(scope, run_id), json.dumps(payload, allow_nan=True))

    def load_cell(self, scope: str, run_id: str, fingerprint: str, parts: dict[str, Any] | None = None,
                  expect: dict[str, Any] | None = None) -> tuple[dict | None, str | None]:
        """(row, None) when reusable; (None, reason) when stale or unreadable; (None, None) if absent.

        ``expect`` lists columns the row must hold exactly (e.g. the run's
        fraction and seed, which the file name only shows to 6 digits). A cell whose
        content does not match its checksum (edited by hand, bit rot) is not reused.
        """
        path = self.cell_path(scope, run_id)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None, None
        except (OSError, UnicodeDecodeError):
            return None, f"{path.name} is unreadable"
        try:
            payload = json.loads(text)
            row = payload["row"]
            if not isinstance(row, dict):
                raise TypeError("row is not a mapping")
        except (ValueError, KeyError, TypeError, RecursionError):
            return None, f"{path.name} is unreadable (truncated or corrupt)"
        if payload.get("format") != CELL_FORMAT:
            return None, (f"{path.name}: saved in cell format {payload.get('format')!r}, not {CELL_FORMAT} "
                          "(older cells carry no checksum)")
        try:
            intact = payload.get("checksum") == cell_checksum(payload)
        except (TypeError, ValueError, RecursionError):
            intact = False
        if not intact:
            return None, f"{path.name}: checksum mismatch (edited or corrupt)"
        if payload.get("scope", scope) != scope or payload.get("run_id", run_id) != run_id:
            return None, f"{path.name} belongs to another run ({payload.get('scope')} {payload.get('run_id')})"
        if payload.get("fingerprint") != fingerprint:
            why = explain_change(payload.get("inputs"), parts) if parts is not None else \
                "computed from other inputs (task config, embeddings, probe or package version)"
            return None, f"{path.name}: {why}"
        for column, value in (expect or {}).items():
            if row.get(column) != value:
                return None, f"{path.name}: computed for {column} {row.get(column)!r}, not {value!r}"
        return row, None

    def inputs_changed(self, scope: str, run_id: str, fingerprint: str,
                       parts: dict[str, Any] | None = None) -> str | None:
        """Why the intact, finished cell of ``run_id`` was computed from other inputs than
        ``fingerprint`` (task settings, adapter, embeddings, versions, plugins), or ``None`` (absent,
        damaged, of an older format, or of the same inputs: nothing finished would be replaced)."""
        try:
            payload = json.loads(self.cell_path(scope, run_id).read_text(encoding="utf-8"))
            if not isinstance(payload, dict) or payload.get("format") != CELL_FORMAT or \
                    payload.get("checksum") != cell_checksum(payload):
                return None
        except (OSError, UnicodeDecodeError, ValueError, TypeError, RecursionError):
            return None
        if payload.get("scope", scope) != scope or payload.get("run_id", run_id) != run_id or \
                payload.get("fingerprint") == fingerprint:
            return None
        return explain_change(payload.get("inputs"), parts) if parts is not None else "computed from other inputs"

    def write_runs(self, df: pd.DataFrame, name: str = RUNS_NAME) -> Path:
        """Write ``runs.csv``. When its content changes, the summary and report of the old content
        are invalidated first (:meth:`invalidate_derived`): a run killed after this write leaves
        no summary or report that silently describes the old table."""
        target = self.path / name
        text = csv_text(df)
        if name == RUNS_NAME:
            self.invalidate_derived(sha256_hex(text.encode("utf-8")))
        atomic_write_text(target, text)
        self.sweep_tmp()
        return target

    def invalidate_derived(self, new_digest: str) -> list[str]:
        """Before ``runs.csv`` is replaced by content of SHA-256 ``new_digest``: mark ``summary.json``
        ``"stale"`` (it is kept, so what it said can still be read) and remove ``report.html`` /
        ``report.md`` (``prism-run report DIR`` rebuilds them), unless they already describe
        ``new_digest``. Returns the names invalidated (also kept in ``self.invalidated``)."""
        done: list[str] = []
        if runs_digest(self.path / RUNS_NAME) == new_digest:
            self.invalidated = done
            return done  # the same table again (a resumed run): everything still matches
        summary = self.path / SUMMARY_NAME
        if summary.is_file():
            try:
                data = json.loads(summary.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError, RecursionError):
                data = None
            if not isinstance(data, dict):
                summary.unlink()
                done.append(SUMMARY_NAME)
            elif data.get(RUNS_DIGEST_KEY) != new_digest and not data.get("stale"):
                stale = {"stale": f"{RUNS_NAME} was replaced by a later run that did not write this summary "
                                  f"(it describes the earlier table); {REWRITE_FIX}"}
                atomic_write_text(summary, dumps({**stale, **data}))
                done.append(SUMMARY_NAME)
        for report in REPORT_NAMES:
            path = self.path / report
            if path.is_file():
                try:
                    stamp = report_stamp(path.read_text(encoding="utf-8", errors="replace"))
                except OSError:
                    stamp = None
                if stamp != new_digest:
                    path.unlink()
                    done.append(report)
        self.invalidated = done
        return done

    def sweep_tmp(self, min_age_s: float = 600.0) -> int:
        """Delete temporary files left by writes that were killed (older than ``min_age_s``: a
        concurrent writer's own temporary file lives for milliseconds)."""
        import time

        removed = 0
        now = time.time()
        for folder in (self.path, self.cells_dir, self.path / "reliability", self.path / "artifacts",
                       self.path / "summaries", self.path / "figures"):
            for tmp in folder.glob(".*.tmp"):
                try:
                    if now - tmp.stat().st_mtime > min_age_s:
                        tmp.unlink()
                        removed += 1
                except OSError:
                    pass
        return removed

    def write_json(self, name: str, obj: Any) -> Path:
        """Write ``name`` as JSON; ``summary.json`` is stamped with the SHA-256 of the ``runs.csv`` beside
        it (``runs_sha256``, see :func:`summary_problem`)."""
        target = self.path / name
        if name == SUMMARY_NAME and isinstance(obj, dict):
            obj = {k: v for k, v in obj.items() if k not in ("stale", RUNS_DIGEST_KEY)}
            obj[RUNS_DIGEST_KEY] = runs_digest(self.path / RUNS_NAME)
        atomic_write_text(target, dumps(obj))
        return target


def _first(values):
    """The first value present: per group (``groupby(...).first()`` skips NaN) or of one series."""
    if isinstance(values, pd.Series):
        present = values.dropna()
        return present.iloc[0] if len(present) else float("nan")
    return values.first()


#: aggregation name (:data:`prism_plugin.registrars.AGGREGATIONS`) -> how the runs of a cell combine,
#: for a :class:`pandas.Series` of one cell's values or a ``SeriesGroupBy`` of many cells (NaN skipped;
#: NaN when no run has a value)
AGGREGATORS = {
    "mean": lambda v: v.mean(),
    "median": lambda v: v.median(),
    "max": lambda v: v.max(),
    "min": lambda v: v.min(),
    "sum": lambda v: v.sum(min_count=1),
    "first": _first,
}


def _metric_spec(metric: Any) -> tuple[str, str]:
    """(column, aggregation) of a column name (the mean) or a :class:`~prism_plugin.registrars.MetricInfo`
    (its aggregation, checked by the MetricRegistrar)."""
    if isinstance(metric, str):
        return metric, "mean"
    column = getattr(metric, "column", None)
    if not isinstance(column, str):
        raise TypeError(f"metric must be a column name or a MetricInfo, got {type(metric).__name__}")
    return column, getattr(metric, "aggregation", "mean") or "mean"


def aggregate(values: pd.Series, how: str = "mean") -> float:
    """One cell's value from its runs' values (NaN skipped; NaN when no run has a value)."""
    if how not in AGGREGATORS:
        raise ValueError(f"unknown aggregation {how!r} (one of {', '.join(AGGREGATIONS)})")
    return float(AGGREGATORS[how](pd.to_numeric(values, errors="coerce")))


def cell_stats(df: pd.DataFrame, by: list[str], metrics: Iterable[Any]) -> list[dict]:
    """Per cell (``by`` + fraction): each metric aggregated over the cell's runs (seeds).

    ``metrics`` holds column names (aggregated by the mean) or metric descriptions
    (:class:`~prism_plugin.registrars.MetricInfo`, aggregated as they declare). ``mean`` gives
    ``<column>_mean`` and ``<column>_std`` (seed standard deviation, ddof = 1; NaN for one run);
    any other aggregation gives ``<column>_<aggregation>`` (``my_score_median``). Columns absent
    from ``df`` are skipped.
    """
    specs = [_metric_spec(m) for m in metrics]
    present = [(m, how) for m, how in dict.fromkeys(specs) if m in df.columns]
    out = []
    for keys, g in df.groupby(by + ["fraction"], sort=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        entry = dict(zip(by + ["fraction"], keys))
        entry["n_runs"] = int(len(g))
        for m, how in present:
            vals = pd.to_numeric(g[m], errors="coerce")
            entry[f"{m}_{how}"] = aggregate(vals, how)
            if how == "mean":
                entry[f"{m}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        out.append(entry)
    return out
