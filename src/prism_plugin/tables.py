"""Per-run tables in the reference (results_v2) schema, and summary outputs.

Data flows one way: runs -> tables -> summaries -> report. This module holds the tables stage: :class:`RunTables`
bundles the per-run tables that summaries read, whether they come from the user's results directories or from a
directory with the published ``results_v2`` layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.contracts import RunTables, SummaryOutput  # noqa: F401  (SummaryOutput re-exported)
from prism_plugin.errors import PrismError, plain_names, suggest
from prism_plugin.hookspecs import hookimpl
from prism_plugin.plugins import host_or_shared
from prism_plugin.registrars import DEFAULT_KEY_COLUMNS
from prism_plugin.results import find_runs_files

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


#: The ``shift`` value a ``transfer`` row whose task declares no shift kind gets (the row stays in
#: ``transfer``; the report says the kind is not declared and does not compare it with the
#: label-definition bands). Release tables have no ``shift`` column: their ``transfer`` rows are
#: label-definition pairs.
UNDECLARED = "undeclared"
#: The table of transfer tasks that name none: its rows carry ``shift`` and are routed by it to the
#: table kind declaring ``shift_table=True`` with that shift (:func:`routed_rows`).
SHIFT_ROUTED_FROM = "transfer"

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

    Each row's ``reference_table`` column says which results_v2 table it belongs to; columns are renamed to that
    table's schema. Rows of probe sweeps (``sweep_key`` set) are left out: ``prism-run sensitivity`` reads them.

    ``label_models_by_input``: a model name found under more than one of ``paths`` (two checkpoints of one adapter,
    run into two folders) becomes ``<model> · <folder name>`` in each, instead of the runs colliding as "the same
    run twice".
    """
    import pandas as pd
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
    files: dict[str, list[Path]] = {}  # per table, the runs.csv of each part (to name a duplicate's sources)
    for file, label, df in frames:
        if clash:
            df["model"] = [f"{m} · {label}" if str(m) in clash else m for m in df["model"]]
        if "sweep_key" in df:  # probe-sensitivity variants: read by `prism-run sensitivity`, not here
            is_sweep = df["sweep_key"].notna()
            swept += int(is_sweep.sum())
            df = df[~is_sweep]
            if df.empty:
                continue
        for table, rows in routed_rows(df, kinds):
            if table not in kinds:
                raise PrismError(f"{file}: unknown reference_table {table!r}{suggest(str(table), kinds.names())} "
                                 f"(table kinds: {', '.join(kinds.names())}; a plugin registers more with "
                                 "register_tables)")
            parts.setdefault(table, []).append(rows)
            files.setdefault(table, []).append(file)
    if not parts:
        raise PrismError(f"the results given hold only {swept} probe-sweep run(s); "
                         "read them with `prism-run sensitivity DIR`")
    out = {}
    for table, frames in parts.items():
        df = pd.concat(frames, ignore_index=True)
        key = [c for c in kinds.get(table).key_columns if c in df]
        dup = df.duplicated(subset=key)
        if dup.any():
            raise duplicate_run_error(df.loc[dup, key].iloc[0].to_dict(), _holders(frames, files[table], key,
                                                                                   df.loc[dup, key].iloc[0]))
        out[table] = df
    return RunTables(out)


def _holders(frames: list[pd.DataFrame], files: list[Path], key: list[str], run: pd.Series) -> list[tuple[str, str]]:
    """``(file, task)`` of each row holding the run ``run`` (values of ``key``), over the parts of one table."""
    import pandas as pd
    out: list[tuple[str, str]] = []
    for rows, file in zip(frames, files):
        sub = rows[key]
        hit = pd.Series(True, index=rows.index)
        for c in key:
            v = run[c]
            hit &= sub[c].isna() if pd.isna(v) else (sub[c] == v)
        tasks = rows.loc[hit, "task"].astype(str) if "task" in rows else pd.Series("", index=rows.index[hit])
        out.extend((str(file), t) for t in tasks)
    return out


def run_text(run: dict) -> str:
    """A run's identity in words: ``model M · dataset D · 10 % labels · seed 42`` (empty values left out)."""
    parts = []
    for c, v in run.items():
        if v is None or (isinstance(v, float) and np.isnan(v)) or str(v) == "":
            continue
        if c == "fraction":
            parts.append(f"{float(v) * 100:g} % labels")
        elif c in ("seed", "split_seed"):
            parts.append(f"{c.replace('_', ' ')} {int(v) if float(v).is_integer() else v}")
        else:
            parts.append(f"{c} {v}")
    return " · ".join(parts)


def duplicate_run_error(run: dict | str, holders: list[tuple[str, str]], fix: str = "", *,
                        what: str = "the same run appears twice") -> PrismError:
    """The one line for a run (or a name) found more than once: the run, every source holding it (file or
    folder, and the task it came from) and the fix. ``run``: its key values (or their text); ``holders``:
    ``(source, task)`` per copy; ``fix`` replaces the default advice; ``what`` the opening words."""
    text = run if isinstance(run, str) else run_text(run)
    where = [f"{f} (task {t})" if t and t != "nan" else str(f) for f, t in holders]
    sources = list(dict.fromkeys(f for f, _ in holders))
    folders = list(dict.fromkeys(str(Path(f).parent) if Path(f).name == "runs.csv" else f for f in sources))
    tasks = list(dict.fromkeys(t for _, t in holders if t and t != "nan"))
    if not fix:
        if len(sources) == 1:
            fix = f"{sources[0]} holds it {len(holders)} times: rerun its task into a fresh --output"
        elif len(tasks) > 1:
            fix = (f"tasks {' and '.join(tasks)} run the same model on the same dataset, so their runs coincide: "
                   f"pass each run once (only one of {', '.join(folders)})")
        else:
            fix = f"pass each run once: leave one of {', '.join(folders)} out"
    listed = ", ".join(where[:-1]) + f" and {where[-1]}" if len(where) > 1 else (where[0] if where else "?")
    return PrismError(f"{what} ({text}): in {listed}; {fix}")


def routed_rows(df: pd.DataFrame, kinds):
    """``(table, rows)`` per table of a runs.csv frame, rows in that table's schema (``drops``, then
    ``renames``). A row of :data:`SHIFT_ROUTED_FROM` whose task declares ``shift: <kind>`` goes to the
    table kind with ``shift_table=True`` and that ``shift``; the rows staying there carry ``shift``
    (:data:`UNDECLARED` when none). A table not in ``kinds`` (the host's table registry) comes unchanged."""
    import pandas as pd
    table_col = df["reference_table"] if "reference_table" in df else pd.Series("indomain", index=df.index)
    routed = table_col.astype(object).copy()
    is_default = routed == SHIFT_ROUTED_FROM
    shift = df["shift"] if "shift" in df else pd.Series(np.nan, index=df.index)
    if is_default.any():
        declared = shift.where(shift.notna(), "").astype(str).str.strip()
        for kind in (kinds.get(n) for n in kinds.names()):
            if kind.shift_table:
                routed[is_default & (declared == kind.shift)] = kind.name
    for table, rows in df.groupby(routed, sort=False):
        if table not in kinds:
            yield table, rows
            continue
        kind = kinds.get(table)
        if table == SHIFT_ROUTED_FROM:  # a transfer row without a declared shift kind says so
            rows = rows.copy()  # one consolidated frame, then one column set: never fragmented
            own = shift.loc[rows.index]
            rows["shift"] = own.where(own.notna() & (own.astype(str) != ""), UNDECLARED)
        rows = rows.drop(columns=[c for c in kind.drops if c in rows])
        yield table, rows.rename(columns=dict(kind.renames))


def table_kinds(host=None) -> tuple:
    """Every registered :class:`~prism_plugin.registrars.TableKind`, in report order (``order``, then
    registration)."""
    reg = host_or_shared(host).tables
    return tuple(sorted((reg.get(n) for n in reg.names()), key=lambda k: k.order))


def read_run_table(path: Path, required_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read one per-run CSV; a missing column or unparsable file names the file."""
    import pandas as pd
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
    return plain_names(df)  # names from data reach no output with a control character


#: What the report needs of each built-in table kind (besides its file and columns).
_IN_DIST = {"role": "in_distribution"}
_TRANSFER = {"role": "transfer", "leaderboard": "rank"}
BUILTIN_TABLES: tuple[tuple[str, str, dict], ...] = (
    ("indomain", "in-distribution runs (dataset x fraction x seed)",
     {**_IN_DIST, "label": "in-distribution", "order": 10, "leaderboard": "rank"}),
    ("transfer", "label-definition transfer runs (src -> tgt pair)",
     {**_TRANSFER, "label": "label-definition transfer", "order": 30, "shift": "label_definition", "bands": True}),
    ("camelyon17_indomain", "Camelyon17 per-hospital in-distribution runs",
     {**_IN_DIST, "label": "Camelyon17 in-distribution", "order": 40, "setting": "hospital", "binary": True,
      "setting_prefix": "Camelyon17 "}),
    ("camelyon17_transfer", "Camelyon17 hospital -> hospital transfer runs",
     {**_TRANSFER, "label": "Camelyon17 hospital transfer", "order": 50, "shift": "covariate", "bands": True,
      "grid": True, "setting_prefix": "Camelyon17 ", "leaderboard": "show"}),
    ("indomain_propval", "in-distribution runs with a proportional validation subset",
     {**_IN_DIST, "label": "in-distribution (proportional validation)", "order": 20, "variant_of": "indomain",
      "temperature_from": "the proportional validation subset", "leaderboard": ""}),
)
#: Column renames from prism-run's runs.csv to the results_v2 schema, and the columns dropped first.
_RENAMES = {"camelyon17_indomain": {"n_val": "n_val_full"}, "camelyon17_transfer": {"n_val": "n_val_full"},
            "indomain_propval": {"temperature_prop": "temperature", "ece_scaled_prop": "ece_scaled_fixed",
                                 "ece_scaled_adaptive_prop": "ece_scaled_adaptive", "n_val_prop": "n_val"}}
_DROPS = {"indomain_propval": ("temperature", "ece_scaled_fixed", "ece_scaled_adaptive", "n_val")}


@hookimpl
def register_tables(register) -> None:
    """The five per-run tables of the PRISM release (results_v2), and the transfer tables of the runs
    of tasks declaring ``shift: covariate`` / ``prior``."""
    for name, description, report in BUILTIN_TABLES:
        file, columns = REFERENCE_FILES[name]
        register(name, file, columns, renames=_RENAMES.get(name, {}), drops=_DROPS.get(name, ()),
                 description=description, **report)
    for name, shift, order, description in (
            ("covariate_transfer", "covariate", 60, "transfer runs of tasks with shift: covariate (site, scanner, "
             "stain; same labels); not compared with the PRISM label-definition bands"),
            ("prior_transfer", "prior", 70, "transfer runs of tasks with shift: prior (class proportions differ)")):
        register(name, f"{name}.csv", ("model", "src", "tgt", "pair", "fraction", "seed"),
                 key_columns=DEFAULT_KEY_COLUMNS + ("split_seed",), description=description, **_TRANSFER,
                 label=f"{shift}-shift transfer", order=order, shift=shift, shift_table=True)


def load_tables(results_dirs: list[Path], reference, host=None, *, label_models_by_input: bool = False,
                reference_name: str = "--reference"):
    """RunTables of the results directories, the reference (a directory, or its RunTables already read by
    :func:`prism_plugin.reference_files.open_reference`), or both
    (rows of the same table concatenated; a model in both is an error). ``label_models_by_input``: see
    :func:`tables_from_results`."""
    import pandas as pd
    if not results_dirs and reference is None:
        raise PrismError("give RESULTS_DIR... (prism-run results) or --reference DIR (published tables)")
    parts = []
    if reference is not None:  # read by the caller (prism_plugin.reference_files.open_reference), or read here
        if not isinstance(reference, RunTables):
            reference_name = f"--reference {reference}"
            reference = tables_from_reference_dir(reference, host=host)
        parts.append(reference)
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
                holders = [(reference_name, "")] + [(str(f), "") for f in find_runs_files(results_dirs)
                                                    if str(clash[0]) in set(read_run_table(f, ("model",))["model"]
                                                                            .astype(str))]
                raise duplicate_run_error(
                    ", ".join(map(str, clash)), holders, "rename your model (adapter display name) to compare it "
                    "with the reference model of that name", what="a reference model's name is also one of yours")
            merged[name] = pd.concat([a, b], ignore_index=True)
        else:
            merged[name] = a if a is not None else b
    return RunTables(**merged)
