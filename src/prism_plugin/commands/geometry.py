"""``prism-run geometry``: mutual k-NN alignment between models' embeddings of one task.

::

    prism-run geometry --task prism_demo --model demo_vit --model timm:vit_tiny_patch16_224 \\
        --model-args pretrained=false --output prism_results   # options of the model before them

For each task, the ``--split`` (default ``test``) embeddings of every model are read from the embedding cache
(missing ones are extracted and cached, exactly as a run would), and the models × models alignment matrix is
printed and written to ``OUT/geometry/alignment_<dataset>.csv`` (+ ``.json`` with k, N, metric and the chance
level). A report written for ``OUT`` (``prism-run sensitivity OUT`` or ``prism-run findings``) shows it as a
heatmap.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from prism_plugin.commands.model_args import add_model_options
from prism_plugin.errors import PrismError

DEFAULT_OUTPUT = Path("prism_results")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "geometry",
        help="mutual k-NN alignment between models' embeddings of a task (from the embedding cache)",
        description="Mutual k-nearest-neighbour alignment (Jaccard overlap of each sample's k nearest neighbours, "
                    "k = 50 by default) between every pair of models on the same split of a task. Embeddings come "
                    "from the cache; missing ones are extracted.",
    )
    p.add_argument("--task", action="append", required=True, metavar="TASK", help="task name or YAML file; repeatable")
    add_model_options(p, "adapter name; repeat for every model (at least 2), each followed by its own "
                         "--model-args (or --model 'NAME[k=v]')")
    p.add_argument("--split", default="test", help="which split to compare on (default test)")
    p.add_argument("--k", type=int, default=50, help="neighbours per sample (default 50, as the paper)")
    p.add_argument("--metric", default="cosine", choices=("cosine", "euclidean"),
                   help="distance for the neighbour search (default cosine)")
    p.add_argument("--max-samples", type=int, default=None, metavar="N",
                   help="compare on a fixed random subset of N samples (default: all)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="override a task key (as for a run)")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="embedding cache (default: $PRISM_CACHE_DIR or ~/.cache/prism-plugin)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="take N items per split (as for a run)")
    p.add_argument("--allow-size-mismatch", action="store_true", help="as for a run")
    p.add_argument("--device", default="auto", help="device for extraction of missing embeddings")
    p.add_argument("--num-workers", type=int, default=None, metavar="N", help="DataLoader workers for extraction")
    p.add_argument("--output", type=Path, default=None, metavar="DIR",
                   help=f"folder to write geometry/alignment_<dataset>.csv into (default ./{DEFAULT_OUTPUT})")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    from prism_plugin.commands import add_wait

    add_wait(p)
    return p


def _safe(text: str) -> str:
    from prism_plugin.paths import safe_component

    return safe_component(text)


def run(args) -> int:
    from prism_plugin.commands.model_args import model_labels, model_specs
    from prism_plugin.commands import check_extraction_args, host_of
    from prism_plugin.storage import atomic_write_text, write_csv
    from prism_plugin.runner import JobOptions, make_adapter
    from prism_plugin.summaries.geometry import alignment_matrix, load_model_embeddings, subsample
    from prism_plugin.tasks.index import default_index

    if len(args.model) < 2:
        raise PrismError("--model: alignment compares models; give at least two (repeat --model)")
    if args.k < 1:
        raise PrismError(f"--k {args.k}: must be a positive number of neighbours (the paper uses 50)")
    if args.max_samples is not None and args.max_samples < 2:
        raise PrismError(f"--max-samples {args.max_samples}: must be at least 2")
    check_extraction_args(args)
    host = host_of(args)
    index = default_index(host, args.include_path)
    tasks = [index.load(t, args.overrides) for t in args.task]
    specs = model_specs(args.model_order)
    adapters = [make_adapter(host, name, margs) for name, margs in specs]
    for adapter, label in zip(adapters, model_labels([a.display_name for a in adapters], specs)):
        adapter.display_name = label  # the labels `prism-run` gives the same models (one labelling rule)
    model_args = specs[0][1] if len(specs) == 1 else {}
    out_dir = (args.output or DEFAULT_OUTPUT) / "geometry"
    from prism_plugin.commands import writes_into

    writes_into(args, out_dir)  # one writer per folder
    opts = JobOptions(output=out_dir, model_args=model_args, cache_dir=args.cache_dir, device=args.device,
                      num_workers=args.num_workers, limit=args.limit, allow_size_mismatch=args.allow_size_mismatch,
                      progress=not args.quiet, report=False)
    for task in tasks:
        embs = load_model_embeddings(task, adapters, opts, split=args.split, host=host)
        n = next(iter(embs.values())).shape[0]
        keep = subsample(n, args.max_samples)
        if args.k >= len(keep):
            raise PrismError(f"--k {args.k}: {task.name}/{args.split} has only {len(keep)} samples; lower --k")
        matrix = alignment_matrix({m: X[keep] for m, X in embs.items()}, k=args.k, metric=args.metric)
        stem = f"alignment_{_safe(task.dataset)}"
        write_csv(out_dir / f"{stem}.csv", matrix.round(6), index=True)
        meta = {**matrix.attrs, "task": task.name, "dataset": task.dataset, "split": args.split,
                "models": list(matrix.index)}
        atomic_write_text(out_dir / f"{stem}.json", json.dumps(meta, indent=2) + "\n")
        print(f"\nMutual {args.k}-NN alignment on {task.name}/{args.split} ({len(keep)} samples, {args.metric}; "
              f"chance {matrix.attrs['chance']:.4f}):")
        print(matrix.round(4).to_string())
        print(f"wrote {out_dir / (stem + '.csv')}")
    return 0


__all__ = ["add_parser", "run"]
