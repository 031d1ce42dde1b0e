"""The public metric API of prism-plugin (PROTOCOL §3 conventions; see :mod:`.core`).

The built-in metric plugins (:mod:`.discrimination`, :mod:`.calibration`,
:mod:`.collapse`) call these same functions.
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
from prism_plugin.protocol.temperature import fit_temperature


def apply_temperature(logits, temperature):
    """Probabilities after temperature scaling: ``softmax(logits / T)``."""
    return probabilities_from_logits(logits, temperature)


__all__ = [
    "auroc", "binary_logits", "brier", "confidence_and_correct", "degeneracy_share", "ece",
    "ece_bin_edges", "f1_binary", "f1_macro", "multiclass_brier", "neutral_temperature", "nll",
    "predictions", "probabilities_from_logits", "softmax", "fit_temperature", "apply_temperature",
    "DEGENERACY_THRESHOLD",
]
