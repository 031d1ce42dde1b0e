"""The runs a ``runs.csv`` already holds, and the refusal of a grid that would drop some of them."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Iterable

from prism_plugin.errors import PrismError
from prism_plugin.results import RUNS_NAME


def _run_id(fraction: Any, seed: Any) -> str:
    return f"f{float(fraction):g}-s{int(seed)}"  # prism_plugin.protocol.grid.RunKey.id


def _grid_suffix(run: tuple, probe: bool) -> str:
    """``-split3`` / ``-knn1``: what tells a run of the grid dimensions apart in a message."""
    return (f"-split{run[4]}" if run[4] is not None else "") + (f"-{run[5]}" if probe and run[5] else "")


def existing_runs(path: str | Path, extended: bool = False) -> tuple[list[tuple], str | None]:
    """The ``(task, model, fraction, seed)`` of every intact row of the ``runs.csv`` at ``path``
    (rows with another number of fields, or an unreadable fraction or seed, are left out), and
    ``None``; or ``([], why)`` when the file is not a prism-run table. A missing or empty file: ``([], None)``.
    ``extended``: ``(task, model, fraction, seed, split seed or None, probe or None)``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], f"unreadable ({exc.strerror or type(exc).__name__})"
    if not raw.strip():
        return [], None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [], "not a prism-run table (not UTF-8 text)"
    if not text.endswith("\n"):  # a cut-off last line is not a run
        text = text[: text.rfind("\n") + 1]
    try:
        table = list(csv.reader(io.StringIO(text)))
    except csv.Error:
        return [], "not a prism-run table (not CSV)"
    if not table or "fraction" not in table[0] or "seed" not in table[0]:
        return [], "not a prism-run table (no fraction and seed columns)"
    header = table[0]
    col = {name: header.index(name) for name in ("task", "model", "fraction", "seed", "split_seed", "probe")
           if name in header}
    out = []
    for fields in table[1:]:
        if len(fields) != len(header):
            continue
        try:
            fraction, seed = float(fields[col["fraction"]]), int(float(fields[col["seed"]]))
        except (ValueError, OverflowError):
            continue
        if not math.isfinite(fraction):
            continue
        row = (fields[col["task"]] if "task" in col else None, fields[col["model"]] if "model" in col else None,
               fraction, seed)
        if extended:
            try:
                split = int(float(fields[col["split_seed"]])) if "split_seed" in col and fields[col["split_seed"]] \
                    else None
            except (ValueError, OverflowError):
                split = None
            row = row + (split, (fields[col["probe"]] or None) if "probe" in col else None)
        out.append(row)
    return out, None


def describe_runs(runs: Iterable[tuple]) -> str:
    """``task T, model M: label_fractions [0.1, 1] x seeds [0, 1]`` (one part per task and model; with
    ``split_seeds [..] x probes [..]`` in front for runs that carry them)."""
    groups: dict[tuple[Any, Any], tuple[set, set, set, set]] = {}
    for run in runs:
        task, model, fraction, seed = run[:4]
        fr, sd, sp, pr = groups.setdefault((task, model), (set(), set(), set(), set()))
        fr.add(float(fraction))
        sd.add(int(seed))
        if len(run) > 4:
            if run[4] is not None:
                sp.add(int(run[4]))
            if run[5]:
                pr.add(str(run[5]))
    parts = []
    for (task, model), (fr, sd, sp, pr) in groups.items():
        grid = f"label_fractions [{', '.join(f'{f:g}' for f in sorted(fr))}] x seeds [{', '.join(map(str, sorted(sd)))}]"
        if len(pr) > 1:
            grid = f"probes [{', '.join(sorted(pr))}] x {grid}"
        if sp:
            grid = f"split_seeds [{', '.join(map(str, sorted(sp)))}] x {grid}"
        parts.append(f"task {task}, model {model}: {grid}")
    shown = "; ".join(parts[:3]) + (f"; ... ({len(parts)} task/model pairs)" if len(parts) > 3 else "")
    return shown or "no runs"


def check_grid_kept(runs_csv: str | Path, planned: Iterable[tuple[Any, Any, float, int]], *, overwrite: bool,
                    where: str) -> None:
    """Refuse a run that would replace ``runs_csv`` by a table without some of its runs.

    ``planned``: the ``(task, model, fraction, seed)`` of every run the new table will hold, or for a task with the
    ``split_seeds`` / ``probes`` grid dimensions ``(task, model, fraction, seed, split seed, probe kind)``
    (:func:`prism_plugin.runner.planned_runs`). The same grid or a larger one passes (its cells are reused); a grid
    that drops runs present in ``runs_csv`` (other fractions, seeds, split seeds, probes, task or model) is refused
    with one line naming ``where``, both grids and the fix, unless ``overwrite``. A 4-tuple keeps a row of the same
    task, model, fraction and seed that has no split seed; a 6-tuple keeps the row of the same split seed and
    probe. Saved cells are never deleted either way.
    """
    if overwrite:
        return
    planned = list(planned)
    old, problem = existing_runs(runs_csv, extended=True)
    if problem is not None:
        raise PrismError(f"{where}: {runs_csv} is {problem}; move it aside, choose another --output, "
                         "or pass --overwrite to replace it")
    plain = {(str(p[0]), str(p[1]), _run_id(p[2], p[3])) for p in planned if len(p) == 4}
    gridded = {(str(p[0]), str(p[1]), _run_id(p[2], p[3]), p[4], str(p[5])) for p in planned if len(p) > 4}

    def kept(r) -> bool:
        ident = (str(r[0]), str(r[1]), _run_id(r[2], r[3]))
        return (r[4] is None and ident in plain) or (ident + (r[4], str(r[5])) in gridded)

    dropped = [r for r in old if not kept(r)]
    if not dropped:
        return
    several = len({r[5] for r in old}) > 1
    sample = ", ".join(dict.fromkeys(_run_id(r[2], r[3]) + _grid_suffix(r, several) for r in dropped[:3]))
    raise PrismError(
        f"{where}: its {RUNS_NAME} holds {len(old)} run(s) ({describe_runs(old)}) and this run's grid "
        f"({describe_runs(planned)}) would drop {len(dropped)} of them (e.g. {sample}); run a grid that "
        f"includes them (a larger grid keeps them and reuses their cells), choose another --output, or pass "
        f"--overwrite to replace the table (saved cells are kept)")
