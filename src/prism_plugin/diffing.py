"""Run-to-run diff: did results directory B get better or worse than A, and is the difference real?

Pure logic of ``prism-run diff A B`` (:mod:`prism_plugin.commands.diff`); it reads files and writes none.

**Matching.** A and B are results directories (each a ``runs.csv`` folder, or a folder of them). Rows
are matched by task and run identity: ``fraction``, ``seed`` and, where the columns exist, ``probe``,
``split_seed`` and ``sweep_key``; never by model (B is usually a new checkpoint of A's model). A side
that holds several models on one task is matched by model name as well. Runs on one side only are
listed and not diffed; no common run is an error naming both directories.

**Settings.** Per task present on both sides the ``resolved_task`` of the ``summary.json`` files is
compared. A difference in a setting that defines a metric (:data:`METRIC_SETTINGS`: ECE bins, binary
logit convention, temperature bounds, probe, classes, adaptation, ...) is refused: the two numbers
would not measure the same thing. A difference in the test data (:data:`DATA_SETTINGS`, a different
``n_test``, or different test labels in the bootstrap artifacts) is diffed with a caution: the delta
then mixes the model change with the data change, and no CI is paired.

**Embeddings.** The embedding identity of each matched run pair is compared (:func:`compare_embeddings`,
:mod:`prism_plugin.identity_check`): effective precision, weights, hub commit, preprocessing (and profile), as
runs.csv and summary.json record them. A difference is not refused (a new checkpoint is what B often is) but
said per model pair with both values (:attr:`DiffResult.identity`); a side that does not record the identity
(results written before it was) is said once.

**Metrics.** Every numeric column present on both sides except identity, count, flag and CI columns
(:func:`diff_metrics`); "better" follows the metric's registered direction
(:func:`prism_plugin.metrics.descriptions.metric_infos`); a metric without a direction gets deltas and
CIs but no better/worse verdict.

**Deltas and CIs** (delta = B − A), per run and per seed-mean cell (task × fraction [× split seed ×
probe], over the seeds present on *both* sides):

1. ``paired bootstrap``: both runs have bootstrap replicates
   (``<dir>/artifacts/bootstrap/<task>--<run_id>.npz``, :mod:`prism_plugin.metrics.bootstrap`) with the
   same test labels digest, ``n`` and seed, so replicate b of A and of B were scored on the same
   resample: the CI is the percentile interval of ``rep_B − rep_A`` (seed mean: of the mean over seeds
   of each side's replicate vectors). The same seed also draws the same labelled training subset on both
   sides, so the comparison is paired in the training data too; the CI is test-set sampling uncertainty.
2. ``unpaired normal``: otherwise, from each side's ``<m>_ci_low`` / ``<m>_ci_high`` columns,
   se ≈ (high − low) / (2 z), combined in quadrature (seed mean: the mean of the seeds' se on each
   side, i.e. the seeds' test-set errors taken as fully correlated, as they share one test set).
3. ``seed spread (Welch)``: otherwise, for a seed-mean cell with at least two seeds per side, a Welch
   t interval from the seeds' spread. A zero spread (e.g. at 100 % labels, where every seed trains on
   the same data) is not a noise estimate: then no CI.
4. ``none``: no CI; the verdict says the noise is unknown.

A difference is **beyond noise** when its CI excludes 0. Metrics aggregated other than by the mean (a plugin's
``median``, ``max``, ...) get no replicate or normal CI at the cell level (at most 3.).

**Gate** (:func:`gate`): a chosen metric fails when it is worse by more than its tolerance in some
seed-mean cell and beyond noise (or on the point estimate alone with ``ignore_noise``); a cell without a
CI cannot fail unless ``ignore_noise`` is set, and is reported as undetermined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from prism_plugin.diff_intervals import Delta, Differ, finite, verdict, worsening
from prism_plugin.errors import PrismError, suggest
from prism_plugin.quality import pct

#: the run-identity columns (those present are used); ``model`` joins them when a side holds several
IDENTITY = ("task", "probe", "fraction", "seed", "split_seed", "sweep_key")
#: resolved_task keys whose difference makes the metrics incomparable: refused
METRIC_SETTINGS = ("n_classes", "class_names", "kind", "ece_bins", "binary_logits", "temperature_bounds",
                   "probe", "proportional_val", "priors", "adaptation")
#: resolved_task keys that say which test data are scored: diffed with a caution, unpaired
DATA_SETTINGS = ("dataset", "source", "splits", "split", "target_split", "extras", "source_config",
                 "target_config", "source_labels", "target_labels")
#: columns never diffed: identity, bookkeeping, counts and flags
NOT_METRICS = frozenset({
    "fraction", "seed", "split_seed", "sweep_key", "run_id", "n_train", "n_val", "n_test", "n_classes",
    "forced_classes", "n_test_classes", "min_test_class_count", "n_test_min_class", "degenerate", "collapsed",
    "probe_converged", "n_val_prop", "n_val_full",
})
DEFAULT_LEVEL = 0.95
#: the smallest test class below which a cell's numbers are said to rest on few samples
#: (:data:`prism_plugin.quality.MIN_TEST_PER_CLASS`)
FEW_COLUMNS = ("n_test_min_class", "min_test_class_count")


# --------------------------------------------------------------------------- reading one side
@dataclass
class Side:
    """One side of the diff: its runs (with ``_base`` = the results folder and ``_run_id``), the resolved
    task settings by task name, and the bootstrap level the summaries name."""

    label: str
    path: Path
    runs: pd.DataFrame
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    level: float | None = None
    notes: list[str] = field(default_factory=list)
    _reps: dict[str, "Replicates | None"] = field(default_factory=dict, repr=False)
    #: summary.json of each results folder (by ``_base``), for the embedding identity
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def identity(self, i) -> tuple[dict[str, str], bool]:
        """Run ``i``'s embedding identity (:func:`prism_plugin.identity_check.row_identity`)."""
        from prism_plugin.identity_check import row_identity

        row = self.runs.loc[i]
        return row_identity(row, self.summaries.get(str(row["_base"]), {}))

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(self.runs["model"].astype(str))) if "model" in self.runs else []

    def replicates(self, row: pd.Series) -> "Replicates | None":
        path = bootstrap_path(Path(row["_base"]), str(row["task"]), str(row["_run_id"]))
        key = str(path)
        if key not in self._reps:
            self._reps[key] = read_replicates(path, self.notes)
        return self._reps[key]


def bootstrap_path(base: Path, task: str, run_id: str) -> Path:
    """``<results>/artifacts/bootstrap/<task>--<run_id>.npz`` (:func:`prism_plugin.metrics.bootstrap.artifact_path`)."""
    from prism_plugin.metrics.bootstrap import artifact_path

    return artifact_path(base / "artifacts", task, run_id)


def read_replicates(path: Path, notes: list[str] | None = None) -> "Replicates | None":
    """The :class:`~prism_plugin.metrics.bootstrap.Replicates` at ``path`` (read and checked by its loader);
    ``None`` when absent, or unreadable (then a note names the file)."""
    from prism_plugin.metrics.bootstrap import load_replicates

    if not path.is_file():
        return None
    try:
        return load_replicates(path)
    except PrismError as exc:
        if notes is not None:
            notes.append(f"{exc} (ignored: its CIs fall back to the unpaired ones)")
        return None


def _summary_settings(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    resolved = summary.get("resolved_task")
    candidates = resolved if isinstance(resolved, list) else [resolved]
    for r in candidates:
        if isinstance(r, dict) and r.get("name"):
            out[str(r["name"])] = r
    return out


def load_side(path: str | Path, label: str) -> Side:
    """Every runs.csv of ``path`` as one side (rows tagged with their folder and run id)."""
    from prism_plugin.quality import all_run_ids
    from prism_plugin.results import read_summary
    from prism_plugin.results import find_runs_files
    from prism_plugin.tables import read_run_table

    path = Path(path)
    if not path.exists():
        raise PrismError(f"{label} = {path}: no such directory; pass a results directory written by prism-run")
    frames, settings, levels, summaries = [], {}, [], {}
    for file in find_runs_files([path]):
        df = read_run_table(file, ("fraction", "seed"))
        base = file.parent
        summary = read_summary(base)
        summaries[str(base)] = summary
        if "task" not in df:
            df = df.assign(task=str(summary.get("task", "")))
        df = df.assign(_base=str(base), _run_id=all_run_ids(df), _file=str(file))
        frames.append(df)
        for name, r in _summary_settings(summary).items():
            settings.setdefault(name, r)
        boot = summary.get("bootstrap")
        if isinstance(boot, dict) and isinstance(boot.get("level"), (int, float)):
            levels.append(float(boot["level"]))
    runs = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return Side(label, path, runs, settings, levels[0] if levels else None, summaries=summaries)


# --------------------------------------------------------------------------- matching
def _norm(col: str, v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    if col == "fraction":
        return round(float(v), 9)
    if col in ("seed", "split_seed"):
        try:
            return int(float(v))
        except (TypeError, ValueError):
            return str(v)
    return str(v)


@dataclass
class Match:
    """Common runs (A row index, B row index) by identity key, and the keys on one side only."""

    columns: tuple[str, ...]
    common: list[tuple[tuple, int, int]]
    only_a: list[tuple]
    only_b: list[tuple]


def identity_columns(a: Side, b: Side) -> tuple[str, ...]:
    cols = []
    for c in IDENTITY:
        ina, inb = c in a.runs, c in b.runs
        if ina and inb:
            cols.append(c)
        elif ina or inb:
            side = a if ina else b
            values = side.runs[c].dropna().astype(str).unique()
            if len(values) > 1:
                other = b if ina else a
                raise PrismError(f"{side.label} ({side.path}) has a {c!r} column with {len(values)} values and "
                                 f"{other.label} ({other.path}) has none: the two sides do not have the same run "
                                 "identity; diff results written with the same task grid")
    several = any(s.runs.groupby("task")["model"].nunique().gt(1).any() for s in (a, b) if "model" in s.runs)
    if several:
        cols.insert(1, "model")
    return tuple(cols)


def key_text(columns: Iterable[str], key: tuple) -> str:
    parts = []
    for c, v in zip(columns, key):
        if v is None:
            continue
        if c == "fraction":
            parts.append(f"{pct(v)} labels")
        elif c == "seed":
            parts.append(f"seed {v}")
        elif c == "split_seed":
            parts.append(f"split seed {v}")
        elif c == "task":
            parts.append(str(v))
        else:
            parts.append(f"{c} {v}")
    return " · ".join(parts)


def match(a: Side, b: Side) -> Match:
    cols = identity_columns(a, b)

    def keyed(side: Side) -> dict[tuple, int]:
        out: dict[tuple, int] = {}
        for i, row in zip(side.runs.index, side.runs[list(cols)].itertuples(index=False, name=None)):
            k = tuple(_norm(c, v) for c, v in zip(cols, row))
            if k in out:
                from prism_plugin.tables import duplicate_run_error

                holders = [(str(side.runs.at[j, "_file"]), str(side.runs.at[j, "task"]) if "task" in side.runs
                            else "") for j in (out[k], i)]
                raise duplicate_run_error(key_text(cols, k), holders,
                                          what=f"{side.label} ({side.path}): the same run appears twice")
            out[k] = i
        return out

    ka, kb = keyed(a), keyed(b)
    common = [(k, ia, kb[k]) for k, ia in ka.items() if k in kb]
    if not common:
        tasks_a = sorted({str(t) for t in a.runs["task"]})
        tasks_b = sorted({str(t) for t in b.runs["task"]})
        if set(tasks_a).isdisjoint(tasks_b):
            why = f"tasks {', '.join(tasks_a)} vs {', '.join(tasks_b)}"
        elif "model" in cols:
            why = (f"a side holds several models on one task, so runs are matched by model too, and the models differ: "
                   f"{', '.join(a.models)} vs {', '.join(b.models)}; pass one model's folder on each side")
        else:
            why = "no fraction/seed in common"
        raise PrismError(f"{a.path} and {b.path} have no run in common ({why}); diff two results of the same task "
                         "and grid")
    return Match(cols, common, [k for k in ka if k not in kb], [k for k in kb if k not in ka])


# --------------------------------------------------------------------------- settings
def _short(v: Any) -> str:
    import json

    text = json.dumps(v, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def check_settings(a: Side, b: Side, tasks: Iterable[str]) -> list[str]:
    """Refuse metric-defining setting differences; the cautions for test-data differences."""
    cautions = []
    for task in tasks:
        sa, sb = a.settings.get(task), b.settings.get(task)
        if sa is None or sb is None:
            which = " and ".join(s.label for s, x in ((a, sa), (b, sb)) if x is None)
            cautions.append(f"{task}: no readable summary.json in {which}: the task settings (ECE bins, probe, test "
                            "data) could not be checked to be the same")
            continue
        for k in METRIC_SETTINGS:
            if k in sa and k in sb and sa[k] != sb[k]:
                raise PrismError(f"{task}: the task setting {k!r} differs (A: {_short(sa[k])}, B: {_short(sb[k])}): "
                                 "the metrics are not defined the same way on both sides; rerun one side with the "
                                 f"other's setting (e.g. --set {k}=...)")
        data = [k for k in DATA_SETTINGS if k in sa and k in sb and sa[k] != sb[k]]
        if data:
            cautions.append(f"{task}: the test data settings differ ({', '.join(data)}): the deltas mix the model "
                            "change with a data change, and their CIs are not paired")
    return cautions


# --------------------------------------------------------------------------- metrics
def diff_metrics(a: pd.DataFrame, b: pd.DataFrame, host=None) -> list:
    """The :class:`~prism_plugin.registrars.MetricInfo` of every column diffed: numeric on both sides, not
    an identity/count/flag/CI column; undescribed columns get a description without direction."""
    from prism_plugin.metrics.descriptions import metric_infos
    from prism_plugin.registrars import MetricInfo

    infos = {i.column: i for i in metric_infos(host)}
    out = []
    for c in a.columns:
        if c not in b.columns or c.startswith("_") or c in NOT_METRICS or c in IDENTITY or c == "model":
            continue
        if c.endswith("_ci_low") or c.endswith("_ci_high") or c.startswith("n_") or c.endswith("_count"):
            continue
        if any(pd.api.types.is_bool_dtype(s[c]) or not pd.api.types.is_numeric_dtype(s[c]) for s in (a, b)):
            continue
        if not (np.isfinite(a[c].to_numpy(float)).any() and np.isfinite(b[c].to_numpy(float)).any()):
            continue
        out.append(infos.get(c) or MetricInfo(c))
    return out


def resolve_metric(name: str, metrics, host=None, what: str = "--fail-on") -> Any:
    """The diffed metric called ``name`` (column or display name); one-line error with suggestions."""
    by = {m.column: m for m in metrics}
    if name in by:
        return by[name]
    for m in metrics:
        if m.display and m.display.lower() == name.lower():
            return m
    from prism_plugin.metrics.descriptions import metric_infos

    known = {i.column for i in metric_infos(host)}
    why = ("is not in both sides' runs.csv" if name in known else "is not a metric column")
    raise PrismError(f"{what} {name!r}: {why}{suggest(name, list(by))} (metrics in both: {', '.join(by)})")


# --------------------------------------------------------------------------- the whole diff
CELL_COLUMNS = ("task", "model", "probe", "fraction", "split_seed", "sweep_key")


@dataclass
class DiffResult:
    a: Side
    b: Side
    match: Match
    metrics: list
    level: float
    table: pd.DataFrame  # one row per (scope, cell or run, metric)
    cautions: list[str]
    notes: list[str]
    #: do the matched runs rest on embeddings of the same identity (:mod:`prism_plugin.identity_check`)
    identity: Any = None

    @property
    def cells(self) -> pd.DataFrame:
        return self.table.loc[self.table["scope"] == "seed mean"]


def _level(a: Side, b: Side, level: float | None) -> tuple[float, float]:
    col = a.level or b.level or DEFAULT_LEVEL
    for side in (a, b):
        for r in side._reps.values():
            if r is not None:
                col = r.level
                break
    out = float(level) if level is not None else col
    if not (0.0 < out < 1.0):
        raise PrismError(f"--level {level}: must be in (0, 1), e.g. 0.95")
    return out, col


def diff(a: Side, b: Side, host=None, level: float | None = None) -> DiffResult:
    """Match the runs of ``a`` and ``b``, check the settings, and compute every delta with its CI."""
    from prism_plugin.quality import MIN_TEST_PER_CLASS

    m = match(a, b)
    common_tasks = list(dict.fromkeys(k[m.columns.index("task")] for k, _, _ in m.common))
    cautions = check_settings(a, b, common_tasks)
    data_differs = {c.split(":", 1)[0] for c in cautions if "test data settings differ" in c}
    # n_test differing, or the replicates' test labels differing: test data differ too
    for k, ia, ib in m.common:
        task = k[m.columns.index("task")]
        na, nb = finite(a.runs.at[ia, "n_test"]) if "n_test" in a.runs else math.nan, \
            finite(b.runs.at[ib, "n_test"]) if "n_test" in b.runs else math.nan
        if task not in data_differs and np.isfinite(na) and np.isfinite(nb) and na != nb:
            data_differs.add(task)
            cautions.append(f"{task}: the test sets differ in size (A: {na:g}, B: {nb:g}): the deltas mix the "
                            "model change with a data change, and their CIs are not paired")
    metrics = diff_metrics(a.runs.loc[[i for _, i, _ in m.common]], b.runs.loc[[j for _, _, j in m.common]], host)
    if not metrics:
        raise PrismError(f"{a.path} and {b.path}: no metric column is numeric on both sides; nothing to diff")
    # read the replicates first (their level is the default CI level)
    for _, ia, ib in m.common:
        a.replicates(a.runs.loc[ia]), b.replicates(b.runs.loc[ib])
    lvl, col_level = _level(a, b, level)
    differ = Differ(a, b, m, lvl, col_level, data_differs)
    notes: list[str] = []
    unpaired_why: dict[str, str] = {}
    for k, ia, ib in m.common:
        task = k[m.columns.index("task")]
        why = differ.test_pairing(ia, ib)
        if why and task not in unpaired_why:
            unpaired_why[task] = why
            if why == "test labels differ":
                data_differs.add(task)
                cautions.append(f"{task}: the test labels differ between A and B (bootstrap test_digest): the "
                                "deltas mix the model change with a data change, and their CIs are not paired")
            else:
                notes.append(f"{task}: bootstrap replicates not paired: {why}; CIs from the CI columns (unpaired)")

    rows: list[dict[str, Any]] = []
    cell_cols = [c for c in CELL_COLUMNS if c in m.columns]
    ident = {c: m.columns.index(c) for c in m.columns}
    cells: dict[tuple, list[tuple[int, int, Any]]] = {}
    for k, ia, ib in m.common:
        ck = tuple(k[ident[c]] for c in cell_cols)
        cells.setdefault(ck, []).append((ia, ib, k[ident["seed"]]))

    def few(pairs) -> int | None:
        counts = []
        for side, idx in ((a, [p[0] for p in pairs]), (b, [p[1] for p in pairs])):
            for c in FEW_COLUMNS:
                if c in side.runs:
                    v = pd.to_numeric(side.runs.loc[idx, c], errors="coerce").dropna()
                    if len(v):
                        counts.append(int(v.min()))
                    break
        low = [c for c in counts if 0 < c < MIN_TEST_PER_CLASS]
        return min(low) if low else None

    for ck, pairs in cells.items():
        base = dict(zip(cell_cols, ck))
        small = few(pairs)
        seeds = [p[2] for p in pairs]
        for info in metrics:
            d = differ.cell_delta([(i, j) for i, j, _ in pairs], info)
            rows.append({"scope": "seed mean", **base, "seed": ", ".join(str(s) for s in seeds),
                         "n_seeds": len(seeds), **_row(info, d, lvl), "few_test_class": small})
        for ia, ib, seed in pairs:
            for info in metrics:
                d = differ.run_delta(ia, ib, info.column)
                rows.append({"scope": "run", **base, "seed": str(seed), "n_seeds": 1, **_row(info, d, lvl),
                             "few_test_class": few([(ia, ib, seed)])})
    table = pd.DataFrame(rows)
    notes.extend(a.notes)
    notes.extend(b.notes)
    return DiffResult(a, b, m, metrics, lvl, table, cautions, notes, identity=compare_embeddings(a, b, m))


def compare_embeddings(a: Side, b: Side, m: Match):
    """The embedding identity of every matched run pair, compared
    (:func:`prism_plugin.identity_check.compare_identities`; per model pair)."""
    from prism_plugin.identity_check import compare_identities

    def model(side: Side, i) -> str:
        return str(side.runs.at[i, "model"]) if "model" in side.runs else "?"

    return compare_identities(((model(a, ia), *a.identity(ia), model(b, ib), *b.identity(ib))
                               for _, ia, ib in m.common), (a.label, b.label))


def _row(info, d: Delta, level: float) -> dict[str, Any]:
    return {"metric": info.column, "direction": info.direction or "", "a": d.a, "b": d.b, "delta": d.delta,
            "ci_low": d.low, "ci_high": d.high, "ci_level": level if d.has_ci else math.nan, "ci_method": d.method,
            "beyond_noise": d.beyond_noise, "verdict": verdict(d, info.direction), "note": d.note}


@dataclass
class Failure:
    row: dict[str, Any]
    worse_by: float
    tol: float
    undetermined: bool = False


def gate(result: DiffResult, chosen: Mapping[str, float], ignore_noise: bool = False) -> list[Failure]:
    """Seed-mean cells where a chosen metric (column -> tolerated worsening) is worse by more than its
    tolerance and beyond noise (``ignore_noise``: on the point estimate); cells worse by more than the
    tolerance without a CI come back with ``undetermined`` set (they do not fail)."""
    out = []
    for _, r in result.cells.iterrows():
        if r["metric"] not in chosen or not np.isfinite(r["delta"]):
            continue
        tol = chosen[r["metric"]]
        w = worsening(float(r["delta"]), r["direction"] or None)
        if w <= tol + 1e-12:
            continue
        if ignore_noise or r["beyond_noise"]:
            out.append(Failure(r.to_dict(), w, tol))
        elif not (np.isfinite(r["ci_low"]) and np.isfinite(r["ci_high"])):
            out.append(Failure(r.to_dict(), w, tol, undetermined=True))
    return out


__all__ = ["DATA_SETTINGS", "DiffResult", "Failure", "IDENTITY", "METRIC_SETTINGS", "Side", "check_settings",
           "compare_embeddings", "diff", "diff_metrics", "gate", "load_side", "match", "read_replicates",
           "resolve_metric"]
