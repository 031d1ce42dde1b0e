"""The public metric API of prism-plugin (PROTOCOL §3 conventions; see :mod:`.core`).

The built-in metric plugins (:mod:`.discrimination`, :mod:`.calibration`, :mod:`.collapse`) and the CRI summary
plugin call these same functions: one implementation. Conventions, exactly:

* ``proba`` is ``(N, K)``; for K = 2 column 1 is p(class 1). :func:`auroc` is the binary AUROC of p(class 1), macro
  one-vs-rest for K > 2 (NaN when only one class is present). :func:`brier` is the binary Brier score of p(class 1)
  (NaN for K > 2; :func:`multiclass_brier` is the one-hot version).
* :func:`ece` for K = 2 is a **class-1** reliability error (confidence = p(class 1), "correct" = 1[y = 1]), not a
  top-label ECE; for K > 2 it is the top-label ECE. ``scheme="fixed"``: 15 bins ``linspace(0, 1, 16)``, each
  half-open **[lo, hi)**, so a confidence of exactly 1.0 falls in no bin but still counts in N;
  ``scheme="adaptive"``: equal-mass quantile edges (:func:`ece_bin_edges`).
* :func:`nll` is ``-mean log(p_y + 1e-12)``; :func:`degeneracy_share` the share of predictions in the most
  predicted class (> 0.99 = a collapsed probe).
* Temperatures: :func:`fit_temperature` minimises the NLL of ``softmax(logits / T)`` over T in [0.1, 10] (bounded
  Brent) on a held-out split, never the evaluation split; :func:`apply_temperature` applies it. **Binary scale:** a
  binary probe's decision value d becomes the logits ``[-d, d]`` (:func:`binary_logits`, the reference convention),
  so ``softmax([-d, d] / T)[:, 1] = sigmoid(2d / T)``: T = 2 leaves probabilities unchanged
  (:func:`neutral_temperature`), T > 2 softens, and the search box is [0.05, 5] on the natural sigmoid scale.
  ``binary_logits(d, "natural")`` (``[0, d]``) puts the identity at T = 1.
* :func:`ood_stability_from_maps` and :func:`cri` are PROTOCOL §6.1-6.2 on plain numbers (see :mod:`.composite`).
"""

from prism_plugin.metrics.core import (
    auroc,
    binary_logits,
    brier,
    confidence_and_correct,
    degeneracy_share,
    ece,
    ece_bin_edges,
    f1_binary,
    f1_macro,
    multiclass_brier,
    neutral_temperature,
    nll,
    predictions,
    probabilities_from_logits,
    softmax,
)
from prism_plugin.metrics.collapse import DEGENERACY_THRESHOLD
from prism_plugin.metrics.composite import cri, ood_stability_from_maps
from prism_plugin.protocol.temperature import fit_temperature


def apply_temperature(logits, temperature):
    """Probabilities after temperature scaling: ``softmax(logits / T)`` for an ``(N, K)`` logit matrix.

    Binary problems: pass ``binary_logits(d)`` (``[-d, d]``), on which T = 2 is the identity; a T fitted by
    :func:`fit_temperature` on the same convention applies directly.
    """
    return probabilities_from_logits(logits, temperature)


__all__ = [
    "auroc", "binary_logits", "brier", "confidence_and_correct", "degeneracy_share", "ece",
    "ece_bin_edges", "f1_binary", "f1_macro", "multiclass_brier", "neutral_temperature", "nll",
    "predictions", "probabilities_from_logits", "softmax", "fit_temperature", "apply_temperature",
    "DEGENERACY_THRESHOLD", "cri", "ood_stability_from_maps",
]
