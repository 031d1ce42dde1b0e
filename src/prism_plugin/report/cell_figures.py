"""Report figures over cells (matplotlib, Agg, no pyplot state; each returns PNG bytes): pooled
reliability diagrams, the collapse heatmap, the rank scatter and the few-shot gap. The style,
palette and layout helpers are :mod:`prism_plugin.report.plots`'."""

from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import math

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.report import plots


# --------------------------------------------------------------------------- reliability
def pool_bins(entries: Sequence[dict], which: str) -> dict[str, np.ndarray] | None:
    """Pool the bins of several runs (seeds): counts add, means are count-weighted."""
    parts = [e[which] for e in entries if e.get(which)]
    pooled = pool_bin_parts(parts)
    if pooled is not None:
        pooled["n"] = float(sum(p["n"] for p in parts))
    return pooled


def pool_bin_parts(parts: Sequence[dict]) -> dict[str, np.ndarray] | None:
    """Pool reliability bins (``count`` / ``confidence`` / ``accuracy`` lists, ``None`` for an empty
    bin) of several runs: counts add, means are count-weighted; ``None`` when there are none."""
    parts = [p for p in parts if p]
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
    return {"count": total, "confidence": mc, "accuracy": ma}


#: Axis padding of the reliability panels beyond [0, 1], so markers at 0 and 1 show whole.
RELIABILITY_PAD = 0.04


def reliability_grid(groups: Sequence[dict[str, Any]]) -> bytes:
    """Reliability diagrams: one panel per group (a cell pooled over seeds).

    Each group: ``title``, ``raw`` / ``scaled`` pooled bins (:func:`pool_bins`), ``ece_raw`` / ``ece_scaled``
    (seed-mean ECE to print), ``binary`` (class-1 convention) and ``temperature``. Upper part: observed frequency
    vs confidence with the diagonal; strip below: share of samples per bin.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    groups = list(groups)[:plots.MAX_PANELS]
    n = len(groups)
    pw, ph, strip, gap_w, gap_h = 3.1, 2.9, 0.8, 0.8, 1.2
    left, right, top, bottom = 0.8, 0.25, 0.78, 0.55
    cols = min(4, n, plots.fitting_columns(pw, left + right, gap_w))
    rows = int(math.ceil(n / cols))
    handles = [Line2D([], [], color=plots.RAW, marker="o", lw=1.6), Line2D([], [], color=plots.SCALED, marker="s", lw=1.6),
               Line2D([], [], color=plots.MUTED, ls=":"), Patch(color="#9ca3af")]
    labels = ["raw probabilities", "after temperature scaling", "perfect calibration",
              "bars (and marker size): share of test samples per bin"]
    W = left + cols * pw + (cols - 1) * gap_w + right
    leg = 0.12 + 0.21 * plots.legend_rows(labels, W)
    H = top + rows * (ph + strip) + (rows - 1) * gap_h + bottom + leg
    with plots.style():
        fig = plots.figure(W, H)
        for i, g in enumerate(groups):
            r, c = divmod(i, cols)
            x0 = (left + c * (pw + gap_w)) / W
            y_top = 1 - (top + r * (ph + strip + gap_h)) / H
            ax = fig.add_axes([x0, y_top - ph / H, pw / W, ph / H])
            axh = fig.add_axes([x0, y_top - (ph + strip) / H, pw / W, (strip - 0.14) / H])
            ax.plot([0, 1], [0, 1], color=plots.MUTED, lw=1, ls=":")
            for which, color, marker in (("raw", plots.RAW, "o"), ("scaled", plots.SCALED, "s")):
                b = g.get(which)
                if b is None:
                    continue
                k = len(b["count"])  # the run's number of bins (15 in PRISM)
                edges = np.linspace(0, 1, k + 1)
                centers = (edges[:-1] + edges[1:]) / 2
                width = 1.0 / k
                ok = b["count"] > 0
                share = b["count"] / max(b["n"], 1)
                ax.plot(b["confidence"][ok], b["accuracy"][ok], lw=1.4, color=color, alpha=0.85, clip_on=False)
                # marker area grows with the bin's share of samples: sparse bins are visibly small; a bin
                # at frequency 0 or 1 (common) is drawn whole, not cut by the axes (clip_on=False, padded limits)
                ax.scatter(b["confidence"][ok], b["accuracy"][ok], s=8 + 140 * np.sqrt(share[ok]), marker=marker,
                           color=color, edgecolors="white", linewidths=0.5, zorder=3, clip_on=False)
                off = -width / 4 if which == "raw" else width / 4
                axh.bar(centers + off, share, width=width / 2, color=color, alpha=0.75, linewidth=0)
            ax.set_xlim(-RELIABILITY_PAD, 1 + RELIABILITY_PAD)
            ax.set_ylim(-RELIABILITY_PAD, 1 + RELIABILITY_PAD)
            ax.set_xticks(np.linspace(0, 1, 6))
            ax.set_yticks(np.linspace(0, 1, 6))
            ece_line = f"ECE raw {g['ece_raw']:.3f}"
            if g.get("ece_scaled") is not None and not math.isnan(g["ece_scaled"]):
                ece_line += f" → scaled {g['ece_scaled']:.3f} (T = {g.get('temperature', float('nan')):.2f})"
            ax.set_title(g["title"] + "\n" + ece_line, fontsize=9, linespacing=1.35)
            ax.set_ylabel("observed frequency of class 1" if g.get("binary") else "accuracy", fontsize=8.8)
            ax.tick_params(labelbottom=False)
            axh.set_xlim(-RELIABILITY_PAD, 1 + RELIABILITY_PAD)
            axh.set_xticks(np.linspace(0, 1, 6))
            axh.set_xlabel("mean predicted p(class 1)" if g.get("binary") else "confidence (max probability)",
                           fontsize=8.8)
            axh.set_ylabel("share", fontsize=8.5)
            axh.set_ylim(0, 1.05)
            axh.set_yticks([0, 1])
            axh.tick_params(axis="y", labelsize=8.5)
            axh.grid(axis="x", visible=False)
        plots.legend(fig, handles, labels, W)
        return plots.report_png(fig)


# --------------------------------------------------------------------------- collapse
def collapse_heatmap(cells: pd.DataFrame, *, title: str = "") -> bytes:
    """Share of seeds whose probe collapsed, per (model · setting) row and fraction column."""
    import pandas as pd
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
    with plots.style():
        fig = plots.figure(W, H)
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
                ax.text(j, i, txt, ha="center", va="center", fontsize=8.5, color="white" if dark else plots.INK)
        ax.set_xticks(range(len(fracs)))
        ax.set_xticklabels([plots.pct_label(f) for f in fracs], fontsize=8.5)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=8.5)
        ax.set_xlabel("label fraction")
        ax.tick_params(length=0)
        for sp in ax.spines.values():
            sp.set_visible(False)
        cax = fig.add_axes([(left + cell_w * len(fracs) + 0.15) / W, bottom / H, 0.13 / W,
                            min(body_h, 2.6) / H])
        cb = fig.colorbar(im, cax=cax)
        cb.set_ticks([0, 1 / 3, 2 / 3, 1])
        cb.set_ticklabels(["0", "1/3", "2/3", "all"])
        cb.set_label("share of seeds collapsed", fontsize=8.5)
        if title:
            ax.set_title(title)
        return plots.report_png(fig)


# --------------------------------------------------------------------------- decoupling
def rank_scatter(points: pd.DataFrame, fractions: Sequence[float], annotations: dict[float, str] | None = None) -> bytes:
    """AUROC rank (x, 1 = best) vs calibration rank (y, 1 = lowest scaled ECE)
    per (model, dataset), one panel per fraction, with the diagonal and a ±1 band."""
    from matplotlib.lines import Line2D

    colors = plots.model_colors(points["model"])
    fractions = list(fractions)
    n_max = int(points["n_models"].max()) if len(points) else 1
    rng = np.random.default_rng(0)
    handles = [Line2D([], [], color=c, marker="o", lw=0, ms=6) for c in colors.values()]
    labels = list(colors)
    ltitle = "each point: one (model, dataset) · grey band: the two ranks agree within one place"
    with plots.style():
        g = plots.Grid(len(fractions), 3, panel_w=3.7, panel_h=3.5, legend=labels, legend_title=ltitle)
        for ax, f in zip(g.axes, fractions):
            sub = points.loc[np.isclose(points["fraction"], f)]
            x = np.arange(0.5, n_max + 1.5)
            ax.fill_between(x, x - 1, x + 1, color="#e5e7eb", alpha=0.8, lw=0)
            ax.plot(x, x, color=plots.MUTED, lw=1, ls=":")
            jx = rng.uniform(-0.13, 0.13, len(sub))
            jy = rng.uniform(-0.13, 0.13, len(sub))
            ax.scatter(sub["rank_auroc"] + jx, sub["rank_cal"] + jy, s=30,
                       c=[colors[m] for m in sub["model"]], edgecolors="white", linewidths=0.6, zorder=3)
            plots.rank_axes(ax, n_max)
            ax.set_xlabel("AUROC rank within dataset (1 = best)")
            ax.set_ylabel("calibration rank by scaled ECE (1 = best)")
            ax.set_title(f"{plots.pct_label(f)} labels")
            if annotations and f in annotations:
                ax.text(0.97, 0.03, annotations[f], transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5,
                        bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": plots.GRID})
        g.legend(handles, labels, title=ltitle)
        return plots.report_png(g.fig)


def fewshot_gap(fs: pd.DataFrame, *, tolerance: float = 0.02) -> bytes:
    """Few-shot ECE minus oracle ECE vs the number of target labels K, at the
    largest source fraction, one panel per pair, one line per model."""
    from matplotlib.patches import Patch

    colors = plots.model_colors(fs["model"])
    settings = list(dict.fromkeys(fs["setting"]))[:plots.MAX_PANELS]
    handles, labels = plots.model_handles(colors)
    handles.append(Patch(color="#dcfce7"))
    labels.append(f"within {tolerance:g} of the oracle ECE")
    with plots.style():
        g = plots.Grid(len(settings), 4, legend=labels)
        for ax, setting in zip(g.axes, settings):
            sub = fs.loc[fs["setting"] == setting]
            top = sub.loc[np.isclose(sub["fraction"], sub["fraction"].max())]
            ax.axhspan(-1, tolerance, color="#dcfce7", alpha=0.7, lw=0)
            ax.axhline(0, color=plots.MUTED, lw=0.9, ls=":")
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
            frac = plots.pct_label(top["fraction"].max()) if len(top) else ""
            ax.set_title(f"{str(setting).replace('->', ' → ')} ({frac} source labels)")
        g.legend(handles, labels)
        return plots.report_png(g.fig)
