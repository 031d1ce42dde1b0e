#!/usr/bin/env python
"""Benchmark the per-run test-set bootstrap (``prism_plugin.metrics.bootstrap``).

For each scale (PCam-sized test split: N = 32,768, K = 2; CRC-sized: N = 15,000, K = 9; demo-sized:
N = 500, K = 2) and two kinds of scores (``continuous``: Gaussian logits, every score distinct;
``tied``: logits rounded to 0.5, the few distinct values a kNN-like probe gives, with saturated
probabilities), it prints

* the time of one run's bootstrap (B replicates of all nine metrics, raw and temperature-scaled,
  chunked as the plugin does; median of ``--repeat``),
* the time per replicate of the naive loop (the metric functions of ``prism_plugin.metrics.core``
  on each resampled test set; timed on ``--naive`` replicates) and the ratio,
* the largest difference between the two on those replicates (target: <= 1e-12),
* the share of a PRISM cell: the per-run times of BENCHMARKS.md (PCam-sized 87.4 s / 18 runs,
  CRC-sized 128.6 s / 18 runs for exact mode; 31.4 s and 32.4 s / 18 runs with the torch backend).

Usage::

    python benchmarks/bench_bootstrap.py                 # B = 200, about a minute on one core
    python benchmarks/bench_bootstrap.py --n 1000 --naive 5
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from prism_plugin.metrics import resampling as rs  # noqa: E402
from prism_plugin.metrics import core  # noqa: E402

SCALES = {"pcam": (32_768, 2), "crc": (15_000, 9), "demo": (500, 2), "demo160": (160, 2), "demo3": (160, 3)}
#: seconds per run of a PRISM cell (BENCHMARKS.md, full size, --threads 1): exact mode, torch backend
CELL_SECONDS = {"pcam": (87.4 / 18, 31.4 / 18), "crc": (128.6 / 18, 32.4 / 18)}


def make(n: int, k: int, kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.choice(k, size=n, p=np.linspace(1, 2, k) / np.linspace(1, 2, k).sum())
    logits = rng.normal(size=(n, k)) * 1.5 + 2.0 * np.eye(k)[y]
    if kind == "tied":
        logits = np.round(logits * 2) / 2 * 6  # few distinct values, many saturated probabilities
    if k == 2:
        d = logits[:, 1] - logits[:, 0]
        return y, core.binary_proba_from_decision(d), core.binary_logits(d)
    return y, core.softmax(logits), logits


def naive(y, p, ps, idx, bins=15):
    out = {m: [] for m in rs.BOOT_METRICS}
    for r in idx:
        yy, pp, qq = y[r], p[r], ps[r]
        out["auroc"].append(core.auroc(yy, pp))
        out["f1_macro"].append(core.f1_macro(yy, pp.argmax(axis=1)))
        out["brier"].append(core.brier(yy, pp))
        out["nll"].append(core.nll(yy, pp))
        out["nll_scaled"].append(core.nll(yy, qq))
        out["ece_fixed"].append(core.ece(yy, pp, bins, "fixed"))
        out["ece_adaptive"].append(core.ece(yy, pp, bins, "adaptive"))
        out["ece_scaled_fixed"].append(core.ece(yy, qq, bins, "fixed"))
        out["ece_scaled_adaptive"].append(core.ece(yy, qq, bins, "adaptive"))
    return {m: np.array(v) for m, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="replicates per run (default 200)")
    ap.add_argument("--naive", type=int, default=10, help="replicates timed with the naive loop (default 10)")
    ap.add_argument("--repeat", type=int, default=5, help="timed repeats of the fast path (median)")
    ap.add_argument("--scales", default="pcam,crc,demo")
    args = ap.parse_args()
    print(f"B = {args.n} replicates; times are medians of {args.repeat}; naive loop on {args.naive} replicates")
    print(f"{'scale':6} {'scores':10} {'fast / run':>11} {'naive / run':>12} {'ratio':>8} {'max |diff|':>11} "
          f"{'% of cell (exact / torch)':>26}")
    for scale in args.scales.split(","):
        n, k = SCALES[scale]
        for kind in ("continuous", "tied"):
            y, p, logits = make(n, k, kind)
            ps = core.probabilities_from_logits(logits, 1.7 if k > 2 else 3.1)
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                rs.run_bootstrap(y, p, ps, 15, args.n, 0)
                times.append(time.perf_counter() - t0)
            fast = float(np.median(times))
            idx = rs.bootstrap_indices(y, args.naive, 0)
            t0 = time.perf_counter()
            ref = naive(y, p, ps, idx)
            per_rep = (time.perf_counter() - t0) / args.naive
            got = rs.replicate_metrics(y, p, ps, idx, 15)
            diff = max(float(np.nanmax(np.abs(got[m] - ref[m]))) if np.isfinite(ref[m]).any() else 0.0
                       for m in rs.BOOT_METRICS)
            slow = per_rep * args.n
            share = (f"{100 * fast / CELL_SECONDS[scale][0]:.1f} % / {100 * fast / CELL_SECONDS[scale][1]:.1f} %"
                     if scale in CELL_SECONDS else "-")
            unit = (lambda s: f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.1f} s")
            print(f"{scale:6} {kind:10} {unit(fast):>11} {unit(slow):>12} {slow / fast:>7.0f}x {diff:>11.1e} {share:>26}")


if __name__ == "__main__":
    main()
