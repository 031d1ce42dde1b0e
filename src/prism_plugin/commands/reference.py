"""``prism-run reference``: the eight reference models' CRI, and ``reference pull``.

* ``prism-run reference [--fraction F] [--reference DIR] [--output OUT]`` reads per-run tables with the published
  ``results_v2`` layout (``--reference DIR``, else the copy ``reference pull`` put in the user cache), runs the CRI
  summary plugin (PROTOCOL §6.1-6.4) on them, prints the CRI of every model under the four aggregation rules and
  writes ``cri_variants_100.csv``, ``cri_variants_1.csv``, ``cri_components.csv`` and
  ``camelyon17_cri_components.csv`` with the published names and columns. With neither, it prints the 100 %-label
  CRI formed from the paper's appendix tables shipped in :mod:`prism_plugin.reference_data` and says what they
  cover.
* ``prism-run reference pull`` downloads the published files into the user cache and checks each file's size and
  SHA-256 against the list shipped in the package. Offline it says so in one line and points to ``--reference``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd

from prism_plugin.errors import PrismError
# where the reference comes from (re-exported for the other commands and the tests)
from prism_plugin.reference_files import (REFERENCE, Reference, open_reference, pulled_dir,  # noqa: F401
                                          pulled_problems, read_reference_dir, resolve_reference, verify_files)
from prism_plugin.storage import atomic_write_bytes, atomic_write_text, dumps, write_csv
from prism_plugin.tables import REFERENCE_FILES, RunTables

#: Files ``prism-run reference`` writes (published names), in this order.
PUBLISHED_OUTPUTS = ("cri_variants_100", "cri_variants_1", "cri_components", "camelyon17_cri_components")
URL_ENV = "PRISM_REFERENCE_URL"
OFFLINE_ENV = "PRISM_OFFLINE"
DOWNLOAD_TIMEOUT_S = 20


# --------------------------------------------------------------------------- pull
def _offline_message(reason: str) -> str:
    from prism_plugin.reference_data import PUBLISHED_COMMIT, PUBLISHED_REPOSITORY

    return (
        f"reference pull: offline ({reason}); nothing downloaded. Use a local copy instead: "
        f"prism-run reference --reference DIR (a results_v2 folder, e.g. from a clone of "
        f"https://github.com/{PUBLISHED_REPOSITORY} at {PUBLISHED_COMMIT})"
    )


def pull(dest: Path | None = None, *, base_url: str | None = None, force: bool = False, log=print) -> Path:
    """Download the published files, verify size and SHA-256 of each, install them atomically."""
    from prism_plugin.reference_data import PUBLISHED_COMMIT, PUBLISHED_FILES, PUBLISHED_REPOSITORY, PUBLISHED_URL

    dest = Path(dest) if dest is not None else pulled_dir()
    if not force and dest.is_dir() and not pulled_problems(dest):
        log(f"reference already pulled and verified: {dest} ({len(PUBLISHED_FILES)} files)")
        return dest
    if os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0"):
        raise PrismError(_offline_message(f"{OFFLINE_ENV} is set"))
    base_url = base_url or os.environ.get(URL_ENV) or None

    def url_of(name: str) -> str:
        if base_url:
            return base_url.rstrip("/") + "/" + name
        return PUBLISHED_URL.format(commit=PUBLISHED_COMMIT, name=name)

    blobs: dict[str, bytes] = {}
    problems: list[str] = []
    for i, name in enumerate(PUBLISHED_FILES):
        url = url_of(name)
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp:
                data = resp.read()
        except urllib.error.HTTPError as exc:
            problems.append(f"{name}: HTTP {exc.code} from {url}")
            continue
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if i == 0:
                raise PrismError(_offline_message(f"cannot reach {url.split('/')[2]}: {reason}")) from None
            problems.append(f"{name}: download failed ({reason})")
            continue
        size, sha = PUBLISHED_FILES[name]
        got = hashlib.sha256(data).hexdigest()
        if len(data) != size or got != sha:
            problems.append(f"{name}: {len(data)} bytes / SHA-256 {got[:12]}..., expected {size} bytes / {sha[:12]}...")
            continue
        blobs[name] = data
    if problems:
        raise PrismError(
            f"reference pull: {len(problems)} of {len(PUBLISHED_FILES)} file(s) failed, nothing installed: "
            + "; ".join(problems)
        )
    for name, data in blobs.items():
        atomic_write_bytes(dest / name, data)
    atomic_write_text(dest / "SOURCE.json", dumps({
        "repository": PUBLISHED_REPOSITORY, "commit": PUBLISHED_COMMIT,
        "files": {n: {"bytes": s, "sha256": h} for n, (s, h) in PUBLISHED_FILES.items()},
        "base_url": base_url or PUBLISHED_URL.format(commit=PUBLISHED_COMMIT, name=""),
    }))
    total = sum(len(b) for b in blobs.values())
    log(f"pulled {len(blobs)} files ({total / 1e6:.1f} MB) into {dest}; sizes and SHA-256 verified. "
        "`prism-run reference` and `prism-run compare` now use them by default")
    return dest


# --------------------------------------------------------------------------- CRI tables
def cri_plugin_name(host) -> str:
    from prism_plugin.summaries import cri
    from prism_plugin.summaries.engine import plugin_name_of

    name = plugin_name_of(host, cri)
    if name is None:
        raise PrismError("the CRI summary plugin (prism_plugin.summaries.cri) is not registered or is disabled; "
                         "remove it from --disable / PRISM_DISABLE_PLUGINS")
    return name


def reference_summary(tables: RunTables, host, options=None):
    """The CRI summary plugin's output on ``tables`` (via the plugin host)."""
    from prism_plugin.summaries.engine import run_summaries

    return run_summaries(tables, options or {}, host, only=[cri_plugin_name(host)])


def format_table(df: pd.DataFrame, columns: list[tuple[str, str]], *, index_label: str = "model",
                 digits: int = 4, flags: dict[str, str] | None = None) -> str:
    """Fixed-width text of ``df`` (index + chosen columns); NaN shown as ``n/a``."""
    flags = flags or {}
    head = [index_label] + [label for _, label in columns]
    rows = []
    for idx, r in df.iterrows():
        cells = [str(idx) + flags.get(str(idx), "")]
        for col, _ in columns:
            v = r.get(col, np.nan)
            if isinstance(v, (bool, np.bool_)):
                cells.append("yes" if v else "")
            elif isinstance(v, str):
                cells.append(v)
            elif v is None or (isinstance(v, float) and not np.isfinite(v)):
                cells.append("n/a")
            else:
                cells.append(f"{float(v):.{digits}f}")
        rows.append(cells)
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    lines = []
    for k, x in enumerate([head, *rows]):
        parts = [str(x[0]).ljust(widths[0])] + [str(c).rjust(w) for c, w in zip(x[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _pct(fraction: float) -> str:
    return f"{fraction * 100:g} %"


def _parse_fraction(value: float | None) -> float | None:
    if value is None:
        return None
    if not (0.0 < value <= 1.0):
        raise PrismError(f"--fraction {value}: must be a label fraction in (0, 1], e.g. 1.0 or 0.01")
    return float(value)


VARIANT_COLUMNS = [("auroc", "AUROC"), ("ece_scaled", "ECE(T)"), ("ood_stability", "OOD stab."),
                   ("cri_multiplicative", "multiplicative"), ("cri_arithmetic", "arithmetic"),
                   ("cri_geometric", "geometric"), ("cri_worst_axis", "worst_axis")]


def _paper_cri(fraction: float):
    from prism_plugin.reference_data import PAPER_CRI_FRACTIONS, paper_run_tables
    from prism_plugin.summaries import cri

    if not any(abs(fraction - f) < 1e-9 for f in PAPER_CRI_FRACTIONS):
        raise PrismError(
            f"--fraction {fraction:g}: the paper tables shipped with prism-plugin give scaled ECE only at 100 % labels "
            "(Table 12), so the reference CRI is available only at --fraction 1.0 without per-run tables; "
            "pass --reference DIR (results_v2 layout) or run `prism-run reference pull`"
        )
    tables = paper_run_tables()
    stab = cri.ood_stability(tables.indomain, tables.transfer)
    return cri.cri_variants(tables.indomain, stab, fraction)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "reference",
        help="the eight reference models' CRI under the four aggregations (and `reference pull`)",
        description="Print the reference CRI (PROTOCOL §6.1-6.4) under all four aggregation rules and write "
                    "cri_variants_100.csv, cri_variants_1.csv, cri_components.csv, camelyon17_cri_components.csv. "
                    "`prism-run reference pull` downloads the published per-run tables into the user cache.",
    )
    p.add_argument("action", nargs="?", choices=("pull",), help="pull: download and verify the published tables")
    p.add_argument("--fraction", type=float, default=None, metavar="F",
                   help="label fraction to print (default: 0.01 and 1.0)")
    p.add_argument("--reference", type=Path, default=None, metavar="DIR",
                   help="folder with the results_v2 layout (default: the pulled copy, else the paper tables)")
    p.add_argument("--output", type=Path, default=Path("prism_results") / "reference", metavar="OUT",
                   help="where to write the CSV files (default: prism_results/reference)")
    p.add_argument("--url", default=None, metavar="BASE",
                   help=f"pull: download from this base URL (a mirror) instead of GitHub (also ${URL_ENV})")
    p.add_argument("--force", action="store_true", help="pull: download again even if a verified copy exists")
    from prism_plugin.commands import add_wait

    add_wait(p)
    return p


def run(args) -> int:
    if args.action == "pull":
        pull(base_url=args.url, force=args.force)
        return 0
    from prism_plugin.commands import host_of

    fraction = _parse_fraction(args.fraction)
    host = host_of(args)
    ref = resolve_reference(args.reference, REFERENCE, host=host)
    from prism_plugin.commands import writes_into

    writes_into(args, args.output)  # one writer per folder
    if not ref.per_run:
        f = 1.0 if fraction is None else fraction
        table = _paper_cri(f)
        print(f"reference: {ref.label}")
        for note in ref.notes:
            print(f"note: {note}")
        print(f"\nCRI at {_pct(f)} labels from the paper tables ({len(table)} models):")
        print(format_table(table, VARIANT_COLUMNS))
        path = args.output / f"paper_cri_{round(f * 100):d}.csv"
        write_csv(path, table, index=True)
        print(f"\nwrote {path} (not the published files: those need the per-run tables)")
        return 0

    print(f"reference: {ref.label}")
    summary = reference_summary(ref.tables, host)
    available = sorted((k for k in summary.tables if k.startswith("cri_variants_")),
                       key=lambda k: float(k.rsplit("_", 1)[-1]))
    from prism_plugin.summaries.conventions import fraction_label

    fractions = [0.01, 1.0] if fraction is None else [fraction]
    for f in fractions:
        stem = f"cri_variants_{fraction_label(f)}"
        if stem not in summary.tables:
            raise PrismError(f"--fraction {f:g}: no in-distribution runs at that fraction in the reference "
                             f"(available: {', '.join(s.split('_')[-1] + ' %' for s in available)})")
        table = summary.tables[stem]
        print(f"\nCRI at {_pct(f)} labels ({len(table)} models; ood_stability at 100 % labels):")
        print(format_table(table, VARIANT_COLUMNS))
    stems = [s for s in PUBLISHED_OUTPUTS if s in summary.tables]
    stems += [f"cri_variants_{fraction_label(f)}" for f in fractions
              if f"cri_variants_{fraction_label(f)}" not in stems]
    if "cri_rule_kendall_tau_min" in summary.headline:
        print(f"\nKendall tau between the four rules (1 % and 100 % tables): "
              f"{summary.headline['cri_rule_kendall_tau_min']:.2f}-{summary.headline['cri_rule_kendall_tau_max']:.2f}")
    for note in summary.notes:
        print(f"note: {note}")
    needs = {"cri_variants_100": ("indomain",), "cri_variants_1": ("indomain",),
             "cri_components": ("indomain", "transfer"),
             "camelyon17_cri_components": ("camelyon17_indomain", "camelyon17_transfer")}
    for stem in PUBLISHED_OUTPUTS:
        if stem not in summary.tables:
            absent = [REFERENCE_FILES[k][0] for k in needs[stem] if getattr(ref.tables, k) is None]
            why = f"{' and '.join(absent)} not in the reference" if absent else "see the notes above"
            print(f"note: {stem}.csv not written: {why}")
    from prism_plugin.summaries.engine import write_summaries
    from prism_plugin.tables import SummaryOutput

    write_summaries(args.output, SummaryOutput({s: summary.tables[s] for s in stems}, dict(summary.headline),
                                               list(summary.notes)))
    print(f"\nwrote {', '.join(s + '.csv' for s in stems)} to {args.output}")
    return 0


__all__ = ["Reference", "add_parser", "open_reference", "pull", "pulled_dir", "pulled_problems", "read_reference_dir",
           "reference_summary", "resolve_reference", "run", "verify_files"]
