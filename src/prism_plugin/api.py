"""Python API for users who already have embeddings."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import pandas as pd

from prism_plugin import quality
from prism_plugin.errors import PrismError, plain_name
from prism_plugin.plugins import PluginHost, get_host
from prism_plugin.protocol.array_checks import ArrayError, QualifiedResultWarning
from prism_plugin.protocol.grid import DEFAULT_FRACTIONS, DEFAULT_SEEDS, GridSpec, grid_keys, run_grid
from prism_plugin.protocol.inputs import SplitArrays, check_data, check_overlap_allowance, check_splits
from prism_plugin.protocol.settings import check_fractions, check_grid_settings
from prism_plugin.results import rows_to_frame


def _split(value: Any, name: str, required: bool = True) -> SplitArrays | None:
    if value is None:
        if required:
            raise ArrayError(f"{name}: a {name} split is required; pass a (features, labels) pair"
                             + (" (only val may be None)" if name != "val" else ""))
        return None
    if isinstance(value, SplitArrays):
        return SplitArrays(X=value.X, y=value.y, name=value.name or name)
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__"):
        raise ArrayError(f"{name}: pass a (features, labels) pair, got {type(value).__name__}")
    try:
        X, y = value
    except (TypeError, ValueError):
        raise ArrayError(f"{name}: pass a (features, labels) pair") from None
    return SplitArrays(X=X, y=y, name=name)


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable):
        raise PrismError(f"{where}: pass a plugin name or a list of them, got {value!r}")
    out = list(value)
    bad = [v for v in out if not isinstance(v, str)]
    if bad:
        raise PrismError(f"{where}: {bad[0]!r} is not a plugin name (pass strings)")
    return out


def _label(value: Any, where: str) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or not str(value).strip():
        raise PrismError(f"{where}: must be a non-empty name, got {value!r}")
    return plain_name(str(value), where)  # a name reaches the tables: no control characters


#: the per-run qualification columns :func:`evaluate` adds after the runs.csv columns
QUALIFICATION_COLUMNS = ("flags", "qualified")


def qualification_columns(runs: pd.DataFrame, flags) -> pd.DataFrame:
    """``flags`` (the names of the warning-level quality flags that cover the run, ``;``-separated, ``""`` when
    none) and ``qualified`` (any of them) per row of ``runs``: the flags ``prism-run`` prints and writes to
    summary.json, run by run (a data check of the splits covers every run)."""
    ids = quality.all_run_ids(runs)
    where = {rid: i for i, rid in enumerate(ids)}
    names: list[list[str]] = [[] for _ in ids]
    for f in flags:
        d = f.to_dict() if isinstance(f, quality.Flag) else dict(f)
        if d.get("level") != "warning":
            continue
        rows = range(len(ids)) if d.get("source") == "data" else [where[c] for c in d.get("cells", []) if c in where]
        for i in rows:
            if d["flag"] not in names[i]:
                names[i].append(d["flag"])
    return pd.DataFrame({"flags": [";".join(n) for n in names], "qualified": [bool(n) for n in names]},
                        index=runs.index)


def evaluate(
    train: Any,
    val: Any,
    test: Any,
    *,
    n_classes: int | None = None,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    C: float = 1.0,
    max_iter: int = 1000,
    probe: dict | None = None,
    ece_bins: int = 15,
    binary_logits: str = "symmetric",
    proportional_val: bool = False,
    model: str = "model",
    dataset: str = "dataset",
    disable: Iterable[str] = (),
    plugins: Iterable[Any] = (),
    allow_split_overlap: Iterable[Any] = (),
    probability_dtype: str = "float64",
) -> pd.DataFrame:
    """Run the PRISM protocol on train/val/test embeddings; return the per-run table.

    Each split is a ``(features, labels)`` pair (``val`` may be ``None``: the temperature and scaled ECE are then
    NaN). Labels must be integers 0..K-1 (integer-valued floats are accepted); every class needs a training sample;
    a test split with a single class gives AUROC NaN (PROTOCOL §3). Any bad input raises
    :class:`~prism_plugin.errors.PrismError` naming the split or argument (see
    :mod:`prism_plugin.protocol.inputs`). Columns follow ``indomain_all_v2.csv`` plus ``nll``, ``nll_scaled`` and
    metadata; one row per fraction x seed, fraction ascending then seeds in the given order.

    ``binary_logits="natural"`` reports binary temperatures on the sigmoid scale (identity T = 1) instead of the
    reference's ``[-d, d]`` scale (identity T = 2); probabilities and ECE are the same either way up to the search
    box, which is [0.05, 5] on the natural scale in the reference.

    ``plugins``: extra plugin objects (modules or objects with ``@hookimpl`` functions) used for this call beside
    the installed ones, e.g. a metric under development.

    The splits are checked together (:func:`prism_plugin.protocol.inputs.check_data`): identical val and test (or
    train and test) raise a PrismError unless ``allow_split_overlap`` names the pair (e.g. ``["val", "test"]``);
    rows shared between splits, all-zero rows, large feature scales, a one-class test split and rare classes are
    warned about. The data checks found are in the returned table's ``attrs["data_checks"]``.

    The table carries every column ``prism-run`` writes to runs.csv for the same runs (``probe_converged``,
    ``forced_classes``, ``degenerate``, ``collapsed``, ...) and, after them, the qualifications it prints and writes
    to summary.json, run by run: ``flags`` (e.g. ``"temperature_at_bound;probe_not_converged"``, see
    :mod:`prism_plugin.quality`) and ``qualified``; ``attrs["flags"]`` holds the flags as summary.json lists them
    and ``attrs["qualified"]`` whether any qualifies a number. Each run-derived warning is also emitted once as a
    :class:`~prism_plugin.protocol.array_checks.QualifiedResultWarning`. Invalid arrays raise an
    :class:`~prism_plugin.protocol.array_checks.ArrayError` (a PrismError and a ``ValueError``).

    ``probability_dtype="float32"`` computes Brier and every ECE column on the reference's floating-point path
    (float32 ``predict_proba`` output and float32 scaled probabilities, see
    :mod:`prism_plugin.protocol.float32_path`), so they equal the reference evaluator's values bit for bit; the
    default ``"float64"`` does the metric arithmetic in float64 (differences of about 1e-8).
    """
    import warnings

    fractions = check_fractions(fractions)
    if not isinstance(binary_logits, str) or binary_logits not in ("symmetric", "natural"):
        raise PrismError(f"binary_logits must be 'symmetric' or 'natural', got {binary_logits!r}")
    allowed = check_overlap_allowance(allow_split_overlap, "allow_split_overlap")
    from prism_plugin.protocol.float32_path import check_probability_dtype

    probability_dtype = check_probability_dtype(probability_dtype, "probability_dtype")
    disable = _names(disable, "disable")
    if isinstance(plugins, (str, bytes)) or not isinstance(plugins, Iterable):
        raise PrismError(f"plugins: pass a list of plugin objects (modules or objects with @hookimpl functions), "
                         f"got {plugins!r}")
    plugins = list(plugins)
    host = PluginHost(disable=disable, extra_plugins=plugins) if plugins else get_host(disable)
    settings = check_grid_settings(fractions=fractions, seeds=seeds, C=C, max_iter=max_iter, ece_bins=ece_bins,
                                   proportional_val=proportional_val, probe=probe, host=host)
    model, dataset = _label(model, "model"), _label(dataset, "dataset")
    tr, va, te = _split(train, "train"), _split(val, "val", required=False), _split(test, "test")
    k = check_splits(tr, va, te, n_classes)
    if va is None:
        warnings.warn("no validation split: temperature and scaled ECE are NaN (never fitted on test)", stacklevel=2)
    checks = check_data({"train": tr, "val": va, "test": te}, allowed=allowed,
                        allow_hint="allow_split_overlap=[{a!r}, {b!r}]", emit=False)
    for c in checks:
        if c["level"] == "warning":
            warnings.warn(c["message"], stacklevel=2)
    spec = GridSpec(
        fractions=fractions,
        seeds=settings["seeds"],
        probe=settings["probe"],
        ece_bins=settings["ece_bins"],
        binary_logits=binary_logits,
        proportional_val=settings["proportional_val"],
    )
    ident = {"task": dataset, "adapter": model, "model": model, "dataset": dataset}
    if probability_dtype != "float64":
        ident["meta"] = {"probability_dtype": probability_dtype}
    rows = run_grid(tr, va, te, k, spec, host, ident)
    out = rows_to_frame([rows[key] for key in grid_keys(spec)])
    # the runner's flags of the same runs (prism_plugin.runner: console lines and summary.json "flags")
    flags = quality.run_flags(out, t_bounds=spec.t_bounds, data_checks=checks, checks=quality.host_checks(host),
                              name=dataset)
    for f in flags:
        if f.level == "warning" and f.source != "data":  # the data checks were warned above
            warnings.warn(f.message, QualifiedResultWarning, stacklevel=2)
    out = pd.concat([out, qualification_columns(out, flags)], axis=1)
    out.attrs["data_checks"] = checks
    out.attrs["flags"] = [f.to_dict() for f in flags]
    out.attrs["qualified"] = quality.qualified(flags)
    return out


__all__ = ["evaluate", "SplitArrays", "QUALIFICATION_COLUMNS", "qualification_columns"]
