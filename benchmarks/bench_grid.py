#!/usr/bin/env python
"""Benchmark the full PRISM probe grid (6 label fractions x 3 seeds, temperatures, all metrics).

Three variants on the same generated embeddings, each in its own subprocess
(so its peak RSS is its own):

(a) ``reference``: a straightforward loop written here the way the reference
    evaluator works: one scikit-learn fit per run, ``predict_proba`` and
    ``decision_function`` as separate passes, every metric recomputed per run
    (metric code written here from PROTOCOL.md §2-3, independent of ours).
(b) ``ours``: ``prism_plugin.api.evaluate`` (exact mode: scikit-learn lbfgs,
    the three fraction-1.0 seeds share one fit, decision values once per fit).
(c) ``torch``: ``prism_plugin.api.evaluate`` with ``probe.backend = torch``
    (converged to max |grad| <= 1e-8, on the GPU when there is one).
(d) ``fast``: ``probe.backend = fast`` (scikit-learn lbfgs exactly as (b) until one timed trial of
    the preconditioned L-BFGS, paired with the timed exact fit of the same size, decides the grid's
    later fits; see ``LogisticProbe._fit_fast``).

Four data regimes (``--regime A|B|C|D|both|all``, default all; both = A and B), see :func:`generate`:
A, the original construction (lbfgs needs hundreds of iterations at full size), B, a rotated flatter
spectrum with overlapping classes and 7 % label noise (lbfgs stops after tens), C (issue 27), a
rotated flat spectrum, close classes and 40 % label noise: few lbfgs iterations on K = 9 classes, and
D, already-whitened features (flat spectrum, no shared mean, 10 % label noise): nothing for the
preconditioner to undo, 10-35 lbfgs iterations.

Printed per dataset and regime: grid seconds (wall and CPU), every variant's ratio to (a) and to
(b), peak RSS over the feature bytes, the maximum absolute difference of every metric column of
(b) against (a) (target: 0), the max |diff| of AUROC, ECE, scaled ECE and T of (c) and (d)
against (b), exact mode's lbfgs iteration counts per fraction (which regime real embeddings
resemble), what fast mode's solver did and decided (its trial's and the exact fit's seconds), and
exact mode's distance from its memory floor (bytes read per lbfgs iteration, ~2 passes over the
fit's features, against the measured bandwidth of a float32 pass over the train matrix); at the end
one table of every ratio and one of fast / exact on every regime.

Usage::

    python benchmarks/bench_grid.py --quick              # 1/10-size data, both regimes (~5 minutes on 2 busy cores)
    python benchmarks/bench_grid.py --scale 0.3 --variants reference,ours,fast
    python benchmarks/bench_grid.py                      # PCam- and CRC-sized, both regimes
    python benchmarks/bench_grid.py --regime B --datasets crc --variants ours,fast --json out.json
    python benchmarks/bench_grid.py --threads 0          # the libraries' own thread counts

Every variant runs with the same thread settings (``--threads``, default 1:
OMP/OpenBLAS/MKL and torch), because scikit-learn's tol = 1e-4 result depends
on the BLAS thread count and multi-threaded BLAS is erratic on a busy machine.

Sizes: PCam-sized 262,144 x 1,536 (K = 2) + 32,768 val + 32,768 test;
CRC-sized 70,000 x 1,536 (K = 9) + 15,000 val + 15,000 test; ``--quick``
(= ``--scale 0.1``) divides every split by 10. Rows are unit-norm float32 with a
shared mean direction (mean cosine to it ~0.67 in A, ~0.74 in B).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FRACTIONS = (0.01, 0.05, 0.10, 0.25, 0.50, 1.00)
SEEDS = (42, 123, 456)
DIM = 1536
DATASETS = {
    # name: (n_train, n_val, n_test, n_classes, class separation)
    "pcam": (262_144, 32_768, 32_768, 2, 0.15),
    "crc": (70_000, 15_000, 15_000, 9, 0.5),
}
VARIANTS = ("reference", "ours", "torch", "fast")
BACKEND = {"ours": "sklearn", "torch": "torch", "fast": "fast"}
AGREEMENT = ("auroc", "ece_fixed", "ece_scaled_fixed", "temperature")
METRICS = ["auroc", "f1_macro", "f1_binary", "brier", "ece_fixed", "ece_adaptive", "temperature",
           "ece_scaled_fixed", "ece_scaled_adaptive", "degeneracy_share", "degenerate", "nll", "nll_scaled",
           "n_train", "forced_classes"]


# --------------------------------------------------------------------------- data
#: regime B: label noise share, std exponent of the (rotated) spectrum, norm of the shared mean over the noise
B_LABEL_NOISE = 0.07
B_SPECTRUM = 0.25
B_SHARED = 1.1
#: regime C (issue 27: few lbfgs iterations on many classes, like the kept-back CRC-like data where fast
#: mode lost): a rotated flat spectrum, class means C_SEP times regime A's separation, C_LABEL_NOISE label
#: noise; exact lbfgs stops after ~5-20 iterations at K = 9, so fast mode's set-up has little to repay it
C_LABEL_NOISE = 0.4
C_SPECTRUM = 0.0
C_SHARED = 1.1
C_SEP = 0.2
#: regime D: already-whitened embeddings (a rotated flat spectrum and no shared mean): the preconditioner
#: has no ill-conditioning to remove, so it cuts few lbfgs iterations and each of its own costs more
D_LABEL_NOISE = 0.1
D_SEP = 1.0
REGIMES = ("A", "B", "C", "D")
#: the rotated regimes' parameters: (spectrum exponent, shared-mean norm, separation factor K = 2 / K > 2, noise)
ROTATED = {"B": (B_SPECTRUM, B_SHARED, (0.6, 0.5), B_LABEL_NOISE),
           "C": (C_SPECTRUM, C_SHARED, (C_SEP, C_SEP), C_LABEL_NOISE),
           "D": (0.0, 0.0, (D_SEP, D_SEP), D_LABEL_NOISE)}
#: each rotated regime's own random stream (A uses the bare seed)
STREAM = {"B": 99, "C": 77, "D": 55}


def sizes(name: str, scale: float) -> tuple[int, int, int, int, float]:
    n_train, n_val, n_test, k, sep = DATASETS[name]
    return (max(4 * k, int(n_train * scale)), max(2 * k, int(n_val * scale)), max(2 * k, int(n_test * scale)), k, sep)


def generate(path: Path, name: str, scale: float = 1.0, regime: str = "A", seed: int = 0) -> dict:
    """Write train/val/test ``.npy`` files for one dataset in one regime; return its description.

    Regime A (the original construction): axis-aligned power-law spectrum (std ~ 1/i), one shared
    mean direction, well-separated class means; lbfgs needs hundreds of iterations. Regime B: a
    randomly rotated, flatter spectrum (std ~ i^-1/4), a shared mean in a random direction, closer
    class means and 7 % label noise (in every split); lbfgs stops after tens of iterations.
    """
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")
    n_train, n_val, n_test, k, sep = sizes(name, scale)
    geo = np.random.default_rng(seed if regime == "A" else [seed, STREAM[regime]])
    if regime == "A":
        scale_d = ((np.arange(DIM) + 1.0) ** -1.0).astype(np.float32)
        rotation = None
        shared = np.zeros(DIM, np.float32)
        shared[0] = np.sqrt(DIM)
    else:
        spectrum, shared_norm, seps, noise = ROTATED[regime]
        scale_d = ((np.arange(DIM) + 1.0) ** -spectrum).astype(np.float32)
        q, r = np.linalg.qr(geo.standard_normal((DIM, DIM)))
        rotation = (q * np.sign(np.diag(r))).astype(np.float32)
        u = geo.standard_normal(DIM)
        shared = (shared_norm * np.sqrt(DIM) * u / np.linalg.norm(u)).astype(np.float32)
        sep = sep * (seps[0] if k == 2 else seps[1])
    scale_d *= np.float32(np.sqrt(DIM / float((scale_d.astype(np.float64) ** 2).sum())))
    means = geo.standard_normal((k, DIM)).astype(np.float32) * scale_d
    means *= sep * np.sqrt(DIM) / np.linalg.norm(means, axis=1, keepdims=True) / np.sqrt(2)
    path.mkdir(parents=True, exist_ok=True)
    row_sum, cos_n = np.zeros(DIM), 0
    for split, n, s in (("train", n_train, 1), ("val", n_val, 2), ("test", n_test, 3)):
        rng = np.random.default_rng([seed, s] if regime == "A" else [seed, s, STREAM[regime]])
        y = rng.integers(0, k, n)
        X = np.lib.format.open_memmap(path / f"{split}_X.npy", mode="w+", dtype=np.float32, shape=(n, DIM))
        for a in range(0, n, 16384):
            e = min(n, a + 16384)
            block = rng.standard_normal((e - a, DIM), dtype=np.float32)
            block *= scale_d
            block += means[y[a:e]]
            if rotation is not None:
                block = block @ rotation
            block += shared
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            X[a:e] = block
            if split == "train":
                row_sum += block.sum(axis=0, dtype=np.float64)
                cos_n += e - a
        X.flush()
        del X
        if regime != "A":  # label noise: a share of the rows carry another class's label
            flip = rng.random(n) < ROTATED[regime][3]
            y[flip] = (y[flip] + rng.integers(1, k, int(flip.sum()))) % k
        np.save(path / f"{split}_y.npy", y)
    return {"name": name, "regime": regime, "n_train": n_train, "n_val": n_val, "n_test": n_test, "n_classes": k,
            "dim": DIM, "feature_bytes": 4 * DIM * (n_train + n_val + n_test),
            # unit-norm rows: the mean cosine to the mean direction is the norm of the mean row
            "mean_cosine": float(np.linalg.norm(row_sum)) / max(1, cos_n)}


def load(path: Path):
    return [(np.load(path / f"{s}_X.npy"), np.load(path / f"{s}_y.npy")) for s in ("train", "val", "test")]


# ----------------------------------------------------------------- (a) reference
def ref_subset(y: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """PROTOCOL §2.2: legacy global RNG, per class ascending, max(1, floor(n_c f)) without replacement."""
    np.random.seed(seed)
    picks = []
    for c in np.unique(y):
        pos = np.where(y == c)[0]
        picks.append(np.random.choice(pos, max(1, int(np.floor(len(pos) * fraction))), replace=False))
    return np.sort(np.concatenate(picks))


def ref_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def ref_ece(y, proba, scheme):
    if proba.shape[1] == 2:
        conf, correct = proba[:, 1], (y == 1).astype(np.float64)
    else:
        conf, correct = proba.max(axis=1), (proba.argmax(axis=1) == y).astype(np.float64)
    edges = np.linspace(0, 1, 16)
    if scheme == "adaptive":
        q = np.quantile(conf, np.linspace(0, 1, 16))
        q[0], q[-1] = 0.0, 1.0 + 1e-9
        q = np.unique(q)
        edges = q if len(q) >= 3 else edges
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (conf >= lo) & (conf < hi)
        if m.sum():
            total += m.sum() * abs(correct[m].mean() - conf[m].mean())
    return total / len(conf)


def ref_nll(y, proba):
    return float(-np.mean(np.log(proba[np.arange(len(y)), y] + 1e-12)))


def reference_grid(train, val, test) -> list[dict]:
    import warnings

    from scipy.optimize import minimize_scalar
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import brier_score_loss, f1_score, roc_auc_score

    (Xtr, ytr), (Xva, yva), (Xte, yte) = train, val, test
    k = int(max(ytr.max(), yva.max(), yte.max())) + 1
    rows = []
    for f in FRACTIONS:
        for seed in SEEDS:
            idx = ref_subset(ytr, f, seed)
            clf = LogisticRegression(C=1.0, max_iter=1000, random_state=seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf.fit(Xtr[idx].astype(np.float32), ytr[idx])

            def chunks(method, X):
                return np.concatenate([getattr(clf, method)(X[a:a + 20000].astype(np.float32))
                                       for a in range(0, len(X), 20000)])

            proba = chunks("predict_proba", Xte).astype(np.float64)
            d_te = chunks("decision_function", Xte).astype(np.float64)
            d_va = chunks("decision_function", Xva).astype(np.float64)
            L_te = np.column_stack([-d_te, d_te]) if d_te.ndim == 1 else d_te
            L_va = np.column_stack([-d_va, d_va]) if d_va.ndim == 1 else d_va

            def nll_t(t):
                return ref_nll(yva, ref_softmax(L_va / t))

            T = float(minimize_scalar(nll_t, bounds=(0.1, 10.0), method="bounded").x)
            scaled = ref_softmax(L_te / T)
            pred = proba.argmax(axis=1)
            try:
                au = roc_auc_score(yte, proba[:, 1]) if k == 2 else roc_auc_score(yte, proba, multi_class="ovr",
                                                                                  average="macro")
            except ValueError:
                au = float("nan")
            share = np.bincount(pred, minlength=k).max() / len(pred)
            rows.append({
                "fraction": f, "seed": seed, "n_train": len(idx), "lbfgs_iter": int(np.max(clf.n_iter_)),
                "forced_classes": int(sum(len(np.where(ytr == c)[0]) * f < 1 for c in np.unique(ytr))),
                "auroc": float(au),
                "f1_macro": float(f1_score(yte, pred, average="macro", zero_division=0)),
                "f1_binary": float(f1_score(yte, pred, zero_division=0)) if k == 2 else float("nan"),
                "brier": float(brier_score_loss(yte, proba[:, 1])) if k == 2 else float("nan"),
                "ece_fixed": ref_ece(yte, proba, "fixed"), "ece_adaptive": ref_ece(yte, proba, "adaptive"),
                "temperature": T,
                "ece_scaled_fixed": ref_ece(yte, scaled, "fixed"),
                "ece_scaled_adaptive": ref_ece(yte, scaled, "adaptive"),
                "degeneracy_share": float(share), "degenerate": bool(share > 0.99),
                "nll": ref_nll(yte, proba), "nll_scaled": ref_nll(yte, scaled),
            })
    return rows


# ------------------------------------------------------------------- (b), (c), (d)
def ours_grid(train, val, test, backend: str) -> list[dict]:
    from prism_plugin.api import evaluate
    from prism_plugin.heads import logistic as probe_mod

    iters: list[tuple[int, int, float]] = []
    if backend == "sklearn":  # record lbfgs's iteration count and seconds per fit (instrumentation outside the solver)
        fit = probe_mod.LogisticProbe.fit

        def counted(self, X, y):
            t0 = time.perf_counter()
            out = fit(self, X, y)
            if self.model is not None:
                iters.append((len(y), int(np.max(self.model.n_iter_)), time.perf_counter() - t0))
            return out

        probe_mod.LogisticProbe.fit = counted
    probe = {"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": backend}
    runs = evaluate(train, val, test, fractions=FRACTIONS, seeds=SEEDS, probe=probe)
    rows = runs.to_dict(orient="records")
    if iters:
        by_n: dict[int, list[tuple[int, float]]] = {}
        for n, it, sec in iters:
            by_n.setdefault(n, []).append((it, sec))
        for r in rows:  # fits of one subset size come in grid order; the fraction-1.0 seeds share one fit
            its = by_n.get(int(r["n_train"]))
            if its:
                it, sec = its.pop(0) if len(its) > 1 else its[0]
                r["lbfgs_iter"], r["lbfgs_fit_seconds"] = it, sec
    return rows


def bandwidth(X: np.ndarray, repeats: int = 3) -> dict:
    """This machine's memory bandwidth as a pass over the feature matrix sees it (float32, this process's
    threads): the best of ``repeats`` timed passes of ``X.T @ v`` (BLAS gemv, what lbfgs's gradient does) and
    of ``X @ w`` (the forward product), in bytes per second."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    v = np.ones(X.shape[0], np.float32)
    w = np.ones(X.shape[1], np.float32)
    best = {}
    for name, op in (("X.T @ v", lambda: X.T @ v), ("X @ w", lambda: X @ w)):
        op()  # warm
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            op()
            times.append(time.perf_counter() - t0)
        best[name] = X.nbytes / min(times)
    return {"bytes_per_second": max(best.values()), "by_pass": best, "matrix_bytes": X.nbytes}


def floor_text(rows: list[dict], bw: dict, dim: int = DIM) -> tuple[str, dict]:
    """How far exact mode's lbfgs is from its memory floor: ~2 passes over a fit's features per iteration
    (the forward product and the gradient), at the measured bandwidth, against the measured fit seconds."""
    seen, iters, fit_s, read = set(), 0, 0.0, 0.0
    for r in rows:
        if r.get("lbfgs_iter") is None or r.get("lbfgs_fit_seconds") is None:
            continue
        key = (int(r["n_train"]), int(r["lbfgs_iter"]), float(r["lbfgs_fit_seconds"]))
        if key in seen:  # the fraction-1.0 seeds share one fit
            continue
        seen.add(key)
        iters += key[1]
        fit_s += key[2]
        read += 2.0 * key[1] * key[0] * dim * 4
    if not iters:
        return "", {}
    floor_s = read / bw["bytes_per_second"]
    info = {"lbfgs_iterations": iters, "fit_seconds": fit_s, "bytes_read": read, "bandwidth": bw["bytes_per_second"],
            "floor_seconds": floor_s, "over_floor": fit_s / floor_s, "seconds_per_iteration": fit_s / iters,
            "floor_seconds_per_iteration": floor_s / iters}
    text = (f"   exact mode's floor: {iters} lbfgs iterations over the grid's fits read ~2 passes of their features "
            f"each = {read / 1e9:.2f} GB; at the measured {bw['bytes_per_second'] / 1e9:.1f} GB/s (a float32 pass over "
            f"the train matrix, {bw['matrix_bytes'] / 2**20:.0f} MiB) that is {floor_s:.2f} s; the fits took "
            f"{fit_s:.2f} s ({fit_s / iters * 1e3:.1f} ms per iteration vs {floor_s / iters * 1e3:.1f} ms of reads): "
            f"{fit_s / floor_s:.1f}x the floor")
    return text, info


# --------------------------------------------------------------------- worker
def _status(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of this process in bytes (VmHWM is reset by exec, unlike ru_maxrss)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def worker(variant: str, data: Path, out: Path) -> None:
    import prism_plugin.api  # noqa: F401  (imports outside the timed region, as for every variant)
    import prism_plugin.protocol.torch_probe  # noqa: F401
    import scipy.optimize  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import torch

    baseline = _status("VmRSS")
    train, val, test = load(data)
    feature_bytes = sum(X.nbytes for X, _ in (train, val, test))
    load1 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    rows = reference_grid(train, val, test) if variant == "reference" else ours_grid(train, val, test, BACKEND[variant])
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    bw = bandwidth(train[0]) if variant == "ours" else None  # after the timed region
    peak = _status("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "variant": variant, "seconds": seconds, "cpu_seconds": cpu, "peak_rss": peak, "baseline_rss": baseline,
        "feature_bytes": feature_bytes, "loadavg_start": load1, "loadavg_end": os.getloadavg()[0],
        "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(), "bandwidth": bw,
        "rows": [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in rows],
    }
    out.write_text(json.dumps(result, default=str))


# --------------------------------------------------------------------- parent
def _child(args: list[str], env: dict) -> None:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed:\n{proc.stderr[-4000:]}")


def run_variant(variant: str, data: Path, work: Path, env: dict) -> dict:
    out = work / f"{data.name}-{variant}.json"
    _child(["--worker", variant, "--data", str(data), "--out", str(out)], env)
    return json.loads(out.read_text())


def run_generate(name: str, regime: str, data: Path, scale: float, env: dict) -> dict:
    """Generate in a child process, so this one never holds the large arrays."""
    _child(["--generate", name, "--regime", regime, "--data", str(data), "--scale", repr(scale)], env)
    return json.loads((data / "info.json").read_text())


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def column_diffs(a: list[dict], b: list[dict], columns=METRICS) -> dict[str, float]:
    key = lambda r: (float(r["fraction"]), int(r["seed"]))  # noqa: E731
    bi = {key(r): r for r in b}
    diffs = {}
    for col in columns:
        worst = 0.0
        for r in a:
            x, y = _num(r.get(col)), _num(bi[key(r)].get(col))
            if np.isnan(x) and np.isnan(y):
                continue
            worst = max(worst, abs(x - y) if not (np.isnan(x) or np.isnan(y)) else float("inf"))
        diffs[col] = worst
    return diffs


def parse_scale(args) -> float:
    if args.scale is not None:
        if not 0 < args.scale <= 1:
            raise SystemExit("--scale: must be in (0, 1], e.g. --scale 0.3")
        return float(args.scale)
    return 0.1 if args.quick else 1.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1/10-size data (= --scale 0.1; a few minutes)")
    p.add_argument("--scale", type=float, default=None, help="every split's size times this factor (0 < s <= 1)")
    p.add_argument("--regime", default="all", choices=(*REGIMES, "both", "all"),
                   help="data construction: A (axis-aligned power law, lbfgs slow), B (rotated flatter spectrum, "
                        "overlapping classes, 7%% label noise; lbfgs stops early), C (flat rotated spectrum, close "
                        "classes, 40%% label noise: few iterations on many classes), D (whitened: flat spectrum, no "
                        "shared mean), both (A and B) or all (default)")
    p.add_argument("--datasets", default="pcam,crc", help="comma-separated subset of: " + ", ".join(DATASETS))
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of: " + ", ".join(VARIANTS))
    p.add_argument("--workdir", type=Path, default=None, help="where the generated data go (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write all figures to this JSON file")
    p.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1,
                   help="BLAS / OpenMP / torch threads in every variant (default 1: reproducible on a busy "
                        "machine; 0 = the libraries' own default)")
    p.add_argument("--generate", choices=list(DATASETS), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.data, args.out)
        return 0
    scale = parse_scale(args)
    if args.generate:
        info = generate(args.data, args.generate, scale, args.regime)
        (args.data / "info.json").write_text(json.dumps(info))
        return 0
    env = dict(os.environ)
    if args.threads < 0:
        p.error("--threads: must be 0 (library default) or a positive count")
    if args.threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(args.threads)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    regimes = list(REGIMES) if args.regime == "all" else ["A", "B"] if args.regime == "both" else [args.regime]
    for n in names:
        if n not in DATASETS:
            p.error(f"--datasets: unknown {n!r}; choose from {', '.join(DATASETS)}")
    for v in variants:
        if v not in VARIANTS:
            p.error(f"--variants: unknown {v!r}; choose from {', '.join(VARIANTS)}")
    tmp = None
    work = args.workdir
    if work is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_grid-")
        work = Path(tmp.name)
    report = {"mode": f"scale {scale:g}", "scale": scale, "threads": args.threads, "machine": machine(),
              "loadavg_start": os.getloadavg(), "datasets": {}}
    print(f"bench_grid: scale {scale:g}, regimes {'+'.join(regimes)}, threads {args.threads or 'default'}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    t_all = time.perf_counter()
    table = []
    try:
        for regime in regimes:
            for name in names:
                t0 = time.perf_counter()
                tag = f"{name}-{regime}"
                info = run_generate(name, regime, work / tag, scale, env)
                print(f"\n== {name}, regime {regime}: {info['n_train']:,} x {DIM} train, {info['n_val']:,} val, "
                      f"{info['n_test']:,} test, K = {info['n_classes']}, features "
                      f"{info['feature_bytes'] / 2**30:.2f} GiB, mean cosine to the mean direction "
                      f"{info['mean_cosine']:.2f} (generated in {time.perf_counter() - t0:.0f} s)", flush=True)
                results = {}
                for v in variants:
                    results[v] = run_variant(v, work / tag, work, env)
                    r = results[v]
                    print(f"   {v:<9} {r['seconds']:8.1f} s  cpu {r['cpu_seconds']:7.1f} s  peak RSS "
                          f"{r['peak_rss'] / 2**30:5.2f} GiB = {r['peak_rss'] / r['feature_bytes']:.2f} x features "
                          f"(+{(r['peak_rss'] - r['baseline_rss']) / r['feature_bytes']:.2f} x over the "
                          f"{r['baseline_rss'] / 2**20:.0f} MiB after imports)  load {r['loadavg_start']:.1f}"
                          f"->{r['loadavg_end']:.1f}", flush=True)
                summary = summarise(results)
                for line in summary.pop("lines"):
                    print(line)
                for v, r in results.items():
                    s_v = summary.get(v, {})
                    table.append((regime, name, v, r["seconds"], r["cpu_seconds"], s_v.get("speedup_vs_reference"),
                                  s_v.get("speedup_vs_exact"), s_v.get("cpu_speedup_vs_reference"),
                                  s_v.get("cpu_speedup_vs_exact"), r["peak_rss"] / r["feature_bytes"],
                                  (r["peak_rss"] - r["baseline_rss"]) / r["feature_bytes"]))
                report["datasets"][tag] = {"data": info, "summary": summary,
                                           "variants": {v: {k: x for k, x in r.items() if k != "rows"}
                                                        for v, r in results.items()},
                                           "rows": {v: r["rows"] for v, r in results.items()}}
    finally:
        if tmp is not None:
            tmp.cleanup()
    print("\n== every variant, every regime (speed-ups: the other's seconds over this variant's; wall clock and, "
          "steadier on a shared machine, CPU seconds: every variant is single-threaded)")
    print(f"   {'regime':<6} {'data':<5} {'variant':<9} {'wall s':>7} {'cpu s':>7} {'x ref':>6} {'x exact':>7} "
          f"{'cpu x ref':>9} {'cpu x exact':>11} {'RSS/feat':>8} {'+RSS/feat':>9}")
    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    for regime, name, v, sec, cpu, xr, xe, cr, ce, rss, drss in table:
        print(f"   {regime:<6} {name:<5} {v:<9} {sec:7.1f} {cpu:7.1f} {fmt(xr):>6} {fmt(xe):>7} {fmt(cr):>9} "
              f"{fmt(ce):>11} {rss:8.2f} {drss:9.2f}")
    fast_rows = [(regime, name, xe, ce) for regime, name, v, sec, cpu, xr, xe, cr, ce, rss, drss in table
                 if v == "fast" and xe is not None]
    if fast_rows:
        print("\n== fast / exact, every regime (target: >= 0.97 everywhere, >= 1.5 where exact lbfgs needs >= 75 "
              "iterations)")
        print(f"   {'regime':<6} {'data':<5} {'x exact':>7} {'cpu x exact':>11}  exact lbfgs iterations per fraction")
        for regime, name, xe, ce in fast_rows:
            its = report["datasets"][f"{name}-{regime}"]["summary"].get("exact_lbfgs_iterations", "")
            print(f"   {regime:<6} {name:<5} {xe:7.2f} {ce:11.2f}  {its}")
    report["table"] = [dict(zip(("regime", "data", "variant", "seconds", "cpu_seconds", "x_reference", "x_exact",
                                 "cpu_x_reference", "cpu_x_exact", "rss_over_features", "rss_increase_over_features"),
                                t)) for t in table]
    report["loadavg_end"] = os.getloadavg()
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


def _iterations(rows: list[dict]) -> str:
    by_f: dict[float, list[int]] = {}
    for r in rows:
        if r.get("lbfgs_iter") is not None:
            by_f.setdefault(float(r["fraction"]), []).append(int(r["lbfgs_iter"]))
    return ", ".join(f"{f:g}: {min(v)}" + (f"-{max(v)}" if max(v) != min(v) else "") for f, v in sorted(by_f.items()))


def summarise(results: dict) -> dict:
    out: dict = {"lines": []}
    ref, exact = results.get("reference"), results.get("ours")
    for v in ("ours", "torch", "fast"):
        if v not in results:
            continue
        r = results[v]
        entry: dict = {}
        parts = []
        if ref is not None:
            diffs = column_diffs(ref["rows"], r["rows"])
            entry.update(speedup_vs_reference=ref["seconds"] / r["seconds"], max_column_diff=max(diffs.values()),
                         column_diffs=diffs)
            parts.append(f"{entry['speedup_vs_reference']:.2f}x the reference loop")
        if ref is not None:
            entry["cpu_speedup_vs_reference"] = ref["cpu_seconds"] / r["cpu_seconds"]
            parts[-1] += f" ({entry['cpu_speedup_vs_reference']:.2f}x in CPU seconds)"
        if exact is not None:
            entry["speedup_vs_exact"] = exact["seconds"] / r["seconds"]
            entry["cpu_speedup_vs_exact"] = exact["cpu_seconds"] / r["cpu_seconds"]
            if v != "ours":
                agree = column_diffs(exact["rows"], r["rows"], AGREEMENT)
                entry["agreement_with_exact"] = agree
                parts.append(f"{entry['speedup_vs_exact']:.2f}x exact ({entry['cpu_speedup_vs_exact']:.2f}x in CPU "
                             f"seconds)")
        out[v] = entry
        out["lines"].append(f"   {v}: " + ("; ".join(parts) or "no reference to compare"))
        if v == "ours" and "column_diffs" in entry:
            out["lines"].append(f"      max |diff| over all columns vs the reference loop {entry['max_column_diff']:.3g}")
        if "agreement_with_exact" in entry:
            a = entry["agreement_with_exact"]
            out["lines"].append("      max |diff| vs exact: AUROC {auroc:.2g}, ECE {ece_fixed:.2g}, scaled ECE "
                                "{ece_scaled_fixed:.2g}, T {temperature:.2g}".format(**a))
        if v == "torch":
            conv = [row.get("probe_converged") for row in r["rows"]]
            out["lines"].append(f"      torch fits converged: {sum(bool(c) for c in conv)}/{len(conv)} runs")
        if v == "fast":
            out["lines"].append("      " + fast_stats(r["rows"]))
    src = exact or ref
    if src is not None:
        out["exact_lbfgs_iterations"] = _iterations(src["rows"])
        out["lines"].append(f"   exact-mode lbfgs iterations per fraction: {out['exact_lbfgs_iterations']}")
    if exact is not None and exact.get("bandwidth"):
        text, info = floor_text(exact["rows"], exact["bandwidth"])
        if text:
            out["exact_floor"] = info
            out["lines"].append(text)
    return out


def fast_stats(rows: list[dict]) -> str:
    """What fast mode's solver did, from its runs.csv columns."""
    solvers: dict[str, int] = {}
    for r in rows:
        solvers[str(r.get("probe_solver"))] = solvers.get(str(r.get("probe_solver")), 0) + 1
    its = _iterations([{**r, "lbfgs_iter": r.get("probe_iter")} for r in rows])
    pc = [r for r in rows if r.get("probe_solver") == "lbfgs-preconditioned"]
    if not pc:
        return (f"fast solver: {', '.join(f'{k} x{n}' for k, n in solvers.items())} (every fit exactly as exact "
                f"mode: no timed trial was made)")
    trials = [r for r in rows if str(r.get("probe_choice", "")).startswith("trial-")]
    decided = "; ".join(f"trial f{r['fraction']:g}-s{r['seed']} ({r['n_train']} rows) "
                        f"{_num(r.get('probe_trial_seconds')):.2f} s (build {_num(r.get('probe_build_seconds')):.2f} s) "
                        f"vs exact {_num(r.get('probe_exact_seconds')):.2f} s:"
                        f" {'won' if r['probe_choice'] == 'trial-won' else 'lost, exact after it'}" for r in trials)
    decided = f"decision: {decided}; " if decided else "decision: no trial; "
    grads = [_num(r.get("probe_grad_max")) for r in pc]
    bounds = [_num(r.get("probe_decision_bound")) for r in pc]
    finite = [b for b in bounds if np.isfinite(b)]
    cert = (f"certified decision-value bound finite for {len(finite)}/{len(pc)} (max {max(finite):.2g})"
            if finite else "no finite certified bound (tol 1e-4 on large n)")
    return (f"fast solver: {decided}{', '.join(f'{k} x{n}' for k, n in solvers.items())}; iterations per fraction {its}; "
            f"preconditioned fits stopped at max |grad| <= {max(grads):.1e}; {cert}")


def machine() -> dict:
    import platform

    info = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    try:
        with open("/proc/cpuinfo") as fh:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
        with open("/proc/meminfo") as fh:
            info["mem_gib"] = round(int(fh.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        import sklearn
        import torch

        info.update(numpy=np.__version__, sklearn=sklearn.__version__, torch=torch.__version__,
                    cuda=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except Exception:  # pragma: no cover
        pass
    return info


if __name__ == "__main__":
    sys.exit(main())
