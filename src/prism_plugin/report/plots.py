"""Report figures (matplotlib, Agg, no pyplot state): each function returns PNG bytes.

Inputs are the ``report_cells`` / ``fewshot_temperature`` tables of
:mod:`prism_plugin.report.derived` and the reliability artifacts of
:mod:`prism_plugin.metrics.reliability`. Label fractions are drawn on a log
axis labelled in percent; every axis says what it shows and in which unit.
matplotlib is an optional dependency (extra ``report``): :func:`available`
says whether figures can be drawn.
"""

from __future__ import annotations

import io
import math
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

#: Okabe-Ito (colour-blind safe), then a few more distinct colours.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
           "#8C564B", "#7F7F7F", "#17BECF", "#BCBD22"]
INK = "#1f2937"
MUTED = "#6b7280"
GRID = "#e5e7eb"
RAW = "#D55E00"
SCALED = "#0072B2"
DPI = 130
MAX_PANELS = 24


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _rc() -> dict[str, Any]:
    return {
        "font.size": 9.5, "axes.titlesize": 10.5, "axes.labelsize": 9.5, "axes.titleweight": "bold",
        "axes.edgecolor": "#9ca3af", "axes.labelcolor": INK, "xtick.color": INK, "ytick.color": INK,
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": GRID,
        "grid.linewidth": 0.8, "legend.frameon": False, "legend.fontsize": 9, "font.family": "DejaVu Sans",
        "figure.facecolor": "white", "axes.facecolor": "white", "savefig.facecolor": "white",
    }


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _style():
    import matplotlib

    return matplotlib.rc_context(_rc())


def model_colors(models: Iterable[str]) -> dict[str, str]:
    models = list(dict.fromkeys(models))
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(models)}


def pct_label(f: float) -> str:
    return f"{round(float(f) * 100.0, 6):g}%"


def _fraction_axis(ax, fractions: Sequence[float], label: str = "label fraction (log scale)") -> None:
    fr = sorted({float(f) for f in fractions if f and f > 0})
    if not fr:
        return
    ax.set_xscale("log")
    ax.set_xticks(fr)
    ax.set_xticklabels([pct_label(f) for f in fr])
    ax.minorticks_off()
    if len(fr) > 1:
        ax.set_xlim(fr[0] / 1.35, fr[-1] * 1.35)
    else:
        ax.set_xlim(fr[0] / 2, fr[0] * 2)
    ax.set_xlabel(label)


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(max_cols, max(1, n))
    rows = int(math.ceil(n / cols))
    return rows, cols


def _axes(fig, n: int, max_cols: int = 3, sharey: bool = True):
    rows, cols = _grid(n, max_cols)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return flat[:n]


def _legend(fig, handles, labels, ncol: int | None = None, title: str | None = None) -> None:
    if not handles:
        return
    ncol = ncol or min(len(labels), 4)
    fig.legend(handles, labels, loc="outside lower center", ncol=ncol, title=title, title_fontsize=9)


def _band(ax, x, lo, hi, color) -> None:
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    ok = ~(np.isnan(lo) | np.isnan(hi))
    if ok.sum() >= 1 and np.any(hi[ok] > lo[ok]):
        ax.fill_between(np.asarray(x)[ok], lo[ok], hi[ok], color=color, alpha=0.16, linewidth=0)


# --------------------------------------------------------------------------- curves vs fraction
def metric_curves(cells: pd.DataFrame, panels: Sequence[tuple[str, str, str]], *, title: str = "",
                  ylim: tuple[float, float] | None = None, max_cols: int = 3) -> bytes:
    """Seed-mean curves with min–max seed bands.

    ``panels`` = [(setting, metric, y label)]; ``cells`` = the report_cells rows
    of one table. One line per model, colours shared across panels.
    """
    colors = model_colors(cells["model"])
    panels = list(panels)[:MAX_PANELS]
    n = len(panels)
    rows, cols = _grid(n, max_cols)
    with _style():
        fig = _figure(3.6 * cols + 0.4, 2.7 * rows + 0.9)
        axes = _axes(fig, n, max_cols, sharey=False)
        handles: dict[str, Any] = {}
        for ax, (setting, metric, ylabel) in zip(axes, panels):
            sub = cells.loc[cells["setting"] == setting]
            for model, g in sub.groupby("model", sort=False):
                g = g.sort_values("fraction")
                x = g["fraction"].to_numpy(dtype=float)
                c = colors[model]
                (line,) = ax.plot(x, g[f"{metric}_mean"], marker="o", ms=3.5, lw=1.8, color=c, label=model)
                _band(ax, x, g[f"{metric}_min"], g[f"{metric}_max"], c)
                handles.setdefault(model, line)
            _fraction_axis(ax, sub["fraction"])
            ax.set_ylabel(ylabel)
            ax.set_title(str(setting).replace("->", " → "))
            if ylim:
                ax.set_ylim(*ylim)
        if title:
            fig.suptitle(title, fontsize=11.5, fontweight="bold", color=INK)
        _legend(fig, list(handles.values()), list(handles), title="model (line: seed mean; band: min–max over seeds)")
        return _png(fig)


def ece_curves(cells: pd.DataFrame, settings: Sequence[str], *, scaled_label: str = "after temperature scaling",
               max_cols: int = 3, title: str = "") -> bytes:
    """Raw (solid) and temperature-scaled (dashed) ECE vs label fraction, one panel per setting."""
    colors = model_colors(cells["model"])
    settings = list(settings)[:MAX_PANELS]
    n = len(settings)
    rows, cols = _grid(n, max_cols)
    from matplotlib.lines import Line2D

    with _style():
        fig = _figure(3.6 * cols + 0.4, 2.7 * rows + 1.1)
        axes = _axes(fig, n, max_cols, sharey=False)
        for ax, setting in zip(axes, settings):
            sub = cells.loc[cells["setting"] == setting]
            for model, g in sub.groupby("model", sort=False):
                g = g.sort_values("fraction")
                x = g["fraction"].to_numpy(dtype=float)
                c = colors[model]
                ax.plot(x, g["ece_fixed_mean"], marker="o", ms=3.5, lw=1.8, color=c)
                _band(ax, x, g["ece_fixed_min"], g["ece_fixed_max"], c)
                ax.plot(x, g["ece_scaled_fixed_mean"], marker="s", ms=3.2, lw=1.6, ls="--", color=c)
                _band(ax, x, g["ece_scaled_fixed_min"], g["ece_scaled_fixed_max"], c)
            _fraction_axis(ax, sub["fraction"])
            ax.set_ylabel("ECE (15 fixed bins)")
            ax.set_ylim(bottom=0)
            ax.set_title(str(setting).replace("->", " → "))
        handles = [Line2D([], [], color=colors[m], lw=2) for m in colors]
        labels = list(colors)
        handles += [Line2D([], [], color=MUTED, lw=1.8), Line2D([], [], color=MUTED, lw=1.6, ls="--")]
        labels += ["raw probabilities", scaled_label]
        if title:
            fig.suptitle(title, fontsize=11.5, fontweight="bold", color=INK)
        _legend(fig, handles, labels, ncol=min(len(labels), 5), title="band: min–max over seeds")
        return _png(fig)


def temperature_curves(cells: pd.DataFrame, settings: Sequence[str], *, max_cols: int = 3,
                       bounds: tuple[float, float] = (0.1, 10.0), title: str = "",
                       extra: Sequence[tuple[str, str, str]] = ()) -> bytes:
    """Fitted temperature vs label fraction (log y) against the neutral value
    (dotted line: T = 2 for binary problems under the [−d, d] logits, 1 otherwise).

    ``extra`` = [(column prefix, label, linestyle)] of further temperatures to
    draw per model (e.g. the oracle and few-shot temperatures of transfer runs).
    """
    colors = model_colors(cells["model"])
    settings = list(settings)[:MAX_PANELS]
    n = len(settings)
    rows, cols = _grid(n, max_cols)
    from matplotlib.lines import Line2D

    with _style():
        fig = _figure(3.6 * cols + 0.4, 2.8 * rows + 1.1)
        axes = _axes(fig, n, max_cols, sharey=True)
        for ax, setting in zip(axes, settings):
            sub = cells.loc[cells["setting"] == setting]
            neutral = float(sub["neutral_temperature"].dropna().iloc[0]) if sub["neutral_temperature"].notna().any() else 1.0
            ax.axhspan(bounds[0] * 0.5, bounds[0], color="#f3f4f6", lw=0)
            ax.axhspan(bounds[1], bounds[1] * 2, color="#f3f4f6", lw=0)
            ax.axhline(neutral, color=INK, lw=1.1, ls=":")
            ax.text(0.02, neutral, f" neutral T = {neutral:g}", transform=ax.get_yaxis_transform(), va="bottom",
                    ha="left", fontsize=8, color=INK)
            for model, g in sub.groupby("model", sort=False):
                g = g.sort_values("fraction")
                x = g["fraction"].to_numpy(dtype=float)
                c = colors[model]
                ax.plot(x, g["temperature_mean"], marker="o", ms=3.5, lw=1.8, color=c)
                _band(ax, x, g["temperature_min"], g["temperature_max"], c)
                for prefix, _label, ls in extra:
                    col = f"{prefix}_mean"
                    if col in g and g[col].notna().any():
                        ax.plot(x, g[col], marker=".", lw=1.4, ls=ls, color=c)
            _fraction_axis(ax, sub["fraction"])
            ax.set_yscale("log")
            ax.set_ylim(bounds[0] * 0.7, bounds[1] * 1.4)
            ax.set_ylabel("fitted temperature T (log scale)")
            ax.set_title(str(setting).replace("->", " → "))
        handles = [Line2D([], [], color=colors[m], lw=2) for m in colors]
        labels = list(colors)
        if extra:
            handles.append(Line2D([], [], color=MUTED, lw=1.8))
            labels.append("source validation T")
            for _p, label, ls in extra:
                handles.append(Line2D([], [], color=MUTED, lw=1.4, ls=ls))
                labels.append(label)
        if title:
            fig.suptitle(title, fontsize=11.5, fontweight="bold", color=INK)
        _legend(fig, handles, labels, ncol=min(len(labels), 5),
                title="below the dotted line: scaling sharpens (under-confident probe); above: it softens · "
                      f"grey: search bounds [{bounds[0]:g}, {bounds[1]:g}]")
        return _png(fig)


# --------------------------------------------------------------------------- reliability
def pool_bins(entries: Sequence[dict], which: str) -> dict[str, np.ndarray] | None:
    """Pool the bins of several runs (seeds): counts add, means are count-weighted."""
    parts = [e[which] for e in entries if e.get(which)]
    if not parts:
        return None
    counts = np.array([p["count"] for p in parts], dtype=float)
    conf = np.array([[np.nan if v is None else v for v in p["confidence"]] for p in parts], dtype=float)
    acc = np.array([[np.nan if v is None else v for v in p["accuracy"]] for p in parts], dtype=float)
    total = counts.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mc = np.nansum(conf * counts, axis=0) / total
        ma = np.nansum(acc * counts, axis=0) / total
    mc[total == 0] = np.nan
    ma[total == 0] = np.nan
    n = float(sum(p["n"] for p in parts))
    return {"count": total, "confidence": mc, "accuracy": ma, "n": n}


def reliability_grid(groups: Sequence[dict[str, Any]], *, n_bins: int = 15) -> bytes:
    """Reliability diagrams: one column per group (a cell pooled over seeds).

    Each group: ``title``, ``raw`` / ``scaled`` pooled bins (:func:`pool_bins`),
    ``ece_raw`` / ``ece_scaled`` (seed-mean ECE to print), ``binary`` (class-1
    convention) and ``temperature``. Top row: observed frequency vs confidence
    with the diagonal; bottom strip: share of samples per bin.
    """
    groups = list(groups)[:MAX_PANELS]
    n = len(groups)
    cols = min(4, n)
    rows = int(math.ceil(n / cols))
    edges = np.linspace(0, 1, n_bins + 1)
    centers = (edges[:-1] + edges[1:]) / 2
    width = 1.0 / n_bins
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    with _style():
        fig = _figure(3.3 * cols + 0.3, 3.9 * rows + 0.9)
        outer = fig.add_gridspec(rows, cols)
        for i, g in enumerate(groups):
            inner = outer[i // cols, i % cols].subgridspec(2, 1, height_ratios=[3.2, 1], hspace=0.05)
            ax = fig.add_subplot(inner[0])
            axh = fig.add_subplot(inner[1], sharex=ax)
            ax.plot([0, 1], [0, 1], color=MUTED, lw=1, ls=":")
            for which, color, marker, label in (("raw", RAW, "o", "raw"), ("scaled", SCALED, "s", "scaled")):
                b = g.get(which)
                if b is None:
                    continue
                ok = b["count"] > 0
                ax.plot(b["confidence"][ok], b["accuracy"][ok], marker=marker, ms=4, lw=1.6, color=color)
                share = b["count"] / max(b["n"], 1)
                off = -width / 4 if which == "raw" else width / 4
                axh.bar(centers + off, share, width=width / 2, color=color, alpha=0.75, linewidth=0)
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_aspect("auto")
            ax.set_title(g["title"], fontsize=9.5)
            ax.set_ylabel("observed frequency of class 1" if g.get("binary") else "accuracy")
            ece_txt = f"ECE raw {g['ece_raw']:.3f}"
            if g.get("ece_scaled") is not None and not math.isnan(g["ece_scaled"]):
                ece_txt += f"\nECE scaled {g['ece_scaled']:.3f} (T = {g.get('temperature', float('nan')):.2f})"
            ax.text(0.03, 0.97, ece_txt, transform=ax.transAxes, va="top", ha="left", fontsize=8,
                    bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": GRID})
            ax.tick_params(labelbottom=False)
            axh.set_xlabel("mean predicted p(class 1)" if g.get("binary") else "confidence (max probability)")
            axh.set_ylabel("share", fontsize=8)
            axh.set_ylim(0, 1)
            axh.set_yticks([0, 0.5, 1])
            axh.grid(axis="x", visible=False)
        handles = [Line2D([], [], color=RAW, marker="o", lw=1.6), Line2D([], [], color=SCALED, marker="s", lw=1.6),
                   Line2D([], [], color=MUTED, ls=":"), Patch(color="#9ca3af")]
        labels = ["raw probabilities", "after temperature scaling", "perfect calibration",
                  "bars: share of test samples per bin"]
        _legend(fig, handles, labels, ncol=4)
        return _png(fig)


# --------------------------------------------------------------------------- collapse
def collapse_heatmap(cells: pd.DataFrame, *, title: str = "") -> bytes:
    """Share of seeds whose probe collapsed, per (model · setting) row and fraction column."""
    from matplotlib.colors import LinearSegmentedColormap

    data = cells.copy()
    data["row"] = data["model"].astype(str) + " · " + data["setting"].astype(str).str.replace("->", " → ")
    rows = list(dict.fromkeys(data["row"]))
    fracs = sorted(data["fraction"].unique())
    share = data.pivot_table(index="row", columns="fraction", values="collapsed_share", aggfunc="first").reindex(
        index=rows, columns=fracs)
    nruns = data.pivot_table(index="row", columns="fraction", values="n_runs", aggfunc="first").reindex(
        index=rows, columns=fracs)
    ncoll = data.pivot_table(index="row", columns="fraction", values="collapsed_runs", aggfunc="first").reindex(
        index=rows, columns=fracs)
    cmap = LinearSegmentedColormap.from_list("collapse", ["#f0fdf4", "#fde68a", "#f97316", "#b91c1c"])
    h = 0.28 * len(rows) + 1.5
    with _style():
        fig = _figure(min(2.6 + 0.85 * len(fracs) + 0.09 * max(len(r) for r in rows), 12), h)
        ax = fig.add_subplot(1, 1, 1)
        ax.grid(False)
        im = ax.imshow(share.to_numpy(dtype=float), cmap=cmap, vmin=0, vmax=1, aspect="auto")
        for i in range(len(rows)):
            for j in range(len(fracs)):
                k, t = ncoll.iat[i, j], nruns.iat[i, j]
                if pd.isna(t):
                    continue
                txt = "–" if pd.isna(k) else f"{int(k)}/{int(t)}"
                ax.text(j, i, txt, ha="center", va="center", fontsize=7.5,
                        color="white" if (not pd.isna(share.iat[i, j]) and share.iat[i, j] > 0.6) else INK)
        ax.set_xticks(range(len(fracs)))
        ax.set_xticklabels([pct_label(f) for f in fracs])
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=8)
        ax.set_xlabel("label fraction")
        ax.tick_params(length=0)
        for s in ax.spines.values():
            s.set_visible(False)
        cb = fig.colorbar(im, ax=ax, shrink=min(1.0, 6 / max(len(rows), 1) + 0.3), pad=0.01)
        cb.set_label("share of seeds collapsed (>99 % of predictions in one class)", fontsize=8)
        if title:
            ax.set_title(title)
        return _png(fig)


# --------------------------------------------------------------------------- decoupling
def rank_scatter(points: pd.DataFrame, fractions: Sequence[float], annotations: dict[float, str] | None = None) -> bytes:
    """AUROC rank (x, 1 = best) vs calibration rank (y, 1 = lowest scaled ECE)
    per (model, dataset), one panel per fraction, with the diagonal and a ±1 band."""
    colors = model_colors(points["model"])
    fractions = list(fractions)
    n_max = int(points["n_models"].max()) if len(points) else 1
    from matplotlib.lines import Line2D

    rng = np.random.default_rng(0)
    with _style():
        fig = _figure(4.1 * len(fractions) + 0.3, 4.5)
        axes = fig.subplots(1, len(fractions), squeeze=False)[0]
        for ax, f in zip(axes, fractions):
            sub = points.loc[np.isclose(points["fraction"], f)]
            x = np.arange(0.5, n_max + 1.5)
            ax.fill_between(x, x - 1, x + 1, color="#e5e7eb", alpha=0.7, lw=0)
            ax.plot(x, x, color=MUTED, lw=1, ls=":")
            jx = rng.uniform(-0.13, 0.13, len(sub))
            jy = rng.uniform(-0.13, 0.13, len(sub))
            ax.scatter(sub["rank_auroc"] + jx, sub["rank_cal"] + jy, s=26,
                       c=[colors[m] for m in sub["model"]], edgecolors="white", linewidths=0.5, zorder=3)
            ax.set_xlim(0.4, n_max + 0.6)
            ax.set_ylim(n_max + 0.6, 0.4)
            ax.set_xticks(range(1, n_max + 1))
            ax.set_yticks(range(1, n_max + 1))
            ax.set_xlabel("AUROC rank within dataset (1 = best)")
            ax.set_ylabel("calibration rank: scaled ECE (1 = best)")
            ax.set_title(f"{pct_label(f)} labels")
            if annotations and f in annotations:
                ax.text(0.97, 0.03, annotations[f], transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5,
                        bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": GRID})
        handles = [Line2D([], [], color=c, marker="o", lw=0) for c in colors.values()]
        _legend(fig, handles, list(colors), ncol=min(len(colors), 8),
                title="each point: one (model, dataset); grey band: ranks agree within one place")
        return _png(fig)


# --------------------------------------------------------------------------- transfer
def transfer_curves(cells: pd.DataFrame, settings: Sequence[str], *, aggregate_label: str | None = None) -> bytes:
    """Target AUROC (top) and target ECE (bottom; raw solid, source-T scaled dashed)
    vs source label fraction, one column per pair. With ``aggregate_label`` the
    pairs are averaged per model (band: range over pairs)."""
    colors = model_colors(cells["model"])
    from matplotlib.lines import Line2D

    if aggregate_label is not None:
        agg = cells.groupby(["model", "fraction"], sort=False).agg(
            auroc_mean=("auroc_mean", "mean"), auroc_min=("auroc_mean", "min"), auroc_max=("auroc_mean", "max"),
            ece_fixed_mean=("ece_fixed_mean", "mean"), ece_fixed_min=("ece_fixed_mean", "min"),
            ece_fixed_max=("ece_fixed_mean", "max"), ece_scaled_fixed_mean=("ece_scaled_fixed_mean", "mean"),
        ).reset_index()
        agg["setting"] = aggregate_label
        agg["ece_scaled_fixed_min"] = np.nan
        agg["ece_scaled_fixed_max"] = np.nan
        cells = agg
        settings = [aggregate_label]
    settings = list(settings)[:8]
    n = len(settings)
    with _style():
        fig = _figure(3.3 * n + 0.4, 5.6)
        axes = fig.subplots(2, n, squeeze=False, sharex="col")
        for j, setting in enumerate(settings):
            sub = cells.loc[cells["setting"] == setting]
            a_ax, e_ax = axes[0][j], axes[1][j]
            a_ax.axhspan(0, 0.85, color="#fef3c7", alpha=0.55, lw=0)
            a_ax.axhline(0.5, color=MUTED, lw=0.9, ls=":")
            for model, g in sub.groupby("model", sort=False):
                g = g.sort_values("fraction")
                x = g["fraction"].to_numpy(dtype=float)
                c = colors[model]
                a_ax.plot(x, g["auroc_mean"], marker="o", ms=3.5, lw=1.8, color=c)
                _band(a_ax, x, g["auroc_min"], g["auroc_max"], c)
                e_ax.plot(x, g["ece_fixed_mean"], marker="o", ms=3.5, lw=1.8, color=c)
                _band(e_ax, x, g["ece_fixed_min"], g["ece_fixed_max"], c)
                e_ax.plot(x, g["ece_scaled_fixed_mean"], marker="s", ms=3, lw=1.4, ls="--", color=c)
            a_ax.set_title(str(setting).replace("->", " → "))
            a_ax.set_ylim(0, 1.02)
            a_ax.set_ylabel("target AUROC")
            e_ax.set_ylabel("target ECE (15 fixed bins)")
            e_ax.set_ylim(bottom=0)
            _fraction_axis(e_ax, sub["fraction"], "source label fraction (log scale)")
            a_ax.tick_params(labelbottom=False)
        handles = [Line2D([], [], color=colors[m], lw=2) for m in colors]
        labels = list(colors)
        handles += [Line2D([], [], color=MUTED, lw=1.8), Line2D([], [], color=MUTED, lw=1.4, ls="--"),
                    __import__("matplotlib.patches", fromlist=["Patch"]).Patch(color="#fef3c7")]
        labels += ["raw", "after source-fitted T", "AUROC < 0.85 (paper: more labels worsen target ECE)"]
        band = "range over pairs" if aggregate_label else "min–max over seeds"
        _legend(fig, handles, labels, ncol=min(len(labels), 4), title=f"band: {band}")
        return _png(fig)


def fewshot_gap(fs: pd.DataFrame, *, tolerance: float = 0.02) -> bytes:
    """Few-shot ECE minus oracle ECE vs the number of target labels K, at the
    largest source fraction, one panel per pair, one line per model."""
    colors = model_colors(fs["model"])
    settings = list(dict.fromkeys(fs["setting"]))[:MAX_PANELS]
    n = len(settings)
    rows, cols = _grid(n, 4)
    from matplotlib.lines import Line2D

    with _style():
        fig = _figure(3.3 * cols + 0.4, 2.8 * rows + 1.0)
        axes = _axes(fig, n, 4, sharey=True)
        for ax, setting in zip(axes, settings):
            sub = fs.loc[fs["setting"] == setting]
            top = sub.loc[np.isclose(sub["fraction"], sub["fraction"].max())]
            ax.axhspan(-1, tolerance, color="#dcfce7", alpha=0.6, lw=0)
            ax.axhline(0, color=MUTED, lw=0.9, ls=":")
            for model, g in top.groupby("model", sort=False):
                g = g.sort_values("k")
                ax.plot(g["k"], g["gap"], marker="o", ms=4, lw=1.8, color=colors[model])
            ks = sorted(sub["k"].unique())
            ax.set_xscale("log", base=2)
            ax.set_xticks(ks)
            ax.set_xticklabels([str(int(k)) for k in ks])
            ax.minorticks_off()
            ax.set_xlabel("labelled target samples K (log scale)")
            ax.set_ylabel("few-shot ECE − oracle ECE")
            lo = min(-0.01, float(np.nanmin(top["gap"])) - 0.01) if len(top) else -0.01
            hi = max(tolerance * 2, float(np.nanmax(top["gap"])) + 0.01) if len(top) else 0.05
            ax.set_ylim(lo, hi)
            ax.set_title(f"{str(setting).replace('->', ' → ')} ({pct_label(top['fraction'].max()) if len(top) else ''} source labels)")
        handles = [Line2D([], [], color=colors[m], lw=2) for m in colors]
        _legend(fig, handles + [__import__("matplotlib.patches", fromlist=["Patch"]).Patch(color="#dcfce7")],
                list(colors) + [f"within {tolerance:g} of the oracle ECE"])
        return _png(fig)


def is_png(data: bytes) -> bool:
    return data[:8] == b"\x89PNG\r\n\x1a\n"


__all__ = [
    "available", "collapse_heatmap", "ece_curves", "fewshot_gap", "is_png", "metric_curves", "model_colors",
    "pool_bins", "rank_scatter", "reliability_grid", "temperature_curves", "transfer_curves",
]
