"""``prism-run audit RESULTS_DIR...``: the hematology acquisition-shift audit's tables.

Combines results directories written by ``prism-run`` (any number of models, transfer tasks and
probe heads; folders are searched for ``runs.csv``) and writes, under ``--output`` (default:
``<first RESULTS_DIR>/audit``), ``rank_matrix.csv``, ``rank_transfer.csv``,
``calibration_transfer.csv``, ``calibration_summary.csv``, ``adaptation_full.csv``,
``adaptation_scenarios.csv``, ``adaptation_methods.csv``, ``selector_regret.csv``,
``selector_summary.csv``, ``paired_bootstrap.csv``, ``diagnostics.csv`` (empty tables are skipped),
``audit.json`` (headline numbers and notes) and ``audit.md``. See
:mod:`prism_plugin.adaptation.audit` for what each table holds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prism_plugin.errors import PrismError


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "audit", help="acquisition-shift audit tables from results directories",
        description="Rank transfer, calibration transfer, adaptation under class priors, label-free selector regret, "
                    "paired bootstrap and diagnostics, from the runs of several models on source->target tasks.")
    p.add_argument("results_dirs", nargs="+", type=Path, metavar="RESULTS_DIR",
                   help="results directories (or folders containing them) written by prism-run")
    p.add_argument("--output", type=Path, default=None, metavar="DIR",
                   help="where to write the tables (default: <first RESULTS_DIR>/audit)")
    p.add_argument("--fraction", type=float, default=None, metavar="F",
                   help="label fraction to audit (default: the largest of each task)")
    p.add_argument("--bootstrap", type=int, default=4000, metavar="B", help="bootstrap resamples (default 4000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--compare", action="append", default=[], metavar="A:B",
                   help="paired bootstrap only for these model pairs (repeatable; default: every pair)")
    return p


def run(args) -> int:
    from prism_plugin.adaptation.audit import TABLES, build, to_markdown
    from prism_plugin.results import dumps, atomic_write_text, write_csv

    if args.bootstrap < 100:
        raise PrismError(f"--bootstrap {args.bootstrap}: use at least 100 resamples (the audit uses 4000)")
    if args.fraction is not None and not 0 < args.fraction <= 1:
        raise PrismError(f"--fraction {args.fraction}: must be in (0, 1]")
    compare = []
    for item in args.compare:
        if item.count(":") != 1 or not all(item.split(":")):
            raise PrismError(f"--compare {item!r}: write MODEL_A:MODEL_B")
        compare.append(tuple(item.split(":")))
    tables, headline = build(args.results_dirs, fraction=args.fraction, B=args.bootstrap, seed=args.seed,
                             compare=compare)
    out = args.output or (args.results_dirs[0] / "audit")
    written = []
    for name in TABLES:
        df = tables.get(name)
        if df is None or df.empty:
            continue
        write_csv(out / f"{name}.csv", df)
        written.append(name)
    headline["tables"] = written
    atomic_write_text(out / "audit.json", dumps(headline))
    atomic_write_text(out / "audit.md", to_markdown(tables, headline))
    print(f"audit of {headline['n_runs']} runs ({len(headline['models'])} models, {len(headline['tasks'])} tasks): "
          f"{', '.join(written)}")
    for note in headline.get("notes", []):
        print(f"note: {note}")
    print(f"tables: {out}")
    return 0
