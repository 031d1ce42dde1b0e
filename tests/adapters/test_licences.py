"""Every built-in adapter's licence with its source and date, and ``prism-run ls adapters``' gated column.

The licence record is a set of class attributes (``licence``, ``licence_source``, ``licence_date``, optional
``licence_note`` where sources differ); ``ls adapters`` shows the licence with its date and the gating in a column
of its own (no "(gated)" inside the description), and docs/models.md's Licences table states the same.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prism_plugin.model_adapters import builtin_classes
from prism_plugin.model_adapters.foundation import FoundationAdapter
from tests.conftest import SHARED, prism_run

REPO = Path(__file__).resolve().parents[2]
GATED = {True: "yes", False: "no", None: "n/a"}


def _classes() -> dict[str, type]:
    return builtin_classes()


def _with_weights(classes: dict[str, type]) -> dict[str, type]:
    """The adapters that embed with a model (not ``precomputed``, which reads the user's arrays)."""
    return {n: c for n, c in classes.items() if not str(c.licence).startswith("n/a")}


def _columns(header: str) -> list[tuple[str, int]]:
    """(name, start) of each column of a ``print_rows`` table: cells are two or more spaces apart."""
    return [(m.group(0), m.start()) for m in re.finditer(r"\S+(?: \S+)*", header)]


def _table(stdout: str) -> dict[str, dict[str, str]]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    cols = _columns(lines[0])
    table = {}
    for line in lines[1:]:
        cells = {name: line[start:(cols[i + 1][1] if i + 1 < len(cols) else None)].strip()
                 for i, (name, start) in enumerate(cols)}
        table[cells["adapter"]] = cells
    return table


# --------------------------------------------------------------------------- the record
def test_every_builtin_adapter_states_its_licence_with_source_and_date():
    classes = _with_weights(_classes())
    assert len(classes) >= 28, sorted(classes)  # the eight PRISM models, the audit's 19 encoders and the demo
    for name, cls in classes.items():
        assert str(cls.licence).strip(), name
        source = str(getattr(cls, "licence_source", "")).strip()
        assert source, f"{name}: no licence_source"
        day = str(getattr(cls, "licence_date", ""))
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", day), f"{name}: licence_date {day!r} is not YYYY-MM-DD"
        assert dt.date.fromisoformat(day) >= dt.date(2020, 1, 1), (name, day)
        assert isinstance(getattr(cls, "licence_note", ""), str), name
        if issubclass(cls, FoundationAdapter):  # a hub model: its card or the PRISM README says it
            assert "https://huggingface.co/" in source or "README" in source, (name, source)
            assert "(gated)" not in cls.ls_description(), name
            assert isinstance(cls.gated, bool), name


def test_gigapath_is_under_the_microsoft_research_license_since_2025_03_22():
    cls = _classes()["gigapath"]
    assert cls.licence == "Microsoft Research License"
    assert cls.licence_date == "2025-03-22"
    assert "README" in cls.licence_source and "https://huggingface.co/prov-gigapath/prov-gigapath" in cls.licence_source
    # where the sources differ, both are said: the former Apache-2.0 research-use terms
    assert "Apache-2.0" in cls.licence_note and "2025-03-22" in cls.licence_note
    assert cls.gated is True


def test_plip_says_both_the_readme_custom_and_the_cards_research_use():
    cls = _classes()["plip"]
    assert "Custom" in cls.licence and "research use" in cls.licence
    assert "'Custom'" in cls.licence_source and "https://huggingface.co/vinid/plip" in cls.licence_source
    assert "README" in cls.licence_note and "'Custom'" in cls.licence_note
    assert "card" in cls.licence_note and "research use" in cls.licence_note


# --------------------------------------------------------------------------- ls adapters
def test_ls_adapters_shows_gating_and_the_licence_date_in_columns_of_their_own():
    proc = prism_run("ls", "adapters")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = proc.stdout.splitlines()[0]
    names = [name for name, _ in _columns(header)]
    assert names.index("licence") + 1 == names.index("gated"), names
    assert "(gated)" not in proc.stdout
    table = _table(proc.stdout)
    for name, cls in _classes().items():
        row = table[name]
        assert row["gated"] == GATED[getattr(cls, "gated", None)], (name, row["gated"])
        day = getattr(cls, "licence_date", "")
        assert row["licence"] == (f"{cls.licence} ({day})" if day else cls.licence), (name, row["licence"])
    assert table["gigapath"]["licence"] == "Microsoft Research License (2025-03-22)"
    assert table["gigapath"]["gated"] == "yes" and table["midnight"]["gated"] == "no"
    assert table["precomputed"]["gated"] == "n/a" == table["demo_vit"]["gated"]
    for family in ("timm:<name>", "open_clip:<name>", "hf:<name>"):
        assert table[family]["gated"] == "per model" == table[family]["licence"], family


def test_a_lazily_registered_class_gives_its_licence_record_without_being_imported():
    """``ls`` reads the record from the source (class_facts) for adapters it must not import."""
    code = ("import json, sys\nfrom prism_plugin.embed.class_facts import class_of_ref\n"
            "cls = class_of_ref('prism_plugin.model_adapters.gigapath:GigaPath')\n"
            "assert 'prism_plugin.model_adapters.gigapath' not in sys.modules and 'torch' not in sys.modules\n"
            "print(json.dumps({k: getattr(cls, k, None) for k in "
            "('licence', 'licence_source', 'licence_date', 'licence_note', 'gated')}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    cls = _classes()["gigapath"]
    assert json.loads(proc.stdout) == {k: getattr(cls, k) for k in
                                       ("licence", "licence_source", "licence_date", "licence_note", "gated")}


# --------------------------------------------------------------------------- the documentation
def _docs_licence_rows() -> list[list[str]]:
    text = (REPO / "docs" / "models.md").read_text(encoding="utf-8")
    section = text.split("\n## Licences\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in rows]


def test_the_docs_licence_table_states_each_adapters_record():
    classes = _with_weights(_classes())
    seen = []
    for keys, licence, source, day, gated, note in _docs_licence_rows():
        for key in re.findall(r"`([^`]+)`", keys):
            cls = classes[key]
            seen.append(key)
            assert (licence, source, day, gated) == (cls.licence, cls.licence_source, cls.licence_date,
                                                     GATED[cls.gated]), key
            assert note == (getattr(cls, "licence_note", "") or "-"), key
    assert sorted(seen) == sorted(classes), "docs/models.md's Licences table must list every built-in adapter once"


# --------------------------------------------------------------------------- the PRISM README
def _readme_model_table(papers: Path) -> dict[str, str]:
    """hub id -> licence, from the Foundation Models table of the PRISM package README (in ../shared/papers)."""
    if not papers.is_dir():
        pytest.skip(f"{papers} not found (set PRISM_SHARED)")
    for path in sorted(papers.glob("*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        if "Model\tType\tSize\tLicense\tHuggingFace" in lines:
            start = lines.index("Model\tType\tSize\tLicense\tHuggingFace") + 1
            table = {}
            for line in lines[start:]:
                cells = line.split("\t")
                if len(cells) != 5:
                    break
                table[cells[4].strip()] = cells[3].strip()
            return table
    pytest.skip("no PRISM README model table among the papers")


def _norm(licence: str) -> str:
    return re.sub(r"[\s-]+", "-", licence.strip().lower())


def test_the_eight_prism_licences_agree_with_the_prism_readme():
    readme = _readme_model_table(SHARED / "papers")
    by_hub = {c.hub_id: c for c in builtin_classes("prism_main").values()}
    assert set(readme) == set(by_hub), (sorted(readme), sorted(by_hub))
    for hub_id, stated in readme.items():
        cls = by_hub[hub_id]
        assert _norm(stated) in _norm(cls.licence), (hub_id, stated, cls.licence)
        assert "README" in cls.licence_source, hub_id
    assert readme["prov-gigapath/prov-gigapath"] == "Microsoft Research License"
    assert readme["vinid/plip"] == "Custom"
