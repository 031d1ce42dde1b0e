"""benchmarks/bench_paper.py runs at a tiny scale, and its exact mode matches its reference loop bit for bit."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bp():
    """The script as a module; benchmarks/ leaves sys.path (and bench_grid sys.modules) afterwards."""
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location("bench_paper", ROOT / "benchmarks" / "bench_paper.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_paper"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    yield mod
    sys.path[:] = saved
    for name in ("bench_paper", "bench_grid"):
        sys.modules.pop(name, None)


def test_paper_cells_cover_the_paper(bp):
    cells = bp.paper_cells(list(bp.MODELS), bp.GROUPS)
    assert len(cells) == 8 * (6 + 4 + 5 + 20) == 280
    assert sum(c.group == "camelyon-pair" for c in cells) == 8 * 20
    # the reference evaluator reuses the source probe for PCam<->MHIST and the hospital pairs only
    assert {c.name for c in cells if c.group == "transfer" and not c.shares_fit} == {"CRC->BRACS", "BRACS->CRC"}


def test_tiny_scale_runs_and_exact_equals_reference(bp, tmp_path, capsys):
    out = tmp_path / "paper.json"
    rc = bp.main(["--scale", "0.0005", "--modes", "reference,exact", "--models", "CONCH", "--groups",
                  "transfer", "--datasets", "CRC,BRACS", "--json", str(out),
                  "--workdir", str(tmp_path / "data"), "--no-warmup"])
    assert rc == 0
    report = json.loads(out.read_text())
    cells = report["cells"]
    assert [c["cell"] for c in cells] == ["CRC->BRACS", "BRACS->CRC"]
    assert all(c["seconds"]["reference"] > 0 and c["seconds"]["exact"] > 0 for c in cells)
    assert all(c["n_classes"] == 2 and c["n_train"] >= 4 * 7 for c in cells)  # binarised; >= 4 rows per source class
    # exact mode: every compared column bit-identical to the reference loop, in every cell
    assert all(v == 0.0 for c in cells for v in c["diff_vs_reference"]["exact"].values())
    assert report["summary"]["projection"]["exact"]["full_seconds"] > 0
    assert "total grid time" in capsys.readouterr().out


def test_bad_flag_names_the_flag(bp, capsys):
    with pytest.raises(SystemExit):
        bp.main(["--modes", "exact,turbo"])
    assert "--modes: unknown 'turbo'" in capsys.readouterr().err
