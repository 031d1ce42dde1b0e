"""Label-free test-time adaptation of one target batch (the audit's Sec. 5 and Suppl. A.12).

All feature-statistics methods act on the features the probe sees. With source statistics ``(mu_s, sd_s)``
(per-feature mean and population std of the source train features the probe was fitted on) and target statistics
``(mu_t, sd_t)`` estimated from the unlabelled batch, a target feature ``x`` is mapped to

    x' = mu_s + sd_s * (x - mu_t) / sd_t

so a head that standardises with the source statistics (every head of
:mod:`prism_plugin.heads.standardised`) sees exactly
``(x - mu_t) / sd_t``, the audit's re-standardisation, and a head without standardisation (the
PRISM ``logistic``) sees the target moved into the source's coordinates. Where ``sd_t`` is 0 in a
feature, ``sd_s`` is used there (the feature is only re-centred).

=============  ====================================================================================
method         target statistics / action
=============  ====================================================================================
``tgtstd``     batch mean and population std (feature BN/AdaBN-style adaptation).
``cbr``        class-balanced re-standardisation: pseudo-labels ``c_hat`` = arg-max of the source
               probe on the unadapted batch; ``mu_t`` = unweighted average of the per-pseudo-class
               means; ``sd_t`` = pooled within-pseudo-class std
               ``sqrt(sum_c sum_{i in c} (x_i - m_c)^2 / sum_c (n_c - 1))``. Empty pseudo-classes are
               omitted; singleton pseudo-classes enter the mean but not the pooled variance (they add
               0 to both sums); if every sample falls in one pseudo-class (or no pseudo-class has two
               members) ``sd_t`` falls back to the source std ``sd_s``.
``cbr_mean``   first-moment-only ablation: CBR's ``mu_t`` with ``sd_t = sd_s``.
``oracle_cb``  CBR with the **true** target labels (labelled upper bound, not deployable).
``bbse``       black-box shift estimation (Lipton et al. 2018): confusion matrix
               ``C[i, j] = P_source(y_hat = i, y = j)`` on the held-out source split, target predicted-
               label distribution ``q``; solve ``C w = q`` (least squares, clipped at 0, normalised so
               ``sum_j w_j p_s(j) = 1``) and re-weight ``p'(y|x) ~ w_y p(y|x)``. Changes predictions,
               never features.
``cbr_bbse``   BBSE applied to the CBR-adapted predictions.
``shot_im``    SHOT's information maximisation on the probe only (the encoder is frozen): the linear
               head ``(W, b)`` is updated by full-batch Adam to minimise
               ``mean_i H(p_i) - H(mean_i p_i)`` (entropy minimisation + diversity) for ``steps``
               steps (default 10, learning rate 1e-3, in the head's own standardised space; full
               batch, closed-form gradient, so deterministic); heads without linear parameters
               (1-NN) report NaN.
=============  ====================================================================================

Every method is a function ``method(X, inputs, *, base_proba, y_true, cache, meta) -> Adapted`` registered
in the adaptation registry (``register_adaptation`` hook; the built-ins by
:mod:`prism_plugin.adaptation.plugin`, in the order of :data:`BUILTIN_METHODS`); :func:`adapt`
dispatches through it, so a plugin's method runs exactly like a built-in. A caller that adapts
many batches resolves the method once (:func:`resolve_method`) and runs it per batch
(:func:`run_method`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from prism_plugin.heads.standardised import head_space, linear_params
from prism_plugin.errors import PrismError
from prism_plugin.metrics.core import softmax

SHOT_STEPS = 10
SHOT_LR = 1e-3
BBSE_EPS = 1e-12


@dataclass(frozen=True)
class Moments:
    """Per-feature location and scale, plus how they were obtained."""

    mean: np.ndarray
    std: np.ndarray
    note: str = ""


def source_moments(X: np.ndarray) -> Moments:
    X = np.asarray(X, dtype=np.float64)
    std = X.std(axis=0)
    std[std == 0] = 1.0
    return Moments(X.mean(axis=0), std, "source train")


def batch_moments(X: np.ndarray) -> Moments:
    """``tgtstd``: the batch's own mean and population std (0 std stays 0: see :func:`restandardise`)."""
    X = np.asarray(X, dtype=np.float64)
    return Moments(X.mean(axis=0), X.std(axis=0), "batch")


def class_balanced_moments(X: np.ndarray, labels: np.ndarray, source_std: np.ndarray,
                           second_moment: bool = True) -> Moments:
    """CBR statistics from (pseudo-)labels, with the audit's edge cases (see module docstring)."""
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    classes = np.unique(labels)  # empty (pseudo-)classes never appear: omitted
    means = np.stack([X[labels == c].mean(axis=0) for c in classes])
    mu = means.mean(axis=0)
    if not second_moment:
        return Moments(mu, np.asarray(source_std, dtype=np.float64), "class-balanced mean, source std")
    if len(classes) < 2:
        return Moments(mu, np.asarray(source_std, dtype=np.float64), "one pseudo-class: source std")
    ss = np.zeros(X.shape[1])
    dof = 0
    for c, m in zip(classes, means):
        rows = X[labels == c]
        if len(rows) < 2:  # singleton: in the mean, not in the variance
            continue
        ss += ((rows - m) ** 2).sum(axis=0)
        dof += len(rows) - 1
    if dof == 0:
        return Moments(mu, np.asarray(source_std, dtype=np.float64), "only singleton pseudo-classes: source std")
    return Moments(mu, np.sqrt(ss / dof), f"{len(classes)} pseudo-classes")


def restandardise(X: np.ndarray, target: Moments, source: Moments) -> np.ndarray:
    """``mu_s + sd_s * (x - mu_t) / sd_t`` (``sd_t`` = 0 -> ``sd_s``)."""
    X = np.asarray(X, dtype=np.float64)
    sd_t = np.where(target.std > 0, target.std, source.std)
    return source.mean + source.std * (X - target.mean) / sd_t


# -- BBSE -----------------------------------------------------------------------------------

def bbse_weights(val_pred: np.ndarray, val_y: np.ndarray, target_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Importance weights ``w_j = p_t(j) / p_s(j)`` from the black-box confusion matrix."""
    val_pred = np.asarray(val_pred, dtype=np.int64)
    val_y = np.asarray(val_y, dtype=np.int64)
    n = len(val_y)
    C = np.zeros((n_classes, n_classes))
    np.add.at(C, (val_pred, val_y), 1.0)
    C /= n
    q = np.bincount(np.asarray(target_pred, dtype=np.int64), minlength=n_classes) / len(target_pred)
    w, *_ = np.linalg.lstsq(C, q, rcond=None)
    w = np.clip(w, 0.0, None)
    p_s = np.bincount(val_y, minlength=n_classes) / n
    mass = float((w * p_s).sum())
    if mass <= 0:
        return np.ones(n_classes)
    return w / mass


def bbse_adjust(proba: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``p'(y|x) ~ w_y p(y|x)`` row-normalised (rows whose weighted mass is 0 stay unchanged)."""
    proba = np.asarray(proba, dtype=np.float64)
    adj = proba * weights[None, :]
    mass = adj.sum(axis=1, keepdims=True)
    return np.where(mass > BBSE_EPS, adj / np.where(mass > BBSE_EPS, mass, 1.0), proba)


# -- SHOT-IM --------------------------------------------------------------------------------

def im_loss_and_grad(Z: np.ndarray, W: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """``mean_i H(p_i) - H(mean_i p_i)`` for ``p = softmax(Z W^T + b)`` and its gradient (closed form).

    With ``H_i`` the entropy of row i and ``pbar`` the mean prediction, the gradient with respect to
    the logits is ``-p_i (log p_i + H_i) / N`` (entropy term) plus
    ``p_i (log pbar - sum_k p_ik log pbar_k) / N`` (diversity term).
    """
    logits = Z @ W.T + b
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    p = np.exp(logp)
    n = len(Z)
    ent_i = -(p * logp).sum(axis=1)
    pbar = p.mean(axis=0)
    log_pbar = np.log(pbar + 1e-12)
    loss = float(ent_i.mean() + (pbar * log_pbar).sum())
    g = (-p * (logp + ent_i[:, None]) + p * (log_pbar[None, :] - (p * log_pbar).sum(axis=1, keepdims=True))) / n
    return loss, g.T @ Z, g.sum(axis=0)


def information_maximisation(Z: np.ndarray, W: np.ndarray, b: np.ndarray, *, steps: int = SHOT_STEPS,
                             lr: float = SHOT_LR, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Adapt a linear head ``softmax(Z W^T + b)`` by minimising ``E[H(p)] - H(E[p])``.

    Full-batch Adam (beta = 0.9, 0.999; eps = 1e-8, PyTorch's defaults) for ``steps`` steps from the
    source head. Full batch makes it deterministic; ``seed`` is accepted for interface symmetry
    with stochastic variants and does not change the result.
    """
    Z = np.asarray(Z, dtype=np.float64)
    params = [np.array(W, dtype=np.float64), np.array(b, dtype=np.float64)]
    m = [np.zeros_like(q) for q in params]
    v = [np.zeros_like(q) for q in params]
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, int(steps) + 1):
        _, gW, gb = im_loss_and_grad(Z, params[0], params[1])
        for i, g in enumerate((gW, gb)):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            params[i] -= lr * (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps)
    return params[0], params[1]


# -- one call per method --------------------------------------------------------------------

@dataclass
class Adapted:
    """Outcome of one method on one batch: probabilities and, for feature methods, the decision."""

    method: str
    proba: np.ndarray | None
    decision: np.ndarray | None = None
    note: str = ""

    @property
    def pred(self) -> np.ndarray | None:
        return None if self.proba is None else self.proba.argmax(axis=1)


@dataclass
class AdaptationInputs:
    """What the methods need besides the batch: the fitted head, source moments, source val outputs."""

    head: Any
    source: Moments
    n_classes: int
    val_pred: np.ndarray | None = None  # head predictions on the held-out source split (BBSE)
    val_y: np.ndarray | None = None
    seed: int = 0
    shot_steps: int = SHOT_STEPS
    shot_lr: float = SHOT_LR
    #: the head's registered kind and its ``linear`` trait (``None``: unknown, probe the head)
    head_kind: str = ""
    head_linear: bool | None = None


def _evaluate(head, X) -> tuple[np.ndarray, np.ndarray]:
    out = head.evaluate(np.asarray(X, dtype=np.float32))
    return np.asarray(out.decision), np.asarray(out.proba, dtype=np.float64)


# -- the built-in methods (registered by :mod:`prism_plugin.adaptation.plugin`; contract:
# docs/extending/register_adaptation.md) -----------------------------------------------------

def tgtstd(X, inputs: AdaptationInputs, *, base_proba, y_true=None, cache=None, meta=None) -> Adapted:
    """Re-standardise with the batch's own mean and std (feature BN / AdaBN-style)."""
    d, p = _evaluate(inputs.head, restandardise(X, batch_moments(X), inputs.source))
    return Adapted("tgtstd", p, d)


def _class_balanced(method: str, X, inputs: AdaptationInputs, base_proba, cache, second_moment: bool) -> Adapted:
    src = inputs.source
    mom = class_balanced_moments(X, base_proba.argmax(axis=1), src.std, second_moment=second_moment)
    d, p = _evaluate(inputs.head, restandardise(X, mom, src))
    if cache is not None:
        cache[("cbr", method)] = (d, p)
    return Adapted(method, p, d, mom.note)


def cbr(X, inputs: AdaptationInputs, *, base_proba, y_true=None, cache=None, meta=None) -> Adapted:
    """Class-balanced re-standardisation from the source probe's pseudo-labels."""
    return _class_balanced("cbr", X, inputs, base_proba, cache, True)


def cbr_mean(X, inputs: AdaptationInputs, *, base_proba, y_true=None, cache=None, meta=None) -> Adapted:
    """CBR's class-balanced mean with the source std (first-moment ablation)."""
    return _class_balanced("cbr_mean", X, inputs, base_proba, cache, False)


def cbr_outputs(X, inputs: AdaptationInputs, base_proba, cache: dict) -> tuple[np.ndarray, np.ndarray]:
    """(decision, proba) of the head on CBR-adapted features, computed once per batch (``cache``)."""
    if ("cbr", "cbr") not in cache:
        cbr(X, inputs, base_proba=base_proba, cache=cache)
    return cache[("cbr", "cbr")]


def oracle_cb(X, inputs: AdaptationInputs, *, base_proba, y_true=None, cache=None, meta=None) -> Adapted:
    """CBR with the true target labels: the labelled upper bound (not deployable)."""
    if y_true is None:
        return Adapted("oracle_cb", None, None, "needs the target labels")
    src = inputs.source
    mom = class_balanced_moments(X, y_true, src.std)
    d, p = _evaluate(inputs.head, restandardise(X, mom, src))
    return Adapted("oracle_cb", p, d, "upper bound: uses target labels")


def _bbse(method: str, probs: np.ndarray, inputs: AdaptationInputs) -> Adapted:
    w = bbse_weights(inputs.val_pred, inputs.val_y, probs.argmax(axis=1), inputs.n_classes)
    return Adapted(method, bbse_adjust(probs, w), None, "w=" + ",".join(f"{v:.3g}" for v in w))


def bbse(X, inputs: AdaptationInputs, *, base_proba, y_true=None, cache=None, meta=None) -> Adapted:
    """Black-box shift estimation: re-weight the probabilities by the estimated prior ratio."""
    if inputs.val_pred is None or inputs.val_y is None:
        return Adapted("bbse", None, None, "needs a held-out source split (val)")
    return _bbse("bbse", base_proba, inputs)


def cbr_bbse(X, inputs: AdaptationInputs, *, base_proba, y_true=None, cache=None, meta=None) -> Adapted:
    """BBSE on the CBR-adapted probabilities (CBR reused through ``cache``)."""
    if inputs.val_pred is None or inputs.val_y is None:
        return Adapted("cbr_bbse", None, None, "needs a held-out source split (val)")
    cache = {} if cache is None else cache
    return _bbse("cbr_bbse", cbr_outputs(X, inputs, base_proba, cache)[1], inputs)


def shot_im(X, inputs: AdaptationInputs, *, base_proba, y_true=None, cache=None, meta=None) -> Adapted:
    """SHOT's information maximisation on the linear head (encoder frozen)."""
    head = inputs.head
    name = inputs.head_kind or getattr(head, "kind", type(head).__name__)
    if inputs.head_linear is False:
        return Adapted("shot_im", None, None, f"head {name} is not linear (a head registered with linear=True "
                                              "offers linear_params())")
    params = linear_params(head)
    if params is None:
        return Adapted("shot_im", None, None, f"head {name} is not linear")
    W, b = params
    Z = head_space(head, np.asarray(X, dtype=np.float32))
    W2, b2 = information_maximisation(Z, W, b, steps=inputs.shot_steps, lr=inputs.shot_lr, seed=inputs.seed)
    return Adapted("shot_im", softmax(Z @ W2.T + b2), None)


#: The built-in methods in their registration order (the column order of ``runs.csv``): name ->
#: (function, needs target labels). Registered by :func:`prism_plugin.adaptation.plugin.register_adaptation`.
BUILTIN_METHODS = {
    "tgtstd": (tgtstd, False),
    "cbr": (cbr, False),
    "cbr_mean": (cbr_mean, False),
    "bbse": (bbse, False),
    "cbr_bbse": (cbr_bbse, False),
    "shot_im": (shot_im, False),
    "oracle_cb": (oracle_cb, True),
}


@dataclass(frozen=True)
class Method:
    """A registered adaptation method, looked up once (:func:`resolve_method`)."""

    name: str
    fn: Callable[..., Adapted]
    origin: str = ""
    needs_labels: bool = False


def resolve_method(method: str, host=None) -> Method:
    """The adaptation ``method`` (a name or alias) of the registry of ``host`` (default: the shared
    host); an unknown name raises :class:`~prism_plugin.errors.UnknownNameError`, an entry that is
    not a method (an analysis, a diagnostic) a :class:`~prism_plugin.errors.PrismError`."""
    from prism_plugin.plugins import host_or_shared

    registry = host_or_shared(host).adaptation
    entry = registry.entry(method)
    role = entry.meta.get("role", "method")
    if role != "method":
        raise PrismError(f"adaptation {entry.name!r} is an {role}, not a method: it has no adapt step")
    return Method(entry.name, registry.get(entry.name), entry.origin, bool(entry.meta.get("needs_labels")))


def run_method(method: Method, X: np.ndarray, inputs: AdaptationInputs, *, base_proba: np.ndarray | None = None,
               y_true: np.ndarray | None = None, cache: dict | None = None,
               meta: Mapping[str, Any] | None = None) -> Adapted:
    """Apply a resolved method to the target batch ``X``; ``y_true`` reaches it only when it was registered with
    ``needs_labels=True`` (``oracle_cb``); ``meta`` (the task keys) read-only. Its output is checked."""
    cache = {} if cache is None else cache
    if base_proba is None:
        base_proba = _evaluate(inputs.head, X)[1]
    labels = y_true if method.needs_labels else None
    try:
        out = method.fn(X, inputs, base_proba=base_proba, y_true=labels, cache=cache,
                        meta=MappingProxyType(dict(meta or {})))
    except PrismError:
        raise
    except Exception as exc:
        raise PrismError(f"adaptation method {method.name!r} (registered by {method.origin}) failed: "
                         f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(out, Adapted):
        raise PrismError(f"adaptation method {method.name!r} (registered by {method.origin}) returned a "
                         f"{type(out).__name__}; return prism_plugin.adaptation.tta.Adapted(name, proba, decision)")
    if out.proba is not None:
        proba = np.asarray(out.proba, dtype=np.float64)
        if proba.shape != (len(X), inputs.n_classes):
            raise PrismError(f"adaptation method {method.name!r} (registered by {method.origin}) returned "
                             f"probabilities of shape {proba.shape}, expected {(len(X), inputs.n_classes)}")
        out.proba = proba
    out.method = method.name
    return out


def adapt(method: str, X: np.ndarray, inputs: AdaptationInputs, *, base_proba: np.ndarray | None = None,
          y_true: np.ndarray | None = None, cache: dict | None = None, meta: Mapping[str, Any] | None = None,
          host=None) -> Adapted:
    """Apply the registered adaptation ``method`` to the target batch ``X``: :func:`resolve_method`
    in the registry of ``host`` (default: the shared host), then :func:`run_method`."""
    return run_method(resolve_method(method, host), X, inputs, base_proba=base_proba, y_true=y_true, cache=cache,
                      meta=meta)
