"""The protocol's grid-dimension task keys: ``split_seeds`` and ``probes`` (registered in
:mod:`prism_plugin.tasks.keys`).

* ``split_seeds: [0, 1, 2, 3, 4]`` -- the task's ``split:`` procedure runs once per value (its ``split.seed`` takes
  each in turn), and the whole grid runs on each resulting set of splits. Every run row gets a ``split_seed``
  column. An in-domain task needs a ``split:`` procedure; a transfer task needs one on its source task (checked by
  the task index, which links the two). For a transfer task only the **source** split follows the split seed: the
  target is evaluated on its own held-out split at the target task's ``split.seed`` for every split seed, so every
  source split is scored on the same target examples (what a paired bootstrap over target examples averaged over
  split seeds needs).
* ``probes: [logistic_std, knn1]`` -- the grid runs once per probe (the ``probe`` column names the kind). An entry
  is a head kind (a bare kind takes the task's ``probe`` settings when it is the kind the ``probe`` mapping was
  written for, else the head's defaults) or a mapping ``{kind, C, max_iter, ...}`` validated as ``probe:`` is. Each
  kind at most once (a run is told apart by its ``probe`` column); a sweep over a setting is ``sweep:``. ``--probe
  KIND`` replaces the list by one probe; ``probes: null`` (``--set probes=null``) switches it off.

With either key a run's id gains ``-split<S>`` / ``-<kind>`` (:func:`prism_plugin.protocol.grid.run_id`); tasks
without them keep their ids, cells and ``runs.csv`` exactly.
"""

from __future__ import annotations

from typing import Any

from prism_plugin.errors import PrismError
from prism_plugin.paths import short_repr

MAX_SPLIT_SEEDS = 1000
MAX_PROBES = 50
SPLIT_SEEDS_KEY = "split_seeds"
PROBES_KEY = "probes"


class _EntryWhere:
    """A task's locations where a ``probes[i]...`` key without a line of its own (a bare kind in a
    flow list) points at the ``probes`` line."""

    def __init__(self, loc):
        self.loc = loc

    def where(self, key: str) -> str:
        known = key in self.loc.lines or key.split(".")[0] in self.loc.lines
        return self.loc.where(key if known else PROBES_KEY)


def check_split_seeds(value: Any, ctx) -> tuple[int, ...]:
    """``split_seeds``: a non-empty list of distinct integers in [0, 2**32); ``null`` = none.

    An in-domain task with fixed splits (no ``split:`` procedure) has one split: ``split_seeds: [S]`` (one
    value, e.g. to override an included protocol's five) means that split and is normalised to ``()`` (the
    task's own splits; run ids and ``runs.csv`` as without the key); two or more are refused.
    """
    from prism_plugin.protocol.settings import check_length

    if value is None:
        return ()
    example = "e.g. split_seeds: [0, 1, 2, 3, 4]"
    if not isinstance(value, list) or not value:
        raise ctx.fail(SPLIT_SEEDS_KEY, f"must be a non-empty list of integers, {example}; got {short_repr(value)}")
    if len(value) > MAX_SPLIT_SEEDS:
        raise ctx.fail(SPLIT_SEEDS_KEY, f"{len(value):,} values; at most {MAX_SPLIT_SEEDS:,}")
    check_length(value, lambda message: ctx.fail(SPLIT_SEEDS_KEY, message), "split seeds")
    seen: set[int] = set()
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
            raise ctx.fail(SPLIT_SEEDS_KEY, f"must list integers in [0, 2**32), got {short_repr(v)} ({example})")
        if v in seen:
            raise ctx.fail(SPLIT_SEEDS_KEY, f"split seed {v} appears twice")
        seen.add(v)
    if ctx.kind != "transfer" and not isinstance(ctx.data.get("split"), dict):
        if len(value) == 1:  # fixed splits are one split: what a single split seed asks for
            return ()
        raise ctx.fail(SPLIT_SEEDS_KEY, f"needs a split: procedure to vary its {len(value)} values (split: "
                                        "{procedure: stratified, seed: 0, parts: {train: 0.7, heldout: 0.3}}); this "
                                        "task's splits are fixed, which is one split: set split_seeds: [0] or null "
                                        "(--set split_seeds=[0]) to run it")
    return tuple(int(v) for v in value)


def check_probes(value: Any, ctx) -> tuple[dict[str, Any], ...]:
    """``probes``: each entry a head kind or a probe mapping, normalised like ``probe:``."""
    from prism_plugin.tasks.schema import Checker, normalise_probe

    if value is None:
        return ()
    example = "e.g. probes: [logistic_std, knn1] or probes: [{kind: logistic_std, C: 1.0}, knn1]"
    if not isinstance(value, list) or not value:
        raise ctx.fail(PROBES_KEY, f"must be a non-empty list of probe kinds or probe mappings, {example}; got "
                                   f"{short_repr(value)}")
    if len(value) > MAX_PROBES:
        raise ctx.fail(PROBES_KEY, f"{len(value)} probes; at most {MAX_PROBES}")
    if ctx.data.get("sweep"):
        raise ctx.fail(PROBES_KEY, "cannot be combined with sweep: (a sweep varies the one probe of the task); "
                                   "pass --probe KIND (one probe) or --set probes=null together with the sweep")
    base = ctx.data.get("probe") if isinstance(ctx.data.get("probe"), dict) else {}
    base_kind = base.get("kind", "logistic")
    checker = Checker(_EntryWhere(ctx.checker.loc), ctx.host) if ctx.checker is not None else None
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(value):
        if isinstance(entry, str) and entry.strip():
            raw = dict(base) if entry == base_kind else {"kind": entry}
            raw["kind"] = entry
        elif isinstance(entry, dict):
            raw = dict(entry)
            if not isinstance(raw.get("kind", "logistic"), str):
                raise ctx.fail(PROBES_KEY, f"entry {i + 1}: kind must be a head name, got {short_repr(raw.get('kind'))}")
        else:
            raise ctx.fail(PROBES_KEY, f"entry {i + 1} must be a probe kind or a mapping {{kind, ...}}, got "
                                       f"{short_repr(entry)} ({example})")
        try:
            probe = (normalise_probe(raw, checker, f"{PROBES_KEY}[{i}]") if checker is not None
                     else {"kind": "logistic", **raw})
        except PrismError as exc:  # "file:line: probes[1].kind: unknown probe head 'knn'; did you mean ..."
            exc.key = PROBES_KEY
            raise
        out.append(probe)
    kinds = [p["kind"] for p in out]
    dup = sorted({k for k in kinds if kinds.count(k) > 1})
    if dup:
        raise ctx.fail(PROBES_KEY, f"kind {dup[0]!r} appears twice; each probe kind runs once (its runs are told apart "
                                   "by the probe column); to vary one of its settings use sweep: {probe.C: [...]}")
    return tuple(out)


__all__ = ["PROBES_KEY", "SPLIT_SEEDS_KEY", "check_probes", "check_split_seeds"]
