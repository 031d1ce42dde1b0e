"""The plain-language verdict: a few sentences per model, each backed by one number.

Every verdict line is a row of the ``verdict`` table with the sentence and its
evidence: ``source`` (the table file it cites, ``report_settings.csv``),
``where`` (JSON filter on that table's columns; a list value means "any of"),
``column``, ``agg`` (``value`` = the single matching row, or ``sum`` /
``mean`` over the matching rows) and ``value``. Recomputing ``agg`` of
``column`` over the rows of ``source`` selected by ``where`` gives ``value``
(:func:`check_verdict` does exactly that). Lines that explain why something
is not known have ``level = "na"`` and no evidence.

Topics (the questions a user asks of their model):

* ``glance`` — mean AUROC / scaled ECE at the largest label fraction;
* ``data`` — the loader's split/data checks recorded in each results folder's ``summary.json``
  (``flags`` with ``source = "data"``: split overlap, zero rows, ...); no evidence column;
* ``probe`` — runs whose probe did not converge (``probe_converged`` False);
* ``collapse`` — below which label fraction the probe collapses in at least one seed: the
  prevalence-aware ``collapsed`` column (:mod:`prism_plugin.metrics.collapse`) where the runs have
  it, PRISM's ``degenerate`` (> 99 % of test predictions in one class) where they do not (the
  published tables); where the two differ, a line states PRISM's count too; a one-class test split
  is said as such, not as a collapse;
* ``scaling`` — cells where temperature scaling does not lower ECE (seed-mean
  scaled ECE ≥ raw; for transfer the temperature is fitted on the source); "lowered ECE" is never
  a plain success when the fitted temperature sits at a search bound or the test NLL rose after
  scaling (both said, each with its own line and count);
* ``transfer`` — transfer AUROC against the ~0.85 zone of the PRISM paper
  (Table 7: below it, more source labels worsened target ECE in 86-88 % of
  combinations; 8 % in [0.85, 0.95), 1 % above 0.95) for label-definition pairs (the release's
  ``transfer`` table, tasks with ``shift: label_definition``) and Camelyon17; a declared
  ``covariate`` / ``prior`` shift is said as such with its AUROC and ECE trend and no band; a
  transfer task without ``shift:`` is said to lack it (``shift`` = ``undeclared``), with no band;
* ``fewshot`` — how many labelled target samples the few-shot temperature
  needs to bring target ECE within 0.02 of the oracle ECE;
* uncertainty (runs with the bootstrap plugin's CI columns): the glance line quotes the test-set CI;
  a setting whose rarest test class has fewer than 10 samples gets a caution line (``glance``,
  column ``n_test_min_class``) and its ✅ lines of scaling / transfer / few-shot / collapse become
  cautions saying so; a ``scaling`` line per setting where the CI of (scaled − raw) ECE includes
  zero (``scaling_unsure_cells``); a transfer AUROC whose CI straddles a band edge is unsettled;
* ``metrics`` — for each metric a third-party plugin describes (``register_metrics`` with a
  ``direction``), its best label fraction per setting; these lines cite ``metric_cells.csv``
  (:mod:`prism_plugin.report.metric_table`).
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from prism_plugin.report.derived import (FEWSHOT_TOLERANCE, TABLE_LABELS, TRANSFER_TABLES, TRANSFER_ZONE, frame_label,
                                         label_definition_bands_apply, table_label)
from prism_plugin.tables import UNDECLARED

SOURCE = "report_settings.csv"
VERDICT_COLUMNS = ["model", "topic", "level", "table", "setting", "text", "source", "where", "column", "agg", "value"]
TOPICS = {
    "glance": "At a glance",
    "data": "Data checks",
    "probe": "Probe fit",
    "collapse": "Collapse",
    "scaling": "Temperature scaling",
    "transfer": "Transfer",
    "fewshot": "Few-shot target temperature",
    "metrics": "Plugin metrics",
}
METRIC_SOURCE = "metric_cells.csv"
IN_DISTRIBUTION = ("indomain", "camelyon17_indomain", "indomain_propval")
TRANSFER = TRANSFER_TABLES
#: What each declared shift kind means, said where the PRISM label-definition bands do not apply.
SHIFT_WORDS = {"covariate": "covariate shift (same labels; site, scanner or stain differ)",
               "prior": "prior shift (class proportions differ)"}
#: Settings listed one by one up to this many per (model, table); beyond, they are summarised.
MAX_LISTED = 8


def pct(f: float) -> str:
    """0.01 -> ``1 %``; 0.005 -> ``0.5 %``."""
    return f"{round(float(f) * 100.0, 6):g} %"


def setting_label(setting: Any) -> str:
    """A setting as the report shows it: ``src->tgt`` -> ``src → tgt``."""
    return str(setting).replace("->", " → ")


def _num(x: float, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _frac_list(text: str) -> str:
    vals = [v for v in str(text or "").split(";") if v]
    return ", ".join(pct(float(v)) for v in vals)


def _setting_name(setting: str, table: str = "") -> str:
    name = setting_label(setting)
    if table == "indomain_propval":
        return f"{name} (T from the proportional validation subset)"
    if table.startswith("camelyon17") and "->" not in str(setting):
        return f"Camelyon17 {name}"
    return name


def _row(model, topic, level, table, setting, text, where=None, column="", agg="", value=np.nan,
         source: str = SOURCE) -> dict[str, Any]:
    return {"model": model, "topic": topic, "level": level, "table": table, "setting": setting, "text": text,
            "source": source if where is not None else "", "where": json.dumps(where) if where is not None else "",
            "column": column, "agg": agg, "value": value}


def _where(table: str, model: str, settings) -> dict[str, Any]:
    settings = list(settings)
    return {"table": table, "model": model, "setting": settings[0] if len(settings) == 1 else settings}


def _blocks(ms: pd.DataFrame, table: str) -> list[pd.DataFrame]:
    """The settings of ``table``, the ``transfer`` table split into declared and undeclared shift kinds."""
    sub = ms.loc[ms["table"] == table]
    if table != "transfer" or "shift" not in sub.columns:
        return [sub]
    undeclared = sub["shift"].astype(str) == UNDECLARED
    return [b for b in (sub.loc[~undeclared], sub.loc[undeclared]) if len(b)]


def _glance(model: str, table: str, s: pd.DataFrame) -> list[dict]:
    label = frame_label(table, s)
    n = len(s)
    what = "setting" if n == 1 else f"{n} settings"
    out = []
    a = float(s["auroc_hi"].mean())
    fr = _frac_list(";".join(sorted({f"{v:g}" for v in s["fraction_max"]})))
    names = ", ".join(_setting_name(x) for x in s["setting"][:MAX_LISTED]) + (" …" if n > MAX_LISTED else "")
    ci_a = _ci(s["auroc_hi_ci_low"].iloc[0], s["auroc_hi_ci_high"].iloc[0]) if n == 1 and "auroc_hi_ci_low" in s else ""
    ci_a = f" (test-set CI {ci_a})" if ci_a else ""
    if table in TRANSFER:
        text = (f"{label} ({what}: {names}): mean target AUROC {_num(a)}{ci_a} at the largest source fraction ({fr}).")
    else:
        e = float(s["ece_scaled_fixed_hi"].mean())
        ci_e = _ci(s["ece_scaled_fixed_hi_ci_low"].iloc[0], s["ece_scaled_fixed_hi_ci_high"].iloc[0]) \
            if n == 1 and "ece_scaled_fixed_hi_ci_low" in s else ""
        text = (f"{label} ({what}: {names}): mean AUROC {_num(a)}{ci_a} at the largest label fraction ({fr}); "
                f"mean ECE after temperature scaling {_num(e)}" + (f" (test-set CI {ci_e})." if ci_e else "."))
    out.append(_row(model, "glance", "info", table, "", text, _where(table, model, s["setting"]), "auroc_hi",
                    "mean" if n > 1 else "value", a))
    return out


def _get(r, name: str, default: Any = np.nan) -> Any:
    """A report_settings field that older tables (or hand-made ones) may lack."""
    value = getattr(r, name, default)
    return default if value is None else value


def _n(value: Any) -> int:
    """A count that may be NaN (not recorded): 0 then."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0
    return 0 if math.isnan(v) else int(v)


def _signal(s: pd.DataFrame) -> str:
    return "prevalence" if "collapse_signal" in s.columns and (s["collapse_signal"] == "prevalence").any() else "prism"


def _collapse_rule(signal: str) -> str:
    if signal == "prevalence":
        return ("prevalence-aware rule: one class predicted beyond its test share and no other test class recalled "
                "above 5 %")
    return "PRISM rule: > 99 % of test predictions in one class"


def _collapse(model: str, table: str, s: pd.DataFrame) -> list[dict]:
    out = []
    label = frame_label(table, s)
    single = s.loc[s["single_class_test_cells"].fillna(0) > 0] if "single_class_test_cells" in s.columns else s.iloc[:0]
    for r in single.itertuples(index=False):
        n = _n(r.single_class_test_cells)
        text = (f"{_setting_name(r.setting, table)}: the test split has one class ({n} of {int(r.n_fractions)} cells): "
                "AUROC is undefined there and predicting that class is not a collapse; collapse is not judged.")
        out.append(_row(model, "collapse", "warn", table, r.setting, text, _where(table, model, [r.setting]),
                        "single_class_test_cells", "value", float(n)))
    s = s.loc[~s["setting"].isin(single["setting"])]
    signal = _signal(s)
    rule = _collapse_rule(signal)
    bad = s.loc[s["collapsed_cells"] > 0]
    good = s.loc[s["collapsed_cells"] == 0]
    for r in bad.itertuples(index=False):
        where = _where(table, model, [r.setting])
        at = _frac_list(r.collapsed_fractions)
        if math.isnan(r.collapse_free_from):
            text = (f"{_setting_name(r.setting, table)}: the probe collapses (in at least one seed; {rule}) at {at}, "
                    "up to the largest fraction: more labels alone do not fix it.")
            level = "bad"
        else:
            text = (f"{_setting_name(r.setting, table)}: the probe collapses (in at least one seed; {rule}) at {at}; "
                    f"from {pct(r.collapse_free_from)} of the labels on it does not.")
            level = "warn"
        out.append(_row(model, "collapse", level, table, r.setting, text, where, "largest_collapsed_fraction", "value",
                        float(r.largest_collapsed_fraction)))
    if len(good):
        names = ", ".join(_setting_name(x) for x in good["setting"])
        n_frac = int(good["n_fractions"].sum())
        text = f"{label}: no collapse on {names} ({n_frac} cells, no seed collapsed; {rule})."
        out.append(_row(model, "collapse", "good", table, "", text, _where(table, model, good["setting"]),
                        "collapsed_cells", "sum", int(good["collapsed_cells"].sum())))
    if signal == "prevalence" and "degenerate_cells" in s.columns:
        differ = s.loc[s["degenerate_cells"].notna() & (s["degenerate_cells"] != s["collapsed_cells"])]
        for r in differ.itertuples(index=False):
            k = _n(r.degenerate_cells)
            text = (f"{_setting_name(r.setting, table)}: PRISM's `degenerate` flag (> 99 % of test predictions in one "
                    f"class, whatever the test prevalence) marks {k} of {int(r.n_fractions)} cells, the "
                    f"prevalence-aware rule {int(r.collapsed_cells)}.")
            out.append(_row(model, "collapse", "info", table, r.setting, text, _where(table, model, [r.setting]),
                            "degenerate_cells", "value", float(k)))
    return out


def _probe(model: str, table: str, s: pd.DataFrame) -> list[dict]:
    """Non-converged probes: said per setting; one 'converged' line when every run converged."""
    if "not_converged_runs" not in s.columns or s["not_converged_runs"].isna().all():
        return []
    s = s.loc[s["not_converged_runs"].notna()]
    out = []
    label = frame_label(table, s)
    bad = s.loc[s["not_converged_runs"] > 0]
    for r in bad.itertuples(index=False):
        n, runs = _n(r.not_converged_runs), int(r.n_runs)
        text = (f"{_setting_name(r.setting, table)}: the probe did not converge (solver stopped at max_iter) in {n} of "
                f"{runs} runs ({_frac_list(r.not_converged_fractions)}): those numbers come from an unfinished fit; "
                "raise probe.max_iter or standardise the features.")
        out.append(_row(model, "probe", "bad" if n * 2 >= runs else "warn", table, r.setting, text,
                        _where(table, model, [r.setting]), "not_converged_runs", "value", float(n)))
    good = s.loc[s["not_converged_runs"] == 0]
    if len(good):
        names = ", ".join(_setting_name(x) for x in good["setting"])
        text = f"{label}: the probe converged in every run of {names} ({int(good['n_runs'].sum())} runs)."
        out.append(_row(model, "probe", "good", table, "", text, _where(table, model, good["setting"]),
                        "not_converged_runs", "sum", 0))
    return out


def _qualifier_counts(s: pd.DataFrame) -> tuple[int, int]:
    """(cells with T at a bound, cells with a worse test NLL after scaling) over ``s``."""
    t = int(s["t_bound_cells"].fillna(0).sum()) if "t_bound_cells" in s.columns else 0
    n = int(s["nll_worse_cells"].fillna(0).sum()) if "nll_worse_cells" in s.columns else 0
    return t, n


def _bound_words(side: str, t_word: str) -> str:
    sides = {"low": "the lower search bound", "high": "the upper search bound",
             "low+high": "a search bound (lower and upper)"}
    return f"{t_word} sits at {sides.get(str(side), 'a search bound')}"


def _qualifiers(model: str, table: str, s: pd.DataFrame, transfer: bool) -> list[dict]:
    """One line per setting with a bound-limited temperature, one per setting whose test NLL rose."""
    out = []
    t_word = "the source-fitted temperature" if transfer else "the fitted temperature"
    if "t_bound_cells" in s.columns:
        for r in s.loc[s["t_bound_cells"].fillna(0) > 0].itertuples(index=False):
            n = _n(r.t_bound_cells)
            text = (f"{_setting_name(r.setting, table)}: {_bound_words(_get(r, 't_bound_side', ''), t_word)} in {n} of "
                    f"{int(r.n_fractions)} label fractions ({_frac_list(r.t_bound_fractions)}; at least one seed): the "
                    "fit is bound-limited, so the scaled ECE is not the NLL optimum; widen temperature_bounds.")
            out.append(_row(model, "scaling", "warn", table, r.setting, text, _where(table, model, [r.setting]),
                            "t_bound_cells", "value", float(n)))
    if "nll_worse_cells" in s.columns:
        for r in s.loc[s["nll_worse_cells"].fillna(0) > 0].itertuples(index=False):
            n = _n(r.nll_worse_cells)
            text = (f"{_setting_name(r.setting, table)}: the test NLL got worse after scaling in {n} of "
                    f"{int(r.n_fractions)} label fractions ({_frac_list(r.nll_worse_fractions)}; at least one seed): "
                    f"{t_word} does not carry over to the test split there.")
            out.append(_row(model, "scaling", "warn", table, r.setting, text, _where(table, model, [r.setting]),
                            "nll_worse_cells", "value", float(n)))
    return out


def _scaling(model: str, table: str, s: pd.DataFrame) -> list[dict]:
    out = []
    label = frame_label(table, s)
    transfer = table in TRANSFER
    t_word = "the source-fitted temperature" if transfer else "temperature scaling"
    s = s.loc[s["scaling_cells"] > 0]
    bad = s.loc[s["scaling_not_helping_cells"] > 0]
    good = s.loc[s["scaling_not_helping_cells"] == 0]
    for r in bad.itertuples(index=False):
        where = _where(table, model, [r.setting])
        at = _frac_list(r.scaling_not_helping_fractions)
        n, tot = int(r.scaling_not_helping_cells), int(r.scaling_cells)
        effect = "made target ECE worse or no better" if transfer else "did not lower ECE"
        text = (f"{_setting_name(r.setting, table)}: {t_word} {effect} in {n} of {tot} label fractions ({at}; seed-mean "
                f"scaled ECE ≥ raw); worst at {pct(r.worst_scaling_fraction)}, {_num(r.worst_scaling_gap)} above raw.")
        level = "bad" if n * 2 >= tot else "warn"
        out.append(_row(model, "scaling", level, table, r.setting, text, where, "scaling_not_helping_cells", "value", n))
    if len(good):
        names = ", ".join(_setting_name(x) for x in good["setting"])
        n_bound, n_nll = _qualifier_counts(good)
        n_unsure = _n(good["scaling_unsure_cells"].sum()) if "scaling_unsure_cells" in good.columns else 0
        text = (f"{label}: {t_word} lowered ECE in every cell of {names} "
                f"({int(good['scaling_cells'].sum())} cells)")
        if n_bound or n_nll or n_unsure:
            why = [f"the temperature sits at a search bound in {n_bound}" if n_bound else "",
                   f"the test NLL rose after scaling in {n_nll}" if n_nll else "",
                   f"the test-set CI of the ECE change includes zero in {n_unsure}" if n_unsure else ""]
            text += (f", but not as a clean success: {' and '.join(w for w in why if w)} of them (see below).")
        else:
            text += "."
        out.append(_row(model, "scaling", "warn" if (n_bound or n_nll or n_unsure) else "good", table, "", text,
                        _where(table, model, good["setting"]), "scaling_not_helping_cells", "sum", 0))
    out.extend(_qualifiers(model, table, s, transfer))
    out.extend(_scaling_noise(model, table, s, transfer))
    return out


def _ci(lo: Any, hi: Any, digits: int = 3) -> str:
    """``"[lo, hi]"`` of a test-set CI; empty when not measured."""
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        return ""
    return "" if math.isnan(lo) or math.isnan(hi) else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def _scaling_noise(model: str, table: str, s: pd.DataFrame, transfer: bool) -> list[dict]:
    """One line per setting where the test-set CI of (scaled − raw) ECE includes zero in some cells:
    there the change temperature scaling made is not shown beyond test-set noise (either way)."""
    out = []
    if "scaling_unsure_cells" not in s.columns:
        return out
    t_word = "the source-fitted temperature" if transfer else "temperature scaling"
    for r in s.itertuples(index=False):
        n_up, n_down = _n(_get(r, "scaling_unsure_cells")), _n(_get(r, "scaling_not_helping_unsure_cells"))
        if not (n_up or n_down):
            continue
        tot = _n(_get(r, "scaling_ci_cells")) or int(r.scaling_cells)
        parts = []
        if n_up:
            parts.append(f"it lowered the seed-mean ECE in {n_up} label fraction{'s' if n_up > 1 else ''} "
                         f"({_frac_list(_get(r, 'scaling_unsure_fractions', ''))}) by less than the test set can "
                         "resolve")
        if n_down:
            parts.append(f"where it did not lower it ({n_down}), the rise is not beyond noise either")
        text = (f"{_setting_name(r.setting, table)}: the test-set CI of the ECE change by {t_word} (scaled − raw) "
                f"includes zero in {n_up + n_down} of {tot} label fractions: {'; '.join(parts)}.")
        out.append(_row(model, "scaling", "warn", table, r.setting, text, _where(table, model, [r.setting]),
                        "scaling_unsure_cells", "value", float(n_up)))
    return out


def _few_samples(model: str, table: str, s: pd.DataFrame) -> list[dict]:
    """One line per setting whose rarest test class has fewer than FEW_TEST_SAMPLES samples."""
    from prism_plugin.report.derived import FEW_TEST_SAMPLES

    out = []
    if "n_test_min_class" not in s.columns:
        return out
    for r in s.itertuples(index=False):
        n = _get(r, "n_test_min_class")
        if not (isinstance(n, (int, float)) and 0 < n < FEW_TEST_SAMPLES):
            continue
        ci = _ci(_get(r, "auroc_hi_ci_low"), _get(r, "auroc_hi_ci_high"))
        text = (f"{_setting_name(r.setting, table)}: the rarest test class has only {int(n)} sample"
                f"{'s' if int(n) != 1 else ''} (fewer than {FEW_TEST_SAMPLES}): every number and verdict line on "
                "this setting rests on few samples of that class"
                + (f" (AUROC at {pct(r.fraction_max)}: test-set CI {ci})" if ci else "")
                + "; add test samples of that class before acting on it.")
        out.append(_row(model, "glance", "warn", table, r.setting, text, _where(table, model, [r.setting]),
                        "n_test_min_class", "value", float(n)))
    return out


#: Topics whose "fine" lines become "caution" when they rest on few test samples of a class.
FEW_SAMPLE_TOPICS = ("scaling", "transfer", "fewshot", "collapse")


def _few_sample_caution(rows: list[dict], settings: pd.DataFrame) -> None:
    """A ✅ line of :data:`FEW_SAMPLE_TOPICS` about a setting with few test samples of a class is
    no plain success: it becomes a caution that says so (in place)."""
    from prism_plugin.report.derived import FEW_TEST_SAMPLES

    if "n_test_min_class" not in settings.columns:
        return
    few = settings.loc[(pd.to_numeric(settings["n_test_min_class"], errors="coerce") < FEW_TEST_SAMPLES)
                       & (pd.to_numeric(settings["n_test_min_class"], errors="coerce") > 0)]
    if few.empty:
        return
    index = {(str(r.model), str(r.table), str(r.setting)): int(r.n_test_min_class) for r in few.itertuples()}
    for row in rows:
        if row["level"] != "good" or row["topic"] not in FEW_SAMPLE_TOPICS or not row["where"]:
            continue
        where = json.loads(row["where"])
        names = where.get("setting")
        names = names if isinstance(names, list) else [names]
        hit = [index[k] for k in ((str(row["model"]), str(row["table"]), str(x)) for x in names) if k in index]
        if hit:
            row["level"] = "warn"
            row["text"] = (row["text"].rstrip(".") + f" — but it rests on few test samples (the rarest test class "
                           f"has {min(hit)}), so it is not a settled success.")


def _zone_text(auroc: float) -> tuple[str, str]:
    if auroc < TRANSFER_ZONE:
        return ("bad", f"does not transfer well (transfer AUROC {_num(auroc)}, the mean over source label fractions; "
                       f"below the ~{TRANSFER_ZONE:.2f} zone "
                       "under which, in the PRISM paper, more source labels worsened target ECE in 86–88 % of "
                       "combinations)")
    if auroc < 0.95:
        return ("warn", f"transfers moderately (transfer AUROC {_num(auroc)}, the mean over source label fractions; "
                        f"just above the ~{TRANSFER_ZONE:.2f} "
                        "zone; in the paper 8 % of combinations at this level had rising target ECE)")
    return ("good", f"transfers (transfer AUROC {_num(auroc)}, the mean over source label fractions; in the paper 1 % "
                    "of combinations at this level had "
                    "rising target ECE)")


def _shift_of(r) -> str:
    return str(_get(r, "shift", "") or "")


def _transfer_unbanded(model: str, table: str, s: pd.DataFrame) -> list[dict]:
    """Transfer lines of settings the PRISM label-definition bands do not apply to: a declared
    covariate or prior shift (said as such), or a transfer task without a declared shift kind."""
    out = []
    if len(s) > MAX_LISTED:
        a = float(s["transfer_auroc"].mean())
        rises = int(s["target_ece_rises"].astype(bool).sum())
        kind = _shift_of(next(s.itertuples(index=False)))
        what = SHIFT_WORDS.get(kind, "shift kind not declared")
        text = (f"{frame_label(table, s)} ({len(s)} pairs; {what}): mean target AUROC {_num(a)} over source label "
                f"fractions; target ECE rose with more source labels on {rises} of {len(s)}. Not compared with the "
                "PRISM label-definition bands" + (", which hold for label-definition pairs only." if kind in SHIFT_WORDS
                                                  else _UNDECLARED_FIX))
        out.append(_row(model, "transfer", "info" if kind in SHIFT_WORDS else "warn", table, "", text,
                        _where(table, model, s["setting"]), "transfer_auroc", "mean", a))
        return out
    for r in s.itertuples(index=False):
        kind = _shift_of(r)
        direction = "rose" if r.target_ece_delta > 0 else "fell"
        trend = (f"raw target ECE {direction} by {_num(abs(r.target_ece_delta))} from {pct(r.fraction_min)} to "
                 f"{pct(r.fraction_max)} source labels")
        if kind in SHIFT_WORDS:
            text = (f"{_setting_name(r.setting)} ({SHIFT_WORDS[kind]}): transfer AUROC {_num(float(r.transfer_auroc))} "
                    f"(mean over source label fractions); {trend}. The PRISM label-definition bands (~"
                    f"{TRANSFER_ZONE:.2f} zone) are not the yardstick of a {kind} shift and are not applied.")
            level = "info"
        else:
            text = (f"{_setting_name(r.setting)}: shift kind not declared — transfer AUROC "
                    f"{_num(float(r.transfer_auroc))} (mean over source label fractions); {trend}. Not compared with "
                    "the PRISM label-definition bands" + _UNDECLARED_FIX)
            level = "warn"
        out.append(_row(model, "transfer", level, table, r.setting, text, _where(table, model, [r.setting]),
                        "transfer_auroc", "value", float(r.transfer_auroc)))
    return out


_UNDECLARED_FIX = ("; add `shift: covariate`, `shift: label_definition` or `shift: prior` to the transfer task "
                   "file to say what differs between source and target.")


def _transfer(model: str, table: str, s: pd.DataFrame) -> list[dict]:
    out = []
    s = s.loc[s["transfer_auroc"].notna()]
    if s.empty:
        return out
    shifts = s["shift"].astype(str) if "shift" in s.columns else pd.Series("", index=s.index)
    banded = np.array([label_definition_bands_apply(table, k) for k in shifts], dtype=bool) \
        if table in ("transfer", "camelyon17_transfer") else np.zeros(len(s), dtype=bool)
    if not banded.all():
        out.extend(_transfer_unbanded(model, table, s.loc[~banded]))
        s = s.loc[banded]
        if s.empty:
            return out
    if len(s) > MAX_LISTED:  # e.g. the 20 Camelyon17 hospital pairs: one line for all
        a = float(s["transfer_auroc"].mean())
        level, zone = _zone_text(a)
        rises = int(s["target_ece_rises"].astype(bool).sum())
        below = int((s["transfer_auroc"] < TRANSFER_ZONE).sum())
        text = (f"{TABLE_LABELS.get(table, table)} ({len(s)} pairs): on average the probe {zone}; {below} of "
                f"{len(s)} pairs are below {TRANSFER_ZONE:.2f}, and target ECE rose with more source labels on "
                f"{rises} of {len(s)}.")
        out.append(_row(model, "transfer", level, table, "", text, _where(table, model, s["setting"]),
                        "transfer_auroc", "mean", a))
        return out
    for r in s.itertuples(index=False):
        level, zone = _zone_text(float(r.transfer_auroc))
        direction = "rose" if r.target_ece_delta > 0 else "fell"
        lo, hi = _get(r, "transfer_auroc_ci_low"), _get(r, "transfer_auroc_ci_high")
        ci = _ci(lo, hi)
        settled = ""
        if ci:
            edges = [z for z in (TRANSFER_ZONE, 0.95) if float(lo) < z <= float(hi)]
            if edges:
                settled = (f"; its test-set CI {ci} straddles {edges[0]:.2f}, so the band is not settled by this "
                           "test set")
                level = "warn" if level == "good" else level
            else:
                settled = f"; test-set CI {ci}"
        text = (f"{_setting_name(r.setting)}: the probe {zone}{settled}; here raw target ECE {direction} by "
                f"{_num(abs(r.target_ece_delta))} from {pct(r.fraction_min)} to {pct(r.fraction_max)} source labels.")
        out.append(_row(model, "transfer", level, table, r.setting, text, _where(table, model, [r.setting]),
                        "transfer_auroc", "value", float(r.transfer_auroc)))
    return out


def _fewshot(model: str, table: str, s: pd.DataFrame, tolerance: float) -> list[dict]:
    out = []
    s = s.loc[s["transfer_auroc"].notna()]
    measured = s.loc[s["fewshot_ks"].fillna("").astype(str) != ""]
    if measured.empty:
        return out
    for r in measured.itertuples(index=False):
        ks = [int(k) for k in str(r.fewshot_ks).split(";") if k]
        where = _where(table, model, [r.setting])
        if math.isnan(r.fewshot_k_needed):
            text = (f"{_setting_name(r.setting)}: even {max(ks)} labelled target samples do not bring the few-shot "
                    f"temperature's target ECE within {tolerance:g} of the oracle ECE at {pct(r.fraction_max)} "
                    "source labels — recalibrating this site needs more target labels.")
            level = "bad"
        else:
            k = int(r.fewshot_k_needed)
            text = (f"{_setting_name(r.setting)}: {k} labelled target samples bring the few-shot temperature's "
                    f"target ECE within {tolerance:g} of the oracle ECE at {pct(r.fraction_max)} source labels "
                    f"(tested K = {', '.join(map(str, ks))}).")
            level = "good" if k <= 16 else "warn"
        out.append(_row(model, "fewshot", level, table, r.setting, text, where, "fewshot_k_needed", "value",
                        r.fewshot_k_needed))
    return out


def _plugin_metrics(model: str, cells: pd.DataFrame) -> list[dict]:
    """One line per (table, setting, metric) of a third-party metric with a direction: its best fraction."""
    from prism_plugin.plugins import BUILTIN_ORIGIN

    out: list[dict] = []
    mine = cells.loc[(cells["model"].astype(str) == str(model)) & (cells["origin"] != BUILTIN_ORIGIN)
                     & cells["direction"].isin(["higher", "lower"])]
    for (table, setting, metric), g in mine.groupby(["table", "setting", "metric"], sort=False):
        g = g.loc[pd.to_numeric(g["value"], errors="coerce").notna()].sort_values("fraction", kind="stable")
        if g.empty:
            continue
        values = pd.to_numeric(g["value"])
        first = g.iloc[0]
        higher = first["direction"] == "higher"
        best = g.loc[values.idxmax() if higher else values.idxmin()]
        label = TABLE_LABELS.get(table, table)
        where_setting = f" on {_setting_name(setting, table)}" if str(setting) else ""
        better = "higher" if higher else "lower"
        how = "seed mean" if first["aggregation"] == "mean" else f"seed {first['aggregation']}"
        text = (f"{first['display']} ({better} is better; from {first['origin']}), {label}{where_setting}: best at "
                f"{pct(best['fraction'])} labels ({how} {_num(float(best['value']), 4)}"
                + (f"; {_num(float(g.iloc[-1]['value']), 4)} at {pct(g.iloc[-1]['fraction'])}" if len(g) > 1 and
                   g.index[-1] != best.name else "") + ").")
        where = {"table": table, "model": model, "setting": setting, "metric": metric,
                 "fraction": float(best["fraction"])}
        out.append(_row(model, "metrics", "info", table, setting, text, where, "value", "value",
                        float(best["value"]), source=METRIC_SOURCE))
    return out


def _data_lines(model: str, flags: list[Mapping[str, Any]]) -> list[dict]:
    """The loader's split/data checks of this model's results (``summary.json`` flags, source "data")."""
    out = []
    seen = set()
    for f in flags:
        if str(f.get("model", model)) != str(model) or f.get("source") != "data":
            continue
        task = str(f.get("task", ""))
        msg = " ".join(str(f.get("message", "")).split())
        if (task, msg) in seen:
            continue
        seen.add((task, msg))
        level = {"warning": "warn", "allowed": "info"}.get(str(f.get("level")), "info")
        head = f"{task}: " if task and f"task {task}" not in msg else ""
        tail = " (explicitly allowed by the task)" if f.get("level") == "allowed" else ""
        out.append(_row(model, "data", level, "", "", f"{head}{msg}{tail}"))
    return out


def results_flags(paths) -> list[dict[str, Any]]:
    """The ``flags`` of every ``summary.json`` under ``paths`` (results folders), each with the
    folder's ``model`` and ``task``; unreadable or flag-less summaries add nothing."""
    from pathlib import Path

    from prism_plugin.results import summary_dirs

    out: list[dict[str, Any]] = []
    for d in summary_dirs([Path(p) for p in paths]):
        try:
            data = json.loads((d / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("flags"), list):
            continue
        for f in data["flags"]:
            if isinstance(f, dict):
                out.append({**f, "model": data.get("model", ""), "task": data.get("task", "")})
    return out


def build_verdict(settings: pd.DataFrame | None, *, tolerance: float = FEWSHOT_TOLERANCE,
                  metric_cells: pd.DataFrame | None = None,
                  flags: list[Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """The verdict table from a ``report_settings`` table (see the module docstring); with
    ``metric_cells`` (:func:`prism_plugin.report.metric_table.metric_cells`), one more line per
    third-party metric and setting citing its best fraction; with ``flags`` (the ``summary.json``
    flags of the results, each with ``model`` and ``task``), one line per data check."""
    rows: list[dict] = []
    if settings is None or settings.empty:
        return pd.DataFrame(columns=VERDICT_COLUMNS)
    models = list(dict.fromkeys(settings["model"]))
    for model in models:
        ms = settings.loc[settings["model"] == model]
        tables = list(dict.fromkeys(ms["table"]))
        for table in tables:
            if table != "indomain_propval" or "indomain" not in tables:
                for block in _blocks(ms, table):
                    rows.extend(_glance(model, table, block))
                    rows.extend(_few_samples(model, table, block))
        rows.extend(_data_lines(model, list(flags or [])))
        for table in tables:
            if table == "indomain_propval" and "indomain" in tables:
                continue  # same probes as the in-distribution grid
            for block in _blocks(ms, table):
                rows.extend(_probe(model, table, block))
        for table in tables:
            if table == "indomain_propval" and "indomain" in tables:
                continue  # same probes as the in-distribution grid; only its temperature differs
            if table in IN_DISTRIBUTION or (table in TRANSFER and table != "camelyon17_transfer"):
                for block in _blocks(ms, table):
                    rows.extend(_collapse(model, table, block))
            elif table == "camelyon17_transfer":
                sub = ms.loc[ms["table"] == table]
                n_bad = int((sub["collapsed_cells"] > 0).sum())
                text = (f"{TABLE_LABELS[table]}: the probe collapsed on {n_bad} of {len(sub)} hospital pairs "
                        f"({int(sub['collapsed_cells'].sum())} cells with a collapsed seed).")
                rows.append(_row(model, "collapse", "warn" if n_bad else "good", table, "", text,
                                 _where(table, model, sub["setting"]), "collapsed_cells", "sum",
                                 int(sub["collapsed_cells"].sum())))
        for table in tables:
            sub = ms.loc[ms["table"] == table]
            if table == "camelyon17_transfer" and len(sub) > MAX_LISTED:
                sub = sub.loc[sub["scaling_cells"] > 0]
                n_bad = int(sub["scaling_not_helping_cells"].sum())
                n_tot = int(sub["scaling_cells"].sum())
                text = (f"{TABLE_LABELS[table]}: the source-fitted temperature made target ECE worse or no better "
                        f"in {n_bad} of {n_tot} cells (seed-mean scaled ECE ≥ raw).")
                n_bound, n_nll = _qualifier_counts(sub)
                rows.append(_row(model, "scaling", "warn" if (n_bad or n_bound or n_nll) else "good", table, "", text,
                                 _where(table, model, sub["setting"]), "scaling_not_helping_cells", "sum", n_bad))
                for column, n, what in (("t_bound_cells", n_bound, "the source-fitted temperature sits at a search "
                                         "bound (bound-limited fit)"),
                                        ("nll_worse_cells", n_nll, "the target NLL got worse after scaling")):
                    if n:
                        rows.append(_row(model, "scaling", "warn", table, "",
                                         f"{TABLE_LABELS[table]}: {what} in {n} of {n_tot} cells.",
                                         _where(table, model, sub["setting"]), column, "sum", n))
            else:
                for block in _blocks(ms, table):
                    rows.extend(_scaling(model, table, block))
        has_transfer = any(t in TRANSFER for t in tables)
        for table in tables:
            if table in TRANSFER:
                rows.extend(_transfer(model, table, ms.loc[ms["table"] == table]))
        if not has_transfer:
            rows.append(_row(model, "transfer", "na", "", "",
                             "Transfer not measured: these results hold no transfer task for this model "
                             "(run a transfer task, e.g. prism_demo_transfer, to see whether the probe transfers)."))
        fs_rows = []
        for table in tables:
            if table in TRANSFER:
                fs_rows.extend(_fewshot(model, table, ms.loc[ms["table"] == table], tolerance))
        if fs_rows:
            rows.extend(fs_rows)
        elif has_transfer:
            rows.append(_row(model, "fewshot", "na", "", "",
                             "Few-shot target temperature not measured: the transfer runs have no "
                             "temperature_fewshot_k<K> / ece_scaled_fewshot_k<K> columns (the temperature-transfer "
                             "plugin writes them), so the number of target labels a per-site recalibration needs is "
                             "unknown."))
        if metric_cells is not None and not metric_cells.empty:
            rows.extend(_plugin_metrics(model, metric_cells))
    _few_sample_caution(rows, settings)
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def _select(table: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    mask = pd.Series(True, index=table.index)
    for col, val in where.items():
        values = val if isinstance(val, list) else [val]
        mask &= table[col].astype(str).isin([str(v) for v in values])
    return table.loc[mask]


def evidence_value(table: pd.DataFrame, where: Mapping[str, Any], column: str, agg: str) -> float:
    """Recompute a verdict value from the table it cites."""
    rows = _select(table, where)
    col = pd.to_numeric(rows[column], errors="coerce")
    if agg == "value":
        if len(rows) != 1:
            raise ValueError(f"verdict cites {where} in {column}: {len(rows)} rows match, expected 1")
        return float(col.iloc[0])
    if agg == "sum":
        return float(col.sum())
    if agg == "mean":
        return float(col.mean())
    raise ValueError(f"unknown aggregation {agg!r}")


def check_verdict(verdict: pd.DataFrame, tables: Mapping[str, pd.DataFrame], atol: float = 1e-12) -> list[str]:
    """Problems found when recomputing each verdict value from its cited table (empty = all match)."""
    problems = []
    for r in verdict.itertuples(index=False):
        if not r.source:
            continue
        stem = r.source[:-4] if r.source.endswith(".csv") else r.source
        if stem not in tables:
            problems.append(f"{r.text[:60]}: cites {r.source}, which is absent")
            continue
        got = evidence_value(tables[stem], json.loads(r.where), r.column, r.agg)
        want = float(r.value)
        if not ((math.isnan(got) and math.isnan(want)) or abs(got - want) <= atol):
            problems.append(f"{r.text[:60]}: {r.column} = {got}, verdict says {want}")
    return problems


__all__ = ["TOPICS", "results_flags", "VERDICT_COLUMNS", "build_verdict", "check_verdict", "evidence_value", "pct", "setting_label"]
