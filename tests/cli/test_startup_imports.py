"""Commands that answer at once (issue 27): ``--help``, ``ls`` and ``validate`` import no heavy library.

Each command runs once in a fresh interpreter, through the installed ``prism-run`` console script when there is
one, under ``python -X importtime``: the interpreter itself reports every module it imported (stderr lines
``import time: self | cumulative | name``), so nothing is patched into the command. The assertion is on *which*
modules were imported, never on how long it took (``benchmarks/bench_cli.py`` measures the time).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prism_plugin.commands.ls import LISTINGS

REPO = Path(__file__).resolve().parents[2]

#: what these commands must not import: the numeric/plotting stack and the deep-learning libraries (numpy, the
#: plugins' common base, is allowed)
HEAVY = ("scipy", "pandas", "sklearn", "torch", "timm", "matplotlib", "transformers", "open_clip")

COMMANDS = [("--help",), ("ls",), *(("ls", name) for name in LISTINGS), ("validate", "prism_demo"),
            ("validate", "prism_demo", "prism_demo_multiclass", "prism_demo_transfer")]


def top_level_imports(stderr: str) -> set[str]:
    """The top-level package names of every ``import time:`` line of ``stderr``."""
    return {line.rsplit("|", 1)[1].strip().split(".")[0]
            for line in stderr.splitlines() if line.startswith("import time:") and "|" in line}


def imported_modules(args: tuple[str, ...]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``prism-run ARGS`` under ``-X importtime``; the process and the top-level names it imported."""
    script = Path(sys.executable).with_name("prism-run")
    entry = [str(script)] if script.exists() else ["-m", "prism_plugin.cli"]
    # every plugin enabled (a PRISM_DISABLE_PLUGINS of the caller would hide a plugin's imports)
    proc = subprocess.run([sys.executable, "-X", "importtime", *entry, *args], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "PRISM_DISABLE_PLUGINS": ""})
    return proc, top_level_imports(proc.stderr)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_command_imports_no_heavy_library(args):
    proc, names = imported_modules(args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "prism_plugin" in names, "-X importtime reported nothing: the check would pass vacuously"
    heavy = sorted(set(HEAVY) & names)
    assert not heavy, (f"`prism-run {' '.join(args)}` imported {', '.join(heavy)}; move the import into the "
                       "function that needs it (see docs/performance.md, Command start-up)")


def test_the_probe_sees_a_heavy_import():
    """The same probe reports pandas (and numpy under it) when a process does import it."""
    probe = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pandas"], capture_output=True,
                           text=True)
    assert probe.returncode == 0, probe.stderr
    assert {"pandas", "numpy"} <= top_level_imports(probe.stderr)
