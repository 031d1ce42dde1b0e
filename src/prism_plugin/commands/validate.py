"""``prism-run validate TARGET...``: load and check tasks (names or YAML files) without running them.

Every problem of every target is listed, one per line; the exit status is 2 (bad input, as running the task
would say) when any target fails, 0 when all are valid.
"""

from __future__ import annotations

import argparse
import sys

from prism_plugin.commands import host_of
from prism_plugin.errors import EXIT_BAD_INPUT, EXIT_OK, PrismError, printable


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "validate", description="Load each task (or group) as `prism-run --task` would and list every problem "
                                "found, one per line; nothing is computed.")
    p.add_argument("target", nargs="+", help="task or group name, or a task YAML file")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="override a task key before checking, as in the main command")
    return p


def run(args) -> int:
    from prism_plugin.embed.load import definition_problem
    from prism_plugin.tasks.index import default_index

    index = default_index(host_of(args), args.include_path)
    failures = 0
    for target in args.target:
        try:
            task = index.load(target, args.overrides)
            members = task.tasks if getattr(task, "is_group", False) else [task]
            problems = [p for p in map(definition_problem, members) if p]  # val = test and the like
            if problems:
                raise PrismError("\n".join(problems))
            if task.is_transfer:
                what = f"{task.source_config.name} -> {task.target_config.name} ({task.target_split})"
            else:
                what = "splits " + ", ".join(task.splits)
            print(f"ok  {printable(task.name)}  ({task.file}): {task.n_classes} classes, {what}, {task.grid_text()}")
            for member in members:
                if member.is_transfer and not (member.extras or {}).get("shift"):
                    print(f"hint  {printable(member.name)}  ({member.file}): no shift kind declared; add "
                          "`shift: covariate` (same labels, other site/scanner/stain), `shift: label_definition` or "
                          "`shift: prior` so the report knows which yardstick applies (undeclared, it is not "
                          "compared with the PRISM label-definition bands)")
        except PrismError as exc:
            failures += 1
            for problem in str(exc).split("\n"):  # validate lists every problem, one per line
                if problem.strip():
                    print(f"error  {printable(problem)}", file=sys.stderr)
    return EXIT_BAD_INPUT if failures else EXIT_OK
