"""The report's Transfer, CRI and Findings sections (target metrics vs source labels, the composite
reliability index, the headline numbers beside the PRISM paper's)."""

from __future__ import annotations


from prism_plugin.report import cell_figures, plots
from prism_plugin.report.context import SectionContext, banded
from prism_plugin.report.derived import FEWSHOT_TOLERANCE, TRANSFER_ZONE, frame_label
from prism_plugin.report.markdown import markdown_table
from prism_plugin.report.sections import ReportSection
from prism_plugin.report.verdict_rows import pct


def transfer(ctx: SectionContext) -> ReportSection:
    sec = ReportSection("Transfer", "", order=60, key="transfer",
                        summary="target ECE/AUROC vs source labels; temperatures")
    body = [f"Probes trained on the source and evaluated on the target. In the PRISM paper, whether more source labels "
            f"help or harm target calibration tracks the transfer AUROC: below about {TRANSFER_ZONE:.2f} (shaded) more "
            "labels worsened target ECE in 86–88 % of combinations, above it in 1–8 % (Table 7). That zone was measured "
            "on label-definition pairs: it is shaded only for them (and Camelyon17), not for a task declaring "
            "`shift: covariate` or `shift: prior`, nor for one that declares no shift kind."]
    for table, cells in ctx.figure_cells(sec, ctx.transfers):
        settings = list(dict.fromkeys(cells["setting"]))
        agg = None if len(settings) <= 6 else f"{len(settings)} pairs (mean over pairs)"
        name = f"transfer-{table}.png"
        sec.figures[name] = plots.transfer_curves(cells, settings, aggregate_label=agg, zone=banded(table, cells, ctx.kinds),
                                                  ci_level=ctx.ci_level, zone_at=TRANSFER_ZONE)
        sec.captions[name] = (f"{frame_label(table, cells, ctx.kinds)}: target AUROC (top; y axis fitted to the data) and target "
                              "ECE (bottom) vs source label fraction"
                              + ("; averaged over pairs, band = range over pairs." if agg else "."))
        extra = []
        if "temperature_oracle_mean" in cells and cells["temperature_oracle_mean"].notna().any():
            extra.append(("temperature_oracle", "oracle T (fitted on target test; not deployable)", "--"))
        ks = sorted(int(c[len("temperature_fewshot_k"):-len("_mean")]) for c in cells.columns
                    if c.startswith("temperature_fewshot_k") and c.endswith("_mean"))
        if ks:
            extra.append((f"temperature_fewshot_k{ks[-1]}", f"few-shot T (K = {ks[-1]} target labels)", ":"))
        if len(settings) <= 6 and cells["temperature_mean"].notna().any():
            tname = f"transfer-temperature-{table}.png"
            sec.figures[tname] = plots.temperature_curves(cells, settings, extra=extra, max_cols=2,
                                                          xlabel="source label fraction (log scale)")
            sec.captions[tname] = (f"{frame_label(table, cells, ctx.kinds)}: source-fitted temperature" +
                                   (", oracle" if any(e[0] == "temperature_oracle" for e in extra) else "") +
                                   (" and few-shot" if ks else "") + " temperatures vs source label fraction.")
            if not extra:
                sec.not_shown.append(f"{ctx.kinds[table].label}: oracle and few-shot temperatures — the runs have no "
                                     "temperature_oracle / temperature_fewshot_k<K> columns")
    if ctx.cells_of(*ctx.transfers) is None:
        sec.not_shown.append("these results hold no transfer runs (run a transfer task, e.g. `prism_demo_transfer`)")
        return sec
    if ctx.fewshot is not None and not ctx.fewshot.empty and ctx.mpl:
        tol = float(ctx.view.options.get("fewshot_tolerance", FEWSHOT_TOLERANCE))
        sec.figures["fewshot.png"] = cell_figures.fewshot_gap(ctx.fewshot, tolerance=tol)
        sec.captions["fewshot.png"] = ("Few-shot target temperature: target ECE minus oracle ECE vs the number of "
                                       f"labelled target samples K at the largest source fraction; green: within {tol:g}.")
    elif ctx.fewshot is None or ctx.fewshot.empty:
        sec.not_shown.append("few-shot target temperatures: the transfer runs have no temperature_fewshot_k<K> / "
                             "ece_scaled_fewshot_k<K> columns (the temperature-transfer plugin writes them)")
    bands = ctx.view.table("mechanism_bands")
    if bands is not None:
        body.append("**Rising target ECE by transfer AUROC** (`mechanism_bands.csv`, PROTOCOL §6.10; combinations "
                    "of model and pair, banded by the mean target AUROC over fractions; rate = share of the band's "
                    "combinations whose target ECE rose):\n\n" + markdown_table(bands, formats=PERCENT_COLUMNS))
    rho = ctx.h("mechanism_spearman_slope_all")
    if isinstance(rho, (int, float)):
        body.append(f"Spearman correlation between transfer AUROC and the slope of target ECE in log10 fraction: "
                    f"**{rho:.2f}** over {ctx.h('mechanism_spearman_slope_all_n')} combinations (PRISM: −0.78).")
    n_w, n_t = ctx.h("ts_transfer_cells_worse"), ctx.h("ts_transfer_cells_worse_total")
    if isinstance(n_w, (int, float)) and isinstance(n_t, (int, float)):
        body.append(f"The source-fitted temperature made target ECE worse in **{int(n_w)} of {int(n_t)}** "
                    "label-definition transfer cells (ts_transfer_cells_worse).")
    sec.body = "\n\n".join(body)
    return sec


def _percent(v) -> str:
    import pandas as pd
    return "–" if pd.isna(v) else f"{float(v):g} %"


#: Columns of the PROTOCOL §6 tables that hold a percentage (printed with its unit).
PERCENT_COLUMNS = {"rate": _percent}


def cri(ctx: SectionContext) -> ReportSection:
    sec = ReportSection("Composite Reliability Index (CRI)", "", order=70, key="cri",
                        summary="AUROC × (1 − scaled ECE) × OOD stability")
    body = ["The CRI (PROTOCOL §6.2) multiplies mean AUROC, one minus the mean scaled ECE and the OOD stability "
            "(mean over transfer pairs of min(target AUROC / source AUROC, 1), at 100 % labels). It is a screening "
            "heuristic: a model with little in-distribution performance to lose looks stable, and for CRC/BRACS the "
            "ratio compares a binary target AUROC with a multiclass source AUROC."]
    shown = False
    for stem, what in (("cri_variants_100", "CRI at 100 % labels under four aggregation rules"),
                       ("cri_variants_1", "CRI at 1 % labels"),
                       ("cri_components", "components at 100 % labels (label-definition pairs)"),
                       ("camelyon17_cri_components", "Camelyon17 components")):
        t = ctx.view.table(stem)
        if t is None or t.empty:
            continue
        shown = True
        if "model" not in t.columns:
            t = t.reset_index()
        body.append(f"**{what}** (`{stem}.csv`):\n\n" + markdown_table(t))
    if not shown:
        reasons = ctx.notes_about("CRI", "cri_", "OOD stability")
        sec.not_shown.append("no CRI table: " + ("; ".join(reasons[:3]) if reasons else
                                                 "needs in-distribution and transfer runs of the same model"))
    sec.body = "\n\n".join(body)
    return sec


PAPER_NUMBERS: list[tuple[str, str, str, str]] = [
    # (headline key, what, paper value, unit/format)
    ("decoupling_pooled_rho_1pct", "pooled AUROC-rank vs calibration-rank ρ at 1 % labels", "−0.24", "f"),
    ("decoupling_pooled_rho_100pct", "pooled ρ at 100 % labels", "0.52", "f"),
    ("decoupling_i2_1pct", "heterogeneity I² at 1 %", "67 %", "pct"),
    ("decoupling_i2_100pct", "heterogeneity I² at 100 %", "0 %", "pct"),
    ("decoupling_pooled_contrast", "ρ(100 %) − ρ(1 %)", "0.754 [0.190, 1.270]", "ci"),
    ("decoupling_seedlevel_contrast", "seed-level bootstrap Δρ", "0.62 [0.08, 1.13]", "ci"),
    ("ts_indomain_cells_worse", "cells where temperature scaling does not reduce ECE", "49 of 288", "of"),
    ("ts_multiclass_cells_T_lt_1", "multiclass cells with T < 1", "189 of 192", "of"),
    ("ts_binary_cells_T_lt_2", "binary cells with T < 2 (sharpened)", "63 of 96", "of"),
    ("ts_transfer_cells_worse", "transfer cells where the source T worsens target ECE", "117 of 192 (61 %)", "of"),
    ("ts_camelyon17_runs_worse", "Camelyon17 runs where the source T worsens target ECE", "16 %", "of"),
    ("mechanism_label_definition_rises", "label-definition combinations with rising target ECE", "28 of 32", "rises"),
    ("mechanism_covariate_rises", "Camelyon17 combinations with rising target ECE", "10 of 160", "rises"),
    ("mechanism_spearman_slope_all", "Spearman(transfer AUROC, ECE slope)", "−0.78", "f"),
    ("degenerate_cells_indomain", "in-distribution cells with a collapsed seed", "28", "i"),
    ("degenerate_cells_ood", "transfer cells with a collapsed seed", "119", "i"),
    ("cri_rule_kendall_tau_min", "Kendall τ between CRI rules (min)", "0.71", "f"),
]


def _headline_value(ctx: SectionContext, key: str, kind: str) -> str | None:
    v = ctx.h(key)
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if kind == "of":
        tot = ctx.h(f"{key}_total")
        p = ctx.h(f"{key}_pct")
        return f"{int(v)} of {int(tot)}" + (f" ({p:.1f} %)" if isinstance(p, (int, float)) else "")
    if kind == "rises":
        n = ctx.h(key[:-len("_rises")] + "_n")
        return f"{int(v)} of {int(n)}" if n is not None else str(v)
    if kind == "ci":
        lo, hi = ctx.h(f"{key}_ci_lo"), ctx.h(f"{key}_ci_hi")
        return f"{v:.3f} [{lo:.3f}, {hi:.3f}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) \
            else f"{v:.3f}"
    if kind == "pct":
        return f"{v:.1f} %"
    if kind == "i":
        return f"{int(v)}"
    return f"{v:.3f}"


def findings(ctx: SectionContext) -> ReportSection:
    import pandas as pd
    sec = ReportSection("Findings: headline numbers", "", order=80, key="findings",
                        summary="the paper's four findings on these runs")
    rows = []
    for key, what, paper, kind in PAPER_NUMBERS:
        val = _headline_value(ctx, key, kind)
        if val is None:
            continue
        rows.append({"finding": what, "these results": val, "PRISM paper (8 reference models)": paper,
                     "findings.json key": f"`{key}`"})
    body = []
    if rows:
        body.append("The statistics behind the PRISM paper's findings, computed on these results with the PROTOCOL "
                    "§6 recipes, next to the paper's values (which are for its eight models and six datasets; on "
                    "other results they are a point of comparison, not an expectation). \"not defined\" means the "
                    "statistic needs more models, datasets or fractions than these results have.\n\n"
                    + markdown_table(pd.DataFrame(rows)))
    else:
        sec.not_shown.append("no headline statistic could be computed from these results")
    n_head = len(ctx.headline)
    if n_head:
        body.append(f"All {n_head} headline values are in `findings.json`.")
    sec.body = "\n\n".join(body)
    return sec
