"""The deltas of ``prism-run diff`` with their CIs, and the verdicts (:mod:`prism_plugin.diffing` says how)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from prism_plugin.metrics.resampling import percentile_ci

PAIRED, NORMAL, WELCH, NONE = "paired bootstrap", "unpaired normal", "seed spread (Welch)", "none"


# --------------------------------------------------------------------------- CIs
def z_of(level: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + level / 2.0))


def _se(row: pd.Series, metric: str, level: float) -> float:
    lo, hi = row.get(f"{metric}_ci_low"), row.get(f"{metric}_ci_high")
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        return math.nan
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi < lo:
        return math.nan
    return (hi - lo) / (2.0 * z_of(level))


@dataclass
class Delta:
    a: float
    b: float
    delta: float
    low: float = math.nan
    high: float = math.nan
    method: str = NONE
    note: str = ""

    @property
    def has_ci(self) -> bool:
        return bool(np.isfinite(self.low) and np.isfinite(self.high))

    @property
    def beyond_noise(self) -> bool:
        return self.has_ci and (self.low > 0 or self.high < 0)


def finite(x: Any) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return x if np.isfinite(x) else math.nan


class Differ:
    """Deltas and CIs of the matched runs of two sides (``level``: the CI level of the deltas;
    ``col_level``: the level of the ``<m>_ci_low/high`` columns, for the normal fallback)."""

    def __init__(self, a: "Side", b: "Side", m: "Match", level: float, col_level: float, data_differs: set[str]):
        self.a, self.b, self.m = a, b, m
        self.level, self.col_level = level, col_level
        self.data_differs = data_differs  # tasks whose test data differ: never paired

    def _reps(self, ia: int, ib: int, metric: str) -> tuple[np.ndarray, np.ndarray] | None:
        ra, rb = self.a.runs.loc[ia], self.b.runs.loc[ib]
        if str(ra["task"]) in self.data_differs:
            return None
        pa, pb = self.a.replicates(ra), self.b.replicates(rb)
        if pa is None or pb is None or not pa.pairs_with(pb) or metric not in pa.metrics or metric not in pb.metrics:
            return None
        va, vb = pa.column(metric), pb.column(metric)
        if va.shape != vb.shape or not (np.isfinite(va).all() and np.isfinite(vb).all()):
            return None
        return va, vb

    def test_pairing(self, ia: int, ib: int) -> str:
        """Why a run pair is not paired ('' when it is, or when either side has no replicates)."""
        ra, rb = self.a.runs.loc[ia], self.b.runs.loc[ib]
        pa, pb = self.a.replicates(ra), self.b.replicates(rb)
        if pa is None or pb is None:
            return ""
        if pa.test_digest != pb.test_digest:
            return "test labels differ"
        if pa.n != pb.n or pa.seed != pb.seed:
            return f"bootstrap n/seed differ (A: {pa.n}/{pa.seed}, B: {pb.n}/{pb.seed})"
        return ""

    def run_delta(self, ia: int, ib: int, metric: str) -> Delta:
        ra, rb = self.a.runs.loc[ia], self.b.runs.loc[ib]
        va, vb = finite(ra.get(metric)), finite(rb.get(metric))
        d = Delta(va, vb, vb - va)
        if not np.isfinite(d.delta):
            d.note = "not defined on " + " and ".join(s for s, v in (("A", va), ("B", vb)) if not np.isfinite(v))
            return d
        reps = self._reps(ia, ib, metric)
        if reps is not None:
            d.low, d.high = percentile_ci(reps[1] - reps[0], self.level)
            d.method = PAIRED
            return d
        se_a, se_b = _se(ra, metric, self.col_level), _se(rb, metric, self.col_level)
        if np.isfinite(se_a) and np.isfinite(se_b):
            half = z_of(self.level) * math.hypot(se_a, se_b)
            d.low, d.high, d.method = d.delta - half, d.delta + half, NORMAL
        return d

    def cell_delta(self, pairs: list[tuple[int, int]], info) -> Delta:
        from prism_plugin.aggregation import AGGREGATORS

        metric, how = info.column, info.aggregation
        va = pd.Series([finite(self.a.runs.at[i, metric]) for i, _ in pairs], dtype=float)
        vb = pd.Series([finite(self.b.runs.at[j, metric]) for _, j in pairs], dtype=float)
        d = Delta(float(AGGREGATORS[how](va)), float(AGGREGATORS[how](vb)), math.nan)
        if va.isna().any() or vb.isna().any():
            bad = " and ".join(s for s, v in (("A", va), ("B", vb)) if v.isna().any())
            d.note = f"not defined in every seed on {bad}"
            if not (np.isfinite(d.a) and np.isfinite(d.b)):
                return d
        d.delta = d.b - d.a
        if not np.isfinite(d.delta):
            return d
        if how == "mean" and not d.note:
            reps = [self._reps(i, j, metric) for i, j in pairs]
            if all(r is not None for r in reps):
                ra = np.mean([r[0] for r in reps], axis=0)
                rb = np.mean([r[1] for r in reps], axis=0)
                d.low, d.high = percentile_ci(rb - ra, self.level)
                d.method = PAIRED
                return d
            se_a = [_se(self.a.runs.loc[i], metric, self.col_level) for i, _ in pairs]
            se_b = [_se(self.b.runs.loc[j], metric, self.col_level) for _, j in pairs]
            if np.isfinite(se_a).all() and np.isfinite(se_b).all():
                half = z_of(self.level) * math.hypot(float(np.mean(se_a)), float(np.mean(se_b)))
                d.low, d.high, d.method = d.delta - half, d.delta + half, NORMAL
                return d
        if len(pairs) >= 2 and not d.note:
            lo, hi = welch_ci(va.to_numpy(), vb.to_numpy(), self.level)
            if np.isfinite(lo):
                d.low, d.high, d.method = lo, hi, WELCH
            else:
                d.note = "the seeds agree exactly: their spread is no noise estimate"
        return d


def welch_ci(a: np.ndarray, b: np.ndarray, level: float) -> tuple[float, float]:
    """Welch t interval of mean(b) − mean(a); NaN when either side's spread is zero or undefined."""
    from scipy.stats import t as student

    na, nb = len(a), len(b)
    va, vb = np.var(a, ddof=1) / na, np.var(b, ddof=1) / nb
    se2 = va + vb
    if not np.isfinite(se2) or se2 <= 0 or va <= 0 or vb <= 0:
        return math.nan, math.nan
    df = se2 ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    half = float(student.ppf(0.5 + level / 2.0, df)) * math.sqrt(se2)
    delta = float(np.mean(b) - np.mean(a))
    return delta - half, delta + half


# --------------------------------------------------------------------------- verdicts
def verdict(d: Delta, direction: str | None) -> str:
    """``better`` / ``worse`` (beyond noise), ``within noise``, ``changed`` (beyond noise, no direction),
    ``no change``, or the point direction with ``(no CI)``; ``n/a`` when the delta is undefined."""
    if not np.isfinite(d.delta):
        return "n/a"
    if d.delta == 0 and (not d.has_ci or (d.low == 0 and d.high == 0)):
        return "no change"
    if d.has_ci:
        if not d.beyond_noise:
            return "within noise"
        if direction is None:
            return "changed"
        return "better" if (d.delta > 0) == (direction == "higher") else "worse"
    if direction is None:
        return "changed (no CI)"
    return ("better" if (d.delta > 0) == (direction == "higher") else "worse") + " (no CI)"


def worsening(delta: float, direction: str | None) -> float:
    """How much worse B is (positive = worse) for a metric with a direction."""
    return -delta if direction == "higher" else delta
