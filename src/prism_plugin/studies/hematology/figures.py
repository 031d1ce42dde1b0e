"""Figures of the acquisition-shift audit's HTML report, drawn from the audit tables.

Each function takes one audit table (the DataFrame ``prism-run audit`` writes as ``<table>.csv``)
and returns PNG bytes, or ``None`` when the table holds nothing it can draw (the caller then says
why in the section's "not shown" list). They use the report's figure helpers and style
(:mod:`prism_plugin.report.toolkit`: Agg canvas, no pyplot state, Okabe-Ito colours, the report's
fonts), label every axis with what it shows, and cap the number of panels (:data:`MAX_PANELS`);
:data:`NOT_SHOWN` gives the sentence the report prints when a table is absent.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from prism_plugin.report import toolkit as tk

#: panels drawn at most per figure (the rest are in the CSV tables)
MAX_PANELS = 12
#: the few-shot arms of the K curve: ``k<K>``
FEWSHOT_PREFIX = "k"
#: reference arms drawn as horizontal lines on the K curve
REFERENCE_ARMS = (("raw", "raw probe", "--"), ("src", "source-fitted T", "-."), ("oracle", "oracle T (target labels)", ":"))
#: badge colours (fill, text) and labels of the exposure grid
EXPOSURE_STYLE = {
    "in_pretraining": ("#fde2e1", "#991b1b", "in pretraining"),
    "held_out": ("#dcfce7", "#166534", "held out"),
    "unknown": ("#f3f4f6", "#374151", "unknown"),
}
#: why each figure is missing when its table is absent ("<figure>: not shown - <why>")
NOT_SHOWN = {
    "rank_scatter": "the audit has no rank_matrix table (no audited transfer runs)",
    "reliability": "the audit has no reliability table: it needs the per-example artifacts/ of runs with calibration "
                   "transfer (`adaptation:` with calibration, and the results directories given to `prism-run audit`)",
    "k_curve": "the audit's calibration_transfer table has no few-shot arms k<K> (calibration transfer with few-shot "
               "target temperatures was not run)",
    "gain_by_prior": "the audit has no adaptation_scenarios table: the tasks set no `priors:` (class-prior stress test)",
    "selector_regret": "the audit has no selector_regret table (no label-free selector scores in the runs)",
    "exposure": "the audit has no exposure table (no encoder declares its pretraining data)",
    "per_class_recall": "the audit has no per_class_recall table: it needs the per-example artifacts/ of the runs "
                        "(give the results directories to `prism-run audit`)",
    "confusion": "the audit has no confusion table: it needs the per-example artifacts/ of the runs",
    "mechanism": "the audit has no mechanism table (first-moment shift needs the runs' feature statistics)",
    "effective_robustness": "the audit has no effective_robustness table (fewer than two encoders per task)",
}


def _num(df: pd.DataFrame, col: str) -> np.ndarray:
    return pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)


def _has(df: pd.DataFrame | None, *cols: str) -> bool:
    return df is not None and not df.empty and all(c in df.columns for c in cols)


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = max(1, min(n, max_cols))
    return int(math.ceil(n / cols)), cols


def _short(text: Any, n: int = 28) -> str:
    s = str(text)
    return s if len(s) <= n else s[: n - 1] + "…"


def _panels(df: pd.DataFrame, by: list[str]) -> list[tuple[Any, pd.DataFrame]]:
    keys = [c for c in by if c in df.columns]
    if not keys:
        return [(("all",), df)]
    groups = list(df.groupby(keys, sort=True))
    return [((k,) if not isinstance(k, tuple) else k, g) for k, g in groups][:MAX_PANELS]


def _title(key: tuple) -> str:
    return " · ".join(_short(k, 34) for k in key)


# --------------------------------------------------------------------------- rank transfer
def rank_scatter(matrix: pd.DataFrame | None) -> bytes | None:
    """In-domain vs target macro-F1 per encoder, one panel per (task, probe), CIs as error bars."""
    if not _has(matrix, "model", "id_f1_macro", "f1_macro"):
        return None
    groups = _panels(matrix, ["task", "probe"])
    colors = tk.model_colors(matrix["model"])
    rows, cols = _grid(len(groups))
    markers = {"held_out": "o", "in_pretraining": "s", "unknown": "D"}
    with tk.style():
        fig = tk.figure(3.9 * cols, 3.5 * rows)
        for i, (key, g) in enumerate(groups):
            ax = fig.add_subplot(rows, cols, i + 1)
            ax.set_axisbelow(True)
            x, y = _num(g, "id_f1_macro"), _num(g, "f1_macro")
            xe = ye = None
            if {"id_f1_macro_ci_low", "id_f1_macro_ci_high"} <= set(g.columns):
                xe = np.vstack([x - _num(g, "id_f1_macro_ci_low"), _num(g, "id_f1_macro_ci_high") - x])
            if {"f1_macro_ci_low", "f1_macro_ci_high"} <= set(g.columns):
                ye = np.vstack([y - _num(g, "f1_macro_ci_low"), _num(g, "f1_macro_ci_high") - y])
            for j, row in enumerate(g.itertuples(index=False)):
                c = colors[row.model]
                mk = markers.get(str(getattr(row, "exposure", "")), "o")
                ax.errorbar([x[j]], [y[j]], xerr=None if xe is None else np.nan_to_num(np.clip(xe[:, j:j + 1], 0, None)),
                            yerr=None if ye is None else np.nan_to_num(np.clip(ye[:, j:j + 1], 0, None)),
                            fmt=mk, color=c, ms=6, elinewidth=1, capsize=2.5)
                ax.annotate(_short(row.model, 18), (x[j], y[j]), xytext=(5, 3), textcoords="offset points",
                            fontsize=7.5, color=c)
            finite = np.concatenate([x[np.isfinite(x)], y[np.isfinite(y)]])
            lo = float(finite.min()) if finite.size else 0.0
            hi = float(finite.max()) if finite.size else 1.0
            pad = max(0.02, 0.08 * (hi - lo))
            ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color=tk.MUTED, lw=0.9, ls="--")
            ax.set_xlim(lo - pad, hi + pad)
            ax.set_ylim(lo - pad, hi + pad)
            ax.set_xlabel("in-domain macro-F1 (source held-out)")
            ax.set_ylabel("target macro-F1")
            ax.set_title(_title(key), fontsize=9.5)
        n_split = int(matrix["n_split_seeds"].max()) if "n_split_seeds" in matrix else 1
        note = (f"error bars: CI over {n_split} split seeds" if n_split > 1 else
                "one split seed: seed means only, no error bars")
        fig.suptitle(f"Rank transfer per encoder (dashed: y = x; {note})", fontsize=10.5)
        fig.tight_layout()
        return tk.png(fig, tight=True)


# --------------------------------------------------------------------------- calibration
def _arm_order(arms) -> list[str]:
    """The calibration arms as :data:`prism_plugin.adaptation.calibration.ARMS` orders them (raw, src,
    oracle, k<K> by K, cbr, cbr_src), then any other (a plugin's) by name; no import of that module."""
    def rank(arm: str) -> tuple:
        if arm in ("raw", "src", "oracle"):
            return (0, ("raw", "src", "oracle").index(arm), arm)
        if arm.startswith(FEWSHOT_PREFIX) and arm[1:].isdigit():
            return (1, int(arm[1:]), arm)
        if arm in ("cbr", "cbr_src"):
            return (2, ("cbr", "cbr_src").index(arm), arm)
        return (3, 0, arm)

    return sorted(dict.fromkeys(map(str, arms)), key=rank)


def reliability_diagrams(rel: pd.DataFrame | None) -> bytes | None:
    """Top-label reliability per calibration arm (count-weighted over tasks and encoders)."""
    if not _has(rel, "arm", "bin", "confidence", "accuracy", "count"):
        return None
    d = rel.copy()
    d["count"] = pd.to_numeric(d["count"], errors="coerce").fillna(0)
    d = d.loc[d["count"] > 0]
    if d.empty:
        return None
    if "probe" not in d.columns:
        d["probe"] = "probe"
    d["w_conf"] = pd.to_numeric(d["confidence"], errors="coerce") * d["count"]
    d["w_acc"] = pd.to_numeric(d["accuracy"], errors="coerce") * d["count"]
    pooled = d.groupby(["arm", "probe", "bin"], sort=True)[["w_conf", "w_acc", "count"]].sum().reset_index()
    pooled["confidence"] = pooled["w_conf"] / pooled["count"]
    pooled["accuracy"] = pooled["w_acc"] / pooled["count"]
    arms = _arm_order(pooled["arm"].unique())[:MAX_PANELS]
    probes = list(dict.fromkeys(pooled["probe"]))
    pc = {p: tk.PALETTE[i % len(tk.PALETTE)] for i, p in enumerate(probes)}
    rows, cols = _grid(len(arms), 4)
    with tk.style():
        fig = tk.figure(2.9 * cols, 2.8 * rows)
        for i, arm in enumerate(arms):
            ax = fig.add_subplot(rows, cols, i + 1)
            ax.set_axisbelow(True)
            ax.plot([0, 1], [0, 1], color=tk.MUTED, lw=0.9, ls="--")
            for p in probes:
                g = pooled.loc[(pooled["arm"] == arm) & (pooled["probe"] == p)].sort_values("confidence")
                if g.empty:
                    continue
                ece = float(np.sum(np.abs(g["accuracy"] - g["confidence"]) * g["count"]) / g["count"].sum())
                ax.plot(g["confidence"], g["accuracy"], marker="o", ms=3.5, lw=1.5, color=pc[p],
                        label=f"{_short(p, 14)} (pooled ECE {ece:.3f})")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xlabel("mean confidence (top label)")
            ax.set_ylabel("accuracy")
            ax.set_title(f"arm {arm}", fontsize=9.5)
            ax.legend(fontsize=7, loc="upper left")
        fig.suptitle("Reliability per calibration arm (pooled over targets and encoders; dashed: perfect)",
                     fontsize=10.5)
        fig.tight_layout()
        return tk.png(fig, tight=True)


def k_curve(cal: pd.DataFrame | None, metric: str = "ece_top") -> bytes | None:
    """Mean top-label ECE of the few-shot arms vs K (log2 axis), raw / src / oracle as lines."""
    if cal is None or cal.empty:
        return None
    ks = sorted(int(c[len("calx_k"):-len(metric) - 1]) for c in cal.columns
                if c.startswith("calx_k") and c.endswith("_" + metric) and c[len("calx_k"):-len(metric) - 1].isdigit())
    if not ks:
        return None
    d = cal.copy()
    if "probe" not in d.columns:
        d["probe"] = "probe"
    probes = list(dict.fromkeys(d["probe"]))[:6]
    with tk.style():
        fig = tk.figure(5.6, 3.8)
        ax = fig.add_subplot(1, 1, 1)
        ax.set_axisbelow(True)
        for i, p in enumerate(probes):
            g = d.loc[d["probe"] == p]
            c = tk.PALETTE[i % len(tk.PALETTE)]
            y = [float(pd.to_numeric(g[f"calx_k{k}_{metric}"], errors="coerce").mean()) for k in ks]
            ax.plot(ks, y, marker="o", lw=1.8, color=c, label=f"{_short(p, 16)}: few-shot T (K target labels)")
            for arm, label, ls in REFERENCE_ARMS:
                col = f"calx_{arm}_{metric}"
                if col in g.columns and pd.to_numeric(g[col], errors="coerce").notna().any():
                    v = float(pd.to_numeric(g[col], errors="coerce").mean())
                    ax.axhline(v, color=c, lw=1.1, ls=ls, alpha=0.85, label=f"{_short(p, 16)}: {label}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks)
        ax.set_xticklabels([str(k) for k in ks])
        ax.set_xlabel("K labelled target samples")
        ax.set_ylabel("top-label ECE (mean over encoder × target)" if metric == "ece_top" else metric)
        ax.set_title("Few-shot target temperature: ECE vs K", fontsize=10.5)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        return tk.png(fig, tight=True)


# --------------------------------------------------------------------------- adaptation
def gain_by_prior(scen: pd.DataFrame | None) -> bytes | None:
    """Mean macro-F1 gain vs batch size K per method (panels) and class prior (lines)."""
    if not _has(scen, "prior", "K", "method", "mean_gain"):
        return None
    d = scen.copy()
    d["K"] = pd.to_numeric(d["K"], errors="coerce")
    d["mean_gain"] = pd.to_numeric(d["mean_gain"], errors="coerce")
    d = d.dropna(subset=["K", "mean_gain"])
    if d.empty:
        return None
    if "probe" not in d.columns:
        d["probe"] = ""
    multi_probe = d["probe"].nunique() > 1
    methods = list(dict.fromkeys(d["method"]))[:MAX_PANELS]
    priors = list(dict.fromkeys(d["prior"]))
    pc = {p: tk.PALETTE[i % len(tk.PALETTE)] for i, p in enumerate(priors)}
    styles = ["-", "--", ":", "-."]
    rows, cols = _grid(len(methods), 4)
    with tk.style():
        fig = tk.figure(3.1 * cols, 2.8 * rows + 0.4)
        handles = {}
        for i, meth in enumerate(methods):
            ax = fig.add_subplot(rows, cols, i + 1)
            ax.set_axisbelow(True)
            ax.axhline(0, color=tk.MUTED, lw=0.9)
            g = d.loc[d["method"] == meth]
            for j, probe in enumerate(dict.fromkeys(g["probe"])):
                for prior in priors:
                    s = g.loc[(g["prior"] == prior) & (g["probe"] == probe)].groupby("K")["mean_gain"].mean()
                    if s.empty:
                        continue
                    label = f"{prior}" + (f" · {probe}" if multi_probe else "")
                    (line,) = ax.plot(s.index, s.values, marker="o", ms=3.5, lw=1.5, color=pc[prior],
                                      ls=styles[j % len(styles)], label=label)
                    handles.setdefault(label, line)
            ks = sorted(g["K"].unique())
            if len(ks) > 1 and min(ks) > 0:
                ax.set_xscale("log", base=2)
            ax.set_xticks(ks)
            ax.set_xticklabels([f"{int(k)}" for k in ks])
            ax.set_xlabel("target batch size K")
            ax.set_ylabel("macro-F1 gain")
            ax.set_title(_short(meth, 30), fontsize=9.5)
        fig.legend(list(handles.values()), list(handles.keys()), loc="lower center", ncol=min(len(handles), 5),
                   fontsize=7.5, title="class prior", title_fontsize=8)
        fig.suptitle("Test-time adaptation: mean gain over the unadapted probe by prior and batch size "
                     "(mean over targets and encoders)", fontsize=10.5)
        fig.tight_layout(rect=(0, 0.1 if rows == 1 else 0.06, 1, 1))
        return tk.png(fig, tight=True)


def selector_regret_figure(regret: pd.DataFrame | None) -> bytes | None:
    """Mean regret (bars) and largest regret (whisker end) per selector and condition."""
    if not _has(regret, "selector", "regret"):
        return None
    d = regret.copy()
    d["regret"] = pd.to_numeric(d["regret"], errors="coerce")
    d = d.dropna(subset=["regret"])
    if d.empty:
        return None
    if "condition" not in d.columns:
        d["condition"] = "target"
    agg = d.groupby(["selector", "condition"], sort=True)["regret"].agg(["mean", "max", "size"]).reset_index()
    selectors = list(dict.fromkeys(agg.sort_values("mean")["selector"]))
    conditions = [c for c in ("target", "balanced", "skewed") if c in set(agg["condition"])] + \
        sorted(set(agg["condition"]) - {"target", "balanced", "skewed"})
    width = 0.8 / max(1, len(conditions))
    with tk.style():
        fig = tk.figure(max(5.0, 0.75 * len(selectors) + 2.5), 3.6)
        ax = fig.add_subplot(1, 1, 1)
        ax.set_axisbelow(True)
        x = np.arange(len(selectors))
        for j, cond in enumerate(conditions):
            sub = agg.loc[agg["condition"] == cond].set_index("selector").reindex(selectors)
            pos = x - 0.4 + width * (j + 0.5)
            mean, mx = sub["mean"].to_numpy(float), sub["max"].to_numpy(float)
            ax.bar(pos, mean, width=width * 0.92, color=tk.PALETTE[j % len(tk.PALETTE)], alpha=0.85, label=cond)
            ax.errorbar(pos, mean, yerr=np.vstack([np.zeros_like(mean), np.nan_to_num(np.clip(mx - mean, 0, None))]),
                        fmt="none", ecolor=tk.INK, elinewidth=0.9, capsize=2)
        ax.set_xticks(x)
        ax.set_xticklabels([_short(s, 16) for s in selectors], rotation=30, ha="right")
        ax.set_ylabel("regret (macro-F1 of best − selected)")
        ax.set_xlabel("label-free selector (id_acc: in-domain accuracy)")
        ax.set_title("Encoder selection regret (bar: mean; whisker: largest)", fontsize=10.5)
        ax.legend(title="condition", fontsize=8, title_fontsize=8)
        fig.tight_layout()
        return tk.png(fig, tight=True)


# --------------------------------------------------------------------------- exposure
def exposure_figure(exposure: pd.DataFrame | None) -> bytes | None:
    """Encoder x target grid of exposure badges."""
    if not _has(exposure, "model", "exposure"):
        return None
    d = exposure.copy()
    col = "target_dataset" if "target_dataset" in d.columns else "task"
    d[col] = d[col].fillna("").astype(str)
    cells = d.drop_duplicates(["model", col]).set_index(["model", col])["exposure"].astype(str)
    models = list(dict.fromkeys(d["model"].astype(str)))[:40]
    targets = list(dict.fromkeys(d[col]))[:20]
    with tk.style():
        fig = tk.figure(1.6 + 1.25 * len(targets), 0.9 + 0.34 * len(models))
        ax = fig.add_subplot(1, 1, 1)
        ax.grid(False)
        for i, m in enumerate(models):
            for j, t in enumerate(targets):
                kind = cells.get((m, t), "")
                fill, ink, label = EXPOSURE_STYLE.get(kind, ("#ffffff", tk.MUTED, "–" if not kind else kind))
                ax.add_patch(_badge(j, len(models) - 1 - i, fill))
                ax.text(j, len(models) - 1 - i, label, ha="center", va="center", fontsize=7.5, color=ink,
                        fontweight="bold")
        ax.set_xlim(-0.5, len(targets) - 0.5)
        ax.set_ylim(-0.5, len(models) - 0.5)
        ax.set_xticks(range(len(targets)))
        ax.set_xticklabels([_short(t, 16) for t in targets], rotation=20, ha="right")
        ax.set_yticks(range(len(models)))
        ax.set_yticklabels([_short(m, 24) for m in reversed(models)])
        ax.set_xlabel("target dataset")
        ax.set_ylabel("encoder")
        ax.set_title("Pretraining exposure of each encoder × target", fontsize=10.5)
        for side in ("top", "right", "left", "bottom"):
            ax.spines[side].set_visible(False)
        ax.tick_params(length=0)
        fig.tight_layout()
        return tk.png(fig, tight=True)


def _badge(x: float, y: float, color: str):
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((x - 0.45, y - 0.33), 0.9, 0.66, boxstyle="round,pad=0.02,rounding_size=0.15",
                          facecolor=color, edgecolor="#d1d5db", lw=0.6)


def exposure_badges_html(exposure: pd.DataFrame | None) -> str:
    """The exposure table as HTML with a coloured badge per cell (escaped; no external assets)."""
    import html

    if not _has(exposure, "model", "exposure"):
        return ""
    col = "target_dataset" if "target_dataset" in exposure.columns else "task"
    head = ["encoder", "task", "target", "exposure", "matched"]
    out = ["<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in exposure.itertuples(index=False):
        kind = str(getattr(r, "exposure", ""))
        fill, ink, label = EXPOSURE_STYLE.get(kind, ("#ffffff", "#374151", kind))
        badge = (f'<span style="background:{fill};color:{ink};border-radius:9px;padding:1px 8px;'
                 f'font-weight:600;font-size:0.85em">{html.escape(label)}</span>')
        cells = [getattr(r, "model", ""), getattr(r, "task", ""), getattr(r, col, ""), None,
                 getattr(r, "matched", "")]
        tds = [badge if c is None else html.escape("" if pd.isna(c) else str(c)) for c in cells]
        out.append("<tr>" + "".join(f"<td>{t}</td>" for t in tds) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


# --------------------------------------------------------------------------- per class
def _target_col(df: pd.DataFrame) -> str:
    return "target_dataset" if "target_dataset" in df.columns else "task"


def per_class_recall_figure(pcr: pd.DataFrame | None) -> bytes | None:
    """Heatmap encoders x classes of target recall, one panel per target (support-weighted over probes)."""
    if not _has(pcr, "model", "class_name", "recall"):
        return None
    d = pcr.copy()
    tcol = _target_col(d)
    d["recall"] = pd.to_numeric(d["recall"], errors="coerce")
    d["w"] = pd.to_numeric(d["n_true"], errors="coerce").fillna(1) if "n_true" in d.columns else 1.0
    d["wr"] = d["recall"] * d["w"]
    targets = list(dict.fromkeys(d[tcol].astype(str)))[:MAX_PANELS]
    rows, cols = _grid(len(targets), 2)
    n_models = d["model"].nunique()
    n_classes = d["class_name"].nunique()
    with tk.style():
        fig = tk.figure((1.8 + 0.75 * n_classes) * cols + 0.8, (1.3 + 0.3 * n_models) * rows + 0.4)
        fig.set_layout_engine("constrained")  # room for the colour bar and the title
        im = None
        for i, t in enumerate(targets):
            g = d.loc[d[tcol].astype(str) == t]
            agg = g.groupby(["model", "class_name"], sort=False)[["wr", "w"]].sum()
            mat = (agg["wr"] / agg["w"]).unstack("class_name")
            mat = mat.reindex(index=list(dict.fromkeys(g["model"])), columns=list(dict.fromkeys(g["class_name"])))
            ax = fig.add_subplot(rows, cols, i + 1)
            ax.grid(False)
            im = ax.imshow(mat.to_numpy(dtype=float), vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
            for (a, b), v in np.ndenumerate(mat.to_numpy(dtype=float)):
                if np.isfinite(v):
                    ax.text(b, a, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if v < 0.25 or v > 0.85 else tk.INK)
            ax.set_xticks(range(mat.shape[1]))
            ax.set_xticklabels([_short(c, 12) for c in mat.columns], rotation=30, ha="right", fontsize=8)
            ax.set_yticks(range(mat.shape[0]))
            ax.set_yticklabels([_short(m, 20) for m in mat.index], fontsize=8)
            ax.set_xlabel("true class")
            if i % cols == 0:
                ax.set_ylabel("encoder")
            ax.set_title(f"target {_short(t, 30)}", fontsize=9.5)
        if im is not None:
            fig.colorbar(im, ax=fig.axes, shrink=0.8, label="recall")
        fig.suptitle("Per-class recall on each target", fontsize=10.5)
        return tk.png(fig, tight=True)


def confusion_figure(conf: pd.DataFrame | None, model: str | None = None) -> bytes | None:
    """One row-normalised confusion matrix per target: the encoder with the lowest mean recall there
    (diagonal share), or ``model`` where it has rows."""
    if not _has(conf, "model", "true_class", "pred_class", "count"):
        return None
    d = conf.copy()
    tcol = _target_col(d)
    d["count"] = pd.to_numeric(d["count"], errors="coerce").fillna(0)
    targets = list(dict.fromkeys(d[tcol].astype(str)))[:MAX_PANELS]
    rows, cols = _grid(len(targets), 3)
    n_classes = max(d["true_class"].nunique(), d["pred_class"].nunique())
    size = 1.2 + 0.45 * n_classes
    with tk.style():
        fig = tk.figure(size * cols + 0.6, size * rows + 0.5)
        for i, t in enumerate(targets):
            g = d.loc[d[tcol].astype(str) == t]
            counts = g.groupby(["model", "true_class", "pred_class"], sort=False)["count"].sum()
            classes = list(dict.fromkeys([*g["true_class"], *g["pred_class"]]))
            chosen = model if model is not None and model in set(g["model"]) else None
            if chosen is None:
                recall = {}
                for m, cm in counts.groupby(level="model", sort=False):
                    cm = cm.droplevel("model")
                    per = [cm.get((c, c), 0.0) / max(cm.xs(c, level="true_class").sum(), 1e-12)
                           for c in classes if c in cm.index.get_level_values("true_class")]
                    recall[m] = float(np.mean(per)) if per else np.nan
                chosen = min(recall, key=lambda m: (np.nan_to_num(recall[m], nan=2.0), str(m)))
            cm = counts.xs(chosen, level="model").unstack("pred_class").reindex(index=classes, columns=classes).fillna(0)
            share = cm.div(cm.sum(axis=1).replace(0, np.nan), axis=0).to_numpy(dtype=float)
            ax = fig.add_subplot(rows, cols, i + 1)
            ax.grid(False)
            ax.imshow(np.nan_to_num(share), vmin=0, vmax=1, cmap="Blues")
            for (a, b), v in np.ndenumerate(share):
                if np.isfinite(v) and v >= 0.005:
                    ax.text(b, a, f"{v:.2f}", ha="center", va="center", fontsize=6.5,
                            color="white" if v > 0.6 else tk.INK)
            ax.set_xticks(range(len(classes)))
            ax.set_xticklabels([_short(c, 10) for c in classes], rotation=40, ha="right", fontsize=7.5)
            ax.set_yticks(range(len(classes)))
            ax.set_yticklabels([_short(c, 10) for c in classes], fontsize=7.5)
            ax.set_xlabel("predicted class")
            ax.set_ylabel("true class")
            ax.set_title(f"{_short(t, 22)}\n{_short(chosen, 26)}", fontsize=8.5)
        which = f"encoder {model}" if model is not None else "the encoder with the lowest mean recall on each target"
        fig.suptitle(f"Confusion (row share) — {which}", fontsize=10.5)
        fig.tight_layout()
        return tk.png(fig, tight=True)


# --------------------------------------------------------------------------- mechanism
def mechanism_scatter(mech: pd.DataFrame | None) -> bytes | None:
    """First-moment shift vs target drop; circles real, triangles synthetic targets."""
    if not _has(mech, "model", "first_moment_shift", "target_drop"):
        return None
    d = mech.copy()
    d["x"], d["y"] = _num(d, "first_moment_shift"), _num(d, "target_drop")
    d = d.loc[np.isfinite(d["x"]) & np.isfinite(d["y"])]
    if d.empty:
        return None
    from prism_plugin.quality import as_bool

    synth = as_bool(d["synthetic"]).fillna(False).astype(bool) if "synthetic" in d.columns else \
        pd.Series(False, index=d.index)
    colors = tk.model_colors(d["model"])
    with tk.style():
        fig = tk.figure(5.8, 4.0)
        ax = fig.add_subplot(1, 1, 1)
        ax.set_axisbelow(True)
        for m, g in d.groupby("model", sort=False):
            s = synth.loc[g.index]
            ax.scatter(g.loc[~s, "x"], g.loc[~s, "y"], marker="o", s=34, color=colors[m], label=_short(m, 20),
                       edgecolor="white", lw=0.5)
            if s.any():
                ax.scatter(g.loc[s, "x"], g.loc[s, "y"], marker="^", s=40, facecolor="none", edgecolor=colors[m], lw=1.3)
        ax.axhline(0, color=tk.MUTED, lw=0.9)
        ax.set_xlabel("first-moment shift (RMS feature-mean shift, source SDs)")
        ax.set_ylabel("target drop (in-domain − target macro-F1)")
        ax.set_title("Shift mechanism: feature-mean shift vs macro-F1 drop", fontsize=10.5)
        from matplotlib.lines import Line2D

        handles, labels = ax.get_legend_handles_labels()
        handles += [Line2D([], [], marker="o", ls="", color=tk.INK, label="real target"),
                    Line2D([], [], marker="^", ls="", markerfacecolor="none", color=tk.INK, label="synthetic target")]
        ax.legend(handles=handles, fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        return tk.png(fig, tight=True)


def effective_robustness_figure(er: pd.DataFrame | None) -> bytes | None:
    """In-domain vs target macro-F1 with the fitted line per (task, probe); residual stems."""
    if not _has(er, "model", "id_f1_macro", "f1_macro"):
        return None
    groups = _panels(er, ["task", "probe"])
    colors = tk.model_colors(er["model"])
    rows, cols = _grid(len(groups))
    with tk.style():
        fig = tk.figure(3.9 * cols, 3.5 * rows)
        for i, (key, g) in enumerate(groups):
            ax = fig.add_subplot(rows, cols, i + 1)
            ax.set_axisbelow(True)
            x, y = _num(g, "id_f1_macro"), _num(g, "f1_macro")
            line = _num(g, "line_f1") if "line_f1" in g.columns else np.full(len(g), np.nan)
            ok = np.isfinite(x) & np.isfinite(line)
            if ok.sum() >= 2:
                order = np.argsort(x[ok])
                ax.plot(x[ok][order], line[ok][order], color=tk.MUTED, lw=1.2, ls="--", label="fitted line")
            for j, row in enumerate(g.itertuples(index=False)):
                c = colors[row.model]
                if np.isfinite(line[j]):
                    ax.plot([x[j], x[j]], [line[j], y[j]], color=c, lw=1, alpha=0.7)
                ax.plot([x[j]], [y[j]], "o", color=c, ms=5.5)
                er_v = getattr(row, "effective_robustness", np.nan)
                tag = f" ({float(er_v):+.3f})" if pd.notna(er_v) else ""
                ax.annotate(_short(row.model, 16) + tag, (x[j], y[j]), xytext=(5, 3), textcoords="offset points",
                            fontsize=7, color=c)
            caveat = ""
            if "caveat" in g.columns:
                cav = [str(c) for c in g["caveat"].dropna().unique() if str(c).strip()]
                caveat = ("\n" + _short(cav[0], 60)) if cav else ""
            ax.set_xlabel("in-domain macro-F1")
            ax.set_ylabel("target macro-F1")
            ax.set_title(_title(key) + caveat, fontsize=8.5 if caveat else 9.5)
        fig.suptitle("Effective robustness: residual from the in-domain vs target line (in brackets)", fontsize=10.5)
        fig.tight_layout()
        return tk.png(fig, tight=True)


__all__ = ["EXPOSURE_STYLE", "MAX_PANELS", "NOT_SHOWN", "confusion_figure", "effective_robustness_figure",
           "exposure_badges_html", "exposure_figure", "gain_by_prior", "k_curve", "mechanism_scatter",
           "per_class_recall_figure", "rank_scatter", "reliability_diagrams", "selector_regret_figure"]
