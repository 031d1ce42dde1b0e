"""Label-free encoder selection (the audit's Suppl. A.10-A.11).

Per encoder, from the source probe on the **unlabelled** target (higher = predicted better):

===============  =================================================================================
``conf``         mean max-softmax probability
``neg_ent``      minus the mean per-sample prediction entropy (nats)
``neg_shift``    minus the RMS first-moment shift: ``-sqrt(mean_d ((mean_t,d - mu_s,d) / sd_s,d)^2)``,
                 in source-standardised units so encoders of different width are comparable
``neg_predKL``   minus ``KL(q || p_s)``: q = predicted-label frequencies on the target, p_s = the
                 source training prior (terms with q = 0 are 0)
``marg_ent``     entropy of the marginal prediction ``H(mean_i p_i)`` (prediction diversity)
``consensus``    mean pairwise prediction agreement of the encoder with every other encoder on the
                 same target examples
``agl_acc``      agreement-on-the-line style estimate: clean (in-domain) accuracy times the ratio of
                 the encoder's mean agreement with the others on the target to that on the in-domain
                 held-out split
===============  =================================================================================

Across encoders: Spearman of each score with the true target macro-F1 and the **selection regret**
= best true macro-F1 minus the true macro-F1 of the encoder the score picks (ties: the first encoder
in sorted name order). ``id_acc`` (selecting by in-domain accuracy) is scored the same way.
"""

from __future__ import annotations

from itertools import combinations
from typing import Mapping, Sequence

import numpy as np

PER_RUN = ("conf", "neg_ent", "neg_shift", "neg_predKL", "marg_ent")


def _entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return -terms.sum(axis=axis)


def conf(proba: np.ndarray) -> float:
    return float(np.asarray(proba).max(axis=1).mean())


def neg_ent(proba: np.ndarray) -> float:
    return float(-_entropy(proba, axis=1).mean())


def marg_ent(proba: np.ndarray) -> float:
    return float(_entropy(np.asarray(proba, dtype=np.float64).mean(axis=0)))


def neg_shift(X_target: np.ndarray, source_mean: np.ndarray, source_std: np.ndarray) -> float:
    d = (np.asarray(X_target, dtype=np.float64).mean(axis=0) - source_mean) / source_std
    return float(-np.sqrt(np.mean(d ** 2)))


def neg_pred_kl(pred: np.ndarray, source_prior: np.ndarray) -> float:
    p = np.asarray(source_prior, dtype=np.float64)
    q = np.bincount(np.asarray(pred, dtype=np.int64), minlength=len(p)) / len(pred)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0) / np.where(p > 0, p, 1e-300)), 0.0)
    return float(-terms.sum())


def per_run_scores(proba: np.ndarray, X_target: np.ndarray | None, source_mean: np.ndarray | None,
                   source_std: np.ndarray | None, source_prior: np.ndarray) -> dict[str, float]:
    """The five per-encoder scores (``neg_shift`` NaN without features)."""
    proba = np.asarray(proba, dtype=np.float64)
    return {
        "conf": conf(proba),
        "neg_ent": neg_ent(proba),
        "neg_shift": (neg_shift(X_target, source_mean, source_std) if X_target is not None else float("nan")),
        "neg_predKL": neg_pred_kl(proba.argmax(axis=1), source_prior),
        "marg_ent": marg_ent(proba),
    }


def agreement_matrix(preds: Mapping[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    names = sorted(preds)
    n = len(names)
    A = np.eye(n)
    for i, j in combinations(range(n), 2):
        a = float(np.mean(np.asarray(preds[names[i]]) == np.asarray(preds[names[j]])))
        A[i, j] = A[j, i] = a
    return names, A


def consensus(preds: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Mean agreement of each encoder with every other one (NaN with fewer than two encoders)."""
    names, A = agreement_matrix(preds)
    n = len(names)
    if n < 2:
        return {k: float("nan") for k in names}
    return {k: float((A[i].sum() - 1.0) / (n - 1)) for i, k in enumerate(names)}


def agl_acc(id_accuracy: Mapping[str, float], preds_id: Mapping[str, np.ndarray],
            preds_target: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``acc_id * consensus_target / consensus_id`` per encoder."""
    c_t = consensus(preds_target)
    c_i = consensus(preds_id)
    out = {}
    for k in c_t:
        ci = c_i.get(k, float("nan"))
        out[k] = float(id_accuracy[k] * c_t[k] / ci) if (np.isfinite(ci) and ci > 0) else float("nan")
    return out


def _clean(scores: Mapping[str, float], truth: Mapping[str, float]) -> list[str]:
    return sorted(k for k in scores if k in truth and np.isfinite(scores[k]) and np.isfinite(truth[k]))


def spearman(scores: Mapping[str, float], truth: Mapping[str, float]) -> float:
    """Spearman rho across encoders (NaN with fewer than 3 encoders or a constant input)."""
    from scipy.stats import spearmanr
    names = _clean(scores, truth)
    if len(names) < 3:
        return float("nan")
    a = np.array([scores[k] for k in names])
    b = np.array([truth[k] for k in names])
    if np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    return float(spearmanr(a, b).statistic)


def select(scores: Mapping[str, float]) -> str | None:
    """Highest score; ties to the first name in sorted order; None when nothing is finite."""
    names = sorted(k for k in scores if np.isfinite(scores[k]))
    if not names:
        return None
    best = max(scores[k] for k in names)
    return next(k for k in names if scores[k] == best)


def regret(scores: Mapping[str, float], truth: Mapping[str, float]) -> tuple[float, str | None, str | None]:
    """(oracle truth - truth of the selected encoder, selected, oracle)."""
    names = _clean(scores, truth)
    if not names:
        return float("nan"), None, None
    chosen = select({k: scores[k] for k in names})
    oracle = select({k: truth[k] for k in names})
    return float(truth[oracle] - truth[chosen]), chosen, oracle


def evaluate_selectors(score_table: Mapping[str, Mapping[str, float]], truth: Mapping[str, float],
                       selectors: Sequence[str] | None = None) -> list[dict]:
    """One row per selector: n encoders, Spearman vs truth, selected encoder, oracle, regret."""
    rows = []
    for s in (selectors or sorted(score_table)):
        scores = score_table.get(s, {})
        r, chosen, oracle = regret(scores, truth)
        rows.append({"selector": s, "n_models": len(_clean(scores, truth)), "spearman": spearman(scores, truth),
                     "selected": chosen, "oracle": oracle, "regret": r})
    return rows
