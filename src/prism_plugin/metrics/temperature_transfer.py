"""Built-in metric plugin: target-side temperatures of transfer runs (PROTOCOL §4-5).

Acts on transfer runs only (``run.meta["kind"] == "transfer"``); for any other run it returns nothing. The
source-fitted temperature (``temperature_src``, ``ece_scaled_fixed``) and its proportional-val variant come from
the calibration plugin; this plugin adds what needs **target** labels:

* ``temperature_oracle`` / ``ece_scaled_oracle``: T fitted on the whole target evaluation split and the fixed-bin
  ECE after it, on the same split. This is an **oracle**: it uses every target label, so it is an upper bound on
  what temperature scaling can do on the target, never a deployable number.
* A **few-shot target temperature** (the per-site recalibration of the hematology acquisition-shift audit): for
  each K (default 4, 8, 16, 32, 64), R draws (default 20) of K labelled target samples, stratified over the target
  classes; T is fitted on those K and the fixed-bin ECE of ``softmax(L / T)`` is measured on the remaining target
  samples. Columns ``temperature_fewshot_k{K}`` / ``ece_scaled_fewshot_k{K}`` are the means over the draws,
  ``..._std`` their standard deviation (ddof = 1); ``fewshot_draws`` is R. The draws are seeded from the run seed
  and K only, so every label fraction of a seed sees the same target samples (paired comparison). A K with no
  target sample left to measure on (K >= target size) gives NaN and one warning naming K and the target size.

Temperatures are fitted with :func:`prism_plugin.protocol.temperature.fit_temperature` (the protocol's bounded
Brent on the NLL, same bounds as the run) and ECE with :func:`prism_plugin.metrics.core.ece`, so these columns are
comparable with ``temperature_src`` / ``ece_scaled_fixed``.

Other K or R: register your own instance, e.g. ``TemperatureTransfer(ks=(8, 128), repeats=50)``, and disable this
one (``--disable temperature_transfer``).
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Mapping

import numpy as np

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.core import ece, probabilities_from_logits
from prism_plugin.protocol.temperature import fit_temperature

NAN = float("nan")
FEWSHOT_KS: tuple[int, ...] = (4, 8, 16, 32, 64)
FEWSHOT_REPEATS = 20


def stratified_quota(class_counts: Iterable[int], k: int) -> np.ndarray:
    """How many of ``k`` draws each class gets, proportional to its count.

    When ``k`` is at least the number of non-empty classes, every non-empty class first gets one; the rest is
    shared in proportion to what each class has left, by largest remainder (ties: larger class, then lower label).
    No class gets more than it has. ``k`` must be in ``[1, N - 1]``.
    """
    counts = np.asarray(list(class_counts), dtype=np.int64)
    total = int(counts.sum())
    if not 0 < k < total:
        raise ValueError(f"k = {k} must be in [1, {total - 1}]")
    present = counts > 0
    quota = np.zeros_like(counts)
    if k >= int(present.sum()):
        quota[present] = 1
    remaining = k - int(quota.sum())
    if remaining > 0:
        capacity = counts - quota
        share = remaining * capacity / capacity.sum()
        base = np.floor(share).astype(np.int64)
        quota += base
        remaining -= int(base.sum())
        frac = share - base
        order = sorted(range(len(counts)), key=lambda c: (-frac[c], -counts[c], c))
        for c in order:
            if remaining == 0:
                break
            if quota[c] < counts[c]:
                quota[c] += 1
                remaining -= 1
    return quota


def stratified_draw(labels: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted positions of ``k`` samples drawn without replacement, stratified by label."""
    labels = np.asarray(labels)
    classes, inverse = np.unique(labels, return_inverse=True)
    counts = np.bincount(inverse, minlength=len(classes))
    quota = stratified_quota(counts, k)
    picks = [rng.choice(np.flatnonzero(inverse == c), int(q), replace=False)
             for c, q in enumerate(quota) if q > 0]
    return np.sort(np.concatenate(picks))


def fewshot_temperature(
    logits: np.ndarray,
    labels: np.ndarray,
    k: int,
    *,
    repeats: int,
    seed: int,
    bounds: tuple[float, float],
    n_bins: int = 15,
) -> dict[str, Any]:
    """T fitted on ``k`` stratified labelled samples, ECE on the rest, over ``repeats`` draws.

    Returns ``{"temperatures": array, "eces": array}`` (one entry per draw). Draws come from
    ``numpy.random.default_rng([seed, k])``.
    """
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    rng = np.random.default_rng([int(seed), int(k)])
    temps = np.empty(repeats)
    eces = np.empty(repeats)
    rest_mask = np.ones(len(labels), dtype=bool)
    for r in range(repeats):
        idx = stratified_draw(labels, k, rng)
        t = fit_temperature(logits[idx], labels[idx], bounds)
        rest_mask[:] = True
        rest_mask[idx] = False
        temps[r] = t
        eces[r] = ece(labels[rest_mask], probabilities_from_logits(logits[rest_mask], t), n_bins, "fixed")
    return {"temperatures": temps, "eces": eces}


def _mean_std(values: np.ndarray) -> tuple[float, float]:
    mean = float(np.mean(values))
    std = float(np.std(values, ddof=1)) if len(values) > 1 else NAN
    return mean, std


class TemperatureTransfer:
    """The plugin object: oracle and few-shot target temperatures of transfer runs."""

    def __init__(self, ks: Iterable[int] = FEWSHOT_KS, repeats: int = FEWSHOT_REPEATS):
        ks = tuple(int(k) for k in ks)
        if not ks or any(k < 1 for k in ks) or len(set(ks)) != len(ks):
            raise ValueError(f"few-shot K values must be distinct positive integers, got {ks}")
        if int(repeats) < 1:
            raise ValueError(f"few-shot repeats must be >= 1, got {repeats}")
        self.ks = tuple(sorted(ks))
        self.repeats = int(repeats)
        self._warned: set[tuple] = set()

    @hookimpl
    def run_metrics(self, run) -> Mapping[str, Any] | None:
        if run.meta.get("kind") != "transfer":
            return None
        y, logits = run.y_test, run.logits_test
        bins, bounds = run.ece_bins, tuple(run.t_bounds)
        out: dict[str, Any] = {}
        t_oracle = fit_temperature(logits, y, bounds)
        out["temperature_oracle"] = t_oracle
        out["ece_scaled_oracle"] = ece(y, probabilities_from_logits(logits, t_oracle), bins, "fixed")
        n = len(y)
        too_large = [k for k in self.ks if k >= n]
        if too_large:
            key = (run.task, run.adapter, n, tuple(too_large))
            if key not in self._warned:
                self._warned.add(key)
                warnings.warn(
                    f"{run.task}: few-shot target temperature K={', '.join(map(str, too_large))} needs more than K "
                    f"target samples (the target split has {n}): its columns are NaN",
                    stacklevel=2,
                )
        out["fewshot_draws"] = self.repeats
        for k in self.ks:
            if k >= n:
                t_mean = t_std = e_mean = e_std = NAN
            else:
                res = fewshot_temperature(logits, y, k, repeats=self.repeats, seed=run.seed, bounds=bounds,
                                          n_bins=bins)
                t_mean, t_std = _mean_std(res["temperatures"])
                e_mean, e_std = _mean_std(res["eces"])
            out[f"temperature_fewshot_k{k}"] = t_mean
            out[f"temperature_fewshot_k{k}_std"] = t_std
            out[f"ece_scaled_fewshot_k{k}"] = e_mean
            out[f"ece_scaled_fewshot_k{k}_std"] = e_std
        return out


#: The instance the entry point registers (default K and R).
DEFAULT = TemperatureTransfer()


@hookimpl
def run_metrics(run) -> Mapping[str, Any] | None:
    """Oracle and few-shot target temperatures (transfer runs only); see the module docstring."""
    return DEFAULT.run_metrics(run)


__all__ = ["FEWSHOT_KS", "FEWSHOT_REPEATS", "TemperatureTransfer", "fewshot_temperature", "run_metrics",
           "stratified_draw", "stratified_quota"]
