"""The grid's settings, one validator each: the task schema and :func:`prism_plugin.evaluate` share them.

Each takes ``fail(message) -> Exception`` (the schema's names the file, line and key; the API's the
argument), so a setting is checked, and its problems worded, in one place.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import numpy as np

from prism_plugin.errors import PrismError

MAX_SEED = 2**32 - 1
Fail = Callable[[str], Exception]


def _argument(where: str) -> Fail:
    return lambda message: PrismError(f"{where}: {message}")


def check_fractions(value: Any, fail: Fail = _argument("label_fractions")) -> tuple[float, ...]:
    """Label fractions: a non-empty list of distinct numbers in (0, 1]."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable) or not list(value):
        raise fail(f"must be a non-empty list of numbers in (0, 1], e.g. [0.01, 0.1, 1.0]; got {value!r}")
    out = []
    for f in value:
        if isinstance(f, (bool, np.bool_)) or not isinstance(f, (int, float, np.integer, np.floating)) \
                or not math.isfinite(f):
            raise fail(f"{f!r} is not a finite number; use values in (0, 1]")
        if not 0.0 < f <= 1.0:
            raise fail(f"fraction {f} is outside (0, 1]; use e.g. 0.01 for 1 %")
        out.append(float(f))
    if len({f"{f:g}" for f in out}) != len(out):  # run ids / cell files use 6 digits
        raise fail(f"contains duplicates (values equal to 6 significant digits): {out}")
    return tuple(out)


def check_seeds(value: Any, fail: Fail = _argument("seeds")) -> tuple[int, ...]:
    """Seeds: a non-empty list of distinct integers 0..2**32-1."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable) or not list(value):
        raise fail(f"must be a non-empty list of integers, e.g. [42, 123, 456]; got {value!r}")
    out = []
    for s in value:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
            raise fail(f"{s!r} is not an integer seed; use integers 0..{MAX_SEED}")
        if not 0 <= int(s) <= MAX_SEED:
            raise fail(f"must be between 0 and {MAX_SEED} (NumPy's legacy seed range), got {s}")
        out.append(int(s))
    if len(set(out)) != len(out):
        raise fail(f"contains duplicates: {out}")
    return tuple(out)


def check_probe(probe: Any, where: str = "probe", host=None) -> dict[str, Any]:
    """A ``probe`` mapping resolved against its head's declared settings (the task schema's rules)."""
    from prism_plugin.heads.base import resolve_probe
    from prism_plugin.plugins import host_or_shared

    return resolve_probe(probe, host_or_shared(host).registry("heads"),
                         lambda key, message: PrismError(f"{key}: {message}"), where)


def check_grid_settings(*, seeds: Any, C: Any, max_iter: Any, ece_bins: Any, proportional_val: Any,
                        probe: Any = None, host=None) -> dict[str, Any]:
    """Validate :func:`prism_plugin.api.evaluate`'s keyword arguments; return them normalised."""
    out: dict[str, Any] = {"seeds": check_seeds(seeds)}
    if probe is None:
        out["probe"] = check_probe({"C": C, "max_iter": max_iter}, "C/max_iter", host)
    else:
        out["probe"] = check_probe(probe, "probe", host)
    if isinstance(ece_bins, (bool, np.bool_)) or not isinstance(ece_bins, (int, np.integer)) \
            or not 1 <= ece_bins <= 10_000:
        raise PrismError(f"ece_bins: must be an integer between 1 and 10000, got {ece_bins!r}")
    out["ece_bins"] = int(ece_bins)
    if not isinstance(proportional_val, (bool, np.bool_)):
        raise PrismError(f"proportional_val: must be True or False, got {proportional_val!r}")
    out["proportional_val"] = bool(proportional_val)
    return out


__all__ = ["MAX_SEED", "check_fractions", "check_grid_settings", "check_probe", "check_seeds"]
