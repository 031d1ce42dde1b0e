#!/usr/bin/env python
"""Which data regime do real foundation-model embeddings resemble? Statistics of bench_grid's regimes.

For each of bench_grid's data regimes, on a PCam-like (K = 2) and a CRC-like
(K = 9) dataset x 1,536 dims with the training rows of one PRISM label fraction
(PCam 10 %: 26,214 rows; CRC 25 %: 17,500 rows; val and test scaled alike), this prints:

* the mean cosine of the rows to their mean direction (= the norm of the mean row, rows are unit-norm);
* the spectrum of the centred covariance: the share of the top eigenvalue, the
  power-law slope of eigenvalues 2..200 (lambda_i ~ i^-alpha), the effective
  rank (exp of the eigenvalue entropy) and the condition number of the
  uncentred second-moment matrix (what lbfgs sees, with the intercept);
* scikit-learn lbfgs (C = 1, tol 1e-4, the reference's settings) at fraction 1.0:
  iterations and seconds, single-threaded;
* the protocol's numbers at fraction 1.0 (``prism_plugin.api.evaluate``): AUROC,
  fixed-bin ECE and the fitted temperature;

and beside them the same protocol numbers of the PRISM paper's real runs at that
label fraction (``--results DIR``: ``indomain_all_v2.csv`` of the PRISM results
release; the same number of training rows), for the 1,536-dim models and for all eight.

Usage::

    python benchmarks/regime_stats.py --results /path/to/prism_results_v2   # ~3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def embedding_stats(X: np.ndarray) -> dict:
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    out = {"mean_cosine": float(np.linalg.norm(mean) / np.mean(np.linalg.norm(X, axis=1)))}
    Xc = X - mean
    ev = np.linalg.eigvalsh(Xc.T @ Xc / len(X))[::-1]
    ev = np.clip(ev, 1e-300, None)
    out["top_eig_share"] = float(ev[0] / ev.sum())
    i = np.arange(2, min(200, len(ev)) + 1)
    out["spectrum_slope"] = float(-np.polyfit(np.log(i), np.log(ev[i - 1]), 1)[0])
    p = ev / ev.sum()
    out["effective_rank"] = float(np.exp(-(p * np.log(p)).sum()))
    Xa = np.hstack([X, np.ones((len(X), 1))])
    sv = np.linalg.eigvalsh(Xa.T @ Xa / len(X))
    out["cond_second_moment"] = float(sv[-1] / max(sv[0], 1e-300))
    return out


def lbfgs_stats(X, y) -> dict:
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=1.0, max_iter=1000, random_state=42)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(np.asarray(X, dtype=np.float32), y)
    return {"lbfgs_iterations": int(np.max(clf.n_iter_)), "lbfgs_seconds": time.perf_counter() - t0}


def protocol_stats(train, val, test) -> dict:
    from prism_plugin.api import evaluate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = evaluate(train, val, test, fractions=(1.0,), seeds=(42,))
    r1 = runs.iloc[0]
    return {"auroc": float(r1.auroc), "ece": float(r1.ece_fixed), "T": float(r1.temperature),
            "ece_scaled": float(r1.ece_scaled_fixed)}


#: bench_grid dataset -> (PRISM dataset, the label fraction whose training rows the generated set gets)
MATCH = {"pcam": ("PCam", 0.10), "crc": ("CRC", 0.25)}


def real_stats(results: Path) -> list[dict]:
    import pandas as pd

    d = pd.read_csv(results / "indomain_all_v2.csv")
    d["model"] = d["model"].str.upper()
    out = []
    for ds, f in MATCH.values():
        for label, models in (("1536-dim models", {"GIGAPATH", "H-OPTIMUS-0", "MIDNIGHT"}), ("all 8", None)):
            sub = d[(d.dataset == ds) & (d.fraction == f)]
            if models:
                sub = sub[sub.model.isin(models)]
            out.append({"data": f"{ds} at {f:g} ({int(sub.n_train.iloc[0]):,} rows)", "which": label,
                        "auroc": (sub.auroc.min(), sub.auroc.max()), "ece": (sub.ece_fixed.min(), sub.ece_fixed.max()),
                        "T": (sub.temperature.min(), sub.temperature.max()),
                        "ece_scaled": (sub.ece_scaled_fixed.min(), sub.ece_scaled_fixed.max())})
    return out


def main(argv=None) -> int:
    import bench_grid as bg

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=None, help="folder with the PRISM results' indomain_all_v2.csv")
    p.add_argument("--regimes", default=",".join(getattr(bg, "REGIMES", ("A",))))
    args = p.parse_args(argv)
    regimes = [r for r in args.regimes.split(",") if r]
    rows = []
    with tempfile.TemporaryDirectory(prefix="regime_stats-") as tmp:
        for regime in regimes:
            for name in ("pcam", "crc"):
                path = Path(tmp) / f"{regime}-{name}"
                kwargs = {"regime": regime} if hasattr(bg, "REGIMES") else {}
                bg.generate(path, name, scale=MATCH[name][1], seed=0, **kwargs)
                train, val, test = bg.load(path)
                r = {"regime": regime, "data": name, "n_train": len(train[1])}
                r.update(embedding_stats(train[0][:8000]))
                r.update(lbfgs_stats(*train))
                r.update(protocol_stats(train, val, test))
                rows.append(r)
                print(f"{regime} {name:<4} n={r['n_train']:,}: mean cos {r['mean_cosine']:.3f}, top eig share "
                      f"{r['top_eig_share']:.3f}, slope {r['spectrum_slope']:.2f}, eff. rank {r['effective_rank']:.0f}, "
                      f"cond {r['cond_second_moment']:.3g}; lbfgs {r['lbfgs_iterations']} it {r['lbfgs_seconds']:.1f} s; "
                      f"AUROC {r['auroc']:.4f} ECE {r['ece']:.3f} T {r['T']:.2f} ECE after T {r['ece_scaled']:.3f}",
                      flush=True)
    if args.results:
        for r in real_stats(args.results):
            print(f"real {r['data']:<4} ({r['which']}): " + ", ".join(
                f"{k} {v[0]:.3f}-{v[1]:.3f}" for k, v in r.items() if isinstance(v, tuple)))
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
