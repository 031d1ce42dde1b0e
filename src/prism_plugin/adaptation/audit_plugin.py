"""The acquisition-shift audit as ordinary summary and report plugins.

* ``summarize(tables, options)`` turns the per-run rows that carry the adaptation plugin's
  columns (``id_f1_macro``, ``gain_<m>``, ``calx_*``, ``sel_*``, ``prior__*``) into the audit's
  tables (:mod:`prism_plugin.adaptation.audit`), under the stems ``audit_<table>``
  (``audit_rank_matrix``, ``audit_rank_transfer``, ``audit_calibration_summary``,
  ``audit_adaptation_methods``, ...). It runs when the caller asks for it with
  ``options["audit"]`` (``True`` or ``{"fraction", "bootstrap", "seed", "compare", "held_out_only"}``; ``prism-run
  audit`` does), so ordinary run reports are unchanged. The per-example tables (consensus and
  agreement-on-the-line selectors, paired bootstrap) read the ``artifacts/`` of the results
  directories given in ``options["results_dirs"]``; without them they are skipped with a note.
* ``report_sections(view)`` shows those tables with their figures (:mod:`.audit_figures`: the rank
  change and the rank-transfer scatter with split-seed CIs, exposure badges, effective robustness,
  reliability diagrams per calibration arm and the few-shot K curve, the mean adaptation gain per
  method and its gain by prior and batch size, selector regret, per-class recall and confusion per
  target, the shift mechanism); a figure whose table is missing is replaced by a "not shown" line
  saying why. It returns nothing when the view has no audit tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from prism_plugin.hookspecs import hookimpl

PREFIX = "audit_"
#: the ``key`` prefix of the audit's report sections (``audit-rank``, ...): how ``prism-run audit``
#: finds them among the report's sections for ``audit.md``
SECTION_PREFIX = "audit-"
#: the prefix of the audit's notes among the report's summary notes
NOTE_PREFIX = "audit: "
ORDER = 70  # after the PRISM sections, before the findings / notes
#: the settings a user may give under ``options["audit"]``
USER_KEYS = ("fraction", "bootstrap", "seed", "compare", "held_out_only")
#: settings a caller passes along with them (``host``: the plugin host whose adaptation registry
#: gives the methods' order and traits)
INTERNAL_KEYS = ("host",)


def stem(table: str) -> str:
    """The summary-table stem of an audit table (``rank_matrix`` -> ``audit_rank_matrix``)."""
    return PREFIX + table


def audit_options(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The audit's settings from the summary options, or ``None`` when the audit was not asked for."""
    from prism_plugin.errors import PrismError

    raw = options.get("audit") if options else None
    if not raw:
        return None
    if raw is True:
        return {}
    if not isinstance(raw, Mapping):
        raise PrismError(f"summary option audit: give true or a mapping with {', '.join(USER_KEYS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(USER_KEYS) - set(INTERNAL_KEYS))
    if unknown:
        raise PrismError(f"summary option audit: unknown key(s) {', '.join(map(str, unknown))} "
                         f"(allowed: {', '.join(USER_KEYS)})")
    return dict(raw)


@hookimpl
def summarize(tables, options):
    from prism_plugin.adaptation import audit, stats
    from prism_plugin.tables import SummaryOutput

    opts = audit_options(options)
    if opts is None:
        return None
    dirs = [Path(d) for d in (options.get("results_dirs") or ())]
    inp = audit.prepare(audit.audited_rows(tables), opts.get("fraction"), dirs, host=opts.get("host"))
    if not dirs:
        inp.notes.append("the results directories were not given (options['results_dirs']): the per-example "
                         "tables (consensus, agl_acc, paired bootstrap) are skipped")
    compare = [tuple(pair) for pair in (opts.get("compare") or ())]
    built, headline = audit.build(inp, B=int(opts.get("bootstrap") or stats.BOOTSTRAP_B), seed=int(opts.get("seed", 0)),
                                  compare=compare, held_out_only=bool(opts.get("held_out_only")))
    notes = list(headline.pop("notes", []))
    written = [name for name in audit.TABLES if not built[name].empty]
    # the headline is audit.json as `prism-run audit` writes it: the tables present and the notes
    headline["tables"] = written
    headline["notes"] = notes
    return SummaryOutput(tables={stem(name): built[name] for name in written}, headline={"audit": headline},
                         notes=[NOTE_PREFIX + n for n in notes])


# --------------------------------------------------------------------------- figures
# drawn with the report's figure helpers and style (report.plots: spines, grid, fonts)
def rank_figure(matrix: pd.DataFrame, transfer: pd.DataFrame | None, max_panels: int = 6) -> bytes:
    """In-domain vs target macro-F1 per encoder, one panel per (task, probe): each encoder is a line
    from its in-domain score to its target score, so crossing lines are rank changes."""
    from prism_plugin.report import plots

    groups = list(matrix.groupby(["task", "probe"], sort=True))[:max_panels]
    colors = plots.model_colors(matrix["model"])
    n = len(groups)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    rho = {}
    if transfer is not None and not transfer.empty:
        rho = {(r.task, r.probe): r.spearman_rho for r in transfer.itertuples()}
    with plots.style():
        fig = plots.figure(3.6 * cols, 3.2 * rows)
        for i, ((task, probe), g) in enumerate(groups):
            _rank_panel(fig.add_subplot(rows, cols, i + 1), g, colors, task, probe, rho.get((task, probe)))
        fig.suptitle("Encoder ranking: in-domain vs target (#k = rank, 1 = best)", fontsize=10.5)
        fig.tight_layout()
        return plots.png(fig, tight=True)


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
    from prism_plugin.report import plots

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
    colors = [plots.RAW if v < 0 else plots.SCALED for v in mean]
    err = np.vstack([mean - lo.to_numpy(dtype=float), hi.to_numpy(dtype=float) - mean])
    with plots.style():
        fig = plots.figure(6.4, 0.9 + 0.32 * len(d))
        ax = fig.add_subplot(1, 1, 1)
        ax.set_axisbelow(True)
        ax.barh(y, mean, color=colors, alpha=0.8, height=0.6)
        ax.errorbar(mean, y, xerr=np.clip(err, 0, None), fmt="none", ecolor=plots.INK, elinewidth=1, capsize=3)
        ax.axvline(0, color=plots.MUTED, lw=1)
        ax.set_yticks(y)
        ax.set_yticklabels(d["label"], fontsize=8.5)
        ax.set_xlabel(f"macro-F1 gain over the unadapted probe (bar: mean; whiskers: {what})")
        ax.set_title("Test-time adaptation: mean gain per method", fontsize=10.5)
        fig.tight_layout()
        return plots.png(fig, tight=True)


# --------------------------------------------------------------------------- sections
def _table(df: pd.DataFrame | None, cols: list[str] | None = None, n: int = 40) -> str:
    from prism_plugin.report.markdown import markdown_table

    if df is None or df.empty:
        return "_(not available)_"
    d = df[[c for c in (cols or list(df.columns)) if c in df.columns]]
    more = f"\n\n_{len(d) - n} more rows in the CSV table._" if len(d) > n else ""
    return markdown_table(d.head(n)) + more


def _figure(sec, name: str, caption: str, key: str, draw, *tables, mpl: bool = True, what: str = "") -> None:
    """Add figure ``name`` drawn by ``draw(*tables)`` to ``sec``, or a "not shown" line saying why
    (matplotlib missing: said once per section by the caller; table missing or empty: the reason)."""
    from prism_plugin.adaptation import audit_figures as af

    label = what or name.removeprefix("audit-").removesuffix(".png").replace("-", " ")
    if not mpl:
        from prism_plugin.report.basic import NO_MPL

        if NO_MPL not in sec.not_shown:
            sec.not_shown.append(NO_MPL)
        return
    png = draw(*tables) if any(t is not None for t in tables) else None
    if png is None:
        sec.not_shown.append(f"{label}: {af.NOT_SHOWN.get(key, 'its audit table is missing')}")
        return
    sec.figures[name] = png
    sec.captions[name] = caption


def audit_sections(view) -> list:
    """The audit's report sections (empty when the view holds no audit tables)."""
    from prism_plugin.adaptation import audit_figures as af
    from prism_plugin.report import plots
    from prism_plugin.report.basic import NO_MPL as no_mpl
    from prism_plugin.report.sections import ReportSection

    def t(name: str) -> pd.DataFrame | None:
        df = view.table(stem(name))
        return None if df is None or df.empty else df

    matrix, transfer = t("rank_matrix"), t("rank_transfer")
    if matrix is None:
        return []
    head = view.headline.get("audit", {}) if isinstance(view.headline.get("audit"), Mapping) else {}
    mpl = plots.available()
    sections = []

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
    sections.append(rank)

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
        import html as _html

        exp.html = f"<p>{_html.escape(intro_exp)}</p>" + af.exposure_badges_html(exposure.head(200))
    _figure(exp, "audit-exposure.png", "Exposure of each encoder × target dataset (badges as in the table).",
            "exposure", af.exposure_figure, exposure, mpl=mpl, what="exposure grid")
    if exposure is None and not mpl:
        exp.not_shown.append(f"exposure: {af.NOT_SHOWN['exposure']}")
    sections.append(exp)

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
    sections.append(ers)

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
    sections.append(calsec)

    methods, full = t("adaptation_methods"), t("adaptation_full")
    if methods is None and full is None:
        none = ReportSection("Test-time adaptation", "", order=ORDER + 2, key=SECTION_PREFIX + "adaptation",
                             summary="gain per method, range, cells hurt")
        none.not_shown.append("gain per method and gain by prior and batch size: the runs have no adaptation "
                              "columns (gain_<method>; the adaptation plugin was disabled or `adaptation: []`)")
        sections.append(none)
    else:
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
        sections.append(sec)

    selectors, regret = t("selector_summary"), t("selector_regret")
    if selectors is not None or regret is not None:
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
        sections.append(selsec)

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
    sections.append(cls)

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
    sections.append(msec)

    pb, diag = t("paired_bootstrap"), t("diagnostics")
    if pb is not None or diag is not None:
        parts = []
        if pb is not None:
            parts += ["**Paired bootstrap of macro-F1 differences** between encoders on the shared target examples "
                      "(seeds averaged):",
                      _table(pb, ["task", "probe", "model_a", "model_b", "diff", "ci_low", "ci_high", "excludes_zero",
                                  "aggregation"])]
        if diag is not None:
            parts += ["**Diagnostics** (domain decodability, mean-direction projection):", _table(diag)]
        sections.append(ReportSection("Encoder differences and shift diagnostics", "\n\n".join(parts),
                                      order=ORDER + 4, key=SECTION_PREFIX + "bootstrap"))
    return sections


@hookimpl
def report_sections(view):
    sections = audit_sections(view)
    return sections or None


def is_audit_section(section) -> bool:
    """Whether a report section is one of :func:`audit_sections`' (by its key)."""
    return str(getattr(section, "key", "") or "").startswith(SECTION_PREFIX)


def to_markdown(sections: list, headline: Mapping[str, Any], figures_dir: str = "figures") -> str:
    """``audit.md``: the audit headline (``headline["notes"]`` as notes) and the audit sections'
    Markdown (:func:`prism_plugin.report.build.render_sections_md`), figures linked from ``figures_dir``."""
    from prism_plugin.report.build import render_sections_md

    parts = ["# Acquisition-shift audit\n",
             f"{headline.get('n_runs', '?')} runs; models: {', '.join(map(str, headline.get('models', [])))}; "
             f"tasks: {', '.join(map(str, headline.get('tasks', [])))}; "
             f"probes: {', '.join(map(str, headline.get('probes', [])))}.\n"]
    parts += [f"> note: {n}\n" for n in headline.get("notes", ())]
    parts += render_sections_md(sections, figures_dir)
    return "\n".join(parts)


__all__ = ["INTERNAL_KEYS", "NOTE_PREFIX", "PREFIX", "SECTION_PREFIX", "USER_KEYS", "audit_options",
           "audit_sections", "gain_figure", "is_audit_section", "rank_figure", "report_sections", "stem", "summarize",
           "to_markdown"]
