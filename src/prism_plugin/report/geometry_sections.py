"""Report sections: probe sensitivity (ranking stability) and embedding geometry.

* **Probe sensitivity** — shown when the results hold runs at ≥ 2 values of the logistic probe's C (a ``sweep:
  {probe.C: [...]}``) or MLP-probe runs: the Kendall τ table of the model ordering at each C against C = 1 (AUROC
  and raw ECE, with sign inversions) and of linear vs MLP, from :mod:`prism_plugin.summaries.probe_sensitivity`.
* **Embedding geometry and model structure** — with ≥ 2 models: the mutual k-NN alignment heatmap per dataset (from
  ``geometry/alignment_*.csv`` written by ``prism-run geometry --output <this folder>``, else computed from the
  cached test embeddings of the runs, on at most 2,000 samples), the dendrogram of the model × dataset AUROC matrix
  (1 − Spearman ρ, average linkage) and the reliability radar. With one model the section says why they are not
  shown.

Figures are matplotlib (Agg, no pyplot state) PNGs in ``ReportSection.figures``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.report.sections import ReportSection
from prism_plugin.results import summary_dirs

#: at most this many samples per dataset when the report computes alignment itself
REPORT_MAX_SAMPLES = 2000
ALIGNMENT_GLOB = "alignment_*.csv"
PAPER_C_LINE = ("The PRISM paper (PROTOCOL §6.17, 8 models, 3 datasets × 3 fractions × 4 values of C): AUROC "
                "mean τ 0.823 with 0 of 36 inversions, raw ECE mean τ 0.024 with 16 of 36; linear vs MLP probe "
                "0.85 (AUROC) against 0.29 (ECE).")


# --------------------------------------------------------------------------- helpers
def _matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _figure(w: float, h: float, **kw):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), **kw)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.{digits}f}"
    return str(v)


#: columns shown as plain numbers (0.01, 100), not with fixed decimals
PLAIN = {"C", "fraction"}


def _md_table(df: pd.DataFrame, columns: list[tuple[str, str]], digits: int = 3, index: str | None = None) -> str:
    from prism_plugin.report.markdown import pipe_table

    head = ([index] if index else []) + [label for _, label in columns]
    rows = []
    for idx, row in df.iterrows():
        rows.append(([str(idx)] if index else []) + [
            f"{float(row.get(c)):g}" if c in PLAIN and isinstance(row.get(c), (int, float, np.number))
            else _fmt(row.get(c), digits) for c, _ in columns])
    return pipe_table(head, rows)


def _runs(view) -> pd.DataFrame:
    import pandas as pd
    from prism_plugin.summaries.probe_sensitivity import load_runs

    try:
        runs = load_runs(view.sources)
    except Exception:
        runs = pd.DataFrame()
    if runs.empty:
        runs = view.runs
    return runs


def _chosen_fraction(runs: pd.DataFrame) -> float | None:
    import pandas as pd
    if runs.empty or "fraction" not in runs.columns:
        return None
    fr = sorted(float(f) for f in pd.unique(runs["fraction"].dropna()))
    if not fr:
        return None
    return 1.0 if any(abs(f - 1.0) < 1e-9 for f in fr) else fr[-1]


# --------------------------------------------------------------------------- probe sensitivity
def _tau_figure(rankings: dict[str, pd.DataFrame]) -> bytes | None:
    rank = rankings.get("c_ranking")
    if rank is None or rank.empty or not np.isfinite(rank[["kendall_auroc", "kendall_ece"]].to_numpy(float)).any():
        return None
    g = rank.groupby("C")[["kendall_auroc", "kendall_ece"]].mean()
    fig = _figure(5.6, 3.4)
    ax = fig.add_subplot(1, 1, 1)
    x = np.log10(g.index.to_numpy(dtype=float))
    ax.axhline(0, color="#9ca3af", lw=1)
    ax.plot(x, g["kendall_auroc"], "o-", color="#0b5cad", label="AUROC ordering")
    ax.plot(x, g["kendall_ece"], "s--", color="#b45309", label="raw ECE ordering")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{c:g}" for c in g.index])
    ax.set_xlabel("probe regularisation C (log scale; compared with C = 1)")
    ax.set_ylabel("Kendall τ vs C = 1 (mean over cells)")
    ax.set_ylim(-1.05, 1.05)
    ax.legend(frameon=False, fontsize=9, loc="lower left")
    ax.grid(alpha=0.3)
    return _png(fig)


def sensitivity_section(view, runs: pd.DataFrame | None = None) -> ReportSection | None:
    """``runs``: the view's per-run rows (:func:`_runs`, read once per report by :func:`report_sections`)."""
    from prism_plugin.summaries.probe_sensitivity import NEEDS, sensitivity_tables

    runs = _runs(view) if runs is None else runs
    if runs.empty:
        return None
    out = sensitivity_tables(runs)
    if not out.tables:
        return None
    parts: list[str] = [
        "Does the model ordering survive a change of probe? Per (dataset, fraction) the models' seed-mean "
        "AUROC and seed-mean **raw** fixed-bin ECE under each probe are compared with the protocol's probe "
        "(logistic, C = 1) by Kendall τ-b; τ < 0 counts as a sign **inversion**. " + PAPER_C_LINE,
    ]
    not_shown: list[str] = []
    h = out.headline
    for prefix, what in (("c_ranking", "Regularisation sweep (C vs C = 1)"),
                         ("ood_c_ranking", "Regularisation sweep, transfer pairs"),
                         ("mlp_ranking", "Linear (C = 1) vs MLP probe"),
                         ("ood_mlp_ranking", "Linear vs MLP probe, transfer pairs")):
        table = out.tables.get(prefix)
        if table is None:
            continue
        key = "pair" if prefix.startswith("ood_") else "dataset"
        n_a, n_e = h.get(f"{prefix}_auroc_comparisons", 0), h.get(f"{prefix}_ece_comparisons", 0)
        if n_a or n_e:
            summary = (f"AUROC ordering: mean τ {_fmt(h.get(f'{prefix}_auroc_tau_mean'))}, "
                       f"{h.get(f'{prefix}_auroc_inversions', 0)} of {n_a} inverted; raw-ECE ordering: mean τ "
                       f"{_fmt(h.get(f'{prefix}_ece_tau_mean'))}, {h.get(f'{prefix}_ece_inversions', 0)} of {n_e} "
                       "inverted.")
        else:
            models = sorted(set(runs["model"].astype(str))) if "model" in runs else []
            summary = (f"Kendall τ {NEEDS}: these results hold {len(models)} model"
                       f"{'s' if len(models) != 1 else ''} ({', '.join(models)}); a ranking needs at least two.")
            not_shown.append(f"{what}: Kendall τ {NEEDS} (run the same sweep for another model and report "
                             "the folder holding both)")
        setting_col = "mlp_settings" if "mlp_settings" in table.columns else "C"
        cols = [(key, key), ("fraction", "fraction"), (setting_col, setting_col), ("n_models", "models"),
                ("kendall_auroc", "τ AUROC"), ("kendall_ece", "τ ECE"), ("auroc_inverted", "AUROC inverted"),
                ("ece_inverted", "ECE inverted"), ("note", "note")]
        parts.append(f"### {what}\n\n{summary}\n\n" + _md_table(table.reset_index(drop=True), cols))
    if "c_ablation" in out.tables:
        parts.append("Cell values (seed means per model, dataset, fraction and C) are in `c_ablation.csv`.")
    for note in out.notes:
        if NEEDS not in note:
            parts.append(f"*Note:* {note}")
    figures, captions = {}, {}
    if _matplotlib():
        png = _tau_figure(out.tables)
        if png:
            figures["probe_sensitivity_tau.png"] = png
            captions["probe_sensitivity_tau.png"] = ("Kendall τ between the model ordering at each C and at "
                                                     "C = 1, mean over (dataset, fraction) cells.")
    existing = set(getattr(getattr(view, "summaries", None), "tables", {}) or {})
    return ReportSection(
        "Probe sensitivity: ranking stability", "\n\n".join(parts), order=62, figures=figures, captions=captions,
        not_shown=not_shown, key="probe-sensitivity",
        summary="does the model ordering survive another C or an MLP probe?",
        tables={k: v for k, v in out.tables.items() if k not in existing},
    )


# --------------------------------------------------------------------------- geometry figures
def alignment_figure(matrices: dict[str, pd.DataFrame]) -> bytes:
    n = len(matrices)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    size = max(len(m) for m in matrices.values())
    w = max(3.6, 0.55 * size + 2.2)
    fig = _figure(w * cols, w * rows * 0.9)
    for i, (name, m) in enumerate(matrices.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        M = m.to_numpy(dtype=float).copy()
        np.fill_diagonal(M, np.nan)  # self-alignment is 1 by definition
        im = ax.imshow(M, vmin=0, vmax=1, cmap="viridis")
        labels = [str(x) for x in m.columns]
        ax.set_xticks(range(len(labels)))
        ax.set_yticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.set_yticklabels(labels, fontsize=8)
        for a in range(len(labels)):
            for b in range(len(labels)):
                if a != b:
                    ax.text(b, a, f"{M[a, b]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if M[a, b] < 0.6 else "black")
        chance = m.attrs.get("chance")
        sub = f"k = {m.attrs.get('k', '?')}, N = {m.attrs.get('n_samples', '?')}"
        if chance is not None and np.isfinite(chance):
            sub += f", chance {chance:.3f}"
        ax.set_title(f"{name}\n({sub})", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="mutual k-NN alignment")
    return _png(fig)


def dendrogram_figure(matrix: pd.DataFrame, rows: dict[str, Any], cols: dict[str, Any] | None) -> bytes:
    from scipy.cluster.hierarchy import dendrogram

    fig = _figure(max(6.0, 0.9 * matrix.shape[1] + 4.0), max(3.0, 0.45 * matrix.shape[0] + 1.6))
    gs = fig.add_gridspec(1, 2, width_ratios=[1, 2.2], wspace=0.02)
    ax_d = fig.add_subplot(gs[0, 0])
    dendrogram(rows["linkage"], labels=rows["labels"], orientation="left", ax=ax_d, color_threshold=0,
               above_threshold_color="#374151")
    ax_d.set_xlabel("1 − Spearman ρ")
    ax_d.set_yticks([])
    for side in ("top", "right", "left"):
        ax_d.spines[side].set_visible(False)
    order_r = rows["order"]  # leaf i sits at y = 10 i + 5, bottom to top
    order_c = cols["order"] if cols else [str(c) for c in matrix.columns]
    n = len(order_r)
    ax_d.set_ylim(0, 10 * n)
    M = matrix.copy()
    M.index = [str(i) for i in M.index]
    M.columns = [str(c) for c in M.columns]
    M = M.loc[order_r, order_c]
    ax = fig.add_subplot(gs[0, 1])
    vals = M.to_numpy(dtype=float)
    vmin, vmax = float(np.nanmin(vals)), float(np.nanmax(vals))
    im = ax.imshow(vals, aspect="auto", cmap="magma", vmin=vmin, vmax=vmax, origin="lower")
    ax.set_ylim(-0.5, n - 0.5)
    ax.set_yticks(range(n))
    ax.set_yticklabels(order_r, fontsize=8)
    ax.yaxis.tick_right()
    ax.set_xticks(range(len(order_c)))
    ax.set_xticklabels(order_c, rotation=45, ha="right", fontsize=8)
    for a in range(vals.shape[0]):
        for b in range(vals.shape[1]):
            ax.text(b, a, f"{vals[a, b]:.3f}", ha="center", va="center", fontsize=7,
                    color="white" if vals[a, b] < (vmin + vmax) / 2 else "black")
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.12, label="seed-mean AUROC")
    return _png(fig)


def radar_figure(data: pd.DataFrame, axes: list[str], fraction: float) -> bytes:
    from prism_plugin.summaries.geometry import RADAR_LABELS

    angles = np.linspace(0, 2 * np.pi, len(axes), endpoint=False)
    fig = _figure(5.8, 5.2)
    ax = fig.add_subplot(1, 1, 1, projection="polar")
    colors = ["#0b5cad", "#b45309", "#15803d", "#b91c1c", "#7c3aed", "#0e7490", "#be185d", "#4b5563"]
    lo = max(0.0, float(np.nanmin(data[axes].to_numpy(dtype=float))) - 0.1)
    for i, (model, row) in enumerate(data.iterrows()):
        vals = row[axes].to_numpy(dtype=float)
        c = colors[i % len(colors)]
        ax.plot(np.append(angles, angles[0]), np.append(vals, vals[0]), "-o", color=c, lw=1.6, ms=3, label=str(model))
        ax.fill(np.append(angles, angles[0]), np.append(vals, vals[0]), color=c, alpha=0.08)
    ax.set_xticks(angles)
    ax.set_xticklabels([RADAR_LABELS[a] for a in axes], fontsize=9)
    ax.set_ylim(lo, 1.0)
    ax.set_rlabel_position(float(np.degrees(np.pi / len(axes))))  # radial ticks between two axes
    ax.tick_params(axis="y", labelsize=7, colors="#6b7280")
    ax.set_title(f"Reliability radar at {fraction * 100:g} % labels", fontsize=10, pad=14)
    ax.legend(loc="upper left", bbox_to_anchor=(1.08, 1.0), fontsize=8, frameon=False)
    return _png(fig)


# --------------------------------------------------------------------------- geometry section
def _precomputed_alignment(view) -> dict[str, pd.DataFrame]:
    import pandas as pd
    out: dict[str, pd.DataFrame] = {}
    for folder in (Path(view.path) / "geometry", Path(view.path)):
        for f in sorted(folder.glob(ALIGNMENT_GLOB)) if folder.is_dir() else []:
            try:
                df = pd.read_csv(f, index_col=0)
            except Exception:
                continue
            meta = f.with_suffix(".json")
            if meta.exists():
                import json

                try:
                    df.attrs.update(json.loads(meta.read_text()))
                except (OSError, ValueError):
                    pass
            out.setdefault(f.stem[len("alignment_"):], df)
    return out


def geometry_section(view, runs: pd.DataFrame | None = None) -> ReportSection | None:
    """``runs``: as in :func:`sensitivity_section`."""
    import pandas as pd
    from prism_plugin.summaries import geometry as geo

    runs = _runs(view) if runs is None else runs
    if runs.empty or "model" not in runs.columns:
        return None
    models = list(dict.fromkeys(runs["model"].astype(str)))
    title = "Embedding geometry and model structure"
    if len(models) < 2:
        return ReportSection(
            title, "", order=64, key="geometry",
            not_shown=[f"the embedding-alignment matrix, the AUROC dendrogram and the reliability radar compare "
                       f"models, so they need at least two; these results hold one model ({models[0] if models else '?'}). "
                       "Run several models (repeat --model) and report the folder that holds all of them."],
            summary="needs two or more models")
    parts: list[str] = []
    not_shown: list[str] = []
    figures: dict[str, bytes] = {}
    captions: dict[str, str] = {}
    tables: dict[str, pd.DataFrame] = {}
    mpl = _matplotlib()

    # -- alignment
    matrices = _precomputed_alignment(view)
    source = "from `geometry/alignment_*.csv` (prism-run geometry)"
    if not matrices:
        source = f"computed from the cached test embeddings (at most {REPORT_MAX_SAMPLES:,} samples per dataset)"
        try:
            found, notes = geo.cached_test_embeddings(summary_dirs(view.sources))
        except Exception as exc:
            found, notes = {}, [f"the embedding cache could not be read ({type(exc).__name__}: {exc})"]
        for dataset, embs in found.items():
            if len(embs) < 2:
                continue
            n = next(iter(embs.values())).shape[0]
            keep = geo.subsample(n, REPORT_MAX_SAMPLES)
            k = min(geo.DEFAULT_K, len(keep) - 1)
            if k < 1:
                continue
            matrices[dataset] = geo.alignment_matrix({m: np.asarray(X)[keep] for m, X in embs.items()}, k=k)
        not_shown.extend(f"alignment: {n}" for n in notes)
    if matrices:
        parts.append("**Mutual k-NN alignment** between every pair of models on the same test split (Jaccard "
                     "overlap of each sample's k nearest neighbours, cosine distance; 1 = the same neighbourhoods, "
                     f"the chance level is given per panel). Matrices {source}.")
        for name, m in matrices.items():
            safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name)).strip(".") or "_"
            tables[f"geometry_alignment_{safe}"] = m.reset_index().rename(columns={m.index.name or "index": "model"})
            chance = m.attrs.get("chance")
            parts.append(f"*{name}* (k = {m.attrs.get('k', '?')}, N = {m.attrs.get('n_samples', '?')}"
                         + (f", chance level {chance:.3f}" if chance is not None else "") + "):\n\n"
                         + _md_table(m, [(c, str(c)) for c in m.columns], index="model"))
        if mpl:
            figures["embedding_alignment.png"] = alignment_figure(matrices)
            captions["embedding_alignment.png"] = "Mutual k-NN alignment (diagonal omitted: self-alignment is 1)."
    else:
        not_shown.append("alignment matrix: no two models' test embeddings of the same dataset were found "
                         "(run `prism-run geometry --task T --model A --model B --output <this folder>`)")

    # -- clustering
    frac = _chosen_fraction(runs)
    matrix = geo.auroc_matrix(runs, frac) if frac is not None else pd.DataFrame()
    if not matrix.empty:
        full, notes = geo.complete_matrix(matrix)
        not_shown.extend(f"clustering: {n}" for n in notes)
        if full.shape[0] >= 2 and full.shape[1] >= 2:
            rows = geo.cluster_order(full, axis=0)
            cols = geo.cluster_order(full, axis=1) if full.shape[0] >= 2 and full.shape[1] >= 2 else None
            parts.append(f"**Performance clustering** of the model × dataset AUROC matrix at {frac * 100:g} % labels "
                         "(distance 1 − Spearman ρ, average linkage, on both axes). Dendrogram order: "
                         + " → ".join(rows["order"]) + ".")
            tables["geometry_auroc_clustering"] = full.loc[[m for m in rows["order"]],
                                                           cols["order"] if cols else list(full.columns)].reset_index()
            if mpl:
                figures["auroc_dendrogram.png"] = dendrogram_figure(full, rows, cols)
                captions["auroc_dendrogram.png"] = (f"Hierarchical clustering of seed-mean AUROC at {frac * 100:g} % "
                                                    "labels (rows: models; columns in dendrogram order).")
        else:
            not_shown.append(f"dendrogram: needs ≥ 2 models and ≥ 2 datasets measured for every model at "
                             f"{frac * 100:g} %; these results have {full.shape[0]} model(s) × {full.shape[1]} "
                             f"dataset(s) ({', '.join(map(str, matrix.columns))})")
    else:
        not_shown.append("dendrogram: no in-distribution runs of the protocol's probe")

    # -- radar
    radar = geo.radar_data(runs, frac) if frac is not None else pd.DataFrame()
    if len(radar) >= 2:
        axes = [a for a in geo.RADAR_AXES if radar[a].notna().all()]
        missing = [geo.RADAR_LABELS[a] for a in geo.RADAR_AXES if a not in axes]
        if missing:
            why = {"OOD stability": "needs transfer runs at 100 % with the source's in-distribution run",
                   "1 − Brier": "Brier is binary-only; some model has no binary dataset"}
            not_shown.append("radar axes left out: " + "; ".join(f"{m} ({why.get(m, 'not measured for every model')})"
                                                                 for m in missing))
        tables["reliability_radar"] = radar.reset_index()
        parts.append(f"**Reliability radar** at {frac * 100:g} % labels (means over each model's datasets of seed "
                     "means; OOD stability per PROTOCOL §6.1 at 100 %):\n\n"
                     + _md_table(radar, [(a, geo.RADAR_LABELS[a]) for a in geo.RADAR_AXES], index="model"))
        if mpl and len(axes) >= 3:
            figures["reliability_radar.png"] = radar_figure(radar, axes, frac)
            captions["reliability_radar.png"] = "Per-model reliability radar (higher is better on every axis)."
        elif len(axes) < 3:
            not_shown.append("radar chart: fewer than three axes measured for every model (table above)")
    else:
        not_shown.append("reliability radar: needs ≥ 2 models with in-distribution runs")
    return ReportSection(title, "\n\n".join(parts), order=64, figures=figures, captions=captions,
                         not_shown=not_shown, key="geometry", tables=tables,
                         summary="alignment, clustering and radar across models")


@hookimpl
def report_sections(view):
    out = []
    runs = _runs(view)  # every runs.csv of the view, read once for both sections
    for build in (sensitivity_section, geometry_section):
        section = build(view, runs)
        if section is not None:
            out.append(section)
    return out


__all__ = ["REPORT_MAX_SAMPLES", "alignment_figure", "dendrogram_figure", "geometry_section", "radar_figure",
           "report_sections", "sensitivity_section"]
