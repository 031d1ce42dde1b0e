"""The audit's report sections (``audit-*`` keys) and ``audit.md``, built with the public report toolkit
(:mod:`prism_plugin.report.toolkit`): tables as Markdown, the figures of :mod:`.figures` and, here, the rank change
and the mean gain per method; a figure whose table is missing is replaced by a "not shown" line saying why."""

from __future__ import annotations

import html as _html
from typing import Any, Mapping

import numpy as np
import pandas as pd

from prism_plugin.report import toolkit as tk
from prism_plugin.report.toolkit import NO_MPL as no_mpl
from prism_plugin.report.toolkit import ReportSection
from prism_plugin.studies.hematology import figures as af
from prism_plugin.studies.hematology.tables import tables_markdown

PREFIX = "audit_"
#: the ``key`` prefix of the audit's report sections (``audit-rank``, ...): how ``prism-run audit``
#: finds them among the report's sections for ``audit.md``
SECTION_PREFIX = "audit-"
ORDER = 70  # after the PRISM sections, before the findings / notes


def stem(table: str) -> str:
    """The summary-table stem of an audit table (``rank_matrix`` -> ``audit_rank_matrix``)."""
    return PREFIX + table


# --------------------------------------------------------------------------- figures
def rank_figure(matrix: pd.DataFrame, transfer: pd.DataFrame | None, max_panels: int = 6) -> bytes:
    """In-domain vs target macro-F1 per encoder, one panel per (task, probe): each encoder is a line
    from its in-domain score to its target score, so crossing lines are rank changes."""
    groups = list(matrix.groupby(["task", "probe"], sort=True))[:max_panels]
    colors = tk.model_colors(matrix["model"])
    n = len(groups)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    rho = {}
    if transfer is not None and not transfer.empty:
        rho = {(r.task, r.probe): r.spearman_rho for r in transfer.itertuples()}
    with tk.style():
        fig = tk.figure(3.6 * cols, 3.2 * rows)
        for i, ((task, probe), g) in enumerate(groups):
            _rank_panel(fig.add_subplot(rows, cols, i + 1), g, colors, task, probe, rho.get((task, probe)))
        fig.suptitle("Encoder ranking: in-domain vs target (#k = rank, 1 = best)", fontsize=10.5)
        fig.tight_layout()
        return tk.png(fig, tight=True)


def _rank_panel(ax, g: pd.DataFrame, colors: dict[str, str], task: str, probe: str, r: float | None) -> None:
    ax.set_axisbelow(True)
    for row in g.itertuples():
        c = colors[row.model]
        ax.plot([0, 1], [row.id_f1_macro, row.f1_macro], color=c, lw=1.8, marker="o", ms=5)
        ax.annotate(f"{row.model} (#{int(row.target_rank)})", (1, row.f1_macro), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=8, color=c)
        ax.annotate(f"#{int(row.id_rank)}", (0, row.id_f1_macro), xytext=(-6, 0), textcoords="offset points",
                    va="center", ha="right", fontsize=8, color=c)
    ax.set_xticks([0, 1])
    ax.set_xticklabels(["in-domain\n(source held-out)", "target"])
    ax.set_xlim(-0.35, 1.7)
    ax.set_ylabel("macro-F1")
    title = f"{task} · {probe}" + (f"\nSpearman ρ = {r:.2f}" if r is not None and np.isfinite(r) else "")
    ax.set_title(title, fontsize=9.5)


def gain_figure(methods: pd.DataFrame | None, full: pd.DataFrame | None) -> bytes | None:
    """Mean macro-F1 gain of each adaptation method with its range: over class-prior scenarios
    (``audit_adaptation_methods``), else over encoders on the whole target (``audit_adaptation_full``)."""
    if methods is not None and not methods.empty:
        d = methods.copy()
        d["label"] = d["method"] + " · K=" + d["K"].astype(str) + " · " + d["probe"].astype(str)
        lo, hi, what = d["range_low"], d["range_high"], "range of scenario means (task × prior)"
    elif full is not None and not full.empty:
        d = full.groupby(["probe", "method"], sort=False).agg(
            mean_gain=("mean_gain", "mean"), lo=("min_gain", "min"), hi=("max_gain", "max")).reset_index()
        d["label"] = d["method"] + " · " + d["probe"].astype(str)
        lo, hi, what = d["lo"], d["hi"], "range over encoders and targets"
    else:
        return None
    d = d.reset_index(drop=True)
    y = np.arange(len(d))[::-1]
    mean = d["mean_gain"].to_numpy(dtype=float)
    colors = [tk.RAW if v < 0 else tk.SCALED for v in mean]
    err = np.vstack([mean - lo.to_numpy(dtype=float), hi.to_numpy(dtype=float) - mean])
    with tk.style():
        fig = tk.figure(6.4, 0.9 + 0.32 * len(d))
        ax = fig.add_subplot(1, 1, 1)
        ax.set_axisbelow(True)
        ax.barh(y, mean, color=colors, alpha=0.8, height=0.6)
        ax.errorbar(mean, y, xerr=np.clip(err, 0, None), fmt="none", ecolor=tk.INK, elinewidth=1, capsize=3)
        ax.axvline(0, color=tk.MUTED, lw=1)
        ax.set_yticks(y)
        ax.set_yticklabels(d["label"], fontsize=8.5)
        ax.set_xlabel(f"macro-F1 gain over the unadapted probe (bar: mean; whiskers: {what})")
        ax.set_title("Test-time adaptation: mean gain per method", fontsize=10.5)
        fig.tight_layout()
        return tk.png(fig, tight=True)


# --------------------------------------------------------------------------- sections
def _table(df: pd.DataFrame | None, cols: list[str] | None = None, n: int = 40) -> str:
    if df is None or df.empty:
        return "_(not available)_"
    d = df[[c for c in (cols or list(df.columns)) if c in df.columns]]
    more = f"\n\n_{len(d) - n} more rows in the CSV table._" if len(d) > n else ""
    return tk.markdown_table(d.head(n)) + more


def _figure(sec, name: str, caption: str, key: str, draw, *tables, mpl: bool = True, what: str = "") -> None:
    """Add figure ``name`` drawn by ``draw(*tables)`` to ``sec``, or a "not shown" line saying why
    (matplotlib missing: said once per section by the caller; table missing or empty: the reason)."""
    label = what or name.removeprefix("audit-").removesuffix(".png").replace("-", " ")
    if not mpl:
        if no_mpl not in sec.not_shown:
            sec.not_shown.append(no_mpl)
        return
    png = draw(*tables) if any(t is not None for t in tables) else None
    if png is None:
        sec.not_shown.append(f"{label}: {af.NOT_SHOWN.get(key, 'its audit table is missing')}")
        return
    sec.figures[name] = png
    sec.captions[name] = caption


def audit_sections(view) -> list:
    """The audit's report sections (empty when the view holds no audit tables)."""
    def t(name: str) -> pd.DataFrame | None:
        df = view.table(stem(name))
        return None if df is None or df.empty else df

    if t("rank_matrix") is None:
        return []
    head = view.headline.get("audit", {}) if isinstance(view.headline.get("audit"), Mapping) else {}
    mpl = tk.available()
    return [s for part in (_rank, _exposure, _robustness, _calibration, _adaptation, _selection, _per_class,
                           _mechanism, _differences) for s in part(t, mpl, head)]


def _rank(t, mpl: bool, head: Mapping[str, Any]) -> list:
    matrix, transfer = t("rank_matrix"), t("rank_transfer")
    intro = []
    if head:
        intro.append(f"The acquisition-shift audit of **{head.get('n_runs', '?')} runs**: encoders "
                     f"{', '.join(map(str, head.get('models', [])))} on {', '.join(map(str, head.get('tasks', [])))} "
                     f"(probes: {', '.join(map(str, head.get('probes', [])))}; label fraction "
                     f"{', '.join(f'{f:g}' for f in head.get('fraction', []))}; {head.get('bootstrap_B', '?')} "
                     "bootstrap resamples).")
    intro.append("Does the encoder ranking on held-out **source** data carry over to the **target** "
                 "acquisition domain? Spearman ρ between in-domain and target macro-F1 over encoders (CI from a "
                 "bootstrap over encoders), whether the in-domain best encoder is dethroned on the target, and the "
                 "regret of choosing the encoder by in-domain accuracy.")
    rank = ReportSection("Rank transfer across acquisition domains", "\n\n".join(intro + [
        _table(transfer, ["task", "probe", "n_models", "spearman_rho", "rho_ci_low", "rho_ci_high", "id_best",
                          "id_best_target_rank", "target_best", "dethroned", "regret_id_accuracy"]),
        "**Per encoder** (`rank_matrix.csv`):",
        _table(matrix, ["task", "probe", "model", "n_split_seeds", "n_seeds", "id_f1_macro", "id_f1_macro_ci_low",
                        "id_f1_macro_ci_high", "f1_macro", "f1_macro_ci_low", "f1_macro_ci_high", "relative_gap",
                        "id_rank", "target_rank"])]), order=ORDER, key=SECTION_PREFIX + "rank",
        summary="in-domain vs target ranking of encoders")
    if mpl:
        rank.figures["audit-rank-transfer.png"] = rank_figure(matrix, transfer)
        rank.captions["audit-rank-transfer.png"] = (
            "In-domain (source held-out) vs target macro-F1 per encoder, seed means; #k is the rank (1 = best). "
            "Crossing lines are encoders whose rank changes under the acquisition shift.")
        n_split = int(matrix["n_split_seeds"].max()) if "n_split_seeds" in matrix else 1
        _figure(rank, "audit-rank-scatter.png",
                "Target vs in-domain macro-F1 per encoder (dashed: y = x; below it the encoder loses under the shift)"
                + (f"; error bars: 95 % bootstrap CI over the means of {n_split} source split seeds (few points: "
                   "read them as the spread of the splits, not as a population interval)." if n_split > 1 else
                   "; one source split, so no error bars (a task with split_seeds gives CIs over them)."),
                "rank_scatter", af.rank_scatter, matrix, what="rank-transfer scatter")
    else:
        rank.not_shown.append(no_mpl)
    return [rank]


def _exposure(t, mpl: bool, head: Mapping[str, Any]) -> list:
    exposure = t("exposure")
    exp = ReportSection("Pretraining exposure", "", order=ORDER, key=SECTION_PREFIX + "exposure",
                        summary="in pretraining / held out / unknown per encoder × target")
    if exposure is not None:
        counts = exposure["exposure"].astype(str).value_counts()
        intro_exp = ("Whether each encoder saw the target dataset in pretraining (matched against the task's "
                     "`dataset` and `dataset_aliases`); `unknown` = the adapter declares no pretraining data. "
                     + ", ".join(f"{k.replace('_', ' ')}: {int(v)}" for k, v in counts.items()) + " cells.")
        exp.body = "\n\n".join([intro_exp, _table(exposure, ["model", "task", "target_dataset", "exposure",
                                                             "matched"])])
        exp.html = f"<p>{_html.escape(intro_exp)}</p>" + af.exposure_badges_html(exposure.head(200))
    _figure(exp, "audit-exposure.png", "Exposure of each encoder × target dataset (badges as in the table).",
            "exposure", af.exposure_figure, exposure, mpl=mpl, what="exposure grid")
    if exposure is None and not mpl:
        exp.not_shown.append(f"exposure: {af.NOT_SHOWN['exposure']}")
    return [exp]


def _robustness(t, mpl: bool, head: Mapping[str, Any]) -> list:
    er = t("effective_robustness")
    ers = ReportSection("Effective robustness", "", order=ORDER, key=SECTION_PREFIX + "effective-robustness",
                        summary="residual from the in-domain vs target line")
    if er is not None:
        caveats = [str(c) for c in er.get("caveat", pd.Series(dtype=str)).dropna().unique() if str(c).strip()]
        ers.body = "\n\n".join(["Each encoder's target macro-F1 minus the least-squares line of target on in-domain "
                                 "macro-F1 over encoders (`effective_robustness`); with a tiny in-domain spread the "
                                 "line is ill-posed and the residuals mean little."
                                 + (f" Caveat: {caveats[0]}" if caveats else ""),
                                 _table(er, ["task", "probe", "model", "id_f1_macro", "f1_macro", "line_f1",
                                             "effective_robustness", "x_spread", "caveat"])])
    _figure(ers, "audit-effective-robustness.png",
            "In-domain vs target macro-F1 with the fitted line (dashed); each stem is an encoder's effective "
            "robustness (value in brackets).", "effective_robustness", af.effective_robustness_figure, er, mpl=mpl,
            what="effective robustness")
    if er is None and not mpl:
        ers.not_shown.append(f"effective robustness: {af.NOT_SHOWN['effective_robustness']}")
    return [ers]


def _calibration(t, mpl: bool, head: Mapping[str, Any]) -> list:
    cal, cal_cells, rel = t("calibration_summary"), t("calibration_transfer"), t("reliability")
    calsec = ReportSection("Calibration transfer across domains", "", order=ORDER + 1,
                           key=SECTION_PREFIX + "calibration", summary="temperature and CBR arms")
    if cal is not None:
        calsec.body = "\n\n".join([
            "Top-label ECE, adaptive ECE, NLL and multiclass Brier per calibration arm, averaged over encoder × "
            "target cells; `cells_ece_improved` counts the cells where the arm lowers the raw probe's ECE.",
            _table(cal)])
    _figure(calsec, "audit-reliability.png",
            "Top-label reliability per calibration arm: accuracy vs mean confidence in 15 equal-width bins, pooled "
            "over targets, encoders and split seeds (count-weighted); dashed: perfect calibration.",
            "reliability", af.reliability_diagrams, rel, mpl=mpl, what="reliability diagrams")
    _figure(calsec, "audit-k-curve.png",
            "Few-shot target temperature: mean top-label ECE over encoder × target cells vs the number K of "
            "labelled target samples (arms k<K>); horizontal lines: raw probe, source-fitted and oracle temperature.",
            "k_curve", af.k_curve, cal_cells, mpl=mpl, what="few-shot K curve")
    return [calsec]


def _adaptation(t, mpl: bool, head: Mapping[str, Any]) -> list:
    methods, full = t("adaptation_methods"), t("adaptation_full")
    if methods is None and full is None:
        none = ReportSection("Test-time adaptation", "", order=ORDER + 2, key=SECTION_PREFIX + "adaptation",
                             summary="gain per method, range, cells hurt")
        none.not_shown.append("gain per method and gain by prior and batch size: the runs have no adaptation "
                              "columns (gain_<method>; the adaptation plugin was disabled or `adaptation: []`)")
        return [none]
    parts = ["Macro-F1 gain of each test-time adaptation method over the unadapted probe. `oracle_cb` (and any "
             "method registered with `needs_labels`) uses target labels: an upper bound, not deployable."]
    if methods is not None:
        parts += ["**Under class-prior shift** (per method and target batch size K, over task × prior "
                  "scenarios; CI from a hierarchical bootstrap):",
                  _table(methods, ["probe", "K", "method", "n_scenarios", "mean_gain", "range_low", "range_high",
                                   "scenarios_hurt", "cells_hurt", "cells", "worst_cell", "ci_low", "ci_high",
                                   "upper_bound"])]
    if full is not None:
        parts += ["**On the whole target** (its own class prior), over encoders:", _table(full)]
    sec = ReportSection("Test-time adaptation", "\n\n".join(parts), order=ORDER + 2,
                        key=SECTION_PREFIX + "adaptation", summary="gain per method, range, cells hurt")
    if mpl:
        png = gain_figure(methods, full)
        if png is not None:
            sec.figures["audit-adaptation-gain.png"] = png
            sec.captions["audit-adaptation-gain.png"] = (
                "Mean macro-F1 gain per adaptation method (bars, red when negative) with its range (whiskers).")
        _figure(sec, "audit-gain-by-prior.png",
                "Mean macro-F1 gain per method (panel) vs the target batch size K, one line per class prior "
                "(mean over targets and encoders; below 0 the method hurts).",
                "gain_by_prior", af.gain_by_prior, t("adaptation_scenarios"), what="gain by prior and batch size")
    else:
        sec.not_shown.append(no_mpl)
    return [sec]


def _selection(t, mpl: bool, head: Mapping[str, Any]) -> list:
    selectors, regret = t("selector_summary"), t("selector_regret")
    if selectors is None and regret is None:
        return []
    selsec = ReportSection("Label-free encoder selection", "\n\n".join([
        "Spearman of each label-free score with the true target macro-F1 and the regret of selecting the "
        "encoder by it, on the whole target (`target`), balanced and skewed class priors; `id_acc` is selection "
        "by in-domain accuracy.", _table(selectors),
        f"Per task and prior: `selector_regret.csv` ({0 if regret is None else len(regret)} rows)."]),
        order=ORDER + 3, key=SECTION_PREFIX + "selection", summary="selector Spearman and regret")
    _figure(selsec, "audit-selector-regret.png",
            "Regret of choosing the encoder by each label-free score (macro-F1 of the best encoder minus the "
            "chosen one): mean over tasks and priors per condition, whisker to the largest.",
            "selector_regret", af.selector_regret_figure, regret, mpl=mpl, what="selector regret")
    return [selsec]


def _per_class(t, mpl: bool, head: Mapping[str, Any]) -> list:
    pcr, conf = t("per_class_recall"), t("confusion")
    cls = ReportSection("Per-class recall and confusion", "", order=ORDER + 5, key=SECTION_PREFIX + "per-class",
                        summary="which classes fail on each target")
    if pcr is not None or conf is not None:
        cls.body = ("Recall per true class on each target (pooled over split and probe seeds) and, per target, the "
                    "confusion of the encoder with the lowest mean recall there: a row is a true class, its cells the "
                    "share predicted as each class (e.g. lymphocytes called neutrophils). Full tables: "
                    "`per_class_recall.csv`, `confusion.csv`.")
    _figure(cls, "audit-per-class-recall.png", "Recall per encoder (rows) and true class (columns), one panel per "
            "target.", "per_class_recall", af.per_class_recall_figure, pcr, mpl=mpl, what="per-class recall")
    _figure(cls, "audit-confusion.png", "Confusion matrix (row share) of the weakest encoder on each target.",
            "confusion", af.confusion_figure, conf, mpl=mpl, what="confusion")
    if pcr is None and conf is None and not mpl:
        cls.not_shown.append(f"per-class recall and confusion: {af.NOT_SHOWN['per_class_recall']}")
    return [cls]


def _mechanism(t, mpl: bool, head: Mapping[str, Any]) -> list:
    mech = t("mechanism")
    msec = ReportSection("Shift mechanism", "", order=ORDER + 6, key=SECTION_PREFIX + "mechanism",
                         summary="first-moment shift vs target drop, real and synthetic")
    if mech is not None:
        msec.body = "\n\n".join([
            "Per encoder × target: the first-moment shift (RMS over features of the target-minus-source mean in "
            "source SDs) beside the target drop (in-domain minus target macro-F1); synthetic targets (`perturb:`) "
            "show whether a generated stain/blur/scale corruption reproduces the real shift.",
            _table(mech, ["task", "probe", "model", "target_dataset", "synthetic", "first_moment_shift",
                          "target_drop"])])
    _figure(msec, "audit-mechanism.png", "First-moment shift vs target drop per encoder × target; circles: real "
            "targets, open triangles: synthetic (perturbed) targets.", "mechanism", af.mechanism_scatter, mech,
            mpl=mpl, what="mechanism scatter")
    if mech is None and not mpl:
        msec.not_shown.append(f"mechanism: {af.NOT_SHOWN['mechanism']}")
    return [msec]


def _differences(t, mpl: bool, head: Mapping[str, Any]) -> list:
    pb, diag = t("paired_bootstrap"), t("diagnostics")
    if pb is None and diag is None:
        return []
    parts = []
    if pb is not None:
        parts += ["**Paired bootstrap of macro-F1 differences** between encoders on the shared target examples "
                  "(seeds averaged):",
                  _table(pb, ["task", "probe", "model_a", "model_b", "diff", "ci_low", "ci_high", "excludes_zero",
                              "aggregation"])]
    if diag is not None:
        parts += ["**Diagnostics** (domain decodability, mean-direction projection):", _table(diag)]
    return [ReportSection("Encoder differences and shift diagnostics", "\n\n".join(parts), order=ORDER + 4,
                          key=SECTION_PREFIX + "bootstrap")]


def is_audit_section(section) -> bool:
    """Whether a report section is one of :func:`audit_sections`' (by its key)."""
    return str(getattr(section, "key", "") or "").startswith(SECTION_PREFIX)


def to_markdown(sections: list, headline: Mapping[str, Any], figures_dir: str = "figures") -> str:
    """``audit.md``: the audit headline (``headline["notes"]`` as notes), the audit sections' Markdown
    (figures linked from ``figures_dir``) and the list of the CSV tables written (``headline["tables"]``)."""
    parts = ["# Acquisition-shift audit\n",
             f"{headline.get('n_runs', '?')} runs; models: {', '.join(map(str, headline.get('models', [])))}; "
             f"tasks: {', '.join(map(str, headline.get('tasks', [])))}; "
             f"probes: {', '.join(map(str, headline.get('probes', [])))}.\n"]
    parts += [f"> note: {n}\n" for n in headline.get("notes", ())]
    parts += tk.render_sections_md(sections, figures_dir)
    return "\n".join(parts).rstrip("\n") + "\n\n" + tables_markdown(headline.get("tables", ()))
