"""The plain-language verdict: a few sentences per model, each backed by one number.

Every verdict line is a row of the ``verdict`` table with the sentence and its evidence: ``source`` (the table file
it cites, ``report_settings.csv``), ``where`` (JSON filter on that table's columns; a list value means "any of"),
``column``, ``agg`` (``value`` = the single matching row, or ``sum`` / ``mean`` over the matching rows) and
``value``. Recomputing ``agg`` of ``column`` over the rows of ``source`` selected by ``where`` gives ``value``
(``check_verdict`` does exactly that). Lines that explain why something is not known have ``level = "na"`` and no
evidence.

Topics (:data:`TOPICS`, the questions a user asks of their model): glance, data checks, probe fit,
collapse, temperature scaling, transfer (against the PRISM label-definition zone where it applies,
:mod:`prism_plugin.report.verdict_transfer`), few-shot target temperature, plugin metrics. The
evidence columns and :func:`~prism_plugin.report.verdict_rows.check_verdict` are in
:mod:`prism_plugin.report.verdict_rows`.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.registrars import TableKind
from prism_plugin.report.derived import FEWSHOT_TOLERANCE, report_kinds
from prism_plugin.report.verdict_rows import (MAX_LISTED, VERDICT_COLUMNS, ci_range, count_of, frac_list, get_value,
                                              kind_label, num, pct, setting_name, verdict_row, where_of)
from prism_plugin.report.verdict_transfer import fewshot_lines, transfer_lines
from prism_plugin.tables import UNDECLARED

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


def _blocks(ms: pd.DataFrame, table: str) -> list[pd.DataFrame]:
    """The settings of ``table``, the ``transfer`` table split into declared and undeclared shift kinds."""
    sub = ms.loc[ms["table"] == table]
    if table != "transfer" or "shift" not in sub.columns:
        return [sub]
    undeclared = sub["shift"].astype(str) == UNDECLARED
    return [b for b in (sub.loc[~undeclared], sub.loc[undeclared]) if len(b)]


def _glance(model: str, spec: TableKind, s: pd.DataFrame) -> list[dict]:
    table = spec.name
    label = kind_label(spec, s)
    n = len(s)
    what = "setting" if n == 1 else f"{n} settings"
    out = []
    a = float(s["auroc_hi"].mean())
    fr = frac_list(";".join(sorted({f"{v:g}" for v in s["fraction_max"]})))
    names = ", ".join(setting_name(x) for x in s["setting"][:MAX_LISTED]) + (" …" if n > MAX_LISTED else "")
    ci_a = ci_range(s["auroc_hi_ci_low"].iloc[0], s["auroc_hi_ci_high"].iloc[0]) if n == 1 and "auroc_hi_ci_low" in s else ""
    ci_a = f" (test-set CI {ci_a})" if ci_a else ""
    if spec.transfer:
        text = (f"{label} ({what}: {names}): mean target AUROC {num(a)}{ci_a} at the largest source fraction ({fr}).")
    else:
        e = float(s["ece_scaled_fixed_hi"].mean())
        ci_e = ci_range(s["ece_scaled_fixed_hi_ci_low"].iloc[0], s["ece_scaled_fixed_hi_ci_high"].iloc[0]) \
            if n == 1 and "ece_scaled_fixed_hi_ci_low" in s else ""
        text = (f"{label} ({what}: {names}): mean AUROC {num(a)}{ci_a} at the largest label fraction ({fr}); "
                f"mean ECE after temperature scaling {num(e)}" + (f" (test-set CI {ci_e})." if ci_e else "."))
    out.append(verdict_row(model, "glance", "info", table, "", text, where_of(table, model, s["setting"]), "auroc_hi",
                    "mean" if n > 1 else "value", a))
    return out


def _signal(s: pd.DataFrame) -> str:
    return "prevalence" if "collapse_signal" in s.columns and (s["collapse_signal"] == "prevalence").any() else "prism"


def _collapse_rule(signal: str) -> str:
    if signal == "prevalence":
        return ("prevalence-aware rule: one class predicted beyond its test share and no other test class recalled "
                "above 5 %")
    return "PRISM rule: > 99 % of test predictions in one class"


def _collapse(model: str, spec: TableKind, s: pd.DataFrame) -> list[dict]:
    table = spec.name
    out = []
    label = kind_label(spec, s)
    single = s.loc[s["single_class_test_cells"].fillna(0) > 0] if "single_class_test_cells" in s.columns else s.iloc[:0]
    for r in single.itertuples(index=False):
        n = count_of(r.single_class_test_cells)
        text = (f"{setting_name(r.setting, spec)}: the test split has one class ({n} of {int(r.n_fractions)} cells): "
                "AUROC is undefined there and predicting that class is not a collapse; collapse is not judged.")
        out.append(verdict_row(model, "collapse", "warn", table, r.setting, text, where_of(table, model, [r.setting]),
                        "single_class_test_cells", "value", float(n)))
    s = s.loc[~s["setting"].isin(single["setting"])]
    signal = _signal(s)
    rule = _collapse_rule(signal)
    bad = s.loc[s["collapsed_cells"] > 0]
    good = s.loc[s["collapsed_cells"] == 0]
    for r in bad.itertuples(index=False):
        where = where_of(table, model, [r.setting])
        at = frac_list(r.collapsed_fractions)
        if math.isnan(r.collapse_free_from):
            text = (f"{setting_name(r.setting, spec)}: the probe collapses (in at least one seed; {rule}) at {at}, "
                    "up to the largest fraction: more labels alone do not fix it.")
            level = "bad"
        else:
            text = (f"{setting_name(r.setting, spec)}: the probe collapses (in at least one seed; {rule}) at {at}; "
                    f"from {pct(r.collapse_free_from)} of the labels on it does not.")
            level = "warn"
        out.append(verdict_row(model, "collapse", level, table, r.setting, text, where, "largest_collapsed_fraction", "value",
                        float(r.largest_collapsed_fraction)))
    if len(good):
        names = ", ".join(setting_name(x) for x in good["setting"])
        n_frac = int(good["n_fractions"].sum())
        text = f"{label}: no collapse on {names} ({n_frac} cells, no seed collapsed; {rule})."
        out.append(verdict_row(model, "collapse", "good", table, "", text, where_of(table, model, good["setting"]),
                        "collapsed_cells", "sum", int(good["collapsed_cells"].sum())))
    if signal == "prevalence" and "degenerate_cells" in s.columns:
        differ = s.loc[s["degenerate_cells"].notna() & (s["degenerate_cells"] != s["collapsed_cells"])]
        for r in differ.itertuples(index=False):
            k = count_of(r.degenerate_cells)
            text = (f"{setting_name(r.setting, spec)}: PRISM's `degenerate` flag (> 99 % of test predictions in one "
                    f"class, whatever the test prevalence) marks {k} of {int(r.n_fractions)} cells, the "
                    f"prevalence-aware rule {int(r.collapsed_cells)}.")
            out.append(verdict_row(model, "collapse", "info", table, r.setting, text, where_of(table, model, [r.setting]),
                            "degenerate_cells", "value", float(k)))
    return out


def _probe(model: str, spec: TableKind, s: pd.DataFrame) -> list[dict]:
    """Non-converged probes: said per setting; one 'converged' line when every run converged."""
    table = spec.name
    if "not_converged_runs" not in s.columns or s["not_converged_runs"].isna().all():
        return []
    s = s.loc[s["not_converged_runs"].notna()]
    out = []
    label = kind_label(spec, s)
    bad = s.loc[s["not_converged_runs"] > 0]
    for r in bad.itertuples(index=False):
        n, runs = count_of(r.not_converged_runs), int(r.n_runs)
        text = (f"{setting_name(r.setting, spec)}: the probe did not converge (solver stopped at max_iter) in {n} of "
                f"{runs} runs ({frac_list(r.not_converged_fractions)}): those numbers come from an unfinished fit; "
                "raise probe.max_iter or standardise the features.")
        out.append(verdict_row(model, "probe", "bad" if n * 2 >= runs else "warn", table, r.setting, text,
                        where_of(table, model, [r.setting]), "not_converged_runs", "value", float(n)))
    good = s.loc[s["not_converged_runs"] == 0]
    if len(good):
        names = ", ".join(setting_name(x) for x in good["setting"])
        text = f"{label}: the probe converged in every run of {names} ({int(good['n_runs'].sum())} runs)."
        out.append(verdict_row(model, "probe", "good", table, "", text, where_of(table, model, good["setting"]),
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


def _qualifiers(model: str, spec: TableKind, s: pd.DataFrame, transfer: bool) -> list[dict]:
    """One line per setting with a bound-limited temperature, one per setting whose test NLL rose."""
    table = spec.name
    out = []
    t_word = "the source-fitted temperature" if transfer else "the fitted temperature"
    if "t_bound_cells" in s.columns:
        for r in s.loc[s["t_bound_cells"].fillna(0) > 0].itertuples(index=False):
            n = count_of(r.t_bound_cells)
            text = (f"{setting_name(r.setting, spec)}: {_bound_words(get_value(r, 't_bound_side', ''), t_word)} in {n} of "
                    f"{int(r.n_fractions)} label fractions ({frac_list(r.t_bound_fractions)}; at least one seed): the "
                    "fit is bound-limited, so the scaled ECE is not the NLL optimum; widen temperature_bounds.")
            out.append(verdict_row(model, "scaling", "warn", table, r.setting, text, where_of(table, model, [r.setting]),
                            "t_bound_cells", "value", float(n)))
    if "nll_worse_cells" in s.columns:
        for r in s.loc[s["nll_worse_cells"].fillna(0) > 0].itertuples(index=False):
            n = count_of(r.nll_worse_cells)
            text = (f"{setting_name(r.setting, spec)}: the test NLL got worse after scaling in {n} of "
                    f"{int(r.n_fractions)} label fractions ({frac_list(r.nll_worse_fractions)}; at least one seed): "
                    f"{t_word} does not carry over to the test split there.")
            out.append(verdict_row(model, "scaling", "warn", table, r.setting, text, where_of(table, model, [r.setting]),
                            "nll_worse_cells", "value", float(n)))
    return out


def _scaling(model: str, spec: TableKind, s: pd.DataFrame) -> list[dict]:
    table = spec.name
    out = []
    label = kind_label(spec, s)
    transfer = spec.transfer
    t_word = "the source-fitted temperature" if transfer else "temperature scaling"
    s = s.loc[s["scaling_cells"] > 0]
    bad = s.loc[s["scaling_not_helping_cells"] > 0]
    good = s.loc[s["scaling_not_helping_cells"] == 0]
    for r in bad.itertuples(index=False):
        where = where_of(table, model, [r.setting])
        at = frac_list(r.scaling_not_helping_fractions)
        n, tot = int(r.scaling_not_helping_cells), int(r.scaling_cells)
        effect = "made target ECE worse or no better" if transfer else "did not lower ECE"
        text = (f"{setting_name(r.setting, spec)}: {t_word} {effect} in {n} of {tot} label fractions ({at}; seed-mean "
                f"scaled ECE ≥ raw); worst at {pct(r.worst_scaling_fraction)}, {num(r.worst_scaling_gap)} above raw.")
        level = "bad" if n * 2 >= tot else "warn"
        out.append(verdict_row(model, "scaling", level, table, r.setting, text, where, "scaling_not_helping_cells", "value", n))
    if len(good):
        names = ", ".join(setting_name(x) for x in good["setting"])
        n_bound, n_nll = _qualifier_counts(good)
        n_unsure = count_of(good["scaling_unsure_cells"].sum()) if "scaling_unsure_cells" in good.columns else 0
        text = (f"{label}: {t_word} lowered ECE in every cell of {names} "
                f"({int(good['scaling_cells'].sum())} cells)")
        if n_bound or n_nll or n_unsure:
            why = [f"the temperature sits at a search bound in {n_bound}" if n_bound else "",
                   f"the test NLL rose after scaling in {n_nll}" if n_nll else "",
                   f"the test-set CI of the ECE change includes zero in {n_unsure}" if n_unsure else ""]
            text += (f", but not as a clean success: {' and '.join(w for w in why if w)} of them (see below).")
        else:
            text += "."
        out.append(verdict_row(model, "scaling", "warn" if (n_bound or n_nll or n_unsure) else "good", table, "", text,
                        where_of(table, model, good["setting"]), "scaling_not_helping_cells", "sum", 0))
    out.extend(_qualifiers(model, spec, s, transfer))
    out.extend(_scaling_noise(model, spec, s, transfer))
    return out


def _scaling_noise(model: str, spec: TableKind, s: pd.DataFrame, transfer: bool) -> list[dict]:
    """One line per setting where the test-set CI of (scaled − raw) ECE includes zero in some cells:
    there the change temperature scaling made is not shown beyond test-set noise (either way)."""
    table = spec.name
    out = []
    if "scaling_unsure_cells" not in s.columns:
        return out
    t_word = "the source-fitted temperature" if transfer else "temperature scaling"
    for r in s.itertuples(index=False):
        n_up, n_down = count_of(get_value(r, "scaling_unsure_cells")), count_of(get_value(r, "scaling_not_helping_unsure_cells"))
        if not (n_up or n_down):
            continue
        tot = count_of(get_value(r, "scaling_ci_cells")) or int(r.scaling_cells)
        parts = []
        if n_up:
            parts.append(f"it lowered the seed-mean ECE in {n_up} label fraction{'s' if n_up > 1 else ''} "
                         f"({frac_list(get_value(r, 'scaling_unsure_fractions', ''))}) by less than the test set can "
                         "resolve")
        if n_down:
            parts.append(f"where it did not lower it ({n_down}), the rise is not beyond noise either")
        text = (f"{setting_name(r.setting, spec)}: the test-set CI of the ECE change by {t_word} (scaled − raw) "
                f"includes zero in {n_up + n_down} of {tot} label fractions: {'; '.join(parts)}.")
        out.append(verdict_row(model, "scaling", "warn", table, r.setting, text, where_of(table, model, [r.setting]),
                        "scaling_unsure_cells", "value", float(n_up)))
    return out


def _few_samples(model: str, spec: TableKind, s: pd.DataFrame) -> list[dict]:
    """One line per setting whose rarest test class has fewer than FEW_TEST_SAMPLES samples."""
    table = spec.name
    from prism_plugin.report.derived import FEW_TEST_SAMPLES

    out = []
    if "n_test_min_class" not in s.columns:
        return out
    for r in s.itertuples(index=False):
        n = get_value(r, "n_test_min_class")
        if not (isinstance(n, (int, float)) and 0 < n < FEW_TEST_SAMPLES):
            continue
        ci = ci_range(get_value(r, "auroc_hi_ci_low"), get_value(r, "auroc_hi_ci_high"))
        text = (f"{setting_name(r.setting, spec)}: the rarest test class has only {int(n)} sample"
                f"{'s' if int(n) != 1 else ''} (fewer than {FEW_TEST_SAMPLES}): every number and verdict line on "
                "this setting rests on few samples of that class"
                + (f" (AUROC at {pct(r.fraction_max)}: test-set CI {ci})" if ci else "")
                + "; add test samples of that class before acting on it.")
        out.append(verdict_row(model, "glance", "warn", table, r.setting, text, where_of(table, model, [r.setting]),
                        "n_test_min_class", "value", float(n)))
    return out


#: Topics whose "fine" lines become "caution" when they rest on few test samples of a class.
FEW_SAMPLE_TOPICS = ("scaling", "transfer", "fewshot", "collapse")


def _few_sample_caution(rows: list[dict], settings: pd.DataFrame) -> None:
    """A ✅ line of :data:`FEW_SAMPLE_TOPICS` about a setting with few test samples of a class is
    no plain success: it becomes a caution that says so (in place)."""
    import pandas as pd
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


def _plugin_metrics(model: str, cells: pd.DataFrame, kind_of) -> list[dict]:
    """One line per (table, setting, metric) of a third-party metric with a direction: its best fraction."""
    import pandas as pd
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
        spec = kind_of(table)
        where_setting = f" on {setting_name(setting, spec)}" if str(setting) else ""
        better = "higher" if higher else "lower"
        how = "seed mean" if first["aggregation"] == "mean" else f"seed {first['aggregation']}"
        text = (f"{first['display']} ({better} is better; from {first['origin']}), {spec.label}{where_setting}: best at "
                f"{pct(best['fraction'])} labels ({how} {num(float(best['value']), 4)}"
                + (f"; {num(float(g.iloc[-1]['value']), 4)} at {pct(g.iloc[-1]['fraction'])}" if len(g) > 1 and
                   g.index[-1] != best.name else "") + ").")
        where = {"table": table, "model": model, "setting": setting, "metric": metric,
                 "fraction": float(best["fraction"])}
        out.append(verdict_row(model, "metrics", "info", table, setting, text, where, "value", "value",
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
        out.append(verdict_row(model, "data", level, "", "", f"{head}{msg}{tail}"))
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


def _grid_scaling(model: str, spec: TableKind, sub: pd.DataFrame) -> list[dict]:
    """The scaling lines of a grid of many settings (Camelyon17's hospital pairs): one per question."""
    table = spec.name
    sub = sub.loc[sub["scaling_cells"] > 0]
    n_bad = int(sub["scaling_not_helping_cells"].sum())
    n_tot = int(sub["scaling_cells"].sum())
    text = (f"{spec.label}: the source-fitted temperature made target ECE worse or no better "
            f"in {n_bad} of {n_tot} cells (seed-mean scaled ECE ≥ raw).")
    n_bound, n_nll = _qualifier_counts(sub)
    rows = [verdict_row(model, "scaling", "warn" if (n_bad or n_bound or n_nll) else "good", table, "", text,
                 where_of(table, model, sub["setting"]), "scaling_not_helping_cells", "sum", n_bad)]
    for column, n, what in (("t_bound_cells", n_bound, "the source-fitted temperature sits at a search "
                             "bound (bound-limited fit)"),
                            ("nll_worse_cells", n_nll, "the target NLL got worse after scaling")):
        if n:
            rows.append(verdict_row(model, "scaling", "warn", table, "", f"{spec.label}: {what} in {n} of {n_tot} cells.",
                             where_of(table, model, sub["setting"]), column, "sum", n))
    return rows


def build_verdict(settings: pd.DataFrame | None, *, tolerance: float = FEWSHOT_TOLERANCE,
                  metric_cells: pd.DataFrame | None = None,
                  flags: list[Mapping[str, Any]] | None = None, kinds: Mapping[str, TableKind] | None = None) -> pd.DataFrame:
    """The verdict table from a ``report_settings`` table (see the module docstring); with
    ``metric_cells`` (:func:`prism_plugin.report.metric_table.metric_cells`), one more line per
    third-party metric and setting citing its best fraction; with ``flags`` (the ``summary.json``
    flags of the results, each with ``model`` and ``task``), one line per data check. ``kinds``: the
    table kinds (default: the shared host's, :func:`~prism_plugin.report.derived.report_kinds`)."""
    import pandas as pd
    rows: list[dict] = []
    if settings is None or settings.empty:
        return pd.DataFrame(columns=VERDICT_COLUMNS)
    kinds = report_kinds() if kinds is None else kinds

    def kind_of(table: str) -> TableKind:
        return kinds.get(table) or TableKind(table, f"{table}.csv", (), label=table)

    models = list(dict.fromkeys(settings["model"]))
    for model in models:
        ms = settings.loc[settings["model"] == model]
        tables = list(dict.fromkeys(ms["table"]))
        specs = [kind_of(t) for t in tables]
        # a variant (same probes, T fitted elsewhere) beside its base kind: only its scaling lines
        own = [k for k in specs if k.variant_of not in tables]
        for spec in own:
            for block in _blocks(ms, spec.name):
                rows.extend(_glance(model, spec, block))
                rows.extend(_few_samples(model, spec, block))
        rows.extend(_data_lines(model, list(flags or [])))
        for spec in own:
            for block in _blocks(ms, spec.name):
                rows.extend(_probe(model, spec, block))
        for spec in own:
            table = spec.name
            if not spec.grid:
                for block in _blocks(ms, table):
                    rows.extend(_collapse(model, spec, block))
                continue
            sub = ms.loc[ms["table"] == table]
            n_bad = int((sub["collapsed_cells"] > 0).sum())
            text = (f"{spec.label}: the probe collapsed on {n_bad} of {len(sub)} hospital pairs "
                    f"({int(sub['collapsed_cells'].sum())} cells with a collapsed seed).")
            rows.append(verdict_row(model, "collapse", "warn" if n_bad else "good", table, "", text,
                             where_of(table, model, sub["setting"]), "collapsed_cells", "sum",
                             int(sub["collapsed_cells"].sum())))
        for spec in specs:
            table = spec.name
            sub = ms.loc[ms["table"] == table]
            if spec.grid and len(sub) > MAX_LISTED:
                rows.extend(_grid_scaling(model, spec, sub))
            else:
                for block in _blocks(ms, table):
                    rows.extend(_scaling(model, spec, block))
        has_transfer = any(k.transfer for k in specs)
        for spec in specs:
            if spec.transfer:
                rows.extend(transfer_lines(model, spec, ms.loc[ms["table"] == spec.name]))
        if not has_transfer:
            rows.append(verdict_row(model, "transfer", "na", "", "",
                             "Transfer not measured: these results hold no transfer task for this model "
                             "(run a transfer task, e.g. prism_demo_transfer, to see whether the probe transfers)."))
        fs_rows = []
        for spec in specs:
            if spec.transfer:
                fs_rows.extend(fewshot_lines(model, spec, ms.loc[ms["table"] == spec.name], tolerance))
        if fs_rows:
            rows.extend(fs_rows)
        elif has_transfer:
            rows.append(verdict_row(model, "fewshot", "na", "", "",
                             "Few-shot target temperature not measured: the transfer runs have no "
                             "temperature_fewshot_k<K> / ece_scaled_fewshot_k<K> columns (the temperature-transfer "
                             "plugin writes them), so the number of target labels a per-site recalibration needs is "
                             "unknown."))
        if metric_cells is not None and not metric_cells.empty:
            rows.extend(_plugin_metrics(model, metric_cells, kind_of))
    _few_sample_caution(rows, settings)
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


__all__ = ["TOPICS", "build_verdict", "results_flags"]
