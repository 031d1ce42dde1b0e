"""``prism-run evaluate``: the PRISM package's ``prism evaluate`` on .npy embeddings.

``prism-run evaluate --train-features X_train.npy --train-labels y_train.npy --test-features ...
--test-labels ... [--val-features ... --val-labels ...] --dataset pcam --model-name MyModel
[--output CSV] [--label-fractions 0.01,0.1,1.0] [--seeds 42,123,456] [--C 1.0]`` runs the PRISM
protocol (:class:`prism_plugin.compat.PRISMEvaluator`), prints the seed means per fraction and writes
the per-run table (the PRISM package's columns) to ``--output`` or ``<model>_<dataset>_results.csv``.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    from prism_plugin.compat.cli import add_evaluate_arguments

    p = subparsers.add_parser(
        "evaluate",
        description="The PRISM package's `prism evaluate`: run the protocol (label fractions x seeds, logistic "
                    "probe, temperature on the validation split) on .npy embeddings and write the per-run table "
                    "(<model>_<dataset>_results.csv unless --output is given).",
    )
    return add_evaluate_arguments(p)


def run(args) -> int:
    from prism_plugin.compat.cli import run_evaluate

    return run_evaluate(args)
