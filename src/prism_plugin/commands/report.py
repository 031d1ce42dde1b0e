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
    from prism_plugin.tables import find_runs_files

    if not args.results_dir.is_dir():
        raise PrismError(f"{args.results_dir}: no such directory; pass a results directory written by prism-run")
    find_runs_files([args.results_dir])  # no runs.csv in it or below: "no runs.csv found in ...; run prism-run first"
    # one results directory, or a folder of them (several tasks or models): one combined report
    print(write_report(args.results_dir, host_of(args)))
    return 0
