"""The PRISM package's ``prism evaluate / compare / reference`` command line, on prism-plugin.

``python -m prism_plugin.compat evaluate|compare|reference ...`` takes the PRISM package's flags; ``prism-run
evaluate`` is the same ``evaluate`` (:mod:`prism_plugin.commands.evaluate`).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from prism_plugin.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, PrismError, printable

PROG = "python -m prism_plugin.compat"


# --------------------------------------------------------------------------- parsing helpers
def _number_list(text: str, flag: str, kind) -> list:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(kind(part))
        except ValueError:
            what = "numbers such as 0.01,0.1,1.0" if kind is float else "integers such as 42,123,456"
            raise PrismError(f"{flag} {text!r}: {part!r} is not a number; give comma-separated {what}") from None
    if not out:
        raise PrismError(f"{flag} {text!r}: give at least one value (comma-separated)")
    return out


def load_array(path: Path | None, flag: str) -> np.ndarray | None:
    """``np.load`` of a ``.npy`` file named by ``flag``; a bad path or file is one PrismError line."""
    if path is None:
        return None
    path = Path(path).expanduser()
    if not path.is_file():
        raise PrismError(f"{flag} {path}: no such file; pass a .npy array saved with numpy.save")
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise PrismError(f"{flag} {path}: not a readable .npy array ({type(exc).__name__}: {exc}); save it with "
                         "numpy.save") from None
    if isinstance(arr, np.lib.npyio.NpzFile):
        names = list(arr.files)
        arr.close()
        raise PrismError(f"{flag} {path}: an .npz archive ({', '.join(names)}); pass one .npy array per flag")
    return arr


def default_output(model_name: str, dataset: str) -> Path:
    """``<model>_<dataset>_results.csv`` (model name lower-cased), as ``prism evaluate`` writes."""
    safe = lambda s: "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(s))  # noqa: E731
    return Path(f"{safe(str(model_name).lower())}_{safe(dataset)}_results.csv")


# --------------------------------------------------------------------------- evaluate
def add_evaluate_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--train-features", type=Path, required=True, metavar="X_train.npy")
    p.add_argument("--train-labels", type=Path, required=True, metavar="y_train.npy")
    p.add_argument("--test-features", type=Path, required=True, metavar="X_test.npy")
    p.add_argument("--test-labels", type=Path, required=True, metavar="y_test.npy")
    p.add_argument("--val-features", type=Path, default=None, metavar="X_val.npy",
                   help="validation embeddings (needed for temperature scaling and the CRI)")
    p.add_argument("--val-labels", type=Path, default=None, metavar="y_val.npy")
    p.add_argument("--dataset", required=True, help="dataset name, e.g. pcam, mhist, crc (any name works)")
    p.add_argument("--model-name", default="CustomModel", help="display name (default CustomModel)")
    p.add_argument("--output", type=Path, default=None, metavar="CSV",
                   help="where to write the per-run table (default <model>_<dataset>_results.csv, model lower-cased)")
    p.add_argument("--label-fractions", default=None, metavar="F,F,...",
                   help="comma-separated label fractions (default 0.01,0.05,0.1,0.25,0.5,1.0)")
    p.add_argument("--seeds", default=None, metavar="S,S,...", help="comma-separated seeds (default 42,123,456)")
    p.add_argument("--C", type=float, default=1.0, dest="C", help="logistic-regression C (PRISM protocol: 1.0)")
    return p


def _evaluate_notes(res) -> list[str]:
    notes = []
    if res["ece_scaled_fixed"].isna().all():
        notes.append("no validation split (--val-features/--val-labels): temperature and scaled ECE are NaN, "
                     "so no CRI (PRISM never fits the temperature on the test set)")
    deg = res.loc[res["degenerate"].astype(bool)]
    if len(deg):
        fr = ", ".join(f"{f:g}" for f in sorted(deg["fraction"].unique()))
        notes.append(f"{len(deg)} of {len(res)} runs are degenerate (> 99 % of test predictions in one class; "
                     f"fractions {fr}): their F1 and ECE describe a collapsed probe")
    forced = res.loc[res["forced_classes"] > 0]
    if len(forced):
        fr = ", ".join(f"{f:g}" for f in sorted(forced["fraction"].unique()))
        notes.append(f"at fraction(s) {fr} some classes had fewer than one sample's quota and were forced to one "
                     "training sample")
    checks = [c["message"] for c in res.attrs.get("data_checks", []) if c.get("level") == "warning"]
    notes += checks
    # the runs' quality flags, as prism-run prints them (a temperature at its search bound, no convergence, ...)
    notes += [f["message"] for f in res.attrs.get("flags", [])
              if f.get("level") == "warning" and f.get("source") != "data"]
    return notes


def run_evaluate(args: Any) -> int:
    from prism_plugin.compat.evaluator import PRISMEvaluator
    from prism_plugin.storage import write_csv

    if (args.val_features is None) != (args.val_labels is None):
        raise PrismError("--val-features and --val-labels: give both (the validation split for temperature "
                         "scaling) or neither")
    arrays = {flag: load_array(getattr(args, flag[2:].replace("-", "_")), flag)
              for flag in ("--train-features", "--train-labels", "--test-features", "--test-labels",
                           "--val-features", "--val-labels")}
    fractions = None if args.label_fractions is None else _number_list(args.label_fractions, "--label-fractions", float)
    seeds = None if args.seeds is None else _number_list(args.seeds, "--seeds", int)
    print(f"Train: {arrays['--train-features'].shape} | Test: {arrays['--test-features'].shape}"
          + (f" | Val: {arrays['--val-features'].shape}" if arrays["--val-features"] is not None else ""))
    ev = PRISMEvaluator()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # said below, once, as notes
        res = ev.evaluate(arrays["--train-features"], arrays["--train-labels"], arrays["--test-features"],
                          arrays["--test-labels"], dataset=args.dataset, model_name=args.model_name,
                          val_features=arrays["--val-features"], val_labels=arrays["--val-labels"],
                          label_fractions=fractions, seeds=seeds, C=args.C,
                          disable=tuple(getattr(args, "disable", None) or ()))
    cols = ["auroc", "ece_fixed", "ece_scaled_fixed", "brier", "temperature", "degeneracy_share"]
    summary = res.groupby("fraction")[cols].mean().round(4)
    print(f"\n=== {printable(args.model_name)} on {printable(args.dataset)} (seed means) ===")
    print(summary.to_string())
    for note in _evaluate_notes(res):
        print(f"note: {printable(note)}")
    out = args.output or default_output(args.model_name, args.dataset)
    write_csv(Path(out), res)
    print(f"\nSaved: {out}")
    return 0


# --------------------------------------------------------------------------- compare
def add_compare_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--results", type=Path, required=True, metavar="CSV", help="CSV written by evaluate")
    p.add_argument("--dataset", required=True, help="one of the six PRISM datasets, or all")
    p.add_argument("--fraction", type=float, default=None, metavar="F", help="e.g. 0.1 for 10 %% labels")
    p.add_argument("--results-dir", default=None, metavar="DIR",
                   help="results_v2 folder (default: the copy `prism-run reference pull` installed)")
    p.add_argument("--ood-stability", type=float, default=None, metavar="X", help="your model's OOD_Stability")
    p.add_argument("--aggregation", default="multiplicative",
                   help="multiplicative (default), arithmetic, geometric, worst_axis")
    p.add_argument("--output", type=Path, default=None, metavar="CSV", help="also write the comparison")
    return p


def run_compare(args: Any) -> int:
    import pandas as pd

    from prism_plugin.compat.evaluator import PRISMEvaluator
    from prism_plugin.storage import write_csv

    if not Path(args.results).is_file():
        raise PrismError(f"--results {args.results}: no such file; pass the CSV that evaluate wrote")
    try:
        results = pd.read_csv(args.results)
    except Exception as exc:  # pandas raises many types for a malformed CSV
        raise PrismError(f"--results {args.results}: cannot be read as CSV ({type(exc).__name__})") from None
    ev = PRISMEvaluator(results_dir=args.results_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = ev.compare(results, dataset=args.dataset, fraction=args.fraction, aggregation=args.aggregation,
                           custom_ood_stability=args.ood_stability)
    print(f"reference: {ev.reference_source}")
    print(f"\n=== PRISM CRI comparison on {printable(args.dataset)} ({args.aggregation}) ===")
    print(table.to_string(index=False))
    for w in caught:
        print(f"note: {printable(str(w.message))}")
    imputed = table.loc[table["ood_stability_imputed"], "model"].unique()
    if len(imputed):
        print(f"note: ood_stability of {', '.join(map(str, imputed))} is imputed (mean of the reference models, no "
              "transfer measured): its CRI is provisional; pass --ood-stability X if you measured it")
    print("note: the CRI is a screening heuristic; read it with its three components (auroc, ece_scaled, "
          "ood_stability)")
    if args.output:
        write_csv(Path(args.output), table)
        print(f"\nSaved: {args.output}")
    return 0


# --------------------------------------------------------------------------- reference
def add_reference_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--fraction", type=float, default=1.0, metavar="F", help="label fraction (default 1.0)")
    p.add_argument("--results-dir", default=None, metavar="DIR",
                   help="results_v2 folder (default: the copy `prism-run reference pull` installed)")
    return p


def run_reference(args: Any) -> int:
    from prism_plugin.compat.evaluator import PRISMEvaluator

    ev = PRISMEvaluator(results_dir=args.results_dir)
    table = ev.reference_cri(fraction=args.fraction)
    print(f"reference: {ev.reference_source}")
    print(f"\n=== Pooled reference CRI at {args.fraction * 100:g} % labels (ood_stability at 100 %) ===")
    print(table.to_string())
    return 0


# --------------------------------------------------------------------------- python -m prism_plugin.compat
def build_parser() -> argparse.ArgumentParser:
    from prism_plugin import __version__

    parser = argparse.ArgumentParser(prog=PROG, description="The PRISM package's `prism` command line on "
                                     "prism-plugin (same subcommands and flags).")
    parser.add_argument("--version", action="version", version=f"prism_plugin.compat {__version__}")
    sub = parser.add_subparsers(dest="command")
    add_evaluate_arguments(sub.add_parser("evaluate", help="evaluate embeddings (writes <model>_<dataset>_results.csv)"))
    add_compare_arguments(sub.add_parser("compare", help="compare against the reference models by CRI"))
    add_reference_arguments(sub.add_parser("reference", help="pooled CRI of the eight reference models"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = {"evaluate": run_evaluate, "compare": run_compare, "reference": run_reference}.get(args.command)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT  # the exit-code contract of prism-run (docs/exit-codes.md)

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{PROG}: warning: {printable(str(message).splitlines()[0] if str(message) else category.__name__)}",
              file=sys.stderr)

    old = warnings.showwarning
    warnings.showwarning = show
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except PrismError as exc:
        print(f"{PROG}: error: {printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # a bug, not bad input: one line, as prism-run says it
        print(f"{PROG}: internal error: {type(exc).__name__}: {printable(str(exc))}", file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        warnings.showwarning = old


__all__ = ["add_compare_arguments", "add_evaluate_arguments", "add_reference_arguments", "build_parser",
           "default_output", "load_array", "main", "run_compare", "run_evaluate", "run_reference"]
