"""Test-set bootstrap replicates of the per-run PRISM metrics (used by :mod:`.bootstrap`).

* **Stratified**: each replicate draws, for every class of ``y_test``, as many examples as that class has, with
  replacement from that class only (class counts are kept, so every replicate has every class and AUROC / macro-F1
  stay defined).
* **Paired**: the draws depend only on the bootstrap ``seed`` and ``y_test`` (its SHA-256), so two runs scored on
  the same test examples (two checkpoints, two seeds of a cell, two probes) get the same resamples and a difference
  of their replicate vectors is a paired bootstrap of the difference (``prism-run diff`` pairs artifacts whose
  ``test_digest``, ``n`` and ``seed`` agree).
* **Percentile** interval at ``level`` (``np.percentile``, linear interpolation).
* **Exact**: a replicate value is the metric function of :mod:`prism_plugin.metrics.core` evaluated on the
  resampled rows (to ~1e-15; the tests compare with a loop over resamples to 1e-12): ``auroc`` (binary, or macro
  one-vs-rest; ties count one half), ``f1_macro`` (over the union of the true and predicted classes of the
  resample), ``brier`` (binary only, NaN for K > 2), ``nll``, ``ece`` with fixed bins and with adaptive
  (equal-mass) bins whose edges are the resample's own ``np.quantile`` values, reproduced bit for bit from weighted
  order statistics (numpy's linear method and its ``_lerp`` formula), and the same after temperature scaling.
* **Fast** (``O(B N)`` per metric, no per-replicate sort): every replicate is a vector of multiplicities over the
  test rows (a ``bincount`` of its draws); one global sort per score (confidence, and each class's probability for
  a multiclass AUROC) turns every metric into weighted cumulative sums; replicates are processed in chunks of at
  most :data:`CHUNK_ELEMENTS` multiplicities (about 64 MB of temporaries). ``benchmarks/bench_bootstrap.py`` times
  it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from prism_plugin.metrics.core import EPS_LOG, confidence_and_correct

NAN = float("nan")
#: the metrics that get an interval, in column order
BOOT_METRICS = ("auroc", "f1_macro", "brier", "nll", "nll_scaled", "ece_fixed", "ece_adaptive",
                "ece_scaled_fixed", "ece_scaled_adaptive")


#: multiplicities per chunk of replicates (a chunk's working arrays peak at ~16 MiB whatever B, N and K;
#: 2^20 measured no faster and peaked at ~72 MiB, a fixed cost that showed in peak RSS over small features)
CHUNK_ELEMENTS = 1 << 17


# --------------------------------------------------------------------------- resampling
def test_digest(y: np.ndarray) -> str:
    """SHA-256 (hex) of the test labels as int64 bytes: what pairs two runs' resamples."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(y).reshape(-1), dtype=np.int64).tobytes()).hexdigest()


@dataclass(frozen=True)
class _Layout:
    """The class-major arrangement of the test rows the draws index into."""

    members: np.ndarray      # (N,) original row indices, class by class (stable)
    col_n: np.ndarray        # (N,) float64: size of the class of each column
    col_n_max: np.ndarray    # (N,) intp: that size - 1
    col_start: np.ndarray    # (N,) intp: where that class starts in ``members``
    counts: np.ndarray       # class counts (of the classes present, ascending label)


def _layout(y: np.ndarray) -> _Layout:
    y = np.asarray(y).reshape(-1)
    members = np.argsort(y, kind="stable")
    _, counts = np.unique(y, return_counts=True)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.intp)
    col_n = np.repeat(counts, counts).astype(np.float64)
    return _Layout(members, col_n, np.repeat(counts - 1, counts).astype(np.intp),
                   np.repeat(starts, counts), counts)


def _generator(y: np.ndarray, seed: int) -> np.random.Generator:
    digest = test_digest(y)
    words = [int(digest[i:i + 8], 16) for i in range(0, 64, 8)]
    return np.random.default_rng(np.random.SeedSequence([int(seed), *words]))


def _chunk_rows(n_items: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(1, n_items))


def _positions(rng: np.random.Generator, lay: _Layout, rows: int) -> np.ndarray:
    """(rows, N) positions into ``lay.members``: column j draws uniformly within its class.

    One float64 per draw in row-major order, so the draws do not depend on how replicates are chunked
    (``rng.random`` consumes one 64-bit word per value)."""
    u = rng.random((rows, lay.col_n.size))
    u *= lay.col_n
    pos = u.astype(np.intp)
    np.minimum(pos, lay.col_n_max, out=pos)
    pos += lay.col_start
    return pos


def iter_bootstrap_indices(y: np.ndarray, n: int, seed: int, chunk: int | None = None) -> Iterator[np.ndarray]:
    """The resamples of :func:`bootstrap_indices` as ``(rows, N)`` chunks (same values, bounded memory)."""
    y = np.asarray(y).reshape(-1)
    if n <= 0 or y.size == 0:
        return
    lay = _layout(y)
    rng = _generator(y, seed)
    step = chunk or _chunk_rows(y.size)
    for b0 in range(0, int(n), step):
        yield lay.members[_positions(rng, lay, min(step, int(n) - b0))]


def bootstrap_indices(y: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``(n, N)`` row indices of ``n`` stratified resamples of the test labels ``y``.

    Row ``b`` holds, class by class (ascending label), as many draws from that class's rows as it has; the values
    depend only on ``seed`` and ``y``. For large ``n * N`` use :func:`iter_bootstrap_indices`."""
    y = np.asarray(y).reshape(-1)
    parts = list(iter_bootstrap_indices(y, n, seed))
    return np.concatenate(parts) if parts else np.empty((0, y.size), dtype=np.intp)


def percentile_ci(values: np.ndarray, level: float) -> tuple[Any, Any]:
    """Percentile interval ``(low, high)`` of replicate values (along axis 0) at coverage ``level``; NaN where a
    replicate is NaN (or there are none)."""
    v = np.asarray(values, dtype=np.float64)
    lo_q, hi_q = 100.0 * (1.0 - level) / 2.0, 100.0 * (1.0 + level) / 2.0
    if v.shape[0] == 0:
        shape = v.shape[1:]
        return (np.full(shape, NAN), np.full(shape, NAN)) if shape else (NAN, NAN)
    lo, hi = np.percentile(v, [lo_q, hi_q], axis=0)
    bad = np.isnan(v).any(axis=0)
    if np.ndim(lo) == 0:
        return (NAN, NAN) if bad else (float(lo), float(hi))
    lo, hi = np.where(bad, NAN, lo), np.where(bad, NAN, hi)
    return lo, hi


# --------------------------------------------------------------------------- the metrics on weights
def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's quantile interpolation, operation for operation (bit-identical edges)."""
    diff = b - a
    out = a + diff * t
    hi = np.broadcast_to(t >= 0.5, out.shape)
    alt = b - diff * (1 - t)
    out[hi] = alt[hi]
    return out


def _quantile_plan(n: int, bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.quantile(x, linspace(0, 1, bins + 1))`` of a sample of size n, method "linear": the order statistics it
    interpolates and their weights (numpy's own arithmetic, see :func:`_lerp`)."""
    v = (n - 1) * np.linspace(0.0, 1.0, bins + 1)
    prev = np.floor(v)
    above = v >= n - 1
    k = np.concatenate([np.where(above, n - 1, prev), np.where(above, n - 1, prev + 1)]).astype(np.int64)
    gamma = v - np.where(above, -1.0, prev)  # numpy subtracts the index -1 it uses above the bounds
    return k, gamma, np.linspace(0.0, 1.0, bins + 1)


class _Order:
    """One sort order of the test rows and the confidence vectors whose ECE is read in it.

    ``confs`` / ``corrects``: ``(q, N)`` confidences sorted ascending in this order (each one) and their
    correctness; ``perm``: where each position's row sits in the raw order (``None`` = the raw order itself)."""

    def __init__(self, confs: list[np.ndarray], corrects: list[np.ndarray], perm: np.ndarray | None, bins: int):
        self.s = np.ascontiguousarray(np.stack(confs))
        self.perm = perm
        # weighted arrays: one per confidence, one per distinct correctness vector
        self.c_index = []
        values = list(self.s)
        for c in corrects:
            for i, seen in enumerate(values[len(confs):]):
                if np.array_equal(seen, c):
                    self.c_index.append(len(confs) + i)
                    break
            else:
                self.c_index.append(len(values))
                values.append(np.asarray(c, dtype=np.float64))
        self.values = np.ascontiguousarray(np.stack(values))
        n = self.s.shape[1]
        self.k, self.gamma, fixed = _quantile_plan(n, bins)
        self.fixed_pos = np.stack([np.searchsorted(s, fixed, side="left") for s in self.s])

    def ece(self, w: "_Weights") -> list[tuple[np.ndarray, np.ndarray]]:
        """(fixed, adaptive) ECE of every replicate, for each confidence of this order."""
        rows, n = w.rows, w.n
        q, nb1 = self.s.shape[0], self.gamma.size
        v = np.empty((rows, self.values.shape[0], n + 1))
        np.multiply(w.wf[:, None, :], self.values[None], out=v[:, :, :n])
        v[:, :, n] = 0.0  # every segment end (<= n) is a valid reduceat index
        j = w.order_stats(self.k)
        positions = []  # per confidence: fixed then adaptive bin positions, (rows, nb1) each
        for i in range(q):
            s = self.s[i]
            edges = _lerp(s[j[:, :nb1]], s[j[:, nb1:]], self.gamma[None, :])
            edges[:, 0] = 0.0
            edges[:, -1] = 1.0 + 1e-9
            edges.sort(axis=1)
            pos = np.searchsorted(s, edges, side="left")
            few = (np.diff(edges, axis=1) != 0).sum(axis=1) < 2  # < 3 distinct edges: fixed (core)
            if few.any():
                pos[few] = self.fixed_pos[i]
            positions += [np.broadcast_to(self.fixed_pos[i], (rows, nb1)), pos]
        pos_all = np.concatenate(positions, axis=1)                      # (rows, 2 q nb1)
        before = w.before(pos_all).reshape(rows, 2 * q, nb1)
        cnt = (before[:, :, 1:] - before[:, :, :-1]).astype(np.float64)
        width = self.values.shape[0] * (n + 1)
        row_off = (np.arange(rows) * width)[:, None]
        idx = []
        for i in range(q):
            for kind in (0, 1):
                p = positions[2 * i + kind]
                idx += [p + (row_off + i * (n + 1)), p + (row_off + self.c_index[i] * (n + 1))]
        sums = np.add.reduceat(v.ravel(), np.concatenate(idx, axis=1).ravel()).reshape(rows, 4 * q, nb1)[:, :, :-1]
        sf, sc = sums[:, 0::2], sums[:, 1::2]
        with np.errstate(invalid="ignore", divide="ignore"):
            term = cnt * np.abs(sc / cnt - sf / cnt)
        term[cnt == 0] = 0.0
        ece = term.sum(axis=2) / n                                         # (rows, 2 q)
        return [(ece[:, 2 * i], ece[:, 2 * i + 1]) for i in range(q)]


class _Weights:
    """One chunk of replicates as multiplicities in a sorted order, with the cumulative count the metrics read:
    ``cw`` is flat with a leading 0, so the count of row ``b`` before position ``j`` is ``cw[b * N + j] - b * N``
    (every row sums to N)."""

    def __init__(self, wi: np.ndarray):
        self.wi = wi                                   # (rows, N) int64
        self.rows, self.n = wi.shape
        self.wf = wi.astype(np.float64)
        self.cw = np.empty(wi.size + 1, dtype=np.int64)
        self.cw[0] = 0
        np.cumsum(wi.ravel(), out=self.cw[1:])
        self.base = np.arange(self.rows, dtype=np.int64)[:, None] * self.n

    def before(self, pos: np.ndarray) -> np.ndarray:
        """Count of each row before sorted position(s) ``pos`` ((m,) or (rows, m))."""
        return self.cw[self.base + pos] - self.base

    def order_stats(self, k: np.ndarray) -> np.ndarray:
        """Sorted position of the k-th smallest (0-based) value of each row's resample."""
        f = np.searchsorted(self.cw, self.base + k[None, :], side="right")
        return f - self.base - 1


def _tie_groups(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) position of the tie group of every sorted position."""
    n = s.size
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    gid = np.cumsum(new) - 1
    g_start = np.flatnonzero(new)
    g_end = np.append(g_start[1:], n)
    return g_start[gid], g_end[gid]


def _auroc_u(w: _Weights, groups: np.ndarray, w_pos: np.ndarray) -> np.ndarray:
    """Weighted Mann-Whitney AUROC (ties = 1/2) of positives with tie groups ``[gs, ge)`` (``groups = concat(gs,
    ge)``) and weights ``w_pos``: ``2U = sum_p w_p (W_before(gs) + W_before(ge)) - Wp^2``, in integers (exact)."""
    wp = w_pos.sum(axis=1)
    m = w_pos.shape[1]
    before = w.before(groups)
    two_u = (w_pos * (before[:, :m] + before[:, m:])).sum(axis=1) - wp * wp
    wn = w.n - wp
    with np.errstate(invalid="ignore", divide="ignore"):
        out = two_u / (2.0 * wp * wn)
    out[(wp == 0) | (wn == 0)] = NAN
    return out


class _Engine:
    """Per-run precomputation; :meth:`evaluate` turns multiplicities into metric values.

    Multiplicities are kept in the order of the raw confidence (``inv1`` maps a test row to its position there)."""

    def __init__(self, y: np.ndarray, proba: np.ndarray, proba_scaled: np.ndarray | None, bins: int):
        y = np.asarray(y).reshape(-1).astype(np.int64)
        proba = np.asarray(proba, dtype=np.float64)
        self.n = y.size
        self.k = k = proba.shape[1]
        conf, correct = confidence_and_correct(y, proba)
        o1 = np.argsort(conf, kind="stable")
        self.inv1 = np.empty(self.n, dtype=np.intp)
        self.inv1[o1] = np.arange(self.n)
        y1 = y[o1]
        rows = np.arange(self.n)
        pred = proba.argmax(axis=1)
        # additive terms in the raw order: nll, [nll_scaled], [brier], per class true / predicted /
        # true-positive indicators (macro-F1)
        cols = [-np.log(proba[rows, y] + EPS_LOG)]
        self.has_scaled = proba_scaled is not None
        if self.has_scaled:
            ps = np.asarray(proba_scaled, dtype=np.float64)
            cols.append(-np.log(ps[rows, y] + EPS_LOG))
        if k == 2:
            cols.append((y - proba[:, 1]) ** 2)
        self.n_add = len(cols)
        terms = np.zeros((self.n, len(cols) + 3 * k))
        terms[:, :len(cols)] = np.column_stack(cols)
        terms[rows, len(cols) + np.clip(y, 0, k - 1)] = 1.0
        terms[rows, len(cols) + k + pred] = 1.0
        terms[rows, len(cols) + 2 * k + pred] = (pred == y)
        self.terms = np.ascontiguousarray(terms[o1])
        self.auroc_ok = self._auroc_defined(y, proba)
        if k == 2:  # conf = p(y = 1): the raw order is the score order
            self.pos1 = np.flatnonzero(y1 == 1)
            gs, ge = _tie_groups(conf[o1])
            self.pos1_groups = np.concatenate([gs[self.pos1], ge[self.pos1]])
        else:
            self.ovr = []
            for c in range(k):
                oc = np.argsort(proba[:, c], kind="stable")
                gs, ge = _tie_groups(proba[oc, c])
                pos_c = np.flatnonzero(y[oc] == c)
                # the class's positives: their positions in the raw order and their tie groups
                self.ovr.append((self.inv1[oc], self.inv1[oc[pos_c]], np.concatenate([gs[pos_c], ge[pos_c]])))
        # ECE orders: the raw confidence, and the scaled one in the same order when it is still sorted
        # there with the same correctness (binary: always), else in its own order
        confs, corrects = [conf[o1]], [correct[o1]]
        second = []
        self.scaled_at = None  # (order, confidence) of the scaled ECE
        if self.has_scaled:
            conf_s, correct_s = confidence_and_correct(y, ps)
            if np.all(np.diff(conf_s[o1]) >= 0):
                confs.append(conf_s[o1])
                corrects.append(correct_s[o1])
                self.scaled_at = (0, 1)
            else:
                o2 = np.argsort(conf_s, kind="stable")
                second = [_Order([conf_s[o2]], [correct_s[o2]], self.inv1[o2], bins)]
                self.scaled_at = (1, 0)
        self.orders = [_Order(confs, corrects, None, bins), *second]

    @staticmethod
    def _auroc_defined(y: np.ndarray, proba: np.ndarray) -> bool:
        """When :func:`prism_plugin.metrics.core.auroc` (scikit-learn) is not NaN on the full set."""
        present = np.unique(y)
        if proba.shape[1] == 2:
            return present.size == 2 and bool(np.isin(present, (0, 1)).all())
        return present.size == proba.shape[1] and bool(np.allclose(1, proba.sum(axis=1)))

    def counts(self, idx: np.ndarray) -> np.ndarray:
        """(rows, N) int64 multiplicities, in the raw order, of the resamples ``idx``."""
        idx = np.asarray(idx)
        rows = idx.shape[0]
        ranks = self.inv1[idx]
        ranks += (np.arange(rows, dtype=np.intp) * self.n)[:, None]
        return np.bincount(ranks.ravel(), minlength=rows * self.n).reshape(rows, self.n)

    def evaluate(self, wi: np.ndarray) -> dict[str, np.ndarray]:
        """Every metric of each row of multiplicities ``wi`` ((rows, N) int, raw order, rows sum to N)."""
        w = _Weights(wi)
        rows, k, a = w.rows, self.k, self.n_add
        out: dict[str, np.ndarray] = {}
        add = w.wf @ self.terms
        out["nll"] = add[:, 0] / w.n
        out["nll_scaled"] = add[:, 1] / w.n if self.has_scaled else np.full(rows, NAN)
        out["brier"] = add[:, a - 1] / w.n if k == 2 else np.full(rows, NAN)
        true_c, pred_c, tp = add[:, a:a + k], add[:, a + k:a + 2 * k], add[:, a + 2 * k:]
        labels = (true_c > 0) | (pred_c > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = np.where(labels, 2.0 * tp / (true_c + pred_c), 0.0)
        out["f1_macro"] = f1.sum(axis=1) / labels.sum(axis=1)
        eces = [self.orders[0].ece(w)]
        if len(self.orders) > 1:
            eces.append(self.orders[1].ece(_Weights(wi[:, self.orders[1].perm])))
        out["ece_fixed"], out["ece_adaptive"] = eces[0][0]
        if self.scaled_at is None:
            out["ece_scaled_fixed"] = out["ece_scaled_adaptive"] = np.full(rows, NAN)
        else:
            out["ece_scaled_fixed"], out["ece_scaled_adaptive"] = eces[self.scaled_at[0]][self.scaled_at[1]]
        if not self.auroc_ok:
            out["auroc"] = np.full(rows, NAN)
        elif k == 2:
            out["auroc"] = _auroc_u(w, self.pos1_groups, wi[:, self.pos1])
        else:
            acc = np.zeros(rows)
            for perm, pos_raw, groups in self.ovr:
                acc += _auroc_u(_Weights(wi[:, perm]), groups, wi[:, pos_raw])
            out["auroc"] = acc / k
        return {m: out[m] for m in BOOT_METRICS}


def replicate_metrics(y: np.ndarray, proba: np.ndarray, proba_scaled: np.ndarray | None,
                      idx: np.ndarray | Iterable[np.ndarray], bins: int = 15) -> dict[str, np.ndarray]:
    """Every metric of :data:`BOOT_METRICS` on each resample: ``{name: (B,) array}``.

    ``idx`` is a ``(B, N)`` array of row indices (:func:`bootstrap_indices`) or an iterable of such chunks
    (:func:`iter_bootstrap_indices`). Replicate ``b`` equals the function of :mod:`prism_plugin.metrics.core` on
    ``y[idx[b]]``, ``proba[idx[b]]`` (``proba_scaled``: the scaled metrics; ``None`` gives NaN), with ``bins`` ECE
    bins. A metric NaN on the full test set (AUROC with a class absent, Brier for K > 2) is NaN in every replicate.
    """
    eng = _Engine(y, proba, proba_scaled, bins)
    chunks = [idx] if isinstance(idx, np.ndarray) else idx
    parts: dict[str, list[np.ndarray]] = {m: [] for m in BOOT_METRICS}
    for chunk in chunks:
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[1] != eng.n:
            raise ValueError(f"bootstrap indices must be (B, {eng.n}), got shape {chunk.shape}")
        step = _chunk_rows(eng.n)
        for b0 in range(0, chunk.shape[0], step):
            vals = eng.evaluate(eng.counts(chunk[b0:b0 + step]))
            for m in BOOT_METRICS:
                parts[m].append(vals[m])
    return {m: np.concatenate(v) if v else np.empty(0) for m, v in parts.items()}


def point_metrics(y: np.ndarray, proba: np.ndarray, proba_scaled: np.ndarray | None, bins: int = 15
                  ) -> dict[str, float]:
    """The metrics on the full test set by the same arithmetic (each row counted once)."""
    eng = _Engine(y, proba, proba_scaled, bins)
    vals = eng.evaluate(np.ones((1, eng.n), dtype=np.int64))
    return {m: float(v[0]) for m, v in vals.items()}


def run_bootstrap(y: np.ndarray, proba: np.ndarray, proba_scaled: np.ndarray | None, bins: int, n: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(replicates (n, M), point (M,))`` in :data:`BOOT_METRICS` order: the resamples of
    :func:`bootstrap_indices`, drawn chunk by chunk straight into the engine's order; the point values (each row
    once) ride along as an extra first row of the first chunk."""
    y = np.asarray(y).reshape(-1)
    n = int(n)
    eng = _Engine(y, proba, proba_scaled, bins)
    rep = np.empty((n, len(BOOT_METRICS)))
    point = np.empty(len(BOOT_METRICS))
    lay = _layout(y)
    rng = _generator(y, seed)
    members_rank = eng.inv1[lay.members]
    step = _chunk_rows(eng.n)
    b0 = 0
    while b0 < n or b0 == 0:
        rows = min(step, n - b0)
        ranks = members_rank[_positions(rng, lay, rows)] if rows > 0 else np.empty((0, eng.n), dtype=np.intp)
        lead = 1 if b0 == 0 else 0
        ranks += (np.arange(lead, rows + lead, dtype=np.intp) * eng.n)[:, None]
        w = np.bincount(ranks.ravel(), minlength=(rows + lead) * eng.n).reshape(rows + lead, eng.n)
        del ranks
        if lead:
            w[0] = 1
        vals = eng.evaluate(w)
        for j, m in enumerate(BOOT_METRICS):
            if lead:
                point[j] = vals[m][0]
            rep[b0:b0 + rows, j] = vals[m][lead:]
        b0 += max(rows, 1)
    return rep, point


__all__ = ["BOOT_METRICS", "bootstrap_indices", "iter_bootstrap_indices", "percentile_ci", "point_metrics",
           "replicate_metrics", "run_bootstrap", "test_digest"]
