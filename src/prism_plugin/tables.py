"""Per-run tables in the reference (results_v2) schema, and summary outputs.

Data flows one way: runs -> tables -> summaries -> report. This module holds the
tables stage: :class:`RunTables` bundles the per-run tables that summaries read,
whether they come from the user's results directories or from a directory with
the published ``results_v2`` layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from prism_plugin.contracts import RunTables, SummaryOutput  # noqa: F401  (SummaryOutput re-exported)
from prism_plugin.errors import PrismError, suggest
from prism_plugin.hookspecs import hookimpl
from prism_plugin.plugins import host_or_shared
from prism_plugin.registrars import DEFAULT_KEY_COLUMNS

#: The built-in per-run table kinds (registered through ``register_tables``): file name in the
#: results_v2 layout and the columns that must be present for the summaries to read it.
REFERENCE_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "indomain": (
        "indomain_all_v2.csv",
        ("model", "dataset", "fraction", "seed", "auroc", "f1_macro", "ece_fixed",
         "temperature", "ece_scaled_fixed", "degeneracy_share", "degenerate"),
    ),
    "transfer": (
        "ood_all_v2.csv",
        ("model", "src", "tgt", "pair", "fraction", "seed", "auroc", "ece_fixed",
         "temperature_src", "ece_scaled_fixed", "degeneracy_share", "degenerate"),
    ),
    "camelyon17_indomain": (
        "camelyon17_indomain.csv",
        ("model", "hospital", "fraction", "seed", "auroc", "ece_fixed", "ece_scaled_fixed"),
    ),
    "camelyon17_transfer": (
        "camelyon17_transfer.csv",
        ("model", "src", "tgt", "pair", "fraction", "seed", "auroc", "ece_fixed",
         "ece_scaled_fixed"),
    ),
    "indomain_propval": (
        "indomain_propval.csv",
        ("model", "dataset", "fraction", "seed", "n_train", "n_val"),
    ),
}


#: Transfer tables of the runs of prism-run (not in the PRISM release) by the task's declared
#: ``shift:`` kind. The release's ``transfer`` table (``ood_all_v2``) holds label-definition pairs
#: and the report compares it with the PRISM label-definition bands; a transfer run of a task whose
#: ``shift`` is ``covariate`` or ``prior``, or that declares none, is routed to its own table instead.
SHIFT_TABLES: dict[str, str] = {
    "covariate": "covariate_transfer",
    "prior": "prior_transfer",
}
#: The ``shift`` value :func:`tables_from_results` gives a ``transfer`` row whose task declares no
#: shift kind (the row stays in ``transfer``; the report says the kind is not declared and does not
#: compare it with the label-definition bands). Release tables have no ``shift`` column: their
#: ``transfer`` rows are label-definition pairs.
UNDECLARED = "undeclared"
#: The transfer tables whose rows carry ``shift`` (the routing of :func:`tables_from_results`).
SHIFT_ROUTED_FROM = "transfer"

#: Column renames from prism-run's runs.csv to the results_v2 schema, per built-in table.
RESULTS_RENAMES: dict[str, dict[str, str]] = {
    "camelyon17_indomain": {"n_val": "n_val_full"},
    "camelyon17_transfer": {"n_val": "n_val_full"},
    "indomain_propval": {"temperature_prop": "temperature", "ece_scaled_prop": "ece_scaled_fixed",
                         "ece_scaled_adaptive_prop": "ece_scaled_adaptive", "n_val_prop": "n_val"},
}
#: Columns dropped before the renames (they are replaced by the renamed ones).
RESULTS_DROPS: dict[str, tuple[str, ...]] = {
    "indomain_propval": ("temperature", "ece_scaled_fixed", "ece_scaled_adaptive", "n_val"),
}


def find_runs_files(paths) -> list[Path]:
    """Every runs.csv in the given results directories (searched recursively), in order."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_file() and p.name == "runs.csv":
            found.append(p)
        elif p.is_dir():
            direct = p / "runs.csv"
            found.extend([direct] if direct.exists() else sorted(p.rglob("runs.csv")))
        else:
            raise PrismError(f"{p}: not a results directory (no runs.csv)")
    if not found:
        raise PrismError("no runs.csv found in " + ", ".join(map(str, paths)) + "; run prism-run first")
    return list(dict.fromkeys(found))


def tables_from_reference_dir(directory: str | Path, *, required: tuple[str, ...] = (), host=None) -> RunTables:
    """Read a directory with the published results_v2 layout: one file per table kind.

    Files that are absent leave their table ``None`` unless named in ``required``; a file that is
    present but malformed is an error naming it.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise PrismError(
            f"reference directory {directory} does not exist; pass --reference DIR "
            "with a results_v2 layout (e.g. indomain_all_v2.csv, ood_all_v2.csv)"
        )
    kinds = host_or_shared(host).tables
    out: dict[str, pd.DataFrame] = {}
    for key in kinds:
        kind = kinds.get(key)
        path = directory / kind.file
        if not path.exists():
            if key in required:
                raise PrismError(f"reference directory {directory} lacks {kind.file}")
            continue
        out[key] = read_run_table(path, kind.required_columns)
    if not out:
        raise PrismError(
            f"reference directory {directory} holds none of "
            + ", ".join(kinds.get(k).file for k in kinds)
        )
    return RunTables(out)


def _input_labels(paths) -> list[str]:
    """A short label per input path: its folder name, or its whole path where two names are alike."""
    names = [Path(p).name or str(p) for p in paths]
    return [str(p) if names.count(n) > 1 else n for p, n in zip(paths, names)]


def tables_from_results(paths, host=None, *, label_models_by_input: bool = False) -> RunTables:
    """Combine runs.csv files of prism-run results directories into RunTables.

    Each row's ``reference_table`` column says which results_v2 table it
    belongs to; columns are renamed to that table's schema. Rows of probe
    sweeps (``sweep_key`` set) are left out: ``prism-run sensitivity`` reads them.

    ``label_models_by_input``: a model name found under more than one of ``paths`` (two checkpoints
    of one adapter, run into two folders) becomes ``<model> · <folder name>`` in each, instead of
    the runs colliding as "the same run twice".
    """
    kinds = host_or_shared(host).tables
    parts: dict[str, list[pd.DataFrame]] = {}
    swept = 0
    paths = list(paths)
    labels = list(zip((Path(p) for p in paths), _input_labels(paths)))

    def input_of(file: Path) -> str:
        return next((lab for p, lab in labels if file == p or p in file.parents), "")

    # each runs.csv read once: the labelling below and the routing after it share the frames
    frames = [(f, input_of(f), read_run_table(f, ("model", "fraction", "seed"))) for f in find_runs_files(paths)]
    clash: set[str] = set()
    if label_models_by_input:  # a (model, task) found under two inputs: that model is labelled by input
        where: dict[tuple[str, str], set[str]] = {}
        for _file, label, df in frames:
            tasks = df["task"].astype(str) if "task" in df else pd.Series("", index=df.index)
            for key in set(zip(df["model"].astype(str), tasks)):
                where.setdefault(key, set()).add(label)
        clash = {model for (model, _task), inputs in where.items() if len(inputs) > 1}
    for file, label, df in frames:
        if clash:
            df["model"] = [f"{m} · {label}" if str(m) in clash else m for m in df["model"]]
        if "sweep_key" in df:  # probe-sensitivity variants: read by `prism-run sensitivity`, not here
            is_sweep = df["sweep_key"].notna()
            swept += int(is_sweep.sum())
            df = df[~is_sweep]
            if df.empty:
                continue
        table_col = df["reference_table"] if "reference_table" in df else pd.Series("indomain", index=df.index)
        table_col = shift_routed(df, table_col)
        for table, rows in df.groupby(table_col, sort=False):
            if table not in kinds:
                raise PrismError(f"{file}: unknown reference_table {table!r}{suggest(str(table), kinds.names())} "
                                 f"(table kinds: {', '.join(kinds.names())}; a plugin registers more with "
                                 "register_tables)")
            kind = kinds.get(table)
            if table == SHIFT_ROUTED_FROM:  # a transfer row without a declared shift kind says so
                shift = rows["shift"] if "shift" in rows else pd.Series(np.nan, index=rows.index)
                rows = rows.copy()  # one consolidated frame, then one column set: never fragmented
                rows["shift"] = shift.where(shift.notna() & (shift.astype(str) != ""), UNDECLARED)
            rows = rows.drop(columns=[c for c in kind.drops if c in rows])
            parts.setdefault(kind.name, []).append(rows.rename(columns=dict(kind.renames)))
    if not parts:
        raise PrismError(f"the results given hold only {swept} probe-sweep run(s); "
                         "read them with `prism-run sensitivity DIR`")
    out = {}
    for table, frames in parts.items():
        df = pd.concat(frames, ignore_index=True)
        key = [c for c in kinds.get(table).key_columns if c in df]
        dup = df.duplicated(subset=key)
        if dup.any():
            first = df.loc[dup, key].iloc[0].to_dict()
            raise PrismError(f"the same run appears twice across the results given ({first}); pass each run once")
        out[table] = df
    return RunTables(out)


def shift_routed(df: pd.DataFrame, table_col: pd.Series) -> pd.Series:
    """The table of each runs.csv row with the ``shift`` routing applied: a row of the default
    ``transfer`` table whose task declares ``shift: covariate`` / ``prior`` goes to
    ``covariate_transfer`` / ``prior_transfer``; ``label_definition`` rows and rows of a task
    without ``shift`` stay (see :data:`UNDECLARED`). Other tables (``camelyon17_transfer``, a
    plugin's) are kept as the task file named them."""
    routed = table_col.astype(object).copy()
    is_default = routed == SHIFT_ROUTED_FROM
    if not is_default.any():
        return routed
    shift = df["shift"] if "shift" in df else pd.Series(np.nan, index=df.index)
    shift = shift.where(shift.notna(), "").astype(str).str.strip()
    for kind, table in SHIFT_TABLES.items():
        routed[is_default & (shift == kind)] = table
    return routed


def read_run_table(path: Path, required_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read one per-run CSV; a missing column or unparsable file names the file."""
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # pandas raises many types for malformed CSV
        detail = type(exc).__name__ if isinstance(exc, UnicodeDecodeError) else f"{type(exc).__name__}: {exc}"
        raise PrismError(f"{path}: cannot be read as CSV ({detail}); rerun the job that wrote it, "
                         "or remove the file") from None
    missing = [c for c in required_columns if c not in df.columns]
    if missing:
        raise PrismError(f"{path}: missing column(s) {', '.join(missing)}")
    if df.empty:
        raise PrismError(f"{path}: has no rows")
    return df


@hookimpl
def register_tables(register) -> None:
    """The five per-run tables of the PRISM release (results_v2), and the transfer tables of the runs
    by declared shift kind (:data:`SHIFT_TABLES`)."""
    descriptions = {
        "indomain": "in-distribution runs (dataset x fraction x seed)",
        "transfer": "label-definition transfer runs (src -> tgt pair)",
        "camelyon17_indomain": "Camelyon17 per-hospital in-distribution runs",
        "camelyon17_transfer": "Camelyon17 hospital -> hospital transfer runs",
        "indomain_propval": "in-distribution runs with a proportional validation subset",
    }
    for name, (file, columns) in REFERENCE_FILES.items():
        register(name, file, columns, renames=RESULTS_RENAMES.get(name, {}), drops=RESULTS_DROPS.get(name, ()),
                 description=descriptions.get(name, ""))
    shift_descriptions = {
        "covariate_transfer": "transfer runs of tasks with shift: covariate (site, scanner, stain; same labels); "
                              "not compared with the PRISM label-definition bands",
        "prior_transfer": "transfer runs of tasks with shift: prior (class proportions differ)",
    }
    for name, description in shift_descriptions.items():
        register(name, f"{name}.csv", ("model", "src", "tgt", "pair", "fraction", "seed"),
                 key_columns=DEFAULT_KEY_COLUMNS + ("split_seed",), description=description)


def load_tables(results_dirs: list[Path], reference: Path | None, host=None, *, label_models_by_input: bool = False):
    """RunTables of the results directories, the reference directory, or both
    (rows of the same table concatenated; a model in both is an error). ``label_models_by_input``: see
    :func:`tables_from_results`."""
    if not results_dirs and reference is None:
        raise PrismError("give RESULTS_DIR... (prism-run results) or --reference DIR (published tables)")
    parts = []
    if reference is not None:
        parts.append(RunTables.from_reference_dir(reference, host=host))
    if results_dirs:
        for d in results_dirs:
            if not d.exists():
                raise PrismError(f"{d}: no such results directory")
        parts.append(tables_from_results(results_dirs, host, label_models_by_input=label_models_by_input))
    if len(parts) == 1:
        return parts[0]
    ref, own = parts
    merged = {}
    for name in dict.fromkeys([*ref.present(), *own.present()]):
        a, b = getattr(ref, name), getattr(own, name)
        if a is not None and b is not None:
            clash = sorted(set(a["model"]) & set(b["model"]))
            if clash:
                raise PrismError(f"model name(s) {', '.join(map(str, clash))} appear in both --reference and the "
                                 "results directories; rename your model (adapter display name) to compare")
            merged[name] = pd.concat([a, b], ignore_index=True)
        else:
            merged[name] = a if a is not None else b
    return RunTables(**merged)
