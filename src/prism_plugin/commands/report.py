"""``prism-run report RESULTS_DIR``: (re)write ``report.html`` and ``report.md``.

A results directory written by ``prism-run`` gets its own report; a folder of results directories
(several tasks or models) gets one combined report.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prism_plugin.commands import host_of
from prism_plugin.errors import PrismError


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report", description="Rebuild report.html and report.md from runs.csv and summary.json (a folder of "
                              "several results directories gets one combined report).")
    p.add_argument("results_dir", type=Path, help="a results directory written by prism-run, or a folder of them")
    return p


def run(args) -> int:
    from prism_plugin.report.build import write_report
    from prism_plugin.results import summary_problem, warn_once
    from prism_plugin.tables import find_runs_files

    if not args.results_dir.is_dir():
        raise PrismError(f"{args.results_dir}: no such directory; pass a results directory written by prism-run")
    files = find_runs_files([args.results_dir])  # none in it or below: "no runs.csv found in ...; run prism-run first"
    # a summary.json that does not describe the runs.csv beside it (a rerun killed between the two writes, an
    # edited file) is said once on the console (a warning) and in the report's notes, and is not read
    for folder in dict.fromkeys(f.parent for f in files):
        problem = summary_problem(folder)
        if problem is not None:
            warn_once(problem, always=True)
    # one results directory, or a folder of them (several tasks or models): one combined report
    print(write_report(args.results_dir, host_of(args)))
    return 0
