"""The published per-run reference tables on disk: where ``prism-run reference pull`` keeps them,
checking a copy against the shipped size/SHA-256 list, and reading a folder with the ``results_v2``
layout (every missing or malformed file named in one error).

Used by ``prism-run reference`` / ``compare`` / ``findings`` / ``report`` and by :mod:`prism_plugin.compat`; kept
below the commands so that library code can read the reference without importing a subcommand.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.paths import cache_root
from prism_plugin.tables import REFERENCE_FILES, RunTables, read_run_table

#: Text columns of the per-run tables; every other required column must be numeric.
TEXT_COLUMNS = {"model", "dataset", "src", "tgt", "pair", "hospital", "budget"}

def pulled_dir() -> Path:
    """Where ``reference pull`` keeps the published results_v2 files."""
    from prism_plugin.reference_data import PUBLISHED_COMMIT, PUBLISHED_PATH

    return cache_root() / "reference" / f"prism-benchmark-{PUBLISHED_COMMIT}" / PUBLISHED_PATH


def _sha256(path: Path) -> str:
    from prism_plugin.storage import update_from_file

    return update_from_file(hashlib.sha256(), path, chunk=1 << 20).hexdigest()


def verify_files(directory: Path, names=None) -> list[str]:
    """Problems (one string per file) of ``directory`` against the shipped size/SHA-256 list."""
    from prism_plugin.reference_data import PUBLISHED_FILES

    problems = []
    for name in names or PUBLISHED_FILES:
        size, sha = PUBLISHED_FILES[name]
        path = Path(directory) / name
        if not path.exists():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != size:
            problems.append(f"{name} has {path.stat().st_size} bytes, expected {size}")
        elif (actual := _sha256(path)) != sha:
            problems.append(f"{name} has SHA-256 {actual[:12]}..., expected {sha[:12]}...")
    return problems


def read_reference_dir(directory: str | Path, required: tuple[str, ...] = ("indomain", "transfer")) -> RunTables:
    """Per-run tables of a results_v2 folder; every missing or malformed file is named in one error.

    ``required`` tables (keys of :data:`prism_plugin.tables.REFERENCE_FILES`) must be present; the others are read
    when present. A present file must parse as CSV, have the columns the summaries read, at least one row, and
    numbers in its numeric columns.
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise PrismError(
            f"--reference {directory}: no such directory; give a folder with the results_v2 layout "
            f"({', '.join(REFERENCE_FILES[k][0] for k in required)}, ...)"
        )
    problems: list[str] = []
    out: dict[str, pd.DataFrame] = {}
    for key, (fname, cols) in REFERENCE_FILES.items():
        path = directory / fname
        if not path.exists():
            if key in required:
                problems.append(f"{fname} is missing")
            continue
        try:
            df = read_run_table(path, cols)
        except PrismError as exc:
            problems.append(f"{fname}: {str(exc).split(': ', 1)[-1]}")
            continue
        bad = []
        for c in cols:
            if c in TEXT_COLUMNS or c == "degenerate":
                continue
            values = pd.to_numeric(df[c], errors="coerce")
            if (values.isna() & df[c].notna()).any():
                bad.append(c)
        if bad:
            problems.append(f"{fname}: non-numeric values in column(s) {', '.join(bad)}")
            continue
        out[key] = df
    if problems:
        raise PrismError(
            f"reference directory {directory}: " + "; ".join(problems)
            + " (expected the results_v2 layout of the PRISM release; `prism-run reference pull` fetches it)"
        )
    return RunTables(**out)


@dataclass
class Reference:
    """Reference per-run tables and a line saying where they come from."""

    tables: RunTables
    kind: str  # "dir", "pulled" or "paper"
    label: str
    notes: list[str] = field(default_factory=list)

    @property
    def per_run(self) -> bool:
        return self.kind != "paper"


def resolve_reference(directory: str | Path | None, required: tuple[str, ...] = ("indomain", "transfer")) -> Reference:
    """``--reference DIR`` if given; else a verified pulled copy; else the paper tables shipped."""
    from prism_plugin import reference_data as rd

    if directory is not None:
        return Reference(read_reference_dir(directory, required), "dir",
                         f"per-run tables in {Path(directory).expanduser()} (results_v2 layout)")
    pulled = pulled_dir()
    if pulled.is_dir() and any(pulled.iterdir()):
        problems = verify_files(pulled)
        if problems:
            raise PrismError(
                f"the pulled reference in {pulled} fails verification ({'; '.join(problems)}); "
                "rerun `prism-run reference pull --force` or pass --reference DIR"
            )
        return Reference(read_reference_dir(pulled, required), "pulled",
                         f"published per-run tables ({rd.PUBLISHED_REPOSITORY}@{rd.PUBLISHED_COMMIT}, pulled to {pulled})")
    return Reference(rd.paper_run_tables(), "paper", "PRISM paper appendix tables shipped with prism-plugin",
                     [rd.coverage_statement()])
