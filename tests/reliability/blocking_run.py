"""``python -m tests.reliability.blocking_run ARGS...``: ``prism-run ARGS`` (:func:`prism_plugin.cli.main`, the
console script's entry point) with one third-party check plugin that can stop the run in the middle.

With ``$PRISM_TEST_GATE=1`` the check, called once the run has written its cells and ``runs.csv`` (and still
holds its results folder), prints ``gate: inside`` on stdout and waits for one line on stdin: the test knows,
without any clock, that the run is inside, and lets it go (or kills or interrupts it) when it wants. With
``$PRISM_TEST_GATE=raise`` the check raises a ``ZeroDivisionError``, with ``raise-hook`` the plugin's
``run_metrics`` hook does: a plugin's bug either way. The check is not part of any run's fingerprint, so a plain
``prism-run`` reuses what this one saved (``run_metrics`` is there only with ``raise-hook``).
"""

from __future__ import annotations

import os
import sys
import types

from prism_plugin import hookimpl


def gate(runs, ctx):
    mode = os.environ.get("PRISM_TEST_GATE", "")
    if mode == "raise":
        raise ZeroDivisionError("the test plugin divided by zero")
    if mode == "1" and not getattr(gate, "passed", False):
        gate.passed = True
        print("gate: inside", flush=True)
        sys.stdin.readline()
    return []


def plugin() -> types.ModuleType:
    mod = types.ModuleType("test_gate")

    @hookimpl
    def register_checks(register):
        register("test_gate", gate, description="stops the run once, on the test's word (tests only)")

    mod.register_checks = register_checks
    if os.environ.get("PRISM_TEST_GATE") == "raise-hook":
        @hookimpl
        def run_metrics(run):
            raise ZeroDivisionError("the test plugin's hook divided by zero")

        mod.run_metrics = run_metrics
    return mod


def main(argv: list[str]) -> int:
    from prism_plugin.cli import disabled_in, hoist_globals, main as prism_main
    from prism_plugin.plugins import PluginHost

    host = PluginHost(disable=disabled_in(hoist_globals(argv)), extra_plugins=[plugin()])
    return prism_main(argv, host=host)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
