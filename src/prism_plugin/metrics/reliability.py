"""Metric plugin: per-run reliability-diagram statistics, kept out of ``runs.csv``.

A reliability diagram needs, per confidence bin, the number of test samples, their mean confidence and the observed
accuracy, for the raw probabilities and after temperature scaling. The runner keeps no probabilities once a run is
scored, so this plugin computes those bin statistics while the run is in memory and stores them as a small
**per-run artifact** beside the results::

    <results>/reliability/<task>--<run id>.json      (run id: f<fraction>-s<seed>[-split<N>][-<probe>])

Design (why not columns): 15 bins x 3 statistics x 2 (raw, scaled) would add 90 columns to ``runs.csv``; one JSON
string column would make it unreadable. The plugin therefore returns **no columns** (``runs.csv`` is unchanged) and
hands the statistics to :func:`record`, which

* writes the file atomically at once when the run tells where its results directory is
  (``run.meta["results_dir"]``, see :data:`RESULTS_DIR_KEY`), or
* keeps it in a small in-process buffer that :func:`flush` writes into the results directory; the report builder
  calls :func:`flush` at the end of every ``prism-run`` job, so the files exist whenever a report is written.

The binning is exactly the fixed-bin ECE of PROTOCOL §3 (``linspace(0, 1, bins + 1)``, half-open ``[lo, hi)``
including the last bin, so a confidence of exactly 1.0 is in no bin but counts in N; binary = class-1 reliability,
multiclass = top-label). ``ece`` of an artifact is recomputed from its bins exactly as
:func:`prism_plugin.metrics.core.ece` sums them, so a reader can check an artifact against ``runs.csv``'s
``ece_fixed`` / ``ece_scaled_fixed`` and ignore a stale one (:func:`load_reliability` does).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.core import confidence_and_correct

FORMAT = "prism-reliability/1"
DIRNAME = "reliability"
#: ``RunContext.meta`` key naming the results directory (set by a runner that
#: wants artifacts written at once rather than at report time).
RESULTS_DIR_KEY = "results_dir"
#: Tolerance when matching an artifact's ECE against runs.csv.
ECE_MATCH_TOL = 1e-9
#: At most this many runs are buffered in memory (oldest dropped first).
MAX_PENDING = 2000

_LOCK = threading.Lock()
_PENDING: "OrderedDict[tuple[str, str, str], dict[str, Any]]" = OrderedDict()


# --------------------------------------------------------------------------- statistics
def reliability_bins(y: np.ndarray, proba: np.ndarray, n_bins: int = 15) -> dict[str, Any]:
    """Fixed-bin reliability statistics of one probability matrix.

    Returns ``{"count": [...], "confidence": [...], "accuracy": [...], "n": N, "outside": n_not_binned, "ece":
    ECE}``; ``confidence`` / ``accuracy`` are ``None`` for empty bins. For K = 2 ``accuracy`` is the observed
    frequency of class 1 and ``confidence`` the mean p(y = 1).
    """
    conf, correct = confidence_and_correct(y, proba)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    n = int(conf.shape[0])
    counts, confs, accs = [], [], []
    total = 0.0
    binned = 0
    for lo, hi in zip(edges[:-1], edges[1:]):
        in_bin = (conf >= lo) & (conf < hi)
        c = int(in_bin.sum())
        counts.append(c)
        if c == 0:
            confs.append(None)
            accs.append(None)
            continue
        binned += c
        mc = float(conf[in_bin].mean())
        ma = float(correct[in_bin].mean())
        confs.append(mc)
        accs.append(ma)
        total += c * abs(ma - mc)
    return {"count": counts, "confidence": confs, "accuracy": accs, "n": n, "outside": n - binned,
            "ece": float(total / n) if n else float("nan")}


def ece_from_bins(entry: Mapping[str, Any]) -> float:
    """ECE recomputed from stored bins (same summation order as the metric)."""
    n = entry.get("n") or 0
    if not n:
        return float("nan")
    total = 0.0
    for c, mc, ma in zip(entry["count"], entry["confidence"], entry["accuracy"]):
        if c:
            total += c * abs(ma - mc)
    return float(total / n)


def artifact_name(task: str, fraction: float, seed: int, run_id: str | None = None) -> str:
    """File name of one run's artifact: ``<task>--<run id>.json`` (safe characters); the run id is
    ``f<fraction:g>-s<seed>`` for a task without the ``split_seeds`` / ``probes`` grid keys."""
    from prism_plugin.paths import safe_file_stem

    raw = f"{task}--{run_id or f'f{float(fraction):g}-s{int(seed)}'}"
    return safe_file_stem(raw) + ".json"  # below the usual 255-byte file-name limit (UTF-8 bytes), still unique


# --------------------------------------------------------------------------- writing
def _write(results_dir: Path, payload: Mapping[str, Any]) -> Path:
    from prism_plugin.storage import atomic_write_text

    path = Path(results_dir) / DIRNAME / _payload_name(payload)
    atomic_write_text(path, json.dumps(_finite(payload), indent=1) + "\n")
    return path


def _payload_name(payload: Mapping[str, Any]) -> str:
    return artifact_name(payload["task"], payload["fraction"], payload["seed"], payload.get("run_id"))


def row_names(row: Mapping[str, Any]) -> set[str]:
    """The artifact names a runs.csv row may have (its run id with or without the grid-key parts:
    the row does not say whether its task had ``probes``)."""
    from prism_plugin.protocol.grid import run_id

    if isinstance(row.get("run_id"), str) and row["run_id"]:  # the runner's own id (tasks with grid keys)
        return {artifact_name(str(row["task"]), row["fraction"], row["seed"], row["run_id"])}
    split = row.get("split_seed")
    split = None if split is None or (isinstance(split, float) and not math.isfinite(split)) else int(split)
    probe = row.get("probe") if isinstance(row.get("probe"), str) and row.get("probe") else None
    ids = {run_id(row["fraction"], row["seed"], s, p) for s in {None, split} for p in {None, probe}}
    return {artifact_name(str(row["task"]), row["fraction"], row["seed"], i) for i in ids}


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def record(payload: Mapping[str, Any], results_dir: str | Path | None = None) -> Path | None:
    """Store one run's artifact: written now when ``results_dir`` is known,
    otherwise buffered until :func:`flush`. Returns the path when written."""
    if results_dir is not None:
        return _write(Path(results_dir), payload)
    key = (str(payload["task"]), str(payload["adapter"]), _payload_name(payload))
    with _LOCK:
        _PENDING.pop(key, None)
        _PENDING[key] = dict(payload)
        while len(_PENDING) > MAX_PENDING:
            _PENDING.popitem(last=False)
    return None


def flush(results_dir: str | Path, runs: Iterable[Mapping[str, Any]] | None = None) -> list[Path]:
    """Write the buffered artifacts that belong to ``results_dir``.

    ``runs`` are the rows of its ``runs.csv`` (dicts with ``task``, ``adapter``, ``fraction``, ``seed``); only
    buffered runs matching one of them are written (and removed from the buffer). Without ``runs`` the directory's
    ``runs.csv`` is read.
    """
    results_dir = Path(results_dir)
    if runs is None:
        import pandas as pd

        path = results_dir / "runs.csv"
        if not path.exists():
            return []
        from prism_plugin.results import read_runs

        runs = read_runs(path).to_dict("records")
    wanted = set()
    for r in runs:
        if "task" in r and "adapter" in r:
            wanted.update((str(r["task"]), str(r["adapter"]), name) for name in row_names(r))
    with _LOCK:
        take = [(k, _PENDING.pop(k)) for k in list(_PENDING) if k in wanted]
    return [_write(results_dir, payload) for _, payload in take]


# --------------------------------------------------------------------------- reading
def load_reliability(results_dir: str | Path, runs=None) -> list[dict[str, Any]]:
    """Artifacts of ``results_dir`` that match a run of its ``runs.csv``.

    An artifact is kept only if its (task, fraction, seed) is a run of ``runs`` (a DataFrame; default: the
    directory's ``runs.csv``) and its raw ECE reproduces that run's ``ece_fixed`` to :data:`ECE_MATCH_TOL` (a stale
    file from an earlier configuration is ignored). Each returned dict gains ``model`` and ``setting`` (dataset or
    pair) from the run.
    """
    import pandas as pd

    results_dir = Path(results_dir)
    folder = results_dir / DIRNAME
    if not folder.is_dir():
        return []
    if runs is None:
        p = results_dir / "runs.csv"
        if not p.exists():
            return []
        from prism_plugin.results import read_runs

        runs = read_runs(p)
    index: dict[str, Mapping[str, Any]] = {}
    for r in runs.to_dict("records"):
        if "task" in r:
            for name in row_names(r):
                index.setdefault(name, r)
    out = []
    for path in sorted(folder.glob("*.json")):
        run = index.get(path.name)
        if run is None:
            continue
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if payload.get("format") != FORMAT or "raw" not in payload:
            continue
        raw_ece = ece_from_bins(payload["raw"])
        ref = run.get("ece_fixed")
        if ref is None or not (isinstance(ref, float) and math.isfinite(ref)) or abs(raw_ece - ref) > ECE_MATCH_TOL:
            continue
        payload["model"] = run.get("model", payload.get("model"))
        payload["probe"] = run.get("probe", payload.get("probe"))
        payload["setting"] = run.get("pair") if isinstance(run.get("pair"), str) else run.get("dataset")
        payload["reference_table"] = run.get("reference_table", "indomain")
        out.append(payload)
    return out


# --------------------------------------------------------------------------- the hook
@hookimpl
def run_metrics(run):
    """Bin statistics of the raw and the temperature-scaled test probabilities
    (stored as an artifact; no ``runs.csv`` column)."""
    bins = int(run.ece_bins)
    t = run.temperature("val")
    scaled = run.scaled_proba(t)
    payload = {
        "format": FORMAT,
        "task": run.task,
        "adapter": run.adapter,
        "model": run.model,
        "fraction": float(run.fraction),
        "seed": int(run.seed),
        "run_id": getattr(run, "run_id", None) or None,
        "split_seed": getattr(run, "split_seed", None),
        "probe": (run.meta or {}).get("probe"),
        "n_classes": int(run.n_classes),
        "bins": bins,
        "convention": "class-1 (p(y=1) vs observed frequency of y=1)" if run.n_classes == 2
        else "top-label (max probability vs accuracy)",
        "raw": reliability_bins(run.y_test, run.proba_test, bins),
        "scaled": None if scaled is None else {**reliability_bins(run.y_test, scaled, bins), "temperature": float(t)},
        "temperature_source": "source validation split" if run.meta.get("kind") == "transfer" else "validation split",
    }
    record(payload, run.meta.get(RESULTS_DIR_KEY))
    return None


__all__ = [
    "FORMAT", "RESULTS_DIR_KEY", "artifact_name", "ece_from_bins", "flush", "load_reliability", "record",
    "reliability_bins", "run_metrics",
]
