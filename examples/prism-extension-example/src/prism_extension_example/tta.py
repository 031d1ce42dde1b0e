"""A test-time adaptation method: ``median_shift``.

Re-centre the unlabelled target batch on its per-feature **median** (robust to a few outlying
tiles) instead of its mean, keep the source scale, and evaluate the fitted head on the result::

    x' = mu_s + (x - median_t)

The task key ``example_median_quantile`` (``register_task_keys``; a number in (0, 1), default 0.5)
re-centres on another per-feature quantile instead: the method reads it from ``meta``.

It has the signature every adaptation method has (``register_adaptation``)::

    method(X, inputs, *, base_proba, y_true, cache, meta) -> Adapted

* ``X``: the target batch the head sees (``(N, D)`` float32, read-only);
* ``inputs``: :class:`prism_plugin.adaptation.tta.AdaptationInputs` - the fitted ``head``, the
  source ``Moments`` (``inputs.source.mean`` / ``.std``), ``n_classes``, source val predictions;
* ``base_proba``: the unadapted probabilities; ``y_true``: target labels (only an oracle may read
  them); ``cache``: a dict shared by the methods of one batch (to reuse work); ``meta``: the run's
  task keys, read-only (``run.meta``, a plugin's own keys among them).

prism-plugin turns the returned probabilities into the columns ``f1_macro_median_shift``,
``gain_median_shift``, ``ece_median_shift`` and ``nll_median_shift`` of ``runs.csv``.
"""

from __future__ import annotations

import numpy as np

from prism_plugin.adaptation.tta import Adapted, Moments, restandardise


def median_moments(X: np.ndarray, source: Moments, quantile: float = 0.5) -> Moments:
    """Target location = per-feature median (or ``quantile``); scale = the source's (only the centre moves)."""
    X = np.asarray(X, dtype=np.float64)
    if quantile == 0.5:
        return Moments(np.median(X, axis=0), np.asarray(source.std, dtype=np.float64), "batch median, source std")
    return Moments(np.quantile(X, quantile, axis=0), np.asarray(source.std, dtype=np.float64),
                   f"batch quantile {quantile:g}, source std")


def median_shift(X, inputs, *, base_proba=None, y_true=None, cache=None, meta=None) -> Adapted:
    """Re-centre the target batch on its per-feature median; the head is unchanged."""
    quantile = float((meta or {}).get("example_median_quantile", 0.5))  # plugin.QUANTILE_KEY
    moments = median_moments(X, inputs.source, quantile)
    shifted = restandardise(X, moments, inputs.source)
    out = inputs.head.evaluate(np.asarray(shifted, dtype=np.float32))
    return Adapted("median_shift", np.asarray(out.proba, dtype=np.float64), np.asarray(out.decision), moments.note)
