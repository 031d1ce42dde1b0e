"""The leaderboard's figures (:mod:`prism_plugin.report.leaderboard`): the user's models as large
diamonds with thick lines in strong colours, the reference FMs as small circles with thin lines."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from prism_plugin.report import plots
from prism_plugin.report.verdict_rows import setting_label

# user models: strong colours, diamonds, thick lines; reference FMs: Okabe-Ito, small circles, thin lines
USER_COLORS = ("#111111", "#C2185B", "#5E35B1", "#00838F", "#6D4C41", "#827717", "#1565C0", "#AD1457")
REF_COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#BCBD22", "#8C564B",
              "#7F7F7F", "#17BECF")
FONT = 9.0  # every text of the leaderboard figures is at least this size (points)


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
def setting_order(cells: pd.DataFrame) -> list:
    """Datasets in the PRISM paper's order, then the others (the user's) by first appearance."""
    from prism_plugin.summaries.conventions import DATASET_ORDER, order_like

    return order_like(cells["setting"], DATASET_ORDER)


def curves_figure(cells: pd.DataFrame, metric: str, ylabel: str, styles, *, thresholds: Sequence[float] = (),
                  ylim=(0.0, 1.005)) -> bytes:
    """Seed-mean ``metric`` vs label fraction, one panel per dataset, one line per model (min-max seed band
    for the user's models); ``thresholds``: dotted horizontal lines (the breaking points of Figure 6)."""
    from matplotlib.lines import Line2D

    settings = setting_order(cells)[:plots.MAX_PANELS]
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
    for setting in setting_order(d):
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
