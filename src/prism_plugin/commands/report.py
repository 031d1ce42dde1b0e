"""``prism-run report RESULTS_DIR...``: (re)write ``report.html`` and ``report.md``, or a leaderboard.

One results directory written by ``prism-run`` gets its own report; a folder of results directories (several tasks
or models) gets one combined report, written into it. Several directories (or ``--output`` / ``--reference``) give
a **leaderboard** (:mod:`prism_plugin.report.leaderboard`): one self-contained page in ``--output`` (default
``./prism_leaderboard``) with a sortable table of the models and the PRISM paper's figures, beside the reference
FMs with ``--reference DIR``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prism_plugin.commands import host_of
from prism_plugin.errors import PrismError


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report", help="rebuild a results directory's report, or a leaderboard over several",
        description="Rebuild report.html and report.md from runs.csv and summary.json (a folder of several results "
                    "directories gets one combined report). Several RESULTS_DIRs (or --output / --reference) "
                    "give a leaderboard: one self-contained page with a sortable table of the models and the "
                    "PRISM paper's figures, in tabs, beside the PRISM reference FMs with --reference.")
    p.add_argument("results_dirs", nargs="+", type=Path, metavar="RESULTS_DIR",
                   help="a results directory written by prism-run, or a folder of them; several: a leaderboard")
    p.add_argument("--output", type=Path, default=None, metavar="OUT",
                   help="leaderboard folder (default: ./prism_leaderboard); with several RESULTS_DIRs it may not "
                        "lie inside one of them")
    p.add_argument("--reference", type=Path, default=None, metavar="DIR",
                   help="a folder with the published results_v2 tables (indomain_all_v2.csv, ood_all_v2.csv, ...): "
                        "the eight PRISM reference FMs join the leaderboard (default: the copy `prism-run "
                        "reference pull` downloaded, if any)")
    return p


def run(args) -> int:
    from prism_plugin.results import summary_problem, warn_once
    from prism_plugin.results import find_runs_files

    dirs = list(args.results_dirs)
    for d in dirs:
        if not d.is_dir():
            raise PrismError(f"{d}: no such directory; pass a results directory written by prism-run")
    files = find_runs_files(dirs)  # none in it or below: "no runs.csv found in ...; run prism-run first"
    # a summary.json that does not describe the runs.csv beside it (a rerun killed between the two writes, an
    # edited file) is said once on the console (a warning) and in the report's notes, and is not read
    for folder in dict.fromkeys(f.parent for f in files):
        problem = summary_problem(folder)
        if problem is not None:
            warn_once(problem, always=True)
    if len(dirs) == 1 and args.output is None and args.reference is None:
        from prism_plugin.report.build import write_report

        # one results directory, or a folder of them (several tasks or models): one combined report
        print(write_report(dirs[0], host_of(args)))
        return 0
    from prism_plugin.report.leaderboard import DEFAULT_OUTPUT, write_leaderboard

    if args.output is None:
        print(f"leaderboard: no --output given, writing to ./{DEFAULT_OUTPUT}")
    reference = args.reference
    if reference is None:  # like `prism-run compare`: the copy `prism-run reference pull` verified, if any
        from prism_plugin.commands.reference import pulled_dir, verify_files

        pulled = pulled_dir()
        if pulled.is_dir() and any(pulled.iterdir()) and not verify_files(pulled):
            reference = pulled
            print(f"leaderboard: the PRISM reference FMs from the pulled copy in {pulled}")
    target = write_leaderboard(dirs, args.output, host_of(args), reference=reference)
    print(f"leaderboard: {target}")
    return 0
