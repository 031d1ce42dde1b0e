"""The acquisition-shift audit as ordinary summary and report plugins.

* ``summarize(tables, options)`` turns the per-run rows that carry the adaptation plugin's
  columns (``id_f1_macro``, ``gain_<m>``, ``calx_*``, ``sel_*``, ``prior__*``) into the audit's
  tables (:mod:`prism_plugin.adaptation.audit`), under the stems ``audit_<table>``
  (``audit_rank_matrix``, ``audit_rank_transfer``, ``audit_calibration_summary``,
  ``audit_adaptation_methods``, ...). It runs when the caller asks for it with
  ``options["audit"]`` (``True`` or ``{"fraction", "bootstrap", "seed", "compare"}``; ``prism-run
  audit`` does), so ordinary run reports are unchanged. The per-example tables (consensus and
  agreement-on-the-line selectors, paired bootstrap) read the ``artifacts/`` of the results
  directories given in ``options["results_dirs"]``; without them they are skipped with a note.
* ``report_sections(view)`` shows those tables with two figures (in-domain vs target macro-F1 per
  encoder with the rank change, and the mean adaptation gain per method with its range); it
  returns nothing when the view has no audit tables.
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
USER_KEYS = ("fraction", "bootstrap", "seed", "compare")
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
                                  compare=compare)
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


def audit_sections(view) -> list:
    """The audit's report sections (empty when the view holds no audit tables)."""
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
        _table(matrix, ["task", "probe", "model", "n_seeds", "id_f1_macro", "f1_macro", "relative_gap", "id_rank",
                        "target_rank"])]), order=ORDER, key=SECTION_PREFIX + "rank",
        summary="in-domain vs target ranking of encoders")
    if mpl:
        rank.figures["audit-rank-transfer.png"] = rank_figure(matrix, transfer)
        rank.captions["audit-rank-transfer.png"] = (
            "In-domain (source held-out) vs target macro-F1 per encoder, seed means; #k is the rank (1 = best). "
            "Crossing lines are encoders whose rank changes under the acquisition shift.")
    else:
        rank.not_shown.append(no_mpl)
    sections.append(rank)

    cal = t("calibration_summary")
    if cal is not None:
        sections.append(ReportSection("Calibration transfer across domains", "\n\n".join([
            "Top-label ECE, adaptive ECE, NLL and multiclass Brier per calibration arm, averaged over encoder × "
            "target cells; `cells_ece_improved` counts the cells where the arm lowers the raw probe's ECE.",
            _table(cal)]), order=ORDER + 1, key=SECTION_PREFIX + "calibration", summary="temperature and CBR arms"))

    methods, full = t("adaptation_methods"), t("adaptation_full")
    if methods is not None or full is not None:
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
        else:
            sec.not_shown.append(no_mpl)
        sections.append(sec)

    selectors, regret = t("selector_summary"), t("selector_regret")
    if selectors is not None:
        sections.append(ReportSection("Label-free encoder selection", "\n\n".join([
            "Spearman of each label-free score with the true target macro-F1 and the regret of selecting the "
            "encoder by it, on the whole target (`target`), balanced and skewed class priors; `id_acc` is selection "
            "by in-domain accuracy.", _table(selectors),
            f"Per task and prior: `selector_regret.csv` ({0 if regret is None else len(regret)} rows)."]),
            order=ORDER + 3, key=SECTION_PREFIX + "selection", summary="selector Spearman and regret"))

    pb, diag = t("paired_bootstrap"), t("diagnostics")
    if pb is not None or diag is not None:
        parts = []
        if pb is not None:
            parts += ["**Paired bootstrap of macro-F1 differences** between encoders on the shared target examples "
                      "(seeds averaged):",
                      _table(pb, ["task", "probe", "model_a", "model_b", "diff", "ci_low", "ci_high", "excludes_zero"])]
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
