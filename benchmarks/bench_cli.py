"""Start-up time of the commands that should answer at once (issue 27): ``--help``, ``ls``, ``validate``.

Each command runs as a fresh ``prism-run`` subprocess (the installed console script when there is one), several
times; the table gives the median and the minimum wall time, the median CPU time (user + sys of the child) and the
ratio of the median wall time to the 0.5 s target. One extra run per command under ``python -X importtime`` lists
the heavy libraries it imported, the time spent importing (all imports, and numpy's share): the interpreter's own
measurement, less noisy than wall time on a loaded machine.

    python benchmarks/bench_cli.py            # 5 repetitions of every command
    python benchmarks/bench_cli.py --reps 3 --only "ls heads" help     # help: prism-run --help

No assertion: ``tests/cli/test_startup_imports.py`` checks *what* the commands import, this script how long they
take.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 0.5
HEAVY = ("numpy", "scipy", "pandas", "sklearn", "torch", "timm", "matplotlib", "transformers", "open_clip")
CATALOGUES = ("adapters", "heads", "sources", "tasks", "metrics", "tables", "commands", "checks", "plugins",
              "perturbations", "adaptation", "task-keys")
COMMANDS: list[tuple[str, ...]] = [("--help",), ("ls",), *(("ls", c) for c in CATALOGUES), ("validate", "prism_demo")]


def entry() -> list[str]:
    """The arguments after ``python`` that start ``prism-run``: the console script, else ``-m``."""
    script = Path(sys.executable).with_name("prism-run")
    return [str(script)] if script.exists() else ["-m", "prism_plugin.cli"]


def timed(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, child CPU seconds (user + sys) and exit status of one run of ``python ARGV``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def import_profile(argv: list[str]) -> tuple[list[str], float, float]:
    """One run of ``python -X importtime ARGV``: the heavy top-level packages it imported, the seconds spent in
    all imports (sum of the top-level cumulative times) and in numpy's."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO, capture_output=True, text=True)
    names: set[str] = set()
    total = numpy = 0.0
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _self, cum, raw = line[len("import time:"):].split("|")
        name = raw.strip()
        names.add(name.split(".")[0])
        if not cum.strip().isdigit():  # the header line
            continue
        if raw[1:2] != " ":  # not indented: imported by the command itself, not by another import
            total += int(cum) / 1e6
        if name == "numpy":
            numpy = int(cum) / 1e6
    return sorted(set(HEAVY) & names), total, numpy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each command (default 5)")
    parser.add_argument("--only", nargs="+", metavar="COMMAND", help='e.g. "ls heads" help (help: --help)')
    args = parser.parse_args(argv)
    commands = [("--help",) if c == "help" else tuple(c.split()) for c in args.only] if args.only else COMMANDS
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {args.reps} reps, target {TARGET_S} s")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # an installed package has its bytecode compiled by pip; without it every run recompiles every module
        print("note: PYTHONDONTWRITEBYTECODE is set, so modules without a compiled .pyc are recompiled on every "
              "run (unset it, or `python -m compileall` the package, to measure what an installed package does)")
    rows = [("python -c 'import prism_plugin.cli'", ["-c", "import prism_plugin.cli"])]
    rows += [("prism-run " + " ".join(c), [*entry(), *c]) for c in commands]
    print(f"{'command':<36} {'wall med':>8} {'wall min':>8} {'cpu med':>8} {'/target':>7}  "
          f"{'imports':>7} {'numpy':>6}  heavy imported")
    for label, cmd in rows:
        runs = [timed(cmd) for _ in range(args.reps)]
        if any(rc != 0 for _w, _c, rc in runs):
            print(f"{label:<36} FAILED (exit {runs[0][2]})")
            continue
        walls, cpus = [w for w, _c, _r in runs], [c for _w, c, _r in runs]
        heavy, imports, numpy = import_profile(cmd)
        med = statistics.median(walls)
        print(f"{label:<36} {med:8.3f} {min(walls):8.3f} {statistics.median(cpus):8.3f} {med / TARGET_S:7.2f}  "
              f"{imports:7.3f} {numpy:6.3f}  {', '.join(heavy) or '-'}")
    print("seconds; /target = median wall / 0.5 s; imports = sum of -X importtime top-level cumulative times")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
