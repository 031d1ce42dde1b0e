"""Validation of the task keys ``adaptation`` and ``priors`` (called by the task-key validators).

``adaptation`` lists names of the adaptation registry (``prism-run ls adaptation``). Absent: transfer
runs get every entry registered with ``default=True`` (not the diagnostics), in-distribution runs
nothing; ``adaptation: []`` switches the plugin off. ``priors`` adds the class-prior stress test
(``names``, ``custom``, ``batch_sizes``, ``draws``, ``seed``; both keys: docs/hematology.md).

Only light imports at module level: the task schema imports this module.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from prism_plugin.errors import suggest

#: Built-in prior names. ``dominant:<class>:<share>`` is accepted as well (see priors.py).
BUILTIN_PRIORS = ("balanced", "natural", "mild", "clinical", "neutrophil_heavy")
PRIOR_KEYS = {"names", "custom", "batch_sizes", "draws", "seed"}
DEFAULT_PRIORS = {"names": ["balanced", "mild", "clinical", "neutrophil_heavy"], "custom": {},
                  "batch_sizes": [400], "draws": 10, "seed": 0}

Fail = Callable[[str, str], Exception]


def names(role: str | None = None, host=None) -> tuple[str, ...]:
    """Registered adaptation names (of one ``role``), in registration order."""
    from prism_plugin.plugins import host_or_shared  # not at module level: the task schema imports this module

    entries = host_or_shared(host).adaptation.entries()
    return tuple(e.name for e in entries if role is None or e.meta.get("role") == role)


def default_names(host=None) -> tuple[str, ...]:
    """What a transfer run computes without an ``adaptation:`` key: every ``default=True`` entry."""
    from prism_plugin.plugins import host_or_shared

    return tuple(e.name for e in host_or_shared(host).adaptation.entries() if e.meta.get("default", True))


def check_adaptation(value: Any, fail: Fail, host=None) -> tuple[str, ...]:
    """A list of registered adaptation names (any role; aliases resolved, duplicates removed, order kept)."""
    if value is None:
        return ()
    from prism_plugin.plugins import host_or_shared

    reg = host_or_shared(host).adaptation
    known = reg.names()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise fail("adaptation", f"must be a list of names from {', '.join(known)}, got {value!r}")
    out: list[str] = []
    for v in value:
        name = v.strip()
        if name not in reg:
            name = name.replace("-", "_")
        if name not in reg:
            raise fail("adaptation", f"unknown entry {v!r}{suggest(name, reg.names(with_aliases=True))} "
                                     f"(available: {', '.join(known)}; see `prism-run ls adaptation`)")
        name = reg.resolve(name)
        if name not in out:
            out.append(name)
    return tuple(out)


def normalise_prior_name(name: str) -> str:
    return name.strip().replace("-", "_")


def check_prior_weights(value: Any, fail: Fail, key: str) -> dict[str, float] | list[float]:
    if isinstance(value, dict):
        items = list(value.items())
        if not items:
            raise fail(key, "is empty; give {class_name: weight, ...}")
        out: dict[str, float] = {}
        for cls, w in items:
            if not isinstance(cls, str) or not cls:
                raise fail(key, f"class names must be strings, got {cls!r}")
            out[cls] = _weight(w, fail, f"{key}.{cls}")
        if sum(out.values()) <= 0:
            raise fail(key, "weights sum to 0")
        return out
    if isinstance(value, list) and value:
        ws = [_weight(w, fail, key) for w in value]
        if sum(ws) <= 0:
            raise fail(key, "weights sum to 0")
        return ws
    raise fail(key, f"must map class names to weights (or list one weight per class), got {value!r}")


def _weight(w: Any, fail: Fail, key: str) -> float:
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
        raise fail(key, f"weights must be finite numbers >= 0, got {w!r}")
    return float(w)


def check_priors(value: Any, fail: Fail, class_names: Any = None, n_classes: int | None = None) -> dict[str, Any]:
    """The validated ``priors`` mapping with defaults filled in.

    With the task's ``class_names`` / ``n_classes`` every prior is also resolved once, so a WBC
    prior on a task without the five WBC classes (or a weight list of the wrong length) fails at
    validation, not in the middle of a run.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail("priors", "must be a mapping {names, custom, batch_sizes, draws, seed}")
    for key in value:
        if key not in PRIOR_KEYS:
            raise fail(f"priors.{key}", f"unknown key{suggest(str(key), PRIOR_KEYS)} "
                                        f"(allowed: {', '.join(sorted(PRIOR_KEYS))})")
    custom_raw = value.get("custom", {}) or {}
    if not isinstance(custom_raw, dict):
        raise fail("priors.custom", "must map prior names to {class_name: weight}")
    custom: dict[str, Any] = {}
    for name, weights in custom_raw.items():
        if not isinstance(name, str) or not name or "__" in name or ":" in name:
            raise fail("priors.custom", f"prior name {name!r} must be a non-empty string without '__' or ':'")
        n = normalise_prior_name(name)
        if n in BUILTIN_PRIORS:
            raise fail(f"priors.custom.{name}", "shadows a built-in prior; choose another name")
        custom[n] = check_prior_weights(weights, fail, f"priors.custom.{name}")
    names_raw = value.get("names", None)
    if names_raw is None:
        names = list(DEFAULT_PRIORS["names"]) if not custom else []
    else:
        if not isinstance(names_raw, list) or not all(isinstance(v, str) and v for v in names_raw):
            raise fail("priors.names", f"must be a list of prior names, got {names_raw!r}")
        names = [normalise_prior_name(v) for v in names_raw]
    for n in names:
        if n in BUILTIN_PRIORS or n in custom or n.startswith("dominant:"):
            if n.startswith("dominant:"):
                _check_dominant(n, fail)
            continue
        known = list(BUILTIN_PRIORS) + list(custom)
        raise fail("priors.names", f"unknown prior {n!r}{suggest(n, known)}; built in: {', '.join(BUILTIN_PRIORS)}, "
                                   "dominant:<class>:<share>, or define it under priors.custom")
    for n in custom:  # every custom prior is evaluated
        if n not in names:
            names.append(n)
    if len(set(names)) != len(names):
        raise fail("priors.names", "contains duplicates")
    ks_raw = value.get("batch_sizes", DEFAULT_PRIORS["batch_sizes"])
    if not isinstance(ks_raw, list) or not ks_raw or not all(
        isinstance(k, int) and not isinstance(k, bool) and 2 <= k <= 1_000_000 for k in ks_raw
    ):
        raise fail("priors.batch_sizes", f"must be a non-empty list of integers >= 2 (the audit uses 8..400), got {ks_raw!r}")
    draws = value.get("draws", DEFAULT_PRIORS["draws"])
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= 100_000:
        raise fail("priors.draws", f"must be an integer between 1 and 100000, got {draws!r}")
    seed = value.get("seed", DEFAULT_PRIORS["seed"])
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise fail("priors.seed", f"must be a non-negative integer, got {seed!r}")
    out = {"names": names, "custom": custom, "batch_sizes": sorted(set(ks_raw)), "draws": draws, "seed": seed}
    if n_classes:
        _check_resolvable(out, fail, tuple(class_names or ()) if isinstance(class_names, list) else (), int(n_classes))
    return out


def _check_resolvable(cfg: dict, fail: Fail, class_names: tuple, n_classes: int) -> None:
    import numpy as np

    from prism_plugin.adaptation.priors import prior_vector
    from prism_plugin.errors import PrismError

    for name in cfg["names"]:
        try:
            prior_vector(name, n_classes, class_names, custom=cfg["custom"], target_labels=np.arange(n_classes))
        except PrismError as exc:
            key = f"priors.custom.{name}" if name in cfg["custom"] else "priors.names"
            msg = str(exc)
            raise fail(key, msg[len(key) + 2:] if msg.startswith(key + ": ") else msg) from None


def _check_dominant(name: str, fail: Fail) -> None:
    parts = name.split(":")
    try:
        ok = len(parts) == 3 and parts[1] != "" and 0.0 < float(parts[2]) < 1.0
    except ValueError:
        ok = False
    if not ok:
        raise fail("priors.names", f"{name!r}: write dominant:<class name or index>:<share in (0, 1)>, "
                                   "e.g. dominant:neutrophil:0.8")
