"""``prism-run findings``: the PROTOCOL §6 derived tables, headline numbers and report.

::

    prism-run findings RESULTS_DIR... [--output OUT]      # your results (several dirs combine)
    prism-run findings --reference DIR [--output OUT]     # the published results_v2 tables

Every ``summarize`` plugin runs on the per-run tables; each table is written as ``OUT/<stem>.csv`` under the file
name and columns the published results_v2 directory uses (so ``OUT`` can be diffed against it file by file), plus
``OUT/findings.json`` (headline numbers, and notes saying which statistics are not defined and why) and, unless
``--no-report``, ``OUT/report.html`` / ``OUT/report.md`` over all the runs given.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prism_plugin.errors import PrismError
from prism_plugin.tables import load_tables

DEFAULT_OUTPUT = Path("prism_findings")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "findings",
        help="derived tables of PROTOCOL §6 (+ findings.json and the report) from results or the reference",
        description="Compute every summary table (PROTOCOL §6: rank correlations, mechanism, temperature counts, "
                    "collapse audit, label budget, breaking points, seed variability, CRI) from prism-run results "
                    "directories (several combine, e.g. one per model) or from a directory with the published "
                    "results_v2 layout, and write them as CSV with the published file names, findings.json and "
                    "report.html.",
    )
    p.add_argument("results_dirs", nargs="*", type=Path, metavar="RESULTS_DIR",
                   help="prism-run results directories (each holding runs.csv, or a folder of them)")
    p.add_argument("--reference", type=Path, default=None, metavar="DIR",
                   help="a directory with the published results_v2 layout (indomain_all_v2.csv, ood_all_v2.csv, ...)")
    p.add_argument("--output", type=Path, default=None, metavar="OUT",
                   help=f"output folder (default: ./{DEFAULT_OUTPUT})")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="summary option (YAML value), e.g. --option default_ood_stability=0.8 "
                        "--option 'ood_stability={MyModel: 0.7}' --option fewshot_tolerance=0.01")
    p.add_argument("--only", action="append", default=None, metavar="PLUGIN",
                   help="run only these summary plugins (repeatable; see `prism-run ls plugins`)")
    p.add_argument("--no-report", action="store_true", help="do not write report.html / report.md")
    from prism_plugin.commands import add_wait

    add_wait(p)
    return p


def parse_options(items: list[str]) -> dict[str, Any]:
    from prism_plugin.tasks.loader import parse_value

    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise PrismError(f"--option {item!r}: expected KEY=VALUE (e.g. default_ood_stability=0.8)")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise PrismError(f"--option {item!r}: the key is empty")
        out[key] = parse_value(raw, f"--option {key}") if raw.strip() else None  # safe: no tags
    return out


def run(args) -> int:
    from prism_plugin.commands import host_of
    from prism_plugin.summaries.engine import run_summaries, write_summaries

    if args.reference is not None and not args.reference.is_dir():
        raise PrismError(f"--reference {args.reference}: not a directory; pass a folder with the results_v2 layout "
                         "(indomain_all_v2.csv, ood_all_v2.csv, ...)")
    out_dir = args.output or DEFAULT_OUTPUT
    if out_dir.exists() and not out_dir.is_dir():
        raise PrismError(f"--output {out_dir}: exists and is not a directory")
    from prism_plugin.commands import writes_into

    writes_into(args, out_dir)  # one writer per folder
    options = parse_options(args.option)
    host = host_of(args)
    from prism_plugin.results import results_inputs

    ref = None
    if args.reference is not None:  # the one reader of reference folders (absent / damaged files named)
        from prism_plugin.reference_files import FINDINGS, open_reference

        ref = open_reference(args.reference, FINDINGS, host=host)
    tables = load_tables(results_inputs(args.results_dirs), ref.tables if ref else None, host,
                         reference_name=f"--reference {args.reference}")
    if "binary_logits" not in options and args.results_dirs:
        from prism_plugin.report.build import binary_convention, source_dirs

        options["binary_logits"], _ = binary_convention(source_dirs(args.results_dirs))
    summaries = run_summaries(tables, options, host, only=args.only)
    summaries.notes[:0] = ref.notes if ref else []  # a reference file it does without, named
    write_summaries(out_dir, summaries)  # the tables and findings.json, always
    n_tables = len(summaries.tables)
    print(f"findings: {n_tables} table(s) and findings.json ({len(summaries.headline)} headline value(s)) "
          f"written to {out_dir}")
    for stem in summaries.tables:
        print(f"  {stem}.csv  ({len(summaries.tables[stem])} rows)")
    if summaries.notes:
        from prism_plugin.report.build import compact_notes

        notes = compact_notes(summaries.notes)
        print(f"{len(notes)} note(s) (what is not defined here and why; every note is in findings.json):")
        for note in notes:
            print(f"  - {note}")
    if not args.no_report:
        from prism_plugin.report.build import write_report

        reference_only = args.reference is not None and not args.results_dirs
        title = "PRISM findings: published reference results" if reference_only else ""
        target = write_report(out_dir, host, sources=list(args.results_dirs), run_tables=tables,
                              summaries=summaries, tables_dir=out_dir, options=options, title=title,
                              reference=args.reference is not None)
        print(f"report: {target}")
    return 0
