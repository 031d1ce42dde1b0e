"""Class-prior stress: resample a labelled target to a named prior at batch size K.

The audit evaluates every label-free method on the balanced target and on targets resampled to realistic,
neutrophil-dominated WBC priors (its Suppl. A.12.3). The exact numbers of that table are not in the text we have,
so the WBC priors below are **our reconstruction** from standard adult peripheral-blood differential reference
ranges (neutrophils 40-70 %, lymphocytes 20-40 %, monocytes 2-8 %, eosinophils 1-4 %, basophils 0.5-1 %); give the
paper's values (or any other) under ``priors.custom`` in the task YAML to use them instead.

============== ============================================================
name           weights (neutrophil, lymphocyte, monocyte, eosinophil, basophil)
============== ============================================================
balanced       uniform over the task's classes (any task)
natural        the target split's own class frequencies (any task)
mild           halfway between balanced and clinical: .40 .25 .13 .115 .105
clinical       .60 .30 .06 .03 .01
neutrophil_heavy .80 .12 .05 .02 .01
dominant:C:s   class C (name or index) gets share s, the rest share 1 - s equally (any task)
============== ============================================================

A batch of size K takes ``n_c`` samples of class c, where ``n_c`` are the largest-remainder integer counts of ``K *
prior`` (so a batch matches its prior as closely as K allows; a class with a tiny share may get 0 at small K).
Within a class, samples are drawn without replacement, or with replacement when the target has fewer than ``n_c``
of that class. A class the prior wants but the target does not contain at all is dropped and the prior renormalised
(reported in ``note``). Draws are seeded from ``(seed, prior, K, draw)`` only, so every encoder evaluated on the
same target sees exactly the same batches (paired comparisons).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from prism_plugin.errors import PrismError

WBC5 = ("neutrophil", "lymphocyte", "monocyte", "eosinophil", "basophil")
_CLINICAL = (0.60, 0.30, 0.06, 0.03, 0.01)
_NEUTRO = (0.80, 0.12, 0.05, 0.02, 0.01)
WBC_PRIORS: dict[str, tuple[float, ...]] = {
    "clinical": _CLINICAL,
    "neutrophil_heavy": _NEUTRO,
    "mild": tuple(0.5 * 0.2 + 0.5 * c for c in _CLINICAL),
}


def _canon(name: str) -> str:
    n = name.strip().lower().replace("-", "_").replace(" ", "_")
    return n[:-1] if n.endswith("s") else n


def _class_index(class_names: Sequence[str]) -> dict[str, int]:
    return {_canon(n): i for i, n in enumerate(class_names)}


def prior_vector(name: str, n_classes: int, class_names: Sequence[str] = (), *,
                 custom: Mapping[str, Any] | None = None, target_labels: np.ndarray | None = None) -> np.ndarray:
    """The prior called ``name`` as a length-``n_classes`` probability vector.

    Raises :class:`PrismError` naming the prior and the fix when it does not apply to the task
    (e.g. a WBC prior on a task whose classes are not the five WBC types).
    """
    custom = dict(custom or {})
    if name in custom:
        return _weights_to_vector(custom[name], n_classes, class_names, f"priors.custom.{name}")
    if name == "balanced":
        return np.full(n_classes, 1.0 / n_classes)
    if name == "natural":
        if target_labels is None:
            raise PrismError("prior 'natural' needs the target labels")
        counts = np.bincount(np.asarray(target_labels, dtype=np.int64), minlength=n_classes).astype(float)
        return counts / counts.sum()
    if name.startswith("dominant:"):
        _, cls, share = name.split(":")
        share = float(share)
        index = _class_index(class_names)
        if _canon(cls) in index:
            c = index[_canon(cls)]
        elif cls.isdigit() and int(cls) < n_classes:
            c = int(cls)
        else:
            raise PrismError(f"prior {name!r}: class {cls!r} is not one of the task's classes "
                             f"{list(class_names) or list(range(n_classes))}")
        vec = np.full(n_classes, (1.0 - share) / (n_classes - 1))
        vec[c] = share
        return vec
    if name in WBC_PRIORS:
        return _weights_to_vector(dict(zip(WBC5, WBC_PRIORS[name])), n_classes, class_names, f"prior {name!r}",
                                  wbc=True)
    raise PrismError(f"unknown prior {name!r}; built in: balanced, natural, mild, clinical, neutrophil_heavy, "
                     "dominant:<class>:<share>, or define it under priors.custom")


def _weights_to_vector(weights: Any, n_classes: int, class_names: Sequence[str], where: str,
                       wbc: bool = False) -> np.ndarray:
    if isinstance(weights, (list, tuple)):
        if len(weights) != n_classes:
            raise PrismError(f"{where}: lists {len(weights)} weights for a task with {n_classes} classes")
        vec = np.asarray(weights, dtype=float)
    else:
        index = _class_index(class_names)
        missing = [c for c in weights if _canon(c) not in index]
        if missing or not class_names:
            hint = (" (a WBC prior needs the classes neutrophil, lymphocyte, monocyte, eosinophil, basophil; "
                    "use balanced, dominant:<class>:<share> or priors.custom for other tasks)") if wbc else ""
            raise PrismError(f"{where}: class(es) {missing or list(weights)} are not among the task's class_names "
                             f"{list(class_names)}{hint}")
        vec = np.zeros(n_classes)
        for c, w in weights.items():
            vec[index[_canon(c)]] = float(w)
    if vec.sum() <= 0:
        raise PrismError(f"{where}: weights sum to 0")
    return vec / vec.sum()


def counts_for_batch(prior: np.ndarray, k: int) -> np.ndarray:
    """Largest-remainder integer counts that sum to ``k`` (ties to the lower class index)."""
    prior = np.asarray(prior, dtype=float)
    exact = prior * k
    counts = np.floor(exact).astype(np.int64)
    rest = k - int(counts.sum())
    if rest > 0:
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:rest]] += 1
    return counts


@dataclass(frozen=True)
class Batch:
    prior: str
    k: int
    draw: int
    indices: np.ndarray  # into the target split
    note: str = ""


def draw_seed(seed: int, prior: str, k: int, draw: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(prior.encode()), int(k), int(draw)])


def resample(y: np.ndarray, prior: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Indices of one batch of size ``k`` whose class counts follow ``prior``."""
    y = np.asarray(y, dtype=np.int64)
    n_classes = len(prior)
    present = np.bincount(y, minlength=n_classes) > 0
    note = ""
    p = np.asarray(prior, dtype=float).copy()
    if np.any((p > 0) & ~present):
        dropped = np.flatnonzero((p > 0) & ~present).tolist()
        p[~present] = 0.0
        if p.sum() <= 0:
            raise PrismError("the target contains none of the classes the prior asks for")
        p /= p.sum()
        note = f"classes {dropped} absent from the target: dropped from the prior"
    counts = counts_for_batch(p, k)
    parts = []
    for c in range(n_classes):
        if counts[c] == 0:
            continue
        pool = np.flatnonzero(y == c)
        replace = len(pool) < counts[c]
        parts.append(rng.choice(pool, size=int(counts[c]), replace=replace))
    idx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return np.sort(idx), note


def batches(y: np.ndarray, priors: Mapping[str, np.ndarray], batch_sizes: Sequence[int], draws: int,
            seed: int = 0) -> Iterator[Batch]:
    """Every (prior, K, draw) batch, deterministic in ``seed``."""
    for name, vec in priors.items():
        for k in batch_sizes:
            for d in range(draws):
                idx, note = resample(y, vec, int(k), draw_seed(seed, name, int(k), d))
                yield Batch(name, int(k), d, idx, note)


def resolve_priors(cfg: Mapping[str, Any], n_classes: int, class_names: Sequence[str],
                   target_labels: np.ndarray) -> dict[str, np.ndarray]:
    """Name -> prior vector for a validated ``priors`` task mapping."""
    custom = cfg.get("custom", {}) or {}
    return {name: prior_vector(name, n_classes, class_names, custom=custom, target_labels=target_labels)
            for name in cfg.get("names", [])}


def column(prior: str, k: int, name: str) -> str:
    """The runs.csv column of one prior-stress value: ``prior__<prior>__k<K>__<name>``."""
    return f"prior__{prior}__k{k}__{name}"


def parse_column(col: str) -> tuple[str, int, str] | None:
    parts = col.split("__")
    if len(parts) != 4 or parts[0] != "prior" or not parts[2].startswith("k") or not parts[2][1:].isdigit():
        return None
    return parts[1], int(parts[2][1:]), parts[3]
