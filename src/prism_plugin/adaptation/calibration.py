"""Calibration transfer for multiclass heads (the audit's Suppl. A.13), as pure functions.

Metrics (all on top-label confidence, for every K including K = 2, unlike the PRISM binary ``ece_fixed`` which is a
class-1 reliability error):

* ``ece_top``      top-label ECE, 15 equal-width bins (``[lo, hi)`` bins of
  :func:`prism_plugin.metrics.core.ece_bin_edges`, the last one included),
* ``ece_adaptive`` top-label ECE, 15 equal-mass bins (the same quantile edges as PRISM's adaptive ECE),
* ``nll``          ``-mean log(p_y + 1e-12)``,
* ``brier``        multiclass Brier: mean squared distance to the one-hot label.

Arms of :func:`calibration_transfer` (the temperature is always fitted by the PRISM bounded-Brent NLL fit,
:func:`prism_plugin.protocol.temperature.fit_temperature`):

* ``raw``      no temperature,
* ``src``      T fitted on the held-out **source** split, applied to the target (deployable),
* ``oracle``   T fitted on the whole labelled target (upper bound, not deployable),
* ``k4`` ...   T fitted on K labelled target samples and evaluated on the remaining target samples; metrics and T
  are means over ``draws`` draws. The draws are exactly those of the transfer-temperature plugin
  (:func:`prism_plugin.metrics.temperature_transfer.stratified_draw`, class-stratified, ``default_rng([seed,
  K])``), so ``T`` here equals its ``temperature_fewshot_k<K>`` for the same run seed; this module adds the
  top-label, adaptive, NLL and Brier metrics on the held-out rest.
* ``cbr``      probabilities of the probe on CBR-adapted target features (no temperature),
* ``cbr_src``  CBR then the source T.

Reliability diagrams: with ``reliability={}``, :func:`calibration_transfer` also fills, per arm, the top-label bin
sums of :func:`reliability_sums` (15 equal-width bins; rows ``count``, ``sum of confidence``, ``sum of correct``;
the K-shot arms summed over their draws), which the adaptation plugin saves in its per-run artifact and ``prism-run
audit`` pools over runs exactly (sums add).

The oracle and few-shot temperatures themselves are reported by the transfer-temperature plugin
(``temperature_oracle``, ``temperature_fewshot_k<K>``); the adaptation plugin reports only the metrics of each arm
(``calx_<arm>_<metric>``), never the same temperature twice.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from prism_plugin.metrics.core import EPS_LOG, ece_bin_edges, multiclass_brier, nll, softmax
from prism_plugin.metrics.temperature_transfer import FEWSHOT_REPEATS, stratified_draw
from prism_plugin.protocol.temperature import T_BOUNDS, fit_temperature

FEW_SHOT_KS = (4, 8, 16, 32)
FEW_SHOT_DRAWS = FEWSHOT_REPEATS
METRICS = ("ece_top", "ece_adaptive", "nll", "brier")
#: the arms of :func:`calibration_transfer`, in the order it returns them (``calx_<arm>_<metric>``)
ARMS = ("raw", "src", "oracle", *(f"k{k}" for k in FEW_SHOT_KS), "cbr", "cbr_src")
#: equal-width top-label bins of the reliability sums (the audit's 15)
RELIABILITY_BINS = 15


def top_label_ece(y: np.ndarray, proba: np.ndarray, n_bins: int = 15, scheme: str = "fixed") -> float:
    """Top-label ECE: confidence = max_k p_k, correct = 1[arg-max = y], PRISM bin conventions."""
    proba = np.asarray(proba, dtype=np.float64)
    conf = proba.max(axis=1)
    correct = (proba.argmax(axis=1) == np.asarray(y)).astype(np.float64)
    n = conf.shape[0]
    if n == 0:
        return float("nan")
    edges = ece_bin_edges(conf, n_bins, scheme)
    idx = np.searchsorted(edges, conf, side="right") - 1  # bin b holds edges[b] <= conf < edges[b+1]
    ok = (idx >= 0) & (idx < len(edges) - 1)
    idx, conf, correct = idx[ok], conf[ok], correct[ok]
    s_conf = np.bincount(idx, weights=conf, minlength=len(edges) - 1)
    s_corr = np.bincount(idx, weights=correct, minlength=len(edges) - 1)
    return float(np.abs(s_corr - s_conf).sum() / n)


def reliability_sums(y: np.ndarray, proba: np.ndarray, n_bins: int = RELIABILITY_BINS) -> np.ndarray:
    """Top-label reliability bin sums, ``(3, n_bins)``: per equal-width bin ``[lo, hi)`` the number of samples, the
    sum of their confidences (max_k p_k) and the number predicted correctly.

    The last bin is closed (a confidence of exactly 1.0 counts in it; the ECE's bins leave it out), so every sample
    is in one bin. Sums over runs pool exactly: confidence = row 1 / row 0, accuracy = row 2 / row 0.
    """
    proba = np.asarray(proba, dtype=np.float64)
    out = np.zeros((3, n_bins), dtype=np.float64)
    if proba.shape[0] == 0:
        return out
    conf = proba.max(axis=1)
    correct = (proba.argmax(axis=1) == np.asarray(y)).astype(np.float64)
    edges = ece_bin_edges(conf, n_bins, "fixed")  # the ECE's bins (searchsorted as top_label_ece)
    idx = np.clip(np.searchsorted(edges, conf, side="right") - 1, 0, n_bins - 1)
    out[0] = np.bincount(idx, minlength=n_bins)
    out[1] = np.bincount(idx, weights=conf, minlength=n_bins)
    out[2] = np.bincount(idx, weights=correct, minlength=n_bins)
    return out


def calibration_metrics(y: np.ndarray, proba: np.ndarray, n_bins: int = 15) -> dict[str, float]:
    return {
        "ece_top": top_label_ece(y, proba, n_bins, "fixed"),
        "ece_adaptive": top_label_ece(y, proba, n_bins, "adaptive"),
        "nll": nll(y, proba),
        "brier": multiclass_brier(y, proba),
    }


def scaled(logits: np.ndarray, temperature: float) -> np.ndarray:
    return softmax(np.asarray(logits, dtype=np.float64) / float(temperature))


def few_shot_draws(y: np.ndarray, k: int, draws: int, seed: int) -> list[np.ndarray]:
    """The transfer-temperature plugin's class-stratified draws of size k; empty when k >= N."""
    y = np.asarray(y, dtype=np.int64)
    if k >= len(y) or k < 1:
        return []
    rng = np.random.default_rng([int(seed), int(k)])
    return [stratified_draw(y, int(k), rng) for _ in range(int(draws))]


def few_shot_temperature(logits: np.ndarray, y: np.ndarray, k: int, *, draws: int = FEW_SHOT_DRAWS,
                         seed: int = 0, bounds: tuple[float, float] = T_BOUNDS, n_bins: int = 15,
                         reliability: np.ndarray | None = None) -> tuple[float, dict[str, float]]:
    """Mean T over draws and the mean metrics on the held-out rest (NaN when K >= N).

    ``reliability``: a ``(3, bins)`` array the held-out rests' :func:`reliability_sums` are added to.
    """
    logits = np.asarray(logits, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    sets = few_shot_draws(y, k, draws, seed)
    if not sets:
        return float("nan"), {m: float("nan") for m in METRICS}
    ts, rows = [], []
    mask = np.ones(len(y), dtype=bool)
    for idx in sets:
        t = fit_temperature(logits[idx], y[idx], bounds)
        mask[:] = True
        mask[idx] = False
        ts.append(t)
        p = scaled(logits[mask], t)
        rows.append(calibration_metrics(y[mask], p, n_bins))
        if reliability is not None:
            reliability += reliability_sums(y[mask], p, reliability.shape[1])
    return float(np.mean(ts)), {m: float(np.mean([r[m] for r in rows])) for m in METRICS}


def calibration_transfer(
    logits: np.ndarray,
    y: np.ndarray,
    *,
    source_temperature: float,
    neutral_temperature: float = 1.0,
    cbr_logits: np.ndarray | None = None,
    ks: Sequence[int] = FEW_SHOT_KS,
    draws: int = FEW_SHOT_DRAWS,
    seed: int = 0,
    bounds: tuple[float, float] = T_BOUNDS,
    n_bins: int = 15,
    reliability: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Metrics per arm (``raw``, ``src``, ``oracle``, ``k<K>``, ``cbr``, ``cbr_src``) and the temperatures.

    ``reliability``: a dict filled with each computed arm's :func:`reliability_sums` (arms that are
    NaN, e.g. ``src`` without a source temperature or ``k<K>`` with K >= N, are left out).
    """
    y = np.asarray(y, dtype=np.int64)
    logits = np.asarray(logits, dtype=np.float64)
    nan_row = {m: float("nan") for m in METRICS}
    arms: dict[str, dict[str, float]] = {}
    temps: dict[str, float] = {}

    def arm(name: str, lg: np.ndarray, t: float) -> None:
        p = scaled(lg, t)
        arms[name] = calibration_metrics(y, p, n_bins)
        if reliability is not None:
            reliability[name] = reliability_sums(y, p)

    arm("raw", logits, neutral_temperature)
    src_ok = np.isfinite(source_temperature)
    if src_ok:
        arm("src", logits, source_temperature)
    else:
        arms["src"] = dict(nan_row)
    t_oracle = fit_temperature(logits, y, bounds)
    temps["oracle"] = t_oracle
    arm("oracle", logits, t_oracle)
    for k in ks:
        sums = np.zeros((3, RELIABILITY_BINS)) if reliability is not None else None
        t_k, row = few_shot_temperature(logits, y, int(k), draws=draws, seed=seed, bounds=bounds, n_bins=n_bins,
                                        reliability=sums)
        temps[f"k{k}"] = t_k
        arms[f"k{k}"] = row
        if sums is not None and sums[0].sum() > 0:
            reliability[f"k{k}"] = sums
    if cbr_logits is not None:
        arm("cbr", cbr_logits, neutral_temperature)
        if src_ok:
            arm("cbr_src", cbr_logits, source_temperature)
        else:
            arms["cbr_src"] = dict(nan_row)
    return arms, temps


def flatten(arms: Mapping[str, Mapping[str, float]], temps: Mapping[str, float], prefix: str = "calx") -> dict:
    """``calx_<arm>_<metric>`` and ``calx_T_<arm>`` columns."""
    out = {f"{prefix}_{arm}_{m}": v for arm, row in arms.items() for m, v in row.items()}
    out.update({f"{prefix}_T_{arm}": v for arm, v in temps.items()})
    return out


__all__ = ["top_label_ece", "reliability_sums", "calibration_metrics", "few_shot_temperature", "calibration_transfer", "flatten",
           "ARMS", "FEW_SHOT_KS", "METRICS", "RELIABILITY_BINS", "EPS_LOG"]
