"""OOD stability and the Composite Reliability Index on plain numbers (PROTOCOL §6.1-6.2).

Thin public wrappers: the one implementation lives in :mod:`prism_plugin.summaries.cri`, which the ``cri`` summary
plugin and ``prism-run compare`` use; these functions hand it the caller's numbers.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prism_plugin.errors import PrismError


def ood_stability_from_maps(id_auroc: Mapping[str, float], ood_auroc: Mapping[tuple[str, str], float]) -> float:
    """OOD stability of one model (PROTOCOL §6.1) from AUROC maps.

    ``id_auroc`` maps a source (dataset or hospital) to the model's
    in-distribution AUROC there; ``ood_auroc`` maps a ``(source, target)`` pair
    to the AUROC on the target of the probe trained on the source. Both are
    meant to be seed means at 100 % labels. The result is::

        mean over pairs (s, t) of min(ood_auroc[s, t] / id_auroc[s], 1)

    Pairs whose source is missing from ``id_auroc`` are left out (as in the tables); with no usable pair the
    stability is NaN. Pairs are averaged in the order given.
    """
    import pandas as pd

    from prism_plugin.summaries import cri

    if not isinstance(id_auroc, Mapping) or not isinstance(ood_auroc, Mapping):
        raise PrismError("ood_stability_from_maps: pass {source: auroc} and {(source, target): auroc} mappings")
    pairs = []
    for key, value in ood_auroc.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise PrismError(f"ood_stability_from_maps: ood_auroc key {key!r} is not a (source, target) pair")
        pairs.append((str(key[0]), str(key[1]), float(value)))
    if not pairs:
        return float("nan")
    model = "model"
    indomain = pd.DataFrame({"model": model, "dataset": [str(s) for s in id_auroc],
                             "fraction": cri.STABILITY_FRACTION,
                             "auroc": [float(v) for v in id_auroc.values()]})
    transfer = pd.DataFrame({"model": model, "src": [p[0] for p in pairs], "tgt": [p[1] for p in pairs],
                             "pair": [f"{p[0]}->{p[1]}" for p in pairs],
                             "fraction": cri.STABILITY_FRACTION, "auroc": [p[2] for p in pairs]})
    if indomain.empty:
        return float("nan")
    stab = cri.ood_stability(indomain, transfer)
    return float(stab.get(model, float("nan")))


def cri(auroc: Any, ece: Any, stability: Any, aggregation: str = "multiplicative") -> Any:
    """Composite Reliability Index (PROTOCOL §6.2) of AUROC ``a``, scaled ECE ``e`` and OOD stability ``s``.

    ``e`` is clipped to [0, 1] first. Aggregations: ``multiplicative`` a·(1−e)·s (the paper's), ``arithmetic`` (a +
    (1−e) + s)/3, ``geometric`` (a·(1−e)·s)^(1/3), ``worst_axis`` min(a, 1−e, s). Scalars or NumPy arrays; an
    unknown aggregation is a :class:`~prism_plugin.errors.PrismError` listing the known ones. In the protocol a and
    e are means over a model's datasets of seed means at one fraction (e after temperature scaling), and s is the
    100 % OOD stability.
    """
    from prism_plugin.summaries import cri as _cri

    out = _cri.cri(auroc, ece, stability, aggregation)
    if isinstance(out, np.ndarray) and out.ndim == 0:
        return float(out)
    if isinstance(out, (np.floating, float)):
        return float(out)
    return out


__all__ = ["cri", "ood_stability_from_maps"]
