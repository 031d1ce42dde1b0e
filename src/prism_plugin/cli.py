"""``prism-run``: argument parsing only; the work is done by the modules it calls."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Sequence

from prism_plugin.errors import PrismError

PROG = "prism-run"

#: Subcommands living in their own modules: name -> module under prism_plugin.commands.
#: Each module defines ``add_parser(subparsers)`` and ``run(args) -> int``.
COMMAND_MODULES: dict[str, str] = {
    "compare": "compare",
    "reference": "reference",
    "cache": "cache",
    "findings": "findings",
    "audit": "audit",
    "sensitivity": "sensitivity",
    "geometry": "geometry",
}
SUBCOMMANDS = ("ls", "validate", "report", *COMMAND_MODULES)


def _one_line_warnings() -> None:
    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message).splitlines()[0] if str(message) else category.__name__
        print(f"{PROG}: warning: {text}", file=sys.stderr)

    warnings.showwarning = show


def parse_model_args(items: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        for part in item.split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise PrismError(f"--model-args {part!r}: expected key=value (e.g. pretrained=false,pooling=cls)")
            key, value = part.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--include-path", action="append", default=[], type=Path, metavar="DIR",
                   help="extra folder of task YAML files (searched first)")
    p.add_argument("--disable", action="append", default=[], metavar="PLUGIN",
                   help="disable a plugin by name (also: PRISM_DISABLE_PLUGINS=a,b)")
    p.add_argument("--debug", action="store_true", help="show full tracebacks")


def main_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Run the PRISM reliability protocol: task -> embeddings (cached) -> probe grid -> metrics -> "
                    "runs.csv, summary.json, report. Subcommands: ls, validate, report (see `prism-run ls -h`).",
    )
    p.add_argument("--task", action="append", required=True, metavar="TASK",
                   help="task name (see `prism-run ls tasks`) or a task YAML file; repeatable")
    p.add_argument("--model", action="append", required=True, metavar="ADAPTER",
                   help="adapter name (see `prism-run ls adapters`), e.g. demo_vit, timm:vit_small_patch16_224, "
                        "precomputed; repeatable")
    p.add_argument("--model-args", action="append", metavar="K=V[,K=V]",
                   help="adapter options, e.g. pretrained=false,pooling=cls or root=/data/embeddings/uni")
    p.add_argument("--output", type=Path, default=None, metavar="DIR",
                   help="results directory (default: prism_results/<task>/<model>)")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="embedding cache (default: $PRISM_CACHE_DIR or ~/.cache/prism-plugin)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a task key, e.g. --set label_fractions=[0.01,0.1] --set probe.C=0.1")
    p.add_argument("--probe", default=None, metavar="KIND",
                   help="probe head (same as --set probe.kind=KIND): logistic (default), logistic_std, knn1, "
                        "centroid, centroid_cos, linear_svm, or a plugin's head")
    p.add_argument("--probe-backend", choices=("sklearn", "torch"), default=None,
                   help="logistic probe solver: sklearn lbfgs (reference, default) or the converged torch backend")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run N label fractions at once (local process pool; default 1: the fit is "
                        "memory-bandwidth bound, see BENCHMARKS.md)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local (default) or ray: grid units as Ray tasks reading the shared cache")
    p.add_argument("--address", default=None, metavar="HOST:PORT", help="Ray cluster address (--executor ray)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="take N items per split (smoke runs)")
    p.add_argument("--allow-size-mismatch", action="store_true",
                   help="run even if split sizes differ from those recorded in the task")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:1, mps")
    p.add_argument("--num-workers", type=int, default=None, metavar="N", help="DataLoader workers for extraction")
    p.add_argument("--offline", action="store_true", help="never touch the network (sets HF_HUB_OFFLINE=1)")
    p.add_argument("--no-report", action="store_true", help="do not write report.md")
    p.add_argument("--quiet", action="store_true", help="no progress bars or tables")
    _common(p)
    return p


def sub_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG)
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("ls", help="list plugins, adapters or tasks with where each came from")
    ls.add_argument("what", choices=("plugins", "adapters", "tasks", "groups"))
    _common(ls)
    val = sub.add_parser("validate", help="check a task (name or YAML file) without running it")
    val.add_argument("target", nargs="+")
    val.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    _common(val)
    rep = sub.add_parser("report", help="(re)write report.md for a results directory")
    rep.add_argument("results_dir", type=Path)
    _common(rep)
    for name, module in COMMAND_MODULES.items():
        mod = importlib.import_module(f"prism_plugin.commands.{module}")
        _common(mod.add_parser(sub))
    return p


def _host(args):
    from prism_plugin.plugins import get_host

    return get_host(args.disable)


def cmd_ls(args) -> int:
    host = _host(args)
    if args.what == "plugins":
        rows = [(i.name, ", ".join(i.hooks), i.origin) for i in host.infos.values()]
        _print_rows(("plugin", "hooks", "from"), rows)
        if host.disabled:
            print(f"disabled: {', '.join(sorted(host.disabled))}")
    elif args.what == "adapters":
        rows = []
        for name, entry in sorted(host.adapters().items()):
            shown = name + "<name>" if name.endswith(":") else name
            rows.append((shown, entry.description, entry.origin))
        _print_rows(("adapter", "description", "from"), rows)
    else:
        from prism_plugin.tasks.index import default_index

        index = default_index(host, args.include_path)
        if args.what == "groups":
            rows = [(e.name, len(e.members), e.description[:60], str(e.file))
                    for e in sorted(index.groups().values(), key=lambda e: e.name)]
            _print_rows(("group", "members", "description", "file"), rows)
            return 0
        rows = [(e.name, e.description[:60], str(e.file)) for e in sorted(index.entries().values(), key=lambda e: e.name)]
        _print_rows(("task", "description", "file"), rows)
    return 0


def _print_rows(header, rows) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def cmd_validate(args) -> int:
    from prism_plugin.tasks.index import default_index

    index = default_index(_host(args), args.include_path)
    failures = 0
    for target in args.target:
        try:
            task = index.load(target, args.overrides)
            print(f"ok  {task.name}  ({task.file}): {task.n_classes} classes, splits {', '.join(task.splits)}, "
                  f"{len(task.label_fractions)} fractions x {len(task.seeds)} seeds")
        except PrismError as exc:
            failures += 1
            for problem in str(exc).splitlines():  # validate lists every problem, one per line
                print(f"error  {problem}", file=sys.stderr)
    return 1 if failures else 0


def cmd_report(args) -> int:
    from prism_plugin.report.build import write_report

    from prism_plugin.tables import find_runs_files

    if not args.results_dir.is_dir():
        raise PrismError(f"{args.results_dir}: no such directory; pass a results directory written by prism-run")
    if (args.results_dir / "runs.csv").exists():
        print(write_report(args.results_dir, _host(args)))
    else:  # a folder of results directories (several tasks or models): one combined report
        find_runs_files([args.results_dir])
        print(write_report(args.results_dir, _host(args), sources=[args.results_dir]))
    return 0


def cmd_main(args) -> int:
    from prism_plugin.runner import JobOptions, compact_table, default_output, make_adapter, run_job
    from prism_plugin.tasks.index import default_index
    from prism_plugin.tasks.sweep import expand_sweeps

    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    if args.limit is not None and args.limit < 1:
        raise PrismError(f"--limit {args.limit}: must be a positive number of items per split")
    if args.num_workers is not None and args.num_workers < 0:
        raise PrismError(f"--num-workers {args.num_workers}: must be >= 0")
    host = _host(args)
    index = default_index(host, args.include_path)
    model_args = parse_model_args(args.model_args)
    overrides = list(args.overrides) + ([f"probe.backend={args.probe_backend}"] if args.probe_backend else [])
    overrides += [f"probe.kind={args.probe}"] if args.probe else []
    jobs = index.expand_args(args.task, overrides)  # groups expand to members; every task validated before any work
    jobs = expand_sweeps(jobs, host)  # `sweep:` -> one task variant per value (prism_plugin.tasks.sweep)
    adapters = [make_adapter(host, m, model_args) for m in args.model]
    from prism_plugin.executors import make_executor

    executor = make_executor(args.executor, args.jobs, args.address)
    single = len(jobs) == 1 and len(adapters) == 1 and not jobs[0][0]
    base = Path("prism_results")
    group_runs: dict[str, list] = {}
    for group, task in jobs:
        for adapter in adapters:
            if single and args.output is not None:
                out = args.output
            else:
                out = default_output((args.output or base) / group, task.name, adapter.display_name)
            opts = JobOptions(output=out, model_args=model_args, cache_dir=args.cache_dir, device=args.device,
                              num_workers=args.num_workers, limit=args.limit,
                              allow_size_mismatch=args.allow_size_mismatch, progress=not args.quiet,
                              report=not args.no_report, executor=executor)
            result = run_job(task, adapter, host, opts)
            if group:
                group_runs.setdefault(group, []).append(result.runs)
            if not args.quiet:
                reused = len(result.summary["reused_cells"])
                print(f"\n{adapter.display_name} on {task.name} ({len(result.runs)} runs"
                      f"{f', {reused} reused' if reused else ''}; "
                      f"{result.summary['timings']['total_seconds']:.1f} s)")
                print(compact_table(result.runs))
            print(f"results: {result.results_dir}")
    for group, frames in group_runs.items():  # one table per group: members in group order
        import pandas as pd

        from prism_plugin.results import order_columns, write_csv

        combined = pd.concat(frames, ignore_index=True)
        write_csv((args.output or base) / group / "runs.csv", combined[order_columns(combined.columns)])
        print(f"group {group}: {(args.output or base) / group / 'runs.csv'} ({len(combined)} runs)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _one_line_warnings()
    debug = "--debug" in argv
    if argv and argv[0] in SUBCOMMANDS:
        args = sub_parser().parse_args(argv)
        builtin = {"ls": cmd_ls, "validate": cmd_validate, "report": cmd_report}
        if args.command in builtin:
            handler = builtin[args.command]
        else:
            handler = importlib.import_module(f"prism_plugin.commands.{COMMAND_MODULES[args.command]}").run
    else:
        args = main_parser().parse_args(argv)
        handler = cmd_main
    try:
        return handler(args)
    except PrismError as exc:
        if debug:
            raise
        problems = str(exc).splitlines() or [type(exc).__name__]
        more = (f" (and {len(problems) - 1} more problem(s): `{PROG} validate` lists every one)"
                if len(problems) > 1 else "")
        print(f"{PROG}: error: {problems[0]}{more}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; finished runs are kept, rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: say so in one line, traceback on --debug
        if debug:
            raise
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
