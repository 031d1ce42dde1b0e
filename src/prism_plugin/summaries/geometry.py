"""Embedding geometry and multi-model structure (the PRISM paper's Figures 18-21).

* **Mutual k-NN alignment** (Figure 20/21): for two models' embeddings of the *same* samples in the same order,
  each sample's k nearest neighbours (cosine distance by default, the sample itself excluded) are found in each
  model's space; the alignment is the mean over samples of the Jaccard overlap ``|N_A(i) ∩ N_B(i)| / |N_A(i) ∪
  N_B(i)|``. k = 50. Identical geometries give 1; independent ones give the chance level :func:`alignment_chance`
  (≈ k / (2N − k) for N ≫ k). :func:`alignment_matrix` fills the models × models matrix (diagonal 1).
* **Performance clustering** (Figure 19): the model × dataset matrix of seed-mean AUROC at one fraction (100 % by
  default), clustered hierarchically with distance 1 − Spearman ρ between rows (models' AUROC profiles across
  datasets; columns likewise for datasets) and average linkage (SciPy); :func:`cluster_order` returns the
  dendrogram leaf order.
* **Reliability radar** (Figure 18): per model at one fraction, the mean over its datasets of seed-mean AUROC, 1 −
  raw fixed-bin ECE and 1 − Brier (Brier is defined for binary datasets only, so it averages those), and the OOD
  stability of PROTOCOL §6.1 (always at 100 % labels; computed by :func:`prism_plugin.summaries.cri.ood_stability`,
  NaN without transfer runs).

The functions work on arrays and run tables; :func:`load_model_embeddings` gets the embeddings of several adapters
for one task through the runner's embedding cache (extracting what is missing), and :func:`cached_test_embeddings`
finds those of finished results directories in the cache without extracting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.results import read_summary
from prism_plugin.errors import PrismError

DEFAULT_K = 50
RADAR_AXES = ("auroc", "one_minus_ece", "one_minus_brier", "ood_stability")
RADAR_LABELS = {"auroc": "AUROC", "one_minus_ece": "1 − ECE (raw)", "one_minus_brier": "1 − Brier",
                "ood_stability": "OOD stability"}
_CHUNK = 512


# --------------------------------------------------------------------------- k-NN alignment
def knn_indices(X: np.ndarray, k: int = DEFAULT_K, metric: str = "cosine") -> np.ndarray:
    """``(N, k)`` indices of each row's k nearest other rows (the row itself excluded)."""
    from sklearn.neighbors import NearestNeighbors

    X = np.asarray(X, dtype=np.float32)
    n = X.shape[0]
    if X.ndim != 2 or n < 2:
        raise PrismError(f"k-NN alignment needs an (N, d) embedding matrix with N >= 2, got shape {X.shape}")
    k = check_k(k, n)
    nn = NearestNeighbors(n_neighbors=k + 1, metric=metric, algorithm="brute").fit(X)
    idx = nn.kneighbors(X, return_distance=False)
    out = np.empty((n, k), dtype=np.int64)
    rows = np.arange(n)
    is_self = idx == rows[:, None]
    has_self = is_self.any(axis=1)
    # drop the sample itself where it is listed, else (exact duplicates) the farthest candidate
    drop = np.where(has_self, is_self.argmax(axis=1), k)
    keep = np.ones_like(idx, dtype=bool)
    keep[rows, drop] = False
    out[:] = idx[keep].reshape(n, k)
    return out


def check_k(k: int, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise PrismError(f"k = {k!r}: the number of neighbours must be a positive integer (the paper uses 50)")
    if k >= n:
        raise PrismError(f"k = {k} neighbours need more than {k} samples; the split has {n} (lower --k)")
    return int(k)


def jaccard_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-row Jaccard overlap of two ``(N, k)`` neighbour-index matrices (each row a set)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        raise PrismError(f"neighbour sets differ in shape: {a.shape} vs {b.shape}")
    k = a.shape[1]
    inter = np.empty(a.shape[0], dtype=np.int64)
    for start in range(0, a.shape[0], _CHUNK):
        sa, sb = a[start:start + _CHUNK], b[start:start + _CHUNK]
        inter[start:start + _CHUNK] = (sa[:, :, None] == sb[:, None, :]).any(axis=2).sum(axis=1)
    return inter / (2 * k - inter)


def mutual_knn_alignment(A: np.ndarray, B: np.ndarray, k: int = DEFAULT_K, metric: str = "cosine") -> float:
    """Mean Jaccard overlap of the k-NN sets of the same samples under embeddings ``A`` and ``B``."""
    A, B = np.asarray(A), np.asarray(B)
    if A.shape[0] != B.shape[0]:
        raise PrismError(f"alignment needs the same samples in both models: {A.shape[0]} vs {B.shape[0]} rows")
    return float(jaccard_rows(knn_indices(A, k, metric), knn_indices(B, k, metric)).mean())


def alignment_chance(n: int, k: int = DEFAULT_K) -> float:
    """Expected alignment of two independent neighbour structures on ``n`` samples.

    Each sample's k neighbours are k of the n − 1 others; for independent models the overlap X is hypergeometric (n
    − 1, k, k) and the expected Jaccard is E[X / (2k − X)] ≈ k / (2n − k).
    """
    from scipy.stats import hypergeom

    k = check_k(k, n)
    x = np.arange(0, k + 1)
    p = hypergeom(n - 1, k, k).pmf(x)
    return float(np.sum(p * x / (2 * k - x)))


def alignment_matrix(embeddings: Mapping[str, np.ndarray], k: int = DEFAULT_K,
                     metric: str = "cosine") -> pd.DataFrame:
    """Models × models mutual k-NN alignment (symmetric, diagonal 1), models in the given order."""
    import pandas as pd
    names = list(embeddings)
    if not names:
        raise PrismError("alignment needs the embeddings of at least one model")
    n = {name: np.asarray(X).shape[0] for name, X in embeddings.items()}
    if len(set(n.values())) != 1:
        raise PrismError("alignment needs every model's embeddings of the same samples; row counts differ: "
                         + ", ".join(f"{m} {v}" for m, v in n.items()))
    neigh = {name: knn_indices(X, k, metric) for name, X in embeddings.items()}
    M = np.eye(len(names))
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            M[i, j] = M[j, i] = float(jaccard_rows(neigh[a], neigh[names[j]]).mean())
    out = pd.DataFrame(M, index=pd.Index(names, name="model"), columns=names)
    out.attrs.update({"k": int(k), "n_samples": int(next(iter(n.values()))), "metric": metric,
                      "chance": alignment_chance(next(iter(n.values())), k)})
    return out


def subsample(n: int, max_samples: int | None, seed: int = 0) -> np.ndarray:
    """Sorted positions of a deterministic subsample (all positions when ``n <= max_samples``)."""
    if max_samples is None or n <= max_samples:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=int(max_samples), replace=False))


# --------------------------------------------------------------------------- embeddings
def load_model_embeddings(task, adapters: Sequence[Any], opts, split: str = "test",
                          host=None) -> dict[str, np.ndarray]:
    """The embeddings of ``split`` of ``task`` for each adapter, through the embedding cache.

    Uses :func:`prism_plugin.embed.load.load_embeddings` (a cache hit reads the stored arrays, a miss extracts and
    stores them). Keys are the models' display names. Every model must have embedded the same labelled samples in
    the same order. ``host`` is the plugin host whose ``sources`` registry opens the task's source (default: the
    shared host).
    """
    from prism_plugin.embed.load import load_embeddings

    if getattr(task, "is_transfer", False):
        raise PrismError(f"task {task.name} is a transfer task; embedding geometry compares models on one "
                         "dataset: pass an in-distribution task (e.g. its source or target task)")
    if split not in task.splits:
        raise PrismError(f"task {task.name} has no {split!r} split (it has {', '.join(task.splits)})")
    out: dict[str, np.ndarray] = {}
    labels = None
    for adapter in adapters:
        splits, _info = load_embeddings(task, adapter, opts, only=(split,), host=host)
        arr = splits[split]
        name = adapter.display_name if adapter.display_name not in out else f"{adapter.display_name} ({adapter.name})"
        y = np.asarray(arr.y)
        if labels is None:
            labels = y
        elif not np.array_equal(labels, y):
            raise PrismError(f"{name} embedded other samples of {task.name}/{split} than {next(iter(out))} "
                             "(labels differ); alignment needs the same samples in the same order")
        out[name] = np.asarray(arr.X)
    return out


def cached_test_embeddings(result_dirs: Iterable[Path], cache_dir: Path | None = None,
                           split: str = "test") -> tuple[dict[str, dict[str, np.ndarray]], list[str]]:
    """Embeddings of finished in-distribution runs, looked up in the embedding cache (never extracted).

    Returns ``{dataset: {model: X}}`` for the datasets whose ``split`` was found for at least one model, and notes
    saying what was not found. A dataset is identified by its data fingerprint, so models are only compared on
    identical samples.
    """
    from prism_plugin.embed.cache import EmbeddingCache

    cache = EmbeddingCache(cache_dir)
    found: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    notes: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for d in result_dirs:
        summ = read_summary(d)  # {} when absent, unreadable or stale (then one warning)
        if not summ:
            continue
        resolved = summ.get("resolved_task") or {}
        if resolved.get("kind", "indomain") != "indomain":
            continue
        fps = summ.get("fingerprints") or {}
        data_fp = (fps.get("data") or {}).get(split)
        adapter_fp = fps.get("adapter")
        model = str(summ.get("model", ""))
        dataset = str(resolved.get("dataset", summ.get("task", "")))
        if not data_fp or not adapter_fp or not model:
            continue
        key = (dataset, str(data_fp), model)
        if key in seen:
            continue
        seen.add(key)
        loaded = cache.entry(adapter_fp, str(data_fp), split).load()
        if loaded is None:
            notes.append(f"{model} on {dataset}: {split} embeddings not in the cache at {cache.root} "
                         "(removed, another --cache-dir, or precomputed features)")
            continue
        found.setdefault((dataset, str(data_fp)), {})[model] = np.asarray(loaded[0])
    out: dict[str, dict[str, np.ndarray]] = {}
    for (dataset, fp), models in found.items():
        label = dataset if dataset not in out else f"{dataset} ({fp[:8]})"
        out[label] = models
    return out, notes


# --------------------------------------------------------------------------- AUROC matrix / clustering
def _indomain_rows(runs: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd
    if runs is None or runs.empty or "dataset" not in runs.columns:
        return pd.DataFrame()
    df = runs
    if "reference_table" in df.columns:
        table = df["reference_table"].fillna("indomain").astype(str)
        main = df.loc[table == "indomain"]  # the main in-distribution table (not its propval / Camelyon17 twins)
        df = main if len(main) else df.loc[~table.str.contains("transfer")]
    if "probe" in df.columns:  # the protocol's probe only (sweep / MLP variants stay out of the comparison)
        df = df.loc[df["probe"].fillna("logistic") == "logistic"]
    if "probe_C" in df.columns:
        c = pd.to_numeric(df["probe_C"], errors="coerce")
        df = df.loc[c.isna() | np.isclose(c.fillna(1.0), 1.0)]
    return df


def auroc_matrix(runs: pd.DataFrame, fraction: float = 1.0, metric: str = "auroc") -> pd.DataFrame:
    """Models × datasets matrix of seed-mean ``metric`` at ``fraction`` (in-distribution runs)."""
    import pandas as pd
    from prism_plugin.summaries.conventions import DATASET_ORDER, fraction_mask, model_order, order_like

    df = _indomain_rows(runs)
    if df.empty:
        return pd.DataFrame()
    df = df.loc[fraction_mask(df, fraction)]
    if df.empty:
        return pd.DataFrame()
    cells = df.groupby(["model", "dataset"], sort=False)[metric].mean().unstack("dataset")
    cells = cells.loc[model_order(cells.index), order_like(cells.columns, DATASET_ORDER)]
    cells.index.name, cells.columns.name = "model", "dataset"
    return cells.astype(float)


def spearman_distance(matrix: np.ndarray) -> np.ndarray:
    """Square matrix of 1 − Spearman ρ between the rows of ``matrix`` (ties: average ranks).

    A row that is constant has no defined ρ; its distance to every other row is set to 1 (uncorrelated). The
    diagonal is 0.
    """
    from scipy.stats import rankdata

    M = np.asarray(matrix, dtype=float)
    if M.ndim != 2 or M.shape[1] < 2:
        raise PrismError(f"Spearman distance needs at least 2 columns to correlate over, got shape {M.shape}")
    R = np.vstack([rankdata(row) for row in M])
    R = R - R.mean(axis=1, keepdims=True)
    norm = np.sqrt((R ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (R @ R.T) / np.outer(norm, norm)
    rho = np.where(np.isfinite(rho), rho, 0.0)
    D = np.clip(1.0 - rho, 0.0, 2.0)
    np.fill_diagonal(D, 0.0)
    return D


def cluster_order(matrix: pd.DataFrame, axis: int = 0) -> dict[str, Any]:
    """Average-linkage clustering of the rows (``axis=0``) or columns (``axis=1``) with 1 − Spearman ρ.

    Returns ``{"order": labels in dendrogram leaf order, "linkage": SciPy linkage matrix, "labels": labels in input
    order, "distance": square distance DataFrame}``. Needs ≥ 2 items and ≥ 2 values to correlate over; NaN cells
    are not allowed (drop incomplete rows/columns first).
    """
    import pandas as pd
    from scipy.cluster.hierarchy import dendrogram, linkage
    from scipy.spatial.distance import squareform

    M = matrix if axis == 0 else matrix.T
    labels = [str(x) for x in M.index]
    if len(labels) < 2:
        raise PrismError(f"clustering needs at least 2 {'models' if axis == 0 else 'datasets'}, got {len(labels)}")
    values = M.to_numpy(dtype=float)
    if not np.isfinite(values).all():
        raise PrismError("clustering needs a complete matrix (every model measured on every dataset)")
    D = spearman_distance(values)
    Z = linkage(squareform(D, checks=False), method="average")
    order = dendrogram(Z, no_plot=True, labels=labels)["ivl"]
    return {"order": list(order), "linkage": Z, "labels": labels,
            "distance": pd.DataFrame(D, index=labels, columns=labels)}


def complete_matrix(matrix: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Drop datasets that some model lacks (then models with no value left); say what was dropped."""
    notes = []
    keep_cols = [c for c in matrix.columns if matrix[c].notna().all()]
    dropped = [c for c in matrix.columns if c not in keep_cols]
    if dropped:
        notes.append(f"left out dataset(s) not measured for every model: {', '.join(map(str, dropped))}")
    out = matrix[keep_cols]
    return out, notes


# --------------------------------------------------------------------------- radar
def radar_data(runs: pd.DataFrame, fraction: float = 1.0) -> pd.DataFrame:
    """Per model: ``auroc``, ``one_minus_ece`` (raw fixed-bin), ``one_minus_brier`` and ``ood_stability``.

    The first three are means over the model's datasets of seed means at ``fraction``; Brier is binary-only, so it
    averages the binary datasets (NaN when the model has none). ``ood_stability`` is PROTOCOL §6.1 at 100 % labels
    from the transfer rows of ``runs`` (NaN without usable transfer runs).
    """
    import pandas as pd
    from prism_plugin.summaries.conventions import fraction_mask, model_order
    from prism_plugin.summaries.cri import ood_stability

    ind = _indomain_rows(runs)
    if ind.empty:
        return pd.DataFrame(columns=list(RADAR_AXES))
    at = ind.loc[fraction_mask(ind, fraction)]
    if at.empty:
        return pd.DataFrame(columns=list(RADAR_AXES))
    cols = [c for c in ("auroc", "ece_fixed", "brier") if c in at.columns]
    cells = at.groupby(["model", "dataset"], sort=False)[cols].mean()
    per_model = cells.groupby(level="model", sort=False).mean()
    out = pd.DataFrame(index=pd.Index(model_order(per_model.index), name="model"))
    out["auroc"] = per_model["auroc"].reindex(out.index)
    out["one_minus_ece"] = 1.0 - per_model["ece_fixed"].reindex(out.index) if "ece_fixed" in cols else np.nan
    out["one_minus_brier"] = 1.0 - per_model["brier"].reindex(out.index) if "brier" in cols else np.nan
    stab = pd.Series(dtype=float)
    if "reference_table" in runs.columns:
        tr = runs.loc[runs["reference_table"].fillna("").astype(str) == "transfer"]
        if "probe" in tr.columns:
            tr = tr.loc[tr["probe"].fillna("logistic") == "logistic"]
        if len(tr) and {"src", "tgt", "auroc", "fraction"} <= set(tr.columns):
            stab = ood_stability(ind, tr)
    out["ood_stability"] = stab.reindex(out.index).astype(float) if len(stab) else np.nan
    return out.astype(float)


__all__ = ["DEFAULT_K", "RADAR_AXES", "RADAR_LABELS", "alignment_chance", "alignment_matrix", "auroc_matrix",
           "cached_test_embeddings", "check_k", "cluster_order", "complete_matrix", "jaccard_rows", "knn_indices",
           "load_model_embeddings", "mutual_knn_alignment", "radar_data", "spearman_distance", "subsample"]
