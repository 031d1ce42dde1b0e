"""Test-set uncertainty in the report: exact CIs of the seed mean from the paired bootstrap replicates.

The bootstrap metric plugin (:mod:`prism_plugin.metrics.bootstrap`) writes per run the columns
``<m>_ci_low`` / ``<m>_ci_high`` and, beside the results, the replicates
``<results>/artifacts/bootstrap/<task>--<run_id>.npz`` (B × M metric values on resamples of the
test set that depend only on the bootstrap seed and the test labels, so two runs on the same test
examples share their resamples). ``report_cells`` (:mod:`prism_plugin.report.derived`) can only
approximate the CI of a cell's seed mean from the per-run columns (mean of the seeds' bounds) and
the CI of scaled − raw ECE conservatively (interval overlap). Where the replicates are at hand,
:func:`exact_cell_ci` replaces both with the percentile interval of the seed mean of the replicate
vectors (and of the paired difference), which is what ``summary.json`` reports per cell.

Seeds are averaged replicate by replicate only when they can be: all on the same test set with the
same resamples (same ``test_digest``, ``n`` and bootstrap ``seed``: paired), or all on different
test sets (independent). A cell mixing the two keeps the approximation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

FOLDER = ("artifacts", "bootstrap")
DELTA = "ece_scaling_delta"


def _load(path: Path) -> dict[str, Any] | None:
    try:
        from prism_plugin.metrics.bootstrap import load_replicates  # the plugin's reader, when installed
    except ImportError:
        load_replicates = None
    try:
        if load_replicates is not None:
            data = load_replicates(path)
            data = dict(data) if isinstance(data, Mapping) else {k: getattr(data, k) for k in
                                                                  ("metrics", "replicates", "n", "seed", "level",
                                                                   "test_digest") if hasattr(data, k)}
        else:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
    except Exception:  # an unreadable artifact costs only the exact interval of its cell
        return None
    try:
        names = [str(m) for m in np.asarray(data["metrics"]).ravel()]
        reps = np.asarray(data["replicates"], dtype=float)
        if reps.ndim != 2 or reps.shape[1] != len(names):
            return None
        return {"metrics": names, "replicates": reps, "n": int(np.asarray(data["n"]).ravel()[0]),
                "seed": int(np.asarray(data["seed"]).ravel()[0]),
                "level": float(np.asarray(data["level"]).ravel()[0]),
                "test_digest": str(np.asarray(data["test_digest"]).ravel()[0])}
    except (KeyError, ValueError, TypeError, IndexError):
        return None


def _setting(row: Mapping[str, Any]) -> str:
    if isinstance(row.get("pair"), str) and row["pair"]:
        return row["pair"]
    if isinstance(row.get("src"), str) and isinstance(row.get("tgt"), str):
        return f"{row['src']}->{row['tgt']}"
    if "hospital" in row and pd.notna(row.get("hospital")) and not isinstance(row.get("dataset"), str):
        return f"h{int(row['hospital'])}"
    return str(row.get("dataset", ""))


def run_replicates(results_dir: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(runs.csv row, replicates) of every run of ``results_dir`` whose artifact is present."""
    from prism_plugin.metrics.reliability import row_names

    folder = Path(results_dir).joinpath(*FOLDER)
    runs_csv = Path(results_dir) / "runs.csv"
    if not folder.is_dir() or not runs_csv.is_file():
        return []
    try:
        runs = pd.read_csv(runs_csv)
    except Exception:
        return []
    out = []
    for row in runs.to_dict("records"):
        if "task" not in row:
            continue
        for name in sorted(row_names(row)):
            stem = name[:-5] if name.endswith(".json") else name
            path = folder / f"{stem}.npz"
            if path.is_file():
                data = _load(path)
                if data is not None:
                    out.append((row, data))
                break
    return out


def percentile_ci(values: np.ndarray, level: float) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return float("nan"), float("nan")
    a = (1.0 - float(level)) / 2.0
    lo, hi = np.quantile(v, [a, 1.0 - a])
    return float(lo), float(hi)


def _combinable(reps: list[dict[str, Any]]) -> bool:
    keys = [(r["test_digest"], r["n"], r["seed"]) for r in reps]
    digests = [r["test_digest"] for r in reps]
    return len(set(keys)) == 1 or len(set(digests)) == len(digests)


def seed_mean_ci(reps: list[dict[str, Any]], metric: str) -> tuple[float, float] | None:
    """Percentile CI of the seed mean of ``metric`` (``DELTA``: scaled − raw fixed-bin ECE)."""
    if not reps or not _combinable(reps) or len({r["n"] for r in reps}) != 1:
        return None
    cols = []
    for r in reps:
        names = r["metrics"]
        if metric == DELTA:
            if "ece_fixed" not in names or "ece_scaled_fixed" not in names:
                return None
            m = r["replicates"]
            cols.append(m[:, names.index("ece_scaled_fixed")] - m[:, names.index("ece_fixed")])
        elif metric in names:
            cols.append(r["replicates"][:, names.index(metric)])
        else:
            return None
    stacked = np.vstack(cols)
    if not np.isfinite(stacked).all(axis=0).any():
        return None
    return percentile_ci(stacked.mean(axis=0), reps[0]["level"])


def exact_cell_ci(dirs: Iterable[Path], cells: pd.DataFrame, label=None,
                  other_t: Iterable[str] = ()) -> tuple[pd.DataFrame, float | None, int]:
    """``cells`` (report_cells) with the CI columns of every cell whose runs all have replicates replaced by the
    exact seed-mean interval (``ci_source`` = ``paired replicates``), the bootstrap level, and how many cells were
    replaced. ``label(row) -> model`` maps a runs.csv row to the model label the cells use (probe / sweep-variant
    labels); ``other_t``: tables whose temperature is not the replicates' (their scaled metrics keep their CI)."""
    if cells is None or cells.empty:
        return cells, None, 0
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for d in dirs:
        for row, data in run_replicates(Path(d)):
            model = label(row) if label is not None else str(row.get("model", ""))
            key = (model, _setting(row), round(float(row["fraction"]), 9))
            groups.setdefault(key, []).append(data)
    if not groups:
        return cells, None, 0
    out = cells.copy()
    level = None
    done = 0
    for i, r in out.iterrows():
        reps = groups.get((str(r["model"]), str(r["setting"]), round(float(r["fraction"]), 9)))
        if not reps or len(reps) != int(r["n_runs"]):
            continue
        changed = False
        for metric in (*_metrics(reps), DELTA):
            if r["table"] in other_t and metric in ("ece_scaled_fixed", "ece_scaled_adaptive", "nll_scaled", DELTA):
                continue  # the replicates are after the full-validation T, not this table's
            ci = seed_mean_ci(reps, metric)
            if ci is None:
                continue
            for end, v in zip(("ci_low", "ci_high"), ci):
                out.loc[i, f"{metric}_{end}"] = v
            changed = True
        if changed:
            out.loc[i, "ci_source"] = "paired replicates"
            if f"{DELTA}_ci_low" in out and pd.notna(out.loc[i, f"{DELTA}_ci_low"]):
                out.loc[i, f"{DELTA}_ci_source"] = "paired replicates"
            level = reps[0]["level"]
            done += 1
    return out, level, done


def _metrics(reps: list[dict[str, Any]]) -> list[str]:
    from prism_plugin.report.derived import CI_METRICS

    return [m for m in CI_METRICS if all(m in r["metrics"] for r in reps)]


def bootstrap_level(summaries: Iterable[Mapping[str, Any]]) -> float | None:
    """The bootstrap level of the results (``summary.json`` ``bootstrap.level``), when all agree."""
    levels = set()
    for s in summaries:
        b = s.get("bootstrap") if isinstance(s, Mapping) else None
        if isinstance(b, Mapping) and isinstance(b.get("level"), (int, float)) and b.get("n"):
            levels.add(float(b["level"]))
    return levels.pop() if len(levels) == 1 else None


__all__ = ["DELTA", "bootstrap_level", "exact_cell_ci", "percentile_ci", "run_replicates", "seed_mean_ci"]
