"""Metric plugin ``classwise``: per-class (class-wise) calibration of multiclass probes.

The protocol's multiclass ECE (``ece_fixed``) is **top-label**: it only asks whether the largest probability
matches the accuracy. A probe can be well calibrated on its top label and badly calibrated for one class (a rare
class whose probability is always too high, say). The class-wise ECE (Kull et al. 2019, "classwise-ECE") looks at
every class k as its own one-vs-rest problem, the predicted ``p_k`` against the indicator ``1[y = k]``:

    ECE_k = sum_b |B_kb| * |freq_k(B_kb) - conf_k(B_kb)| / N
    ece_classwise = mean over the K classes of ECE_k

with the protocol's fixed bins (``linspace(0, 1, ece_bins + 1)``, every bin half-open ``[lo, hi)``, so a
probability of exactly 1.0 falls in no bin while still counting in N: the convention of
:func:`prism_plugin.metrics.core.ece`). Every ECE_k is over all N test samples, so a class absent from the test
split still has one (its mean predicted probability, bin by bin); its support ``n`` (the test samples of class k)
says how much the high-probability bins can be trusted.

Columns (``runs.csv``):

* ``ece_classwise``: the mean of ECE_k on the raw probabilities;
* ``ece_classwise_scaled``: the same after the fitted temperature, obtained exactly as the ``calibration`` plugin
  obtains ``ece_scaled_fixed`` (``run.scaled_proba(run.temperature("val"))``; for transfer runs that temperature
  was fitted on the *source* validation split); NaN when no temperature was fitted;
* ``ece_classwise_max``: the largest ECE_k on the raw probabilities (the worst class; which class it is, is in the
  artifact).

**K = 2: all three are NaN and no artifact is written.** For a binary problem the one-vs-rest
problem of class 1 is exactly the protocol's class-1 reliability (``ece_fixed``: p(y = 1) against
1[y = 1]), and that of class 0 is its mirror image: ``p_0 = 1 - p_1`` and ``1[y = 0] = 1 - 1[y = 1]``,
so every class-0 bin holds the samples of the mirrored class-1 bin with the same
``|frequency - confidence|`` gap. The class-wise ECE would repeat ``ece_fixed`` (they can differ
only for probabilities lying exactly on a bin edge, where the half-open bins flip sides), and the
binary reliability diagram already is the full per-class picture. A NaN says "not a separate
quantity" where a copied number would suggest a second, independent measurement.

Per-run artifact (multiclass runs, when ``run.artifact_dir`` is set; the runner sets it to
``<results>/artifacts``)::

    <run.artifact_dir>/classwise/<task>--<run id>.json       (format "prism-classwise/1")

with, per class: ``index``, ``name``, ``n`` (support), and for ``raw`` and ``scaled`` the per-bin ``count`` /
``confidence`` (mean p_k) / ``accuracy`` (observed frequency of class k; ``None`` for an empty bin) and the class's
``ece``; plus the run's identity, ``worst`` (index, name and ECE of the worst class, raw and scaled) and the three
column values. The file name follows :func:`prism_plugin.metrics.reliability.artifact_name`, so
:func:`load_classwise` matches it back to a ``runs.csv`` row the way the reliability artifacts are matched, and
keeps it only when its bins reproduce that row's ``ece_classwise`` (a stale file is ignored).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from prism_plugin.hookspecs import hookimpl

FORMAT = "prism-classwise/1"
DIRNAME = "classwise"
COLUMNS = ("ece_classwise", "ece_classwise_scaled", "ece_classwise_max")
#: Tolerance when matching an artifact's class-wise ECE against runs.csv.
ECE_MATCH_TOL = 1e-9
#: A class with fewer test samples than this gets "few samples: ECE unreliable" in the report.
FEW_SAMPLES = 10

NAN = float("nan")


# --------------------------------------------------------------------------- statistics
def classwise_bins(y: np.ndarray, proba: np.ndarray, n_bins: int = 15) -> dict[str, np.ndarray]:
    """Fixed-bin one-vs-rest statistics of every class at once.

    Returns ``count`` (K, B) int, ``confidence`` / ``accuracy`` (K, B) float (NaN in empty bins:
    mean p_k and observed frequency of y = k), ``ece`` (K,) and ``n`` (N). The bin of p is the
    ``b`` with ``edges[b] <= p < edges[b + 1]`` (``searchsorted(..., side="right") - 1``: the same
    comparisons as the half-open masks of :func:`prism_plugin.metrics.core.ece`), p = 1.0 in none.
    """
    p = np.asarray(proba, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64).reshape(-1)
    n, k = p.shape
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # bin b has edges[b] <= p < edges[b + 1]; p = 1.0 (and NaN) land in an overflow bin n_bins, dropped
    b = np.searchsorted(edges, p, side="right") - 1  # (N, K)
    b[b < 0] = n_bins  # p < 0 (not a probability) is in no bin either, as in core.ece
    w = n_bins + 1
    idx = (b + np.arange(k) * w).ravel()
    size = k * w
    counts = np.bincount(idx, minlength=size).reshape(k, w)[:, :n_bins]
    csum = np.bincount(idx, weights=p.ravel(), minlength=size).reshape(k, w)[:, :n_bins]
    # the positives of class k: sample i counts in the bin of p[i, y[i]] of class y[i]
    rows = np.arange(n)
    valid = (y >= 0) & (y < k)
    asum = np.bincount(idx.reshape(n, k)[rows[valid], y[valid]], minlength=size).reshape(k, w)[:, :n_bins]
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = csum / counts
        acc = asum / counts
    gap = np.where(counts > 0, counts * np.abs(acc - conf), 0.0)
    ece_k = gap.sum(axis=1) / n if n else np.full(k, NAN)
    return {"count": counts, "confidence": conf, "accuracy": acc, "ece": ece_k, "n": int(n)}


def classwise_ece(y: np.ndarray, proba: np.ndarray, n_bins: int = 15) -> float:
    """Mean over classes of the one-vs-rest fixed-bin ECE (NaN for K = 2 or no samples)."""
    p = np.asarray(proba)
    if p.ndim != 2 or p.shape[1] <= 2 or p.shape[0] == 0:
        return NAN
    return float(np.mean(classwise_bins(y, p, n_bins)["ece"]))


def ece_from_bins(entry: Mapping[str, Any], n: int) -> float:
    """One class's ECE recomputed from stored bins (``None`` = empty bin)."""
    if not n:
        return NAN
    total = 0.0
    for c, mc, ma in zip(entry["count"], entry["confidence"], entry["accuracy"]):
        if c:
            total += c * abs(ma - mc)
    return float(total / n)


def _side(stats: Mapping[str, np.ndarray], i: int) -> dict[str, Any]:
    counts = stats["count"][i].tolist()
    conf = stats["confidence"][i].tolist()
    acc = stats["accuracy"][i].tolist()
    return {"count": counts, "confidence": [v if c else None for c, v in zip(counts, conf)],
            "accuracy": [v if c else None for c, v in zip(counts, acc)], "ece": float(stats["ece"][i])}


def _worst(stats: Mapping[str, np.ndarray] | None, names: list[str]) -> dict[str, Any] | None:
    if stats is None or not np.isfinite(stats["ece"]).any():
        return None
    i = int(np.nanargmax(stats["ece"]))
    return {"index": i, "name": names[i], "ece": float(stats["ece"][i])}


def class_names(run_names: Iterable[str], k: int) -> list[str]:
    names = [str(s) for s in (run_names or ())]
    return names if len(names) == k else [f"class {i}" for i in range(k)]


def payload_for(run, raw: Mapping[str, np.ndarray], scaled: Mapping[str, np.ndarray] | None,
                temperature: float, columns: Mapping[str, float]) -> dict[str, Any]:
    k = int(raw["count"].shape[0])
    names = class_names(run.class_names, k)
    support = np.bincount(np.asarray(run.y_test, dtype=np.int64).reshape(-1), minlength=k)[:k]
    classes = [{"index": i, "name": names[i], "n": int(support[i]), "raw": _side(raw, i),
                "scaled": None if scaled is None else _side(scaled, i)} for i in range(k)]
    return {
        "format": FORMAT, "task": run.task, "adapter": run.adapter, "model": run.model,
        "fraction": float(run.fraction), "seed": int(run.seed), "run_id": getattr(run, "run_id", None) or None,
        "split_seed": getattr(run, "split_seed", None), "probe": (run.meta or {}).get("probe"),
        "kind": (run.meta or {}).get("kind"), "n_classes": k, "n": int(raw["n"]), "bins": int(raw["count"].shape[1]),
        "temperature": None if not math.isfinite(temperature) else float(temperature),
        "temperature_source": "source validation split" if (run.meta or {}).get("kind") == "transfer"
        else "validation split",
        "convention": "one-vs-rest per class: mean predicted p_k vs observed frequency of y = k",
        **{c: (None if not math.isfinite(v) else float(v)) for c, v in columns.items()},
        "worst": {"raw": _worst(raw, names), "scaled": _worst(scaled, names)},
        "classes": classes,
    }


# --------------------------------------------------------------------------- artifacts
def artifact_path(folder: Path, task: str, fraction: float, seed: int, run_id: str | None) -> Path:
    from prism_plugin.metrics.reliability import artifact_name

    return Path(folder) / DIRNAME / artifact_name(task, fraction, seed, run_id)


def write_artifact(folder: Path, payload: Mapping[str, Any]) -> Path:
    from prism_plugin.storage import atomic_write_text

    path = artifact_path(folder, payload["task"], payload["fraction"], payload["seed"], payload.get("run_id"))
    atomic_write_text(path, json.dumps(payload, separators=(",", ":")) + "\n")
    return path


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def load_classwise(results_dir: str | Path, runs=None) -> tuple[list[dict[str, Any]], int]:
    """The class-wise artifacts of ``results_dir`` (``artifacts/classwise/``) that belong to a row
    of its ``runs.csv`` (``runs``: a DataFrame, default read from the folder) and whose bins
    reproduce that row's ``ece_classwise`` to :data:`ECE_MATCH_TOL`. Returns ``(payloads, stale)``:
    each payload gains ``model``, ``setting`` (dataset or pair), ``reference_table`` and ``probe``
    from its row; ``stale`` counts the files left out (no matching row, or other numbers)."""
    from prism_plugin.metrics.reliability import row_names

    results_dir = Path(results_dir)
    folder = results_dir / "artifacts" / DIRNAME
    if not folder.is_dir():
        return [], 0
    if runs is None:
        p = results_dir / "runs.csv"
        if not p.exists():
            return [], 0
        from prism_plugin.results import read_runs

        runs = read_runs(p)
    index: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in runs.to_dict("records"):
        if "task" in r and "fraction" in r and "seed" in r:
            for name in row_names(r):
                index.setdefault((str(r.get("adapter", "")), name), r)
    out, stale = [], 0
    for path in sorted(folder.glob("*.json")):
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError):
            stale += 1
            continue
        row = index.get((str(payload.get("adapter", "")), path.name)) if isinstance(payload, dict) else None
        if row is None or payload.get("format") != FORMAT or not payload.get("classes"):
            stale += 1
            continue
        n = int(payload.get("n") or 0)
        mean = float(np.mean([ece_from_bins(c["raw"], n) for c in payload["classes"]]))
        ref = _finite(row.get("ece_classwise"))
        if ref is None or abs(mean - ref) > ECE_MATCH_TOL:
            stale += 1
            continue
        payload["model"] = row.get("model", payload.get("model"))
        payload["probe"] = row.get("probe") if isinstance(row.get("probe"), str) else payload.get("probe")
        payload["setting"] = row.get("pair") if isinstance(row.get("pair"), str) else row.get("dataset")
        payload["reference_table"] = row.get("reference_table", "indomain")
        out.append(payload)
    return out, stale


@hookimpl
def register_metrics(register) -> None:
    """Multiclass only: NaN for K = 2."""
    register("ece_classwise", direction="lower", display="class-wise ECE (mean over classes)", summary=False,
             description="mean over the K classes of the one-vs-rest fixed-bin ECE (p_k vs 1[y = k], ece_bins bins); "
                         "multiclass only: NaN for K = 2, where it repeats ece_fixed")
    register("ece_classwise_scaled", direction="lower", display="class-wise ECE after T", summary=False,
             description="ece_classwise after the fitted temperature (the one of ece_scaled_fixed)")
    register("ece_classwise_max", direction="lower", display="worst class's one-vs-rest ECE", summary=False,
             report=False, description="the largest per-class one-vs-rest ECE (raw); which class: "
                                       "artifacts/classwise/*.json")


# --------------------------------------------------------------------------- the hook
@hookimpl
def run_metrics(run):
    """Class-wise ECE of the raw and temperature-scaled test probabilities (NaN for K = 2)."""
    proba = np.asarray(run.proba_test)
    if int(run.n_classes) <= 2 or proba.ndim != 2 or proba.shape[1] <= 2 or proba.shape[0] == 0:
        return {c: NAN for c in COLUMNS}
    bins = int(run.ece_bins)
    raw = classwise_bins(run.y_test, proba, bins)
    t = run.temperature("val")
    scaled_p = run.scaled_proba(t)
    scaled = None if scaled_p is None else classwise_bins(run.y_test, scaled_p, bins)
    out = {"ece_classwise": float(np.mean(raw["ece"])),
           "ece_classwise_scaled": NAN if scaled is None else float(np.mean(scaled["ece"])),
           "ece_classwise_max": float(np.max(raw["ece"]))}
    if run.artifact_dir is not None:
        write_artifact(Path(run.artifact_dir), payload_for(run, raw, scaled, t, out))
    return out


__all__ = ["COLUMNS", "DIRNAME", "FEW_SAMPLES", "FORMAT", "artifact_path", "class_names", "classwise_bins",
           "classwise_ece", "ece_from_bins", "load_classwise", "run_metrics", "write_artifact"]
