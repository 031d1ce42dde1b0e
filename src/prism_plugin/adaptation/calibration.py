"""Calibration transfer for multiclass heads (the audit's Suppl. A.13), as pure functions.

Metrics (all on top-label confidence, for every K including K = 2, unlike the PRISM binary
``ece_fixed`` which is a class-1 reliability error):

* ``ece_top``      top-label ECE, 15 equal-width bins (``[lo, hi)`` bins of
  :func:`prism_plugin.metrics.core.ece_bin_edges`, the last one included),
* ``ece_adaptive`` top-label ECE, 15 equal-mass bins (the same quantile edges as PRISM's adaptive ECE),
* ``nll``          ``-mean log(p_y + 1e-12)``,
* ``brier``        multiclass Brier: mean squared distance to the one-hot label.

Arms of :func:`calibration_transfer` (the temperature is always fitted by the PRISM
bounded-Brent NLL fit, :func:`prism_plugin.protocol.temperature.fit_temperature`):

* ``raw``      no temperature,
* ``src``      T fitted on the held-out **source** split, applied to the target (deployable),
* ``oracle``   T fitted on the whole labelled target (upper bound, not deployable),
* ``k4`` ...   T fitted on K labelled target samples and evaluated on the remaining target
  samples; metrics and T are means over ``draws`` draws. The draws are exactly those of the
  transfer-temperature plugin (:func:`prism_plugin.metrics.temperature_transfer.stratified_draw`,
  class-stratified, ``default_rng([seed, K])``), so ``T`` here equals its
  ``temperature_fewshot_k<K>`` for the same run seed; this module adds the top-label, adaptive,
  NLL and Brier metrics on the held-out rest.
* ``cbr``      probabilities of the probe on CBR-adapted target features (no temperature),
* ``cbr_src``  CBR then the source T.

The oracle and few-shot temperatures themselves are reported by the transfer-temperature plugin
(``temperature_oracle``, ``temperature_fewshot_k<K>``); the adaptation plugin reports only the
metrics of each arm (``calx_<arm>_<metric>``), never the same temperature twice.
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
                         seed: int = 0, bounds: tuple[float, float] = T_BOUNDS, n_bins: int = 15
                         ) -> tuple[float, dict[str, float]]:
    """Mean T over draws and the mean metrics on the held-out rest (NaN when K >= N)."""
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
        rows.append(calibration_metrics(y[mask], scaled(logits[mask], t), n_bins))
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
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Metrics per arm (``raw``, ``src``, ``oracle``, ``k<K>``, ``cbr``, ``cbr_src``) and the temperatures."""
    y = np.asarray(y, dtype=np.int64)
    logits = np.asarray(logits, dtype=np.float64)
    nan_row = {m: float("nan") for m in METRICS}
    arms: dict[str, dict[str, float]] = {}
    temps: dict[str, float] = {}
    arms["raw"] = calibration_metrics(y, scaled(logits, neutral_temperature), n_bins)
    src_ok = np.isfinite(source_temperature)
    arms["src"] = calibration_metrics(y, scaled(logits, source_temperature), n_bins) if src_ok else dict(nan_row)
    t_oracle = fit_temperature(logits, y, bounds)
    temps["oracle"] = t_oracle
    arms["oracle"] = calibration_metrics(y, scaled(logits, t_oracle), n_bins)
    for k in ks:
        t_k, row = few_shot_temperature(logits, y, int(k), draws=draws, seed=seed, bounds=bounds, n_bins=n_bins)
        temps[f"k{k}"] = t_k
        arms[f"k{k}"] = row
    if cbr_logits is not None:
        arms["cbr"] = calibration_metrics(y, scaled(cbr_logits, neutral_temperature), n_bins)
        arms["cbr_src"] = (calibration_metrics(y, scaled(cbr_logits, source_temperature), n_bins)
                           if src_ok else dict(nan_row))
    return arms, temps


def flatten(arms: Mapping[str, Mapping[str, float]], temps: Mapping[str, float], prefix: str = "calx") -> dict:
    """``calx_<arm>_<metric>`` and ``calx_T_<arm>`` columns."""
    out = {f"{prefix}_{arm}_{m}": v for arm, row in arms.items() for m, v in row.items()}
    out.update({f"{prefix}_T_{arm}": v for arm, v in temps.items()})
    return out


__all__ = ["top_label_ece", "calibration_metrics", "few_shot_temperature", "calibration_transfer", "flatten",
           "ARMS", "FEW_SHOT_KS", "METRICS", "EPS_LOG"]
