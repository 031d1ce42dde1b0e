"""Statistics and diagnostics of the audit (Sec. 5.1, Suppl. A.1-A.3, A.9, A.12.6).

* :func:`spearman_ci` - Spearman rho between in-domain and target scores across encoders, with a percentile
  bootstrap CI over encoders (resamples whose ranks are constant are skipped).
* :func:`paired_bootstrap_f1` - paired bootstrap of a macro-F1 difference on shared examples: resample the target
  examples with replacement (B = 4000 by default), recompute both encoders' macro-F1 on the same resample (averaged
  over source-split seeds when given ``(S, N)`` predictions), take the difference; percentile CI and a two-sided
  bootstrap p.
* :func:`mean_ci` - the mean of per-split values (the five source splits) with a percentile bootstrap CI over them
  (a single split: the CI is the point).
* :func:`effective_robustness` - the least-squares line of target on in-domain score over encoders, each encoder's
  residual from it (effective robustness), and whether the in-domain spread is too small for the line to mean
  anything (:data:`ER_MIN_SD`).
* :func:`hierarchical_bootstrap` - a two-level bootstrap of a mean over a scenarios x encoders table: resample
  scenarios, then encoders within each resampled scenario.
* :func:`domain_decodability` - can a linear classifier tell the domains (scanners) apart on a sample with equal
  class composition across domains (standardisation fitted on the training part only, 70/30 split, repeated draws),
  within a single class at a time, and with shuffled domain labels (permutation baseline)?
* :func:`between_domain_directions` / :func:`subspace_projection` - remove the top-k label-free between-domain
  directions (principal directions of the domain means in source-standardised space), retrain the source probe and
  report the change of in-domain and target macro-F1.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from prism_plugin.metrics.core import f1_macro

BOOTSTRAP_B = 4000


def _percentile_ci(values: np.ndarray, alpha: float) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(v, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


# -- rank transfer ----------------------------------------------------------------------------

def spearman_ci(x: Sequence[float], y: Sequence[float], *, B: int = BOOTSTRAP_B, seed: int = 0,
                alpha: float = 0.05) -> dict[str, float]:
    """Spearman rho of x vs y with a bootstrap CI over the paired items (encoders)."""
    from scipy.stats import rankdata
    from scipy.stats import spearmanr
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = len(x)
    out = {"n": n, "rho": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")}
    if n < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return out
    out["rho"] = float(spearmanr(x, y).statistic)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(B, n))
    rx = rankdata(x[idx], axis=1)
    ry = rankdata(y[idx], axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx ** 2).sum(axis=1) * (ry ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho_b = np.where(den > 0, (rx * ry).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)
    out["ci_low"], out["ci_high"] = _percentile_ci(rho_b, alpha)
    return out


# -- paired bootstrap of macro-F1 -------------------------------------------------------------

def macro_f1(y: np.ndarray, pred: np.ndarray) -> float:
    """Macro-F1 exactly as ``sklearn.metrics.f1_score(average="macro", zero_division=0)`` (classes =
    union of the observed true and predicted labels), without its input-validation overhead."""
    y = np.asarray(y, dtype=np.int64)
    pred = np.asarray(pred, dtype=np.int64)
    if y.size == 0:
        return 0.0
    k = int(max(y.max(), pred.max())) + 1
    tp = np.bincount(y[y == pred], minlength=k).astype(np.float64)
    denom = np.bincount(y, minlength=k) + np.bincount(pred, minlength=k)
    present = denom > 0
    return float(np.sum(2 * tp[present] / denom[present]) / present.sum())


def _weighted_macro_f1(y: np.ndarray, pred: np.ndarray, W: np.ndarray, n_classes: int) -> np.ndarray:
    """Macro-F1 for each row of resample counts ``W`` (B, N), over the classes present (sklearn's rule)."""
    Y = np.eye(n_classes)[y]
    P = np.eye(n_classes)[pred]
    tp = W @ (Y * P)
    support = W @ Y
    predicted = W @ P
    denom = support + predicted
    present = denom > 0
    f1 = np.where(present, 2 * tp / np.where(present, denom, 1.0), 0.0)
    return f1.sum(axis=1) / present.sum(axis=1)


def paired_bootstrap_f1(y: np.ndarray, pred_a: np.ndarray, pred_b: np.ndarray, *, B: int = BOOTSTRAP_B,
                        seed: int = 0, alpha: float = 0.05, chunk: int = 500) -> dict[str, float]:
    """Bootstrap CI of macro-F1(a) - macro-F1(b) on shared examples.

    ``pred_a`` / ``pred_b`` are ``(N,)`` or ``(S, N)`` (S source-split seeds, averaged inside each
    resample, as the audit's A.9).
    """
    y = np.asarray(y, dtype=np.int64)
    A = np.atleast_2d(np.asarray(pred_a, dtype=np.int64))
    Bp = np.atleast_2d(np.asarray(pred_b, dtype=np.int64))
    n = len(y)
    if A.shape[1] != n or Bp.shape[1] != n:
        raise ValueError("predictions and labels must cover the same examples")
    k = int(max(y.max(), A.max(), Bp.max())) + 1
    point = float(np.mean([f1_macro(y, a) for a in A]) - np.mean([f1_macro(y, b) for b in Bp]))
    rng = np.random.default_rng(seed)
    diffs = np.empty(B)
    # one product per chunk for every prediction row: [Y | Y*P_1 | P_1 | Y*P_2 | P_2 | ...] (the
    # counts are integers, so the sums are exact and equal _weighted_macro_f1's row by row)
    eye = np.eye(k)
    Y = eye[y]
    rows = list(A) + list(Bp)
    M = np.concatenate([Y] + [part for r in rows for part in (Y * eye[r], eye[r])], axis=1)
    for start in range(0, B, chunk):
        m = min(chunk, B - start)
        W = rng.multinomial(n, np.full(n, 1.0 / n), size=m).astype(np.float64)
        R = W @ M
        support = R[:, :k]
        f1s = []
        for i in range(len(rows)):
            tp = R[:, k * (1 + 2 * i): k * (2 + 2 * i)]
            denom = support + R[:, k * (2 + 2 * i): k * (3 + 2 * i)]
            present = denom > 0
            f1 = np.where(present, 2 * tp / np.where(present, denom, 1.0), 0.0)
            f1s.append(f1.sum(axis=1) / present.sum(axis=1))
        fa = np.mean(f1s[:len(A)], axis=0)
        fb = np.mean(f1s[len(A):], axis=0)
        diffs[start:start + m] = fa - fb
    lo, hi = _percentile_ci(diffs, alpha)
    p = float(min(1.0, 2 * min(np.mean(diffs <= 0), np.mean(diffs >= 0))))
    return {"diff": point, "ci_low": lo, "ci_high": hi, "p_boot": p, "B": int(B), "n": n,
            "excludes_zero": bool(lo > 0 or hi < 0)}


# -- CI over source splits --------------------------------------------------------------------

def mean_ci(values: Sequence[float], *, B: int = BOOTSTRAP_B, seed: int = 0, alpha: float = 0.05
            ) -> dict[str, float]:
    """Mean of ``values`` (one per source split) with a percentile bootstrap CI over them.

    NaNs are dropped; one value gives ``ci_low == ci_high == mean``; none gives NaNs.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return {"mean": float("nan"), "ci_low": float("nan"), "ci_high": float("nan"), "n": 0}
    mean = float(v.mean())
    if n == 1 or np.all(v == v[0]):
        return {"mean": mean, "ci_low": mean, "ci_high": mean, "n": n}
    rng = np.random.default_rng(seed)
    boot = v[rng.integers(0, n, size=(int(B), n))].mean(axis=1)
    lo, hi = _percentile_ci(boot, alpha)
    return {"mean": mean, "ci_low": lo, "ci_high": hi, "n": n}


# -- effective robustness ---------------------------------------------------------------------

#: below this standard deviation of the in-domain scores over encoders the fitted line is ill-posed
#: (the audit's frozen encoders have in-domain macro-F1 0.98-0.997, an SD of about 0.005): the
#: residuals are still reported, with a caveat, never as a plain result
ER_MIN_SD = 0.01


def effective_robustness(x: Sequence[float], y: Sequence[float], *, min_sd: float = ER_MIN_SD) -> dict:
    """Least-squares line ``y = a + b x`` over encoders (x: in-domain, y: target macro-F1, linear scale).

    Returns ``line`` (fitted y per item, NaN where x or y is NaN), ``residual`` (y - line: the
    effective robustness), ``slope``, ``intercept``, ``x_spread`` (the population SD of x), ``n``
    and ``caveat`` (empty, or why the line is ill-posed: fewer than 3 encoders, or x SD < ``min_sd``;
    with no x spread at all the line is the mean of y).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    n = int(ok.sum())
    line = np.full(x.shape, np.nan)
    out: dict = {"line": line, "residual": np.full(x.shape, np.nan), "slope": float("nan"),
                 "intercept": float("nan"), "x_spread": float("nan"), "n": n, "caveat": ""}
    if n == 0:
        out["caveat"] = "no encoder with both in-domain and target scores"
        return out
    xs, ys = x[ok], y[ok]
    sd = float(xs.std())
    out["x_spread"] = sd
    if sd > 0 and n >= 2:
        b = float(np.mean((xs - xs.mean()) * (ys - ys.mean())) / sd ** 2)
        a = float(ys.mean() - b * xs.mean())
    else:
        b, a = float("nan"), float(ys.mean())
    line[ok] = a + (0.0 if not np.isfinite(b) else b) * xs
    out.update(slope=float(b), intercept=float(a), line=line, residual=np.where(ok, y - line, np.nan))
    notes = []
    if n < 3:
        notes.append(f"only {n} encoder(s): a line through fewer than 3 points says nothing")
    if sd < min_sd:
        notes.append(f"in-domain macro-F1 spread is tiny (SD {sd:.4f} < {min_sd:g}): the line is ill-posed "
                     "(no x spread) and the residual re-encodes the target ranking, not robustness beyond the line")
    out["caveat"] = "; ".join(notes)
    return out


# -- hierarchical bootstrap -------------------------------------------------------------------

def hierarchical_bootstrap(table: np.ndarray, *, B: int = BOOTSTRAP_B, seed: int = 0,
                           alpha: float = 0.05) -> dict[str, float]:
    """Mean of a (scenarios, encoders) table with a two-level (scenarios, then encoders) bootstrap CI."""
    G = np.asarray(table, dtype=np.float64)
    if G.ndim != 2 or G.size == 0:
        raise ValueError("need a non-empty (scenarios, encoders) table")
    s, e = G.shape
    rng = np.random.default_rng(seed)
    means = np.empty(B)
    for start in range(0, B, 500):
        m = min(500, B - start)
        si = rng.integers(0, s, size=(m, s))
        ei = rng.integers(0, e, size=(m, s, e))
        vals = G[si[:, :, None], ei]
        means[start:start + m] = np.nanmean(vals.reshape(m, -1), axis=1)
    lo, hi = _percentile_ci(means, alpha)
    return {"mean": float(np.nanmean(G)), "ci_low": lo, "ci_high": hi, "n_scenarios": s, "n_encoders": e,
            "B": int(B)}


# -- domain (scanner) decodability ------------------------------------------------------------

def _balanced_sample(domains: Sequence[tuple[np.ndarray, np.ndarray]], rng, per_class: int | None,
                     classes: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    Xs, ds, cs = [], [], []
    for c in classes:
        n_c = min(int(np.sum(np.asarray(y) == c)) for _, y in domains)
        if per_class is not None:
            n_c = min(n_c, per_class)
        if n_c == 0:
            continue
        for d, (X, y) in enumerate(domains):
            pool = np.flatnonzero(np.asarray(y) == c)
            pick = rng.choice(pool, size=n_c, replace=False)
            Xs.append(np.asarray(X[pick], dtype=np.float64))
            ds.append(np.full(n_c, d))
            cs.append(np.full(n_c, c))
    if not Xs:
        return np.zeros((0, domains[0][0].shape[1])), np.zeros(0, int), np.zeros(0, int)
    return np.concatenate(Xs), np.concatenate(ds), np.concatenate(cs)


def _fit_score(X: np.ndarray, target: np.ndarray, strata: np.ndarray, seed: int, test_size: float) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    counts = np.unique(strata, return_counts=True)[1]
    strat = strata if counts.min() >= 2 else None
    tr, te = train_test_split(np.arange(len(target)), test_size=test_size, random_state=seed, stratify=strat)
    if len(np.unique(target[tr])) < 2:
        return float("nan")
    mu = X[tr].mean(axis=0)
    sd = X[tr].std(axis=0)
    sd[sd == 0] = 1.0
    clf = LogisticRegression(max_iter=1000)
    clf.fit((X[tr] - mu) / sd, target[tr])
    return float(np.mean(clf.predict((X[te] - mu) / sd) == target[te]))


def domain_decodability(domains: Sequence[tuple[np.ndarray, np.ndarray]], *, draws: int = 5, seed: int = 0,
                        per_class: int | None = None, test_size: float = 0.3,
                        min_within: int = 10) -> dict[str, float]:
    """Domain decodability on a class-balanced sample, within one class, and with shuffled labels.

    ``domains`` is a list of ``(features, class labels)``, one per domain. Returns mean accuracies over ``draws``:
    ``domain_acc`` (all classes, equal composition across domains), ``within_class_acc`` (mean over classes with at
    least ``min_within`` samples per domain), ``permutation_acc`` (domain labels shuffled before the split),
    ``class_acc`` (the class, decoded on the same sample) and ``chance`` = 1 / number of domains.
    """
    if len(domains) < 2:
        raise ValueError("domain decodability needs at least two domains")
    classes = sorted(set.intersection(*[set(np.unique(y).tolist()) for _, y in domains]))
    rng = np.random.default_rng(seed)
    res = {"domain_acc": [], "within_class_acc": [], "permutation_acc": [], "class_acc": []}
    n_sample = 0
    for r in range(draws):
        X, d, c = _balanced_sample(domains, rng, per_class, classes)
        n_sample = len(d)
        if n_sample == 0:
            break
        strata = d * 100_000 + c
        res["domain_acc"].append(_fit_score(X, d, strata, seed + r, test_size))
        res["class_acc"].append(_fit_score(X, c, strata, seed + r, test_size) if len(np.unique(c)) > 1 else np.nan)
        res["permutation_acc"].append(_fit_score(X, rng.permutation(d), strata, seed + r, test_size))
        within = []
        for cls in np.unique(c):
            rows = c == cls
            if np.min(np.bincount(d[rows], minlength=len(domains))) >= min_within:
                within.append(_fit_score(X[rows], d[rows], d[rows], seed + r, test_size))
        res["within_class_acc"].append(np.nanmean(within) if within else np.nan)
    out = {k: (float(np.nanmean(v)) if len(v) and np.isfinite(v).any() else float("nan")) for k, v in res.items()}
    out["chance"] = 1.0 / len(domains)
    out["n_per_draw"] = int(n_sample)
    return out


# -- between-domain subspace projection -------------------------------------------------------

def between_domain_directions(domain_features: Sequence[np.ndarray], k: int, mean: np.ndarray,
                              std: np.ndarray) -> np.ndarray:
    """Top-k (at most n_domains - 1) principal directions of the domain means, source-standardised space.

    Returns an orthonormal ``(k, D)`` matrix; label-free.
    """
    means = np.stack([((np.asarray(X, dtype=np.float64) - mean) / std).mean(axis=0) for X in domain_features])
    centred = means - means.mean(axis=0)
    k = int(min(k, len(domain_features) - 1))
    if k < 1:
        return np.zeros((0, len(mean)))
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    keep = [i for i in range(k) if s[i] > 1e-12 * max(s[0], 1e-300)]
    return vt[keep]


def project_out(X: np.ndarray, U: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Standardise with the source moments and remove the span of ``U``."""
    Z = (np.asarray(X, dtype=np.float64) - mean) / std
    return Z - (Z @ U.T) @ U if len(U) else Z


def subspace_projection(source_train: tuple[np.ndarray, np.ndarray],
                        evaluations: dict[str, tuple[np.ndarray, np.ndarray]],
                        make_head: Callable[[], object], *, k: int = 3,
                        domain_features: Sequence[np.ndarray] | None = None) -> dict[str, float]:
    """Macro-F1 of a fresh head on each evaluation split, before and after removing k directions.

    ``domain_features`` (unlabelled, one matrix per domain) give the directions; default: the source
    train features and every evaluation split's features. Keys: ``f1_<name>_before``,
    ``f1_<name>_after``, ``delta_<name>`` and ``k``.
    """
    Xs, ys = source_train
    Xs = np.asarray(Xs, dtype=np.float64)
    mean = Xs.mean(axis=0)
    std = Xs.std(axis=0)
    std[std == 0] = 1.0
    feats = list(domain_features) if domain_features is not None else [Xs] + [v[0] for v in evaluations.values()]
    U = between_domain_directions(feats, k, mean, std)
    out: dict[str, float] = {"k": int(len(U))}
    before = make_head().fit(((Xs - mean) / std).astype(np.float32), ys)
    after = make_head().fit(project_out(Xs, U, mean, std).astype(np.float32), ys)
    for name, (X, y) in evaluations.items():
        f_b = f1_macro(y, before.evaluate(((np.asarray(X, np.float64) - mean) / std).astype(np.float32)).proba.argmax(1))
        f_a = f1_macro(y, after.evaluate(project_out(X, U, mean, std).astype(np.float32)).proba.argmax(1))
        out[f"f1_{name}_before"] = f_b
        out[f"f1_{name}_after"] = f_a
        out[f"delta_{name}"] = f_a - f_b
    return out
