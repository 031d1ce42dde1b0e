"""The results directory: runs.csv, summary.json, per-run cells, resume.

Layout of a results directory::

    runs.csv        one row per run (fraction x seed), grid order
    summary.json    cell means/stds, resolved task, versions, fingerprints, timings
    cells/          one JSON file per finished run, written as it completes
    report.md       the report (and report.html when the report plugin is present)

Every file is written to a temporary name in the same folder and renamed, so a reader sees either the old complete
file or the new complete one; files get the permissions the umask gives (0644 under umask 022), not the temporary
file's 0600. A killed run restarted with the same arguments reuses every cell whose inputs fingerprint matches and
recomputes the rest; the assembled ``runs.csv`` is byte-identical.

Integrity:

* every cell carries a SHA-256 of its content (:func:`cell_checksum`); an edited or damaged cell is recomputed
  ("checksum mismatch (edited or corrupt)");
* ``summary.json`` and the report carry the SHA-256 of the ``runs.csv`` they describe (``runs_sha256``). Before a
  rerun replaces ``runs.csv`` with other content, the old ``summary.json`` is marked ``"stale"`` and the old report
  removed, so a run killed between the two writes leaves no summary or report that silently disagrees with
  ``runs.csv``; readers (:func:`summary_problem`, :func:`read_summary`, :func:`summary_dirs`) skip and name a
  summary that does not match;
* a grid that would drop runs of the folder's existing ``runs.csv`` is refused
  (:func:`prism_plugin.kept_runs.check_grid_kept`) unless ``--overwrite``.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin import manifest
from prism_plugin.errors import PrismError, plain_names
from prism_plugin.manifest import MANIFEST_KEY
from prism_plugin.storage import atomic_write_text, csv_text, dumps, json_default, sha256_hex

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
    "n_val", "n_val_prop", "forced_val_classes", "n_test", "task", "adapter",
    # the embedding identity (prism_plugin.embed.adapter.identity_columns): effective precision, weights, hub commit
    "precision", "weights", "weights_revision",
    "probe", "probe_converged", "probe_backend",
    # what the fast solver did (prism_plugin.heads.logistic.FAST_COLUMNS; fast mode only)
    "probe_solver", "probe_iter", "probe_grad_max", "probe_step_max", "probe_decision_bound", "probe_init",
    "probe_choice", "probe_exact_seconds", "probe_trial_seconds", "probe_build_seconds",
    "reference_table",
]


def order_columns(columns: Iterable[str]) -> list[str]:
    cols = list(dict.fromkeys(columns))
    lead = [c for c in LEADING_COLUMNS if c in cols]
    trail = [c for c in TRAILING_COLUMNS if c in cols]
    middle = [c for c in cols if c not in lead and c not in trail]
    return lead + middle + trail


def rows_to_frame(rows: list[dict]) -> pd.DataFrame:
    import pandas as pd
    df = pd.DataFrame(rows)
    return df[order_columns(df.columns)] if len(df.columns) else df


def read_runs(path: str | Path) -> pd.DataFrame:
    """Read a ``runs.csv``; a file that is not a readable CSV (binary, truncated, not UTF-8) is one
    PrismError naming it and the fix."""
    import pandas as pd
    path = Path(path)
    try:
        return plain_names(pd.read_csv(path))  # names from data: no control characters
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise PrismError(f"{path}: not a readable runs table ({type(exc).__name__}); rerun the job that wrote it, "
                         "or remove the file") from None


def find_runs_files(paths) -> list[Path]:
    """Every runs.csv in the given results directories (searched recursively), in order."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_file() and p.name == RUNS_NAME:
            found.append(p)
        elif p.is_dir():
            direct = p / RUNS_NAME
            found.extend([direct] if direct.exists() else _below(p))
        else:
            raise PrismError(f"{p}: not a results directory (no runs.csv)")
    if not found:
        raise PrismError("no runs.csv found in " + ", ".join(map(str, paths)) + "; run prism-run first")
    return list(dict.fromkeys(found))


def runs_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every ``runs.csv`` under ``paths`` (:func:`find_runs_files`, the one results discovery), but a path holding
    none adds nothing instead of raising: the report and the summaries read whatever results there are."""
    found: list[Path] = []
    for p in paths:
        try:
            found.extend(find_runs_files([p]))
        except PrismError:
            continue
    return list(dict.fromkeys(found))


def summary_dirs(paths: Iterable[str | Path], *, verified: bool = True) -> list[Path]:
    """The results directories (folders with a ``summary.json``) of ``paths``: a path holding one itself, else
    every one below it (a group folder's combined runs.csv has no summary.json of its own, its members do).

    ``verified`` (default): a folder whose files do not belong together (:func:`summary_problem`: a rerun killed
    between the two writes, an edited ``runs.csv``, a per-run file edited, removed or added) is refused: one
    line naming it and the fix."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / SUMMARY_NAME).is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(f.parent for f in _below(p, name=SUMMARY_NAME))
    out = list(dict.fromkeys(out))
    if verified:
        for folder in out:
            check_folder(folder)
    return out


# --------------------------------------------------------------------------- integrity
RUNS_NAME = "runs.csv"
SUMMARY_NAME = "summary.json"
REPORT_NAMES = ("report.html", "report.md")
#: the key of summary.json (and the stamp of the report) holding the SHA-256 of the runs.csv it describes
RUNS_DIGEST_KEY = "runs_sha256"
#: what to do about a summary or report that does not describe its folder's runs.csv
REWRITE_FIX = "rerun the same prism-run command into this folder to rewrite it (finished runs are reused)"
#: what to do about a folder whose per-run files changed after its summary was written
TAMPER_FIX = ("rerun the same prism-run command into this folder: runs whose files were edited, removed or added "
              "are recomputed, the others reused")
#: what to do about a group's combined table that does not match its members
GROUP_FIX = "rerun the same prism-run command (with the group) to combine the members' tables again"
#: the stamp of a group folder's combined runs.csv (its digest and its members')
GROUP_NAME = "group.json"
#: what each name of a results directory must be (prism-run writes them; anything else there is refused)
LAYOUT = {"cells": "folder", RUNS_NAME: "file", SUMMARY_NAME: "file", "group.json": "file", "report.html": "file", "report.md": "file",
          "figures": "folder", "summaries": "folder", "artifacts": "folder", "reliability": "folder"}

_WARNED: set[str] = set()


def warn_once(message: str, *, always: bool = False) -> None:
    """``warnings.warn(message)`` the first time this process says it (several readers meet one stale
    file); ``always``: say it now in any case (a command's own check), the readers then stay quiet."""
    if always or message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


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
    recorded = data.get(MANIFEST_KEY)
    if isinstance(recorded, dict):
        found = manifest.problems(folder, recorded)
        if found:
            return (f"{folder}: {manifest.describe(found)} since the run that wrote {SUMMARY_NAME}, so its files "
                    f"no longer belong together; {TAMPER_FIX}")
    return None


def group_problem(folder: str | Path) -> str | None:
    """Why a group folder's combined ``runs.csv`` is not the table of its members (``group.json``, written with
    it, records the digests of both), or ``None`` when it is, or when the folder has no ``group.json``."""
    folder = Path(folder)
    path = folder / GROUP_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        members = dict(data["members"])
        stamp = data[RUNS_DIGEST_KEY]
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError):
        return f"{path} is unreadable (truncated or corrupt); {GROUP_FIX}"
    if runs_digest(folder / RUNS_NAME) != stamp:
        return f"{folder / RUNS_NAME} is not the combined table {path} describes (edited or damaged); {GROUP_FIX}"
    for name, digest in members.items():
        if runs_digest(folder / name) != digest:
            return (f"{folder / RUNS_NAME} was combined from another {folder / name} than the one there (a member "
                    f"was rerun or edited); {GROUP_FIX}")
    return None


def write_group(folder: str | Path, df: pd.DataFrame, members: Iterable[str | Path]) -> Path:
    """Write a group's combined ``runs.csv`` and ``group.json`` (its digest and its members' digests)."""
    folder = Path(folder)
    target = folder / RUNS_NAME
    text = csv_text(df)
    names = sorted({Path(m).relative_to(folder).as_posix() for m in members})
    atomic_write_text(target, text)
    atomic_write_text(folder / GROUP_NAME, dumps({RUNS_DIGEST_KEY: sha256_hex(text.encode("utf-8")),
                                                 "members": {n: runs_digest(folder / n) for n in names}}))
    return target


def folder_problem(folder: str | Path) -> str | None:
    """Why the files of a results folder do not belong together (:func:`summary_problem`, :func:`group_problem`),
    or ``None``: the one test every reader applies before it reads a folder."""
    return summary_problem(folder) or group_problem(folder)


def check_folder(folder: str | Path) -> None:
    """Refuse a results folder whose files do not belong together (:func:`folder_problem`): one line naming
    the file and the fix."""
    problem = folder_problem(folder)
    if problem is not None:
        raise PrismError(problem)


#: how deep below a given path results folders are looked for (group/task/model, sweeps one more)
SEARCH_DEPTH = 6
#: folders of a results folder that never hold results folders (not searched)
SKIP_DIRS = frozenset({"cells", "artifacts", "reliability", "figures", "summaries"})


def _below(folder: Path, depth: int = SEARCH_DEPTH, name: str = RUNS_NAME) -> list[Path]:
    """The ``name`` files (``runs.csv``) at most ``depth`` folders below ``folder`` (links not followed), sorted."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        level = len(Path(root).relative_to(folder).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and level < depth)
        if name in files and Path(root, name).is_file():
            found.append(Path(root) / name)
    return sorted(found)


def results_inputs(paths: Iterable[str | Path], what: str = "RESULTS_DIR") -> list[Path]:
    """The results folders a command was given, checked: each path must exist and hold a ``runs.csv`` (in it,
    or in folders below it, as a group folder does), and every folder found must pass :func:`check_folder`.
    Anything else is one line naming the path (``what``: the argument) and the fix. Returns the paths."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_file() and p.name == RUNS_NAME:
            folders = [p.parent]
        elif p.is_file():
            raise PrismError(f"{what} {p}: a file, not a results directory; pass the folder prism-run wrote "
                             f"(it holds {RUNS_NAME} and {SUMMARY_NAME})")
        elif not p.is_dir():
            raise PrismError(f"{what} {p}: no such directory; pass a results directory written by prism-run")
        elif (p / RUNS_NAME).is_file():
            folders = [p] + [f.parent for f in _below(p) if f.parent != p]
        else:
            folders = [f.parent for f in _below(p)]
            if not folders:
                raise PrismError(f"{what} {p}: not a results directory (no {RUNS_NAME} in it or below it); "
                                 "pass a folder prism-run wrote, or run prism-run first")
        for folder in folders:
            check_folder(folder)
        out.append(p)
    return out


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
    """``folder/summary.json`` when its folder's files belong together (:func:`check_folder`: else one line
    naming the file and the fix: nothing is read from a stale or inconsistent folder); ``{}`` when absent."""
    folder = Path(folder)
    check_folder(folder)
    try:
        data = json.loads((folder / SUMMARY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


#: Bumped when the layout of a cell file changes; older cells are recomputed. 2: a ``checksum``
#: (format 1 cells had none, so an edit could not be told from a result: they are recomputed once).
CELL_FORMAT = 2


def _plain(obj: Any) -> Any:
    """``obj`` as JSON gives it back (numpy scalars -> numbers, tuples -> lists): what a cell reads."""
    return json.loads(json.dumps(obj, default=json_default, allow_nan=True))


def cell_checksum(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces) of a cell's content: every key but
    ``checksum`` (format, scope, run id, fingerprint, inputs and the row)."""
    body = {k: v for k, v in payload.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=json_default, allow_nan=True)
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

    A cell file holds one finished run (one row of ``runs.csv``) with the fingerprint of every input it depends on
    and, when given, the breakdown of that fingerprint (``parts``) so a stale cell can say what changed. Cells are
    scoped by task name inside the results directory, so a group run that writes one directory per task resumes
    each task on its own.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.cells_dir = self.path / "cells"
        #: what the last :meth:`write_runs` invalidated (summary.json, report.*)
        self.invalidated: list[str] = []

    def cell_path(self, scope: str, run_id: str) -> Path:
        from prism_plugin.paths import safe_file_stem

        return self.cells_dir / f"{safe_file_stem(f'{scope}--{run_id}')}.json"  # below 255 bytes (UTF-8)

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
            obj = {k: v for k, v in obj.items() if k not in ("stale", RUNS_DIGEST_KEY, MANIFEST_KEY)}
            obj[RUNS_DIGEST_KEY] = runs_digest(self.path / RUNS_NAME)
            obj[MANIFEST_KEY] = manifest.build(self.path)  # what the readers verify (prism_plugin.manifest)
        atomic_write_text(target, dumps(obj))
        return target
