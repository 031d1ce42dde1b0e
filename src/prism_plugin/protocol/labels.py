"""Label maps of transfer tasks: binarisation and class re-indexing (PROTOCOL §4.1)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prism_plugin.errors import PrismError


def check_label_map(spec: Any, where: str) -> dict[str, Any] | None:
    """Validate a label map: ``{positive: [ints]}`` (binarise) or ``{old: new}`` (re-index)."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or not spec:
        raise PrismError(f"{where}: must be {{positive: [labels]}} or a mapping old_label: new_label")
    if "positive" in spec:
        pos = spec["positive"]
        if set(spec) - {"positive"} or not isinstance(pos, list) or not pos or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pos
        ):
            raise PrismError(f"{where}: positive must be a non-empty list of integer labels, e.g. positive: [8]")
        return {"positive": sorted(set(pos))}
    out: dict[int, int] = {}
    for k, v in spec.items():
        try:
            ki = int(k)
        except (TypeError, ValueError):
            raise PrismError(f"{where}: key {k!r} is not an integer label") from None
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise PrismError(f"{where}: label {k} maps to {v!r}; targets must be integers >= 0")
        out[ki] = v
    return {"map": out}


def apply_label_map(y: np.ndarray, spec: Mapping[str, Any] | None, where: str) -> np.ndarray:
    """Map integer labels; labels absent from a re-index map are an error naming them."""
    y = np.asarray(y, dtype=np.int64)
    if spec is None:
        return y
    if "positive" in spec:
        return np.isin(y, np.asarray(spec["positive"], dtype=np.int64)).astype(np.int64)
    mapping = spec["map"]
    missing = sorted(set(np.unique(y).tolist()) - set(mapping))
    if missing:
        raise PrismError(f"{where}: labels {missing} have no entry in the label map {mapping}")
    lut = np.full(max(max(mapping), int(y.max(initial=0))) + 1, -1, dtype=np.int64)
    for k, v in mapping.items():
        lut[k] = v
    return lut[y]
