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

Printed per dataset: grid seconds, ratio to (a), peak RSS over the feature
bytes, the maximum absolute difference of every metric column against (a)
(target for (b): <= 1e-12), and the torch fits' convergence.

Usage::

    python benchmarks/bench_grid.py --quick              # ~1 minute, 1/10-size data
    python benchmarks/bench_grid.py                      # PCam- and CRC-sized (~12 minutes on 2 cores)
    python benchmarks/bench_grid.py --datasets crc --variants reference,ours --json out.json
    python benchmarks/bench_grid.py --threads 0          # the libraries' own thread counts

Every variant runs with the same thread settings (``--threads``, default 1:
OMP/OpenBLAS/MKL and torch), because scikit-learn's tol = 1e-4 result depends
on the BLAS thread count and multi-threaded BLAS is erratic on a busy machine.

Sizes: PCam-sized 262,144 x 1,536 (K = 2) + 32,768 val + 32,768 test;
CRC-sized 70,000 x 1,536 (K = 9) + 15,000 val + 15,000 test; ``--quick``
divides every split by 10. Rows are unit-norm float32 with a shared mean
direction, a power-law spectrum and class means spread over it, the structure
that makes real foundation-model embeddings slow for lbfgs.
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
VARIANTS = ("reference", "ours", "torch")
METRICS = ["auroc", "f1_macro", "f1_binary", "brier", "ece_fixed", "ece_adaptive", "temperature",
           "ece_scaled_fixed", "ece_scaled_adaptive", "degeneracy_share", "degenerate", "nll", "nll_scaled",
           "n_train", "forced_classes"]


# --------------------------------------------------------------------------- data
def generate(path: Path, name: str, quick: bool, seed: int = 0) -> dict:
    """Write train/val/test ``.npy`` files for one dataset; return its description."""
    n_train, n_val, n_test, k, sep = DATASETS[name]
    if quick:
        n_train, n_val, n_test = n_train // 10, n_val // 10, n_test // 10
    geo = np.random.default_rng(seed)
    scale = ((np.arange(DIM) + 1.0) ** -1.0).astype(np.float32)
    scale *= np.float32(np.sqrt(DIM / float((scale.astype(np.float64) ** 2).sum())))
    means = geo.standard_normal((k, DIM)).astype(np.float32) * scale
    means *= sep * np.sqrt(DIM) / np.linalg.norm(means, axis=1, keepdims=True) / np.sqrt(2)
    shared = np.zeros(DIM, np.float32)
    shared[0] = np.sqrt(DIM)
    path.mkdir(parents=True, exist_ok=True)
    for split, n, s in (("train", n_train, 1), ("val", n_val, 2), ("test", n_test, 3)):
        rng = np.random.default_rng([seed, s])
        y = rng.integers(0, k, n)
        X = np.lib.format.open_memmap(path / f"{split}_X.npy", mode="w+", dtype=np.float32, shape=(n, DIM))
        for a in range(0, n, 16384):
            e = min(n, a + 16384)
            block = rng.standard_normal((e - a, DIM), dtype=np.float32)
            block *= scale
            block += means[y[a:e]]
            block += shared
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            X[a:e] = block
        X.flush()
        del X
        np.save(path / f"{split}_y.npy", y)
    return {"name": name, "n_train": n_train, "n_val": n_val, "n_test": n_test, "n_classes": k, "dim": DIM,
            "feature_bytes": 4 * DIM * (n_train + n_val + n_test)}


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
                "fraction": f, "seed": seed, "n_train": len(idx),
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


# ------------------------------------------------------------------- (b), (c)
def ours_grid(train, val, test, backend: str) -> list[dict]:
    from prism_plugin.api import evaluate

    probe = {"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": backend}
    runs = evaluate(train, val, test, fractions=FRACTIONS, seeds=SEEDS, probe=probe)
    return runs.to_dict(orient="records")


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
    import scipy.optimize  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import torch

    baseline = _status("VmRSS")
    train, val, test = load(data)
    feature_bytes = sum(X.nbytes for X, _ in (train, val, test))
    load1 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    rows = reference_grid(train, val, test) if variant == "reference" else \
        ours_grid(train, val, test, "sklearn" if variant == "ours" else "torch")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _status("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "variant": variant, "seconds": seconds, "cpu_seconds": cpu, "peak_rss": peak, "baseline_rss": baseline,
        "feature_bytes": feature_bytes, "loadavg_start": load1, "loadavg_end": os.getloadavg()[0],
        "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(),
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


def run_generate(name: str, data: Path, quick: bool, env: dict) -> dict:
    """Generate in a child process, so this one never holds the large arrays."""
    _child(["--generate", name, "--data", str(data)] + (["--quick"] if quick else []), env)
    return json.loads((data / "info.json").read_text())


def column_diffs(a: list[dict], b: list[dict]) -> dict[str, float]:
    key = lambda r: (float(r["fraction"]), int(r["seed"]))  # noqa: E731
    bi = {key(r): r for r in b}
    diffs = {}
    for col in METRICS:
        worst = 0.0
        for r in a:
            x, y = r.get(col), bi[key(r)].get(col)
            x = float("nan") if x is None else float(x)
            y = float("nan") if y is None else float(y)
            if np.isnan(x) and np.isnan(y):
                continue
            worst = max(worst, abs(x - y) if not (np.isnan(x) or np.isnan(y)) else float("inf"))
        diffs[col] = worst
    return diffs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1/10-size data (finishes in a few minutes)")
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
    if args.generate:
        info = generate(args.data, args.generate, args.quick)
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
    report = {"mode": "quick" if args.quick else "full", "threads": args.threads, "machine": machine(),
              "datasets": {}}
    t_all = time.perf_counter()
    try:
        for name in names:
            t0 = time.perf_counter()
            info = run_generate(name, work / name, args.quick, env)
            print(f"\n== {name}: {info['n_train']:,} x {DIM} train, {info['n_val']:,} val, {info['n_test']:,} test, "
                  f"K = {info['n_classes']}, features {info['feature_bytes'] / 2**30:.2f} GiB "
                  f"(generated in {time.perf_counter() - t0:.0f} s)", flush=True)
            results = {}
            for v in variants:
                results[v] = run_variant(v, work / name, work, env)
                r = results[v]
                print(f"   {v:<9} {r['seconds']:8.1f} s  cpu {r['cpu_seconds']:7.1f} s  peak RSS "
                      f"{r['peak_rss'] / 2**30:5.2f} GiB = {r['peak_rss'] / r['feature_bytes']:.2f} x features "
                      f"(+{(r['peak_rss'] - r['baseline_rss']) / r['feature_bytes']:.2f} x over the "
                      f"{r['baseline_rss'] / 2**20:.0f} MiB after imports)  load {r['loadavg_start']:.1f}"
                      f"->{r['loadavg_end']:.1f}", flush=True)
            summary = summarise(results)
            for line in summary.pop("lines"):
                print(line)
            report["datasets"][name] = {"data": info, "summary": summary,
                                        "variants": {v: {k: x for k, x in r.items() if k != "rows"}
                                                     for v, r in results.items()},
                                        "rows": {v: r["rows"] for v, r in results.items()}}
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


def summarise(results: dict) -> dict:
    out: dict = {"lines": []}
    ref = results.get("reference")
    for v in ("ours", "torch"):
        if v not in results:
            continue
        r = results[v]
        if ref is not None:
            ratio = ref["seconds"] / r["seconds"]
            diffs = column_diffs(ref["rows"], r["rows"])
            worst = max(diffs.values())
            out[v] = {"speedup_vs_reference": ratio, "max_column_diff": worst, "column_diffs": diffs}
            out["lines"].append(f"   {v}: {ratio:.2f}x the reference loop; max |diff| over all columns {worst:.3g}")
            out["lines"].append("      " + ", ".join(f"{c} {d:.2g}" for c, d in diffs.items()))
        if v == "torch":
            conv = [row.get("probe_converged") for row in r["rows"]]
            out["lines"].append(f"   torch fits converged: {sum(bool(c) for c in conv)}/{len(conv)} runs")
    return out


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
