"""``prism-run sensitivity``: ranking stability under a C sweep or an MLP probe, with its report.

::

    prism-run --task my_sweep.yaml --model A --model B --output OUT    # sweep: {probe.C: [...]}
    prism-run sensitivity OUT                                           # tables + report for OUT

Reads every ``runs.csv`` under the given results directories (a sweep writes one per variant and model), computes
the tables of :mod:`prism_plugin.summaries.probe_sensitivity` (``c_ablation``, ``c_ranking``, ``mlp_ranking`` and
their ``ood_`` twins for transfer pairs), prints the ranking-stability summary, and writes the tables as CSV,
``sensitivity.json`` (headline numbers and notes) and ``report.html`` / ``report.md`` with the probe-sensitivity
and the embedding-geometry sections into ``--output`` (default: the first results directory).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prism_plugin.errors import PrismError

HEADLINE_FILE = "sensitivity.json"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "sensitivity",
        help="Kendall τ of model rankings across probe settings (C sweep, linear vs MLP) + report",
        description="Ranking stability (PROTOCOL §6.17): per (dataset, fraction) the Kendall τ between the model "
                    "ordering at each C and at C = 1, for AUROC and raw ECE, with sign inversions; the same for the "
                    "linear vs the MLP probe. Needs runs of at least two models.",
    )
    p.add_argument("results_dirs", nargs="+", type=Path, metavar="RESULTS_DIR",
                   help="prism-run results directories (runs.csv files are searched recursively)")
    p.add_argument("--output", type=Path, default=None, metavar="DIR",
                   help="where to write the tables and the report (default: the first RESULTS_DIR)")
    p.add_argument("--baseline-c", type=float, default=1.0, metavar="C",
                   help="the C every other C is compared with (default 1, the protocol's)")
    p.add_argument("--no-report", action="store_true", help="do not write report.html / report.md")
    from prism_plugin.commands import add_wait

    add_wait(p)
    return p


def _print_ranking(name: str, table, key: str) -> None:
    setting = "mlp_settings" if "mlp" in name else "C"
    print(f"\n{name}:")
    head = f"{key:<22} {'fraction':>8} {setting:>14} {'models':>6} {'τ AUROC':>8} {'τ ECE':>8}  note"
    print(head)
    for _, r in table.iterrows():
        def f(v):
            return "–" if v != v else f"{v:.3f}"
        sval = r[setting] if isinstance(r[setting], str) else f"{r[setting]:g}"
        print(f"{str(r[key])[:22]:<22} {r['fraction']:>8g} {str(sval)[:14]:>14} {int(r['n_models']):>6} "
              f"{f(r['kendall_auroc']):>8} {f(r['kendall_ece']):>8}  {r['note'] or ''}")


def write_sensitivity_report(out_dir: Path, sources: list[Path], title: str) -> Path:
    """report.html / report.md with only this feature's sections (the probe-sensitivity and geometry ones)."""
    from prism_plugin.report import render
    from prism_plugin.report.geometry_sections import geometry_section, sensitivity_section
    from prism_plugin.plugins import get_host
    from prism_plugin.report.sections import read_view
    from prism_plugin.storage import atomic_write_bytes, atomic_write_text

    view = read_view(out_dir, get_host(), sources=tuple(sources), tables_dir=out_dir, title=title)
    sections = [s for s in (sensitivity_section(view), geometry_section(view)) if s is not None]
    from prism_plugin.storage import write_csv

    for s in sections:
        for name, data in s.figures.items():
            atomic_write_bytes(out_dir / render.FIGURES / name, data)
        for stem, df in s.tables.items():
            if not (out_dir / f"{stem}.csv").exists() or stem.startswith(("geometry_", "reliability_")):
                write_csv(out_dir / f"{stem}.csv", df)
    atomic_write_text(out_dir / render.MD_NAME, render.render_markdown(title, sections, view, ""))
    target = out_dir / render.HTML_NAME
    atomic_write_text(target, render.render_html(title, sections, view, ""))
    return target


def run(args) -> int:
    from prism_plugin.storage import atomic_write_text, dumps, write_csv
    from prism_plugin.summaries.probe_sensitivity import NEEDS, load_runs, sensitivity_tables

    from prism_plugin.results import results_inputs

    results_inputs(args.results_dirs)  # each a results folder whose files belong together, else one line
    if not (args.baseline_c > 0):
        raise PrismError(f"--baseline-c {args.baseline_c}: must be a positive regularisation constant")
    runs = load_runs(args.results_dirs)
    if runs.empty:
        raise PrismError(f"no runs.csv under {', '.join(map(str, args.results_dirs))}; run prism-run first")
    out = sensitivity_tables(runs, args.baseline_c)
    if not out.tables:
        raise PrismError(
            f"{', '.join(map(str, args.results_dirs))}: no probe comparison here: the logistic runs have "
            f"{runs['probe_C'].nunique() if 'probe_C' in runs else 0} value(s) of C and no MLP runs. Run a task "
            "with `sweep: {probe.C: [0.01, 0.1, 1, 10, 100]}` or `sweep: {probe.kind: [logistic, mlp]}`")
    out_dir = args.output or args.results_dirs[0]
    if out_dir.exists() and not out_dir.is_dir():
        raise PrismError(f"--output {out_dir}: exists and is not a directory")
    from prism_plugin.commands import writes_into

    writes_into(args, out_dir)  # one writer per folder
    for stem, table in out.tables.items():
        write_csv(out_dir / f"{stem}.csv", table)
    atomic_write_text(out_dir / HEADLINE_FILE, dumps({"headline": out.headline, "notes": out.notes,
                                                      "tables": [f"{s}.csv" for s in out.tables]}))
    models = sorted(set(runs["model"].astype(str)))
    print(f"{len(runs)} runs of {len(models)} model(s): {', '.join(models)}")
    for name in ("c_ranking", "ood_c_ranking", "mlp_ranking", "ood_mlp_ranking"):
        if name in out.tables:
            _print_ranking(name, out.tables[name], "pair" if name.startswith("ood_") else "dataset")
            h = out.headline
            n = h.get(f"{name}_auroc_comparisons", 0)
            if n:
                print(f"  AUROC: mean τ {h[f'{name}_auroc_tau_mean']:.3f}, {h[f'{name}_auroc_inversions']} of {n} "
                      f"inverted; raw ECE: mean τ {h[f'{name}_ece_tau_mean']:.3f}, "
                      f"{h[f'{name}_ece_inversions']} of {h[f'{name}_ece_comparisons']} inverted")
            else:
                print(f"  Kendall τ {NEEDS}: only {len(models)} model(s) here")
    for note in out.notes:
        print(f"note: {note}")
    print(f"wrote {', '.join(f'{s}.csv' for s in out.tables)} and {HEADLINE_FILE} to {out_dir}")
    if not args.no_report:
        target = write_sensitivity_report(out_dir, list(args.results_dirs), "PRISM probe sensitivity and geometry")
        print(f"report: {target}")
    return 0


__all__ = ["add_parser", "run", "write_sensitivity_report"]
