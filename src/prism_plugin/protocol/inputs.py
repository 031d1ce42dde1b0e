"""Validation of embedding arrays and grid settings before any fit: one clear message per problem.

Everything a user hands to :func:`prism_plugin.api.evaluate` (or a features adapter hands to the runner) passes
through here first, so a bad input fails with a :class:`~prism_plugin.errors.PrismError` naming the split or
argument and the fix, never with an exception from deep inside NumPy or scikit-learn. The checks of single arrays
(features, labels, probabilities, logits, scores) live in :mod:`prism_plugin.protocol.array_checks`, the one
array validator that :mod:`prism_plugin.compat` uses too; their errors are
:class:`~prism_plugin.protocol.array_checks.ArrayError` (a PrismError and a ``ValueError``).

What is accepted:

* features: anything ``np.asarray`` turns into a rectangular 2-D real matrix (float, int or unsigned dtypes; cast
  to float32, memory maps of float32 are kept as they are), with at least one column and only finite values that
  fit in float32;
* labels: a 1-D vector of integers 0..K-1 (bool is taken as 0/1, and floats that are exactly integers, such as 0.0
  and 1.0, are accepted);
* every split non-empty, features and labels of equal length, one feature width across splits, at least 2 classes,
  every class present in the training split.

A test split that holds a single class is *not* an error: PROTOCOL §3 says the AUROC is then NaN (scikit-learn
cannot compute it); the other metrics are reported as usual (:func:`check_data` says so in a ``single_class_test``
warning).

Labels read from files (:func:`as_labels` with ``strict=True``) must be stored as integers: bool, float, string and
object label arrays are refused there, and so are one-hot ``(N, K)`` and column ``(N, 1)`` arrays
(``column_ok=True`` accepts ``(N, 1, ..., 1)``, the MedMNIST/PCAM layout of image sources).

:func:`check_data` (after :func:`check_splits`) looks at the splits together:
identical or overlapping splits (a content hash of the rows, :func:`row_overlap`),
all-zero rows, constant training features, extreme feature scales, a single-class
test split and rare classes. Problems that make the numbers meaningless raise a
:class:`~prism_plugin.errors.PrismError`; the others are returned as data checks
(``{"check", "level", "message", "splits", "count"}``, level ``warning`` or
``allowed``) and emitted once each with :func:`warnings.warn`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.protocol.array_checks import (  # noqa: F401  (re-exported: the array validator's home)
    MAX_LABEL, ArrayError, as_features, as_labels, check_pair_lengths,
)


@dataclass
class SplitArrays:
    """Features ``X`` (N x D, float32, possibly memory-mapped) and integer labels ``y``."""

    X: np.ndarray
    y: np.ndarray
    name: str = ""
    #: set by :func:`check_splits` once X and y are validated (they are not validated twice)
    checked: bool = field(default=False, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.y.shape[0])


def check_n_classes(n_classes: Any, where: str = "n_classes") -> int | None:
    if n_classes is None:
        return None
    if isinstance(n_classes, (bool, np.bool_)) or not isinstance(n_classes, (int, np.integer)):
        raise PrismError(f"{where}: must be an integer >= 2 (or None to infer it from the labels), got {n_classes!r}")
    if n_classes < 2:
        raise PrismError(f"{where}: must be at least 2, got {n_classes}")
    return int(n_classes)


def check_splits(
    train: SplitArrays,
    val: SplitArrays | None,
    test: SplitArrays,
    n_classes: int | None = None,
) -> int:
    """Validate the three splits; return K. Raises an ArrayError (a PrismError) with the split named."""
    n_classes = check_n_classes(n_classes)
    for role, s in (("train", train), ("test", test)):
        if s is None:
            raise ArrayError(f"{role}: a {role} split is required; pass a (features, labels) pair")
    splits = [("train", train), ("test", test)] + ([("val", val)] if val is not None else [])
    for name, s in splits:
        if not isinstance(s, SplitArrays):
            raise ArrayError(f"{name}: pass a (features, labels) pair, got {type(s).__name__}")
        where = s.name or name
        if not s.checked:
            s.X = as_features(s.X, f"{where} features")
            s.y = as_labels(s.y, f"{where} labels", n_classes)
            check_pair_lengths(s.X.shape[0], s.y.shape[0], where)
            if s.y.shape[0] == 0:
                raise ArrayError(f"{where}: the split is empty; every split needs at least one sample")
            s.checked = True
        elif n_classes is not None and s.y.size and int(s.y.max()) >= n_classes:
            raise ArrayError(f"{where} labels: label {s.y.max()} is out of range for n_classes = {n_classes}; "
                             f"labels must be 0..{n_classes - 1}")
    dims = {name: s.X.shape[1] for name, s in splits}
    if len(set(dims.values())) > 1:
        shown = ", ".join(f"{n} {d}" for n, d in dims.items())
        raise ArrayError(f"feature dimensions differ between splits ({shown}); all splits must come from one model")
    k = n_classes if n_classes is not None else int(max(s.y.max() for _, s in splits)) + 1
    if k < 2:
        raise ArrayError("a task needs at least 2 classes; every label is 0 "
                         "(pass n_classes or labels of two or more classes)")
    present = set(np.unique(train.y).tolist())
    absent = [c for c in range(k) if c not in present]
    if absent:
        others = [n for n, s in splits if n != "train" and set(np.unique(s.y).tolist()) & set(absent)]
        seen = f" (they occur in {', '.join(others)})" if others else ""
        shown = absent[:10] + (["..."] if len(absent) > 10 else [])
        raise ArrayError(
            f"{train.name or 'train'}: class(es) {shown} absent from the training split{seen}; "
            f"every one of the {k} classes needs at least one training sample"
        )
    return k


# -- checks across splits (overlap, degenerate inputs) -------------------------
SPLIT_ORDER = ("train", "val", "test")
#: a class with fewer samples than this in the train or test split is reported (per-class numbers are noise)
MIN_CLASS_SAMPLES = 10
#: |x| above this: warned. At row scales of 1e4-1e6 scikit-learn's lbfgs probe on separable toy data already
#: returned visibly different fits (F1 1.0 -> 0.72 with AUROC 1.0: the L2 penalty C is negligible there and the
#: problem ill-conditioned), while raw foundation-model embeddings stay far below (|x| of order 1-100).
LARGE_SCALE = 1e4
#: |x| above this: refused. Beyond sqrt(float32 max) ~ 1.8e19 squares of float32 features (row norms, Gram and
#: Hessian products) overflow; scikit-learn's lbfgs probe returned chance-level numbers (AUROC 0.5, ECE 0,
#: every prediction one class, not converged) from row norms of 1e28 on (binary and 4-class, 300-40,000 rows).
MAX_SCALE = 1e19
#: the pairs of splits whose identity is an error unless the task allows it (what goes wrong, for the message)
FORBIDDEN_IDENTICAL = {
    ("val", "test"): "the temperature would be fitted on the evaluation split, which the protocol forbids",
    ("train", "test"): "the probe would be evaluated on its own training data",
}
ALLOW_KEY = "allow_split_overlap"
_HASH_SEED = 0x5EED_0F_0E
#: elements per block of the input checks' passes over a matrix (float64 working copies of 16 MB at most,
#: whatever the number of rows: the checks add a fixed, small amount to the features' memory)
_PAIR_BLOCK = 1 << 21


def _block_rows(dim: int) -> int:
    return max(1, _PAIR_BLOCK // max(int(dim), 1))


def split_pair(a: str, b: str) -> tuple[str, str]:
    """``(a, b)`` in train/val/test order."""
    rank = {n: i for i, n in enumerate(SPLIT_ORDER)}
    return tuple(sorted((str(a), str(b)), key=lambda n: (rank.get(n, len(rank)), n)))  # type: ignore[return-value]


def check_overlap_allowance(value: Any, where: str = ALLOW_KEY) -> tuple[tuple[str, str], ...]:
    """``[val, test]`` or a list of such pairs -> sorted split pairs; a PrismError naming ``where`` otherwise."""
    if value is None:
        return ()
    hint = "give a pair of split names, e.g. [val, test], or a list of pairs, e.g. [[val, test], [train, test]]"
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise PrismError(f"{where}: {hint}; got {value!r}")
    items = list(value)
    if items and all(isinstance(v, str) for v in items):
        items = [items]
    out: list[tuple[str, str]] = []
    for pair in items:
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Iterable):
            raise PrismError(f"{where}: {hint}; got {value!r}")
        pair = list(pair)
        if len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise PrismError(f"{where}: {hint}; got {pair!r}")
        bad = [p for p in pair if p not in SPLIT_ORDER]
        if bad:
            raise PrismError(f"{where}: {bad[0]!r} is not a split name (train, val, test)")
        if pair[0] == pair[1]:
            raise PrismError(f"{where}: names the split {pair[0]!r} twice; {hint}")
        p = split_pair(*pair)
        if p not in out:
            out.append(p)
    return tuple(out)


def _projection(dim: int) -> np.ndarray:
    return np.random.default_rng(_HASH_SEED).standard_normal(dim)


def _row_stats(X: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, int, float]:
    """(float64 projection of every row on ``v``, number of all-zero rows, max |x|), in one chunked pass."""
    n = X.shape[0]
    proj = np.empty(n, dtype=np.float64)
    zeros, top = 0, 0.0
    step = _block_rows(X.shape[1])
    buf = np.empty((min(n, step), X.shape[1]), dtype=np.float64)
    for start in range(0, n, step):
        block = np.asarray(X[start:start + step])
        p = proj[start:start + block.shape[0]]
        wide = buf[:block.shape[0]]
        np.copyto(wide, block)
        np.matmul(wide, v, out=p)
        if block.size:
            top = max(top, float(block.max()), -float(block.min()))
        maybe = np.flatnonzero(p == 0.0)  # an all-zero row projects to exactly 0; confirm the few that do
        if maybe.size:
            zeros += int(maybe.size - np.count_nonzero(block[maybe].any(axis=1)))
    return proj, zeros, top


def _tolerance(dim: int, max_abs: float, v: np.ndarray) -> float:
    """A rigorous bound on how far two float64 projections of one row can differ (any summation order)."""
    eps = float(np.finfo(np.float64).eps)
    return 4.0 * (dim + 2) * eps * max(max_abs, 1e-300) * float(np.abs(v).sum()) + 1e-300


def _candidate_keep(sorted_proj: np.ndarray, order: np.ndarray, A: np.ndarray) -> np.ndarray:
    """Positions (into the sorted order) worth comparing: one row per run of identical rows."""
    n = sorted_proj.shape[0]
    if n < 2:
        return np.arange(n)
    new_run = np.r_[True, sorted_proj[1:] != sorted_proj[:-1]]
    dup = np.flatnonzero(~new_run)
    if dup.size == 0:
        return np.arange(n)
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(n), 0))
    same = np.zeros(dup.size, dtype=bool)
    step = _block_rows(A.shape[1])
    for s in range(0, dup.size, step):
        j = dup[s:s + step]
        same[s:s + step] = (np.asarray(A[order[j]]) == np.asarray(A[order[run_start[j]]])).all(axis=1)
    keep = np.ones(n, dtype=bool)
    keep[dup[same]] = False
    return np.flatnonzero(keep)


def row_overlap(A: np.ndarray, B: np.ndarray, *, proj_a: np.ndarray | None = None,
                proj_b: np.ndarray | None = None, tol: float | None = None) -> np.ndarray:
    """Boolean mask over the rows of ``B``: True where the row also occurs in ``A`` (exactly equal values).

    A content hash: every row is projected on one fixed random vector (float64), candidate pairs are
    the rows whose projections agree within a rigorous rounding bound, and each candidate is
    confirmed by exact comparison -- no false positives, no false negatives, one pass over each
    matrix (about 0.6 s for 262,144 x 1,536 float32 on one core).
    """
    A = A if isinstance(A, np.ndarray) else np.asarray(A)
    B = B if isinstance(B, np.ndarray) else np.asarray(B)
    mask = np.zeros(B.shape[0], dtype=bool)
    if A.shape[0] == 0 or B.shape[0] == 0 or A.shape[1:] != B.shape[1:]:
        return mask
    if proj_a is None or proj_b is None or tol is None:
        v = _projection(A.shape[1])
        proj_a, _, top_a = _row_stats(A, v)
        proj_b, _, top_b = _row_stats(B, v)
        tol = _tolerance(A.shape[1], max(top_a, top_b), v)
    order = np.argsort(proj_a, kind="stable")
    sorted_a = proj_a[order]
    keep = _candidate_keep(sorted_a, order, A)
    sorted_a, order = sorted_a[keep], order[keep]
    lo = np.searchsorted(sorted_a, proj_b - tol, side="left")
    hi = np.searchsorted(sorted_a, proj_b + tol, side="right")
    cnt = hi - lo
    rows_b = np.flatnonzero(cnt > 0)
    if rows_b.size == 0:
        return mask
    step = _block_rows(A.shape[1])
    # expand (row of B, candidate of A) pairs block by block, so memory stays bounded
    counts = cnt[rows_b]
    bounds = np.r_[0, np.cumsum(counts)]
    first = 0
    while first < rows_b.size:
        last = int(np.searchsorted(bounds, bounds[first] + step, side="right")) - 1
        last = max(last, first + 1)
        rb, c = rows_b[first:last], counts[first:last]
        ib = np.repeat(rb, c)
        ja = order[np.repeat(lo[rb], c) + np.arange(int(c.sum())) - np.repeat(np.r_[0, np.cumsum(c)[:-1]], c)]
        eq = (np.asarray(B[ib]) == np.asarray(A[ja])).all(axis=1)
        mask[ib[eq]] = True
        first = last
    return mask


def _check(check: str, level: str, message: str, splits: Iterable[str], count: int) -> dict[str, Any]:
    return {"check": check, "level": level, "message": message, "splits": list(splits), "count": int(count)}


def _few_samples(check: str, prefix: str, split: str, y: np.ndarray, consequence: str) -> list[dict[str, Any]]:
    """The check for the classes of ``split`` with fewer than :data:`MIN_CLASS_SAMPLES` samples, if any."""
    classes, counts = np.unique(y, return_counts=True)
    few = [(int(c), int(k)) for c, k in zip(classes, counts) if k < MIN_CLASS_SAMPLES]
    if not few:
        return []
    listed = ", ".join(f"class {c}: {k}" for c, k in few[:10])
    return [_check(check, "warning", f"{prefix}{split} class(es) with fewer than {MIN_CLASS_SAMPLES} samples "
                                     f"({listed}): {consequence}", [split], len(few))]


def _overlap_checks(present, names, stats, same, allowed_pairs, prefix: str, allow_hint: str,
                    tol: float) -> tuple[list[str], list[dict[str, Any]]]:
    """The errors (identical val/test or train/test) and checks (shared rows) of every pair of splits."""
    identical_errors: dict[tuple[str, str], str] = {}
    checks: list[dict[str, Any]] = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pair = split_pair(a, b)
            sa, sb = present[pair[0]], present[pair[1]]
            pa, pb = stats[pair[0]][0], stats[pair[1]][0]
            reason = same.get(pair)
            shared = row_overlap(sa.X, sb.X, proj_a=pa, proj_b=pb, tol=tol)
            count = int(shared.sum())
            nb = sb.X.shape[0]
            if reason is None and count == nb and sa.X.shape[0] == nb:
                reason = "every row of one occurs in the other (identical features)"
            label = f"{pair[0]} and {pair[1]}"
            if reason is not None:
                if pair in allowed_pairs:
                    checks.append(_check("split_overlap", "allowed",
                                         f"{prefix}{label} are the same data ({reason}); allowed by the task "
                                         f"({ALLOW_KEY})", pair, nb))
                elif pair in FORBIDDEN_IDENTICAL:
                    identical_errors[pair] = (f"{prefix}splits {label} are the same data ({reason}): "
                                              f"{FORBIDDEN_IDENTICAL[pair]}; use distinct splits, or declare it with "
                                              + allow_hint.format(a=pair[0], b=pair[1]))
                else:
                    checks.append(_check("split_overlap", "warning",
                                         f"{prefix}{label} are the same data ({reason}): the temperature is fitted "
                                         "on the training data", pair, nb))
            elif count:
                level = "allowed" if pair in allowed_pairs else "warning"
                tail = f"; allowed by the task ({ALLOW_KEY})" if level == "allowed" else (
                    f": the {pair[1]} numbers are optimistic; remove the shared rows")
                checks.append(_check("split_overlap", level,
                                     f"{prefix}{count} of {nb} {pair[1]} rows ({count / nb:.1%}) also occur in "
                                     f"{pair[0]} (identical features){tail}", pair, count))

    return [identical_errors[p] for p in FORBIDDEN_IDENTICAL if p in identical_errors], checks


def check_data(
    splits: Mapping[str, SplitArrays | None],
    *,
    same: Mapping[tuple[str, str], str] | None = None,
    allowed: Iterable[Any] = (),
    where: str = "",
    small_classes: bool = True,
    emit: bool = True,
    allow_hint: str = f"{ALLOW_KEY}: [{{a}}, {{b}}] in the task file",
) -> list[dict[str, Any]]:
    """Checks across the (already :func:`check_splits`-validated) splits; the data checks found.

    Errors (raised as PrismError): identical val/test or train/test splits (by definition, ``same``: split pair ->
    why they are the same, or by content) unless ``allowed`` lists the pair; a training split whose rows are all
    identical; features beyond :data:`MAX_SCALE`. Warnings (returned, and emitted once each with
    :func:`warnings.warn` when ``emit``): rows shared between splits (``split_overlap``, with counts), identical
    train and val, all-zero rows (``zero_rows``), features beyond :data:`LARGE_SCALE` (``extreme_scale``), a test
    split of one class (``single_class_test``), classes with fewer than :data:`MIN_CLASS_SAMPLES` samples in test
    (``few_test_samples_per_class``) or train (``small_train_class``; skipped when ``small_classes`` is false, e.g.
    under ``--limit``). An allowed identity or overlap is returned at level ``allowed``.
    """
    present = {n: s for n, s in splits.items() if s is not None}
    allowed_pairs = set(check_overlap_allowance(allowed))
    same = {split_pair(*k): v for k, v in (same or {}).items()}
    prefix = f"{where}: " if where else ""
    checks: list[dict[str, Any]] = []
    errors: list[str] = []
    if not present:
        return checks
    dim = next(iter(present.values())).X.shape[1]
    v = _projection(dim)
    stats = {n: _row_stats(s.X, v) for n, s in present.items()}
    names = [n for n in SPLIT_ORDER if n in present] + [n for n in present if n not in SPLIT_ORDER]

    # scale
    top_name = max(names, key=lambda n: stats[n][2])
    top = stats[top_name][2]
    if top > MAX_SCALE:
        errors.append(f"{prefix}{top_name} features reach |x| = {top:.3g}, beyond {MAX_SCALE:.0e}: float32 "
                      "logistic regression overflows at this scale and the probe returns chance-level numbers; "
                      "rescale the embeddings (PRISM probes L2-normalised embeddings)")
    elif top > LARGE_SCALE:
        big = [n for n in names if stats[n][2] > LARGE_SCALE]
        checks.append(_check("extreme_scale", "warning",
                             f"{prefix}features reach |x| = {top:.3g} in {', '.join(big)} (above {LARGE_SCALE:.0e}): "
                             "the probe's L2 penalty is negligible and its solver ill-conditioned at this scale; "
                             "PRISM probes L2-normalised embeddings", big, len(big)))

    # constant training features
    train = present.get("train")
    if train is not None and train.X.shape[0] > 1:
        first = np.asarray(train.X[0])
        constant = True
        step = _block_rows(train.X.shape[1])
        for start in range(0, train.X.shape[0], step):
            if not (np.asarray(train.X[start:start + step]) == first).all():
                constant = False
                break
        if constant:
            errors.append(f"{prefix}train features are constant: all {train.X.shape[0]} training rows are identical"
                          f"{' (all zeros)' if not first.any() else ''}, so the probe cannot learn; re-extract the "
                          "embeddings (a failed extraction?)")

    # identical and overlapping splits (val = test reported first: the protocol's own rule)
    identical, overlaps = _overlap_checks(present, names, stats, same, allowed_pairs, prefix, allow_hint,
                                          _tolerance(dim, top, v))
    checks += overlaps
    errors[:0] = identical

    # all-zero rows
    for n in names:
        zeros, rows = stats[n][1], present[n].X.shape[0]
        if zeros:
            checks.append(_check("zero_rows", "warning",
                                 f"{prefix}{zeros} of {rows} {n} rows ({zeros / rows:.1%}) are all zeros "
                                 "(failed extraction?)", [n], zeros))

    # classes of the test and train splits
    test = present.get("test")
    if test is not None and test.y.size:
        classes, counts = np.unique(test.y, return_counts=True)
        if classes.size == 1:
            checks.append(_check("single_class_test", "warning",
                                 f"{prefix}test split has one class (class {int(classes[0])}, {int(counts[0])} "
                                 "samples): AUROC undefined (NaN); a one-class prediction there is not a collapse",
                                 ["test"], 1))
        else:
            checks += _few_samples("few_test_samples_per_class", prefix, "test", test.y,
                                   "their per-class numbers are noise")
    if small_classes and train is not None and train.y.size:
        checks += _few_samples("small_train_class", prefix, "train", train.y,
                               "the probe sees almost none of them, less still at small label fractions")
    if errors:
        raise ArrayError(errors[0])
    if emit:
        for c in checks:
            if c["level"] == "warning":
                warnings.warn(c["message"], stacklevel=2)
    return checks


def same_definition_problem(same: Mapping[tuple[str, str], str], allowed: Iterable[Any], where: str = "",
                            allow_hint: str = f"{ALLOW_KEY}: [{{a}}, {{b}}] in the task file") -> str | None:
    """The error for identical split definitions (before any data is read), or ``None``."""
    allowed_pairs = set(check_overlap_allowance(allowed))
    prefix = f"{where}: " if where else ""
    same = {split_pair(*key): reason for key, reason in same.items()}
    for pair in FORBIDDEN_IDENTICAL:
        reason = same.get(pair)
        if reason is not None and pair not in allowed_pairs:
            return (f"{prefix}splits {pair[0]} and {pair[1]} are the same data ({reason}): {FORBIDDEN_IDENTICAL[pair]}; "
                    "use distinct splits, or declare it with " + allow_hint.format(a=pair[0], b=pair[1]))
    return None
