"""Run-quality flags: what qualifies the numbers of a runs table.

A number is never shown as a plain success when something qualifies it. :func:`run_flags` derives the flags of a
runs table (a ``runs.csv`` as a DataFrame) with pure functions, one per check (:data:`CHECKS`), and appends the
split/data checks the embedding loader found (``emb_info["data_checks"]``). ``prism-run`` prints them (one line
each), writes them to ``summary.json`` (``flags``, ``qualified``) and marks them in its console table; the report's
verdict reads the same conditions per cell from ``report_settings`` (:mod:`prism_plugin.report.derived`).

Each flag is a :class:`Flag`: ``flag`` (its name), ``level`` (``warning``: it qualifies a number; ``info``:
context; ``allowed``: a data check the task explicitly allowed, recorded), a one-line ``message``, ``count`` of
runs (or of splits, for data checks) out of ``total``, the run ids (``f<fraction>-s<seed>``;
``f<fraction>-s<seed>-split<S>-<probe>`` for a task with ``split_seeds`` / ``probes``) in ``cells``, their
``fractions``, and ``detail`` (check-specific numbers).

Checks and their thresholds:

* ``probe_not_converged``: ``probe_converged`` is False (the solver stopped at ``max_iter``);
* ``temperature_at_bound``: a fitted temperature (``temperature``, ``temperature_src``, ``temperature_prop``)
  within 0.001 of a search bound (:func:`bound_side`, the reference notebooks' diagnostic, also the report's
  ``t_bound`` counts): the NLL optimum lies outside the box, so the scaled ECE/NLL are those of a clipped fit;
* ``nll_worse_after_scaling``: ``nll_scaled > nll`` beyond ``1e-6`` (relative and absolute);
* ``collapsed``: the prevalence-aware collapse of :mod:`prism_plugin.metrics.collapse` (runs without that column
  fall back to PRISM's ``degenerate``); ``degenerate_not_collapsed`` (info): PRISM's > 0.99 share fires on runs
  that the prevalence-aware rule does not call collapsed;
* ``single_class_test``: the test split has one class (AUROC undefined, collapse not judged);
* ``few_test_samples_per_class``: the rarest test class has fewer than :data:`MIN_TEST_PER_CLASS` samples;
  ``few_train_samples_per_class`` (info): fewer than :data:`MIN_TRAIN_PER_CLASS` training samples per class at a
  label fraction;
* data checks (``split_overlap``, ``zero_rows``, ``extreme_scale``, ...): as the loader reports them.

A check is ``check(runs, ctx) -> list[Flag]``, registered with ``register_checks``; :func:`run_flags` without a
host uses :data:`CHECKS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.contracts import T_BOUNDS
from prism_plugin.hookspecs import hookimpl

LEVELS = ("warning", "info", "allowed")
#: Fewer test samples than this in the rarest class make AUROC/ECE of that class noise.
MIN_TEST_PER_CLASS = 10
#: Fewer training samples per class than this at a fraction: noted (the protocol's scarce-label end).
MIN_TRAIN_PER_CLASS = 5
#: The temperature columns checked against the search bounds (in-distribution, transfer, proportional val).
TEMPERATURE_COLUMNS = ("temperature", "temperature_src", "temperature_prop")
#: An NLL "got worse" beyond this: scaled > raw * (1 + NLL_RTOL) + NLL_ATOL (a neutral T leaves
#: the NLL equal up to rounding and the bounded search's tolerance).
NLL_RTOL = 1e-6
NLL_ATOL = 1e-6
#: How close to a search bound a fitted temperature counts as "at the bound" (the notebooks' 0.001).
BOUND_TOLERANCE = 0.001
MAX_LISTED = 4


@dataclass(frozen=True)
class Flag:
    flag: str
    level: str
    message: str
    count: int
    total: int = 0
    cells: tuple[str, ...] = ()
    fractions: tuple[float, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)
    source: str = "runs"

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "level": self.level, "message": self.message, "count": int(self.count),
                "total": int(self.total), "cells": list(self.cells), "fractions": [float(f) for f in self.fractions],
                "detail": dict(self.detail), "source": self.source}


@dataclass(frozen=True)
class QualityContext:
    t_bounds: tuple[float, float] = T_BOUNDS
    name: str = ""


# --------------------------------------------------------------------------- helpers
def bound_side(temperature: float, bounds: Sequence[float] = T_BOUNDS) -> str:
    """``"low"`` / ``"high"``: T within :data:`BOUND_TOLERANCE` of that search bound; ``""`` otherwise
    (NaN too). The one "T at a bound" test (run flags and the report's counts)."""
    t = float(temperature)
    if not (np.isfinite(t) and (t <= bounds[0] + BOUND_TOLERANCE or t >= bounds[1] - BOUND_TOLERANCE)):
        return ""
    return "low" if t <= (bounds[0] + bounds[1]) / 2 else "high"


def as_bool(col: pd.Series) -> pd.Series:
    """A flag column as float 1/0/NaN: bools, numbers and the strings a CSV reads back."""
    import pandas as pd
    if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
        return pd.to_numeric(col, errors="coerce").astype(float)
    low = col.astype("string").str.strip().str.lower().fillna("")
    return low.map(lambda v: 1.0 if v in ("true", "1", "1.0", "yes") else
                   (0.0 if v in ("false", "0", "0.0", "no") else np.nan)).astype(float)


#: ``runs.attrs`` key of the run ids of a runs table, row by row (the runner sets it: a task with the
#: ``split_seeds`` / ``probes`` grid dimensions has ids such as ``f1-s0-split3-knn1``)
RUN_IDS_ATTR = "run_ids"


def _split_seed_text(value: Any) -> str:
    import pandas as pd
    try:
        return "" if value is None or pd.isna(value) else f"-split{int(float(value))}"
    except (TypeError, ValueError):
        return ""


def all_run_ids(runs: pd.DataFrame) -> list[str]:
    """The id of every row (:func:`prism_plugin.protocol.grid.run_id`): those the runner attached
    (``runs.attrs[RUN_IDS_ATTR]``), else the ``run_id`` column (rows of tasks with grid keys; the other rows are
    ``f<fraction>-s<seed>``), else, for tables written before that column, rebuilt from the columns: ``-split<S>``
    where a ``split_seed`` is given and ``-<probe>`` where the table holds several probe kinds."""
    import pandas as pd
    from prism_plugin.protocol.grid import probe_label

    ids = runs.attrs.get(RUN_IDS_ATTR)
    if isinstance(ids, (list, tuple)) and len(ids) == len(runs):
        return [str(i) for i in ids]
    if "fraction" not in runs or "seed" not in runs:
        return [str(i) for i in runs.index]
    if "run_id" in runs:  # the runner writes it for tasks with grid keys; the other rows' ids are plain
        return [str(r) if isinstance(r, str) and r else f"f{float(f):g}-s{s}"
                for r, f, s in zip(runs["run_id"], runs["fraction"], runs["seed"])]
    splits = runs["split_seed"] if "split_seed" in runs else pd.Series([None] * len(runs), index=runs.index)
    several = "probe" in runs and runs["probe"].nunique(dropna=True) > 1
    probes = runs["probe"] if several else pd.Series([None] * len(runs), index=runs.index)
    return [f"f{float(f):g}-s{s}{_split_seed_text(sp)}{f'-{probe_label(pr)}' if isinstance(pr, str) else ''}"
            for f, s, sp, pr in zip(runs["fraction"], runs["seed"], splits, probes)]


def run_ids(runs: pd.DataFrame, mask: pd.Series) -> tuple[str, ...]:
    import pandas as pd
    ids = all_run_ids(runs)
    picked = np.asarray(pd.Series(mask, index=runs.index).fillna(False), dtype=bool)
    return tuple(i for i, keep in zip(ids, picked) if keep)


def _fractions(runs: pd.DataFrame, mask: pd.Series) -> tuple[float, ...]:
    import pandas as pd
    if "fraction" not in runs:
        return ()
    return tuple(sorted({float(f) for f in pd.to_numeric(runs.loc[mask, "fraction"], errors="coerce").dropna()}))


def pct(f: float) -> str:
    return f"{round(float(f) * 100.0, 6):g} %"


def where_text(runs: pd.DataFrame, mask: pd.Series) -> str:
    """``5 of 18 runs (fractions 1 %, 5 %)`` / ``every run``."""
    import pandas as pd
    n, total = int(mask.sum()), len(runs)
    fr = _fractions(runs, mask)
    all_fr = _fractions(runs, pd.Series(True, index=runs.index))
    if n == total:
        head = f"every run ({total})" if total != 1 else "the run"
    else:
        head = f"{n} of {total} runs"
    if not fr or (n == total and len(all_fr) > 1):
        return head
    listed = ", ".join(pct(f) for f in fr[:MAX_LISTED]) + (", …" if len(fr) > MAX_LISTED else "")
    return f"{head} (fraction{'s' if len(fr) > 1 else ''} {listed})"


def _flag(name: str, level: str, message: str, runs: pd.DataFrame, mask: pd.Series, **detail: Any) -> Flag:
    return Flag(name, level, message, int(mask.sum()), len(runs), run_ids(runs, mask), _fractions(runs, mask),
                detail)


def _num(runs: pd.DataFrame, column: str) -> pd.Series:
    import pandas as pd
    return pd.to_numeric(runs[column], errors="coerce")


# --------------------------------------------------------------------------- checks
def check_convergence(runs: pd.DataFrame, ctx: QualityContext) -> list[Flag]:
    if "probe_converged" not in runs:
        return []
    mask = as_bool(runs["probe_converged"]) == 0.0
    if not mask.any():
        return []
    return [_flag("probe_not_converged", "warning",
                  f"the probe did not converge (solver stopped at max_iter) in {where_text(runs, mask)}: its "
                  "numbers come from an unfinished fit; raise probe.max_iter or standardise the features",
                  runs, mask)]


def check_temperature_bounds(runs: pd.DataFrame, ctx: QualityContext) -> list[Flag]:
    lo, hi = (float(b) for b in ctx.t_bounds)
    out = []
    for column in TEMPERATURE_COLUMNS:
        if column not in runs:
            continue
        side = _num(runs, column).map(lambda v: bound_side(v, (lo, hi)))
        hit = side != ""
        if not hit.any():
            continue
        low, high = side == "low", side == "high"
        sides = [f"the lower bound T = {lo:g}" if low.any() else "", f"the upper bound T = {hi:g}" if high.any() else ""]
        side = " and ".join(s for s in sides if s)
        what = {"temperature": "fitted temperature", "temperature_src": "source-fitted temperature",
                "temperature_prop": "temperature fitted on the proportional validation subset"}[column]
        out.append(_flag("temperature_at_bound", "warning",
                         f"{what} ({column}) is at {side} of the search box in {where_text(runs, hit)}: the fit is "
                         "bound-limited, so the scaled ECE/NLL are not the optimum; widen temperature_bounds "
                         "(or read the scaled numbers as a clipped fit)",
                         runs, hit, column=column, bounds=[lo, hi], low=int(low.sum()), high=int(high.sum())))
    return out


def check_nll(runs: pd.DataFrame, ctx: QualityContext) -> list[Flag]:
    if "nll" not in runs or "nll_scaled" not in runs:
        return []
    raw, scaled = _num(runs, "nll"), _num(runs, "nll_scaled")
    mask = (scaled > raw + NLL_RTOL * raw.abs() + NLL_ATOL) & raw.notna() & scaled.notna()
    if not mask.any():
        return []
    transfer = "temperature_src" in runs and "temperature" not in runs
    which = "the source-fitted temperature" if transfer else "temperature scaling"
    worst = float((scaled - raw)[mask].max())
    return [_flag("nll_worse_after_scaling", "warning",
                  f"test NLL got worse after {which} in {where_text(runs, mask)} (by up to {worst:.3g}): the "
                  "temperature fitted on the validation split does not carry over to the test split, so a lower "
                  "scaled ECE there is not a calibration success", runs, mask, worst_increase=worst)]


def check_collapse(runs: pd.DataFrame, ctx: QualityContext) -> list[Flag]:
    import pandas as pd
    from prism_plugin.metrics.collapse import RECALL_FLOOR

    out = []
    single = _single_class_mask(runs)
    deg = as_bool(runs["degenerate"]) == 1.0 if "degenerate" in runs else pd.Series(False, index=runs.index)
    if "collapsed" in runs and as_bool(runs["collapsed"]).notna().any():
        coll = as_bool(runs["collapsed"]) == 1.0
        if coll.any():
            share = _num(runs, "degeneracy_share")[coll] if "degeneracy_share" in runs else pd.Series(dtype=float)
            true = _num(runs, "top_class_true_share")[coll] if "top_class_true_share" in runs else pd.Series(dtype=float)
            detail = ""
            if len(share.dropna()) and len(true.dropna()):
                detail = (f" (its top class takes up to {share.max() * 100:.1f} % of the test predictions against a "
                          f"true share of {true.max() * 100:.1f} %)")
            out.append(_flag("collapsed", "warning",
                             f"the probe collapsed in {where_text(runs, coll)}: it predicts one class beyond its "
                             f"test share and recalls no other class above {RECALL_FLOOR:g}{detail}; PRISM's "
                             f"`degenerate` (> 99 % share) marks {int((deg & coll).sum())} of them",
                             runs, coll, rule="prevalence", degenerate=int((deg & coll).sum())))
        other = deg & ~coll & ~single
        if other.any():
            rec = _num(runs, "min_class_recall")[other] if "min_class_recall" in runs else pd.Series(dtype=float)
            tail = f" (smallest per-class recall {rec.min():.3f})" if len(rec.dropna()) else ""
            out.append(_flag("degenerate_not_collapsed", "info",
                             f"PRISM's `degenerate` (> 99 % of test predictions in one class) fires in "
                             f"{where_text(runs, other)}, but that class dominates the test split and the other "
                             f"classes are still recalled{tail}: not counted as collapse", runs, other))
    elif deg.any():
        mask = deg & ~single
        if mask.any():
            out.append(_flag("collapsed", "warning",
                             f"the probe collapsed (PRISM rule: > 99 % of test predictions in one class; the runs "
                             f"carry no prevalence-aware columns) in {where_text(runs, mask)}", runs, mask,
                             rule="prism"))
    return out


def _single_class_mask(runs: pd.DataFrame) -> pd.Series:
    import pandas as pd
    if "n_test_classes" not in runs:
        return pd.Series(False, index=runs.index)
    return _num(runs, "n_test_classes") == 1


def check_test_classes(runs: pd.DataFrame, ctx: QualityContext) -> list[Flag]:
    out = []
    single = _single_class_mask(runs)
    if single.any():
        out.append(_flag("single_class_test", "warning",
                         f"the test split has one class (in {where_text(runs, single)}): AUROC is undefined and "
                         "ECE/F1 describe that class only; a probe predicting it is not a collapse — add test "
                         "samples of the other classes", runs, single))
    if "min_test_class_count" in runs:
        cnt = _num(runs, "min_test_class_count")
        few = (cnt < MIN_TEST_PER_CLASS) & (cnt > 0) & ~single
        if few.any():
            n = int(cnt[few].min())
            out.append(_flag("few_test_samples_per_class", "warning",
                             f"the rarest test class has only {n} sample{'s' if n != 1 else ''} (< "
                             f"{MIN_TEST_PER_CLASS}): its per-class numbers (recall, AUROC, ECE bins) are noise-"
                             "level", runs, few, min_count=n))
    return out


def check_train_classes(runs: pd.DataFrame, ctx: QualityContext) -> list[Flag]:
    if "n_train" not in runs or "n_classes" not in runs:
        return []
    per = _num(runs, "n_train") / _num(runs, "n_classes")
    mask = per < MIN_TRAIN_PER_CLASS
    if not mask.any():
        return []
    return [_flag("few_train_samples_per_class", "info",
                  f"fewer than {MIN_TRAIN_PER_CLASS} training samples per class (as few as {per[mask].min():g}) in "
                  f"{where_text(runs, mask)}: expect wide seed spread there", runs, mask,
                  min_per_class=float(per[mask].min()))]


def check_fast_solver(runs: pd.DataFrame, ctx: QualityContext) -> list[Flag]:
    """Runs whose probe the fast backend fitted with its own solver (not exact mode's lbfgs): their numbers
    agree with exact mode only within the measured tolerance, so they are not exact-mode numbers."""
    if "probe_solver" not in runs or "probe_backend" not in runs:
        return []
    mask = (runs["probe_backend"].astype(str) == "fast") & (runs["probe_solver"].astype(str) == "lbfgs-preconditioned")
    if not mask.any():
        return []
    from prism_plugin.heads.fast_record import fast_mode_note

    return [_flag("fast_solver", "warning", f"{fast_mode_note(runs)} ({where_text(runs, mask)})", runs, mask)]


Check = Callable[["pd.DataFrame", QualityContext], list[Flag]]
#: The built-in checks, in the order their flags are listed (registered as the ``checks`` catalogue
#: by :func:`register_checks`; a plugin adds its own through the same hook).
CHECKS: tuple[Check, ...] = (check_test_classes, check_convergence, check_collapse, check_temperature_bounds,
                             check_nll, check_train_classes, check_fast_solver)

_CHECK_NAMES = {
    check_test_classes: ("test_classes", "a test split with one class; a test class with fewer than 10 samples"),
    check_convergence: ("convergence", "a probe that stopped at max_iter (probe_converged = False)"),
    check_collapse: ("collapse", "prevalence-aware collapse (PRISM's degenerate beside it)"),
    check_temperature_bounds: ("temperature_bounds", "a fitted temperature within 0.001 of a search bound"),
    check_nll: ("nll_after_scaling", "a test NLL that got worse after temperature scaling"),
    check_train_classes: ("train_classes", "fewer than 5 training samples per class at a fraction (info)"),
    check_fast_solver: ("fast_solver", "runs fitted by the fast backend's own solver (within tolerance of exact)"),
}


@hookimpl
def register_checks(register) -> None:
    for check in CHECKS:
        name, description = _CHECK_NAMES[check]
        register(name, check, description=description)


def host_checks(host) -> tuple[Check, ...]:
    """The checks of ``host``'s ``checks`` catalogue in registration order (built-ins first)."""
    registry = host.checks
    return tuple(registry.get(name) for name in registry.names())


# --------------------------------------------------------------------------- data checks (embedding loader)
def data_flags(data_checks: Iterable[Mapping[str, Any]] | None) -> list[Flag]:
    """The loader's split/data checks (``emb_info["data_checks"]``) as flags (``source = "data"``)."""
    out = []
    for c in data_checks or ():
        if not isinstance(c, Mapping):
            continue
        level = str(c.get("level", "warning"))
        level = level if level in LEVELS else "warning"
        splits = [str(s) for s in (c.get("splits") or [])]
        out.append(Flag(str(c.get("check", "data_check")), level, " ".join(str(c.get("message", "")).split()),
                        int(c.get("count", 0) or 0), 0, tuple(splits), (), {"splits": splits}, source="data"))
    return out


def run_flags(runs: pd.DataFrame, *, t_bounds: Sequence[float] = T_BOUNDS,
              data_checks: Iterable[Mapping[str, Any]] | None = None, checks: Iterable[Check] = CHECKS,
              name: str = "") -> list[Flag]:
    """Every flag of ``runs`` (see the module docstring): the data checks first, then :data:`CHECKS`.

    A run-derived flag the loader already reported (same ``flag`` name, e.g. ``single_class_test``)
    is not repeated."""
    ctx = QualityContext(tuple(float(b) for b in t_bounds), name)
    out = data_flags(data_checks)
    seen = {f.flag for f in out}
    if runs is not None and len(runs):
        for check in checks:
            for f in check(runs, ctx):
                if f.flag in seen:
                    continue
                if f.flag == "collapsed" and f.detail.get("rule") == "prism" and "single_class_test" in seen:
                    continue  # older runs without n_test_classes: the loader says the test split has one class
                out.append(f)
    return out


def qualified(flags: Iterable[Flag | Mapping[str, Any]]) -> bool:
    """True when any flag qualifies the numbers (level ``warning``)."""
    return any((f.level if isinstance(f, Flag) else f.get("level")) == "warning" for f in flags)


#: Short console markers per flag (``compact_table``'s ``flags`` column).
MARKERS = {"probe_not_converged": "not-converged", "temperature_at_bound": "T@bound",
           "nll_worse_after_scaling": "NLL-up", "collapsed": "collapsed", "single_class_test": "1-class-test",
           "few_test_samples_per_class": "few-test"}


def _marked(flags: Iterable[Flag | Mapping[str, Any]]):
    """``(marker, flag dict)`` of each run-derived warning that has a marker."""
    for f in flags:
        d = f.to_dict() if isinstance(f, Flag) else dict(f)
        mark = MARKERS.get(d.get("flag", ""))
        if mark is not None and d.get("level") == "warning" and d.get("source", "runs") == "runs":
            yield mark, d


def fraction_markers(flags: Iterable[Flag | Mapping[str, Any]]) -> dict[float, list[str]]:
    """Per label fraction: ``["T@bound 3", "NLL-up 1"]`` (runs at that fraction) for the run-derived
    warnings with a marker."""
    out: dict[float, dict[str, int]] = {}
    for mark, d in _marked(flags):
        for cell in d.get("cells", []):
            frac = cell_fraction(cell)
            if frac is None:
                continue
            counts = out.setdefault(frac, {})
            counts[mark] = counts.get(mark, 0) + 1
    return {k: [f"{m} {n}" for m, n in v.items()] for k, v in out.items()}


def cell_fraction(cell: Any) -> float | None:
    """The label fraction of a run id (``f0.1-s42`` and ``f0.1-s42-split3-knn1`` -> 0.1)."""
    text = str(cell)
    if not text.startswith("f") or "-s" not in text:
        return None
    try:
        return float(text[1:].split("-s", 1)[0])
    except ValueError:
        return None


def cell_markers(flags: Iterable[Flag | Mapping[str, Any]], cells: Iterable[str]) -> list[str]:
    """``["T@bound 3", "NLL-up 1"]``: the run-derived warnings with a marker among the runs ``cells``
    (run ids; e.g. one probe's runs at one fraction)."""
    wanted = set(map(str, cells))
    counts: dict[str, int] = {}
    for mark, d in _marked(flags):
        n = sum(1 for cell in d.get("cells", []) if str(cell) in wanted)
        if n:
            counts[mark] = counts.get(mark, 0) + n
    return [f"{m} {n}" for m, n in counts.items()]


def console_lines(flags: Iterable[Flag], prefix: str = "") -> list[str]:
    """One line per flag: ``<prefix>: warning: <message>``."""
    head = f"{prefix}: " if prefix else ""
    return [f"{head}{f.level}: {f.message}" for f in flags]


__all__ = ["CHECKS", "Flag", "LEVELS", "MIN_TEST_PER_CLASS", "MIN_TRAIN_PER_CLASS", "QualityContext",
           "TEMPERATURE_COLUMNS", "as_bool", "bound_side", "console_lines", "data_flags", "fraction_markers", "qualified",
           "run_flags", "RUN_IDS_ATTR", "all_run_ids", "cell_fraction", "cell_markers"]
