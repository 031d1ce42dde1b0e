"""The main job, ``prism-run --task T --model M [--model-args K=V]``: every task x every model.

:mod:`prism_plugin.cli` parses the command line (``args.models`` is the list of ``(adapter name, model_args)``
pairs, each model with its own options); :func:`run` builds each adapter with
:func:`prism_plugin.runner.make_adapter` and runs :func:`prism_plugin.runner.run_job` for every (task, model) pair.
Groups also get one combined ``runs.csv``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prism_plugin.commands import check_extraction_args, host_of, writes_into
from prism_plugin.errors import PrismError
from prism_plugin.paths import confined


def model_label(display_name: str, model_args: dict[str, Any]) -> str:
    """``DemoViT-Tiny`` -> ``DemoViT-Tiny-pooling-mean`` (:func:`prism_plugin.commands.model_args.model_label`)."""
    from prism_plugin.commands.model_args import model_label as label_of

    return label_of(display_name, model_args)


def output_names(adapters: list, specs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The label (and results-folder name) of each model: one rule whether it runs alone or beside other option
    sets (:func:`prism_plugin.commands.model_args.model_labels`)."""
    from prism_plugin.commands.model_args import model_labels

    return model_labels([a.display_name for a in adapters], specs)


def run(args) -> int:
    import pandas as pd

    from prism_plugin.executors import make_executor
    from prism_plugin.kept_runs import check_grid_kept
    from prism_plugin.results import order_columns, write_group
    from prism_plugin.runner import JobOptions, check_before_work, make_adapter, planned_runs, run_job
    from prism_plugin.tasks.index import default_index
    from prism_plugin.tasks.sweep import expand_sweeps

    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    check_extraction_args(args)
    host = host_of(args)
    index = default_index(host, args.include_path)
    overrides = list(args.overrides) + ([f"probe.backend={args.probe_backend}"] if args.probe_backend else [])
    # --probe KIND: exactly that one probe (it replaces a task's `probes:` list, e.g. the hematology audit's)
    overrides += [f"probe.kind={args.probe}", "probes=null"] if args.probe else []
    # --bootstrap N: the number of test-set bootstrap replicates (prism_plugin.metrics.bootstrap; 0 = off)
    overrides += [f"bootstrap.n={args.bootstrap}"] if getattr(args, "bootstrap", None) is not None else []
    jobs = index.expand_args(args.task, overrides)  # groups expand to members; every task validated before any work
    jobs = expand_sweeps(jobs, host)  # `sweep:` -> one task variant per value (prism_plugin.tasks.sweep)
    specs: list[tuple[str, dict[str, Any]]] = list(args.models)
    adapters = [make_adapter(host, name, model_args) for name, model_args in specs]
    labels = output_names(adapters, specs)
    for adapter, label in zip(adapters, labels):  # one model run with several option sets: each its own
        adapter.display_name = label              # `model` value too (compare, audit and report tell them apart)
    executor = make_executor(args.executor, args.jobs, args.address)
    try:
        single = len(jobs) == 1 and len(adapters) == 1 and not jobs[0][0]
        root = Path(args.output) if args.output is not None else Path("prism_results")
        outputs = output_dirs(jobs, labels, root, single and args.output is not None)
        overwrite = bool(getattr(args, "overwrite", False))
        # a transfer task fits on its source's train/val splits: the same fits as the source's own grid, so
        # the jobs of this command share them (in-process grids only; prism_plugin.protocol.fit_memo)
        memo = None
        if executor.in_process:
            from prism_plugin.protocol.fit_memo import FitMemo
            from prism_plugin.runner import fit_tag

            memo = FitMemo.plan(fit_tag(task, label) for _, task in jobs for label in labels)

        def options(out: Path, model_args: dict[str, Any]) -> JobOptions:
            return JobOptions(output=out, model_args=model_args, cache_dir=args.cache_dir, device=args.device,
                              num_workers=args.num_workers, limit=args.limit,
                              allow_size_mismatch=args.allow_size_mismatch, progress=not args.quiet,
                              report=not args.no_report, executor=executor, overwrite=overwrite,
                              extract_workers=getattr(args, "extract_workers", 1), fit_memo=memo)

        # one writer per results folder: every folder of this command (and each group's) is locked before it is
        # checked; another prism-run writing one of them stops this one at once, naming it (--wait: waits)
        writes_into(args, *outputs.values(), *(confined(root, group) for group, _ in jobs if group))
        # every folder is checked before any work, so a later member's refusal never follows earlier runs
        planned_groups: dict[str, list[tuple]] = {}
        for group, task in jobs:
            for adapter, label, (_, model_args) in zip(adapters, labels, specs):
                check_before_work(task, options(outputs[(group, task.name, label)], model_args), adapter.display_name)
                if group:
                    planned_groups.setdefault(group, []).extend(planned_runs(task, adapter.display_name))
        for group, planned in planned_groups.items():
            combined_csv = confined(root, group) / "runs.csv"
            check_grid_kept(combined_csv, planned, overwrite=overwrite, where=f"group {group} (--output {root})")
        for group in planned_groups:  # derived from the members and rebuilt at the end: never left stale by a kill
            for name in ("runs.csv", "group.json"):
                try:
                    (confined(root, group) / name).unlink()
                except FileNotFoundError:
                    pass
        group_runs: dict[str, list] = {}
        group_members: dict[str, list[Path]] = {}
        for group, task in jobs:
            for adapter, label, (_, model_args) in zip(adapters, labels, specs):
                opts = options(outputs[(group, task.name, label)], model_args)
                result = run_job(task, adapter, host, opts)
                if group:
                    group_runs.setdefault(group, []).append(result.runs)
                    group_members.setdefault(group, []).append(Path(result.results_dir) / "runs.csv")
                if not args.quiet:
                    reused = len(result.summary["reused_cells"])
                    shared = result.summary["timings"].get("shared_fits", 0)
                    print(f"\n{label} on {task.name} ({len(result.runs)} runs"
                          f"{f', {reused} reused' if reused else ''}"
                          f"{f', {shared} probe fits shared with an earlier task' if shared else ''}; "
                          f"{result.summary['timings']['total_seconds']:.1f} s)")
                    print(compact_table(result.runs, result.summary.get("flags")))
                print(f"results: {result.results_dir}")
        for group, frames in group_runs.items():  # one table per group: members in group order
            combined = pd.concat(frames, ignore_index=True)
            if "split_seed" in combined and combined["split_seed"].isna().any():  # members without split_seeds
                combined["split_seed"] = combined["split_seed"].astype("Int64")  # 0, not 0.0, beside empty cells
            target = confined(root, group) / "runs.csv"
            # with group.json: the digests of the table and of its members', which the readers verify
            write_group(target.parent, combined[order_columns(combined.columns)], group_members[group])
            print(f"group {group}: {target} ({len(combined)} runs)")
        return 0
    finally:  # the --jobs pool lives for the whole command (prism_plugin.executors.Executor)
        executor.close()


def output_dirs(jobs: list, labels: list[str], root: Path, single: bool) -> dict[tuple[str, str, str], Path]:
    """The results folder of every (group, task, model): ``root[/<group>]/<task>/<model>``.

    Every name becomes one sanitised path component confined under ``root`` (:func:`prism_plugin.paths.confined`),
    so a group, task, sweep variant or model name can never write outside ``--output``. Two jobs whose names
    sanitise to the same folder (``a b`` and ``a_b``) would overwrite each other's ``runs.csv``: refused, naming
    both.
    """
    from prism_plugin.runner import default_output

    out: dict[tuple[str, str, str], Path] = {}
    owner: dict[Path, tuple[str, str, str]] = {}
    group_dirs: dict[Path, str] = {}
    for group, task in jobs:
        if group:
            gdir = confined(root, group)
            other = group_dirs.setdefault(gdir, group)
            if other != group:
                raise PrismError(f"groups {other!r} and {group!r} would share the results folder {gdir}; "
                                 "rename one of them")
        for label in labels:
            key = (group, task.name, label)
            if single:
                out[key] = root
                continue
            path = default_output(confined(root, group) if group else root, task.name, label)
            first = owner.setdefault(path, key)
            if first != key:
                raise PrismError(f"task {first[1]!r} (model {first[2]}) and task {task.name!r} (model {label}) "
                                 f"would share the results folder {path}: their names differ only in characters "
                                 "that cannot be part of a folder name; rename one of them")
            out[key] = path
    return out


def compact_table(runs, flags: list[dict] | None = None) -> str:
    """Seed mean ± std per fraction of the headline metrics, as fixed-width text.

    ``collapsed``: runs with the prevalence-aware collapse (PRISM's ``degenerate`` for runs without it); ``flags``:
    per fraction, the runs each quality warning marks (``T@bound 3``, ``NLL-up 1``, ``not-converged 2``;
    :mod:`prism_plugin.quality`). ``flags`` default: those :func:`~prism_plugin.runner.run_job` attached to
    ``runs``, else recomputed with the default temperature bounds. A table of several probes (a task with
    ``probes:``) has one line per probe and fraction, the mean ± std over its seeds and split seeds.
    """
    import pandas as pd

    from prism_plugin import quality

    cols = [c for c in ("auroc", "f1_macro", "ece_fixed", "ece_scaled_fixed", "temperature") if c in runs]
    if flags is None:
        flags = runs.attrs.get("flags")
    if flags is None:
        flags = [f.to_dict() for f in quality.run_flags(runs)]
    by_probe = "probe" in runs and runs["probe"].nunique(dropna=True) > 1
    ids = pd.Series(quality.all_run_ids(runs), index=runs.index)
    markers = quality.fraction_markers(flags)
    any_marks = bool(markers)
    width = max([len(str(p)) for p in runs["probe"].dropna().unique()] + [5]) if by_probe else 0
    head = (f"{'probe':<{width}}  " if by_probe else "") + f"{'fraction':>8}  "
    lines = [head + "  ".join(f"{c:>17}" for c in cols) + "  collapsed" + ("  flags" if any_marks else "")]
    if by_probe:  # probes in grid order, fractions ascending within each
        kinds = list(dict.fromkeys(runs["probe"].dropna()))
        items = sorted(runs.groupby(["probe", "fraction"], sort=False),
                       key=lambda item: (kinds.index(item[0][0]), float(item[0][1])))
    else:
        items = list(runs.groupby("fraction", sort=True))
    for name, g in items:
        probe, frac = name if by_probe else (None, name)
        cells = []
        for c in cols:
            v = pd.to_numeric(g[c], errors="coerce")
            sd = v.std(ddof=1) if len(v) > 1 else float("nan")
            cells.append(f"{v.mean():>8.4f} ± {sd:<6.4f}")
        if "collapsed" in g and quality.as_bool(g["collapsed"]).notna().any():
            n_deg = int((quality.as_bool(g["collapsed"]) == 1.0).sum())
        else:
            n_deg = int((quality.as_bool(g["degenerate"]) == 1.0).sum()) if "degenerate" in g else 0
        found = quality.cell_markers(flags, ids[g.index]) if by_probe else markers.get(float(frac), [])
        mark = [m for m in found if not m.startswith("collapsed")]
        lines.append((f"{str(probe):<{width}}  " if by_probe else "") + f"{frac:>8g}  " + "  ".join(cells) +
                     f"  {f'{n_deg}/{len(g)}':>9}" + (f"  {', '.join(mark)}" if mark else ""))
    return "\n".join(lines)
