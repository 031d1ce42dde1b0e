"""prism-run subcommands, one module each, registered through ``register_commands`` like a plugin's.

Each module defines ``add_parser(subparsers) -> ArgumentParser`` and ``run(args) -> int``. The CLI
(:mod:`prism_plugin.cli`) builds ``prism-run NAME ...`` from the command registry (``host.commands``), so a
third-party plugin adds a subcommand with::

    @hookimpl
    def register_commands(register):
        register("my-command", "my_package.my_command", help="one line for prism-run --help")

The main job (``prism-run --task T --model M``) is :mod:`prism_plugin.commands.run`.
"""

from __future__ import annotations

from typing import Any

from prism_plugin.hookspecs import hookimpl

#: built-in subcommands: name -> (module, one-line help), in ``prism-run --help`` order
BUILTIN_COMMANDS: dict[str, tuple[str, str]] = {
    "ls": ("prism_plugin.commands.ls", "list a registry (adapters, heads, metrics, tasks, plugins, ...) with origins"),
    "validate": ("prism_plugin.commands.validate", "check tasks (names or YAML files) without running them"),
    "report": ("prism_plugin.commands.report", "(re)write report.html and report.md for a results directory"),
    "evaluate": ("prism_plugin.commands.evaluate", "the PRISM package's `prism evaluate` on .npy embeddings"),
    "compare": ("prism_plugin.commands.compare", "your models beside the eight PRISM reference FMs (CRI, transfer)"),
    "reference": ("prism_plugin.commands.reference", "the published per-run results: derived tables, pull"),
    "cache": ("prism_plugin.commands.cache", "list, verify or remove cached embeddings"),
    "findings": ("prism_plugin.commands.findings", "the paper's derived tables and findings from results"),
    "audit": ("prism_plugin.commands.audit", "the hematology acquisition-shift audit from results"),
    "sensitivity": ("prism_plugin.commands.sensitivity", "probe-sensitivity tables from sweep results"),
    "geometry": ("prism_plugin.commands.geometry", "embedding-geometry tables from cached embeddings"),
    "diff": ("prism_plugin.commands.diff", "run-to-run diff of two results directories: deltas, CIs, regression gate"),
    "fit-baseline": ("prism_plugin.commands.fit_baseline", "fit the audit's supervised ResNet-18 baseline on a task's source train split"),
}

#: attribute of the parsed arguments holding the plugin host the CLI built (see :func:`host_of`)
HOST_ATTR = "prism_host"


def host_of(args: Any):
    """The plugin host of this invocation: the one ``prism-run`` built, else the cached shared one."""
    host = getattr(args, HOST_ATTR, None)
    if host is not None:
        return host
    from prism_plugin.plugins import get_host

    return get_host(getattr(args, "disable", None) or ())


def add_wait(parser) -> None:
    """``--wait`` of a command that writes into a folder: wait for another prism-run writing there instead of
    stopping at once (:mod:`prism_plugin.folder_lock`; the command reads it as ``args.wait``)."""
    parser.add_argument("--wait", action="store_true",
                        help="when another prism-run is writing the output folder, wait for it to finish "
                             "(default: stop at once, naming it)")


def writes_into(args: Any, *folders) -> None:
    """Lock the folders this command writes into until it ends (one writer per folder; ``--wait`` waits for
    the other one): call it once the folders are known, before the first write."""
    from prism_plugin.folder_lock import take

    take([f for f in folders if f is not None], wait=bool(getattr(args, "wait", False)))


def check_extraction_args(args: Any) -> None:
    """``--limit``, ``--num-workers``, ``--device`` and ``--cache-dir`` of a command that extracts
    embeddings: one-line errors, before any work (a device this machine lacks fails at once)."""
    from prism_plugin.errors import PrismError

    limit, workers = getattr(args, "limit", None), getattr(args, "num_workers", None)
    if limit is not None and limit < 1:
        raise PrismError(f"--limit {limit}: must be a positive number of items per split")
    if workers is not None and workers < 0:
        raise PrismError(f"--num-workers {workers}: must be >= 0")
    if getattr(args, "extract_workers", None) is not None:
        from prism_plugin.embed.workers import check_workers

        check_workers(args.extract_workers)
    if hasattr(args, "device"):
        from prism_plugin.embed.device import check_device

        args.device = check_device(args.device)
    check_cache_dir(getattr(args, "cache_dir", None))


def check_cache_dir(cache_dir) -> None:
    """The embedding/data cache (``--cache-dir``, else ``$PRISM_CACHE_DIR`` or the default) must be a
    folder, or creatable as one. A folder that exists but is read-only is allowed (a shared cache
    read by many users); a write into it then fails naming the file and the fix."""
    import os
    from pathlib import Path

    from prism_plugin.errors import PrismError
    from prism_plugin.paths import CACHE_ENV, cache_root

    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    where = f"--cache-dir {root}" if cache_dir is not None else (
        f"${CACHE_ENV}={root}" if os.environ.get(CACHE_ENV) else f"the cache folder {root}")
    other = "pass --cache-dir DIR (or set PRISM_CACHE_DIR) to a writable folder"
    if root.exists():
        if not root.is_dir():
            raise PrismError(f"{where} is a file, not a folder; {other}")
        return
    parent = next((p for p in root.parents if p.exists()), None)
    if parent is None or not parent.is_dir():
        raise PrismError(f"{where} cannot be created ({parent} is not a folder); {other}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PrismError(f"{where} cannot be created: {parent} is not writable; {other}")


def print_rows(header, rows) -> None:
    """Print ``rows`` under ``header`` as left-aligned columns two spaces apart (``ls``, ``cache ls``); a cell's
    control characters are written as escapes (:func:`prism_plugin.errors.printable`)."""
    from prism_plugin.errors import printable

    table = [[printable(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


@hookimpl
def register_commands(register) -> None:
    for name, (module, help_text) in BUILTIN_COMMANDS.items():
        register(name, module, help=help_text)
