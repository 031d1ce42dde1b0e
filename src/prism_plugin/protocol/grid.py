"""The run grid: label fractions x seeds -> probe fit -> metric plugins (PROTOCOL §2).

:func:`run_grid` runs one probe on one set of splits. A task with ``split_seeds`` and/or ``probes``
(the hematology audit's protocol) runs it once per (split seed, probe); the runner
(:func:`prism_plugin.runner.run_job`) loops over those and passes ``ident["split_seed"]`` and
``ident["run_suffix"]`` so every run's id (:func:`run_id`) and row say which one it is.
"""

from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.metrics.core import binary_logits, neutral_temperature, probabilities_from_logits
from prism_plugin.metrics.descriptions import in_plugin_order
from prism_plugin.protocol.fit_memo import FitScope, MemoFit, labels_digest
from prism_plugin.protocol.inputs import SplitArrays
from prism_plugin.heads.base import ProbeOutput
from prism_plugin.protocol.sampling import stratified_subset
from prism_plugin.protocol.temperature import T_BOUNDS, fit_temperature
from prism_plugin.contracts import CalibrationSet, RunContext, RunFeatures

DEFAULT_FRACTIONS = (0.01, 0.05, 0.10, 0.25, 0.50, 1.00)
DEFAULT_SEEDS = (42, 123, 456)

@dataclass
class GridSpec:
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    probe: Mapping[str, Any] = field(default_factory=lambda: {"kind": "logistic", "C": 1.0, "max_iter": 1000})
    ece_bins: int = 15
    binary_logits: str = "symmetric"
    t_bounds: tuple[float, float] = T_BOUNDS
    proportional_val: bool = False
    reuse_identical_fits: bool = True


@dataclass(frozen=True)
class RunKey:
    fraction: float
    seed: int

    @property
    def id(self) -> str:
        return f"f{self.fraction:g}-s{self.seed}"


class Scaling:
    """The protocol's temperature scaling (PROTOCOL §2.5) as a run applies it (``RunContext.scaling``)."""

    fit = staticmethod(fit_temperature)
    apply = staticmethod(probabilities_from_logits)
    neutral = staticmethod(neutral_temperature)


#: what every run of the grid scales its logits with
SCALING = Scaling()


def probe_label(kind: str) -> str:
    """A probe kind as it appears in a run id: letters, digits, ``_`` and ``.``; anything else ``_``."""
    return "".join(ch if ch.isalnum() or ch in "_." else "_" for ch in str(kind)) or "probe"


def run_suffix(split_seed: int | None = None, probe: str | None = None) -> str:
    """What a run id gains from the ``split_seeds`` / ``probes`` grid dimensions (``""`` without them)."""
    out = f"-split{int(split_seed)}" if split_seed is not None else ""
    return out + (f"-{probe_label(probe)}" if probe else "")


def run_id(fraction: float, seed: int, split_seed: int | None = None, probe: str | None = None) -> str:
    """The id of one run (its cell file, its flags): ``f1-s0`` for a task without the ``split_seeds`` /
    ``probes`` keys (unchanged), ``f1-s0-split3`` with ``split_seeds``, ``f1-s0-knn1`` with ``probes``,
    ``f1-s0-split3-knn1`` with both."""
    return RunKey(float(fraction), int(seed)).id + run_suffix(split_seed, probe)


def grid_keys(spec: GridSpec) -> Iterator[RunKey]:
    """Grid order: fraction ascending, then seeds in the given order (the reference's)."""
    for f in sorted(spec.fractions):
        for s in spec.seeds:
            yield RunKey(float(f), int(s))


def to_logits(decision: np.ndarray, convention: str) -> np.ndarray:
    """Decision values -> (N, K) logit matrix (binary: the named convention)."""
    if decision.ndim == 1:
        return binary_logits(decision, convention)
    return np.asarray(decision, dtype=np.float64)


@dataclass
class _Fit:
    digest: str
    val: ProbeOutput | None
    test: ProbeOutput
    converged: bool | None
    seconds: float
    backend: str | None = None
    head: Any = None
    stats: dict | None = None  # what the solver did (fast mode's runs.csv columns); None otherwise


def run_grid(
    train: SplitArrays,
    val: SplitArrays | None,
    test: SplitArrays,
    n_classes: int,
    spec: GridSpec,
    host,
    ident: Mapping[str, Any],
    *,
    skip: Callable[[RunKey], bool] = lambda key: False,
    on_row: Callable[[RunKey, dict], None] = lambda key, row: None,
    fits: FitScope | None = None,
) -> dict[RunKey, dict]:
    """Run every (fraction, seed) of ``spec`` that ``skip`` does not claim.

    ``ident`` supplies the identity columns (task, adapter, model, dataset and metadata). Each finished row is
    handed to ``on_row`` at once (the results directory persists it), and all rows are returned.

    ``fits`` (a :class:`~prism_plugin.protocol.fit_memo.FitScope`): fits shared with other grids of the command
    that fit on the same train/val data; a fit found there is not refitted (its head and validation output are
    reused, the test output is computed on this grid's test split).
    """
    head_kind = str(spec.probe.get("kind", "logistic"))
    head_settings = {k: v for k, v in spec.probe.items() if k != "kind"}
    factory = host.head_factory(head_kind)
    # a head whose fit does not depend on the seed once the subset is fixed (registered with
    # seed_invariant=True; lbfgs ignores random_state): identical subsets share one fit
    seed_invariant = bool(host.head_traits(head_kind).get("seed_invariant"))
    reusable = spec.reuse_identical_fits and seed_invariant
    y_digest = labels_digest(train.y) if fits is not None else ""
    last: _Fit | None = None
    rows: dict[RunKey, dict] = {}
    todo = [key for key in grid_keys(spec) if not skip(key)]  # skip() once per key, in grid order
    # shared by this call's fits of a head with prepare_grid (fast mode: the plan, warm starts)
    grid_state: dict = {"keys": tuple(todo)}
    for key in todo:
        subset = stratified_subset(train.y, key.fraction, key.seed)
        digest = hashlib.sha1(subset.indices.tobytes()).hexdigest()
        if not (reusable and last is not None and last.digest == digest):
            t0 = time.perf_counter()
            try:
                head = factory(seed=key.seed, **head_settings)
            except TypeError as exc:
                raise PrismError(f"probe settings {dict(head_settings)} rejected by head {head_kind!r}: {exc}") from None
            prepare = getattr(head, "prepare_grid", None)
            # a head with grid state (fast mode's warm starts) depends on the grid's other runs: never shared
            # (a head with prepare_grid is taken to use it unless it says otherwise: uses_grid_state)
            grid_state_used = bool(getattr(head, "uses_grid_state", callable(prepare)))
            shared = fits if fits is not None and not grid_state_used else None
            memo_key = (shared.key(digest, head_kind, dict(head_settings), None if seed_invariant else key.seed,
                                   y_digest) if shared is not None else None)
            hit = shared.get(memo_key) if shared is not None else None
            if hit is not None:
                last = _Fit(digest=digest, val=hit.val, test=hit.head.evaluate(test.X), converged=hit.converged,
                            seconds=time.perf_counter() - t0, backend=hit.backend, head=hit.head, stats=hit.stats)
            else:
                last = _fit(head, prepare, grid_state, train, val, test, key, subset, digest, t0)
                if shared is not None:
                    shared.put(memo_key, MemoFit(head, last.val, last.converged, last.backend, last.stats))
        row = _score(key, subset, last, train, val, test, n_classes, spec, host, ident, head_kind)
        rows[key] = row
        on_row(key, row)
    return rows


def _fit(head, prepare, grid_state, train, val, test, key, subset, digest: str, t0: float) -> _Fit:
    """Fit ``head`` on the run's training subset; its val and test outputs."""
    if callable(prepare):
        prepare(grid_state, train, key)
    if len(subset.indices) == len(train):  # the whole (sorted) set: no copy of the matrix
        X_sub = np.asarray(train.X, dtype=np.float32)
    else:
        X_sub = np.asarray(train.X[subset.indices], dtype=np.float32)
    head.fit(X_sub, train.y[subset.indices])
    del X_sub
    return _Fit(
        digest=digest,
        val=head.evaluate(val.X) if val is not None else None,
        test=head.evaluate(test.X),
        converged=getattr(head, "converged", None),
        backend=getattr(head, "backend", None),
        seconds=time.perf_counter() - t0,
        head=head,
        stats=getattr(head, "solver_stats", None),
    )


#: the embedding identity columns of vectors that no adapter computed here (arrays in memory, a feature source);
#: no hub commit is a missing value (NaN), as an empty runs.csv field reads back
STORED_IDENTITY = {"precision": "as stored", "weights": "as stored", "weights_revision": float("nan")}


def _score(key, subset, fit: _Fit, train, val, test, n_classes, spec, host, ident, head_kind) -> dict:
    calibration: dict[str, CalibrationSet] = {}
    extra: dict[str, Any] = {}
    if fit.val is not None:
        val_logits = to_logits(fit.val.decision, spec.binary_logits)
        calibration["val"] = CalibrationSet(val_logits, val.y, "full validation split")
        extra["n_val"] = len(val)
        if spec.proportional_val:
            vsub = stratified_subset(val.y, key.fraction, key.seed)
            calibration["val_prop"] = CalibrationSet(
                val_logits[vsub.indices], val.y[vsub.indices], "proportional validation subset"
            )
            extra["n_val_prop"] = int(len(vsub.indices))
            extra["forced_val_classes"] = vsub.n_forced
    else:
        extra["n_val"] = 0
    split_seed = ident.get("split_seed")
    rid = key.id + str(ident.get("run_suffix") or "")
    meta = {**dict(ident.get("meta", {})), "probe": head_kind}
    if split_seed is not None:
        meta["split_seed"] = split_seed
    run = RunContext(
        task=ident["task"],
        adapter=ident["adapter"],
        model=ident["model"],
        dataset=ident["dataset"],
        fraction=key.fraction,
        seed=key.seed,
        n_classes=n_classes,
        n_train=int(len(subset.indices)),
        forced_classes=subset.n_forced,
        y_test=test.y,
        proba_test=np.asarray(fit.test.proba, dtype=np.float64),
        logits_test=to_logits(fit.test.decision, spec.binary_logits),
        calibration=calibration,
        ece_bins=spec.ece_bins,
        binary_logits=spec.binary_logits,
        t_bounds=tuple(spec.t_bounds),
        class_names=tuple(ident.get("class_names", ())),
        meta=meta,
        features=_features(key, subset, fit, train, val, test, spec, host, head_kind),
        artifact_dir=ident.get("artifact_dir"),
        host=host,
        split_seed=split_seed,
        run_id=rid,
        scaling=SCALING,
    )
    row: dict[str, Any] = {
        "model": run.model,
        **dict(ident.get("columns") or {"dataset": run.dataset}),
        "fraction": key.fraction,
        "seed": key.seed,
        **({"split_seed": split_seed} if split_seed is not None else {}),
        # a task with split_seeds / probes: its run id as a column, so readers of runs.csv need not rebuild it
        **({"run_id": rid} if ident.get("run_suffix") else {}),
        "n_train": run.n_train,
        "n_classes": n_classes,
        "forced_classes": run.forced_classes,
    }
    owners: dict[str, str] = {}
    for result in in_plugin_order(host.call("run_metrics", context=f"{run.task} {rid}", run=run)):
        if not result.value:
            continue
        for name, value in dict(result.value).items():
            if name in owners or name in row:
                raise PrismError(
                    f"metric {name!r} returned by both {owners.get(name, 'the runner')!r} and {result.plugin!r}; "
                    "disable one of them"
                )
            owners[name] = result.plugin
            row[name] = _scalar(value, name, result.plugin)
    if meta.get("probability_dtype") == "float32":  # the reference's float32 path (protocol/float32_path.py)
        from prism_plugin.protocol.float32_path import float32_columns

        row.update(float32_columns(run, fit.test.proba, row))
    row.update(extra)
    if fit.stats:
        row.update(fit.stats)
    row.update({
        "task": run.task,
        "adapter": run.adapter,
        "n_test": len(test),
        "probe": head_kind,
        "probe_converged": fit.converged,
        "probe_backend": fit.backend,
        "reference_table": ident.get("reference_table", "indomain"),
        # what the embeddings are (prism-run: the adapter's effective precision, weights and hub commit;
        # vectors handed over as they are, e.g. prism_plugin.evaluate: as stored)
        **dict(ident.get("identity_columns") or STORED_IDENTITY),
    })
    return row


def _features(key, subset, fit: _Fit, train, val, test, spec, host, head_kind) -> RunFeatures | None:
    """Read-only features and the fitted head for plugins that work on embeddings."""
    if fit.head is None:
        return None
    settings = {k: v for k, v in spec.probe.items() if k != "kind"}
    make = functools.partial(host.head_factory(head_kind), seed=key.seed, **settings)
    return RunFeatures(train, subset.indices, val, test, fit.head, make, head_kind)


def _scalar(value: Any, name: str, plugin: str):
    if isinstance(value, (np.generic,)):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise PrismError(f"metric {name!r} from plugin {plugin!r} is a {type(value).__name__}; metrics must be scalars")
