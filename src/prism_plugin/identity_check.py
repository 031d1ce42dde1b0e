"""Do two sets of results rest on embeddings of the same identity?

A results folder records what its embeddings are: ``runs.csv``'s identity columns (``precision``, ``weights``,
``weights_revision``: :data:`prism_plugin.embed.adapter.IDENTITY_COLUMNS`, one value per row) and
``summary.json``'s ``embedding_identity`` (the same, plus any further field a later version records) beside the
adapter's ``preprocessing`` (and ``profile``, for adapters with preprocessing profiles). Readers that set the runs
of two folders against each other (``prism-run diff``) call :func:`compare_identities` on the matched runs: every
field recorded on both sides whose value differs is an :class:`IdentityDifference` (per model pair, with both
sides' values), and a side whose folder predates these records gets one "not recorded" line instead of a crash.

Which fields count: everything in ``embedding_identity`` except what only qualifies it (``notes``), how the
commit was found (``revision``), what was asked for rather than computed (``precision_requested``: a bf16
request computed in fp32 is an fp32 embedding) and the device (numerics of one precision, not another
embedding); plus ``preprocessing`` and ``profile`` from the adapter description.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

#: runs.csv columns of the identity (:data:`prism_plugin.embed.adapter.IDENTITY_COLUMNS`; not imported, so
#: reading results needs no torch)
RUNS_COLUMNS = ("precision", "weights", "weights_revision")
#: embedding_identity keys that are not the identity itself
NOT_IDENTITY = frozenset({"notes", "revision", "precision_requested", "device"})
#: adapter-description keys that define the embedding's input
ADAPTER_FIELDS = ("preprocessing", "profile")
#: the fields in report order (others recorded by a later version follow, sorted)
KNOWN_FIELDS = RUNS_COLUMNS + ADAPTER_FIELDS
#: what each field is, in words
FIELD_WORDS = {"precision": "precision", "weights": "weights", "weights_revision": "hub commit of the weights",
               "preprocessing": "preprocessing", "profile": "preprocessing profile"}


def _missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return isinstance(v, str) and not v.strip()


def _text(v: Any) -> str:
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def summary_identity(summary: Mapping[str, Any]) -> tuple[dict[str, str], bool]:
    """The identity fields ``summary.json`` records, and whether it records an ``embedding_identity`` at all."""
    out: dict[str, str] = {}
    emb = summary.get("embedding_identity") if isinstance(summary, Mapping) else None
    recorded = isinstance(emb, Mapping)
    if recorded:
        for k, v in emb.items():
            if k in NOT_IDENTITY:
                continue
            if k == "weights_revision":  # no hub commit (not a hub model): a value of its own
                out[k] = "none" if _missing(v) else _text(v)
            elif not _missing(v):
                out[k] = _text(v)
    adapter = summary.get("adapter") if isinstance(summary, Mapping) else None
    if isinstance(adapter, Mapping):
        for k in ADAPTER_FIELDS:
            if k in adapter and not _missing(adapter[k]):
                out[k] = _text(adapter[k])
    return out, recorded


def row_identity(row: Mapping[str, Any], summary: Mapping[str, Any]) -> tuple[dict[str, str], bool]:
    """One run's identity: its runs.csv identity columns (they win) over its folder's ``summary.json``; and
    whether the run records the embedding identity (the columns or ``embedding_identity``)."""
    out, recorded = summary_identity(summary)
    cols = [c for c in RUNS_COLUMNS if c in row]
    if cols and not all(_missing(row[c]) for c in cols if c != "weights_revision"):
        recorded = True
        for c in cols:
            if c == "weights_revision":
                out[c] = "none" if _missing(row[c]) else _text(row[c])
            elif not _missing(row[c]):
                out[c] = _text(row[c])
    return out, recorded


def field_words(name: str) -> str:
    """``hub commit of the weights (`weights_revision`)``; a field whose name says it all: ``precision``."""
    words = FIELD_WORDS.get(name, name)
    return words if words == name else f"{words} (`{name}`)"


def field_order(names: Iterable[str]) -> list[str]:
    names = set(names)
    return [f for f in KNOWN_FIELDS if f in names] + sorted(names - set(KNOWN_FIELDS))


@dataclass
class IdentityDifference:
    """A field recorded on both sides whose value differs, for one model pair (A's model, B's model)."""

    model_a: str
    model_b: str
    field: str
    a: list[str]
    b: list[str]
    n_runs: int  # matched runs whose two sides differ in this field

    def text(self) -> str:
        who = self.model_a if self.model_a == self.model_b else f"{self.model_a} (A) vs {self.model_b} (B)"
        return f"{who}: {field_words(self.field)} differs: A {', '.join(self.a)}; B {', '.join(self.b)}"

    def to_dict(self) -> dict[str, Any]:
        return {"model_a": self.model_a, "model_b": self.model_b, "field": self.field, "a": self.a, "b": self.b,
                "n_runs": self.n_runs}


@dataclass
class IdentityComparison:
    """What :func:`compare_identities` found: the differences, the sides that do not record the identity, the
    fields compared (recorded on both sides) and the common identity (field -> value, where all runs agree)."""

    differences: list[IdentityDifference] = field(default_factory=list)
    not_recorded: list[str] = field(default_factory=list)  # side labels ("A", "B")
    compared: list[str] = field(default_factory=list)
    same: dict[str, str] = field(default_factory=dict)

    @property
    def differs(self) -> bool:
        return bool(self.differences)

    @property
    def fields_differing(self) -> list[str]:
        return field_order({d.field for d in self.differences})

    def not_recorded_line(self, paths: Mapping[str, Any] | None = None) -> str:
        if not self.not_recorded:
            return ""
        sides = " and ".join(f"{s}" + (f" ({paths[s]})" if paths and s in paths else "") for s in self.not_recorded)
        checked = f" (compared: {', '.join(self.compared)})" if self.compared else ""
        return (f"the embedding identity (precision, weights, hub commit) is not recorded in {sides}: results "
                "written before prism-run recorded it, so whether both sides' embeddings are the same kind cannot "
                f"be checked{checked}")

    def to_dict(self) -> dict[str, Any]:
        return {"same": (not self.differs) if not self.not_recorded else (False if self.differs else None),
                "differences": [d.to_dict() for d in self.differences], "not_recorded": list(self.not_recorded),
                "compared": list(self.compared), "common": dict(self.same)}


def compare_identities(pairs: Iterable[tuple[str, Mapping[str, str], bool, str, Mapping[str, str], bool]],
                       labels: tuple[str, str] = ("A", "B")) -> IdentityComparison:
    """Compare matched runs: each pair ``(model_a, identity_a, recorded_a, model_b, identity_b, recorded_b)``
    (:func:`row_identity`). A field is compared where both runs of a pair record it."""
    found: dict[tuple[str, str, str], tuple[set, set, int]] = {}
    compared: set[str] = set()
    values: dict[str, set[str]] = {}
    unrecorded: set[str] = set()
    order: list[tuple[str, str]] = []
    for ma, ia, ra, mb, ib, rb in pairs:
        if not ra:
            unrecorded.add(labels[0])
        if not rb:
            unrecorded.add(labels[1])
        if (ma, mb) not in order:
            order.append((ma, mb))
        for f in set(ia) & set(ib):
            compared.add(f)
            values.setdefault(f, set()).update((ia[f], ib[f]))
            if ia[f] != ib[f]:
                sa, sb, n = found.get((ma, mb, f), (set(), set(), 0))
                sa.add(ia[f])
                sb.add(ib[f])
                found[(ma, mb, f)] = (sa, sb, n + 1)
    diffs = [IdentityDifference(ma, mb, f, sorted(found[(ma, mb, f)][0]), sorted(found[(ma, mb, f)][1]),
                                found[(ma, mb, f)][2])
             for ma, mb in order for f in field_order(compared) if (ma, mb, f) in found]
    return IdentityComparison(diffs, [s for s in labels if s in unrecorded], field_order(compared),
                              {f: next(iter(values[f])) for f in field_order(compared) if len(values[f]) == 1})


__all__ = ["ADAPTER_FIELDS", "FIELD_WORDS", "IdentityComparison", "IdentityDifference", "KNOWN_FIELDS",
           "RUNS_COLUMNS", "compare_identities", "field_order", "field_words", "row_identity", "summary_identity"]
