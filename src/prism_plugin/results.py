"""The results directory: runs.csv, summary.json, per-run cells, atomic writes, resume.

Layout of a results directory::

    runs.csv        one row per run (fraction x seed), grid order
    summary.json    cell means/stds, resolved task, versions, fingerprints, timings
    cells/          one JSON file per finished run, written as it completes
    report.md       the report (and report.html when the report plugin is present)

Every file is written to a temporary name in the same folder and renamed, so a
reader sees either the old complete file or the new complete one. A killed run
restarted with the same arguments reuses every cell whose inputs fingerprint
matches and recomputes the rest; the assembled ``runs.csv`` is byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from prism_plugin.registrars import AGGREGATIONS  # how runs combine into a cell (register_metrics)

#: Canonical leading columns (the reference's indomain_all_v2 order), then the
#: extra per-run metrics, then metadata. Unknown plugin columns go in between.
LEADING_COLUMNS = [
    "model", "dataset", "src", "tgt", "pair", "hospital", "fraction", "seed", "n_train", "n_classes",
    "auroc", "f1_macro", "f1_binary", "brier", "ece_fixed", "ece_adaptive", "temperature", "temperature_src",
    "ece_scaled_fixed", "ece_scaled_adaptive", "temperature_oracle", "ece_scaled_oracle",
    "temperature_prop", "ece_scaled_prop", "degeneracy_share", "degenerate", "forced_classes",
    "nll", "nll_scaled",
]
TRAILING_COLUMNS = [
    "n_val", "n_val_prop", "forced_val_classes", "n_test", "task", "adapter", "probe", "probe_converged", "probe_backend",
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


def summary_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """The results directories (folders with a ``summary.json``) of ``paths``: a path holding one
    itself, else every one below it (a group folder's combined runs.csv has no summary.json of its
    own, its members do)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "summary.json").exists():
            out.append(p)
        elif p.is_dir():
            out.extend(f.parent for f in sorted(p.rglob("summary.json")))
    return list(dict.fromkeys(out))


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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a unique temporary name beside ``path``, fsync, rename over ``path``.

    A reader (or a process killed at any instant) sees the old complete file or
    the new complete one, never a mixture; concurrent writers of the same path
    each rename a complete file and the last one wins.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
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


def write_csv(path: Path, df: pd.DataFrame, index: bool = False) -> None:
    atomic_write_text(path, df.to_csv(index=index, lineterminator="\n"))


#: Bumped when the layout of a cell file changes; older cells are recomputed.
CELL_FORMAT = 1


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

    def cell_path(self, scope: str, run_id: str) -> Path:
        safe = "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in f"{scope}--{run_id}")
        if len(safe) > 200:  # stay below the usual 255-byte file name limit
            digest = hashlib.sha256(f"{scope}--{run_id}".encode()).hexdigest()[:16]
            safe = safe[:180] + "-" + digest
        return self.cells_dir / f"{safe}.json"

    def save_cell(self, scope: str, run_id: str, fingerprint: str, row: dict,
                  parts: dict[str, Any] | None = None) -> None:
        payload = {"format": CELL_FORMAT, "scope": scope, "run_id": run_id, "fingerprint": fingerprint,
                   "inputs": parts, "row": row}
        atomic_write_text(self.cell_path(scope, run_id), json.dumps(payload, default=_json_default, allow_nan=True))

    def load_cell(self, scope: str, run_id: str, fingerprint: str, parts: dict[str, Any] | None = None,
                  expect: dict[str, Any] | None = None) -> tuple[dict | None, str | None]:
        """(row, None) when reusable; (None, reason) when stale or unreadable; (None, None) if absent.

        ``expect`` lists columns the row must hold exactly (e.g. the run's
        fraction and seed, which the file name only shows to 6 digits).
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

    def write_runs(self, df: pd.DataFrame, name: str = "runs.csv") -> Path:
        target = self.path / name
        write_csv(target, df)
        self.sweep_tmp()
        return target

    def sweep_tmp(self, min_age_s: float = 600.0) -> int:
        """Delete temporary files left by writes that were killed (older than ``min_age_s``: a
        concurrent writer's own temporary file lives for milliseconds)."""
        import time

        removed = 0
        now = time.time()
        for folder in (self.path, self.cells_dir):
            for tmp in folder.glob(".*.tmp"):
                try:
                    if now - tmp.stat().st_mtime > min_age_s:
                        tmp.unlink()
                        removed += 1
                except OSError:
                    pass
        return removed

    def write_json(self, name: str, obj: Any) -> Path:
        target = self.path / name
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
