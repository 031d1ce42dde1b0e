"""``prism-run audit RESULTS_DIR...``: the hematology acquisition-shift audit's tables.

Combines results directories written by ``prism-run`` (any number of models, transfer tasks and probe heads; a
group folder read through its members) and writes, under ``--output`` (default: ``<first RESULTS_DIR>/audit``), one
CSV per non-empty table of :data:`prism_plugin.studies.hematology.tables.TABLES`, ``audit.json`` (headline numbers,
the tables written and notes), ``audit.md`` (the audit sections and the list of tables) and the report of those
runs (``report.html`` + ``report.md``, figures in ``figures/``). The study itself is
:mod:`prism_plugin.studies.hematology` (summary stems ``audit_<table>``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prism_plugin.errors import PrismError


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "audit", help="acquisition-shift audit tables from results directories",
        description="Rank transfer (means and CIs over source split seeds), pretraining exposure, effective robustness, "
                    "calibration transfer with reliability diagrams, adaptation under class priors, label-free selector "
                    "regret, paired bootstrap, per-class recall and confusion, first-moment shift vs target drop and "
                    "diagnostics, from the runs of several models on source->target tasks.")
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
    p.add_argument("--held-out-only", action="store_true",
                   help="rank_transfer, rank_matrix, selector_regret and effective_robustness from the encoder x "
                        "target cells held out of the encoder's pretraining only (exposure.csv lists every cell)")
    from prism_plugin.commands import add_wait

    add_wait(p)
    return p


def run(args) -> int:
    from prism_plugin.commands import host_of
    from prism_plugin.report.build import (FIGURES, build_view, compute_summaries, models_title, probes_apart,
                                           summary_options, write_view)
    from prism_plugin.storage import atomic_write_text, dumps, write_csv
    from prism_plugin.studies.hematology import plugin as audit_plugin
    from prism_plugin.studies.hematology.inputs import result_files
    from prism_plugin.studies.hematology.sections import is_audit_section, stem, to_markdown
    from prism_plugin.summaries.engine import plugin_name_of, run_summaries
    from prism_plugin.tables import tables_from_results

    if args.bootstrap < 100:
        raise PrismError(f"--bootstrap {args.bootstrap}: use at least 100 resamples (the audit uses 4000)")
    if args.fraction is not None and not 0 < args.fraction <= 1:
        raise PrismError(f"--fraction {args.fraction}: must be in (0, 1]")
    compare = []
    for item in args.compare:
        if item.count(":") != 1 or not all(item.split(":")):
            raise PrismError(f"--compare {item!r}: write MODEL_A:MODEL_B")
        compare.append(tuple(item.split(":")))
    host = host_of(args)
    name = plugin_name_of(host, audit_plugin)
    if name is None:
        raise PrismError("the audit plugin is disabled (--disable audit); enable it to run `prism-run audit`")
    from prism_plugin.results import results_inputs

    files = result_files(results_inputs(args.results_dirs))
    dirs = [f.parent for f in files]
    run_tables = tables_from_results(files, host)
    # the report's option defaults (band metrics, binary logit convention), for every summary
    options, option_notes = summary_options({"results_dirs": dirs}, host, dirs)
    audit_opts = {"fraction": args.fraction, "bootstrap": args.bootstrap, "seed": args.seed, "compare": compare,
                  "host": host}
    if getattr(args, "held_out_only", False):
        audit_opts["held_out_only"] = True
    # the audit itself first: its errors stop the command
    summaries = run_summaries(run_tables, {**options, "audit": audit_opts}, host, only=[name])
    # the rest of the report's summaries (the audit plugin, not asked, adds nothing): a failure is a note
    # (each probe its own line there: the audit's tables keep the probe as a column of their own)
    report_tables = probes_apart(run_tables)
    summaries, failed = compute_summaries(report_tables, options, host, into=summaries)
    summaries.notes.extend(option_notes + failed)
    headline = summaries.headline["audit"]  # audit.json: the headline numbers, the tables written, the notes
    out = args.output or (args.results_dirs[0] / "audit")
    from prism_plugin.commands import writes_into

    writes_into(args, out)  # one writer per folder
    for table in headline["tables"]:
        write_csv(out / f"{table}.csv", summaries.tables[stem(table)])
    atomic_write_text(out / "audit.json", dumps(headline))
    view = build_view(out, host, sources=dirs, run_tables=run_tables, summaries=summaries, tables_dir=out,
                      options={**options, "audit": audit_opts},
                      title=models_title("Acquisition-shift audit", headline["models"]))
    target, sections = write_view(view, host)
    atomic_write_text(out / "audit.md", to_markdown([s for s in sections if is_audit_section(s)], headline, FIGURES))
    print(f"audit of {headline['n_runs']} runs ({len(headline['models'])} models, {len(headline['tasks'])} tasks): "
          f"{', '.join(headline['tables'])}")
    for note in headline["notes"]:
        print(f"note: {note}")
    print(f"tables: {out}")
    print(f"report: {target}")
    return 0
