"""The published per-run reference tables on disk: the one reader of reference folders.

Every command that takes a reference (``prism-run reference`` / ``compare`` / ``findings`` / ``report``, and
:mod:`prism_plugin.compat`) opens it with :func:`open_reference` (or :func:`resolve_reference`, which falls back to
the pulled copy and then to the paper tables), naming itself as a :class:`Consumer`: the table kinds it *needs*
(absent or damaged: one error line naming the folder, the file, what reads it and the fix) and those it *uses*
when present (absent: a note naming the file and what is left out, which the command shows with its output).

Two kinds of folder: one the user gives (``--reference DIR``, ``results_dir=``), checked for the files the
consumer needs, each a readable table with the expected columns and numbers; and the copy ``prism-run reference
pull`` installed (:func:`pulled_dir`, or any folder holding the pull's ``SOURCE.json``), also checked against the
size and SHA-256 recorded when it was pulled: a missing or changed file there is a *damaged copy*, and the fix is
``prism-run reference pull --force``. "Run ``prism-run reference pull``" is said only where there is no copy.

Kept below the commands so that library code can read the reference without importing a subcommand.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from prism_plugin.errors import PrismError
from prism_plugin.paths import cache_root
from prism_plugin.tables import REFERENCE_FILES, RunTables, read_run_table

#: Text columns of the per-run tables; every other required column must be numeric.
TEXT_COLUMNS = {"model", "dataset", "src", "tgt", "pair", "hospital", "budget"}
#: What ``reference pull`` writes last into the copy: the repository, commit, and size / SHA-256 of every file.
MANIFEST = "SOURCE.json"
REPULL = "`prism-run reference pull --force` re-pulls it"


@dataclass(frozen=True)
class Consumer:
    """What one command reads of a reference folder: ``needs`` (table kind -> what it is read for; absent or
    damaged is an error) and ``uses`` (table kind -> what is left out without it; absent is a note)."""

    name: str
    needs: Mapping[str, str]
    uses: Mapping[str, str] = field(default_factory=dict)
    #: how the user names the folder: a command-line option, or a keyword argument of the Python API
    given_as: str = "--reference"

    def label(self, directory: Path) -> str:
        return f"{self.given_as}={str(directory)!r}" if self.given_as.isidentifier() else f"{self.given_as} {directory}"

    @property
    def without(self) -> str:
        """How the user leaves the folder out (the pulled copy is then the default)."""
        return f"pass {self.given_as}=None" if self.given_as.isidentifier() else f"leave out {self.given_as}"

    @property
    def reads(self) -> tuple[str, ...]:
        return (*self.needs, *self.uses)


_CRI = {"indomain": "the AUROC and scaled ECE of the CRI", "transfer": "the OOD stability of the CRI"}
REFERENCE = Consumer("`prism-run reference`", _CRI)
COMPARE = Consumer("`prism-run compare`", {"indomain": "the reference models' AUROC and scaled ECE",
                                           "transfer": "the reference models' OOD stability"})
LEADERBOARD = Consumer(
    "`prism-run report` (leaderboard)", {"indomain": "the reference models' leaderboard rows"},
    {"transfer": "the reference models have no transfer AUROC, OOD stability or CRI on the leaderboard",
     "camelyon17_indomain": "the reference models have no Camelyon17 in-distribution runs on the leaderboard",
     "camelyon17_transfer": "the reference models have no Camelyon17 hospital-transfer runs on the leaderboard"})
FINDINGS = Consumer(
    "`prism-run findings`", {},
    {"indomain": "the summaries have no reference in-distribution runs",
     "transfer": "the summaries have no reference transfer runs (no OOD stability, no CRI)",
     "camelyon17_indomain": "the Camelyon17 summaries have no reference in-distribution runs",
     "camelyon17_transfer": "the Camelyon17 summaries have no reference transfer runs",
     "indomain_propval": "the proportional-validation summaries have no reference runs"})
COMPAT = Consumer("PRISMEvaluator.compare() / reference_cri()", COMPARE.needs, given_as="results_dir")


def pulled_dir() -> Path:
    """Where ``reference pull`` keeps the published results_v2 files."""
    from prism_plugin.reference_data import PUBLISHED_COMMIT, PUBLISHED_PATH

    return cache_root() / "reference" / f"prism-benchmark-{PUBLISHED_COMMIT}" / PUBLISHED_PATH


def pulled_copy() -> Path | None:
    """The pulled copy's folder when there is one (anything in it, whole or damaged), else ``None``."""
    pulled = pulled_dir()
    return pulled if pulled.is_dir() and any(pulled.iterdir()) else None


def is_pulled(directory: Path) -> bool:
    """Whether ``directory`` is a copy ``reference pull`` installed (the cache folder, or one with its record)."""
    directory = Path(directory)
    try:
        same = directory.resolve() == pulled_dir().resolve()
    except OSError:
        same = False
    return same or (directory / MANIFEST).is_file()


def _sha256(path: Path) -> str:
    from prism_plugin.storage import update_from_file

    return update_from_file(hashlib.sha256(), path, chunk=1 << 20).hexdigest()


def _check_files(directory: Path, names: Iterable[str], expected: Mapping[str, tuple[int, str]]) -> list[str]:
    problems = []
    for name in names:
        size, sha = expected[name]
        path = Path(directory) / name
        if not path.exists():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != size:
            problems.append(f"{name} has {path.stat().st_size} bytes, expected {size}")
        elif (actual := _sha256(path)) != sha:
            problems.append(f"{name} has SHA-256 {actual[:12]}..., expected {sha[:12]}...")
    return problems


def verify_files(directory: Path, names=None) -> list[str]:
    """Problems (one string per file) of ``directory`` against the shipped size/SHA-256 list."""
    from prism_plugin.reference_data import PUBLISHED_FILES

    return _check_files(directory, names or PUBLISHED_FILES, PUBLISHED_FILES)


def _recorded(directory: Path) -> tuple[dict[str, tuple[int, str]] | None, list[str]]:
    """The size / SHA-256 per file that ``SOURCE.json`` records (``None`` without one), and its problems."""
    path = Path(directory) / MANIFEST
    if not path.exists():
        return None, []
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        return {str(n): (int(v["bytes"]), str(v["sha256"])) for n, v in files.items()}, []
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        return None, [f"{MANIFEST} (the record `reference pull` writes) cannot be read"]


def pulled_problems(directory: Path, reads: Iterable[str] | None = None) -> list[str]:
    """What is wrong with a pulled copy: each file its ``SOURCE.json`` records must be there with the size and
    SHA-256 recorded (and published); without the record, the files ``reads`` names must be there and every
    published file present must match the list shipped with prism-plugin."""
    from prism_plugin.reference_data import PUBLISHED_FILES

    directory = Path(directory)
    reads = list(PUBLISHED_FILES if reads is None else reads)
    recorded, problems = _recorded(directory)
    if recorded is None:
        names = [n for n in PUBLISHED_FILES if n in reads or (directory / n).exists()]
        return problems + _check_files(directory, names, PUBLISHED_FILES)
    problems += [f"{MANIFEST} does not record {n}" for n in reads if n not in recorded]
    problems += [f"{MANIFEST} records {n} with a size / SHA-256 other than the published one"
                 for n, entry in recorded.items() if PUBLISHED_FILES.get(n, entry) != entry]
    return problems + _check_files(directory, recorded, recorded)


def damaged_message(directory: Path, problems: list[str], consumer: Consumer = REFERENCE) -> str:
    """The one line for a damaged pulled copy."""
    return (f"the pulled copy at {directory} is damaged: {'; '.join(problems)}; {REPULL} "
            f"(or give a results_v2 folder: {consumer.given_as}{'=' if consumer.given_as.isidentifier() else ' '}DIR)")


# --------------------------------------------------------------------------- reading
def _numeric_problem(df: pd.DataFrame, columns: Iterable[str]) -> str | None:
    bad = []
    for c in columns:
        if c in TEXT_COLUMNS or c == "degenerate":
            continue
        values = pd.to_numeric(df[c], errors="coerce")
        if (values.isna() & df[c].notna()).any():
            bad.append(c)
    return f"non-numeric values in column(s) {', '.join(bad)}" if bad else None


def _read_tables(directory: Path, consumer: Consumer, host) -> tuple[dict[str, pd.DataFrame], list[str],
                                                                       list[str], dict[str, str]]:
    """(tables read, problems, the files with problems the consumer needs, absent files it uses by kind)."""
    from prism_plugin.plugins import host_or_shared

    kinds = host_or_shared(host).tables
    out: dict[str, pd.DataFrame] = {}
    problems: list[str] = []
    needed: list[str] = []
    absent: dict[str, str] = {}
    for key in kinds:
        kind = kinds.get(key)
        path = directory / kind.file
        if not path.exists():
            if key in consumer.needs:
                problems.append(f"{kind.file} is missing")
                needed.append(key)
            elif key in consumer.uses:
                absent[key] = kind.file
            continue
        try:
            df = read_run_table(path, tuple(kind.required_columns))
        except PrismError as exc:
            problems.append(f"{kind.file}: {str(exc).split(': ', 1)[-1]}")
            needed.append(key)
            continue
        problem = _numeric_problem(df, REFERENCE_FILES[key][1]) if key in REFERENCE_FILES else None
        if problem:
            problems.append(f"{kind.file}: {problem}")
            needed.append(key)
            continue
        out[key] = df
    return out, problems, needed, absent


def _folder_message(directory: Path, consumer: Consumer, problems: list[str], needed: list[str], host) -> str:
    """The one line for a user's folder with missing or malformed files: what reads each, and the fix."""
    from prism_plugin.plugins import host_or_shared
    from prism_plugin.reference_data import PUBLISHED_COMMIT, PUBLISHED_REPOSITORY

    kinds = host_or_shared(host).tables
    why = [f"{kinds.get(k).file} for {consumer.needs.get(k) or consumer.uses.get(k) or 'its runs (it is present)'}"
           for k in needed]
    return (f"{consumer.label(directory)}: {'; '.join(problems)} ({consumer.name} reads {', '.join(why)}); "
            f"put the results_v2 file(s) of the PRISM release in {directory} (a clone of "
            f"https://github.com/{PUBLISHED_REPOSITORY} at {PUBLISHED_COMMIT} has them), or run "
            f"`prism-run reference pull` and {consumer.without}")


@dataclass
class Reference:
    """Reference per-run tables, a line saying where they come from, and notes (a file the command uses is
    absent: ``missing`` maps its table kind to the note)."""

    tables: RunTables
    kind: str  # "dir", "pulled" or "paper"
    label: str
    notes: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    directory: Path | None = None

    @property
    def per_run(self) -> bool:
        return self.kind != "paper"


def open_reference(directory: str | Path, consumer: Consumer = REFERENCE, *, host=None) -> Reference:
    """Read the reference folder ``directory`` for ``consumer``; every missing or damaged file it needs is named
    in one error line with the fix (see the module docstring)."""
    from prism_plugin import reference_data as rd

    directory = Path(directory).expanduser()
    if not directory.is_dir():
        files = ", ".join(REFERENCE_FILES[k][0] for k in consumer.needs) or "indomain_all_v2.csv"
        raise PrismError(f"{consumer.label(directory)}: no such directory; give a folder with the results_v2 layout "
                         f"({files}, ...)")
    pulled = is_pulled(directory)
    if pulled:
        problems = pulled_problems(directory, [REFERENCE_FILES[k][0] for k in consumer.reads if k in REFERENCE_FILES])
        if problems:
            raise PrismError(damaged_message(directory, problems, consumer))
    tables, problems, needed, absent = _read_tables(directory, consumer, host)
    if problems:
        raise PrismError(damaged_message(directory, problems, consumer) if pulled
                         else _folder_message(directory, consumer, problems, needed, host))
    if not tables:
        raise PrismError(f"{consumer.label(directory)}: holds none of the results_v2 files "
                         f"({', '.join(f for f, _ in REFERENCE_FILES.values())}); give the folder that holds them")
    where = "the pulled copy at" if pulled else consumer.label(directory)
    missing = {k: f"{where} has no {file}: {consumer.uses[k]}; put {file} of the results_v2 release there to "
                  "include them" for k, file in absent.items()}
    if pulled:
        label = f"published per-run tables ({rd.PUBLISHED_REPOSITORY}@{rd.PUBLISHED_COMMIT}, pulled to {directory})"
    else:
        label = f"per-run tables in {directory} (results_v2 layout)"
    return Reference(RunTables(tables), "pulled" if pulled else "dir", label, list(missing.values()), missing,
                     directory)


def shown_missing(ref: Reference | None, tables, yours: Iterable[str], kinds: Mapping) -> list[str]:
    """The notes of ``ref.missing`` a page of table ``kinds`` (their ``leaderboard`` use) says: each file of a
    kind it ranks (``ood_all_v2.csv``: transfer AUROC, CRI), and of a kind it shows where one of ``yours`` (the
    user's models, in ``tables``) ran such runs."""
    if ref is None:
        return []
    yours = set(yours)
    out = []
    for name, note in ref.missing.items():
        use = getattr(kinds[name], "leaderboard", "") if name in kinds else ""
        own = tables[name] if name in tables else None
        ran = own is not None and "model" in own and bool(own["model"].isin(yours).any())
        if use == "rank" or (use == "show" and ran):
            out.append(note)
    return out


def read_reference_dir(directory: str | Path, required: tuple[str, ...] = ("indomain", "transfer")) -> RunTables:
    """Per-run tables of a results_v2 folder (``required`` table kinds must be there); every missing or
    malformed file is named in one error (:func:`open_reference`)."""
    consumer = Consumer("this reader", {k: "the required tables" for k in required})
    return open_reference(directory, consumer).tables


def resolve_reference(directory: str | Path | None, consumer: Consumer = REFERENCE, *, host=None) -> Reference:
    """``directory`` (``--reference DIR``) if given; else the pulled copy (verified: a damaged copy is an
    error); else, where there is no copy at all, the paper tables shipped."""
    from prism_plugin import reference_data as rd

    if directory is not None:
        return open_reference(directory, consumer, host=host)
    pulled = pulled_copy()
    if pulled is not None:
        return open_reference(pulled, consumer, host=host)
    return Reference(rd.paper_run_tables(), "paper", "PRISM paper appendix tables shipped with prism-plugin",
                     [rd.coverage_statement()])
