"""What fast mode (``probe.backend: fast``) did, read back from its runs' own columns: the ``fast_mode`` record of
``summary.json`` and the note its console line and ``fast_solver`` flag carry. Read from the rows, so a resumed
folder says what its saved runs did."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from prism_plugin.heads.logistic import FAST_MEASURED_AGREEMENT, FAST_TOL, FAST_TRIAL_MARGIN


def _fast_rows(rows) -> list[dict]:
    """The fast-mode rows of a runs table (DataFrame) or of a list of row dicts."""
    records = rows.to_dict(orient="records") if hasattr(rows, "to_dict") else list(rows)
    return [r for r in records if r.get("probe_backend") == "fast"]


def _seconds(r: dict, column: str) -> float:
    """A timing column of a row: NaN when missing or not a finite number."""
    try:
        v = float(r.get(column))
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _build_seconds(r: dict) -> float:
    """The trial's preconditioner build (0 when not recorded: the preconditioner was already built)."""
    v = _seconds(r, "probe_build_seconds")
    return 0.0 if math.isnan(v) else v


def _is_trial(r: dict) -> bool:
    return str(r.get("probe_choice", "")).startswith("trial-")


def _run_of(r: dict) -> str:
    rid = r.get("run_id")
    return rid if isinstance(rid, str) and rid else f"f{float(r['fraction']):g}-s{int(r['seed'])}"


def _decision(trial: dict, pair: dict | None) -> dict[str, Any]:
    """One grid's timed trial as ``summary.json`` records it."""
    n = int(trial["n_train"])
    won = trial["probe_choice"] == "trial-won"
    exact_s, trial_s = _seconds(trial, "probe_exact_seconds"), _seconds(trial, "probe_trial_seconds")
    build_s = _build_seconds(trial)
    solve_s = trial_s - build_s
    timed = not (math.isnan(exact_s) or math.isnan(solve_s)) and solve_s > 0
    if timed:
        after = ("the grid's later fits are the preconditioned solver's" if won else
                 "every later fit of the grid is exact mode's")
        reason = (f"the timed trial took {trial_s:.3g} s ({build_s:.3g} s building the grid's preconditioner, "
                  f"{solve_s:.3g} s solving) against the exact fit's {exact_s:.3g} s on {n} rows: its solve was "
                  f"{'' if won else 'not '}faster by at least {FAST_TRIAL_MARGIN:g}x, so {after}")
    else:
        reason = "the trial's timings are missing"

    def known(v: float) -> float | None:
        return None if math.isnan(v) else v

    return {"decision": "preconditioned" if won else "exact", "trial_run": _run_of(trial),
            "exact_run": _run_of(pair) if pair is not None else None, "rows": n,
            "exact_seconds": known(exact_s), "trial_seconds": known(trial_s), "build_seconds": build_s,
            "solve_seconds": known(solve_s), "exact_over_solve": round(exact_s / solve_s, 3) if timed else None,
            "reason": reason}


def fast_mode_record(rows) -> dict | None:
    """What fast mode decided, per grid, as ``summary.json`` holds it (``fast_mode``); ``None`` without fast runs.

    Per unit of the grid (split seed, probe) the timed trial (``probe_choice`` ``trial-won`` / ``trial-lost``): its
    run, its size, the timings in seconds, the run of the exact fit it was paired with, the decision and its
    reason; and how many runs each solver fitted.
    """
    fast = _fast_rows(rows)
    if not fast:
        return None
    units: dict[tuple, list[dict]] = {}
    for r in fast:
        units.setdefault((str(r.get("split_seed", "")), str(r.get("probe", ""))), []).append(r)
    decisions = []
    for unit_rows in units.values():
        exact_before: dict[int, dict] = {}  # rows -> the last exact fit of that size before the trial
        for r in unit_rows:
            if _is_trial(r):
                decisions.append(_decision(r, exact_before.get(int(r["n_train"]))))
            elif r.get("probe_solver") == "sklearn-lbfgs" and r.get("n_train") is not None:
                exact_before[int(r["n_train"])] = r
    out: dict[str, Any] = {"trial_margin": FAST_TRIAL_MARGIN, "decisions": decisions,
                           "runs_by_solver": dict(Counter(str(r.get("probe_solver")) for r in fast))}
    if not decisions:
        out["reason"] = ("no timed trial: no fit of at least FAST_MIN_ROWS rows with a timed exact fit of the same "
                         "size before it passed the filter (or every such run was reused); every fit exactly as "
                         "exact mode")
    out["note"] = fast_mode_note(fast)
    return out


def fast_mode_note(rows) -> str | None:
    """The qualifier a summary or console line carries when runs came from the fast solver, else None.

    ``rows``: a runs table (DataFrame) or a list of row dicts.
    """
    fast = _fast_rows(rows)
    if not fast:
        return None
    pc = [r for r in fast if r.get("probe_solver") == "lbfgs-preconditioned"]
    timing = "; ".join(
        f"trial {_run_of(r)} {_seconds(r, 'probe_trial_seconds'):.3g} s (build "
        f"{_build_seconds(r):.3g} s) vs exact {_seconds(r, 'probe_exact_seconds'):.3g} s on "
        f"{int(r['n_train'])} rows: {'preconditioned' if r['probe_choice'] == 'trial-won' else 'exact'} after it"
        for r in fast if _is_trial(r))
    decided = f" (chosen by timing: {timing})" if timing else ""
    a = FAST_MEASURED_AGREEMENT
    if not pc:
        return (f"probe.backend fast: all {len(fast)} runs fitted by scikit-learn lbfgs exactly as exact mode "
                f"(no timed trial of the preconditioned solver was worth making){decided}")
    grads = [float(r["probe_grad_max"]) for r in pc if r.get("probe_grad_max") is not None]
    worst = max(grads) if grads else float("nan")
    return (f"numbers from the fast solver (probe.backend fast): {len(pc)} of {len(fast)} runs fitted by preconditioned "
            f"L-BFGS stopped at max |grad| <= {worst:.1e} (scikit-learn's criterion, tol {FAST_TOL:g}), the rest "
            f"exactly as exact mode{decided}; on the benchmark's data within {a['auroc']:g} AUROC, "
            f"{a['ece_fixed']:g} ECE, {a['temperature']:g} T of exact, which is itself as far from the optimum")
