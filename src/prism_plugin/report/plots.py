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
from typing import Any, Iterable, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
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
#: The width (CSS px) of the HTML report's content column a figure is shown in (report/build.py:
#: 1320 px page, 250 px contents column, gaps, card padding). A wider PNG is scaled down to it.
REPORT_COLUMN_PX = 936
#: The smallest font, in points at the size the figure is displayed in the report column.
MIN_DISPLAY_PT = 9.0
#: The widest figure (inches) whose 8.5 pt labels still show at >= 9 pt in the report column;
#: panel grids wrap to more rows rather than grow wider.
MAX_FIGURE_WIDTH_IN = 9.2
#: The smallest font size (pt) this module sets; every figure up to MAX_FIGURE_WIDTH_IN wide shows it
#: at >= MIN_DISPLAY_PT, wider ones get their small texts enlarged (:func:`ensure_min_font`).
MIN_FONT_PT = 8.5
#: Space (inches) between the lowest axis label and the legend below it.
LEGEND_GAP_IN = 0.12
#: White margin (inches) kept around a report figure's content when it is cropped.
CROP_PAD_IN = 0.08
#: The "not shown" line of a section whose figures need matplotlib.
NO_MPL = "figures need matplotlib, which is not installed: pip install matplotlib"


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
    fig.savefig(buf, format="png", dpi=DPI, **({"bbox_inches": "tight", "pad_inches": 0.08} if tight else {}))
    return buf.getvalue()


def display_scale(width_in: float) -> float:
    """How much the report column shrinks a figure ``width_in`` inches wide (1: shown at its size)."""
    return min(1.0, REPORT_COLUMN_PX / (DPI * float(width_in)))


def displayed_pt(size_pt: float, width_in: float) -> float:
    """The size (CSS points) a ``size_pt`` font of a ``width_in``-inch figure has in the report
    column: PNG pixels are CSS pixels (0.75 pt each) until the column scales the image down."""
    return float(size_pt) * DPI / 72.0 * 0.75 * display_scale(width_in)


def ensure_min_font(fig, min_pt: float = MIN_DISPLAY_PT) -> None:
    """Enlarge every text of ``fig`` that would show below ``min_pt`` in the report column."""
    width = fig.get_size_inches()[0]
    if getattr(fig, "_prism_min_font", None) == (width, min_pt):
        return  # already checked at this width (texts added since then are legend texts at 8.5 pt)
    if min_pt == MIN_DISPLAY_PT and displayed_pt(MIN_FONT_PT, width) >= min_pt:
        return  # no text of this module is below MIN_FONT_PT: legible by construction (and cheap)
    factor = displayed_pt(1.0, width)
    floor = min_pt / factor
    for t in _texts(fig):
        if t.get_text() and t.get_fontsize() < floor - 1e-9:
            t.set_fontsize(floor)
    fig._prism_min_font = (width, min_pt)


def _texts(fig) -> list:
    """Every text of a report figure (titles, labels, tick labels, annotations, legends), without
    walking every artist (``findobj`` visits the hundreds of lines and patches too)."""
    out = list(fig.texts)
    if getattr(fig, "_suptitle", None) is not None:
        out.append(fig._suptitle)
    legends = list(fig.legends)
    for ax in fig.axes:
        out += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        out += [*ax.xaxis.get_majorticklabels(), *ax.yaxis.get_majorticklabels()]
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
    for leg in legends:
        out += [leg.get_title(), *leg.get_texts()]
    return out


def report_png(fig) -> bytes:
    """A report figure: fonts legible in the report column, cropped to its content (the white
    margins the fixed layout reserved and did not use) with a small pad. One draw pass (cheaper
    than ``bbox_inches="tight"``, which draws twice)."""
    from matplotlib.image import imsave

    ensure_min_font(fig)
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())
    ink = (img[..., :3] < 250).any(axis=2)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    if rows.size and cols.size:
        pad = int(round(CROP_PAD_IN * DPI))
        img = img[max(0, rows[0] - pad):rows[-1] + pad + 1, max(0, cols[0] - pad):cols[-1] + pad + 1]
    buf = io.BytesIO()
    imsave(buf, np.ascontiguousarray(img), format="png", dpi=DPI)
    return buf.getvalue()


def style():
    """The report's matplotlib style (a ``rc_context``): draw and save figures inside it."""
    import matplotlib

    return matplotlib.rc_context(_rc())


def model_colors(models: Iterable[str]) -> dict[str, str]:
    models = list(dict.fromkeys(models))
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(models)}


def rank_axes(ax, n_max: int) -> None:
    """Axes of a rank-vs-rank panel: ranks 1..n_max on both, rank 1 top left, half a rank of margin."""
    ax.set_xlim(0.4, n_max + 0.6)
    ax.set_ylim(n_max + 0.6, 0.4)
    ax.set_xticks(range(1, n_max + 1))
    ax.set_yticks(range(1, n_max + 1))


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


class Grid:
    """A figure of ``rows`` x ``cols`` panels with margins in inches and room for a
    legend below (manual layout: one draw pass)."""

    def __init__(self, n: int, max_cols: int = 3, *, panel_w: float = 3.3, panel_h: float = 2.35,
                 left: float = 0.8, right: float = 0.25, top: float = 0.45, bottom: float = 0.62,
                 wgap: float = 0.72, hgap: float = 0.8, legend: Sequence[str] = (), legend_title: bool = False,
                 title: bool = False, sharey: bool = False):
        self.n = n
        if n == 1:
            panel_w = max(panel_w, 5.2)
        self.cols = min(max_cols, max(1, n), fitting_columns(panel_w, left + right, wgap))
        self.rows = int(math.ceil(n / self.cols))
        top = top + (0.3 if title else 0.0)
        self.W = left + self.cols * panel_w + (self.cols - 1) * wgap + right
        n_leg = legend_rows(legend, self.W, legend_title) if legend else 0
        self.legend_h = 0.0 if not n_leg else 0.12 + 0.21 * n_leg
        self.H = top + self.rows * panel_h + (self.rows - 1) * hgap + bottom + self.legend_h
        self.fig = figure(self.W, self.H)
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
        legend(self.fig, handles, labels, self.W, title=title)


def fitting_columns(panel_w: float, margins: float, gap: float, width: float = MAX_FIGURE_WIDTH_IN) -> int:
    """How many panels ``panel_w`` inches wide fit side by side in a figure of at most ``width``."""
    return max(1, int((width - margins + gap) // (panel_w + gap)))


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


def legend(fig, handles, labels, width: float, title: str | None = None) -> None:
    if not handles:
        return
    if title:
        import textwrap

        title = "\n".join(textwrap.wrap(title, max(30, int((width - 0.3) / 0.066))))
    # right below the lowest drawn axes (tick labels and axis label included), whatever the margins
    # reserved for it: the figure is cropped to its content when saved (no gap above the legend)
    ensure_min_font(fig)  # final font sizes before measuring
    renderer = fig.canvas.get_renderer()
    shown = [ax for ax in fig.axes if ax.get_visible()]
    lowest = min((ax.get_position().y0 for ax in shown), default=0.0)
    bottom_row = [ax for ax in shown if ax.get_position().y0 <= lowest + 1e-6]  # only they reach lowest
    boxes = [ax.get_tightbbox(renderer) for ax in bottom_row]
    bottom = min((b.y0 for b in boxes if b is not None), default=0.0) / fig.bbox.height
    y = bottom - LEGEND_GAP_IN / fig.get_size_inches()[1]
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, y), ncol=_ncol(labels, width),
               title=title, title_fontsize=8.5, fontsize=8.5, handlelength=2.2, columnspacing=1.4,
               borderaxespad=0.0)


def _band(ax, x, lo, hi, color) -> None:
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    ok = ~(np.isnan(lo) | np.isnan(hi))
    if ok.sum() >= 1 and np.any(hi[ok] > lo[ok]):
        ax.fill_between(np.asarray(x)[ok], lo[ok], hi[ok], color=color, alpha=0.16, linewidth=0)


def data_ylim(values: Iterable[Any], bounds: tuple[float, float] = (0.0, 1.0), *, pad: float = 0.08,
              min_span: float = 0.04, include: Iterable[float] = ()) -> tuple[float, float]:
    """Y limits fitted to ``values`` (and ``include``) with ``pad`` of the span on each side, at
    least ``min_span`` wide, never beyond ``bounds`` (e.g. AUROC curves that all sit near 1 are
    spread over the axis instead of merging at the top of a fixed 0–1 axis)."""
    parts = [np.asarray(v, dtype=float).ravel() for v in values]
    v = np.concatenate(parts + [np.asarray(list(include), dtype=float)]) if parts else np.asarray(list(include), float)
    v = v[np.isfinite(v)]
    if not v.size:
        return float(bounds[0]), float(bounds[1])
    lo, hi = float(v.min()), float(v.max())
    span = max(hi - lo, min_span)
    mid = (lo + hi) / 2
    lo, hi = min(lo, mid - span / 2) - pad * span, max(hi, mid + span / 2) + pad * span
    if hi > bounds[1]:  # keep the span: shift down from the upper bound
        lo, hi = lo - (hi - bounds[1]), float(bounds[1])
    if lo < bounds[0]:
        lo, hi = float(bounds[0]), min(float(bounds[1]), hi + (bounds[0] - lo))
    return lo, hi


def _ci_bars(ax, x, grp: pd.DataFrame, metric: str, color: str, dx: float = 0.0, y=None) -> bool:
    """Error bars of the test-set bootstrap CI of the seed mean (``<metric>_ci_low`` /
    ``<metric>_ci_high`` of report_cells); False when the cells have none."""
    lo_c, hi_c = f"{metric}_ci_low", f"{metric}_ci_high"
    if lo_c not in grp or hi_c not in grp:
        return False
    lo = grp[lo_c].to_numpy(dtype=float)
    hi = grp[hi_c].to_numpy(dtype=float)
    mid = grp[f"{metric}_mean"].to_numpy(dtype=float) if y is None else np.asarray(y, dtype=float)
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(mid)
    if not ok.any():
        return False
    xs = np.asarray(x, dtype=float)[ok] + dx
    err = np.vstack([np.clip(mid[ok] - lo[ok], 0, None), np.clip(hi[ok] - mid[ok], 0, None)])
    ax.errorbar(xs, mid[ok], yerr=err, fmt="none", ecolor=color, elinewidth=1.1, capsize=2.5, capthick=1.0,
                alpha=0.9, zorder=4, clip_on=False)
    return True


def _ci_values(grp: pd.DataFrame, metric: str) -> list[np.ndarray]:
    return [grp[c].to_numpy(dtype=float) for c in (f"{metric}_mean", f"{metric}_min", f"{metric}_max",
                                                   f"{metric}_ci_low", f"{metric}_ci_high") if c in grp]


#: what the error bars are, in legends (the level is added where known)
CI_WORDS = "test-set bootstrap CI of the seed mean"


def ci_legend(level: float | None = None) -> str:
    return f"bars: {round(100 * level, 6):g} % {CI_WORDS}" if level else f"bars: {CI_WORDS}"


# --------------------------------------------------------------------------- curves vs fraction
def model_handles(colors: dict[str, str]):
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=c, lw=2, marker="o", ms=4) for c in colors.values()], list(colors)


def has_ci(cells: pd.DataFrame | None, metrics: Iterable[str]) -> bool:
    """Whether ``cells`` carry a finite test-set CI (``<m>_ci_low``/``_high``) for any of ``metrics``."""
    if cells is None:
        return False
    return any(f"{m}_ci_low" in cells and f"{m}_ci_high" in cells and cells[f"{m}_ci_low"].notna().any()
               for m in metrics)


def metric_curves(cells: pd.DataFrame, panels: Sequence[tuple[str, str, str]], *, title: str = "",
                  ylim: tuple[float, float] | None = None, bounds: tuple[float, float] | None = None,
                  max_cols: int = 3, ci_level: float | None = None) -> bytes:
    """Seed-mean curves with min–max seed bands and, where the cells carry them, error bars of
    the test-set bootstrap CI of the seed mean (``<metric>_ci_low`` / ``_ci_high``).

    ``panels`` = [(setting, metric, y label)]; ``cells`` = the report_cells rows
    of one table. One line per model, colours shared across panels. ``ylim``: fixed limits;
    ``bounds``: limits fitted to the data of each panel (:func:`data_ylim`), never beyond them.
    """
    colors = model_colors(cells["model"])
    panels = list(panels)[:MAX_PANELS]
    handles, labels = model_handles(colors)
    with_ci = has_ci(cells, {m for _s, m, _l in panels})
    ltitle = "line: seed mean · band: min–max over seeds" + (f" · {ci_legend(ci_level)}" if with_ci else "")
    with style():
        g = Grid(len(panels), max_cols, legend=labels, legend_title=ltitle, title=bool(title))
        for ax, (setting, metric, ylabel) in zip(g.axes, panels):
            sub = cells.loc[cells["setting"] == setting]
            values = []
            for model, grp in sub.groupby("model", sort=False):
                grp = grp.sort_values("fraction")
                x = lx(grp["fraction"])
                c = colors[model]
                ax.plot(x, grp[f"{metric}_mean"], marker="o", ms=3.5, lw=1.8, color=c, clip_on=False)
                _band(ax, x, grp[f"{metric}_min"], grp[f"{metric}_max"], c)
                _ci_bars(ax, x, grp, metric, c)
                values += _ci_values(grp, metric)
            _fraction_axis(ax, sub["fraction"])
            ax.set_ylabel(ylabel)
            ax.set_title(str(setting).replace("->", " → "))
            if ylim:
                ax.set_ylim(*ylim)
            elif bounds:
                ax.set_ylim(*data_ylim(values, bounds))
        if title:
            g.title(title)
        g.legend(handles, labels, title=ltitle)
        return report_png(g.fig)


def ece_curves(cells: pd.DataFrame, settings: Sequence[str], *, scaled_label: str = "after temperature scaling",
               max_cols: int = 3, title: str = "", ci_level: float | None = None) -> bytes:
    """Raw (solid) and temperature-scaled (dashed) ECE vs label fraction, one panel per setting;
    error bars: the test-set bootstrap CI of the seed mean where the cells carry it."""
    from matplotlib.lines import Line2D

    colors = model_colors(cells["model"])
    settings = list(settings)[:MAX_PANELS]
    handles, labels = model_handles(colors)
    handles += [Line2D([], [], color=MUTED, lw=1.8, marker="o", ms=4),
                Line2D([], [], color=MUTED, lw=1.6, ls="--", marker="s", ms=3.5)]
    labels += ["raw probabilities", scaled_label]
    with_ci = has_ci(cells, ("ece_fixed", "ece_scaled_fixed"))
    ltitle = "band: min–max over seeds" + (f" · {ci_legend(ci_level)}" if with_ci else "")
    with style():
        g = Grid(len(settings), max_cols, legend=labels, legend_title=ltitle, title=bool(title))
        for ax, setting in zip(g.axes, settings):
            sub = cells.loc[cells["setting"] == setting]
            for model, grp in sub.groupby("model", sort=False):
                grp = grp.sort_values("fraction")
                x = lx(grp["fraction"])
                c = colors[model]
                ax.plot(x, grp["ece_fixed_mean"], marker="o", ms=3.5, lw=1.8, color=c, clip_on=False)
                _band(ax, x, grp["ece_fixed_min"], grp["ece_fixed_max"], c)
                ax.plot(x, grp["ece_scaled_fixed_mean"], marker="s", ms=3.2, lw=1.6, ls="--", color=c, clip_on=False)
                _band(ax, x, grp["ece_scaled_fixed_min"], grp["ece_scaled_fixed_max"], c)
                _ci_bars(ax, x, grp, "ece_fixed", c, dx=-0.025)
                _ci_bars(ax, x, grp, "ece_scaled_fixed", c, dx=0.025)
            _fraction_axis(ax, sub["fraction"])
            ax.set_ylabel("ECE (15 fixed bins)")
            ax.set_ylim(bottom=0)
            ax.set_title(str(setting).replace("->", " → "))
        if title:
            g.title(title)
        g.legend(handles, labels, title=ltitle)
        return report_png(g.fig)


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
    handles, labels = model_handles(colors)
    if extra:
        handles.append(Line2D([], [], color=MUTED, lw=1.8))
        labels.append("source validation T")
        for _p, label, ls in extra:
            handles.append(Line2D([], [], color=MUTED, lw=1.4, ls=ls))
            labels.append(label)
    ltitle = ("below the dotted line: T sharpens (the probe was under-confident); above: T softens · "
              f"grey: search bounds [{bounds[0]:g}, {bounds[1]:g}]")
    lo, hi = bounds[0] * 0.7, bounds[1] * 1.45
    with style():
        g = Grid(len(settings), max_cols, legend=labels, legend_title=ltitle, title=bool(title))
        for ax, setting in zip(g.axes, settings):
            sub = cells.loc[cells["setting"] == setting]
            neutral = float(sub["neutral_temperature"].dropna().iloc[0]) if sub["neutral_temperature"].notna().any() \
                else 1.0
            ax.axhspan(np.log10(lo), np.log10(bounds[0]), color="#eceff3", lw=0)
            ax.axhspan(np.log10(bounds[1]), np.log10(hi), color="#eceff3", lw=0)
            ax.axhline(np.log10(neutral), color=INK, lw=1.1, ls=":")
            ax.text(0.98, np.log10(neutral), f"neutral T = {neutral:g}", transform=ax.get_yaxis_transform(),
                    va="bottom", ha="right", fontsize=8.5, color=INK, zorder=5,
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
        return report_png(g.fig)


def transfer_curves(cells: pd.DataFrame, settings: Sequence[str], *, aggregate_label: str | None = None,
                    zone: bool = True, ci_level: float | None = None, zone_at: float = 0.85) -> bytes:
    """Target AUROC (top) and target ECE (bottom; raw solid, source-T scaled dashed) vs source label fraction, one
    block of two panels per pair (at most two pairs side by side, so the figure keeps legible fonts in the report
    column). With ``aggregate_label`` the pairs are averaged per model (band: range over pairs). AUROC axes are
    fitted to the data (never beyond [0, 1]; the ``zone_at`` line stays in view when the zone is drawn)."""
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
    handles, labels = model_handles(colors)
    handles += [Line2D([], [], color=MUTED, lw=1.8), Line2D([], [], color=MUTED, lw=1.4, ls="--")]
    labels += ["raw", "after the source-fitted T"]
    if zone:
        handles.append(Patch(color="#fef3c7"))
        labels.append(f"transfer AUROC < {zone_at:g}")
    with_ci = aggregate_label is None and has_ci(cells, ("auroc", "ece_fixed"))
    ltitle = "band: " + ("range over pairs" if aggregate_label else "min–max over seeds") + \
        (f" · {ci_legend(ci_level)}" if with_ci else "")
    pw = 3.3 if n > 1 else 4.6
    ph, inner, block_gap = 2.1, 0.3, 1.0
    left, right, top, bottom = 0.8, 0.25, 0.45, 0.62
    cols = min(n, fitting_columns(pw, left + right, 0.72))
    rows = int(math.ceil(n / cols))
    W = left + cols * pw + (cols - 1) * 0.72 + right
    leg = 0.12 + 0.21 * legend_rows(labels, W, ltitle)
    H = top + rows * (2 * ph + inner) + (rows - 1) * block_gap + bottom + leg
    with style():
        fig = figure(W, H)
        for j, setting in enumerate(settings):
            r, c = divmod(j, cols)
            x0 = (left + c * (pw + 0.72)) / W
            y_top = 1 - (top + r * (2 * ph + inner + block_gap)) / H
            a_ax = fig.add_axes([x0, y_top - ph / H, pw / W, ph / H])
            e_ax = fig.add_axes([x0, y_top - (2 * ph + inner) / H, pw / W, ph / H])
            sub = cells.loc[cells["setting"] == setting]
            values: list[np.ndarray] = []
            for model, grp in sub.groupby("model", sort=False):
                grp = grp.sort_values("fraction")
                x = lx(grp["fraction"])
                col = colors[model]
                a_ax.plot(x, grp["auroc_mean"], marker="o", ms=3.5, lw=1.8, color=col, clip_on=False)
                _band(a_ax, x, grp["auroc_min"], grp["auroc_max"], col)
                e_ax.plot(x, grp["ece_fixed_mean"], marker="o", ms=3.5, lw=1.8, color=col, clip_on=False)
                _band(e_ax, x, grp["ece_fixed_min"], grp["ece_fixed_max"], col)
                e_ax.plot(x, grp["ece_scaled_fixed_mean"], marker="s", ms=3, lw=1.4, ls="--", color=col,
                          clip_on=False)
                if aggregate_label is None:
                    _ci_bars(a_ax, x, grp, "auroc", col)
                    _ci_bars(e_ax, x, grp, "ece_fixed", col)
                values += _ci_values(grp, "auroc")
            lo, hi = data_ylim(values, (0.0, 1.0), include=(zone_at,) if zone else ())
            if zone:  # the PRISM label-definition zone (not drawn for a covariate / prior / undeclared shift)
                a_ax.axhspan(lo, zone_at, color="#fef3c7", alpha=0.6, lw=0)
            if lo < 0.5 < hi:
                a_ax.axhline(0.5, color=MUTED, lw=0.9, ls=":")
            a_ax.set_ylim(lo, hi)
            a_ax.set_title(str(setting).replace("->", " → "))
            a_ax.set_ylabel("target AUROC")
            e_ax.set_ylabel("target ECE (15 fixed bins)")
            e_ax.set_ylim(bottom=0)
            _fraction_axis(a_ax, sub["fraction"], "")
            _fraction_axis(e_ax, sub["fraction"], "source label fraction (log scale)")
            a_ax.tick_params(labelbottom=False)
        legend(fig, handles, labels, W, title=ltitle)
        return report_png(fig)


def is_png(data: bytes) -> bool:
    return data[:8] == b"\x89PNG\r\n\x1a\n"


__all__ = [
    "available", "collapse_heatmap", "ece_curves", "fewshot_gap", "figure", "is_png", "metric_curves",
    "model_colors", "png", "pool_bins", "rank_axes", "rank_scatter", "reliability_grid", "style", "temperature_curves",
    "transfer_curves",
]
