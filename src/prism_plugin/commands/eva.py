"""``prism-run eva DIR``: the PRISM report of an eva embeddings folder, in one command.

``DIR`` is the folder eva's embeddings writer wrote (``manifest.csv`` + one ``.pt`` file per sample;
:mod:`prism_plugin.data.eva`). The command reads the manifest (splits, targets), writes a task file for it
(``source: {type: eva, root: DIR}``, PRISM's protocol settings, one class per target, or ``--class-names``)
under the cache folder (or ``--task-file``), prints where, and runs it with ``--model precomputed``, as
``prism-run --task FILE --model precomputed`` would: the same grid, resume, results folder and report, and
every option of the main job (``--output``, ``--set``, ``--probe``, ``--no-report``, ...).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

#: options of the main job this command does not take (it sets the task and the model itself)
NOT_FORWARDED = {"-h", "--help", "--task", "--model", "--model-args", "--include-path", "--disable", "--debug"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    from prism_plugin.cli import main_parser

    p = subparsers.add_parser(
        "eva",
        description="Run the PRISM protocol on embeddings eva's embeddings writer wrote (manifest.csv + one .pt "
                    "file per sample), without re-extracting: writes a task for the folder (classes from the "
                    "targets) and runs it with --model precomputed. Options of the main job pass through.",
    )
    p.add_argument("folder", type=Path, metavar="DIR",
                   help="the writer's output folder (holding manifest.csv), or the manifest file itself")
    p.add_argument("--class-names", default=None, metavar="A,B,...",
                   help="names of the targets 0, 1, ... (default: class_0, class_1, ... up to the largest target)")
    p.add_argument("--dataset", default=None, help="dataset name (default: the folder's name)")
    p.add_argument("--name", default=None, metavar="MODEL",
                   help="model name in runs.csv (default: the parent folder's name, as in eva's "
                        "EMBEDDINGS_ROOT/<model>/<dataset>)")
    p.add_argument("--task-name", default=None, help="task name (default: eva_<dataset>)")
    for split in ("train", "val", "test"):
        p.add_argument(f"--{split}", default=split, metavar="SPLIT",
                       help=f"the manifest's split name used as PRISM's {split} split (default: {split})")
    p.add_argument("--aggregate", choices=("none", "mean"), default="none",
                   help="a .pt file holding several embeddings: refuse (none, default) or average them (mean)")
    p.add_argument("--task-file", type=Path, default=None, metavar="FILE",
                   help="where to write the task (default: <cache>/eva_tasks/<task>.yaml)")
    taken = set(p._option_string_actions)
    for action in main_parser()._actions:  # the main job's options, forwarded as they are
        if action.option_strings and not set(action.option_strings) & (NOT_FORWARDED | taken):
            p._add_action(action)
    return p


def _plain(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._-") or "eva"


def task_text(*, name: str, dataset: str, root: Path, class_names: list[str], splits: dict[str, str],
              aggregate: str, manifest: str | None = None) -> str:
    """The task YAML of an eva embeddings folder."""
    import json

    source = {"type": "eva", "root": str(root)}
    if manifest:
        source["manifest"] = manifest
    if aggregate != "none":
        source["aggregate"] = aggregate
    lines = [
        f"task: {name}",
        f"description: {json.dumps(f'eva embeddings at {root} (task written by prism-run eva)')}",
        "include: _prism_protocol.yaml",
        f"dataset: {json.dumps(dataset)}",
        f"class_names: {json.dumps(class_names)}",
        f"source: {json.dumps(source)}",
        "splits:",
        *(f"  {s}: {{name: {json.dumps(n)}}}" for s, n in splits.items()),
    ]
    return "\n".join(lines) + "\n"


def run(args) -> int:
    from prism_plugin.commands import check_cache_dir
    from prism_plugin.commands.run import run as run_main
    from prism_plugin.data.eva import manifest_path, read_manifest
    from prism_plugin.errors import PrismError
    from prism_plugin.paths import cache_root
    from prism_plugin.storage import atomic_write_bytes

    folder = Path(args.folder).expanduser()
    path = manifest_path(folder)
    manifest = read_manifest(path)
    root = path.parent.absolute()
    splits = {"train": args.train, "val": args.val, "test": args.test}
    have = manifest.split_names()
    for prism_split, name in splits.items():
        if name not in have:
            shown = ", ".join(repr(s) for s in have)
            raise PrismError(f"{path}: no split {name!r} for PRISM's {prism_split} split (the manifest's splits: "
                             f"{shown}); name one with --{prism_split} SPLIT, or run eva predict on all three "
                             "dataloaders (train, val, test)")
    top = max(manifest.targets)
    if args.class_names:
        names = [n.strip() for n in args.class_names.split(",")]
        if any(not n for n in names) or len(set(names)) != len(names):
            raise PrismError(f"--class-names {args.class_names!r}: give distinct, non-empty names separated by commas")
        if len(names) <= top:
            raise PrismError(f"--class-names lists {len(names)} names, but {path} has targets up to {top}; give "
                             f"{top + 1} names (targets 0..{top})")
    else:
        names = [f"class_{i}" for i in range(top + 1)]
    if len(names) < 2:
        raise PrismError(f"{path}: every target is 0, one class; PRISM needs at least 2 classes (or pass "
                         "--class-names with the dataset's names)")
    dataset = args.dataset or root.name
    task_name = args.task_name or _plain(f"eva_{dataset}")
    model = args.name or (root.parent.name if root.parent != root else "") or "eva"
    text = task_text(name=task_name, dataset=dataset, root=root, class_names=names, splits=splits,
                     aggregate=args.aggregate, manifest=path.name if path.name != "manifest.csv" else None)
    check_cache_dir(getattr(args, "cache_dir", None))
    base = Path(args.cache_dir).expanduser() if getattr(args, "cache_dir", None) else cache_root()
    task_file = Path(args.task_file) if args.task_file else base / "eva_tasks" / f"{task_name}.yaml"
    if task_file.suffix not in (".yaml", ".yml"):
        raise PrismError(f"--task-file {task_file}: must end in .yaml")
    task_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(task_file, text.encode("utf-8"))
    if not args.quiet:
        print(f"eva embeddings {root}: {len(manifest.files)} samples, splits {', '.join(have)}, "
              f"{len(names)} classes; task {task_file} (rerun: prism-run --task {task_file} --model precomputed)")
    args.task = [str(task_file)]
    args.models = [("precomputed", {"name": model})]
    return run_main(args)
