"""Split procedures (the task's ``split:`` key) and the ``--limit`` subset.

The ``split:`` key carves task splits out of a pool (:func:`run_split_procedure`): ``random_split``
(torch), ``sample`` (pandas), ``shuffle`` (Python ``random``) or ``stratified`` (scikit-learn),
reproducing how the reference made its splits. :func:`check_split_spec` validates the mapping
statically (the task schema calls it); :func:`limit_indices` is the class-balanced ``--limit``.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence

import numpy as np

from prism_plugin.errors import PrismError, suggest

SPLIT_PROCEDURES = {
    "random_split": "torch.utils.data.random_split of the pool with a seeded generator; parts take "
                    "floor(f*N) items each, the last part the remainder (remainder: round_robin = torch's own rule)",
    "sample": "pandas DataFrame.sample(frac=f, random_state=seed) of the pool -> one part, the rest -> the other",
    "shuffle": "Python random.Random(seed).shuffle of the pool; the first floor(f*N) -> one part, the rest -> the other",
    "stratified": "scikit-learn train_test_split(stratify=labels, random_state=seed) into two parts",
}
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
    if proc in ("random_split", "stratified"):
        if n_rest:
            raise fail("split.parts", f"{proc} takes a fraction for every part ('rest' is for sample/shuffle)")
        if proc == "stratified" and len(fracs) != 2:
            raise fail("split.parts", "stratified makes exactly two parts, e.g. {train: 0.7, heldout: 0.3}")
        total = sum(numeric)
        if proc == "random_split" and abs(total - 1.0) > 1e-9:
            raise fail("split.parts", f"fractions must sum to 1, got {total:g}")
        if proc == "stratified" and total > 1 + 1e-9:
            raise fail("split.parts", f"fractions sum to {total:g} > 1")
    else:
        if len(fracs) != 2 or n_rest != 1:
            raise fail("split.parts", f"{proc} makes two parts: one fraction and one 'rest', e.g. {{val: 0.15, train: rest}}")
    remainder = spec.get("remainder", "last")
    if remainder not in ("last", "round_robin"):
        raise fail("split.remainder", f"must be 'last' or 'round_robin', got {remainder!r}")
    if "remainder" in spec and proc != "random_split":
        raise fail("split.remainder", "only applies to procedure random_split")
    out = {"procedure": proc, "seed": seed, "from": src_list if len(src_list) > 1 else src_list[0], "parts": fracs}
    if proc == "random_split":
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


def run_split_procedure(spec: dict[str, Any], labels: np.ndarray) -> dict[str, np.ndarray]:
    """Positions (into the pool, in the procedure's natural order) of every part."""
    labels = np.asarray(labels)
    n = len(labels)
    proc, seed, parts = spec["procedure"], int(spec["seed"]), spec["parts"]
    names = list(parts)
    if proc == "random_split":
        import torch
        from torch.utils.data import random_split

        lengths = random_split_lengths(n, [parts[p] for p in names], spec.get("remainder", "last"))
        subsets = random_split(range(n), lengths, generator=torch.Generator().manual_seed(seed))
        return {p: np.asarray(s.indices, dtype=np.int64) for p, s in zip(names, subsets)}
    frac_name = next(p for p in names if parts[p] != "rest") if proc in ("sample", "shuffle") else None
    if proc == "sample":
        import pandas as pd

        rest_name = next(p for p in names if p != frac_name)
        picked = pd.Series(np.arange(n)).sample(frac=parts[frac_name], random_state=seed).to_numpy()
        mask = np.ones(n, dtype=bool)
        mask[picked] = False
        return {frac_name: picked.astype(np.int64), rest_name: np.flatnonzero(mask)}
    if proc == "shuffle":
        rest_name = next(p for p in names if p != frac_name)
        order = list(range(n))
        random.Random(seed).shuffle(order)
        k = int(math.floor(parts[frac_name] * n))
        return {frac_name: np.asarray(order[:k], dtype=np.int64), rest_name: np.asarray(order[k:], dtype=np.int64)}
    if proc == "stratified":
        from sklearn.model_selection import train_test_split

        first, second = names
        f1, f2 = parts[first], parts[second]
        train_size = f1 if f1 + f2 < 1 - 1e-9 else None
        a, b = train_test_split(np.arange(n), test_size=f2, train_size=train_size, stratify=labels,
                                random_state=seed)
        return {first: np.asarray(a, dtype=np.int64), second: np.asarray(b, dtype=np.int64)}
    raise PrismError(f"unknown split procedure {proc!r}")  # pragma: no cover - validated earlier


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
