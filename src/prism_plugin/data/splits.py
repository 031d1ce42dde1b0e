"""Split procedures (the task's ``split:`` key) and the ``--limit`` subset.

The ``split:`` key carves task splits out of a pool (:func:`run_split_procedure`): ``random_split``
(torch), ``sample`` (pandas), ``shuffle`` (Python ``random``) or ``stratified`` (scikit-learn),
reproducing how the reference made its splits. :func:`check_split_spec` validates the mapping
statically (the task schema calls it); :func:`limit_indices` is the class-balanced ``--limit``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from prism_plugin.errors import PrismError, suggest

SPLIT_KEYS = {"procedure", "from", "seed", "parts", "remainder"}


def check_split_spec(spec: Any, fail: Callable[[str, str], PrismError]) -> dict[str, Any]:
    """Validate a ``split:`` mapping; ``fail(key, message)`` builds the error (with file and line)."""
    if not isinstance(spec, dict):
        raise fail("split", "must be a mapping {procedure, seed, parts, from}")
    for key in spec:
        if key not in SPLIT_KEYS:
            raise fail(f"split.{key}", f"unknown key{suggest(str(key), SPLIT_KEYS)} (allowed: {', '.join(sorted(SPLIT_KEYS))})")
    proc = spec.get("procedure")
    if proc not in SPLIT_PROCEDURES:
        raise fail("split.procedure", f"must be one of {', '.join(SPLIT_PROCEDURES)}, got {proc!r}"
                   f"{suggest(str(proc), SPLIT_PROCEDURES)}")
    seed = spec.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise fail("split.seed", f"must be an integer in [0, 2**32), got {seed!r}")
    src = spec.get("from", "all")
    if isinstance(src, str):
        src_list = [src]
    elif isinstance(src, list) and src and all(isinstance(s, str) and s for s in src):
        src_list = list(src)
    else:
        raise fail("split.from", f"must be a source split name or a list of them (default: all), got {src!r}")
    parts = spec.get("parts")
    if not isinstance(parts, dict) or len(parts) < 2:
        raise fail("split.parts", "must map at least two part names to fractions, e.g. {train: 0.7, test: 0.3}")
    fracs: dict[str, Any] = {}
    for name, f in parts.items():
        if not isinstance(name, str) or not name:
            raise fail("split.parts", f"part names must be non-empty strings, got {name!r}")
        if f == "rest":
            fracs[name] = "rest"
            continue
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
            raise fail(f"split.parts.{name}", f"must be a fraction in (0, 1] or 'rest', got {f!r}")
        fracs[name] = float(f)
    numeric = [v for v in fracs.values() if v != "rest"]
    n_rest = sum(v == "rest" for v in fracs.values())
    rule = SPLIT_PROCEDURES[proc]
    if rule.rest and (len(fracs) != 2 or n_rest != 1):
        raise fail("split.parts", f"{proc} makes two parts: one fraction and one 'rest', e.g. {{val: 0.15, train: rest}}")
    if not rule.rest and n_rest:
        raise fail("split.parts", f"{proc} takes a fraction for every part ('rest' is for sample/shuffle)")
    if rule.two_parts and len(fracs) != 2:
        raise fail("split.parts", f"{proc} makes exactly two parts, e.g. {{train: 0.7, heldout: 0.3}}")
    total = sum(numeric)
    if rule.sum_to_one and abs(total - 1.0) > 1e-9:
        raise fail("split.parts", f"fractions must sum to 1, got {total:g}")
    if not rule.rest and not rule.sum_to_one and total > 1 + 1e-9:
        raise fail("split.parts", f"fractions sum to {total:g} > 1")
    remainder = spec.get("remainder", "last")
    if remainder not in ("last", "round_robin"):
        raise fail("split.remainder", f"must be 'last' or 'round_robin', got {remainder!r}")
    if "remainder" in spec and not rule.remainder:
        raise fail("split.remainder", "only applies to procedure random_split")
    out = {"procedure": proc, "seed": seed, "from": src_list if len(src_list) > 1 else src_list[0], "parts": fracs}
    if rule.remainder:
        out["remainder"] = remainder
    return out


def random_split_lengths(n: int, fractions: Sequence[float], remainder: str = "last") -> list[int]:
    """Part sizes: floor(f*n) each; the remainder goes to the last part, or round-robin (torch's rule)."""
    lengths = [int(math.floor(n * f)) for f in fractions]
    left = n - sum(lengths)
    if remainder == "last":
        lengths[-1] += left
    else:
        for i in range(left):
            lengths[i % len(lengths)] += 1
    return lengths


def _random_split(spec: dict[str, Any], labels: np.ndarray) -> dict[str, np.ndarray]:
    import torch
    from torch.utils.data import random_split

    names = list(spec["parts"])
    lengths = random_split_lengths(len(labels), [spec["parts"][p] for p in names], spec.get("remainder", "last"))
    subsets = random_split(range(len(labels)), lengths, generator=torch.Generator().manual_seed(int(spec["seed"])))
    return {p: np.asarray(s.indices, dtype=np.int64) for p, s in zip(names, subsets)}


def _fraction_and_rest(spec: dict[str, Any]) -> tuple[str, str, float]:
    parts = spec["parts"]
    frac_name = next(p for p in parts if parts[p] != "rest")
    return frac_name, next(p for p in parts if p != frac_name), parts[frac_name]


def _sample(spec: dict[str, Any], labels: np.ndarray) -> dict[str, np.ndarray]:
    import pandas as pd

    frac_name, rest_name, frac = _fraction_and_rest(spec)
    n = len(labels)
    picked = pd.Series(np.arange(n)).sample(frac=frac, random_state=int(spec["seed"])).to_numpy()
    mask = np.ones(n, dtype=bool)
    mask[picked] = False
    return {frac_name: picked.astype(np.int64), rest_name: np.flatnonzero(mask)}


def _shuffle(spec: dict[str, Any], labels: np.ndarray) -> dict[str, np.ndarray]:
    frac_name, rest_name, frac = _fraction_and_rest(spec)
    order = list(range(len(labels)))
    random.Random(int(spec["seed"])).shuffle(order)
    k = int(math.floor(frac * len(labels)))
    return {frac_name: np.asarray(order[:k], dtype=np.int64), rest_name: np.asarray(order[k:], dtype=np.int64)}


def _stratified(spec: dict[str, Any], labels: np.ndarray) -> dict[str, np.ndarray]:
    from sklearn.model_selection import train_test_split

    (first, f1), (second, f2) = spec["parts"].items()
    train_size = f1 if f1 + f2 < 1 - 1e-9 else None
    a, b = train_test_split(np.arange(len(labels)), test_size=f2, train_size=train_size, stratify=labels,
                            random_state=int(spec["seed"]))
    return {first: np.asarray(a, dtype=np.int64), second: np.asarray(b, dtype=np.int64)}


@dataclass(frozen=True)
class SplitProcedure:
    """One ``split.procedure``: how the reference made its parts, and the rules of its ``parts``."""

    description: str
    make: Callable[[dict[str, Any], np.ndarray], dict[str, np.ndarray]]  # (spec, pool labels) -> positions
    rest: bool = False         # two parts: one fraction and one 'rest' (else a fraction for every part)
    two_parts: bool = False
    sum_to_one: bool = False   # the fractions sum to 1 (else to at most 1)
    remainder: bool = False    # takes split.remainder
    min_per_class: int = 0     # items every class of the pool needs


#: ``split.procedure`` name -> its declaration
SPLIT_PROCEDURES: dict[str, SplitProcedure] = {
    "random_split": SplitProcedure(
        "torch.utils.data.random_split of the pool with a seeded generator; parts take floor(f*N) items each, "
        "the last part the remainder (remainder: round_robin = torch's own rule)", _random_split,
        sum_to_one=True, remainder=True),
    "sample": SplitProcedure("pandas DataFrame.sample(frac=f, random_state=seed) of the pool -> one part, the rest "
                             "-> the other", _sample, rest=True),
    "shuffle": SplitProcedure("Python random.Random(seed).shuffle of the pool; the first floor(f*N) -> one part, the "
                              "rest -> the other", _shuffle, rest=True),
    "stratified": SplitProcedure("scikit-learn train_test_split(stratify=labels, random_state=seed) into two parts",
                                 _stratified, two_parts=True, min_per_class=2),
}


def run_split_procedure(spec: dict[str, Any], labels: np.ndarray, where: str = "the pool") -> dict[str, np.ndarray]:
    """Positions (into the pool, in the procedure's natural order) of every part; ``where`` names the pool."""
    labels = np.asarray(labels)
    rule = SPLIT_PROCEDURES[spec["procedure"]]
    counts = np.bincount(labels) if rule.min_per_class and len(labels) else np.zeros(0, dtype=np.int64)
    if (counts[counts > 0] < rule.min_per_class).any():
        raise PrismError(f"{where}: a {spec['procedure']} split needs >= {rule.min_per_class} items per class; "
                         f"class counts {counts.tolist()}")
    return rule.make(spec, labels)


def with_split_seed(task, split_seed: int | None):
    """``task`` with its ``split:`` procedure at ``split_seed`` (a transfer task: its source task's; the
    target keeps its own split). ``None``, or a task without a procedure: ``task`` itself."""
    import dataclasses

    if split_seed is None:
        return task
    if getattr(task, "is_transfer", False):
        src = task.source_config
        if src is None or not src.split:
            return task
        return dataclasses.replace(task, source_config=with_split_seed(src, split_seed))
    if not task.split:
        return task
    return dataclasses.replace(task, split={**task.split, "seed": int(split_seed)})


def limit_indices(labels: np.ndarray, limit: int) -> np.ndarray:
    """First ``limit`` items, taken round-robin over classes so every class stays present."""
    by_class = [np.flatnonzero(labels == c).tolist() for c in np.unique(labels)]
    out: list[int] = []
    i = 0
    while len(out) < min(limit, len(labels)):
        for idx in by_class:
            if i < len(idx) and len(out) < limit:
                out.append(idx[i])
        i += 1
    return np.sort(np.asarray(out, dtype=np.int64))


__all__ = ["SPLIT_PROCEDURES", "SPLIT_KEYS", "check_split_spec", "random_split_lengths",
           "run_split_procedure", "limit_indices", "with_split_seed"]
