"""A ``prism-run`` subcommand: ``prism-run example-hello RESULTS_DIR...``.

A command is any module (or object) with ``add_parser(subparsers)`` and ``run(args) -> int``;
registered lazily by module name, it is imported only when the command is used.
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "example-hello"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="say hello to the runs of a results directory (example plugin)",
                              description="Count the runs, models and tasks under RESULTS_DIR and print the mean "
                                          "of the example metric.")
    p.add_argument("results_dirs", nargs="+", type=Path, metavar="RESULTS_DIR")
    return p


def run(args) -> int:
    import pandas as pd

    from prism_plugin.results import find_runs_files

    files = find_runs_files(args.results_dirs)  # PrismError (one clear line) when there is none
    runs = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    models = sorted(runs["model"].astype(str).unique()) if "model" in runs else []
    tasks = sorted(runs["task"].astype(str).unique()) if "task" in runs else []
    print(f"hello from prism-extension-example: {len(runs)} runs of {len(models)} model(s) "
          f"({', '.join(models)}) on {len(tasks)} task(s) ({', '.join(tasks)}) in {len(files)} runs.csv file(s)")
    if "example_brier_top" in runs:
        print(f"mean example_brier_top: {runs['example_brier_top'].mean():.4f}")
    return 0
