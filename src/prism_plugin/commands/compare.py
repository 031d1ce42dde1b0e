"""``prism-run compare``: rank your model(s) among the reference models by CRI.

``prism-run compare RESULTS_DIR... [--fraction F] [--reference DIR] [--aggregation A] [--ood-stability X]`` reads
every ``runs.csv`` under the given results directories (in-distribution runs give AUROC and scaled ECE, transfer
runs give OOD stability), puts your models beside the reference models (``--reference DIR`` with the results_v2
layout, else the pulled copy, else the paper tables shipped in :mod:`prism_plugin.reference_data`) and prints them
ranked by the CRI of PROTOCOL §6.2 with its three components beside it.

Only a model measured on the reference datasets is ranked: a model whose in-distribution runs are on none of them
(e.g. the offline demo's synthetic tiles) is **not comparable** — it is listed below the ranking with its numbers,
unranked, and one line says why (:func:`comparability`). A model with runs on reference datasets and on others is
ranked on the reference datasets only (its transfer pairs likewise), said in a note.

A model without a measured OOD stability (no transfer runs at 100 % labels, or none whose source has an
in-distribution run) gets the mean stability of the reference models, flagged as imputed, unless
``--ood-stability`` gives a value. For each of your transfer pairs it also prints what the target-side temperatures
say: raw ECE, ECE after the source-fitted T, after the oracle T (fitted on the target test itself: an upper bound,
not deployable), and after a few-shot target T for each K.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from prism_plugin.commands import host_of
from prism_plugin.errors import PrismError
from prism_plugin.tables import RunTables, tables_from_results

#: How close (absolute ECE) a few-shot T must come to the oracle to count as "recovered".
FEWSHOT_TOLERANCE = 0.02
INDOMAIN_COLUMNS = ["model", "dataset", "fraction", "seed", "auroc", "ece_fixed", "ece_scaled_fixed"]
YOURS = " *"
#: Described metrics (``register_metrics`` compare=True) that the table already shows.
BUILTIN_COMPARE = frozenset({"auroc", "ece_fixed", "ece_scaled_fixed"})


#: Shown in --help only (the rule is looked up in prism_plugin.summaries.cri.AGGREGATIONS at run
#: time, so a rule added there works without changing this line); kept here so that building the
#: parser does not import SciPy.
AGGREGATION_HELP = "multiplicative (default), arithmetic, geometric, worst_axis"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare",
        description="Rank the models of RESULTS_DIR (runs.csv files, searched recursively) among the reference "
                    "models by the Composite Reliability Index (PROTOCOL §6.2), a screening heuristic: read it "
                    "with its three components.",
    )
    p.add_argument("results_dirs", nargs="+", type=Path, metavar="RESULTS_DIR",
                   help="results directories written by prism-run (in-distribution and transfer runs)")
    p.add_argument("--fraction", type=float, default=1.0, metavar="F",
                   help="label fraction of AUROC and scaled ECE (default 1.0; OOD stability is always at 1.0)")
    p.add_argument("--reference", type=Path, default=None, metavar="DIR",
                   help="folder with the results_v2 layout (default: the pulled copy, else the paper tables)")
    p.add_argument("--aggregation", default="multiplicative", metavar="A",
                   help=f"CRI aggregation rule: {AGGREGATION_HELP}")
    p.add_argument("--ood-stability", action="append", default=[], metavar="X|MODEL=X",
                   help="OOD stability in [0, 1] for your model(s) (replaces a measured or imputed value); repeatable")
    p.add_argument("--output", type=Path, default=None, metavar="FILE.csv", help="also write the ranked table")
    return p


# --------------------------------------------------------------------------- helpers
def _subset(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    out = df.copy()
    for c in columns:
        if c not in out.columns:
            out[c] = np.nan
    return out[columns]


def _model_aggregates(indomain: pd.DataFrame, fraction: float, column: str, how: str = "mean") -> pd.Series:
    """Per model: the mean over its datasets of the seed aggregate (``how``, a description's aggregation; PROTOCOL
    §6.2 uses the seed mean) of ``column`` at ``fraction``; models without a value are absent."""
    from prism_plugin.aggregation import AGGREGATORS
    from prism_plugin.summaries.conventions import fraction_mask

    rows = indomain.loc[fraction_mask(indomain, fraction)]
    if "dataset" not in rows.columns:
        rows = rows.assign(dataset="")
    values = pd.to_numeric(rows[column], errors="coerce")
    cells = AGGREGATORS[how](values.groupby([rows["model"], rows["dataset"]], sort=False))
    return cells.groupby(level="model", sort=False).mean().dropna()


def compare_metrics(host, indomain: pd.DataFrame) -> list:
    """Described metrics to show beyond the built-in columns: ``compare=True``, present (with a value) in the
    user's in-distribution runs."""
    from prism_plugin.metrics.descriptions import described_metrics

    out = []
    for d in described_metrics(host, "compare"):
        c = d.info.column
        if c in BUILTIN_COMPARE or c not in indomain.columns:
            continue
        if pd.to_numeric(indomain[c], errors="coerce").notna().any():
            out.append(d)
    return out


def _parse_overrides(values: list[str], user_models: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for text in values:
        if "=" in text:
            name, raw = text.rsplit("=", 1)
            name = name.strip()
            targets = [name]
            if name not in user_models:
                from prism_plugin.errors import suggest

                raise PrismError(f"--ood-stability {text!r}: {name!r} is not one of your models "
                                 f"({', '.join(user_models)}){suggest(name, user_models)}")
        else:
            raw, targets = text, list(user_models)
        try:
            value = float(raw)
        except ValueError:
            raise PrismError(f"--ood-stability {text!r}: {raw!r} is not a number; give X or MODEL=X with X in [0, 1]") from None
        if not (0.0 <= value <= 1.0) or math.isnan(value):
            raise PrismError(f"--ood-stability {text!r}: {value} is outside [0, 1] (a clipped AUROC ratio)")
        for t in targets:
            out[t] = value
    return out


def _rename_collisions(user: RunTables, ref_models: set[str]) -> dict[str, str]:
    names = set()
    for df in (user.indomain, user.transfer):
        if df is not None:
            names |= set(df["model"].astype(str))
    renames = {m: f"{m} (yours)" for m in names if m in ref_models}
    if renames:
        for attr in ("indomain", "transfer"):
            df = getattr(user, attr)
            if df is not None:
                setattr(user, attr, df.assign(model=df["model"].astype(str).replace(renames)))
    return renames


def _fmt(v: float, digits: int = 3) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{digits}f}"


def _fewshot_ks(columns) -> list[int]:
    ks = []
    for c in columns:
        m = re.fullmatch(r"ece_scaled_fewshot_k(\d+)", str(c))
        if m:
            ks.append(int(m.group(1)))
    return sorted(ks)


def transfer_report(model: str, indomain: pd.DataFrame, transfer: pd.DataFrame, fraction: float) -> list[str]:
    """Per pair of ``model``: target AUROC, stability term, and what each temperature does to target ECE."""
    from prism_plugin.summaries.conventions import fraction_mask, fractions_present

    t_all = transfer.loc[transfer["model"] == model]
    present = fractions_present(t_all)
    if not present:
        return []
    f = fraction if any(abs(fraction - p) < 1e-9 for p in present) else present[-1]
    t = t_all.loc[fraction_mask(t_all, f)]
    ks = _fewshot_ks(t.columns)
    metrics = [c for c in ["auroc", "ece_fixed", "temperature_src", "ece_scaled_fixed", "temperature_oracle",
                           "ece_scaled_oracle"] + [f"ece_scaled_fewshot_k{k}" for k in ks] if c in t.columns]
    cells = t.groupby("pair", sort=False)[metrics].mean(numeric_only=True)
    ind = indomain.loc[(indomain["model"] == model) & fraction_mask(indomain, f)]
    id_auroc = ind.groupby("dataset", sort=False)["auroc"].mean()
    src_of = t.groupby("pair", sort=False)["src"].first()
    lines = [f"\nTransfer of {model} at {f * 100:g} % source labels (seed means; oracle = T fitted on the target "
             "test itself: an upper bound, not deployable):"]
    head = ["pair", "A_id(src)", "A_ood", "ratio", "ECE raw", "ECE src-T", "ECE oracle-T"] + [f"K={k}" for k in ks]
    rows = []
    verdicts = []
    for pair, r in cells.iterrows():
        a_id = float(id_auroc.get(src_of[pair], np.nan))
        ratio = min(r["auroc"] / a_id, 1.0) if np.isfinite(a_id) else np.nan
        raw, src_t = r.get("ece_fixed", np.nan), r.get("ece_scaled_fixed", np.nan)
        oracle = r.get("ece_scaled_oracle", np.nan)
        few = [r.get(f"ece_scaled_fewshot_k{k}", np.nan) for k in ks]
        rows.append([str(pair), _fmt(a_id), _fmt(r["auroc"]), _fmt(ratio), _fmt(raw), _fmt(src_t), _fmt(oracle)]
                    + [_fmt(x) for x in few])
        if not np.isfinite(src_t):
            verdicts.append(f"  {pair}: no source-fitted temperature (the source task has no validation split)")
        else:
            effect = "harms" if src_t > raw else "helps"
            verdicts.append(f"  {pair}: the source-fitted T {effect} target ECE ({raw:.3f} -> {src_t:.3f})")
        if np.isfinite(oracle) and ks:
            enough = [k for k, x in zip(ks, few) if np.isfinite(x) and x <= oracle + FEWSHOT_TOLERANCE]
            if enough:
                verdicts[-1] += (f"; K={enough[0]} labelled target samples bring it within {FEWSHOT_TOLERANCE} of "
                                 f"the oracle ({few[ks.index(enough[0])]:.3f} vs {oracle:.3f})")
            else:
                verdicts[-1] += (f"; no K up to {ks[-1]} comes within {FEWSHOT_TOLERANCE} of the oracle "
                                 f"({oracle:.3f})")
        if not np.isfinite(a_id):
            verdicts.append(f"  {pair}: no in-distribution run of source {src_of[pair]} at {f * 100:g} %, "
                            "so no stability term")
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    for x in [head, *rows]:
        lines.append("  ".join([x[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(x[1:], widths[1:])]))
    lines.extend(verdicts)
    return lines


def comparability(indomain: pd.DataFrame, reference_datasets, models: list[str]) -> dict[str, list[str]]:
    """Per model of ``models``: its in-distribution datasets that are not reference datasets (sorted).

    A model whose list holds *every* dataset it has is not comparable with the reference models."""
    ref = {str(d) for d in reference_datasets}
    ds = indomain.assign(dataset=indomain["dataset"].astype(str) if "dataset" in indomain else "")
    out = {}
    for m in models:
        mine = set(ds.loc[ds["model"].astype(str) == m, "dataset"])
        out[m] = sorted(mine - ref)
    return out


def _not_comparable_reason(datasets: list[str], reference: list[str]) -> str:
    listed = ", ".join(datasets[:4]) + (", …" if len(datasets) > 4 else "")
    return (f"its in-distribution runs are on {listed}, not on a reference dataset "
            f"({', '.join(reference)}), so its AUROC, ECE, OOD stability and CRI are not measured on the data the "
            "reference models were: run the catalogue tasks (e.g. prism_pcam) to compare")


# --------------------------------------------------------------------------- command
def run(args) -> int:
    from prism_plugin.reference_files import COMPARE, resolve_reference
    from prism_plugin.reference_data import PAPER_CRI_FRACTIONS
    from prism_plugin.summaries import cri
    from prism_plugin.summaries.conventions import fraction_mask, fractions_present, model_order

    fraction = float(args.fraction)
    if not (0.0 < fraction <= 1.0):
        raise PrismError(f"--fraction {fraction}: must be a label fraction in (0, 1], e.g. 1.0 or 0.01")
    cri.get_aggregation(args.aggregation)  # unknown rule -> one-line error with suggestions

    host = host_of(args)
    from prism_plugin.results import results_inputs

    user = tables_from_results(results_inputs(args.results_dirs), host)
    if user.indomain is None:
        raise PrismError(
            f"{', '.join(map(str, args.results_dirs))}: no in-distribution runs (only "
            f"{', '.join(user.present()) or 'none'}); compare needs AUROC and scaled ECE of your model's "
            "in-distribution runs (PROTOCOL §6.2): run the source task too, e.g. `prism-run --task prism_demo "
            "--task prism_demo_transfer --model M --output DIR` and pass DIR"
        )
    ref = resolve_reference(args.reference, COMPARE, host=host)
    if not ref.per_run and not any(abs(fraction - f) < 1e-9 for f in PAPER_CRI_FRACTIONS):
        raise PrismError(
            f"--fraction {fraction:g}: the paper tables shipped with prism-plugin give the reference CRI only at "
            "100 % labels; pass --reference DIR (results_v2 layout) or run `prism-run reference pull`"
        )
    ref_models = model_order(ref.tables.indomain["model"].astype(str))
    renames = _rename_collisions(user, set(ref_models))
    user_models = model_order(user.indomain["model"].astype(str))
    if not fraction_mask(user.indomain, fraction).any():
        have = ", ".join(f"{x:g}" for x in fractions_present(user.indomain))
        raise PrismError(f"--fraction {fraction:g}: your in-distribution runs have no runs at that fraction "
                         f"(they have {have})")
    notes: list[str] = list(ref.notes)
    for old, new in renames.items():
        notes.append(f"your model {old!r} shares a reference model's name; shown as {new!r}")
    ref_datasets = list(dict.fromkeys(ref.tables.indomain["dataset"].astype(str)))
    user_ind, reasons = _on_reference_datasets(user, ref_datasets, user_models, notes)
    resolved = _stability(args, user, user_ind, ref, ref_models, user_models, notes)
    ranked, extra = _ranking(args, host, fraction, ref.tables.indomain, user_ind, resolved, reasons, user_models, notes)
    _print_ranking(args, ref.label, fraction, ranked, extra, ref_models, user_models, user, user_ind, reasons, notes)
    return 0


def _on_reference_datasets(user, ref_datasets: list[str], user_models: list[str],
                           notes: list[str]) -> tuple[pd.DataFrame, dict[str, str]]:
    """Only runs on the reference datasets are ranked: (your in-distribution runs kept, why each model with no run
    on a reference dataset is not comparable); ``user.transfer`` keeps the pairs between them."""
    user_ind = user.indomain
    others = comparability(user_ind, ref_datasets, user_models)
    user_ds = {m: set(user_ind.loc[user_ind["model"].astype(str) == m, "dataset"].astype(str)) for m in user_models}
    not_comparable = [m for m in user_models if others[m] and set(others[m]) == user_ds[m]]
    reasons = {m: _not_comparable_reason(others[m], ref_datasets) for m in not_comparable}
    keep = user_ind["dataset"].astype(str).isin(ref_datasets) | user_ind["model"].astype(str).isin(not_comparable)
    for m in user_models:
        if m in not_comparable or not others[m]:
            continue
        notes.append(f"{m}: ranked on the reference datasets only; its runs on {', '.join(others[m])} are left out "
                     "of the ranking (not reference datasets)")
    user_ind = user_ind.loc[keep].reset_index(drop=True)
    for m in user_models:
        if m in not_comparable:
            continue
        covered = sorted(user_ds[m] & set(ref_datasets))
        if len(covered) < len(ref_datasets):
            notes.append(f"{m}: measured on {len(covered)} of the {len(ref_datasets)} reference datasets "
                         f"({', '.join(covered)}); the reference models' AUROC / ECE average all {len(ref_datasets)}, "
                         "so its rank compares different dataset mixes")
    if user.transfer is not None and len(user.transfer):
        tr = user.transfer
        on_ref = tr["src"].astype(str).isin(ref_datasets) & tr["tgt"].astype(str).isin(ref_datasets)
        drop = ~on_ref & ~tr["model"].astype(str).isin(not_comparable)
        if drop.any():
            dropped = sorted(set(tr.loc[drop, "model"].astype(str) + " " + tr.loc[drop, "src"].astype(str) + "->"
                                 + tr.loc[drop, "tgt"].astype(str)))
            notes.append(f"transfer pairs outside the reference datasets left out of the OOD stability: "
                         f"{', '.join(dropped[:4])}{', …' if len(dropped) > 4 else ''}")
            user.transfer = tr.loc[~drop].reset_index(drop=True)
    return user_ind, reasons


def _stability(args, user, user_ind: pd.DataFrame, ref, ref_models: list[str], user_models: list[str],
               notes: list[str]) -> pd.DataFrame:
    """OOD stability of every model: measured, given with --ood-stability, or the reference mean (imputed)."""
    from prism_plugin.summaries import cri
    from prism_plugin.summaries.conventions import fraction_mask

    ref_ind, ref_tr = ref.tables.indomain, ref.tables.transfer
    ref_stab = cri.ood_stability(ref_ind, ref_tr) if ref_tr is not None else pd.Series(dtype=float)
    user_stab = pd.Series(dtype=float)
    if user.transfer is not None:
        if not fraction_mask(user.transfer, cri.STABILITY_FRACTION).any():
            notes.append("your transfer runs lack fraction 1.0, where OOD stability is defined (PROTOCOL §6.1)")
        else:
            pairs = cri.ood_pairs(user_ind, user.transfer)
            bad = pairs.loc[pairs["ratio"].isna()]
            for _, r in bad.iterrows():
                notes.append(f"{r['model']} {r['pair']}: source {r['src']} has no in-distribution run at 100 % "
                             "in the results given, so this pair has no stability term")
            user_stab = cri.ood_stability(user_ind, user.transfer)
    overrides = _parse_overrides(args.ood_stability, user_models)
    measured = pd.concat([ref_stab, user_stab.loc[[m for m in user_stab.index if m in user_models]]])
    ref_mean = float(ref_stab.mean()) if len(ref_stab) else None
    resolved = cri.resolve_ood_stability(ref_models + user_models, measured, overrides=overrides, default=ref_mean)
    for m in user_models:
        src = resolved.at[m, "source"]
        if src == "default":
            notes.append(f"{m}: no measured OOD stability (no usable transfer runs at 100 %); imputed as the "
                         f"reference mean {ref_mean:.4f} (flag: imputed); pass --ood-stability to set it")
        elif src == "user":
            notes.append(f"{m}: OOD stability {resolved.at[m, 'ood_stability']:.4f} from --ood-stability (imputed)")
        elif src == "none":
            notes.append(f"{m}: no OOD stability measured and no reference to impute from: CRI not computed")
    return resolved


def _ranking(args, host, fraction: float, ref_ind: pd.DataFrame, user_ind: pd.DataFrame, resolved: pd.DataFrame,
             reasons: dict[str, str], user_models: list[str], notes: list[str]) -> tuple[pd.DataFrame, list]:
    """The CRI table of every model, comparable ones ranked first, with the described plugin metrics
    (``compare=True``: your models' values; the reference models have none)."""
    from prism_plugin.summaries import cri

    combined = pd.concat([_subset(ref_ind, INDOMAIN_COLUMNS), _subset(user_ind, INDOMAIN_COLUMNS)],
                         ignore_index=True)
    table = cri.cri_variants(combined, resolved["ood_stability"], fraction, imputed=resolved["imputed"])
    table.insert(1, "ece", _model_aggregates(combined, fraction, "ece_fixed").reindex(table.index))
    table["stability_source"] = resolved["source"].reindex(table.index).replace(
        {"measured": "measured", "default": "imputed (ref. mean)", "user": "imputed (user)", "mean": "imputed (mean)",
         "none": "none"})
    ranked = cri.rank_by_cri(table.loc[[m for m in table.index if m not in reasons]], args.aggregation)
    unranked = table.loc[[m for m in table.index if m in reasons]].copy()
    if len(unranked):
        unranked = cri.rank_by_cri(unranked, args.aggregation)
        unranked["rank"] = np.nan
    ranked["comparable"] = True
    unranked["comparable"] = False
    ranked["not_comparable_reason"] = ""
    unranked["not_comparable_reason"] = [reasons[m] for m in unranked.index]
    ranked = pd.concat([ranked, unranked]) if len(unranked) else ranked
    extra_columns: list[tuple[str, str]] = []
    for d in compare_metrics(host, user_ind):
        name = d.column if d.column not in ranked.columns else f"metric_{d.column}"
        values = _model_aggregates(user_ind, fraction, d.column, d.info.aggregation)
        ranked[name] = values.reindex(ranked.index)
        how = "" if d.info.aggregation == "mean" else f" ({d.info.aggregation})"
        extra_columns.append((name, f"{d.info.label}{how}" + (f" {d.info.arrow}" if d.info.arrow else "")))
        notes.append(f"{d.info.label} (`{d.column}`, from {d.origin}): mean over your datasets of the seed "
                     f"{d.info.aggregation} at {fraction * 100:g} %; the reference models were not measured with "
                     "it (n/a)")
    for m in user_models:
        if m in ranked.index and not np.isfinite(ranked.at[m, "ece_scaled"]):
            notes.append(f"{m}: CRI not computed: no scaled ECE at {fraction * 100:g} % (its in-distribution runs "
                         "have no validation split to fit the temperature on)")
    return ranked, extra_columns


def _print_ranking(args, ref_label: str, fraction: float, ranked: pd.DataFrame, extra_columns: list,
                   ref_models: list[str],
                   user_models: list[str], user, user_ind: pd.DataFrame, reasons: dict[str, str],
                   notes: list[str]) -> None:
    from prism_plugin.commands.reference import format_table

    print(f"reference: {ref_label}")
    print(f"\nCRI ranking at {fraction * 100:g} % labels (aggregation: {args.aggregation}; OOD stability at "
          f"100 %; {len(ref_models)} reference models; * = yours):")
    shown = ranked.loc[ranked["comparable"]].copy()
    labels = []
    for m, r in zip(shown.index, shown["rank"]):
        rk = f"{int(r)}." if np.isfinite(r) else "-"
        labels.append(f"{rk:>3} {m}{YOURS if m in user_models else ''}")
    shown.index = labels
    columns = [("auroc", "AUROC"), ("ece", "ECE"), ("ece_scaled", "ECE(T)"), ("ood_stability", "OOD stab."),
               ("stability_source", "stability"), (f"cri_{args.aggregation}", f"CRI ({args.aggregation})"),
               *extra_columns]
    print(format_table(shown, columns, index_label="rank model"))
    if reasons:
        print(f"\nNot comparable, not ranked ({len(reasons)}: no run on a reference dataset; numbers on "
              "their own datasets):")
        apart = ranked.loc[~ranked["comparable"]].copy()
        apart.index = [f"  - {m}{YOURS}" for m in apart.index]
        print(format_table(apart, columns, index_label="rank model"))
        for m, why in reasons.items():
            print(f"not comparable: {m}: not ranked: {why}")
    if user.transfer is not None:
        for m in user_models:
            if m in set(user.transfer["model"].astype(str)):
                print("\n".join(transfer_report(m, user_ind, user.transfer, fraction)))
    print("\nCRI is a screening heuristic, read with its three components (AUROC, 1 - scaled ECE, OOD stability): "
          "the stability term is a ratio, so a model with little in-distribution AUROC to lose looks stable.")
    for note in notes:
        print(f"note: {note}")
    if args.output is not None:
        from prism_plugin.storage import write_csv

        write_csv(args.output, ranked, index=True)
        print(f"wrote {args.output}")


__all__ = ["add_parser", "compare_metrics", "run", "transfer_report"]
