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

from prism_plugin.commands import add_wait, host_of, writes_into
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
    add_wait(p)
    return p


def run(args) -> int:
    from prism_plugin.results import results_inputs

    # each input is a results folder (or a folder of them) whose files belong together, else one line naming it
    dirs = results_inputs(args.results_dirs)
    if len(dirs) == 1 and args.output is None and args.reference is None:
        from prism_plugin.report.build import write_report

        # one results directory, or a folder of them (several tasks or models): one combined report
        writes_into(args, dirs[0])  # report.*, figures/ are written there: not while a run writes it
        print(write_report(dirs[0], host_of(args)))
        return 0
    from prism_plugin.report.leaderboard import DEFAULT_OUTPUT, check_output, write_leaderboard

    writes_into(args, check_output(args.output, dirs))
    if args.output is None:
        print(f"leaderboard: no --output given, writing to ./{DEFAULT_OUTPUT}")
    reference = args.reference
    if reference is None:  # like `prism-run compare`: the pulled copy, if any (verified there; damaged: an error)
        from prism_plugin.reference_files import pulled_copy

        reference = pulled_copy()
        if reference is not None:
            print(f"leaderboard: the PRISM reference FMs from the pulled copy in {reference}")
    target = write_leaderboard(dirs, args.output, host_of(args), reference=reference)
    print(f"leaderboard: {target}")
    return 0
