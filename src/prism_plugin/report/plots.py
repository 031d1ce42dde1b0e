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


def figure(width: float, height: float):
    """A pyplot-free Agg figure of ``width`` x ``height`` inches at :data:`DPI`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def png(fig, *, tight: bool = False) -> bytes:
    """The figure as PNG bytes (``tight``: crop to the drawn content, ``bbox_inches="tight"``)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, **({"bbox_inches": "tight"} if tight else {}))
    return buf.getvalue()


def style():
    """The report's matplotlib style (a ``rc_context``): draw and save figures inside it."""
    import matplotlib

    return matplotlib.rc_context(_rc())


# the former private names, used throughout this module
_figure, _png, _style = figure, png, style


def model_colors(models: Iterable[str]) -> dict[str, str]:
    models = list(dict.fromkeys(models))
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(models)}


def pct_label(f: float) -> str:
    return f"{round(float(f) * 100.0, 6):g}%"


def lx(f) -> np.ndarray:
    """Label fractions on the (linear) plotting axis: log10(fraction)."""
    return np.log10(np.asarray(f, dtype=float))


def _fraction_axis(ax, fractions: Sequence[float], label: str = "label fraction (log scale)") -> None:
    """A linear axis of log10(fraction) with ticks at the fractions present, in percent
    (cheaper to draw than a matplotlib log axis and with exactly the ticks we want)."""
    fr = sorted({float(f) for f in fractions if f and f > 0})
    if not fr:
        return
    x = lx(fr)
    ax.set_xticks(x)
    ax.set_xticklabels([pct_label(f) for f in fr], fontsize=8.5)
    pad = 0.12 * (x[-1] - x[0]) if len(x) > 1 else 0.3
    ax.set_xlim(x[0] - pad, x[-1] + pad)
    ax.set_xlabel(label)


def _log_y(ax, lo: float, hi: float, ticks=(0.1, 0.2, 0.5, 1, 2, 5, 10)) -> None:
    t = [v for v in ticks if lo <= v <= hi]
    ax.set_yticks(np.log10(t))
    ax.set_yticklabels([f"{v:g}" for v in t])
    ax.set_ylim(np.log10(lo), np.log10(hi))


class _Grid:
    """A figure of ``rows`` x ``cols`` panels with margins in inches and room for a
    legend below (manual layout: one draw pass)."""

    def __init__(self, n: int, max_cols: int = 3, *, panel_w: float = 3.3, panel_h: float = 2.35,
                 left: float = 0.8, right: float = 0.25, top: float = 0.45, bottom: float = 0.62,
                 wgap: float = 0.72, hgap: float = 0.8, legend: Sequence[str] = (), legend_title: bool = False,
                 title: bool = False, sharey: bool = False):
        self.n = n
        if n == 1:
            panel_w = max(panel_w, 5.2)
        self.cols = min(max_cols, max(1, n))
        self.rows = int(math.ceil(n / self.cols))
        top = top + (0.3 if title else 0.0)
        self.W = left + self.cols * panel_w + (self.cols - 1) * wgap + right
        n_leg = legend_rows(legend, self.W, legend_title) if legend else 0
        self.legend_h = 0.0 if not n_leg else 0.12 + 0.21 * n_leg
        self.H = top + self.rows * panel_h + (self.rows - 1) * hgap + bottom + self.legend_h
        self.fig = _figure(self.W, self.H)
        self.fig.subplots_adjust(left=left / self.W, right=1 - right / self.W,
                                 bottom=(bottom + self.legend_h) / self.H, top=1 - top / self.H,
                                 wspace=wgap / panel_w, hspace=hgap / panel_h)
        axes = self.fig.subplots(self.rows, self.cols, squeeze=False, sharey=sharey)
        flat = list(axes.ravel())
        for ax in flat[n:]:
            ax.set_visible(False)
        self.axes = flat[:n]

    def title(self, text: str) -> None:
        self.fig.suptitle(text, fontsize=11.5, fontweight="bold", color=INK, y=1 - 0.12 / self.H, va="top")

    def legend(self, handles, labels, title: str | None = None) -> None:
        _legend(self.fig, handles, labels, self.W, title=title)


def legend_rows(labels: Sequence[str], width: float, title: "bool | str" = False) -> int:
    ncol = _ncol(labels, width)
    extra = 0
    if isinstance(title, str) and title:
        extra = int(math.ceil(len(title) / max(30, int((width - 0.3) / 0.066))))
    elif title:
        extra = 1
    return int(math.ceil(len(labels) / ncol)) + extra


def _ncol(labels: Sequence[str], width: float) -> int:
    lengths = sorted(len(str(l)) for l in labels) or [1]
    typical = lengths[min(len(lengths) - 1, int(0.8 * len(lengths)))]
    item = 0.55 + 0.068 * typical
    return max(1, min(len(labels), int((width - 0.4) // item)))


def _legend(fig, handles, labels, width: float, title: str | None = None) -> None:
    if not handles:
        return
    if title:
        import textwrap

        title = "\n".join(textwrap.wrap(title, max(30, int((width - 0.3) / 0.066))))
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=_ncol(labels, width),
               title=title, title_fontsize=8.5, fontsize=8.5, handlelength=2.2, columnspacing=1.4,
               borderaxespad=0.3)


def _band(ax, x, lo, hi, color) -> None:
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    ok = ~(np.isnan(lo) | np.isnan(hi))
    if ok.sum() >= 1 and np.any(hi[ok] > lo[ok]):
        ax.fill_between(np.asarray(x)[ok], lo[ok], hi[ok], color=color, alpha=0.16, linewidth=0)


# --------------------------------------------------------------------------- curves vs fraction
def _model_handles(colors: dict[str, str]):
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=c, lw=2, marker="o", ms=4) for c in colors.values()], list(colors)


def metric_curves(cells: pd.DataFrame, panels: Sequence[tuple[str, str, str]], *, title: str = "",
                  ylim: tuple[float, float] | None = None, max_cols: int = 3) -> bytes:
    """Seed-mean curves with min–max seed bands.

    ``panels`` = [(setting, metric, y label)]; ``cells`` = the report_cells rows
    of one table. One line per model, colours shared across panels.
    """
    colors = model_colors(cells["model"])
    panels = list(panels)[:MAX_PANELS]
    handles, labels = _model_handles(colors)
    ltitle = "line: seed mean · band: min–max over seeds"
    with _style():
        g = _Grid(len(panels), max_cols, legend=labels, legend_title=ltitle, title=bool(title))
        for ax, (setting, metric, ylabel) in zip(g.axes, panels):
            sub = cells.loc[cells["setting"] == setting]
            for model, grp in sub.groupby("model", sort=False):
                grp = grp.sort_values("fraction")
                x = lx(grp["fraction"])
                c = colors[model]
                ax.plot(x, grp[f"{metric}_mean"], marker="o", ms=3.5, lw=1.8, color=c)
                _band(ax, x, grp[f"{metric}_min"], grp[f"{metric}_max"], c)
            _fraction_axis(ax, sub["fraction"])
            ax.set_ylabel(ylabel)
            ax.set_title(str(setting).replace("->", " → "))
            if ylim:
                ax.set_ylim(*ylim)
        if title:
            g.title(title)
        g.legend(handles, labels, title=ltitle)
        return _png(g.fig)


def ece_curves(cells: pd.DataFrame, settings: Sequence[str], *, scaled_label: str = "after temperature scaling",
               max_cols: int = 3, title: str = "") -> bytes:
    """Raw (solid) and temperature-scaled (dashed) ECE vs label fraction, one panel per setting."""
    from matplotlib.lines import Line2D

    colors = model_colors(cells["model"])
    settings = list(settings)[:MAX_PANELS]
    handles, labels = _model_handles(colors)
    handles += [Line2D([], [], color=MUTED, lw=1.8, marker="o", ms=4),
                Line2D([], [], color=MUTED, lw=1.6, ls="--", marker="s", ms=3.5)]
    labels += ["raw probabilities", scaled_label]
    ltitle = "band: min–max over seeds"
    with _style():
        g = _Grid(len(settings), max_cols, legend=labels, legend_title=ltitle, title=bool(title))
        for ax, setting in zip(g.axes, settings):
            sub = cells.loc[cells["setting"] == setting]
            for model, grp in sub.groupby("model", sort=False):
                grp = grp.sort_values("fraction")
                x = lx(grp["fraction"])
                c = colors[model]
                ax.plot(x, grp["ece_fixed_mean"], marker="o", ms=3.5, lw=1.8, color=c)
                _band(ax, x, grp["ece_fixed_min"], grp["ece_fixed_max"], c)
                ax.plot(x, grp["ece_scaled_fixed_mean"], marker="s", ms=3.2, lw=1.6, ls="--", color=c)
                _band(ax, x, grp["ece_scaled_fixed_min"], grp["ece_scaled_fixed_max"], c)
            _fraction_axis(ax, sub["fraction"])
            ax.set_ylabel("ECE (15 fixed bins)")
            ax.set_ylim(bottom=0)
            ax.set_title(str(setting).replace("->", " → "))
        if title:
            g.title(title)
        g.legend(handles, labels, title=ltitle)
        return _png(g.fig)


def temperature_curves(cells: pd.DataFrame, settings: Sequence[str], *, max_cols: int = 3,
                       bounds: tuple[float, float] = (0.1, 10.0), title: str = "",
                       extra: Sequence[tuple[str, str, str]] = (),
                       xlabel: str = "label fraction (log scale)") -> bytes:
    """Fitted temperature vs label fraction (log y) against the neutral value
    (dotted line: T = 2 for binary problems under the [−d, d] logits, 1 otherwise).

    ``extra`` = [(column prefix, label, linestyle)] of further temperatures to
    draw per model (e.g. the oracle and few-shot temperatures of transfer runs).
    """
    from matplotlib.lines import Line2D

    colors = model_colors(cells["model"])
    settings = list(settings)[:MAX_PANELS]
    handles, labels = _model_handles(colors)
    if extra:
        handles.append(Line2D([], [], color=MUTED, lw=1.8))
        labels.append("source validation T")
        for _p, label, ls in extra:
            handles.append(Line2D([], [], color=MUTED, lw=1.4, ls=ls))
            labels.append(label)
    ltitle = ("below the dotted line: T sharpens (the probe was under-confident); above: T softens · "
              f"grey: search bounds [{bounds[0]:g}, {bounds[1]:g}]")
    lo, hi = bounds[0] * 0.7, bounds[1] * 1.45
    with _style():
        g = _Grid(len(settings), max_cols, legend=labels, legend_title=ltitle, title=bool(title))
        for ax, setting in zip(g.axes, settings):
            sub = cells.loc[cells["setting"] == setting]
            neutral = float(sub["neutral_temperature"].dropna().iloc[0]) if sub["neutral_temperature"].notna().any() \
                else 1.0
            ax.axhspan(np.log10(lo), np.log10(bounds[0]), color="#eceff3", lw=0)
            ax.axhspan(np.log10(bounds[1]), np.log10(hi), color="#eceff3", lw=0)
            ax.axhline(np.log10(neutral), color=INK, lw=1.1, ls=":")
            ax.text(0.98, np.log10(neutral), f"neutral T = {neutral:g}", transform=ax.get_yaxis_transform(),
                    va="bottom", ha="right", fontsize=7.8, color=INK, zorder=5,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85})
            for model, grp in sub.groupby("model", sort=False):
                grp = grp.sort_values("fraction")
                x = lx(grp["fraction"])
                c = colors[model]
                ax.plot(x, np.log10(grp["temperature_mean"]), marker="o", ms=3.5, lw=1.8, color=c)
                _band(ax, x, np.log10(grp["temperature_min"]), np.log10(grp["temperature_max"]), c)
                for prefix, _label, ls in extra:
                    col = f"{prefix}_mean"
                    if col in grp and grp[col].notna().any():
                        ax.plot(x, np.log10(grp[col]), marker=".", lw=1.4, ls=ls, color=c)
            _fraction_axis(ax, sub["fraction"], xlabel)
            _log_y(ax, lo, hi)
            ax.set_ylabel("fitted temperature T (log scale)")
            ax.set_title(str(setting).replace("->", " → "))
        if title:
            g.title(title)
        g.legend(handles, labels, title=ltitle)
        return _png(g.fig)


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


def reliability_grid(groups: Sequence[dict[str, Any]]) -> bytes:
    """Reliability diagrams: one panel per group (a cell pooled over seeds).

    Each group: ``title``, ``raw`` / ``scaled`` pooled bins (:func:`pool_bins`),
    ``ece_raw`` / ``ece_scaled`` (seed-mean ECE to print), ``binary`` (class-1
    convention) and ``temperature``. Upper part: observed frequency vs
    confidence with the diagonal; strip below: share of samples per bin.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    groups = list(groups)[:MAX_PANELS]
    n = len(groups)
    cols = min(4, n)
    rows = int(math.ceil(n / cols))
    pw, ph, strip, gap_w, gap_h = 3.1, 2.9, 0.8, 0.8, 1.2
    left, right, top, bottom = 0.8, 0.25, 0.78, 0.55
    handles = [Line2D([], [], color=RAW, marker="o", lw=1.6), Line2D([], [], color=SCALED, marker="s", lw=1.6),
               Line2D([], [], color=MUTED, ls=":"), Patch(color="#9ca3af")]
    labels = ["raw probabilities", "after temperature scaling", "perfect calibration",
              "bars (and marker size): share of test samples per bin"]
    W = left + cols * pw + (cols - 1) * gap_w + right
    leg = 0.12 + 0.21 * legend_rows(labels, W)
    H = top + rows * (ph + strip) + (rows - 1) * gap_h + bottom + leg
    with _style():
        fig = _figure(W, H)
        for i, g in enumerate(groups):
            r, c = divmod(i, cols)
            x0 = (left + c * (pw + gap_w)) / W
            y_top = 1 - (top + r * (ph + strip + gap_h)) / H
            ax = fig.add_axes([x0, y_top - ph / H, pw / W, ph / H])
            axh = fig.add_axes([x0, y_top - (ph + strip) / H, pw / W, (strip - 0.14) / H])
            ax.plot([0, 1], [0, 1], color=MUTED, lw=1, ls=":")
            for which, color, marker in (("raw", RAW, "o"), ("scaled", SCALED, "s")):
                b = g.get(which)
                if b is None:
                    continue
                k = len(b["count"])  # the run's number of bins (15 in PRISM)
                edges = np.linspace(0, 1, k + 1)
                centers = (edges[:-1] + edges[1:]) / 2
                width = 1.0 / k
                ok = b["count"] > 0
                share = b["count"] / max(b["n"], 1)
                ax.plot(b["confidence"][ok], b["accuracy"][ok], lw=1.4, color=color, alpha=0.85)
                # marker area grows with the bin's share of samples: sparse bins are visibly small
                ax.scatter(b["confidence"][ok], b["accuracy"][ok], s=8 + 140 * np.sqrt(share[ok]), marker=marker,
                           color=color, edgecolors="white", linewidths=0.5, zorder=3)
                off = -width / 4 if which == "raw" else width / 4
                axh.bar(centers + off, share, width=width / 2, color=color, alpha=0.75, linewidth=0)
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ece_line = f"ECE raw {g['ece_raw']:.3f}"
            if g.get("ece_scaled") is not None and not math.isnan(g["ece_scaled"]):
                ece_line += f" → scaled {g['ece_scaled']:.3f} (T = {g.get('temperature', float('nan')):.2f})"
            ax.set_title(g["title"] + "\n" + ece_line, fontsize=9, linespacing=1.35)
            ax.set_ylabel("observed frequency of class 1" if g.get("binary") else "accuracy", fontsize=8.8)
            ax.tick_params(labelbottom=False)
            axh.set_xlim(0, 1)
            axh.set_xlabel("mean predicted p(class 1)" if g.get("binary") else "confidence (max probability)",
                           fontsize=8.8)
            axh.set_ylabel("share", fontsize=8)
            axh.set_ylim(0, 1.05)
            axh.set_yticks([0, 1])
            axh.tick_params(axis="y", labelsize=7.5)
            axh.grid(axis="x", visible=False)
        _legend(fig, handles, labels, W)
        return _png(fig)


# --------------------------------------------------------------------------- collapse
def collapse_heatmap(cells: pd.DataFrame, *, title: str = "") -> bytes:
    """Share of seeds whose probe collapsed, per (model · setting) row and fraction column."""
    from matplotlib.colors import LinearSegmentedColormap

    data = cells.copy()
    data["row"] = data["model"].astype(str) + " · " + data["setting"].astype(str).str.replace("->", " → ")
    rows = list(dict.fromkeys(data["row"]))
    fracs = sorted(data["fraction"].unique())

    def pivot(col):
        return data.pivot_table(index="row", columns="fraction", values=col, aggfunc="first").reindex(
            index=rows, columns=fracs)

    share, nruns, ncoll = pivot("collapsed_share"), pivot("n_runs"), pivot("collapsed_runs")
    cmap = LinearSegmentedColormap.from_list("collapse", ["#ecfdf5", "#fde68a", "#f97316", "#b91c1c"])
    label_w = 0.35 + 0.068 * max(len(r) for r in rows)
    cell_w, cell_h = 0.62, 0.27
    left, right, top, bottom = label_w, 1.35, 0.45 if title else 0.2, 0.6
    body_h = max(cell_h * len(rows), 1.1)
    W = left + cell_w * len(fracs) + right
    H = top + body_h + bottom
    with _style():
        fig = _figure(W, H)
        ax = fig.add_axes([left / W, bottom / H, cell_w * len(fracs) / W, body_h / H])
        ax.grid(False)
        im = ax.imshow(share.to_numpy(dtype=float), cmap=cmap, vmin=0, vmax=1, aspect="auto")
        for i in range(len(rows)):
            for j in range(len(fracs)):
                k, t = ncoll.iat[i, j], nruns.iat[i, j]
                if pd.isna(t):
                    continue
                txt = "–" if pd.isna(k) else f"{int(k)}/{int(t)}"
                dark = not pd.isna(share.iat[i, j]) and share.iat[i, j] > 0.6
                ax.text(j, i, txt, ha="center", va="center", fontsize=7.5, color="white" if dark else INK)
        ax.set_xticks(range(len(fracs)))
        ax.set_xticklabels([pct_label(f) for f in fracs], fontsize=8.5)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=8)
        ax.set_xlabel("label fraction")
        ax.tick_params(length=0)
        for sp in ax.spines.values():
            sp.set_visible(False)
        cax = fig.add_axes([(left + cell_w * len(fracs) + 0.15) / W, bottom / H, 0.13 / W,
                            min(body_h, 2.6) / H])
        cb = fig.colorbar(im, cax=cax)
        cb.set_ticks([0, 1 / 3, 2 / 3, 1])
        cb.set_ticklabels(["0", "1/3", "2/3", "all"])
        cb.set_label("share of seeds collapsed", fontsize=8)
        if title:
            ax.set_title(title)
        return _png(fig)


# --------------------------------------------------------------------------- decoupling
def rank_scatter(points: pd.DataFrame, fractions: Sequence[float], annotations: dict[float, str] | None = None) -> bytes:
    """AUROC rank (x, 1 = best) vs calibration rank (y, 1 = lowest scaled ECE)
    per (model, dataset), one panel per fraction, with the diagonal and a ±1 band."""
    from matplotlib.lines import Line2D

    colors = model_colors(points["model"])
    fractions = list(fractions)
    n_max = int(points["n_models"].max()) if len(points) else 1
    rng = np.random.default_rng(0)
    handles = [Line2D([], [], color=c, marker="o", lw=0, ms=6) for c in colors.values()]
    labels = list(colors)
    ltitle = "each point: one (model, dataset) · grey band: the two ranks agree within one place"
    with _style():
        g = _Grid(len(fractions), 3, panel_w=3.7, panel_h=3.5, legend=labels, legend_title=ltitle)
        for ax, f in zip(g.axes, fractions):
            sub = points.loc[np.isclose(points["fraction"], f)]
            x = np.arange(0.5, n_max + 1.5)
            ax.fill_between(x, x - 1, x + 1, color="#e5e7eb", alpha=0.8, lw=0)
            ax.plot(x, x, color=MUTED, lw=1, ls=":")
            jx = rng.uniform(-0.13, 0.13, len(sub))
            jy = rng.uniform(-0.13, 0.13, len(sub))
            ax.scatter(sub["rank_auroc"] + jx, sub["rank_cal"] + jy, s=30,
                       c=[colors[m] for m in sub["model"]], edgecolors="white", linewidths=0.6, zorder=3)
            ax.set_xlim(0.4, n_max + 0.6)
            ax.set_ylim(n_max + 0.6, 0.4)
            ax.set_xticks(range(1, n_max + 1))
            ax.set_yticks(range(1, n_max + 1))
            ax.set_xlabel("AUROC rank within dataset (1 = best)")
            ax.set_ylabel("calibration rank by scaled ECE (1 = best)")
            ax.set_title(f"{pct_label(f)} labels")
            if annotations and f in annotations:
                ax.text(0.97, 0.03, annotations[f], transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5,
                        bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": GRID})
        g.legend(handles, labels, title=ltitle)
        return _png(g.fig)


# --------------------------------------------------------------------------- transfer
def transfer_curves(cells: pd.DataFrame, settings: Sequence[str], *, aggregate_label: str | None = None,
                    zone: bool = True) -> bytes:
    """Target AUROC (top) and target ECE (bottom; raw solid, source-T scaled dashed)
    vs source label fraction, one column per pair. With ``aggregate_label`` the
    pairs are averaged per model (band: range over pairs)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    colors = model_colors(cells["model"])
    if aggregate_label is not None:
        agg = cells.groupby(["model", "fraction"], sort=False).agg(
            auroc_mean=("auroc_mean", "mean"), auroc_min=("auroc_mean", "min"), auroc_max=("auroc_mean", "max"),
            ece_fixed_mean=("ece_fixed_mean", "mean"), ece_fixed_min=("ece_fixed_mean", "min"),
            ece_fixed_max=("ece_fixed_mean", "max"), ece_scaled_fixed_mean=("ece_scaled_fixed_mean", "mean"),
        ).reset_index()
        agg["setting"] = aggregate_label
        cells = agg
        settings = [aggregate_label]
    settings = list(settings)[:6]
    n = len(settings)
    handles, labels = _model_handles(colors)
    handles += [Line2D([], [], color=MUTED, lw=1.8), Line2D([], [], color=MUTED, lw=1.4, ls="--"),
                Patch(color="#fef3c7")]
    labels += ["raw", "after the source-fitted T", "transfer AUROC < 0.85"]
    ltitle = "band: " + ("range over pairs" if aggregate_label else "min–max over seeds")
    with _style():
        g = _Grid(2 * n, n, panel_w=3.3 if n > 1 else 4.6, panel_h=2.2, hgap=0.35,
                  legend=labels, legend_title=ltitle)
        for j, setting in enumerate(settings):
            sub = cells.loc[cells["setting"] == setting]
            a_ax, e_ax = g.axes[j], g.axes[n + j]
            if zone:  # the PRISM label-definition zone (not drawn for a covariate / prior / undeclared shift)
                a_ax.axhspan(0, 0.85, color="#fef3c7", alpha=0.6, lw=0)
            a_ax.axhline(0.5, color=MUTED, lw=0.9, ls=":")
            for model, grp in sub.groupby("model", sort=False):
                grp = grp.sort_values("fraction")
                x = lx(grp["fraction"])
                c = colors[model]
                a_ax.plot(x, grp["auroc_mean"], marker="o", ms=3.5, lw=1.8, color=c)
                _band(a_ax, x, grp["auroc_min"], grp["auroc_max"], c)
                e_ax.plot(x, grp["ece_fixed_mean"], marker="o", ms=3.5, lw=1.8, color=c)
                _band(e_ax, x, grp["ece_fixed_min"], grp["ece_fixed_max"], c)
                e_ax.plot(x, grp["ece_scaled_fixed_mean"], marker="s", ms=3, lw=1.4, ls="--", color=c)
            a_ax.set_title(str(setting).replace("->", " → "))
            a_ax.set_ylim(0, 1.02)
            a_ax.set_ylabel("target AUROC")
            e_ax.set_ylabel("target ECE (15 fixed bins)")
            e_ax.set_ylim(bottom=0)
            _fraction_axis(a_ax, sub["fraction"], "")
            _fraction_axis(e_ax, sub["fraction"], "source label fraction (log scale)")
            a_ax.tick_params(labelbottom=False)
        g.legend(handles, labels, title=ltitle)
        return _png(g.fig)


def fewshot_gap(fs: pd.DataFrame, *, tolerance: float = 0.02) -> bytes:
    """Few-shot ECE minus oracle ECE vs the number of target labels K, at the
    largest source fraction, one panel per pair, one line per model."""
    from matplotlib.patches import Patch

    colors = model_colors(fs["model"])
    settings = list(dict.fromkeys(fs["setting"]))[:MAX_PANELS]
    handles, labels = _model_handles(colors)
    handles.append(Patch(color="#dcfce7"))
    labels.append(f"within {tolerance:g} of the oracle ECE")
    with _style():
        g = _Grid(len(settings), 4, legend=labels)
        for ax, setting in zip(g.axes, settings):
            sub = fs.loc[fs["setting"] == setting]
            top = sub.loc[np.isclose(sub["fraction"], sub["fraction"].max())]
            ax.axhspan(-1, tolerance, color="#dcfce7", alpha=0.7, lw=0)
            ax.axhline(0, color=MUTED, lw=0.9, ls=":")
            for model, grp in top.groupby("model", sort=False):
                grp = grp.sort_values("k")
                ax.plot(np.log2(grp["k"].astype(float)), grp["gap"], marker="o", ms=4, lw=1.8, color=colors[model])
            ks = sorted(sub["k"].unique())
            ax.set_xticks(np.log2(np.asarray(ks, dtype=float)))
            ax.set_xticklabels([str(int(k)) for k in ks])
            ax.set_xlabel("labelled target samples K (log scale)")
            ax.set_ylabel("few-shot ECE − oracle ECE")
            gaps = top["gap"].to_numpy(dtype=float)
            lo = min(-0.01, float(np.nanmin(gaps)) - 0.01) if np.isfinite(gaps).any() else -0.01
            hi = max(tolerance * 2, float(np.nanmax(gaps)) + 0.01) if np.isfinite(gaps).any() else 0.05
            ax.set_ylim(lo, hi)
            frac = pct_label(top["fraction"].max()) if len(top) else ""
            ax.set_title(f"{str(setting).replace('->', ' → ')} ({frac} source labels)")
        g.legend(handles, labels)
        return _png(g.fig)


def is_png(data: bytes) -> bool:
    return data[:8] == b"\x89PNG\r\n\x1a\n"


__all__ = [
    "available", "collapse_heatmap", "ece_curves", "fewshot_gap", "figure", "is_png", "metric_curves",
    "model_colors", "png", "pool_bins", "rank_scatter", "reliability_grid", "style", "temperature_curves",
    "transfer_curves",
]
