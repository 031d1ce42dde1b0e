"""``prism-run diff A B``: did B (a new checkpoint, a new probe setting) get better or worse than A,
and is the difference real?

::

    prism-run diff RESULTS_A RESULTS_B [--output DIR] [--level 0.95]
                   [--fail-on METRIC]... [--tol [METRIC=]VALUE]... [--ignore-noise]
                   [--require-same FIELD|all]...

Runs are matched by task and run identity (fraction, seed, split seed, probe), not by model; every metric on both
sides gets its delta (B − A) with a CI, per run and per seed-mean cell, and a verdict (better / worse beyond noise,
within noise); the rules are in :mod:`prism_plugin.diffing`. The console shows the seed-mean cells as Markdown;
``--output DIR`` writes ``diff.md``, ``diff.html`` (self-contained), ``diff.csv`` (every run, cell and metric) and
``diff.json`` (the embedding identity comparison and the result) there, never into A or B.

Embedding identity: when the matched runs' embeddings differ in precision, weights, hub commit, preprocessing (or
any other identity field both sides record, :mod:`prism_plugin.identity_check`), the output says so first (per
model pair, the field and both values; on stderr as one warning line too), and a gate's result says the
comparison is not like-for-like. Results that do not record the identity get one line saying so.

Exit status (for an FM team's CI): 1 when a metric chosen by ``--fail-on`` (or named by ``--tol METRIC=VALUE``) is
worse than A by more than its tolerance (default 0) and beyond noise in some seed-mean cell (``--ignore-noise``: on
the point estimate alone); 1 as well when a field named by ``--require-same`` (``all``: every identity field both
sides record) differs, or is not recorded on a side; 2 for bad input; 0 otherwise.
"""

from __future__ import annotations

import argparse
import html as _html
import json
import math
import sys
from pathlib import Path

import numpy as np

from prism_plugin.commands import add_wait, host_of, writes_into
from prism_plugin.errors import PrismError

CSV_NAME, MD_NAME, HTML_NAME, JSON_NAME = "diff.csv", "diff.md", "diff.html", "diff.json"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "diff",
        description="Compare two results directories of the same task(s): per run and per seed-mean cell, the "
                    "delta B - A of every metric with its CI (paired test-set bootstrap where both sides have "
                    "replicates), which differences are beyond noise, and a non-zero exit status when a chosen "
                    "metric regresses beyond tolerance.")
    p.add_argument("a", type=Path, metavar="A", help="the baseline results directory (or a folder of them)")
    p.add_argument("b", type=Path, metavar="B", help="the results directory to compare with A")
    p.add_argument("--output", type=Path, default=None, metavar="DIR",
                   help="write diff.md, diff.html and diff.csv into DIR (not inside A or B)")
    p.add_argument("--fail-on", action="append", default=[], metavar="METRIC",
                   help="exit 1 when METRIC is worse beyond noise and tolerance in a seed-mean cell (repeatable)")
    p.add_argument("--tol", action="append", default=[], metavar="[METRIC=]VALUE",
                   help="tolerated worsening (default 0): METRIC=VALUE (also chooses METRIC) or VALUE for every "
                        "--fail-on metric (repeatable)")
    p.add_argument("--ignore-noise", action="store_true",
                   help="fail on the point estimate alone, whatever the CI says")
    p.add_argument("--level", type=float, default=None, metavar="L",
                   help="CI level of the deltas (default: the bootstrap's level, 0.95)")
    p.add_argument("--require-same", action="append", default=[], metavar="FIELD",
                   help="exit 1 when the embeddings' FIELD differs between A and B or is not recorded (precision, "
                        "weights, weights_revision, preprocessing, profile; all = every field both record; "
                        "repeatable)")
    add_wait(p)
    return p


# --------------------------------------------------------------------------- arguments
def _number(text: str, arg: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PrismError(f"--tol {arg!r}: {text!r} is not a number; give VALUE or METRIC=VALUE, e.g. "
                         "--tol auroc=0.01") from None
    if not math.isfinite(value) or value < 0:
        raise PrismError(f"--tol {arg!r}: the tolerated worsening must be a number >= 0")
    return value


def chosen_metrics(fail_on: list[str], tols: list[str], metrics, host=None) -> dict[str, float]:
    """column -> tolerated worsening of every gated metric (``--fail-on`` and ``--tol METRIC=V``)."""
    from prism_plugin.diffing import resolve_metric

    default, per = 0.0, {}
    bare = [t for t in tols if "=" not in t]
    if len(bare) > 1:
        raise PrismError(f"--tol {bare[1]!r}: a bare tolerance is given twice ({', '.join(bare)}); give one")
    if bare:
        default = _number(bare[0], bare[0])
    for t in tols:
        if "=" in t:
            name, raw = t.split("=", 1)
            per[resolve_metric(name.strip(), metrics, host, "--tol").column] = _number(raw.strip(), t)
    names = [resolve_metric(n, metrics, host).column for n in fail_on]
    if bare and not names:
        raise PrismError(f"--tol {bare[0]}: a bare tolerance applies to the --fail-on metrics; give --fail-on METRIC "
                         "(or --tol METRIC=VALUE)")
    out = {n: per.get(n, default) for n in names}
    out.update({n: v for n, v in per.items() if n not in out})
    directions = {m.column: m.direction for m in metrics}
    for n in out:
        if directions.get(n) is None:
            raise PrismError(f"--fail-on {n}: {n!r} has no registered direction (higher or lower is better), so "
                             "'worse' is not defined for it; gate on a metric with a direction")
    return out


def _check_output(out: Path, a: Path, b: Path) -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PrismError(f"--output {out}: is a file, not a folder; choose a folder")
    ro = out.resolve()
    for label, side in (("A", a), ("B", b)):
        s = Path(side).resolve()
        if ro == s or s in ro.parents:
            raise PrismError(f"--output {out}: is inside {label} ({side}); diff never writes into a results "
                             "directory: choose another folder")
    return out


# --------------------------------------------------------------------------- rendering
def _num(v, fmt: str = ".4f", sign: bool = False) -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    if not np.isfinite(v):
        return "–"
    return format(v, ("+" if sign else "") + fmt)


VERDICT_MARK = {"better": "**better**", "worse": "**worse**"}


def cell_title(r, columns, varying=("probe", "split_seed", "sweep_key", "model")) -> str:
    """``task · 50 % labels · seeds 1, 2`` (the probe, split seed, sweep and model where they vary)."""
    from prism_plugin.quality import pct

    columns = [c for c in columns if c in ("task", "fraction", "seed") or c in varying]
    parts = [str(r["task"])]
    if "model" in columns and isinstance(r.get("model"), str):
        parts.append(str(r["model"]))
    parts.append(f"{pct(r['fraction'])} labels")
    for c, label in (("split_seed", "split seed"), ("probe", "probe"), ("sweep_key", "sweep")):
        if c in columns and r.get(c) is not None and not (isinstance(r.get(c), float) and math.isnan(r[c])):
            parts.append(f"{label} {r[c]}")
    n = int(r["n_seeds"])
    parts.append(f"seed{'s' if n != 1 else ''} {r['seed']}")
    return " · ".join(parts)


def render_markdown(result, failures, chosen, ignore_noise: bool, host=None, required=()) -> str:
    from prism_plugin.diff_intervals import NONE, PAIRED
    from prism_plugin.diffing import key_text

    a, b, m = result.a, result.b, result.match
    infos = {i.column: i for i in result.metrics}
    lvl = f"{result.level * 100:g} %"
    lines = ["# prism-run diff", ""]
    for side in (a, b):
        models = ", ".join(side.models) or "?"
        lines.append(f"- **{side.label}**: `{side.path}` (model {models}; {len(side.runs)} runs)")
    by = ", ".join(m.columns) + ("" if "model" in m.columns else " (not by model)")
    lines.append(f"- matched {len(m.common)} run(s) by {by}; delta = B − A; {lvl} CIs")
    lines.extend(identity_lines(result.identity, {"A": a.path, "B": b.path}))
    lines.append("")
    for c in result.cautions:
        lines.append(f"> **Caution**: {c}")
        lines.append("")
    for label, keys in (("A", m.only_a), ("B", m.only_b)):
        if keys:
            shown = "; ".join(key_text(m.columns, k) for k in keys[:6]) + (" …" if len(keys) > 6 else "")
            lines.append(f"- only in {label} ({len(keys)} run(s), not diffed): {shown}")
    if m.only_a or m.only_b:
        lines.append("")
    cells = result.cells
    cell_cols = [c for c in ("task", "model", "probe", "fraction", "split_seed", "sweep_key") if c in cells]
    head = ["metric", "A", "B", "Δ (B − A)", f"{lvl} CI", "CI from", "verdict"]
    varying = tuple(c for c in ("probe", "split_seed", "sweep_key", "model")
                    if c in result.table and result.table[c].nunique(dropna=False) > 1)
    for _, group in cells.groupby(cell_cols, sort=False, dropna=False):
        first = group.iloc[0]
        lines.append(f"## {cell_title(first, m.columns, varying)}")
        lines.append("")
        if first.get("few_test_class") is not None and np.isfinite(first.get("few_test_class") or np.nan):
            lines.append(f"> **Few samples**: the rarest test class has {int(first['few_test_class'])} samples: these "
                         "numbers, and their CIs, rest on very few examples of it.")
            lines.append("")
        notes = [n for n in group["note"] if n]
        shared_note = notes[0] if len(notes) == len(group) and len(set(notes)) == 1 else ""
        if shared_note:
            lines.append(f"Every metric here: {shared_note}.")
            lines.append("")
        methods = set(group["ci_method"])
        if methods - {PAIRED, NONE}:
            lines.append("Some CIs below are not from a paired bootstrap (" + ", ".join(sorted(methods - {PAIRED, NONE}))
                         + "): they are wider and approximate.")
            lines.append("")
        rows = []
        for _, r in group.iterrows():
            info = infos[r["metric"]]
            fmt = getattr(info, "fmt", ".4f") or ".4f"
            ci = (f"[{_num(r['ci_low'], fmt, True)}, {_num(r['ci_high'], fmt, True)}]"
                  if np.isfinite(r["ci_low"]) else "–")
            v = VERDICT_MARK.get(r["verdict"], r["verdict"])
            if r["note"] and not shared_note:
                v += f" ({r['note']})"
            if r["metric"] in chosen:
                v += f" · gated, tol {chosen[r['metric']]:g}"
            rows.append([f"{info.titled} (`{r['metric']}`)" if info.display else f"`{r['metric']}`",
                         _num(r["a"], fmt), _num(r["b"], fmt), _num(r["delta"], fmt, True), ci,
                         r["ci_method"] if np.isfinite(r["ci_low"]) else "none", v])
        from prism_plugin.report.markdown import pipe_table

        lines.append(pipe_table(head, rows))
        lines.append("")
    lines.append(f"Beyond noise = the {lvl} CI of the delta excludes 0; *within noise* = it includes 0 (the "
                 "difference may be chance). *paired bootstrap*: both runs' test-set bootstrap replicates on the "
                 "same resamples; *unpaired normal*: from each side's CI columns; *seed spread (Welch)*: from the "
                 "seeds alone. `(no CI)`: the noise is unknown (rerun with `--bootstrap N`).")
    lines.append("")
    for note in result.notes:
        lines.append(f"- note: {note}")
    if result.notes:
        lines.append("")
    if chosen:
        lines.append("## Gate")
        lines.append("")
        gated = ", ".join(f"`{k}` (tol {v:g})" for k, v in chosen.items())
        rule = "point estimate (--ignore-noise)" if ignore_noise else "worse by more than tol and beyond noise"
        lines.append(f"Gated: {gated}; fails when {rule} in a seed-mean cell.")
        lines.append("")
        fails = [f for f in failures if not f.undetermined]
        for f in failures:
            r = f.row
            what = "UNDETERMINED (no CI)" if f.undetermined else "FAIL"
            ci = (f", CI [{_num(r['ci_low'], '.4f', True)}, {_num(r['ci_high'], '.4f', True)}]"
                  if np.isfinite(r["ci_low"]) else "")
            lines.append(f"- **{what}** `{r['metric']}` worse by {f.worse_by:.4g} (> tol {f.tol:g}) in "
                         f"{cell_title(r, m.columns, varying)} (A {_num(r['a'])}, B {_num(r['b'])}{ci})")
        lines.append("")
        if any(f.undetermined for f in failures):
            lines.append("Undetermined cells do not fail the gate: without a CI the noise is unknown. Write "
                         "bootstrap replicates (`prism-run ... --bootstrap N`), or pass `--ignore-noise` to fail on "
                         "the point estimate.")
            lines.append("")
        unlike = identity_caveat(result.identity)
        lines.append(f"**Result: FAIL** ({len(fails)} cell(s))" + unlike if fails else
                     "**Result: pass**" + (" (some cells undetermined: no CI)" if failures else "") + unlike)
        lines.append("")
    if required:
        lines.append("## Embedding identity gate")
        lines.append("")
        misses = identity_failures(result.identity, required)
        for line in misses:
            lines.append(f"- **FAIL** {line}")
        if misses:
            lines.append("")
        lines.append(f"**Result: FAIL** ({len(misses)} field(s))" if misses else
                     f"**Result: pass** (the same {', '.join(required_fields(result.identity, required))} on both "
                     "sides)")
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- embedding identity
def identity_lines(ident, paths=None) -> list[str]:
    """The Markdown lines on the embeddings' identity: a caution per differing field (per model pair, both
    values), one line when a side does not record it, else the identity both sides share."""
    if ident is None:
        return []
    out = []
    if ident.differences:
        out += ["", "> **Embeddings differ** (not a like-for-like comparison: the deltas mix the change of "
                    "embeddings with whatever else changed):"]
        out += [f"> - {d.text()}" for d in ident.differences]
    if ident.not_recorded:
        out += ["", f"> **Embedding identity not recorded**: {ident.not_recorded_line(paths)}"]
    elif not ident.differences and ident.compared:
        shared = "; ".join(f"{k} {v}" for k, v in ident.same.items() if k in ("precision", "weights",
                                                                              "weights_revision"))
        out.append(f"- embeddings: the same identity on both sides ({', '.join(ident.compared)})"
                   + (f": {shared}" if shared else ""))
    return out


def identity_caveat(ident) -> str:
    if ident is not None and ident.differences:
        return f" — embeddings differ ({', '.join(ident.fields_differing)}): not a like-for-like comparison"
    return ""


def required_fields(ident, required) -> list[str]:
    from prism_plugin.identity_check import field_order

    if "all" in required:
        return field_order(set(ident.compared) | {f for f in required if f != "all"})
    return field_order(required)


def identity_failures(ident, required) -> list[str]:
    """One line per ``--require-same`` field that differs or is not recorded on both sides."""
    from prism_plugin.identity_check import field_words

    out = []
    fields = required_fields(ident, required)
    for f in fields:
        diffs = [d for d in ident.differences if d.field == f]
        if diffs:
            out += [d.text() for d in diffs]
        elif f not in ident.compared:
            out.append(f"{field_words(f)} is not recorded on both sides: it cannot be checked to be the same")
    if not fields or (ident.not_recorded and "all" in required):
        out.append(ident.not_recorded_line() or "no embedding identity field is recorded on both sides")
    return out


def check_required(values: list[str]) -> list[str]:
    from prism_plugin.errors import suggest
    from prism_plugin.identity_check import KNOWN_FIELDS

    out = []
    for v in values:
        for name in (x.strip() for x in v.split(",")):
            if name != "all" and name not in KNOWN_FIELDS:
                raise PrismError(f"--require-same {name!r}: not an embedding identity field"
                                 f"{suggest(name, list(KNOWN_FIELDS))} (fields: {', '.join(KNOWN_FIELDS)}, or all)")
            if name not in out:
                out.append(name)
    return out


HTML_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}
.diff-main{{max-width:1100px;margin:0 auto;padding:22px 28px 40px}}</style>
</head>
<body>
<header class="hero"><div class="wrap"><div class="kicker">PRISM run-to-run diff</div><h1>{title}</h1></div></header>
<main class="diff-main"><section class="card">
{body}
</section></main>
<script>{script}</script>
</body>
</html>
"""


def render_html(md: str) -> str:
    """The page: the report's style, the Markdown as HTML, and the report's table script (sorting, CSV
    links; the page reads the same without it)."""
    from prism_plugin.report import markdown
    from prism_plugin.report.render import CSS

    body = md.split("\n", 1)[1] if md.startswith("# ") else md
    script = getattr(markdown, "TABLE_SCRIPT", "")
    return HTML_PAGE.format(title=_html.escape("prism-run diff"), css=CSS, body=markdown.to_html(body), script=script)


# --------------------------------------------------------------------------- command
def run(args) -> int:
    from prism_plugin.diffing import diff, gate, load_side
    from prism_plugin.storage import atomic_write_text, write_csv

    host = host_of(args)
    required = check_required(getattr(args, "require_same", []) or [])
    out = _check_output(args.output, args.a, args.b) if args.output is not None else None
    if args.level is not None and not (0.0 < args.level < 1.0):
        raise PrismError(f"--level {args.level}: must be in (0, 1), e.g. 0.95")
    from prism_plugin.results import results_inputs

    results_inputs([args.a], "A"), results_inputs([args.b], "B")  # results folders whose files belong together
    a, b = load_side(args.a, "A"), load_side(args.b, "B")
    result = diff(a, b, host, level=args.level)
    chosen = chosen_metrics(args.fail_on, args.tol, result.metrics, host)
    failures = gate(result, chosen, args.ignore_noise)
    md = render_markdown(result, failures, chosen, args.ignore_noise, host, required)
    print(md.rstrip())
    ident = result.identity
    identity_misses = identity_failures(ident, required) if required else []
    gate_failed = any(not f.undetermined for f in failures)
    status = 1 if gate_failed or identity_misses else 0
    if out is not None:
        writes_into(args, out)  # one writer per folder
        out.mkdir(parents=True, exist_ok=True)
        table = result.table.drop(columns=[c for c in ("few_test_class",) if c not in result.table])
        write_csv(out / CSV_NAME, table)
        from prism_plugin.report.markdown import md_safe

        atomic_write_text(out / MD_NAME, md_safe(md))  # names in it inert, as in the HTML page
        atomic_write_text(out / HTML_NAME, render_html(md))
        atomic_write_text(out / JSON_NAME, json.dumps({
            "a": str(args.a), "b": str(args.b), "matched_runs": len(result.match.common),
            "embedding_identity": ident.to_dict(), "require_same": required,
            "identity_failures": identity_misses,
            "gate": {"metrics": chosen, "failed_cells": sum(not f.undetermined for f in failures),
                     "undetermined_cells": sum(bool(f.undetermined) for f in failures)},
            "like_for_like": not ident.differs and not ident.not_recorded, "exit_status": status},
            indent=2, default=str) + "\n")
        print(f"\nwrote {out / MD_NAME}, {out / HTML_NAME}, {out / CSV_NAME}, {out / JSON_NAME}")
    if ident.differences:  # said on stderr too: a piped or gated diff must not read as like-for-like
        print(f"prism-run diff: warning: the embeddings of A and B differ in {', '.join(ident.fields_differing)} "
              f"({ident.differences[0].text()}{'; ...' if len(ident.differences) > 1 else ''}): not a like-for-like "
              "comparison", file=sys.stderr)
    return status


__all__ = ["add_parser", "chosen_metrics", "identity_failures", "identity_lines", "render_html", "render_markdown",
           "run"]
