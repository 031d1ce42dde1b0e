"""The leaderboard: ``prism-run report DIR1 DIR2 ... --output OUT [--reference REF]``.

One self-contained page (``OUT/report.html``, Markdown twin ``OUT/report.md``, tables under
``OUT/tables/``) over many models and tasks: a sortable leaderboard (one row per model) and the PRISM
paper's figures, the user's models beside the eight PRISM reference FMs when ``--reference`` names a
folder with the published results_v2 tables. Tabs (Overview, In-distribution, Calibration, Transfer,
CRI, Per-task tables) keep it navigable; without JavaScript the tabs are links and the panels follow
one another.

Where the numbers come from (nothing is recomputed from probabilities):

* the per-run tables of the results directories and of ``--reference``, combined like
  ``prism-run findings`` (:func:`prism_plugin.tables.load_tables`; a model name in both is
  an error);
* the summary plugins' tables over all of them (``report_cells``, ``cri_variants_<pct>``,
  ``breaking_points_by_threshold``, ...), except the bootstrap rank correlations of ``decoupling``
  (``prism-run findings`` computes those; on the reference tables they take about a minute);
* Brier and NLL seed means straight from the per-run rows (``report_cells`` does not carry them).

Leaderboard rule: per model, the seed mean of each in-distribution (``indomain``) cell, then the mean
over the model's datasets, at 100 % labels (the largest fraction, marked, when a dataset has no 100 %
runs) and at the model's smallest fraction. Models evaluated on different datasets are not compared on
the same tasks: the page says so above the table, and the per-task tables compare like with like.
A cell is *qualified* when one of its seeds collapsed, hit a temperature bound, got a worse NLL after
scaling, did not converge, had a single-class test split or fewer than
:data:`prism_plugin.quality.MIN_TEST_PER_CLASS` test samples in a class; the leaderboard counts them.

The figures draw the user's models as large diamonds with thick lines in strong colours (legend "(yours)")
and the reference FMs as small circles with thin lines, so the two stay apart on every panel.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.report import plots
from prism_plugin.report.markdown import fmt, markdown_table
from prism_plugin.report.sections import ReportSection
from prism_plugin.report.verdict import pct, setting_label

DEFAULT_OUTPUT = Path("prism_leaderboard")
TABLES = "tables"
#: the summary plugins whose tables the page reads (the others, e.g. the bootstrap rank correlations of
#: ``decoupling``, a minute on the reference tables, are ``prism-run findings``' job)
PAGE_SUMMARIES = ("report_tables", "cri", "seeds")
#: the per-run tables the page reads
PAGE_TABLES = ("indomain", "transfer", "covariate_transfer", "prior_transfer", "camelyon17_indomain",
               "camelyon17_transfer")
YOURS, REFERENCE = "yours", "PRISM reference"
#: (metric column, short label) of the leaderboard, each at 100 % and at the smallest fraction
METRICS: tuple[tuple[str, str], ...] = (("auroc", "AUROC"), ("f1_macro", "macro-F1"), ("ece_fixed", "ECE raw"),
                                        ("ece_scaled_fixed", "ECE scaled"), ("brier", "Brier"), ("nll", "NLL"))
#: (report_cells column, what it qualifies)
QUALIFIERS: tuple[tuple[str, str], ...] = (
    ("collapsed_runs", "collapsed"), ("t_bound_runs", "T at a bound"), ("nll_worse_runs", "NLL rose after T"),
    ("not_converged_runs", "not converged"), ("single_class_test_runs", "one test class"))
TABS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("tab-overview", "Overview", ("leaderboard", "lb-read")),
    ("tab-indist", "In-distribution", ("lb-auroc", "lb-breaking", "lb-rank")),
    ("tab-calibration", "Calibration", ("lb-recoverability",)),
    ("tab-transfer", "Transfer", ("lb-transfer",)),
    ("tab-cri", "CRI", ("lb-cri",)),
    ("tab-tables", "Per-task tables", ("lb-per-task", "lb-per-pair", "notes")),
)
IN_DIST = "indomain"
TASK_TRANSFERS = ("transfer", "covariate_transfer", "prior_transfer")
TRANSFERS = (*TASK_TRANSFERS, "camelyon17_transfer")
NO_REFERENCE = ("Only your models are shown. To put them beside the eight PRISM reference FMs, add "
                "`--reference DIR` (a folder with the published results_v2 tables, e.g. a clone of the PRISM "
                "release), or run `prism-run reference pull` once: the leaderboard then uses that copy.")

# user models: strong colours, diamonds, thick lines; reference FMs: Okabe-Ito, small circles, thin lines
USER_COLORS = ("#111111", "#C2185B", "#5E35B1", "#00838F", "#6D4C41", "#827717", "#1565C0", "#AD1457")
REF_COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#BCBD22", "#8C564B",
              "#7F7F7F", "#17BECF")
FONT = 9.0  # every text of the leaderboard figures is at least this size (points)


# --------------------------------------------------------------------------- inputs
def check_output(output: Path | None, inputs: Sequence[Path]) -> Path:
    """The output folder (default :data:`DEFAULT_OUTPUT`); with several inputs it may not lie in one."""
    out = Path(output) if output is not None else DEFAULT_OUTPUT
    if out.exists() and not out.is_dir():
        raise PrismError(f"--output {out}: exists and is not a directory; pass a folder for the leaderboard")
    if len(inputs) > 1:
        res = out.resolve()
        for d in inputs:
            dr = Path(d).resolve()
            if res == dr or dr in res.parents:
                raise PrismError(f"--output {out}: lies inside the input results directory {d}; with several "
                                 "inputs the leaderboard goes to a folder of its own (e.g. --output leaderboard)")
    return out


def _models(tables) -> list[str]:
    out: list[str] = []
    for name in tables.present():
        df = tables[name]
        if "model" in df:
            out.extend(str(m) for m in df["model"])
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------------- styles
def model_styles(models: Iterable[str], yours: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per model: colour, marker, line width, marker size, z-order and legend label; the user's models
    (``yours``) first in strong colours and diamonds, the reference FMs in small circles."""
    yours = set(yours)
    models = list(dict.fromkeys(models))
    mine = [m for m in models if m in yours]
    ref = [m for m in models if m not in yours]
    out: dict[str, dict[str, Any]] = {}
    for i, m in enumerate(mine):
        out[m] = {"color": USER_COLORS[i % len(USER_COLORS)], "marker": "D", "lw": 2.6, "ms": 6.5, "z": 4,
                  "alpha": 1.0, "label": f"{m} (yours)" if ref else m, "yours": True}
    for i, m in enumerate(ref):
        out[m] = {"color": REF_COLORS[i % len(REF_COLORS)], "marker": "o", "lw": 1.3, "ms": 3.8, "z": 2,
                  "alpha": 0.85, "label": m, "yours": False}
    return out


def _rc():
    import matplotlib

    return matplotlib.rc_context({"font.size": FONT + 0.5, "axes.titlesize": FONT + 1, "axes.labelsize": FONT + 0.5,
                                  "xtick.labelsize": FONT, "ytick.labelsize": FONT, "legend.fontsize": FONT,
                                  "legend.title_fontsize": FONT})


def _grid(n: int, cols: int, panel_w: float, panel_h: float, n_legend: int, *, rows_per_panel: int = 1):
    cols = max(1, min(cols, n))
    rows = int(math.ceil(n / cols)) * rows_per_panel
    left, right, top, wgap, hgap = 0.75, 0.25, 0.45, 0.7, 0.75
    leg_rows = int(math.ceil(n_legend / max(1, min(n_legend, int((cols * (panel_w + wgap)) // 2.3)))))
    bottom = 0.6 + 0.23 * leg_rows + 0.15
    W = left + cols * panel_w + (cols - 1) * wgap + right
    H = top + rows * panel_h + (rows - 1) * hgap + bottom
    fig = plots.figure(W, H)
    fig.subplots_adjust(left=left / W, right=1 - right / W, bottom=bottom / H, top=1 - top / H,
                        wspace=wgap / panel_w, hspace=hgap / panel_h)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes, W


def _legend(fig, styles: Mapping[str, Mapping[str, Any]], W: float, extra=()) -> None:
    from matplotlib.lines import Line2D

    ordered = sorted(styles.items(), key=lambda kv: not kv[1]["yours"])
    handles = [Line2D([], [], color=s["color"], marker=s["marker"], lw=s["lw"], ms=s["ms"]) for _, s in ordered]
    labels = [s["label"] for _, s in ordered]
    for h, lab in extra:
        handles.append(h)
        labels.append(lab)
    ncol = max(1, min(len(labels), int((W - 0.4) // 2.3)))
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.005), ncol=ncol, fontsize=FONT,
               frameon=False, handlelength=2.2, columnspacing=1.2)


def _frac_axis(ax, fractions, label="label fraction (log scale)") -> None:
    fr = sorted({float(f) for f in fractions if f and f > 0})
    if not fr:
        return
    x = plots.lx(fr)
    ax.set_xticks(x)
    ax.set_xticklabels([plots.pct_label(f) for f in fr], fontsize=FONT)
    pad = 0.12 * (x[-1] - x[0]) if len(x) > 1 else 0.3
    ax.set_xlim(x[0] - pad, x[-1] + pad)
    ax.set_xlabel(label)


def _ylim(ax, values, lo_clip=0.0, hi_clip=1.005, pad=0.04) -> None:
    """Limits from the data (not a fixed 0-1: curves near the top stay apart), clipped to the metric's range."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if not v.size:
        return
    lo, hi = float(v.min()), float(v.max())
    span = max(hi - lo, 0.05)
    bottom, top = max(lo_clip, lo - pad * span - 0.01), min(hi_clip, hi + pad * span + 0.01)
    ax.set_ylim(bottom, top)
    if hi_clip > 1.0:  # room above 1 for the markers, but no tick beyond the metric's maximum
        ax.set_yticks([t for t in ax.get_yticks() if bottom - 1e-9 <= t <= 1.0 + 1e-9])
        ax.set_ylim(bottom, top)


# --------------------------------------------------------------------------- figures
def _setting_order(cells: pd.DataFrame) -> list:
    """Datasets in the PRISM paper's order, then the others (the user's) by first appearance."""
    from prism_plugin.summaries.cri import DATASET_ORDER, order_like

    return order_like(cells["setting"], DATASET_ORDER)


def curves_figure(cells: pd.DataFrame, metric: str, ylabel: str, styles, *, thresholds: Sequence[float] = (),
                  ylim=(0.0, 1.005)) -> bytes:
    """Seed-mean ``metric`` vs label fraction, one panel per dataset, one line per model (min-max seed band
    for the user's models); ``thresholds``: dotted horizontal lines (the breaking points of Figure 6)."""
    from matplotlib.lines import Line2D

    settings = _setting_order(cells)[:plots.MAX_PANELS]
    extra = [(Line2D([], [], color="#6b7280", lw=1, ls=":"), f"{ylabel} = {', '.join(f'{t:g}' for t in thresholds)}")] \
        if thresholds else []
    with plots.style(), _rc():
        fig, axes, W = _grid(len(settings), 3, 3.3, 2.45, len(styles) + len(extra))
        flat = list(axes.ravel())
        for ax in flat[len(settings):]:
            ax.set_visible(False)
        for ax, setting in zip(flat, settings):
            sub = cells.loc[cells["setting"] == setting]
            for t in thresholds:
                ax.axhline(t, color="#6b7280", lw=1, ls=":", zorder=1)
            for model, g in sub.groupby("model", sort=False):
                st = styles[model]
                g = g.sort_values("fraction")
                x = plots.lx(g["fraction"])
                ax.plot(x, g[f"{metric}_mean"], marker=st["marker"], ms=st["ms"], lw=st["lw"], color=st["color"],
                        alpha=st["alpha"], zorder=st["z"])
                if st["yours"] and f"{metric}_min" in g:
                    ok = g[f"{metric}_min"].notna() & g[f"{metric}_max"].notna()
                    if ok.any():
                        ax.fill_between(x[ok.to_numpy()], g.loc[ok, f"{metric}_min"], g.loc[ok, f"{metric}_max"],
                                        color=st["color"], alpha=0.14, lw=0)
            _frac_axis(ax, sub["fraction"])
            mine = sub.loc[sub["model"].map(lambda m: styles[m]["yours"])]  # their seed bands are drawn
            band = [v for c in (f"{metric}_min", f"{metric}_max") if c in mine for v in mine[c]]
            _ylim(ax, list(sub[f"{metric}_mean"]) + band + list(thresholds), *ylim)
            ax.set_ylabel(ylabel)
            ax.set_title(setting_label(setting))
        _legend(fig, {m: styles[m] for m in dict.fromkeys(cells["model"])}, W, extra)
        return plots.png(fig)


def rank_figure(points: pd.DataFrame, fractions: Sequence[float], styles) -> bytes:
    """AUROC rank against scaled-ECE rank per (model, dataset), one panel per label fraction (Figure 2)."""
    fractions = list(fractions)
    n_max = int(points["n_models"].max()) if len(points) else 1
    rng = np.random.default_rng(0)
    with plots.style(), _rc():
        fig, axes, W = _grid(len(fractions), 3, 3.6, 3.4, len(styles))
        flat = list(axes.ravel())
        for ax in flat[len(fractions):]:
            ax.set_visible(False)
        for ax, f in zip(flat, fractions):
            sub = points.loc[np.isclose(points["fraction"], f)]
            x = np.arange(0.5, n_max + 1.5)
            ax.fill_between(x, x - 1, x + 1, color="#e5e7eb", alpha=0.8, lw=0)
            ax.plot(x, x, color="#6b7280", lw=1, ls=":")
            for model, g in sub.groupby("model", sort=False):
                st = styles[model]
                ax.scatter(g["rank_auroc"] + rng.uniform(-0.13, 0.13, len(g)),
                           g["rank_cal"] + rng.uniform(-0.13, 0.13, len(g)), s=(st["ms"] * 1.6) ** 2,
                           marker=st["marker"], c=st["color"], edgecolors="white" if not st["yours"] else "black",
                           linewidths=0.7, zorder=st["z"])
            disp = float((sub["rank_auroc"] - sub["rank_cal"]).abs().mean()) if len(sub) else float("nan")
            ax.text(0.97, 0.03, f"mean |rank difference| {disp:.2f}", transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=FONT, bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "#e5e7eb"})
            plots.rank_axes(ax, n_max)
            ax.set_xlabel("AUROC rank in dataset (1 = best)")
            ax.set_ylabel("scaled-ECE rank (1 = best)")
            ax.set_title(f"{plots.pct_label(f)} labels")
        _legend(fig, {m: styles[m] for m in dict.fromkeys(points["model"])}, W)
        return plots.png(fig)


def _heatmap(matrix: pd.DataFrame, *, cmap, vmin: float, vmax: float, digits: int, bold_rows: Sequence[bool],
             cbar_label: str, xlabel: str, separators: Sequence[int] = ()) -> bytes:
    rows, cols = list(matrix.index), list(matrix.columns)
    label_w = 0.35 + 0.075 * max(len(str(r)) for r in rows)
    cell_w, cell_h = 0.72, 0.3
    left, right, top, bottom = label_w, 1.6, 0.25, 0.65
    body_h = max(cell_h * len(rows), 1.2)
    W = left + cell_w * len(cols) + right
    H = top + body_h + bottom
    vals = matrix.to_numpy(dtype=float)
    with plots.style(), _rc():
        fig = plots.figure(W, H)
        ax = fig.add_axes([left / W, bottom / H, cell_w * len(cols) / W, body_h / H])
        ax.grid(False)
        im = ax.imshow(np.ma.masked_invalid(vals), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
        span = (vmax - vmin) or 1.0
        for i in range(len(rows)):
            for j in range(len(cols)):
                v = vals[i, j]
                if not np.isfinite(v):
                    ax.text(j, i, "–", ha="center", va="center", fontsize=FONT, color="#9ca3af")
                    continue
                z = (v - vmin) / span
                dark = z > 0.78 or z < 0.22 if cmap.name.startswith("div") else z > 0.6
                text = f"{0.0 if abs(v) < 0.5 * 10 ** -digits else v:.{digits}f}"  # no "-0.00"
                ax.text(j, i, text, ha="center", va="center", fontsize=FONT,
                        color="white" if dark else "#1f2937", fontweight="bold" if bold_rows[i] else "normal")
        for k in separators:
            ax.axhline(k - 0.5, color="white", lw=2.5)
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels([plots.pct_label(c) for c in cols], fontsize=FONT)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([str(r) for r in rows], fontsize=FONT)
        for lab, bold in zip(ax.get_yticklabels(), bold_rows):
            if bold:
                lab.set_fontweight("bold")
                lab.set_color(USER_COLORS[1])
        ax.set_xlabel(xlabel)
        ax.tick_params(length=0)
        for sp in ax.spines.values():
            sp.set_visible(False)
        cax = fig.add_axes([(left + cell_w * len(cols) + 0.2) / W, bottom / H, 0.16 / W, min(body_h, 3.0) / H])
        cb = fig.colorbar(im, cax=cax)
        cb.ax.tick_params(labelsize=FONT)
        cb.set_label(cbar_label, fontsize=FONT)
        return plots.png(fig)


def recoverability_figure(cells: pd.DataFrame, yours: Iterable[str]) -> bytes:
    """ECE raw minus ECE after temperature scaling per (dataset, model) row and label fraction column
    (Figure 11): blue = scaling recovered calibration, red = it made ECE worse."""
    from matplotlib.colors import LinearSegmentedColormap

    yours = set(yours)
    d = cells.assign(gain=cells["ece_fixed_mean"] - cells["ece_scaled_fixed_mean"])
    order = []
    seps = []
    for setting in _setting_order(d):
        models = list(dict.fromkeys(d.loc[d["setting"] == setting, "model"]))
        models = [m for m in models if m in yours] + [m for m in models if m not in yours]
        if order:
            seps.append(len(order))
        order += [(setting, m) for m in models]
    mat = d.pivot_table(index=["setting", "model"], columns="fraction", values="gain", aggfunc="first")
    mat = mat.reindex(index=pd.MultiIndex.from_tuples(order), columns=sorted(d["fraction"].unique()))
    mat.index = [f"{setting_label(s)} · {m}{' (yours)' if m in yours else ''}" for s, m in order]
    lim = float(np.nanmax(np.abs(mat.to_numpy(dtype=float)))) if np.isfinite(mat.to_numpy(dtype=float)).any() else 0.1
    lim = max(lim, 0.02)
    cmap = LinearSegmentedColormap.from_list("div_recover", ["#b91c1c", "#fca5a5", "#f9fafb", "#93c5fd", "#1d4ed8"])
    return _heatmap(mat, cmap=cmap, vmin=-lim, vmax=lim, digits=2, bold_rows=[m in yours for _, m in order],
                    cbar_label="ECE raw − ECE scaled (> 0: scaling helped)", xlabel="label fraction",
                    separators=seps)


def cri_figure(cri: pd.DataFrame, yours: Iterable[str]) -> bytes:
    """CRI (multiplicative) per model row and label fraction column (Figure 7)."""
    from matplotlib.colors import LinearSegmentedColormap

    yours = set(yours)
    rows = [m for m in cri.index if m in yours] + [m for m in cri.index if m not in yours]
    mat = cri.reindex(index=rows)
    mat.index = [f"{m} (yours)" if m in yours else str(m) for m in rows]
    v = mat.to_numpy(dtype=float)
    lo = float(np.nanmin(v)) if np.isfinite(v).any() else 0.0
    hi = float(np.nanmax(v)) if np.isfinite(v).any() else 1.0
    cmap = LinearSegmentedColormap.from_list("seq_cri", ["#f7fbff", "#9ecae1", "#2171b5", "#08306b"])
    return _heatmap(mat, cmap=cmap, vmin=max(0.0, lo - 0.02), vmax=min(1.0, hi + 0.02), digits=3,
                    bold_rows=[m in yours for m in rows], cbar_label="CRI = AUROC × (1 − ECE scaled) × OOD stab.",
                    xlabel="label fraction")


def transfer_figure(cells: pd.DataFrame, styles, *, max_pairs: int = 6) -> bytes:
    """Target AUROC (top) and raw target ECE (bottom; dashed: after the source-fitted T) vs source label
    fraction, one column per pair (Figures 3 and 13); more pairs than ``max_pairs`` are averaged per model."""
    from matplotlib.lines import Line2D

    settings = list(dict.fromkeys(cells["setting"]))
    if len(settings) > max_pairs:
        cells = cells.groupby(["model", "fraction"], sort=False)[
            ["auroc_mean", "ece_fixed_mean", "ece_scaled_fixed_mean"]].mean().reset_index()
        cells["setting"] = f"mean over {len(settings)} pairs"
        settings = [cells["setting"].iat[0]]
    n = len(settings)
    any_yours = any(styles[m]["yours"] for m in dict.fromkeys(cells["model"]))
    mixed = any_yours and not all(styles[m]["yours"] for m in dict.fromkeys(cells["model"]))
    extra = [(Line2D([], [], color="#6b7280", lw=1.8), "raw"),
             (Line2D([], [], color="#6b7280", lw=1.4, ls="--"),
              "after the source-fitted T" + (" (your models)" if mixed else ""))]
    with plots.style(), _rc():
        fig, axes, W = _grid(n, n, 3.2 if n > 1 else 4.6, 2.3, len(styles) + 2, rows_per_panel=2)
        for j, setting in enumerate(settings):
            sub = cells.loc[cells["setting"] == setting]
            a_ax, e_ax = axes[0, j], axes[1, j]
            a_ax.axhline(0.5, color="#6b7280", lw=0.9, ls=":")
            for model, g in sub.groupby("model", sort=False):
                st = styles[model]
                g = g.sort_values("fraction")
                x = plots.lx(g["fraction"])
                kw = {"marker": st["marker"], "ms": st["ms"], "color": st["color"], "alpha": st["alpha"],
                      "zorder": st["z"]}
                a_ax.plot(x, g["auroc_mean"], lw=st["lw"], **kw)
                e_ax.plot(x, g["ece_fixed_mean"], lw=st["lw"], **kw)
                if st["yours"] or not any_yours:  # dashed for your models only: 8 more lines would hide the rest
                    e_ax.plot(x, g["ece_scaled_fixed_mean"], lw=st["lw"] * 0.7, ls="--", **{**kw, "ms": 0})
            a_ax.set_title(setting_label(setting))
            _ylim(a_ax, list(sub["auroc_mean"]) + [0.5])
            _ylim(e_ax, list(sub["ece_fixed_mean"]) + list(sub["ece_scaled_fixed_mean"]) + [0.0], 0.0, 1.0)
            a_ax.set_ylabel("target AUROC")
            e_ax.set_ylabel("target ECE")
            _frac_axis(a_ax, sub["fraction"], "")
            _frac_axis(e_ax, sub["fraction"], "source label fraction (log)")
            a_ax.tick_params(labelbottom=False)
        _legend(fig, {m: styles[m] for m in dict.fromkeys(cells["model"])}, W, extra)
        return plots.png(fig)


# --------------------------------------------------------------------------- tables
def _seed_means(df: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    cols = [m for m in metrics if m in df.columns]
    return df.groupby(["model", "dataset", "fraction"], sort=False)[cols].mean().reindex(columns=list(metrics))


def _qualified(cells: pd.DataFrame, runs: pd.DataFrame | None) -> pd.DataFrame:
    """Per cell (table, model, setting, fraction): whether anything qualifies it, and what."""
    from prism_plugin.quality import MIN_TEST_PER_CLASS

    c = cells[["table", "model", "setting", "fraction"]].copy()
    what = [[] for _ in range(len(c))]
    for col, label in QUALIFIERS:
        if col in cells:
            hit = pd.to_numeric(cells[col], errors="coerce").fillna(0).to_numpy() > 0
            for k in np.flatnonzero(hit):
                what[k].append(label)
    if runs is not None and "min_test_class_count" in runs:
        few = runs.loc[pd.to_numeric(runs["min_test_class_count"], errors="coerce") < MIN_TEST_PER_CLASS]
        keys = {(str(m), str(d), round(float(f), 9)) for m, d, f in few[["model", "dataset", "fraction"]].itertuples(
            index=False)}
        for k, r in enumerate(c.itertuples(index=False)):
            if (str(r.model), str(r.setting), round(float(r.fraction), 9)) in keys:
                what[k].append(f"< {MIN_TEST_PER_CLASS} test samples in a class")
    c["qualifiers"] = ["; ".join(w) for w in what]
    return c


def _cri_by_fraction(view) -> pd.DataFrame:
    """CRI (multiplicative) per model (rows) and label fraction (columns) from the ``cri_variants_<pct>``
    summary tables."""
    cols = {}
    for stem in (view.summaries.tables if view.summaries is not None else {}):
        m = re.fullmatch(r"cri_variants_(\d+(?:\.\d+)?)", stem)
        if not m:
            continue
        t = view.table(stem)
        if t is None or t.empty:
            continue
        if "model" not in t.columns:
            t = t.reset_index()
        if "cri_multiplicative" not in t:
            continue
        cols[float(m.group(1)) / 100.0] = t.set_index("model")["cri_multiplicative"].astype(float)
    if not cols:
        return pd.DataFrame()
    return pd.DataFrame(cols).reindex(columns=sorted(cols))


def leaderboard_table(view, yours: Iterable[str], infos: Mapping[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                      list[str]]:
    """The leaderboard (numbers), its displayed twin (text, arrows in the header) and notes on it."""
    yours = set(yours)
    rt = view.run_tables
    ind = rt.indomain if rt is not None else None
    cells = view.table("report_cells")
    notes: list[str] = []
    if ind is None or ind.empty or cells is None:
        return pd.DataFrame(), pd.DataFrame(), ["no in-distribution runs: the leaderboard needs `indomain` runs"]
    means = _seed_means(ind, [m for m, _ in METRICS])
    qual = _qualified(cells, ind)
    cri = _cri_by_fraction(view)
    from prism_plugin.report.verdict import results_flags

    # the warning-level flags each results directory's summary.json carries (data checks included)
    flagged: dict[str, dict[str, set]] = {}
    for f in results_flags(getattr(view, "sources", ()) or ()):
        if f.get("level") == "warning" and f.get("flag"):
            per_model = flagged.setdefault(str(f.get("model", "")), {})
            per_model.setdefault(str(f["flag"]), set()).add(str(f.get("task", "")))
    rows = []
    for model in dict.fromkeys(ind["model"].astype(str)):
        mm = means.loc[model] if model in means.index.get_level_values(0) else None
        if mm is None:
            continue
        mm = mm.reset_index()
        datasets = list(dict.fromkeys(mm["dataset"]))
        full, low, not_full = [], [], []
        for d in datasets:
            sub = mm.loc[mm["dataset"] == d].sort_values("fraction")
            top = sub.loc[np.isclose(sub["fraction"], 1.0)]
            if top.empty:
                top = sub.tail(1)
                not_full.append(f"{d} ({pct(top['fraction'].iat[0])})")
            full.append(top.iloc[0])
            low.append(sub.iloc[0])
        full_df, low_df = pd.DataFrame(full), pd.DataFrame(low)
        lows = sorted({float(f) for f in low_df["fraction"]})
        row: dict[str, Any] = {"model": model, "whose": YOURS if model in yours else REFERENCE,
                               "datasets": len(datasets), "dataset_names": ", ".join(map(str, datasets))}
        for metric, _ in METRICS:
            row[f"{metric}_100"] = float(full_df[metric].mean()) if full_df[metric].notna().any() else np.nan
            row[f"{metric}_low"] = float(low_df[metric].mean()) if low_df[metric].notna().any() else np.nan
            row[f"{metric}_n_datasets"] = int(full_df[metric].notna().sum())
        row["lowest_fraction"] = lows[0] if len(lows) == 1 else np.nan
        row["lowest_fractions"] = ", ".join(pct(f) for f in lows)
        row["not_at_100"] = "; ".join(not_full)
        # the task transfers (label-definition pairs, declared covariate / prior shifts), not the Camelyon17 grid
        tr = cells.loc[cells["table"].isin(TASK_TRANSFERS) & (cells["model"] == model)]
        if len(tr):
            top = tr.loc[tr.groupby("setting")["fraction"].transform("max") == tr["fraction"]]
            row["transfer_auroc"] = float(top["auroc_mean"].mean())
            row["transfer_pairs"] = int(top["setting"].nunique())
        else:
            row["transfer_auroc"], row["transfer_pairs"] = np.nan, 0
        row["cri_100"] = float(cri.at[model, 1.0]) if (not cri.empty and model in cri.index and 1.0 in cri.columns) \
            else np.nan
        lowf = lows[0] if lows else None
        row["cri_low"] = np.nan
        if lowf is not None and not cri.empty and model in cri.index:
            hit = [c for c in cri.columns if math.isclose(c, lowf, rel_tol=1e-6)]
            if hit:
                row["cri_low"] = float(cri.at[model, hit[0]])
        mq = qual.loc[qual["model"] == model]
        row["cells"] = int(len(mq))
        row["qualified_cells"] = int((mq["qualifiers"] != "").sum())
        kinds = sorted({w for q in mq["qualifiers"] for w in q.split("; ") if w})
        row["qualifiers"] = ", ".join(kinds)
        row["flags"] = "; ".join(f"{name} ({', '.join(sorted(t for t in tasks if t))})" if any(tasks) else name
                                 for name, tasks in sorted(flagged.get(model, {}).items()))
        rows.append(row)
    lb = pd.DataFrame(rows).sort_values(["auroc_100", "model"], ascending=[False, True], na_position="last")
    lb.insert(0, "rank", range(1, len(lb) + 1))
    lb = lb.reset_index(drop=True)
    if lb["dataset_names"].nunique() > 1:
        notes.append("the models were not evaluated on the same datasets, so the means compare different tasks; "
                     "the Per-task tables tab compares like with like")
    if (lb["not_at_100"] != "").any():
        notes.append("some datasets have no 100 % runs: the largest fraction stands in (column `not at 100 %`)")
    if lb["lowest_fractions"].nunique() > 1:
        notes.append("the smallest label fraction differs between models (column `lowest`): the low-label columns "
                     "compare different budgets")

    def arrow(col: str) -> str:
        info = infos.get(col)
        return f" {info.arrow}" if info is not None and getattr(info, "arrow", "") else ""

    shown = []
    for r in lb.itertuples(index=False):
        q = f"{r.qualified_cells} of {r.cells}" + (f" ⚠ {r.qualifiers}" if r.qualified_cells else "")
        d = {"#": str(r.rank), "model": f"**{r.model}**" if r.whose == YOURS else str(r.model),
             "whose": r.whose, "datasets": str(r.datasets)}
        for metric, label in METRICS:
            v100, vlow = getattr(r, f"{metric}_100"), getattr(r, f"{metric}_low")
            part = getattr(r, f"{metric}_n_datasets")
            mark = f" ({part}/{r.datasets})" if 0 < part < r.datasets else ""
            d[f"{label}{arrow(metric)} 100 %"] = fmt(v100) + ("" if pd.isna(v100) else mark)
            d[f"{label}{arrow(metric)} low"] = fmt(vlow) + ("" if pd.isna(vlow) else mark)
        d["lowest"] = r.lowest_fractions
        d[f"transfer AUROC{arrow('auroc')}"] = fmt(r.transfer_auroc) + (f" ({r.transfer_pairs} pairs)"
                                                                       if r.transfer_pairs > 1 else "")
        d["CRI 100 %"] = fmt(r.cri_100)
        d["CRI low"] = fmt(r.cri_low)
        d["qualified cells (all runs)"] = q
        d["flags (summary.json)"] = f"⚠ {r.flags}" if r.flags else "–"
        d["not at 100 %"] = r.not_at_100 or "–"
        shown.append(d)
    return lb, pd.DataFrame(shown), notes


def per_task_table(cells: pd.DataFrame, runs: pd.DataFrame | None, tables: Sequence[str], yours) -> pd.DataFrame:
    """One row per (kind of run, dataset or pair, model, fraction) at each setting's smallest and
    largest fraction: seed means and what qualifies the cell."""
    yours = set(yours)
    sub = cells.loc[cells["table"].isin(tables)]
    if sub.empty:
        return pd.DataFrame()
    qual = _qualified(sub.reset_index(drop=True), runs)
    sub = sub.reset_index(drop=True).assign(qualifiers=qual["qualifiers"])
    ends = sub.groupby(["table", "setting", "model"])["fraction"].transform
    sub = sub.loc[(sub["fraction"] == ends("min")) | (sub["fraction"] == ends("max"))]
    extra = {}
    if runs is not None and {"brier", "nll"} & set(runs.columns):
        m = _seed_means(runs, ["brier", "nll"]).reset_index().rename(columns={"dataset": "setting"})
        extra = {(str(a), str(b), round(float(c), 9)): (x, y) for a, b, c, x, y in
                 m[["model", "setting", "fraction", "brier", "nll"]].itertuples(index=False)}
    from prism_plugin.report.derived import table_label

    rank_t = {t: k for k, t in enumerate(tables)}
    rank_s = {v: k for k, v in enumerate(_setting_order(sub))}
    sub = sub.assign(_t=sub["table"].map(rank_t), _s=sub["setting"].map(rank_s))
    rows = []
    for r in sub.sort_values(["_t", "_s", "fraction", "auroc_mean"],
                             ascending=[True, True, True, False]).itertuples(index=False):
        b, n = extra.get((str(r.model), str(r.setting), round(float(r.fraction), 9)), (np.nan, np.nan))
        rows.append({
            "runs": table_label(r.table, getattr(r, "shift", None)),
            "dataset / pair": setting_label(r.setting), "fraction": pct(r.fraction),
            "model": f"**{r.model}**" if r.model in yours else str(r.model),
            "whose": YOURS if r.model in yours else REFERENCE, "seeds": fmt(r.n_runs),
            "AUROC ↑": fmt(r.auroc_mean), "macro-F1 ↑": fmt(r.f1_macro_mean), "ECE raw ↓": fmt(r.ece_fixed_mean),
            "ECE scaled ↓": fmt(r.ece_scaled_fixed_mean), "Brier ↓": fmt(b), "NLL ↓": fmt(n),
            "T": fmt(r.temperature_mean), "qualified by": ("⚠ " + r.qualifiers) if r.qualifiers else "–",
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- sections
def _figures_ok(sec: ReportSection) -> bool:
    if not plots.available():
        sec.not_shown.append("figures need matplotlib, which is not installed")
        return False
    return True


def leaderboard_sections(view, yours: Sequence[str], *, reference: bool, host=None) -> list[ReportSection]:
    """The sections of the leaderboard page (keys as in :data:`TABS`)."""
    from prism_plugin.metrics.descriptions import metric_infos
    from prism_plugin.report.basic import rank_points

    infos = {i.column: i for i in metric_infos(host)}
    cells = view.table("report_cells")
    rt = view.run_tables
    models = list(dict.fromkeys(cells["model"])) if cells is not None and len(cells) else []
    styles = model_styles(models, yours)
    n_ref = sum(1 for m in models if m not in set(yours))
    out: list[ReportSection] = []

    # ---- overview
    lb, shown, notes = leaderboard_table(view, yours, infos)
    sec = ReportSection("Leaderboard", "", order=1, key="leaderboard",
                        summary=f"{len(set(yours) & set(models))} of yours, {n_ref} reference")
    body = []
    if not reference:
        body.append(NO_REFERENCE)
    if lb.empty:
        sec.not_shown.extend(notes)
    else:
        sec.tables["leaderboard"] = lb
        body.append("One row per model, sorted by mean AUROC at 100 % labels (click a header to sort by another "
                    "column; **bold**: your models). Each number is the mean over the model's datasets of the seed "
                    "mean at 100 % labels or at its smallest label fraction (`low`, column `lowest`); ↑ higher is "
                    "better, ↓ lower is better. Transfer AUROC: the target AUROC at the largest source fraction, "
                    "mean over the model's transfer pairs (not the Camelyon17 hospital grid). `(k/n)`: the metric "
                    "exists for k of the n datasets (the published tables have no NLL, and Brier only for binary "
                    "datasets). CRI (PROTOCOL §6.2) needs transfer runs of the model; it is a screening heuristic, "
                    "not a ranking. *Qualified cells* counts the (dataset, fraction) cells of the model whose numbers "
                    "something qualifies (⚠: what); *flags* are the warnings `prism-run` wrote to the model's "
                    "`summary.json` (e.g. few test samples in a class).")
        if notes:
            body.append("**Read with care:** " + "; ".join(notes) + ".")
        body.append(markdown_table(shown))
    sec.body = "\n\n".join(body)
    out.append(sec)
    read = ReportSection("How to read these figures", "", order=2, key="lb-read", summary="what each tab shows")
    read.body = "\n".join([
        "- **In-distribution**: AUROC and macro-F1 against the label fraction per dataset (dotted lines: the "
        "macro-F1 breaking-point thresholds), and each model's AUROC rank against its calibration rank.",
        "- **Calibration**: the recoverability map (how much temperature scaling lowers ECE, per cell).",
        "- **Transfer**: target AUROC and target ECE against the source label fraction, per transfer pair.",
        "- **CRI**: the composite reliability index per model and label fraction.",
        "- **Per-task tables**: every dataset and pair at its smallest and largest fraction, model beside model.",
        "",
        "Your models are drawn as large diamonds with thick lines (legend: *(yours)*; bold row labels in the "
        "heatmaps); the PRISM reference FMs as small circles with thin lines. Shaded bands: min-max over seeds "
        "(your models only, to keep the panels readable).",
    ])
    out.append(read)

    ind_cells = cells.loc[cells["table"] == IN_DIST] if cells is not None and len(cells) else None
    has_ind = ind_cells is not None and len(ind_cells) > 0

    # ---- in-distribution
    sec = ReportSection("AUROC vs label fraction", "", order=10, key="lb-auroc", summary="per dataset")
    if not has_ind:
        sec.not_shown.append("no in-distribution runs")
    elif _figures_ok(sec):
        sec.figures["lb-auroc.png"] = curves_figure(ind_cells, "auroc", "AUROC", styles)
        sec.captions["lb-auroc.png"] = ("Seed-mean AUROC vs label fraction, one panel per dataset; the y axis "
                                        "follows the data (not 0-1) so close curves stay apart.")
    out.append(sec)

    from prism_plugin.summaries.seeds import THRESHOLDS

    sec = ReportSection("Breaking points: macro-F1 vs label budget", "", order=11, key="lb-breaking",
                        summary="where macro-F1 crosses 0.4 … 0.8")
    if not has_ind:
        sec.not_shown.append("no in-distribution runs")
    else:
        if _figures_ok(sec):
            sec.figures["lb-breaking.png"] = curves_figure(ind_cells, "f1_macro", "macro-F1", styles,
                                                           thresholds=THRESHOLDS)
            sec.captions["lb-breaking.png"] = ("Seed-mean macro-F1 vs label fraction (PRISM Figure 6); dotted: the "
                                               "breaking-point thresholds.")
        bp = view.table("breaking_points_by_threshold")
        if bp is not None and len(bp):
            bp = bp.copy()
            bp["model"] = [f"**{m}**" if m in set(yours) else m for m in bp["model"]]
            sec.body = ("The smallest label fraction whose seed-mean macro-F1 reaches each threshold (– = never; "
                        "`breaking_points_by_threshold.csv`):\n\n"
                        + markdown_table(bp, formats={c: (lambda v: "–" if pd.isna(v) else pct(v))
                                                      for c in bp.columns if str(c).startswith("thr_")}))
    out.append(sec)

    sec = ReportSection("Discrimination rank vs calibration rank", "", order=12, key="lb-rank",
                        summary="AUROC rank against scaled-ECE rank")
    pts = rank_points(ind_cells) if has_ind else pd.DataFrame()
    if pts.empty:
        sec.not_shown.append("needs at least 3 models on the same dataset (ranks within a dataset); "
                             + ("these results have fewer" if has_ind else "no in-distribution runs"))
    else:
        fr = sorted(pts["fraction"].unique())
        show = list(dict.fromkeys([fr[0], fr[-1]]))
        missing = [m for m in yours if m in set(models) and m not in set(pts["model"])]
        if missing:
            sec.not_shown.append(f"{', '.join(missing)}: no dataset shared with at least two other models, so no "
                                 "rank within a dataset (run them on a PRISM dataset to place them here)")
        if _figures_ok(sec):
            sec.figures["lb-rank.png"] = rank_figure(pts, show, styles)
            sec.captions["lb-rank.png"] = ("Each point: one (model, dataset); x = AUROC rank, y = rank by scaled ECE "
                                           "(1 = best on both); grey band: the ranks agree within one place "
                                           "(PRISM Figure 2).")
        sec.body = ("Ranks within each dataset at the smallest and largest label fraction with at least three "
                    "models; bootstrap rank correlations are in `prism-run findings`.")
    out.append(sec)

    # ---- calibration
    sec = ReportSection("Recoverability map", "", order=20, key="lb-recoverability",
                        summary="how much temperature scaling lowers ECE")
    if not has_ind:
        sec.not_shown.append("no in-distribution runs")
    elif _figures_ok(sec):
        sec.figures["lb-recoverability.png"] = recoverability_figure(ind_cells, yours)
        sec.captions["lb-recoverability.png"] = ("ECE raw minus ECE after temperature scaling per (dataset, model) "
                                                 "and label fraction (PRISM Figure 11): blue = scaling recovered "
                                                 "calibration, red = it made ECE worse.")
        worse = int((ind_cells["ece_scaled_fixed_mean"] > ind_cells["ece_fixed_mean"]).sum())
        sec.body = (f"Temperature scaling did not lower the seed-mean ECE in **{worse} of {len(ind_cells)}** "
                    "in-distribution cells shown.")
    out.append(sec)
    # ---- transfer
    sec = ReportSection("Transfer curves", "", order=30, key="lb-transfer", summary="target AUROC and ECE")
    found = False
    for table in TRANSFERS:
        tc = cells.loc[cells["table"] == table] if cells is not None and len(cells) else None
        if tc is None or tc.empty:
            continue
        found = True
        if not _figures_ok(sec):
            break
        from prism_plugin.report.derived import frame_label

        name = f"lb-transfer-{table}.png"
        sec.figures[name] = transfer_figure(tc, styles)
        sec.captions[name] = (f"{frame_label(table, tc)}: target AUROC (top) and target ECE (bottom; dashed: "
                              "after the source-fitted temperature) vs source label fraction (PRISM Figures 3, 13).")
    if not found:
        sec.not_shown.append("no transfer runs (run a transfer task, e.g. `prism_demo_transfer`)")
    out.append(sec)

    # ---- CRI
    sec = ReportSection("Composite Reliability Index", "", order=40, key="lb-cri", summary="per model and fraction")
    cri = _cri_by_fraction(view)
    if cri.empty:
        sec.not_shown.append("no CRI: it needs in-distribution and transfer runs of the same model")
    else:
        missing = [m for m in models if m not in set(cri.index)]
        if missing:
            sec.not_shown.append(f"{', '.join(missing)}: no CRI (no transfer runs at these fractions)")
        if _figures_ok(sec):
            sec.figures["lb-cri.png"] = cri_figure(cri, yours)
            sec.captions["lb-cri.png"] = ("CRI (multiplicative) per model and label fraction (PRISM Figure 7); each "
                                          "model's CRI is over its own datasets and pairs.")
        tab = cri.copy()
        tab.columns = [f"CRI {pct(c)}" for c in tab.columns]
        tab.insert(0, "model", [f"**{m}**" if m in set(yours) else m for m in tab.index])
        sec.tables["leaderboard_cri"] = cri.rename(columns=lambda c: f"cri_{round(c * 100, 6):g}pct").reset_index()
        sec.body = ("CRI = mean AUROC × (1 − mean scaled ECE) × OOD stability (PROTOCOL §6.2), from "
                    "`cri_variants_<pct>.csv`. A model with little in-distribution performance to lose looks stable: "
                    "read the index beside its components, not as a ranking.\n\n" + markdown_table(tab.reset_index(
                        drop=True)))
    out.append(sec)

    # ---- per-task tables
    sec = ReportSection("Per dataset", "", order=50, key="lb-per-task", summary="in-distribution, end fractions")
    ind_parts = [rt[t] for t in (IN_DIST, "camelyon17_indomain") if rt is not None and t in rt.present()]
    ind_runs = pd.concat(ind_parts, ignore_index=True) if ind_parts else None
    pt = per_task_table(cells, ind_runs, (IN_DIST, "camelyon17_indomain"), yours) if cells is not None \
        else pd.DataFrame()
    if pt.empty:
        sec.not_shown.append("no in-distribution cells")
    else:
        sec.body = ("Every dataset at its smallest and largest label fraction, models side by side (seed means; "
                    "⚠ names what qualifies a cell).\n\n" + markdown_table(pt))
    out.append(sec)
    sec = ReportSection("Per transfer pair", "", order=51, key="lb-per-pair", summary="target metrics, end fractions")
    tr_runs = None
    if rt is not None:
        parts = [rt[t].rename(columns={"pair": "dataset"}) for t in TRANSFERS if t in rt.present()
                 and "pair" in rt[t]]
        tr_runs = pd.concat(parts, ignore_index=True) if parts else None
    pp = per_task_table(cells, tr_runs, TRANSFERS, yours) if cells is not None else pd.DataFrame()
    if pp.empty:
        sec.not_shown.append("no transfer cells")
    else:
        sec.body = ("Every transfer pair at its smallest and largest source label fraction (target metrics; T is the "
                    "source-fitted temperature).\n\n" + markdown_table(pp))
    out.append(sec)
    return out


# --------------------------------------------------------------------------- the page
def _page_tables(tables, yours: Iterable[str]):
    """The per-run tables the page shows: without the tables no figure or table of the page reads
    (``indomain_propval``) and without reference-only tables none of the user's models ran (the
    published Camelyon17 hospital grid, unless a model of yours ran a Camelyon17 task); with a note
    for each table left out."""
    from prism_plugin.report.derived import TABLE_LABELS
    from prism_plugin.tables import RunTables

    yours = set(yours)
    keep, notes = {}, []
    for name in tables.present():
        df = tables[name]
        if name in PAGE_TABLES and (name in (IN_DIST, *TASK_TRANSFERS) or df["model"].isin(yours).any()):
            keep[name] = df
        elif "model" in df and df["model"].isin(yours).any():
            notes.append(f"{TABLE_LABELS.get(name, name)} runs of your models are not part of the leaderboard; "
                         "`prism-run findings` and the per-directory reports show them")
        else:
            notes.append(f"{TABLE_LABELS.get(name, name)} (reference only): not on the leaderboard, none of your "
                         "models has such runs")
    return RunTables(**keep), notes


def write_leaderboard(inputs: Sequence[Path], output: Path, host, *, reference: Path | None = None,
                      options: Mapping[str, Any] | None = None) -> Path:
    """Build the leaderboard of the results directories ``inputs`` (each a results directory or a folder
    of them), with the published tables of ``reference`` when given, into ``output``; returns the HTML."""
    from prism_plugin.report.build import (build_view, compute_summaries, models_title, notes_section, probes_apart,
                                           source_dirs, summary_options, write_sections)
    from prism_plugin.summaries.engine import write_summaries
    from prism_plugin.tables import RunTables, load_tables

    inputs = [Path(d) for d in inputs]
    output = check_output(output, inputs)
    if reference is not None and not Path(reference).is_dir():
        raise PrismError(f"--reference {reference}: not a directory; pass a folder with the results_v2 layout "
                         "(indomain_all_v2.csv, ood_all_v2.csv, ...)")
    ref_models: set[str] = set()
    if reference is not None:
        ref_models = set(_models(RunTables.from_reference_dir(reference, host=host)))
    # two checkpoints of one adapter in two folders are two models here, labelled by folder
    tables = probes_apart(load_tables(inputs, reference, host, label_models_by_input=True))
    yours = [m for m in _models(tables) if m not in ref_models]
    tables, dropped = _page_tables(tables, yours)
    dirs = source_dirs(inputs)
    opts, notes = summary_options(options, host, dirs)
    from prism_plugin.summaries.engine import summary_plugins

    skip = [n for n in summary_plugins(host) if n not in PAGE_SUMMARIES]
    summaries, failed = compute_summaries(tables, opts, host, skip=skip)
    output.mkdir(parents=True, exist_ok=True)
    tables_dir = output / TABLES
    write_summaries(tables_dir, summaries)
    title = models_title("PRISM leaderboard", yours) + (" beside the PRISM reference FMs" if reference else "")
    view = build_view(output, host, sources=inputs, run_tables=tables, summaries=summaries, tables_dir=tables_dir,
                      options=opts, title=title, reference=reference is not None, write_tables=False)
    view.models = tuple(yours)
    view.notes.extend(notes + failed + dropped)
    sections = leaderboard_sections(view, yours, reference=reference is not None, host=host)
    sections.append(notes_section(sections, view))
    footer = ("Self-contained: every figure is embedded in this file, no network access. The numbers come from "
              f"the CSV tables in <code>{TABLES}</code> (<code>leaderboard.csv</code> holds the leaderboard's "
              "numbers unrounded); click a table header to sort it, the CSV link above a table downloads it. "
              "The Markdown twin <code>report.md</code> has the figures in <code>figures/</code>.")
    return write_sections(view, sections, title=title, tabs=TABS, kicker="PRISM leaderboard", footer=footer)


__all__ = ["DEFAULT_OUTPUT", "TABS", "check_output", "cri_figure", "curves_figure", "leaderboard_sections",
           "leaderboard_table", "model_styles", "per_task_table", "rank_figure", "recoverability_figure",
           "transfer_figure", "write_leaderboard"]
