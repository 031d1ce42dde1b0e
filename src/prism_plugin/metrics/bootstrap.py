"""Metric plugin: test-set bootstrap confidence intervals of every per-run PRISM metric.

What the interval means: the uncertainty of a number that comes from *which test examples* were drawn -- nothing
else. The probe, its seed and its temperature stay as fitted (the temperature is the one fitted on the validation
split, or on the source task's validation split for a transfer run, never refitted per replicate); the seed spread
of a cell is a separate quantity (its ``_std``).

How the replicates are drawn and scored (stratified, paired, exact, fast): :mod:`.resampling`.

Task key ``bootstrap: {n: 200, seed: 0, level: 0.95}`` (``--bootstrap N`` = ``--set bootstrap.n=N``); ``n: 0``
switches the intervals off: the columns stay (NaN) so ``runs.csv`` keeps one schema, and no artifact is written.
Columns: ``<m>_ci_low`` / ``<m>_ci_high`` for ``m`` in :data:`BOOT_METRICS` (NaN where the metric is NaN, e.g.
``brier`` for K > 2, the scaled metrics without a validation split), and ``n_test_min_class`` (the smallest class
count of the test labels, the number the width rests on).

Artifact (when the run has an ``artifact_dir``): ``<artifact_dir>/bootstrap/<task>--<run_id>.npz`` with
``metrics``, ``replicates`` (B x M), ``point`` (M), ``n``, ``seed``, ``level``, ``test_digest`` and ``format``;
:func:`load_replicates` reads and checks one. ``summary.json`` gets the interval of each cell's **seed mean** (the
mean of its runs' replicate vectors, when they share a test set): :func:`summary_block`.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.resampling import BOOT_METRICS, NAN, percentile_ci, run_bootstrap, test_digest

#: the runs.csv columns of this plugin, in order
COLUMNS = tuple(f"{m}_{side}" for m in BOOT_METRICS for side in ("ci_low", "ci_high")) + ("n_test_min_class",)
KEY = "bootstrap"
DEFAULTS: dict[str, Any] = {"n": 200, "seed": 0, "level": 0.95}
MAX_N = 100_000
METHOD = "stratified percentile, test set only, temperature fixed"
FORMAT = "prism-bootstrap/1"
DIRNAME = "bootstrap"


# --------------------------------------------------------------------------- settings
def settings(value: Any) -> dict[str, Any]:
    """The bootstrap settings of a run (``run.meta["bootstrap"]``; ``None`` = the defaults)."""
    out = dict(DEFAULTS)
    if isinstance(value, Mapping):
        out.update({k: value[k] for k in DEFAULTS if k in value})
    return out


def check_task_key(value: Any, ctx) -> dict[str, Any] | None:
    """Validator of the ``bootstrap`` task key: ``{n, seed, level}``, each optional.

    Returns ``None`` when the value equals the defaults (so writing the defaults out keeps every
    finished run reusable), else the full mapping.
    """
    from prism_plugin.errors import suggest
    from prism_plugin.paths import short_repr

    if value is None:
        return None
    example = "e.g. bootstrap: {n: 200, seed: 0, level: 0.95} (n: 0 switches the intervals off)"
    if not isinstance(value, Mapping):
        raise ctx.fail(KEY, f"must be a mapping, {example}; got {short_repr(value)}")
    for k in value:
        if k not in DEFAULTS:
            raise ctx.fail(f"{KEY}.{k}", f"unknown field{suggest(str(k), DEFAULTS)} (fields: n, seed, level; "
                                         f"{example})")
    out = dict(DEFAULTS)
    if "n" in value:
        n = value["n"]
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_N:
            raise ctx.fail(f"{KEY}.n", f"must be an integer number of replicates in [0, {MAX_N}] (0 = off, "
                                       f"default 200), got {short_repr(n)}")
        if 0 < n < 10:
            raise ctx.fail(f"{KEY}.n", f"{n} replicates cannot give a percentile interval; use at least 10 "
                                       "(default 200), or 0 to switch the intervals off")
        out["n"] = int(n)
    if "seed" in value:
        s = value["seed"]
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**32:
            raise ctx.fail(f"{KEY}.seed", f"must be an integer in [0, 2**32), got {short_repr(s)}")
        out["seed"] = int(s)
    if "level" in value:
        lv = value["level"]
        if isinstance(lv, bool) or not isinstance(lv, (int, float)) or not 0.0 < float(lv) < 1.0:
            raise ctx.fail(f"{KEY}.level", f"must be a coverage strictly between 0 and 1, e.g. 0.95, got "
                                           f"{short_repr(lv)}")
        out["level"] = float(lv)
    return None if out == DEFAULTS else out


# --------------------------------------------------------------------------- artifacts
def artifact_path(artifact_dir: str | Path, task: str, run_id: str) -> Path:
    from prism_plugin.metrics.reliability import artifact_name

    name = artifact_name(task, 0.0, 0, run_id)
    return Path(artifact_dir) / DIRNAME / (name[:-len(".json")] + ".npz")


def write_replicates(path: Path, replicates: np.ndarray, point: np.ndarray, n: int, seed: int, level: float,
                     digest: str) -> Path:
    from prism_plugin.storage import atomic_write_bytes

    buf = io.BytesIO()
    np.savez(buf, format=np.array(FORMAT), metrics=np.array(BOOT_METRICS), replicates=replicates,
             point=point, n=np.int64(n), seed=np.int64(seed), level=np.float64(level), test_digest=np.array(digest))
    atomic_write_bytes(path, buf.getvalue())
    return path


@dataclass(frozen=True)
class Replicates:
    """One run's bootstrap artifact."""

    path: Path
    metrics: tuple[str, ...]
    replicates: np.ndarray   # (B, M)
    point: np.ndarray        # (M,)
    n: int
    seed: int
    level: float
    test_digest: str

    def column(self, metric: str) -> np.ndarray:
        return self.replicates[:, self.metrics.index(metric)]

    def pairs_with(self, other: "Replicates") -> bool:
        """Same resamples: same test labels, number of replicates and seed."""
        return (self.test_digest, self.n, self.seed) == (other.test_digest, other.n, other.seed)


def load_replicates(path: str | Path) -> Replicates:
    """Read and check one artifact; a file that is not one is a PrismError naming it and the fix."""
    from prism_plugin.errors import PrismError

    path = Path(path)
    fix = "rerun the job that wrote it (or remove the file)"
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise PrismError(f"{path}: no such bootstrap artifact; run the task again with --bootstrap N > 0") from None
    except (OSError, ValueError, EOFError) as exc:
        raise PrismError(f"{path}: not a readable bootstrap artifact ({type(exc).__name__}); {fix}") from None
    need = ("format", "metrics", "replicates", "point", "n", "seed", "level", "test_digest")
    missing = [k for k in need if k not in data]
    if missing:
        raise PrismError(f"{path}: bootstrap artifact lacks {', '.join(missing)}; {fix}")
    if str(data["format"]) != FORMAT:
        raise PrismError(f"{path}: format {str(data['format'])!r}, expected {FORMAT!r}; {fix}")
    metrics = tuple(str(m) for m in np.atleast_1d(data["metrics"]))
    rep = np.asarray(data["replicates"], dtype=np.float64)
    point = np.asarray(data["point"], dtype=np.float64).reshape(-1)
    n = int(data["n"])
    digest = str(data["test_digest"])
    if rep.ndim != 2 or rep.shape != (n, len(metrics)) or point.shape != (len(metrics),):
        raise PrismError(f"{path}: replicates of shape {rep.shape} and point {point.shape} do not match n = {n} and "
                         f"{len(metrics)} metrics; {fix}")
    if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
        raise PrismError(f"{path}: test_digest is not a SHA-256 hex digest; {fix}")
    level = float(data["level"])
    if not 0.0 < level < 1.0:
        raise PrismError(f"{path}: level {level} is not in (0, 1); {fix}")
    return Replicates(path, metrics, rep, point, n, int(data["seed"]), level, digest)


# --------------------------------------------------------------------------- the hook
@hookimpl
def run_metrics(run):
    """``<m>_ci_low`` / ``<m>_ci_high`` for every metric of :data:`BOOT_METRICS` and ``n_test_min_class``;
    the replicates go to ``<artifact_dir>/bootstrap/<task>--<run_id>.npz``."""
    cfg = settings((run.meta or {}).get(KEY))
    y = np.asarray(run.y_test).reshape(-1)
    out: dict[str, Any] = {c: NAN for c in COLUMNS}
    counts = np.unique(y, return_counts=True)[1] if y.size else np.zeros(0, dtype=np.int64)
    out["n_test_min_class"] = int(counts.min()) if counts.size else 0
    n = int(cfg["n"])
    if n <= 0 or y.size == 0:
        return out
    scaled = run.scaled_proba(run.temperature("val"))  # the fitted T (a transfer: the source's), never refitted
    rep, point = run_bootstrap(y, run.proba_test, scaled, int(run.ece_bins), n, int(cfg["seed"]))
    lo, hi = percentile_ci(rep, float(cfg["level"]))
    for j, m in enumerate(BOOT_METRICS):
        out[f"{m}_ci_low"], out[f"{m}_ci_high"] = float(lo[j]), float(hi[j])
    if run.artifact_dir is not None:
        write_replicates(artifact_path(run.artifact_dir, run.task, run.run_id), rep, point, n, int(cfg["seed"]),
                         float(cfg["level"]), test_digest(y))
    return out


# --------------------------------------------------------------------------- summary.json
def summary_block(value: Any, *, cells: list[dict], runs, run_ids: list[str], artifact_dir: str | Path | None,
                  task: str, cell_by: list[str]) -> dict[str, Any]:
    """Add ``"ci"`` (metric -> [low, high] of the seed mean) to each summary cell; return the top-level
    ``"bootstrap"`` block ``{n, seed, level, method}``.

    A cell's interval is the percentile interval of the mean of its runs' replicate vectors, when
    every run has an artifact with the same test labels, ``n`` and ``seed`` (then the replicates are
    paired and their mean is a bootstrap of the seed mean). Otherwise the cell gets ``"ci_note"``
    saying why it has none (intervals off, artifacts missing, runs scored on different test sets).
    """
    cfg = settings(value)
    block = {"n": int(cfg["n"]), "seed": int(cfg["seed"]), "level": float(cfg["level"]), "method": METHOD}
    if cfg["n"] <= 0:
        for cell in cells:
            cell["ci_note"] = "bootstrap off (bootstrap.n = 0)"
        return block
    if artifact_dir is None:
        return block
    frame = runs.reset_index(drop=True)
    keys = cell_by + ["fraction"]
    ids = list(run_ids)
    for cell in cells:
        mask = np.ones(len(frame), dtype=bool)
        for k in keys:
            if k not in frame.columns or k not in cell:
                continue
            col = frame[k]
            v = cell[k]
            mask &= (col.isna().to_numpy() if (v is None or (isinstance(v, float) and math.isnan(v)))
                     else (col == v).to_numpy())
        loaded: list[Replicates] = []
        note = None
        for i in np.flatnonzero(mask):
            path = artifact_path(artifact_dir, task, ids[i])
            try:
                loaded.append(load_replicates(path))
            except Exception:
                note = f"no bootstrap artifact for run {ids[i]}"
                break
        if note is None and not loaded:
            note = "no runs"
        if note is None and any(not r.pairs_with(loaded[0]) or r.metrics != loaded[0].metrics for r in loaded):
            note = ("the runs of this cell were scored on different test sets (or bootstrap settings); "
                    "no interval of their mean")
        if note is not None:
            cell["ci_note"] = note
            continue
        mean = np.mean([r.replicates for r in loaded], axis=0)
        lo, hi = percentile_ci(mean, float(cfg["level"]))
        cell["ci"] = {m: [_finite(lo[j]), _finite(hi[j])] for j, m in enumerate(loaded[0].metrics)}
    return block


@hookimpl
def register_metrics(register) -> None:
    """The interval bounds: bounds, not scores (no direction); a cell's interval of the seed mean is
    summary.json's ``cells[].ci``, not the mean of these bounds."""
    labels = {"auroc": "AUROC", "f1_macro": "macro-F1", "brier": "Brier", "nll": "NLL", "nll_scaled": "NLL after T",
              "ece_fixed": "ECE (fixed bins)", "ece_adaptive": "ECE (adaptive bins)",
              "ece_scaled_fixed": "ECE after T (fixed)", "ece_scaled_adaptive": "ECE after T (adaptive)"}
    for m in BOOT_METRICS:
        for side, word in (("low", "lower"), ("high", "upper")):
            register(f"{m}_ci_{side}", display=f"{labels.get(m, m)} CI {word} bound", summary=False, report=False,
                     description=f"{word} bound of the test-set bootstrap interval of {m} (stratified percentile at "
                                 "bootstrap.level, temperature fixed; NaN when the metric is NaN or bootstrap.n = 0)")
    register("n_test_min_class", display="test samples of the rarest class (bootstrap)", summary=False, report=False,
             description="smallest class count of the test labels: the sample a bootstrap interval rests on")


@hookimpl
def register_task_keys(register) -> None:
    register(KEY, check_task_key, summary=summary_block, description="test-set bootstrap intervals of every metric: "
             "{n: 200, seed: 0, level: 0.95} (stratified percentile, temperature fixed; n: 0 switches them off); "
             "--bootstrap N sets n")


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


__all__ = [
    "COLUMNS", "DEFAULTS", "METHOD", "Replicates", "artifact_path", "check_task_key", "load_replicates",
    "register_metrics", "register_task_keys", "run_metrics", "settings", "summary_block",
]
