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

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

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
    "n_val", "n_val_prop", "forced_val_classes", "n_test", "task", "adapter", "probe", "probe_converged",
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


def atomic_write_bytes(path: Path, data: bytes) -> None:
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


class ResultsDir:
    """One results directory; cells are persisted as they finish."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.cells_dir = self.path / "cells"

    def cell_path(self, scope: str, run_id: str) -> Path:
        safe = "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in f"{scope}--{run_id}")
        return self.cells_dir / f"{safe}.json"

    def save_cell(self, scope: str, run_id: str, fingerprint: str, row: dict) -> None:
        payload = {"fingerprint": fingerprint, "row": row}
        atomic_write_text(self.cell_path(scope, run_id), json.dumps(payload, default=_json_default, allow_nan=True))

    def load_cell(self, scope: str, run_id: str, fingerprint: str) -> tuple[dict | None, str | None]:
        """(row, None) when reusable; (None, reason) when stale or unreadable; (None, None) if absent."""
        path = self.cell_path(scope, run_id)
        if not path.exists():
            return None, None
        try:
            payload = json.loads(path.read_text())
            row = payload["row"]
        except (OSError, ValueError, KeyError, TypeError):
            return None, f"{path.name} is unreadable"
        if payload.get("fingerprint") != fingerprint:
            return None, f"{path.name} was computed from other inputs (task config, embeddings, probe or package version)"
        return row, None

    def write_runs(self, df: pd.DataFrame, name: str = "runs.csv") -> Path:
        target = self.path / name
        write_csv(target, df)
        return target

    def write_json(self, name: str, obj: Any) -> Path:
        target = self.path / name
        atomic_write_text(target, dumps(obj))
        return target


def cell_stats(df: pd.DataFrame, by: list[str], metrics: list[str]) -> list[dict]:
    """Per cell (``by`` + fraction): seed means and standard deviations (ddof = 1)."""
    present = [m for m in metrics if m in df.columns]
    out = []
    for keys, g in df.groupby(by + ["fraction"], sort=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        entry = dict(zip(by + ["fraction"], keys))
        entry["n_runs"] = int(len(g))
        for m in present:
            vals = pd.to_numeric(g[m], errors="coerce")
            entry[f"{m}_mean"] = float(vals.mean())
            entry[f"{m}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        out.append(entry)
    return out
