"""Probe fits shared between the grids of one ``prism-run`` that fit on the same data.

A transfer task fits its probe on the source's train split and its temperature on the source's val split: exactly
the fits of the source's own in-domain grid (PCam -> MHIST and PCam; the 20 Camelyon17 pairs and the 5 hospitals,
each hospital the source of 4 pairs). The PRISM reference evaluator reuses the source's in-domain probe for those
cells (``temperature_src`` equals the in-domain ``temperature`` run for run). :class:`FitMemo` lets the grids of
one command do the same: a fit is looked up by everything it depends on, so a hit returns what a refit would
compute, and only where that is certain:

* the data: the adapter's fingerprint and the content fingerprints of the train and val features the runner loaded
  (``emb_info["content"]``), the split seed, and a digest of the training labels (a transfer that relabels its
  source, e.g. BRACS binarised, has other labels and never hits);
* the fit: the training subset (its index digest), the head kind and its settings as its declaration resolves them
  (:func:`~prism_plugin.heads.base.resolve_probe`: defaults filled in, values normalised, so ``C: 1`` and an unset
  C share), and the seed (unless the head is registered ``seed_invariant``);
* heads whose fit depends on the grid's other runs (``uses_grid_state``: fast mode's preconditioner and warm
  starts; a head with ``prepare_grid`` that does not say is taken to) are never shared; nor are fits run by an
  executor's workers (``--jobs N``, Ray).

What is kept: the fitted head and its validation output (the test output is computed for each grid's own test
split). The command plans which (model, source task) pairs a later job will use again (:meth:`FitMemo.plan`); a job
stores its fits only when a later job needs them, and the fits of a (model, source) pair are dropped once its last
user has run, so memory holds only what is still to be used (for the whole paper: the 5 Camelyon17 hospitals' and
PCam's fits of one model at a time per source, kilobytes per fit plus the validation decision values).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

Tag = tuple[str, str]  # (model label, source task name)


@dataclass
class MemoFit:
    """One shared fit: the fitted head, its validation output and what the solver reported."""

    head: Any
    val: Any
    converged: bool | None
    backend: str | None
    stats: dict | None


def labels_digest(y: np.ndarray) -> str:
    y = np.ascontiguousarray(np.asarray(y))
    return hashlib.sha1(str(y.dtype).encode() + str(y.shape).encode() + y.tobytes()).hexdigest()


class FitScope:
    """The memo as one grid sees it: its data key, whether it may store, and its hit count."""

    def __init__(self, memo: "FitMemo", tag: Tag, data_key: str, store: bool):
        self.memo, self.tag, self.data_key, self.store = memo, tag, data_key, store
        self.hits = 0
        self.stored = 0

    def key(self, subset_digest: str, head_kind: str, settings: dict, seed: int | None, y_digest: str) -> str:
        text = json.dumps([self.data_key, subset_digest, head_kind, settings, seed, y_digest], sort_keys=True,
                          default=str)
        return hashlib.sha1(text.encode()).hexdigest()

    def get(self, key: str) -> MemoFit | None:
        fit = self.memo._fits.get(key)
        if fit is not None:
            self.hits += 1
        return fit

    def put(self, key: str, fit: MemoFit) -> None:
        if self.store and key not in self.memo._fits:
            self.memo._fits[key] = fit
            self.memo._owned.setdefault(self.tag, set()).add(key)
            self.stored += 1


@dataclass
class FitMemo:
    """The shared fits of one command (see the module docstring)."""

    #: (model, source task) -> jobs still to run that fit on it
    remaining: Counter = field(default_factory=Counter)
    _fits: dict[str, MemoFit] = field(default_factory=dict)
    _owned: dict[Tag, set[str]] = field(default_factory=dict)

    @classmethod
    def plan(cls, uses: Iterable[Tag]) -> "FitMemo":
        """A memo for jobs that will fit on these (model, source task) pairs, in run order; a pair used
        by one job only is never stored."""
        return cls(remaining=Counter(uses))

    def scope(self, tag: Tag, data_key: str) -> FitScope:
        """The scope of the job ``tag`` is about to run (stores only when a later job needs its fits)."""
        return FitScope(self, tag, data_key, store=self.remaining.get(tag, 0) > 1)

    def done(self, tag: Tag) -> None:
        """The job ``tag`` has run: one use fewer; the pair's fits are dropped after its last use."""
        self.remaining[tag] -= 1
        if self.remaining[tag] <= 0:
            self.remaining.pop(tag, None)
            for key in self._owned.pop(tag, set()):
                self._fits.pop(key, None)

    def __len__(self) -> int:
        return len(self._fits)


__all__ = ["FitMemo", "FitScope", "MemoFit", "labels_digest"]
