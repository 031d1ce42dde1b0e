"""A converged torch solver for the PRISM logistic probe (``probe.backend: torch``).

It minimises the objective scikit-learn's ``LogisticRegression(C)`` minimises with the lbfgs solver (scikit-learn
1.9, ``linear_model/_logistic.py``)::

    f(W, b) = mean_i loss_i(W x_i + b) + ||W||_F^2 / (2 C n)

which is scikit-learn's ``C * sum_i loss_i + ||W||^2 / 2`` divided by ``C n``, the scaling its gradient tolerance
``tol`` refers to. The intercept ``b`` is not penalised; ``loss`` is the binary log-loss with one weight row for K
= 2 and the multinomial cross-entropy with K rows for K > 2.

What differs from scikit-learn is how far and how fast it is solved, not what is solved:

* it stops at ``max |grad f| <= tol`` (scikit-learn's ``gtol`` criterion, same scaling) with a tight default,
  :data:`DEFAULT_TOL` = 1e-8, so it reaches the optimum that ``tol = 1e-4`` only approaches;
* L-BFGS is preconditioned with ``alpha E[x x^T] + lambda I`` estimated on a row sample (``alpha`` = 1/4 binary,
  1/K multinomial: the Hessian at the start), which removes most of the ill-conditioning of foundation-model
  embeddings (a large shared mean direction, a power-law spectrum): tens of iterations instead of hundreds;
* the gradient is written by hand as ``(G^T X)^T`` over row chunks (no autograd). The features stay float32 and are
  never copied on the CPU; each chunk's product runs in float32 and is accumulated in float64; parameters, logits,
  losses and the optimiser state are float64. The logits are updated along the search direction (``z += t X d``) so
  their precision follows the step size, and they are recomputed exactly (``W`` split into two float32 parts) every
  :data:`REFRESH` iterations and before convergence is declared;
* the line search works on the slope of the (convex) objective along the search direction, which float32 products
  resolve far below the rounding of f itself, so the fit keeps progressing where an Armijo test only sees noise;
* it runs on CUDA when present (TF32 disabled during the fit), else the CPU.

The result is deterministic for a given device, thread count and input.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

#: Default gradient tolerance (max-abs gradient of the scaled objective).
DEFAULT_TOL = 1e-8
#: Rows of the feature sample the preconditioner is estimated on.
PRECONDITIONER_ROWS = 4096
#: L-BFGS memory.
HISTORY = 10
#: Iterations between exact recomputations of the logits.
REFRESH = 20


@dataclass
class TorchFit:
    """A fitted probe: ``coef`` (K' x D) and ``intercept`` (K') in float64, K' = 1 for K = 2."""

    coef: np.ndarray
    intercept: np.ndarray
    n_iter: int
    n_passes: int
    grad_max: float
    converged: bool
    device: str
    #: the largest change of a training logit in the last step (how much the fit was still moving)
    step_max: float = float("nan")
    #: ``certify=True``: a certified bound on ``|x~ . (theta - theta*)|`` for rows no longer than the
    #: longest training row (binary only; ``inf`` where strong convexity cannot certify one, NaN untried)
    decision_bound: float = float("nan")


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``auto``: CUDA when torch sees a GPU, else the CPU."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("probe device 'cuda' requested but torch sees no CUDA device; use 'auto' or 'cpu'")
    return dev


@contextmanager
def _exact_fp32(device: torch.device) -> Iterator[None]:
    """Full-precision float32 matmuls (no TF32 / bf16 shortcuts) while fitting; settings restored."""
    old_precision = torch.get_float32_matmul_precision()
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old_precision)
        torch.backends.cuda.matmul.allow_tf32 = old_tf32


def _as_tensor(X: np.ndarray, device: torch.device) -> torch.Tensor:
    """float32 features as a tensor: shared memory on the CPU, one copy on a GPU."""
    X = np.asarray(X)
    if X.dtype != np.float32:
        raise TypeError(f"features must be float32, got {X.dtype}")
    if not X.flags.c_contiguous:
        X = np.ascontiguousarray(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only memory maps are never written
        t = torch.from_numpy(X)
    return t.to(device) if device.type != "cpu" else t


def _chunk_rows(n_features: int, device: torch.device) -> int:
    """Rows per chunk of the gradient product: ~64 MiB of features (~256 MiB on a GPU).

    Each chunk's float32 product is accumulated in float64; chunks are large because every torch call is a parallel
    region, which costs dearly on a busy CPU.
    """
    budget = (256 if device.type == "cuda" else 64) * 2**20
    return max(1024, budget // (4 * max(1, n_features)))


class _Problem:
    """The data of one fit and the passes over it."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor, n_classes: int, C: float):
        self.X, self.y = X, y
        self.n, self.d = X.shape
        self.binary = n_classes == 2
        self.k = 1 if self.binary else n_classes
        self.lam = 1.0 / (C * self.n)
        self.chunk = _chunk_rows(self.d, X.device)
        self.passes = 0
        self.dev = X.device
        self.rows = torch.arange(self.n, device=self.dev)
        self.yf = y.to(torch.float64) if self.binary else None

    def _forward(self, Wt32: torch.Tensor) -> torch.Tensor:
        # one product over all rows: each logit is a sum over the D features only
        self.passes += 1
        return (self.X @ Wt32).to(torch.float64)

    def logits(self, theta: torch.Tensor) -> torch.Tensor:
        """``X W^T + b`` with W resolved to ~1e-14 (split into float32 hi + lo)."""
        W, b = theta[:, :-1], theta[:, -1]
        hi = W.to(torch.float32)
        lo = (W - hi.to(torch.float64)).to(torch.float32)
        zz = self._forward(torch.cat([hi, lo]).T.contiguous())
        return zz[:, :self.k] + zz[:, self.k:] + b

    def along(self, direction: torch.Tensor) -> torch.Tensor:
        """``X d_W^T + d_b``: how the logits change per unit step along ``direction``."""
        return self._forward(direction[:, :-1].to(torch.float32).T.contiguous()) + direction[:, -1]

    def value_grad(self, theta: torch.Tensor, z: torch.Tensor) -> tuple[float, torch.Tensor]:
        """f and grad f at ``theta`` whose logits are ``z``."""
        W = theta[:, :-1]
        if self.binary:
            z1 = z[:, 0]
            # log(1 + e^z) - y z and its derivative sigmoid(z) - y
            loss = torch.logaddexp(torch.zeros_like(z1), z1).sum() - (self.yf * z1).sum()
            G = (torch.sigmoid(z1) - self.yf).unsqueeze(1)
        else:
            lse = torch.logsumexp(z, dim=1)
            loss = lse.sum() - z[self.rows, self.y].sum()
            G = torch.exp(z - lse.unsqueeze(1))
            G[self.rows, self.y] -= 1.0
        G32 = G.to(torch.float32)
        gW = torch.zeros((self.k, self.d), dtype=torch.float64, device=self.dev)
        self.passes += 1
        for a in range(0, self.n, self.chunk):
            gW += (G32[a:a + self.chunk].T @ self.X[a:a + self.chunk]).to(torch.float64)
        grad = torch.empty_like(theta)
        grad[:, :-1] = gW / self.n + self.lam * W
        grad[:, -1] = G.sum(dim=0) / self.n
        f = float(loss) / self.n + 0.5 * self.lam * float((W * W).sum())
        return f, grad


class _Preconditioner:
    """``(alpha E[x~ x~^T] + lambda I_W)^-1`` applied to each row of [W | b], x~ = [x, 1]."""

    def __init__(self, X: torch.Tensor, alpha: float, lam: float, rows: int | None = None):
        n, d = X.shape
        dev = X.device
        rows = PRECONDITIONER_ROWS if rows is None else rows
        idx = torch.linspace(0, n - 1, min(n, rows), device=dev).round().long().unique()
        m = idx.numel()
        S = torch.zeros((d + 1, d + 1), dtype=torch.float64, device=dev)
        step = _chunk_rows(d, dev)
        for a in range(0, m, step):
            Xc = X.index_select(0, idx[a:a + step])
            S[:d, :d] += (Xc.T @ Xc).to(torch.float64)
            S[:d, d] += Xc.sum(dim=0, dtype=torch.float64)
        S[d, :d] = S[:d, d]
        S[d, d] = m
        S *= alpha / m
        S.diagonal()[:d] += lam
        S.diagonal().add_(1e-10 * float(S.diagonal().mean()))
        inv = torch.cholesky_inverse(torch.linalg.cholesky(S))
        self.inv = 0.5 * (inv + inv.T)  # applied as one product (triangular solves are slow on the CPU)

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        return v @ self.inv


class SharedMoment:
    """``E[x~ x~^T]`` of a row sample of the *whole* training split, eigendecomposed once (fast mode).

    Every label fraction draws its rows from the same split, so one estimate serves every fit of a
    grid: :meth:`for_fit` gives ``(alpha S + lambda I)^-1`` for one fit's ``alpha`` and ``lambda``
    as two products with the eigenvectors, with no per-fit factorisation. (``lambda`` is added to
    the intercept coordinate too, where ``alpha`` dominates it by orders of magnitude.)
    """

    def __init__(self, X: np.ndarray, device: torch.device | str = "cpu", rows: int | None = None,
                 rank: int | None = None):
        dev = torch.device(device)
        rows = PRECONDITIONER_ROWS if rows is None else int(rows)
        n, d = X.shape
        idx = np.unique(np.linspace(0, n - 1, min(n, rows)).round().astype(np.int64))
        m = idx.size
        self.rows, self.tail = int(m), 0.0
        with _exact_fp32(dev), torch.no_grad():
            Xs = _as_tensor(np.ascontiguousarray(X[idx], dtype=np.float32), dev)
            if rank is None or rank >= d + 1:
                S = torch.zeros((d + 1, d + 1), dtype=torch.float64, device=dev)
                S[:d, :d] = (Xs.T @ Xs).to(torch.float64)
                S[:d, d] = Xs.sum(dim=0, dtype=torch.float64)
                S[d, :d] = S[:d, d]
                S[d, d] = m
                S /= m
                # float32 is plenty for a preconditioner and twice as fast as float64
                evals, vectors = torch.linalg.eigh(S.to(torch.float32))
            else:  # the top `rank` eigenpairs from the sample (randomised subspace iteration), the rest's mean
                Xa = torch.cat([Xs, torch.ones((m, 1), dtype=torch.float32, device=dev)], dim=1).to(torch.float64)
                gen = torch.Generator(device="cpu").manual_seed(0)
                Q = torch.randn((d + 1, rank + 8), generator=gen, dtype=torch.float64).to(dev)
                for _ in range(3):
                    Q = torch.linalg.qr(Xa.T @ (Xa @ Q))[0]
                XQ = Xa @ Q
                evals, U = torch.linalg.eigh(XQ.T @ XQ / m)
                evals, U = evals[-rank:], U[:, -rank:]
                vectors = Q @ U
                trace = float((Xa * Xa).sum()) / m
                self.tail = max(0.0, (trace - float(evals.sum())) / (d + 1 - rank))
        self.values = evals.to(torch.float64).clamp_min(0.0)
        self.vectors = vectors.to(torch.float64)

    def for_fit(self, alpha: float, lam: float):
        jitter = 1e-10 * alpha * float(self.values.mean())
        scale = 1.0 / (alpha * self.values + lam + jitter)
        V = self.vectors
        if V.shape[1] == V.shape[0]:
            def apply(v: torch.Tensor) -> torch.Tensor:
                return ((v @ V) * scale) @ V.T
            return apply
        rest = 1.0 / (alpha * self.tail + lam + jitter)

        def apply_low_rank(v: torch.Tensor) -> torch.Tensor:
            return ((v @ V) * (scale - rest)) @ V.T + rest * v
        return apply_low_rank


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a * b).sum())


def fit_logistic(
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int | None = None,
    *,
    C: float = 1.0,
    tol: float = DEFAULT_TOL,
    max_iter: int = 1000,
    device: str | torch.device | None = "auto",
    init: np.ndarray | None = None,
    preconditioner: "SharedMoment | bool" = True,
    certify: bool | float = False,
    verify: bool = True,
) -> TorchFit:
    """Fit the L2-penalised logistic probe to ``max |grad| <= tol`` (see the module docstring).

    Fast mode's hooks: ``init`` (K' x (D + 1), ``[coef | intercept]``) starts from a given point (a warm start)
    instead of zero; ``preconditioner`` is ``True`` (estimated on this fit's rows, the default), a
    :class:`SharedMoment` estimated once for the whole grid, or ``False`` (plain L-BFGS). ``verify=False`` trusts
    the logits updated along the steps (float32 products, exact to ~1e-6) when testing convergence instead of
    recomputing them (two passes saved per fit). ``certify``: also compute :attr:`TorchFit.decision_bound`; a
    number is the largest row norm of the features (saves the pass that measures it).

    ``X`` is float32 (N x D), ``y`` integer labels 0..K-1; ``n_classes`` defaults to ``y.max() + 1``. For K = 2 the
    result has one weight row (decision ``X @ coef[0] + intercept[0]``), as scikit-learn's binary model.
    """
    y = np.asarray(y, dtype=np.int64)
    k = int(n_classes) if n_classes is not None else int(y.max()) + 1
    if k < 2:
        raise ValueError("a logistic probe needs at least two classes")
    if y.size and (y.min() < 0 or y.max() >= k):
        raise ValueError(f"labels must be integers in 0..{k - 1}")
    dev = resolve_device(device)
    with _exact_fp32(dev), torch.no_grad():
        prob = _Problem(_as_tensor(X, dev), torch.from_numpy(y).to(dev), k, C)
        alpha = 0.25 if prob.binary else 1.0 / k
        if isinstance(preconditioner, SharedMoment):
            precond = preconditioner.for_fit(alpha, prob.lam)
        elif preconditioner:
            precond = _Preconditioner(prob.X, alpha, prob.lam)
        else:
            def precond(v):
                return v
        if init is None:
            theta = torch.zeros((prob.k, prob.d + 1), dtype=torch.float64, device=dev)
            z = torch.zeros((prob.n, prob.k), dtype=torch.float64, device=dev)
        else:
            theta = torch.from_numpy(np.array(init, dtype=np.float64).reshape(prob.k, prob.d + 1)).to(dev)
            z = prob.logits(theta)
        f, g = prob.value_grad(theta, z)
        gmax = float(g.abs().max())
        hist: deque = deque(maxlen=HISTORY)
        gamma, n_iter, since_refresh, failures = 1.0, 0, 0, 0
        step_max = float("nan")
        while n_iter < max_iter:
            if (gmax <= tol and verify) or since_refresh >= REFRESH:
                if since_refresh:  # exact logits before trusting (or after drifting from) the updates
                    z = prob.logits(theta)
                    f, g = prob.value_grad(theta, z)
                    gmax = float(g.abs().max())
                    since_refresh = 0
            if gmax <= tol:
                break
            d = -_two_loop(g, hist, precond, gamma)
            gd = _dot(g, d)
            if not gd < 0:  # lost descent (numerical trouble): restart from the preconditioned gradient
                hist.clear()
                d = -precond(g)
                gd = _dot(g, d)
                if not gd < 0:
                    break
            u = prob.along(d)
            step = _line_search(prob, theta, z, u, f, d, gd)
            if step is None:
                failures += 1
                if failures > 1 or not hist:
                    break
                hist.clear()
                continue
            failures = 0
            t, f_new, g_new = step
            s = t * d
            yv = g_new - g
            sy = _dot(s, yv)
            if sy > 0:
                hist.append((s, yv, 1.0 / sy))
                gamma = sy / _dot(yv, precond(yv))
            theta = theta + s
            z = z + t * u
            step_max = t * float(u.abs().max())
            f, g = f_new, g_new
            gmax = float(g.abs().max())
            n_iter += 1
            since_refresh += 1
        if since_refresh and verify:
            z = prob.logits(theta)
            f, g = prob.value_grad(theta, z)
            gmax = float(g.abs().max())
        bound = _certified_bound(prob, z, g, None if certify is True else float(certify)) \
            if certify is not False else float("nan")
        if not prob.binary:  # the optimum has sum_k theta_k = 0; remove rounding drift
            theta = theta - theta.mean(dim=0, keepdim=True)
        theta_np = theta.cpu().numpy()
    return TorchFit(
        coef=np.ascontiguousarray(theta_np[:, :-1]),
        intercept=np.ascontiguousarray(theta_np[:, -1]),
        n_iter=n_iter,
        n_passes=prob.passes,
        grad_max=gmax,
        converged=bool(gmax <= tol),
        device=str(dev),
        step_max=step_max,
        decision_bound=bound,
    )


def _certified_bound(prob: "_Problem", z: torch.Tensor, g: torch.Tensor, row_norm_max: float | None = None) -> float:
    """A certified bound on how far the decision values are from the exact optimum (binary).

    On a ball of radius r around theta every logit moves by at most ``r ||x~_i||``, so the loss curvature of row i
    is at least ``s_i(r) = sigma'(|z_i| + r ||x~_i||)``, and the Hessian is at least ``lambda I_W + s_bar(r) x~_m
    x~_m^T`` in the worst direction (Jensen; the smallest eigenvalue of that 2 x 2 form is at least ``mu(r) =
    lambda s_bar / (lambda + s_bar (1 + R^2))``, R the longest row). ``||g||`` includes an allowance for the
    float32 rounding of the gradient's products (their typical size, not a worst case). If ``r > 2 ||g|| / mu(r)``
    the optimum lies in the ball (f rises on its surface) and ``||theta - theta*|| <= ||g|| / mu(r)``; a decision
    value of a row of norm <= R is then within ``sqrt(1 + R^2)`` times that. ``inf`` when no radius qualifies (a
    loose gradient tolerance on a large n: lambda = 1 / (C n) is all the curvature it can count on).
    """
    if not prob.binary:
        return float("nan")
    if row_norm_max is None:
        norms = torch.empty(prob.n, dtype=torch.float64, device=prob.dev)
        for a in range(0, prob.n, prob.chunk):
            norms[a:a + prob.chunk] = torch.linalg.vector_norm(prob.X[a:a + prob.chunk], dim=1).to(torch.float64)
        R = float(norms.max()) if prob.n else 0.0
    else:
        R = float(row_norm_max)
    xt = math.sqrt(R * R + 1.0)  # every row's ||x~|| <= this
    absz = z[:, 0].abs()
    # the gradient's W part comes from float32 products: allow their typical rounding error
    # (eps32 sqrt(chunk) per chunk sum of |G_i| |x_ij| <= |G_i| R), per coordinate, on top of ||g||
    G_abs = float((torch.sigmoid(z[:, 0]) - prob.yf).abs().sum()) / max(1, prob.n)
    rounding = 2.0 ** -24 * math.sqrt(min(prob.n, prob.chunk)) * G_abs * R * math.sqrt(prob.d)
    gnorm = float(g.norm()) + rounding
    lam = prob.lam

    def mu(r: float) -> float:
        t = torch.sigmoid(absz + r * xt)
        s_bar = float((t * (1.0 - t)).mean())
        return lam * s_bar / (lam + s_bar * (1.0 + R * R)) if s_bar > 0 else 0.0

    if gnorm == 0.0:
        return 0.0
    m0 = mu(0.0)
    r = 2.0 * gnorm / m0 if m0 > 0 else math.inf
    for _ in range(40):  # r_{k+1} = 1.05 * 2 ||g|| / mu(r_k): increasing; stop where r >= 2 ||g|| / mu(r)
        if not math.isfinite(r) or r > 1e6:
            return math.inf
        m = mu(r)
        if m > 0 and r >= 2.0 * gnorm / m:
            return gnorm / m * math.sqrt(1.0 + R * R)
        r = 1.05 * 2.0 * gnorm / m if m > 0 else math.inf
    return math.inf


def _two_loop(g, hist, precond, gamma):
    """L-BFGS two-loop recursion with the initial inverse Hessian ``gamma * M^-1``."""
    q = g.clone()
    alphas = []
    for s, yv, rho in reversed(hist):
        a = rho * _dot(s, q)
        alphas.append(a)
        q -= a * yv
    r = gamma * precond(q) if hist else precond(q)
    for (s, yv, rho), a in zip(hist, reversed(alphas)):
        beta = rho * _dot(yv, r)
        r += (a - beta) * s
    return r


def _line_search(prob, theta, z, u, f, d, gd, max_trials=25):
    """A slope-driven line search from t = 1 on the convex ``phi(t) = f(theta + t d)``.

    ``phi'(t) = g(theta + t d).d`` is non-decreasing. A step is accepted when ``0.9 phi'(0) <= phi'(t) <= 0.8
    |phi'(0)|`` (on a quadratic: t within [0.1, 1.8] times the line minimum, so f fell) and f did not rise by more
    than ``1e-6 |f|``: Hager and Zhang's approximate Wolfe conditions. A slope still below ``0.9 phi'(0)`` means f
    fell all the way to t (convexity), so the step grows; otherwise it shrinks by a secant step on ``phi'``.
    """
    lo, lo_slope = 0.0, gd
    hi, hi_slope = None, math.inf
    t = 1.0
    for _ in range(max_trials):
        f_new, g_new = prob.value_grad(theta + t * d, z + t * u)
        slope = _dot(g_new, d) if math.isfinite(f_new) else math.inf
        if slope < 0.9 * gd:
            lo, lo_slope = t, slope
        elif slope > -0.8 * gd or not f_new <= f + 1e-6 * abs(f):
            hi, hi_slope = t, slope
        else:
            return t, f_new, g_new
        if hi is None:
            t *= 4.0
        elif math.isfinite(hi_slope) and hi_slope > lo_slope:
            t_sec = lo - lo_slope * (hi - lo) / (hi_slope - lo_slope)  # zero of the secant of phi'
            t = min(max(t_sec, lo + 0.1 * (hi - lo)), hi - 0.1 * (hi - lo))
        else:
            t = lo + 0.1 * (hi - lo) if lo == 0.0 else 0.5 * (lo + hi)
    return None


def decision_function(X: np.ndarray, coef: np.ndarray, intercept: np.ndarray,
                      device: str | torch.device | None = "auto", chunk_rows: int = 4096) -> np.ndarray:
    """``X @ coef.T + intercept`` in float64; 1-D when ``coef`` has one row.

    Rows are promoted to float64 ``chunk_rows`` at a time (a bounded buffer, never a float64 copy of the matrix).
    """
    dev = resolve_device(device)
    W = torch.from_numpy(np.ascontiguousarray(coef, dtype=np.float64)).to(dev)
    b = torch.from_numpy(np.ascontiguousarray(intercept, dtype=np.float64)).to(dev)
    out = np.empty((X.shape[0], W.shape[0]), dtype=np.float64)
    with _exact_fp32(dev), torch.no_grad():
        for a in range(0, X.shape[0], chunk_rows):
            Xc = _as_tensor(np.asarray(X[a:a + chunk_rows], dtype=np.float32), dev).to(torch.float64)
            out[a:a + chunk_rows] = (Xc @ W.T + b).cpu().numpy()
    return out[:, 0] if W.shape[0] == 1 else out
