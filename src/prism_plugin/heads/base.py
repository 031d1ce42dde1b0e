"""What every probe head shares: its output, and the declaration and check of its settings.

A head is registered with its settings (``register_heads``: ``settings={"C": Setting(float, 1.0,
lo=0, lo_open=True)}``); :func:`resolve_probe` is the one validator of a ``probe`` mapping, used by
the task schema, :func:`prism_plugin.evaluate`, sweeps and the grid's fit memo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Protocol

import numpy as np

from prism_plugin.errors import PrismError, suggest

DEFAULT_KIND = "logistic"
_NOUNS = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}


@dataclass
class ProbeOutput:
    """Decision values of one fitted probe on one split: ``decision`` as the head computes it
    (``(N,)`` for a binary logistic probe, ``(N, K)`` otherwise) and ``proba`` consistent with it."""

    decision: np.ndarray
    proba: np.ndarray


class ProbeHead(Protocol):
    def fit(self, X: np.ndarray, y: np.ndarray) -> "ProbeHead": ...

    def evaluate(self, X: np.ndarray) -> ProbeOutput: ...


@dataclass(frozen=True)
class Setting:
    """One declared setting of a probe head (its name is the key it is registered under).

    ``type``: int, float, bool or str; ``default`` (None: the head chooses, e.g. ``tol`` by backend);
    ``lo``/``hi`` bounds of a number (``lo_open``: ``lo`` excluded); ``choices`` of a string;
    ``check(value)``: an extra check returning a problem text or None.
    """

    type: type
    default: Any = None
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None

    def validate(self, value: Any) -> Any:
        """The value, normalised to ``type``; ``ValueError(problem)`` when it does not fit."""
        t = self.type
        if t is bool or isinstance(value, bool):
            if t is not bool or not isinstance(value, bool):
                raise ValueError(f"must be {_NOUNS.get(t, 'a ' + t.__name__)}, got {value!r}")
        elif t in (int, float):
            if not isinstance(value, (int, np.integer) if t is int else (int, float, np.integer, np.floating)) \
                    or not math.isfinite(float(value)):
                raise ValueError(f"must be {'an integer' if t is int else 'a finite number'}, got {value!r}")
            value = t(value)
            lo, hi = self.lo if self.lo is not None else -math.inf, self.hi if self.hi is not None else math.inf
            if value < lo or value > hi or (self.lo_open and value == lo):
                raise ValueError(f"must be in {'(' if self.lo_open else '['}{lo:g}, {hi:g}], got {value!r}")
        elif not isinstance(value, t):
            raise ValueError(f"must be {_NOUNS.get(t, 'a ' + t.__name__)}, got {value!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}, got {value!r}"
                             f"{suggest(str(value), self.choices)}")
        problem = self.check(value) if self.check is not None else None
        if problem:
            raise ValueError(problem)
        return value


def resolve_probe(raw: Any, heads, fail: Callable[[str, str], Exception], key: str = "probe",
                  inherited: Collection[str] = ()) -> dict[str, Any]:
    """``raw`` (a ``probe`` mapping) checked against its head's declared settings, defaults filled in.

    ``heads``: the heads registry; ``fail(key, message)`` builds the error for a key path; ``inherited``: settings
    that came from a lower layer than the kind (an include, the task file under ``--set``): those the head does not
    declare are dropped (the other head's settings), any other unknown setting is an error naming it, the head and
    its settings. A head registered without ``settings`` takes its settings unchecked (its factory checks them).
    """
    if not isinstance(raw, Mapping):
        raise fail(key, f"must be a mapping such as {{kind: {DEFAULT_KIND}, C: 1.0}}, got {raw!r}")
    kind = raw.get("kind", DEFAULT_KIND)
    if not isinstance(kind, str) or not kind.strip():
        raise fail(f"{key}.kind", f"must be the name of a probe head, got {kind!r}")
    try:
        kind = heads.resolve(kind)
    except PrismError as exc:  # "unknown probe head 'mpl'; did you mean 'mlp'? (available: ...)"
        raise fail(f"{key}.kind", str(exc)) from None
    declared: Mapping[str, Setting] | None = heads.meta(kind, "settings")
    given = {k: v for k, v in raw.items() if k != "kind"}
    if declared is None:
        return {"kind": kind, **given}
    for name in given:
        if name not in declared and name not in inherited:
            allowed = ", ".join(declared) or "none"
            raise fail(f"{key}.{name}", f"unknown key '{key}.{name}' for probe head {kind!r}"
                                        f"{suggest(str(name), declared)} (settings of {kind}: {allowed})")
    out: dict[str, Any] = {"kind": kind}
    for name, spec in declared.items():
        value = given.get(name, spec.default)
        if value is None:
            continue
        try:
            out[name] = spec.validate(value)
        except ValueError as exc:
            raise fail(f"{key}.{name}", f"{exc} (probe head {kind})") from None
    return out


def probe_settings(probe: Mapping[str, Any]) -> dict[str, Any]:
    """A resolved probe's settings (what its factory takes beside ``seed``)."""
    return {k: v for k, v in probe.items() if k != "kind"}


def raising(key: str, message: str) -> PrismError:
    """The ``fail`` of callers without file locations (the Python API)."""
    return PrismError(f"{key}: {message}")


__all__ = ["DEFAULT_KIND", "ProbeHead", "ProbeOutput", "Setting", "probe_settings", "raising", "resolve_probe"]
