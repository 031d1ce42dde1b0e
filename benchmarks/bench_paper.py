#!/usr/bin/env python
"""The whole PRISM paper as one benchmark: every probe grid of the paper, on generated embeddings.

Cells (one cell = one 6-fraction x 3-seed probe grid, temperatures and every metric):

* in-domain: 8 models x 6 datasets (48 cells);
* label-definition transfer: PCam->MHIST, MHIST->PCam (K = 2 as in-domain),
  CRC->BRACS, BRACS->CRC (both binarised): probe fitted on the source's train
  split, temperature on the source's val split, evaluated on the target's test
  split (8 x 4 = 32 cells);
* Camelyon17: 5 hospitals in-domain (14,000 / 3,000 / 3,000, K = 2) and the 20
  ordered hospital pairs (8 x 25 = 200 cells).

That is 280 grids, 5,040 runs. Model dimensions are the paper's (CLIP 768,
PLIP 768, CONCH 512, UNI 1024, Virchow2 2560, GigaPath / H-optimus-0 / Midnight
1536); split sizes are the paper's times ``--scale`` (rows scale, dims do not;
every split keeps at least ``--min-per-class`` rows per class). The rows come
from ``bench_grid.py``'s generator (``--regime``, when bench_grid offers more
than one), with a different geometry seed per model and dataset.

Modes (each cell runs every mode back to back, so the ratios share the load):

* ``reference``: ``bench_grid.reference_grid`` (a loop written like the
  reference evaluator: one scikit-learn fit per run, two prediction passes);
* ``exact``: ``prism_plugin.api.evaluate`` (scikit-learn lbfgs, bit-identical);
* ``fast``: ``evaluate`` with ``probe.backend = fast`` (skipped, with a note,
  while prism_plugin does not accept it);
* ``exact-jobs2`` / ``fast-jobs2``: the package's local executor with 2 worker
  processes (``prism-run --jobs 2``: one pool for the whole run, started by the first
  such cell; label fractions in parallel);
* ``exact-ray2`` / ``fast-ray2``: the package's Ray executor on a local
  2-CPU instance (``--executor ray --jobs 2``; skipped when Ray is missing).

A transfer cell is its own grid in every mode here (``evaluate`` fits the source probe
again; ``prism-run`` shares the source's fits when the in-domain task runs in the same
command, see ``prism_plugin.protocol.fit_memo``). The reference evaluator instead
reuses the source's in-domain probe for PCam<->MHIST and for the Camelyon17
pairs (``temperature_src`` of ``ood_all_v2.csv`` / ``camelyon17_transfer.csv``
equals the in-domain ``temperature`` run for run); the report prints the total
with those grids left out too ("shared fits").

The ``--jobs 2`` / Ray modes run on every ``--parallel-every``-th cell only
(default 28: 10 cells), to keep the run short; their totals are estimated as the
sequential total times the sample's ratio.

Projection to full size. W = sum over a cell's 18 runs of n_train x dim x C
(C = 1 for K = 2, else K). The dominant in-domain cells (PCam, CRC,
SPIDER-Breast, Camelyon17 h0, for GigaPath or else the first model) are measured
again at ``--anchor-scales``. A full-size cell whose W lies inside the measured
range is interpolated with t = a + b W^p fitted per mode on every measured cell;
a larger one (PCam, CRC, SPIDER-Breast and their transfer cells) is extrapolated
from its own data's top anchor, t = t_anchor (W / W_anchor)^q, with q from the
two largest anchor scales. The same local rule one step down (predict the top
anchor from the two below it) and bench_grid's full-size grids (BENCHMARKS.md)
give its error; both are printed.

Usage::

    python benchmarks/bench_paper.py                       # scale 0.01, every mode (a few minutes)
    python benchmarks/bench_paper.py --scale 0.001 --modes reference,exact
    python benchmarks/bench_paper.py --json paper.json      # ... and keep every figure
    python benchmarks/bench_paper.py --models GigaPath --modes reference,exact --scale 0.03 \\
        --anchor-scales 0.1,0.3                            # a closer projection for one model (~5 minutes)
    python benchmarks/bench_paper.py --from-json paper.json  # the summary of an earlier run again
    python benchmarks/bench_paper.py --models GigaPath,UNI --groups indomain
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

MODELS = {"CLIP": 768, "PLIP": 768, "CONCH": 512, "UNI": 1024, "Virchow2": 2560, "GigaPath": 1536,
          "H-optimus-0": 1536, "Midnight": 1536}
#: name: (n_train, n_val, n_test, K, class separation passed to bench_grid's generator)
DATASETS = {
    "PCam": (262_144, 32_768, 32_768, 2, 0.15),
    "MHIST": (1_849, 326, 977, 2, 0.15),
    "CRC": (70_000, 15_000, 15_000, 9, 0.5),
    "BRACS": (3_657, 312, 570, 7, 0.3),
    "LungHist700": (483, 103, 105, 7, 0.5),
    "SPIDER-Breast": (68_730, 12_128, 12_034, 18, 0.5),
}
HOSPITALS = 5
CAMELYON = (14_000, 3_000, 3_000, 2, 0.15)
#: label-definition pairs: (source, target, binarise); PCam / MHIST are binary already
PAIRS = (("PCam", "MHIST", False), ("MHIST", "PCam", False), ("CRC", "BRACS", True), ("BRACS", "CRC", True))
#: bench_grid.py's full-size grids (regime A, 1,536 dims, --threads 1), BENCHMARKS.md, measured 2026-11-29
ANCHORS = {"PCam": {"reference": 152.7, "exact": 87.4}, "CRC": {"reference": 234.8, "exact": 128.6}}
GROUPS = ("indomain", "transfer", "camelyon")
MODES = ("reference", "exact", "fast", "exact-jobs2", "fast-jobs2", "exact-ray2", "fast-ray2")
RUNS_PER_CELL = 18
DIFF_COLS = ("auroc", "ece_fixed", "ece_adaptive", "temperature", "ece_scaled_fixed", "nll")


# ------------------------------------------------------------------ cells
@dataclass
class Cell:
    group: str          # indomain | transfer | camelyon-id | camelyon-pair
    model: str
    dim: int
    name: str           # e.g. "PCam", "PCam->MHIST", "h0", "h0->h1"
    source: str         # data key of the training / val splits
    target: str         # data key of the test split
    binarise: bool
    n_classes: int
    shares_fit: bool = False  # the reference evaluator reuses the source's in-domain probe
    sizes: dict = field(default_factory=dict)


def data_specs(scale: float, min_per_class: int) -> dict[str, tuple[int, int, int, int, float]]:
    out = {}
    full = dict(DATASETS)
    for h in range(HOSPITALS):
        full[f"h{h}"] = CAMELYON
    for name, (a, b, c, k, sep) in full.items():
        if scale >= 1:
            out[name] = (a, b, c, k, sep)
        else:
            m = min_per_class * k
            out[name] = (max(m, round(a * scale)), max(m, round(b * scale)), max(m, round(c * scale)), k, sep)
    return out


def paper_cells(models, groups, datasets=tuple(DATASETS)) -> list[Cell]:
    cells = []
    for model in models:
        dim = MODELS[model]
        if "indomain" in groups:
            for ds, spec in DATASETS.items():
                if ds in datasets:
                    cells.append(Cell("indomain", model, dim, ds, ds, ds, False, spec[3]))
        if "transfer" in groups:
            for src, tgt, binarise in PAIRS:
                if src not in datasets or tgt not in datasets:
                    continue
                cells.append(Cell("transfer", model, dim, f"{src}->{tgt}", src, tgt, binarise,
                                  2 if binarise else DATASETS[src][3], shares_fit=not binarise))
        if "camelyon" in groups:
            for h in range(HOSPITALS):
                cells.append(Cell("camelyon-id", model, dim, f"h{h}", f"h{h}", f"h{h}", False, 2))
            for s in range(HOSPITALS):
                for t in range(HOSPITALS):
                    if s != t:
                        cells.append(Cell("camelyon-pair", model, dim, f"h{s}->h{t}", f"h{s}", f"h{t}", False, 2,
                                          shares_fit=True))
    return cells


def work_units(y_counts, dim: int, k: int) -> float:
    """W of a cell: sum over its 18 runs of n_train x dim x C (the subset rule of PROTOCOL §2.2)."""
    from bench_grid import FRACTIONS, SEEDS

    c = 1 if k == 2 else k
    n = sum(int(sum(max(1, math.floor(int(cnt) * f)) for cnt in y_counts)) for f in FRACTIONS)
    return float(len(SEEDS) * n * dim * c)


def full_work(cell: Cell) -> float:
    """W at full size, with expected class counts (equal classes, as the generator draws them)."""
    spec = CAMELYON if cell.source.startswith("h") else DATASETS[cell.source]
    n, k_src = spec[0], spec[3]
    k = cell.n_classes
    if cell.binarise:
        counts = np.array([n * (k_src // 2) / k_src, n * (k_src - k_src // 2) / k_src])
    else:
        counts = np.full(k, n / k)
    return work_units(np.floor(counts), cell.dim, k)


# ------------------------------------------------------------------- data
def _generate_one(path: Path, name: str, spec: tuple, dim: int, seed: int, regime: str | None) -> None:
    """bench_grid's generator at this dataset's size and this model's dimension.

    bench_grid.generate reads its sizes from ``DATASETS[name]`` and ``DIM`` at call time; they are
    set for the call and restored after it.
    """
    import bench_grid as bg

    key = f"_paper_{name}"
    template = next(iter(bg.DATASETS.values()))
    entry = tuple(spec) + tuple(template[len(spec):]) if len(template) > len(spec) else tuple(spec[:len(template)])
    old_dim = bg.DIM
    bg.DATASETS[key] = entry
    bg.DIM = dim
    try:
        params = inspect.signature(bg.generate).parameters
        kwargs = {"seed": seed}
        if regime is not None and "regime" in params:
            kwargs["regime"] = regime
        if "scale" in params:  # generate(path, name, scale=1.0, regime="A", seed=0)
            kwargs["scale"] = 1.0
        else:  # generate(path, name, quick, seed=0)
            kwargs["quick"] = False
        bg.generate(path, key, **kwargs)
    finally:
        bg.DIM = old_dim
        del bg.DATASETS[key]


def generate_all(root: Path, models, specs: dict, needed: set[str], regime: str | None) -> dict:
    """Write every (model, data key) folder; return {(model, key): {split: (X memmap, y)}}."""
    data = {}
    for model in models:
        dim = MODELS[model]
        for name in sorted(needed):
            spec = specs[name]
            k = spec[3]
            path = root / model / name
            base = int(hashlib.sha1(f"{model}/{name}".encode()).hexdigest()[:6], 16)
            for attempt in range(50):  # every class present in every split (tiny scales)
                _generate_one(path, name, spec, dim, base + attempt, regime)
                ys = [np.load(path / f"{s}_y.npy") for s in ("train", "val", "test")]
                if all(len(np.unique(y)) == k for y in ys):
                    break
            else:
                raise SystemExit(f"could not draw every class of {name} at this scale; raise --min-per-class")
            data[(model, name)] = {s: (np.load(path / f"{s}_X.npy", mmap_mode="r"), np.load(path / f"{s}_y.npy"))
                                   for s in ("train", "val", "test")}
    return data


def binarised(split, k: int):
    X, y = split
    return X, (y >= k // 2).astype(np.int64)


def cell_splits(cell: Cell, data: dict):
    src, tgt = data[(cell.model, cell.source)], data[(cell.model, cell.target)]
    train, val, test = src["train"], src["val"], tgt["test"]
    if cell.binarise:
        k_src = DATASETS[cell.source][3]
        k_tgt = DATASETS[cell.target][3]
        train, val, test = binarised(train, k_src), binarised(val, k_src), binarised(test, k_tgt)
    return train, val, test


# ------------------------------------------------------------------ modes
def fast_supported() -> tuple[bool, str]:
    """Does prism_plugin accept ``probe.backend: fast``?"""
    from prism_plugin.errors import PrismError
    from prism_plugin.protocol.settings import check_probe

    try:
        check_probe({"kind": "logistic", "backend": "fast"})
    except PrismError as exc:
        return False, f"prism_plugin does not accept probe.backend 'fast' yet ({exc})"
    return True, ""


class Runner:
    """Runs one cell in one mode; holds the executors (one Ray instance for the whole run)."""

    def __init__(self, modes, threads: int):
        self.modes = list(modes)
        self.notes: dict[str, str] = {}
        self.ray = None
        self.local2 = None  # one --jobs 2 pool for every cell, as prism-run keeps one per command
        self.threads = threads
        ok, why = fast_supported()
        if not ok:
            for m in [m for m in self.modes if m.startswith("fast")]:
                self.modes.remove(m)
                self.notes[m] = why
        if any(m.endswith("ray2") for m in self.modes):
            try:
                from prism_plugin.executors import make_executor

                t0 = time.perf_counter()
                self.ray = make_executor("ray", 2)
                self.ray_start = time.perf_counter() - t0
            except Exception as exc:  # Ray missing or not startable: skip with a note
                for m in [m for m in self.modes if m.endswith("ray2")]:
                    self.modes.remove(m)
                    self.notes[m] = f"Ray unavailable ({str(exc).splitlines()[0]})"

    def close(self):
        if self.local2 is not None:
            self.local2.close()
        if self.ray is not None:
            self.ray.ray.shutdown()

    def run(self, mode: str, cell: Cell, train, val, test) -> list[dict]:
        import bench_grid as bg

        if mode == "reference":
            return bg.reference_grid(train, val, test)
        backend = "sklearn" if mode.startswith("exact") else "fast"
        if mode in ("exact", "fast"):
            from prism_plugin.api import evaluate

            probe = {"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": backend}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runs = evaluate(train, val, test, fractions=bg.FRACTIONS, seeds=bg.SEEDS, probe=probe,
                                model=cell.model, dataset=cell.name)
            return runs.to_dict(orient="records")
        return self._executor_grid(mode, cell, train, val, test, backend)

    def _executor_grid(self, mode, cell, train, val, test, backend) -> list[dict]:
        import bench_grid as bg
        from prism_plugin.executors import GridJob, SplitRef, driver_blas_threads, make_executor, plan_units
        from prism_plugin.protocol.grid import GridSpec
        from prism_plugin.protocol.inputs import SplitArrays
        from prism_plugin.protocol.settings import check_probe

        spec = GridSpec(fractions=tuple(bg.FRACTIONS), seeds=tuple(bg.SEEDS),
                        probe=check_probe({"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": backend}))
        splits = [SplitArrays(X=X, y=np.asarray(y), name=n) for (X, y), n in
                  ((train, "train"), (val, "val"), (test, "test"))]
        k = int(max(int(s.y.max()) for s in splits)) + 1
        ident = {"task": cell.name, "adapter": cell.model, "model": cell.model, "dataset": cell.name}
        job = GridJob(SplitRef.of(splits[0]), SplitRef.of(splits[1]), SplitRef.of(splits[2]), k, spec, ident,
                      (), blas_threads=driver_blas_threads())
        if not mode.endswith("ray2") and self.local2 is None:
            self.local2 = make_executor("local", 2)
        executor = self.ray if mode.endswith("ray2") else self.local2
        rows = [{"fraction": key.fraction, "seed": key.seed, **row}
                for key, row in executor.run(job, plan_units(spec, lambda key: False))]
        return rows


def diffs(a: list[dict], b: list[dict]) -> dict[str, float]:
    import bench_grid as bg

    out = bg.column_diffs(a, b)
    return {c: out[c] for c in DIFF_COLS if c in out}


# ------------------------------------------------------------- projection
def fit_power(W: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """t = a + b W^p, least squares on log t (relative errors); a, b >= 0, p in [0.5, 2]."""
    from scipy.optimize import least_squares

    W = np.asarray(W, float)
    t = np.maximum(np.asarray(t, float), 1e-6)
    x = W / W.max()

    def resid(theta):
        a, lb, p = theta
        return np.log(np.exp(a) + np.exp(lb) * x ** p) - np.log(t)

    best = None
    for p0 in (0.8, 1.0, 1.3):
        r = least_squares(resid, x0=[np.log(max(t.min() * 0.5, 1e-5)), np.log(t.max()), p0],
                          bounds=([-30, -30, 0.5], [10, 20, 2.0]))
        if best is None or r.cost < best.cost:
            best = r
    a, lb, p = best.x
    return float(np.exp(a)), float(np.exp(lb) / W.max() ** p), float(p)


def predict(params, W) -> np.ndarray:
    a, b, p = params
    return a + b * np.asarray(W, float) ** p


# ------------------------------------------------------------------- main
#: plausible exponents of a grid's time in its training rows (lbfgs passes grow at least with the rows)
Q_RANGE = (0.9, 2.0)
PARALLEL = ("exact-jobs2", "fast-jobs2", "exact-ray2", "fast-ray2")
#: the in-domain cells measured again at the anchor scales (they dominate the full-size total), for GigaPath
#: (1,536 dims, as bench_grid) or else the first model asked for
ANCHOR_DATA = ("PCam", "CRC", "SPIDER-Breast", "h0")


def run_scale(scale: float, args, runner: Runner, cells: list[Cell], root: Path, log, parallel_every: int) -> list[dict]:
    specs = data_specs(scale, args.min_per_class)
    needed = {c.source for c in cells} | {c.target for c in cells}
    t0 = time.perf_counter()
    data = generate_all(root / f"s{scale:g}", sorted({c.model for c in cells}), specs, needed, args.regime)
    seq = [m for m in runner.modes if m not in PARALLEL]
    par = [m for m in runner.modes if m in PARALLEL] if parallel_every else []
    log(f"\n== scale {scale:g}: {len(cells)} cells, modes {', '.join(seq)} on every cell"
        + (f", {', '.join(par)} on every {parallel_every}th" if par else "")
        + f"; data generated in {time.perf_counter() - t0:.1f} s; load {os.getloadavg()[0]:.1f}")
    # warm-up (untimed): every mode once on the smallest cell, so no mode's first cell pays for imports
    small = min(cells, key=lambda c: specs[c.source][0] * c.dim)
    for mode in (seq + par) if args.warmup else ():
        runner.run(mode, small, *cell_splits(small, data))
    records = []
    for i, cell in enumerate(cells):
        train, val, test = cell_splits(cell, data)
        counts = np.bincount(train[1], minlength=cell.n_classes)
        rec = {"scale": scale, "group": cell.group, "model": cell.model, "dim": cell.dim, "cell": cell.name,
               "source": cell.source, "target": cell.target, "n_classes": cell.n_classes,
               "shares_fit": cell.shares_fit, "n_train": len(train[1]), "n_val": len(val[1]),
               "n_test": len(test[1]), "W": work_units(counts, cell.dim, cell.n_classes),
               "W_full": full_work(cell), "seconds": {}, "diff_vs_reference": {}, "diff_vs_exact": {}}
        rows = {}
        for mode in seq + (par if i % parallel_every == 0 else []) if par else seq:
            t = time.perf_counter()
            rows[mode] = runner.run(mode, cell, train, val, test)
            rec["seconds"][mode] = time.perf_counter() - t
        for mode in rows:
            if mode != "reference" and "reference" in rows:
                rec["diff_vs_reference"][mode] = diffs(rows["reference"], rows[mode])
            if mode not in ("reference", "exact") and "exact" in rows:
                rec["diff_vs_exact"][mode] = diffs(rows["exact"], rows[mode])
            if mode.startswith("fast-") and "fast" in rows:  # parallel fast == sequential fast?
                rec["diff_vs_exact"][mode + " vs fast"] = diffs(rows["fast"], rows[mode])
        records.append(rec)
        if args.verbose or i % 20 == 19 or i == len(cells) - 1:
            log(f"   [{i + 1}/{len(cells)}] {cell.model} {cell.name}: " +
                ", ".join(f"{m} {s:.2f}s" for m, s in rec["seconds"].items()) + f"  load {os.getloadavg()[0]:.1f}")
    return records


def _ratio_matrix(tot: dict, modes, log, title: str) -> None:
    log(f"   {title} (entry = row's time / column's time: how many times faster the column is):")
    log("   " + " " * 12 + "".join(f"{m:>12}" for m in modes))
    for a in modes:
        log(f"   {a:<12}" + "".join(f"{tot[a] / tot[b]:12.2f}" for b in modes))


def _worst(recs, field_name) -> dict:
    out: dict = {}
    for r in recs:
        for m, d in r[field_name].items():
            for c, v in d.items():
                out.setdefault(m, {}).setdefault(c, 0.0)
                out[m][c] = max(out[m][c], v)
    return out


def anchor_of(records) -> str:
    """The model whose cells were measured at the anchor scales (the one with cells at more than one scale)."""
    seen: dict = {}
    for r in records:
        seen.setdefault(r["model"], set()).add(r["scale"])
    return max(seen, key=lambda k: len(seen[k]))


def summarise(records: list[dict], modes, log, main_scale: float, regime_a: bool = True) -> dict:
    out: dict = {}
    seq = [m for m in modes if m not in PARALLEL]
    par = [m for m in modes if m in PARALLEL]
    recs = [r for r in records if r["scale"] == main_scale]
    tot = {m: sum(r["seconds"][m] for r in recs) for m in seq}
    shared = {m: sum(r["seconds"][m] for r in recs if not r["shares_fit"]) for m in seq}
    log(f"\n-- scale {main_scale:g}: total grid time over {len(recs)} cells ({len(recs) * RUNS_PER_CELL} runs)")
    log(f"   {'mode':<12} {'total s':>9} {'vs ref':>7} {'vs exact':>8} {'shared fits s':>14}")
    for m in seq:
        vr = tot["reference"] / tot[m] if "reference" in tot else float("nan")
        ve = tot["exact"] / tot[m] if "exact" in tot else float("nan")
        log(f"   {m:<12} {tot[m]:9.1f} {vr:7.2f} {ve:8.2f} {shared[m]:14.1f}")
    _ratio_matrix(tot, seq, log, "every ratio, all cells")
    sample = {}
    if par:
        srec = [r for r in recs if all(m in r["seconds"] for m in par)]
        stot = {m: sum(r["seconds"][m] for r in srec) for m in seq + par}
        names = ", ".join(f"{r['model']} {r['cell']}" for r in srec[:4]) + (", ..." if len(srec) > 4 else "")
        log(f"   parallel modes on a sample of {len(srec)} cells ({names}):")
        for m in par:
            base = m.split("-")[0]
            est = tot[base] * stot[m] / stot[base] if base in tot else float("nan")
            per_cell = (stot[m] - stot[base]) / len(srec) if base in stot else float("nan")
            sample[m] = {"sample_seconds": stot[m], "sequential_sample_seconds": stot.get(base),
                         "estimated_total": est, "extra_per_cell": per_cell}
            log(f"   {m:<12} {stot[m]:9.1f} s on the sample = {stot[base] / stot[m]:.2f}x sequential {base} "
                f"({per_cell:+.2f} s per cell); all cells estimated {est:.0f} s")
        _ratio_matrix(stot, seq + par, log, "every ratio, sample cells")
    worst_ref, worst_exact = _worst(recs, "diff_vs_reference"), _worst(recs, "diff_vs_exact")
    for m, d in worst_ref.items():
        log(f"   {m} vs reference, max |diff| over all cells: " + ", ".join(f"{c} {v:.2g}" for c, v in d.items()))
    for m, d in worst_exact.items():
        log(f"   {m}{'' if ' vs ' in m else ' vs exact'}, max |diff| over all cells: "
            + ", ".join(f"{c} {v:.2g}" for c, v in d.items()))
    dom = {}
    for key, label in (("group", "group"), ("cell_ds", "dataset / pair"), ("model", "model")):
        agg: dict = {}
        for r in recs:
            k = r["group"] if key == "group" else r["model"] if key == "model" else \
                (r["cell"] if r["group"] in ("indomain", "transfer") else r["group"])
            for m in seq:
                agg.setdefault(k, {}).setdefault(m, 0.0)
                agg[k][m] += r["seconds"][m]
        dom[key] = agg
        log(f"   share of the total by {label}: " + "; ".join(
            f"{k} " + "/".join(f"{100 * v[m] / tot[m]:.0f}" for m in seq)
            for k, v in sorted(agg.items(), key=lambda kv: -kv[1][seq[0]])) + f"  (% for {'/'.join(seq)})")
    out["main"] = {"scale": main_scale, "total": tot, "total_shared_fits": shared, "parallel_sample": sample,
                   "max_diff_vs_reference": worst_ref, "max_diff_vs_exact": worst_exact, "breakdown": dom}
    anchors_scales = sorted({r["scale"] for r in records} - {main_scale})
    for a in anchors_scales:
        arec = [r for r in records if r["scale"] == a]
        log(f"   anchor scale {a:g}: " + "; ".join(
            f"{r['model']} {r['cell']} ({r['n_train']:,} x {r['dim']}) " +
            "/".join(f"{r['seconds'][m]:.1f}" for m in seq) for r in arec) + f" s ({'/'.join(seq)})")
    # projection
    proj: dict = {}
    log("\n-- projection to full size. W = sum over a cell's 18 runs of n_train x dim x C (C = 1 if K = 2, else K).")
    log("   cells whose full-size W lies inside the measured range: t = a + b W^p fitted per mode on every measured "
        "cell (interpolation);")
    log("   larger cells (PCam, CRC, SPIDER-Breast and their transfer cells): t = t(top anchor) x (W / W_anchor)^q, "
        "q from the two largest anchor scales of the same data (local extrapolation).")
    W_full = np.array([r["W_full"] for r in recs])
    not_shared = np.array([not r["shares_fit"] for r in recs])
    W_all = np.array([r["W"] for r in records])
    for m in seq:
        t_all = np.array([r["seconds"][m] for r in records])
        params = fit_power(W_all, t_all)
        inside = W_full <= W_all.max()
        full = predict(params, W_full)
        resid = np.abs(predict(params, W_all) / t_all - 1)
        local, checks, clamped = {}, {}, []
        for ds in ANCHOR_DATA:
            am = anchor_of(records)
            pts = sorted((r["scale"], r["W"], r["seconds"][m]) for r in records
                         if r["cell"] == ds and r["group"] in ("indomain", "camelyon-id") and r["model"] == am)
            if len(pts) >= 2:
                (_, w1, t1), (_, w2, t2) = pts[-2], pts[-1]
                q = math.log(t2 / t1) / math.log(w2 / w1)
                if not Q_RANGE[0] <= q <= Q_RANGE[1]:  # a grid cannot get cheaper with more rows: load noise
                    clamped.append(f"{ds} {q:.2f}")
                    q = min(max(q, Q_RANGE[0]), Q_RANGE[1])
                local[ds] = (w2, t2, q, MODELS[am])
                if len(pts) >= 3:  # the same rule one step down: predict the top anchor from the two below it
                    (_, w0, t0), (_, w1b, t1b) = pts[-3], pts[-2]
                    q0 = math.log(t1b / t0) / math.log(w1b / w0)
                    checks[ds] = t1b * (w2 / w1b) ** q0 / t2 - 1
        for i, r in enumerate(recs):
            if inside[i]:
                continue
            ds = r["source"] if r["source"] in local else None
            if ds is None:
                continue  # no anchor for it: the global fit (extrapolated) stays
            w2, t2, q, dim_a = local[ds]
            d = r["dim"] / dim_a  # linear in the dimension, the exponent q on rows x classes
            full[i] = t2 * d * (W_full[i] / w2 / d) ** q
        by_ds: dict = {}
        by_model: dict = {}
        anchor = {}
        for r, f in zip(recs, full):
            k = r["cell"] if r["group"] in ("indomain", "transfer") else r["group"]
            by_ds[k] = by_ds.get(k, 0.0) + float(f)
            by_model[r["model"]] = by_model.get(r["model"], 0.0) + float(f)
            if r["dim"] == 1536 and r["group"] == "indomain" and m in ANCHORS.get(r["cell"], {}) \
                    and r["cell"] not in anchor:
                anchor[r["cell"]] = {"projected": float(f), "measured": ANCHORS[r["cell"]][m]}
        top = sorted(by_ds.items(), key=lambda kv: -kv[1])[:5]
        proj[m] = {"a": params[0], "b": params[1], "p": params[2], "full_seconds": float(full.sum()),
                   "full_seconds_shared_fits": float(full[not_shared].sum()),
                   "interpolation_median_abs_error": float(np.median(resid)),
                   "local_exponents": {k: v[2] for k, v in local.items()}, "local_rule_check": checks,
                   "clamped_exponents": clamped,
                   "by_dataset": by_ds, "by_model": by_model, "anchors": anchor,
                   "cells": [{"model": r["model"], "cell": r["cell"], "seconds": float(f)} for r, f in zip(recs, full)]}
        log(f"   {m:<12} full paper {full.sum() / 3600:5.2f} h ({full[not_shared].sum() / 3600:.2f} h with shared fits); "
            f"interpolation p = {params[2]:.2f}, median |error| {100 * np.median(resid):.0f} % over the measured cells; "
            "local q: " + ", ".join(f"{k} {v[2]:.2f}" for k, v in local.items()))
        if clamped:
            log(f"      WARNING: local exponents {', '.join(clamped)} outside {Q_RANGE} were clamped: the anchors are "
                "inconsistent (the machine's load changed between them); rerun on a quieter machine")
        if checks:
            log("      local rule one step down (predict the top anchor from the two below): " +
                ", ".join(f"{k} {100 * v:+.0f} %" for k, v in checks.items()))
        log("      largest: " + ", ".join(f"{k} {100 * v / full.sum():.0f} %" for k, v in top) + "; by model: " +
            ", ".join(f"{k} {100 * v / full.sum():.0f} %" for k, v in sorted(by_model.items(), key=lambda kv: -kv[1])))
        if anchor and regime_a:
            log("      vs bench_grid's full-size grids (BENCHMARKS.md: regime A, 1,536 dims, another day): " +
                ", ".join(f"{k}-sized projected {v['projected']:.0f} s, measured {v['measured']:.0f} s "
                          f"({100 * (v['projected'] / v['measured'] - 1):+.0f} %)" for k, v in anchor.items()))
    if len(proj) > 1:
        _ratio_matrix({m: v["full_seconds"] for m, v in proj.items()}, list(proj), log, "every ratio, projected full size")
    out["projection"] = proj
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=0.01, help="rows of every split times this (default 0.01)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of: " + ", ".join(MODES))
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of: " + ", ".join(MODELS))
    p.add_argument("--groups", default=",".join(GROUPS), help="comma-separated subset of: " + ", ".join(GROUPS))
    p.add_argument("--datasets", default=",".join(DATASETS),
                   help="comma-separated subset of: " + ", ".join(DATASETS) + " (in-domain cells and the pairs "
                        "between them; Camelyon17 is its own group)")
    p.add_argument("--regime", default=None, help="bench_grid's data regime (when bench_grid has --regime)")
    p.add_argument("--min-per-class", type=int, default=4, help="rows per class kept in every split (default 4)")
    p.add_argument("--threads", type=int, default=1, help="BLAS / OpenMP threads (default 1, as bench_grid)")
    p.add_argument("--workdir", type=Path, default=None, help="where the generated data go (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    p.add_argument("--anchor-scales", default="0.03,0.1",
                   help="scales at which the dominant cells (GigaPath PCam, CRC, SPIDER-Breast, Camelyon17 h0) are "
                        "measured again for the projection (default 0.03,0.1; '' = none)")
    p.add_argument("--parallel-every", type=int, default=28,
                   help="run the --jobs 2 / Ray modes on every Nth cell only (default 28 = 10 cells, to keep the "
                        "run short); 1 = every cell")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="skip the untimed warm-up run of every mode (imports then count in the first cell)")
    p.add_argument("--from-json", type=Path, default=None,
                   help="print the summary and projection of an earlier --json file instead of measuring")
    p.add_argument("--verbose", action="store_true", help="one line per cell")
    args = p.parse_args(argv)

    def fail(flag, msg):
        p.error(f"{flag}: {msg}")

    if args.from_json:
        report = json.loads(args.from_json.read_text())
        summarise(report["cells"], report["modes"], lambda s: print(s, flush=True), report["scales"][0],
                  regime_a=report.get("regime") in (None, "A"))
        return 0
    scales = [args.scale]
    if not 0 < args.scale <= 1:
        fail("--scale", "must be in (0, 1], e.g. 0.01")
    try:
        anchors = [float(a) for a in args.anchor_scales.split(",") if a.strip()]
    except ValueError:
        fail("--anchor-scales", f"{args.anchor_scales!r} is not a comma-separated list of numbers")
    if any(not (0 < a <= 1) for a in anchors):
        fail("--anchor-scales", "every scale must be in (0, 1]")
    if args.parallel_every < 1:
        fail("--parallel-every", "must be at least 1")
    def pick(flag: str, text: str, known) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        for n in names:
            if n not in known:
                fail(flag, f"unknown {n!r}; choose from {', '.join(known)}")
        return names

    modes = pick("--modes", args.modes, MODES)
    models = pick("--models", args.models, MODELS)
    datasets = pick("--datasets", args.datasets, DATASETS)
    groups = pick("--groups", args.groups, GROUPS)
    if args.regime is not None:
        import bench_grid as bg

        known = getattr(bg, "REGIMES", ())
        if args.regime not in known:
            fail("--regime", f"unknown {args.regime!r}; bench_grid offers {', '.join(known) or 'one regime only'}")
    if args.threads < 1:
        fail("--threads", "must be a positive count")
    from threadpoolctl import threadpool_limits

    saved_env = {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    for var in saved_env:  # the pool / Ray workers inherit these
        os.environ[var] = str(args.threads)
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    old_torch = torch.get_num_threads() if torch else None
    try:
        if torch:
            torch.set_num_threads(args.threads)
        with threadpool_limits(args.threads):
            return _run(args, models, groups, datasets, modes, scales, fail)
    finally:
        if torch:
            torch.set_num_threads(old_torch)
        for var, value in saved_env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def _run(args, models, groups, datasets, modes, scales, fail) -> int:
    log = lambda s: print(s, flush=True)  # noqa: E731
    models = [m for m in MODELS if m in models]  # the paper's order
    cells = paper_cells(models, groups, datasets)
    if not cells:
        fail("--groups/--datasets", "no cell left to run; widen the selection")
    runner = Runner(modes, args.threads)
    for m, why in runner.notes.items():
        log(f"note: {m} skipped: {why}")
    if runner.ray is not None:
        log(f"note: local Ray instance (2 CPUs) started in {runner.ray_start:.1f} s (not counted in the grid times)")
    tmp = tempfile.TemporaryDirectory(prefix="bench_paper-") if args.workdir is None else None
    root = Path(tmp.name) if tmp else args.workdir
    t_all = time.perf_counter()
    records = []
    anchor_scales = [float(a) for a in args.anchor_scales.split(",") if a.strip()]
    anchor_model = "GigaPath" if "GigaPath" in models else models[0]
    anchor_cells = [c for c in cells if c.model == anchor_model and c.name in ANCHOR_DATA
                    and c.group in ("indomain", "camelyon-id")]
    try:
        records += run_scale(scales[0], args, runner, cells, root, log, args.parallel_every)
        for a in anchor_scales if anchor_cells else ():
            records += run_scale(a, args, runner, anchor_cells, root, log, 0)
    finally:
        runner.close()
        if tmp is not None:
            tmp.cleanup()
    import bench_grid as bg

    summary = summarise(records, runner.modes, log, scales[0], regime_a=args.regime in (None, "A"))
    log(f"\nmachine: {os.cpu_count()} CPUs, load {os.getloadavg()}, threads {args.threads}; "
        f"regime {args.regime or 'bench_grid default'}; wall {time.perf_counter() - t_all:.0f} s")
    if args.json:
        report = {"scales": scales, "modes": runner.modes, "notes": runner.notes, "regime": args.regime,
                  "machine": bg.machine(), "summary": summary, "cells": records}
        tmp_json = args.json.with_name(args.json.name + ".tmp")
        tmp_json.write_text(json.dumps(report, indent=1, default=str))
        os.replace(tmp_json, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
