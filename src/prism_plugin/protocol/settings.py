"""The grid's settings, one validator each: the task schema and :func:`prism_plugin.evaluate` share them.

Each takes ``fail(message) -> Exception`` (the schema's names the file, line and key; the API's the
argument), so a setting is checked, and its problems worded, in one place.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from prism_plugin.errors import PrismError, positive_int_env

MAX_SEED = 2**32 - 1
#: The most runs one task (one ``evaluate()`` call) may ask for: label fractions x seeds x split seeds x
#: probes x sweep values. Every list of the grid is at most this long, too (refused by its length, before
#: its values are looked at). ``$PRISM_MAX_RUNS`` raises (or lowers) it.
MAX_RUNS = 1000
MAX_RUNS_ENV = "PRISM_MAX_RUNS"
Fail = Callable[[str], Exception]


def _argument(where: str) -> Fail:
    return lambda message: PrismError(f"{where}: {message}")


def max_runs() -> int:
    """The grid bound in force: ``$PRISM_MAX_RUNS`` when set, else :data:`MAX_RUNS`."""
    return positive_int_env(MAX_RUNS_ENV, MAX_RUNS, "must be a positive whole number of runs (the most one task "
                            f"may ask for; default {MAX_RUNS:,})")


def _beyond(total: int) -> str:
    return f"set {MAX_RUNS_ENV}={total} to allow it, or split the grid over several tasks"


def check_length(value: Any, fail: Fail, what: str = "values") -> list:
    """``value`` as a list, refused (``fail``) when longer than the grid bound -- before anything else is
    done with it (a list of 100,000 values is refused at once)."""
    limit = max_runs()
    try:
        if hasattr(value, "__len__") and len(value) > limit:  # before list(): a huge range is never copied
            n = len(value)
        else:
            out = list(value)
            if len(out) <= limit:
                return out
            n = len(out)
    except TypeError:  # a 0-d array: iterable by type, not by value
        raise fail(f"must be a list, got {_short(value)}") from None
    raise fail(f"{n:,} {what}; a task runs at most {limit:,} runs in all (label fractions x seeds x split seeds "
               f"x probes x sweep values; {_beyond(n)})")


_DIM_NAMES = {"label_fractions": "label fractions", "split_seeds": "split seeds", "sweep": "sweep values"}


def check_grid_size(dims: Mapping[str, int], fail: Callable[[str, str], Exception]) -> int:
    """The number of runs of a grid (``{"label_fractions": 6, "seeds": 3, ...}``), refused when above the
    grid bound; ``fail(key, message)`` names the largest dimension."""
    total = math.prod(int(n) for n in dims.values())
    limit = max_runs()
    if total > limit:
        key = max(dims, key=lambda k: dims[k])
        shown = " x ".join(f"{int(n):,} {_DIM_NAMES.get(k, k)}" for k, n in dims.items())
        raise fail(key, f"the grid is {shown} = {total:,} runs; at most {limit:,} runs per task ({_beyond(total)})")
    return total


def check_task_grid(settings: Mapping[str, Any], fail: Callable[[str, str], Exception]) -> int:
    """The size of a task's grid (label fractions x seeds x split seeds x probes x sweep values) from its
    validated settings (the task schema's), refused by :func:`check_grid_size` above the bound."""
    sweep = settings.get("sweep") or {}
    dims = {"label_fractions": len(settings.get("label_fractions") or ()), "seeds": len(settings.get("seeds") or ()),
            "split_seeds": len(settings.get("split_seeds") or ()), "probes": len(settings.get("probes") or ()),
            "sweep": len(sweep.get("values") or ()) if isinstance(sweep, Mapping) else 0}
    return check_grid_size({k: n for k, n in dims.items() if n}, fail)


def _first_duplicate(values: list, key: Callable[[Any], Any] = lambda v: v) -> Any | None:
    """The first value whose ``key`` an earlier value already had (linear), or None."""
    seen: set = set()
    for v in values:
        k = key(v)
        if k in seen:
            return v
        seen.add(k)
    return None


def check_fractions(value: Any, fail: Fail = _argument("label_fractions")) -> tuple[float, ...]:
    """Label fractions: a non-empty list of distinct numbers in (0, 1], at most the grid bound long."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise fail(f"must be a non-empty list of numbers in (0, 1], e.g. [0.01, 0.1, 1.0]; got {_short(value)}")
    value = check_length(value, fail, "label fractions")
    if not value:
        raise fail("must be a non-empty list of numbers in (0, 1], e.g. [0.01, 0.1, 1.0]; got []")
    out = []
    for f in value:
        if isinstance(f, (bool, np.bool_)) or not isinstance(f, (int, float, np.integer, np.floating)) \
                or not math.isfinite(f):
            raise fail(f"{f!r} is not a finite number; use values in (0, 1]")
        if not 0.0 < f <= 1.0:
            raise fail(f"fraction {f} is outside (0, 1]; use e.g. 0.01 for 1 %")
        out.append(float(f))
    dup = _first_duplicate(out, lambda f: f"{f:g}")  # run ids / cell files use 6 significant digits
    if dup is not None:
        twins = [f for f in out if f"{f:g}" == f"{dup:g}"][:2]
        raise fail(f"contains duplicates: {twins[0]!r} and {twins[1]!r} are the same fraction to 6 significant "
                   f"digits (run ids use {dup:g}); list each fraction once")
    return tuple(out)


def check_seeds(value: Any, fail: Fail = _argument("seeds")) -> tuple[int, ...]:
    """Seeds: a non-empty list of distinct integers 0..2**32-1, at most the grid bound long."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise fail(f"must be a non-empty list of integers, e.g. [42, 123, 456]; got {_short(value)}")
    value = check_length(value, fail, "seeds")
    if not value:
        raise fail("must be a non-empty list of integers, e.g. [42, 123, 456]; got []")
    out = []
    for s in value:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
            raise fail(f"{s!r} is not an integer seed; use integers 0..{MAX_SEED}")
        if not 0 <= int(s) <= MAX_SEED:
            raise fail(f"must be between 0 and {MAX_SEED} (NumPy's legacy seed range), got {s}")
        out.append(int(s))
    dup = _first_duplicate(out)
    if dup is not None:
        raise fail(f"contains duplicates: seed {dup} appears twice; list each seed once")
    return tuple(out)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_probe(probe: Any, where: str = "probe", host=None) -> dict[str, Any]:
    """A ``probe`` mapping resolved against its head's declared settings (the task schema's rules)."""
    from prism_plugin.heads.base import resolve_probe
    from prism_plugin.plugins import host_or_shared

    return resolve_probe(probe, host_or_shared(host).registry("heads"),
                         lambda key, message: PrismError(f"{key}: {message}"), where)


def check_grid_settings(*, seeds: Any, C: Any, max_iter: Any, ece_bins: Any, proportional_val: Any,
                        probe: Any = None, host=None, fractions: Any = None) -> dict[str, Any]:
    """Validate :func:`prism_plugin.api.evaluate`'s keyword arguments; return them normalised (with
    ``fractions``, already checked by :func:`check_fractions`, the grid's size is bounded too)."""
    out: dict[str, Any] = {"seeds": check_seeds(seeds)}
    if fractions is not None:
        check_grid_size({"label_fractions": len(fractions), "seeds": len(out["seeds"])},
                        lambda key, message: PrismError(f"{key}: {message}"))
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


__all__ = ["MAX_RUNS", "MAX_RUNS_ENV", "MAX_SEED", "check_fractions", "check_grid_settings", "check_grid_size",
           "check_length", "check_task_grid", "check_probe", "check_seeds", "max_runs"]
