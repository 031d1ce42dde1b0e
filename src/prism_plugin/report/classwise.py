"""Report section plugin ``classwise_report``: "Class-wise calibration" of multiclass results.

Reads the per-run artifacts of :mod:`prism_plugin.metrics.classwise` (``<results>/artifacts/classwise/*.json``,
matched to ``runs.csv`` rows and checked against their ``ece_classwise``) and shows, for one label fraction (100 %
when measured, else the largest) of each (model, setting):

* **per-class reliability diagrams**: small multiples, one panel per class, the mean predicted p_k against the
  observed frequency of class k per fixed bin, raw and after temperature scaling, the seeds of the cell pooled (bin
  counts add, means count-weighted); one figure per (model, setting), at most :data:`MAX_FIGURES` (a note names the
  cells left out);
* **a table of per-class ECE** (seed means, raw and scaled) with the class's test support n, sorted worst first
  (raw ECE), a class with fewer than :data:`~prism_plugin.metrics.classwise.FEW_SAMPLES` test samples flagged "few
  samples: ECE unreliable". Every cell and fraction is written to ``classwise_ece.csv``.

Binary-only results: the section is not shown, with the reason (the class-wise ECE of a binary task repeats the
class-1 reliability of the "Reliability diagrams" section).
"""

from __future__ import annotations

import math
from typing import Any, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.classwise import FEW_SAMPLES, load_classwise
from prism_plugin.report.sections import ReportSection

TITLE = "Class-wise calibration"
KEY = "classwise"
ORDER = 26  # right after "Reliability diagrams" (25)
#: at most this many per-class figures (one per model and setting)
MAX_FIGURES = 4
#: at most this many classes drawn per figure
MAX_CLASSES = 20
#: at most this many table rows in the report (all are in classwise_ece.csv)
MAX_TABLE_ROWS = 60
FEW_NOTE = "few samples: ECE unreliable"
ABSENT_NOTE = "absent from the test split: ECE is its mean predicted probability"


# --------------------------------------------------------------------------- data
def _entries(view) -> tuple[list[dict[str, Any]], int]:
    from prism_plugin.report.build import PROBE_SEP, source_dirs

    out: list[dict[str, Any]] = []
    stale = 0
    seen: set[tuple] = set()
    for d in source_dirs(view.sources):
        got, bad = load_classwise(d)
        stale += bad
        for e in got:
            key = (e.get("adapter"), e.get("task"), e.get("run_id"), e.get("fraction"), e.get("seed"))
            if key not in seen:
                seen.add(key)
                out.append(e)
    probes: dict[str, set] = {}
    for e in out:
        probes.setdefault(str(e["model"]), set()).add(e.get("probe"))
    for e in out:
        e["label"] = (f"{e['model']}{PROBE_SEP}{e.get('probe')}" if len(probes[str(e["model"])]) > 1
                      else str(e["model"]))
    return out, stale


def pool(parts: list[dict[str, Any]]) -> dict[str, np.ndarray] | None:
    """Pool one class's bins over runs (seeds): counts add, means are count-weighted."""
    from prism_plugin.report.cell_figures import pool_bin_parts

    return pool_bin_parts(parts)


def class_table(entries: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (model, setting, table, fraction, class): support, seed-mean ECE raw / scaled."""
    import pandas as pd
    rows: list[dict[str, Any]] = []
    groups: dict[tuple, list[dict]] = {}
    for e in entries:
        groups.setdefault((e["label"], str(e["setting"]), str(e["reference_table"]), round(float(e["fraction"]), 9)),
                          []).append(e)
    for (label, setting, table, frac), es in groups.items():
        k = min(len(e["classes"]) for e in es)
        for i in range(k):
            cs = [e["classes"][i] for e in es]
            raw = [c["raw"]["ece"] for c in cs if c["raw"].get("ece") is not None]
            sc = [c["scaled"]["ece"] for c in cs if c.get("scaled") and c["scaled"].get("ece") is not None]
            ns = [int(c["n"]) for c in cs]
            note = ABSENT_NOTE if max(ns) == 0 else FEW_NOTE if min(ns) < FEW_SAMPLES else ""
            rows.append({"model": label, "setting": setting, "table": table, "fraction": frac, "class": cs[0]["name"],
                         "class_index": i, "n_min": min(ns), "n_max": max(ns), "n_runs": len(es),
                         "ece_raw": float(np.mean(raw)) if raw else math.nan,
                         "ece_scaled": float(np.mean(sc)) if sc else math.nan, "note": note})
    return pd.DataFrame(rows, columns=["model", "setting", "table", "fraction", "class", "class_index", "n_min",
                                       "n_max", "n_runs", "ece_raw", "ece_scaled", "note"])


def _chosen_fraction(fractions) -> float:
    fr = sorted({float(f) for f in fractions})
    return next((f for f in fr if abs(f - 1.0) < 1e-9), fr[-1])


# --------------------------------------------------------------------------- figure
def class_figure(title: str, classes: list[dict[str, Any]], bins: int) -> bytes:
    """Small multiples: one panel per class (``name``, ``n``, ``raw`` / ``scaled`` pooled bins,
    ``ece_raw`` / ``ece_scaled`` seed means, ``few``). Markers stay visible at 0 and 1 (the axes
    run from -0.05 to 1.05 and markers are not clipped); the legend sits right under the title."""
    from matplotlib.lines import Line2D

    from prism_plugin.report import plots

    n = len(classes)
    cols = min(n, 4 if n <= 8 else 5)
    rows = int(math.ceil(n / cols))
    lines = 3 if any(c.get("few") for c in classes) else 2  # panel title lines
    title_h = 0.1 + 0.19 * lines
    pw, ph, gw = 2.45, 2.25, 0.55
    gh = title_h + 0.5  # below a panel: tick labels and x label; above the next: its title
    left, right, top, legend_h, bottom = 0.75, 0.2, 0.4, 0.3, 0.55
    W = left + cols * pw + (cols - 1) * gw + right
    H = top + legend_h + title_h + rows * ph + (rows - 1) * gh + bottom
    with plots.style():
        fig = plots.figure(W, H)
        fig.text(0.5, 1 - 0.12 / H, title, ha="center", va="top", fontsize=10.5, fontweight="bold")
        handles = [Line2D([], [], color=plots.RAW, marker="o", lw=1.5),
                   Line2D([], [], color=plots.SCALED, marker="s", lw=1.5),
                   Line2D([], [], color=plots.MUTED, ls=":", lw=1)]
        fig.legend(handles, ["raw probabilities", "after temperature scaling", "perfect calibration"],
                   loc="center", bbox_to_anchor=(0.5, 1 - (top + legend_h / 2) / H), ncol=3, fontsize=9,
                   handlelength=2.0, columnspacing=1.4, borderaxespad=0.0)
        for i, c in enumerate(classes):
            r, col = divmod(i, cols)
            x0 = (left + col * (pw + gw)) / W
            y0 = 1 - (top + legend_h + title_h + r * (ph + gh) + ph) / H
            ax = fig.add_axes([x0, y0, pw / W, ph / H])
            ax.plot([0, 1], [0, 1], color=plots.MUTED, lw=1, ls=":")
            for which, color, marker in (("raw", plots.RAW, "o"), ("scaled", plots.SCALED, "s")):
                b = c.get(which)
                if b is None:
                    continue
                ok = b["count"] > 0
                share = b["count"] / max(float(b["count"].sum()), 1.0)
                ax.plot(b["confidence"][ok], b["accuracy"][ok], lw=1.3, color=color, alpha=0.85, clip_on=False)
                ax.scatter(b["confidence"][ok], b["accuracy"][ok], s=10 + 110 * np.sqrt(share[ok]), marker=marker,
                           color=color, edgecolors="white", linewidths=0.5, zorder=3, clip_on=False)
            ax.set_xlim(-0.03, 1.03)
            ax.set_ylim(-0.05, 1.05)
            ax.set_xticks([0, 0.5, 1])
            ax.set_yticks([0, 0.5, 1])
            ax.tick_params(labelsize=9)
            ece = f"ECE {c['ece_raw']:.3f}"
            if c.get("ece_scaled") is not None and math.isfinite(c["ece_scaled"]):
                ece += f" → {c['ece_scaled']:.3f}"
            head = f"{c['name']} (n = {c['n']})"
            ax.set_title(f"{head}\n{ece}" + ("\nfew samples: unreliable" if c.get("few") else ""), fontsize=9.5,
                         linespacing=1.3, color="#b91c1c" if c.get("few") else plots.INK)
            if col == 0:
                ax.set_ylabel("observed frequency of the class", fontsize=9)
            if r == rows - 1 or i + cols >= n:
                ax.set_xlabel("mean predicted p(class)", fontsize=9)
        return plots.png(fig)


# --------------------------------------------------------------------------- the section
def _fmt(v: Any) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{float(v):.3f}"


def _n_text(row) -> str:
    return str(int(row["n_min"])) if row["n_min"] == row["n_max"] else f"{int(row['n_min'])}–{int(row['n_max'])}"


def classwise_section(view) -> ReportSection | None:
    import pandas as pd
    from prism_plugin.report.markdown import pipe_table
    from prism_plugin.report.verdict_rows import pct, setting_label

    runs = view.runs
    if runs is None or runs.empty or "n_classes" not in runs.columns:
        return None
    sec = ReportSection(TITLE, "", order=ORDER, key=KEY, summary="per-class ECE and reliability, multiclass tasks")
    k = pd.to_numeric(runs["n_classes"], errors="coerce")
    if not (k > 2).any():
        sec.summary = "binary tasks only: not shown"
        sec.not_shown.append(
            "these results hold only binary tasks; for K = 2 the one-vs-rest reliability of class 1 is the "
            "class-1 reliability diagram of the \"Reliability diagrams\" section and that of class 0 its mirror "
            "image, so the class-wise ECE would repeat `ece_fixed` (its column is NaN)")
        return sec
    entries, stale = _entries(view)
    if stale:
        sec.not_shown.append(f"{stale} class-wise artifact(s) under `artifacts/classwise/` match no row of "
                             "`runs.csv` or not its `ece_classwise` (left over from other runs) and are ignored")
    if not entries:
        if view.reference:
            why = "the published per-run tables hold no per-run probabilities, so there are no per-class bins"
        elif "ece_classwise" not in runs.columns:
            why = ("these runs were scored without the `classwise` metric plugin (no `ece_classwise` column); "
                   "rerun them with that plugin enabled (no `--disable classwise`) and `--overwrite` (or into a new "
                   "`--output`) to get per-class calibration")
        else:
            why = ("no class-wise artifacts (`artifacts/classwise/*.json`) belong to these runs; they are written "
                   "while a run is scored, so rerun with `--overwrite` to recreate them")
        sec.not_shown.append(why)
        return sec
    binary = _binary_settings(runs)
    if binary:
        sec.not_shown.append(f"binary settings ({', '.join(binary)}): for K = 2 the class-wise ECE repeats the "
                             "class-1 reliability (`ece_fixed`, \"Reliability diagrams\"), so they are not repeated here")
    table = class_table(entries)
    bins = int(entries[0].get("bins") or 15)
    body = [
        "Top-label ECE only asks whether the largest probability is right; a probe can be calibrated there and "
        "still be badly calibrated for one class. Here each class k is its own one-vs-rest problem: the "
        f"predicted p_k against the observed frequency of class k, in {bins} fixed bins (the bins of `ece_fixed`). "
        "`ece_classwise` in `runs.csv` is the mean over classes of these per-class ECEs (`ece_classwise_scaled` "
        "after temperature scaling, `ece_classwise_max` the worst class). Below the diagonal a class is predicted "
        f"more often than it occurs. A class with fewer than {FEW_SAMPLES} test samples is flagged: its "
        "high-probability bins rest on a handful of samples. Read it beside AUROC: a probe that gives every "
        "sample the class shares of the test split is class-wise calibrated (ECE near 0) and useless."]
    cells = list(dict.fromkeys((r.model, r.setting, r.table) for r in table.itertuples()))
    shown_rows = 0
    figure_cells = 0
    left_out: list[str] = []
    for label, setting, tab in cells:
        sub = table[(table.model == label) & (table.setting == setting) & (table.table == tab)]
        frac = _chosen_fraction(sub["fraction"])
        cur = sub[np.isclose(sub["fraction"], frac)].sort_values(["ece_raw", "class_index"],
                                                                 ascending=[False, True], na_position="last")
        n_runs = int(cur["n_runs"].max())
        where = f"{label} · {setting_label(setting)} · {pct(frac)} labels"
        es = [e for e in entries if e["label"] == label and str(e["setting"]) == setting
              and str(e["reference_table"]) == tab and abs(float(e["fraction"]) - frac) < 1e-9]
        mean_raw = float(np.mean([e["ece_classwise"] for e in es if e.get("ece_classwise") is not None]))
        sc = [e["ece_classwise_scaled"] for e in es if e.get("ece_classwise_scaled") is not None]
        few = cur[cur["note"] != ""]
        line = (f"### {where}\n\nMean class-wise ECE {_fmt(mean_raw)}" + (f" → {_fmt(float(np.mean(sc)))} after "
                f"temperature scaling" if sc else "") + f" (seed mean of {n_runs} run{'s' if n_runs != 1 else ''}). "
                f"Worst class: **{cur.iloc[0]['class']}** (ECE {_fmt(cur.iloc[0]['ece_raw'])}).")
        if len(few):
            line += (f" {len(few)} of {len(cur)} classes have fewer than {FEW_SAMPLES} test samples: their ECE is "
                     "unreliable (flagged below).")
        body.append(line)
        if shown_rows + len(cur) <= MAX_TABLE_ROWS:
            shown_rows += len(cur)
            rows = [[r["class"], _n_text(r), _fmt(r["ece_raw"]), _fmt(r["ece_scaled"]), r["note"]]
                    for _, r in cur.iterrows()]
            body.append(pipe_table(["class", "test n", "ECE raw", "ECE after T", "note"], rows))
        else:
            body.append("(table left out to keep the report short; see `classwise_ece.csv`)")
        if not _mpl():
            continue
        if figure_cells >= MAX_FIGURES:
            left_out.append(where)
            continue
        figure_cells += 1
        classes = []
        by_index = cur.set_index("class_index")
        for i in sorted(by_index.index)[:MAX_CLASSES]:
            r = by_index.loc[i]
            classes.append({"name": r["class"], "n": _n_text(r), "ece_raw": r["ece_raw"], "ece_scaled": r["ece_scaled"],
                            "few": bool(r["note"]),
                            "raw": pool([e["classes"][i]["raw"] for e in es]),
                            "scaled": pool([e["classes"][i].get("scaled") for e in es])})
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{label}-{setting}-{tab}")
        name = f"classwise-{safe}.png"
        same = len({round(float(e.get("ece_classwise") or 0.0), 12) for e in es}) == 1
        pooled = ("" if n_runs == 1 else f", {n_runs} seeds, all the same fit" if same
                  else f", {n_runs} seeds pooled")
        sec.figures[name] = class_figure(f"{where}{pooled}", classes, bins)
        sec.captions[name] = (f"{where}: per-class reliability (one-vs-rest), raw and after temperature scaling"
                              f"{pooled}; marker area grows with the bin's share of test samples; panel titles give "
                              "the seed-mean class ECE raw → scaled.")
        if len(by_index) > MAX_CLASSES:
            sec.not_shown.append(f"{where}: {len(by_index) - MAX_CLASSES} classes beyond the first {MAX_CLASSES} "
                                 "are not drawn (all are in the table and `classwise_ece.csv`)")
    if not _mpl():
        from prism_plugin.report.plots import NO_MPL

        sec.not_shown.append(NO_MPL)
    if left_out:
        sec.not_shown.append(f"per-class diagrams are drawn for the first {MAX_FIGURES} (model, setting) cells; "
                             f"{len(left_out)} more have their table only: " + "; ".join(left_out))
    sec.body = "\n\n".join(body)
    sec.tables["classwise_ece"] = table
    return sec


def _binary_settings(runs: pd.DataFrame) -> list[str]:
    import pandas as pd
    from prism_plugin.report.verdict_rows import setting_label

    if "n_classes" not in runs.columns:
        return []
    two = runs[pd.to_numeric(runs["n_classes"], errors="coerce") == 2]
    col = two["pair"].where(two["pair"].notna(), two.get("dataset")) if "pair" in two.columns else two.get("dataset")
    return [setting_label(s) for s in dict.fromkeys(col.dropna().astype(str))] if col is not None else []


def _mpl() -> bool:
    from prism_plugin.report import plots

    return plots.available()


@hookimpl
def report_sections(view):
    section = classwise_section(view)
    return [] if section is None else [section]


__all__ = ["MAX_FIGURES", "class_figure", "class_table", "classwise_section", "pool", "report_sections"]
