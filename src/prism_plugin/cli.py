"""``prism-run``: argument parsing and dispatch only; the work is done by the modules it calls.

* ``prism-run --task T --model M ...`` is the main job (:mod:`prism_plugin.commands.run`).
* ``prism-run NAME ...`` is a subcommand from the command registry (``host.commands``), filled by the
  ``register_commands`` hook: the built-ins of :data:`prism_plugin.commands.BUILTIN_COMMANDS` and any plugin's, the
  same way. The plugin host is built before parsing (``--disable X`` is read from the command line first,
  ``PRISM_DISABLE_PLUGINS`` by the host).
* ``--model-args`` belong to the ``--model`` before them (``--model A --model-args k=v --model B --model-args
  k=w``), or go in brackets (``--model 'A[k=v,k2=w]'``); with one model they may come anywhere.
* The global options ``--debug``, ``--disable X`` and ``--include-path DIR`` work before a subcommand's name as
  after it (:func:`hoist_globals`).
* Exit statuses follow one contract (:mod:`prism_plugin.errors` ``EXIT_*``, docs/exit-codes.md): 0 ok, 1 a gate
  or check failed (the command's own return), 2 bad input or refused, 70 internal error (a bug, also a plugin's),
  130 Ctrl-C, 143 SIGTERM. ``--debug`` adds the traceback and keeps the status.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any, Sequence

from prism_plugin import folder_lock
from prism_plugin.commands.model_args import add_model_options, model_specs
from prism_plugin.errors import (EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED, PrismError,
                                 printable)

PROG = "prism-run"


def _one_line_warnings() -> None:
    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message).splitlines()[0] if str(message) else category.__name__
        print(f"{PROG}: warning: {printable(text)}", file=sys.stderr)

    warnings.showwarning = show


# --------------------------------------------------------------------------- parsers
def _common(p: argparse.ArgumentParser) -> None:
    """``--include-path``, ``--disable``, ``--debug`` on every parser (unless a command defined its own)."""
    have = set(p._option_string_actions)
    if "--include-path" not in have:
        p.add_argument("--include-path", action="append", default=[], type=Path, metavar="DIR",
                       help="extra folder of task YAML files (searched first)")
    if "--disable" not in have:
        p.add_argument("--disable", action="append", default=[], metavar="PLUGIN",
                       help="disable a plugin by name (also: PRISM_DISABLE_PLUGINS=a,b)")
    if "--debug" not in have:
        p.add_argument("--debug", action="store_true", help="show full tracebacks")


DESCRIPTION = ("Run the PRISM reliability protocol: task -> embeddings (cached) -> probe grid -> metrics -> "
               "runs.csv, summary.json, report. Or run a subcommand (listed below; `prism-run NAME -h` for its "
               "options).")


class _MainParser(argparse.ArgumentParser):
    """The main job's parser: the subcommand list (its epilog) is built only when help is printed."""

    def __init__(self, *args: Any, host=None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._host = host

    def format_help(self) -> str:
        if self._host is not None and self.epilog is None:
            self.epilog = _commands_epilog(self._host)
        return super().format_help()


def main_parser(host=None) -> argparse.ArgumentParser:
    """The main job's parser; its help lists every registered subcommand (when ``host`` is given)."""
    p = _MainParser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
                    description=textwrap.fill(DESCRIPTION, 100), host=host)
    p.add_argument("--task", action="append", required=True, metavar="TASK",
                   help="task name (see `prism-run ls tasks`) or a task YAML file; repeatable")
    add_model_options(
        p, "adapter name (see `prism-run ls adapters`), e.g. demo_vit, timm:vit_small_patch16_224, "
           "precomputed; repeatable; options in brackets: --model 'demo_vit[pooling=mean]'",
        "options of the --model before it, e.g. pretrained=false,pooling=cls or "
        "root=/data/embeddings/uni (--model A --model-args k=v --model B --model-args k=w); "
        "with a single --model they may stand anywhere")
    p.add_argument("--output", type=Path, default=None, metavar="DIR",
                   help="results directory (default: prism_results/<task>/<model>)")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="embedding cache (default: $PRISM_CACHE_DIR or ~/.cache/prism-plugin)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a task key, e.g. --set label_fractions=[0.01,0.1] --set probe.C=0.1")
    p.add_argument("--probe", default=None, metavar="KIND",
                   help="run exactly this one probe head (--set probe.kind=KIND, and a task's probes: list "
                        "switched off): logistic (PRISM default), logistic_std, knn1, centroid, centroid_cos, "
                        "linear_svm, or a plugin's head (see `prism-run ls heads`). The hematology tasks run "
                        "[logistic_std, knn1] x split_seeds [0..4] unless told otherwise (--set split_seeds=[0])")
    p.add_argument("--probe-backend", choices=("sklearn", "torch", "fast"), default=None,
                   help="logistic probe solver: sklearn lbfgs (exact, the reference, default), the converged torch "
                        "backend, or fast (same objective, never slower than exact; runs.csv says what it did)")
    p.add_argument("--bootstrap", type=int, default=None, metavar="N",
                   help="test-set bootstrap replicates per run for the confidence intervals (= --set "
                        "bootstrap.n=N; default 200, 0 = off)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run N label fractions at once (local process pool; default 1: the fit is "
                        "memory-bandwidth bound, see BENCHMARKS.md)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local (default) or ray: grid units as Ray tasks reading the shared cache")
    p.add_argument("--address", default=None, metavar="HOST:PORT", help="Ray cluster address (--executor ray)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="take N items per split (smoke runs)")
    p.add_argument("--allow-size-mismatch", action="store_true",
                   help="run even if split sizes differ from those recorded in the task")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:1, mps")
    p.add_argument("--num-workers", type=int, default=None, metavar="N", help="DataLoader workers for extraction")
    p.add_argument("--extract-workers", type=int, default=1, metavar="N",
                   help="embed each split in N worker processes (or N Ray actors with --executor ray); one GPU each when there are GPUs")
    p.add_argument("--offline", action="store_true", help="never touch the network (sets HF_HUB_OFFLINE=1)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the runs.csv of an existing results folder even when this grid drops some of "
                        "its runs (other label fractions, seeds, task or model); without it that is refused. "
                        "Saved cells are kept either way")
    p.add_argument("--no-report", action="store_true", help="do not write report.html and report.md")
    p.add_argument("--wait", action="store_true",
                   help="when another prism-run is writing a results folder of this run, wait for it to finish "
                        "(default: stop at once, naming it)")
    p.add_argument("--quiet", action="store_true", help="no progress bars or tables")
    p.set_defaults(model_order=[])
    _common(p)
    return p


def _commands_epilog(host) -> str:
    entries = host.commands.entries()
    width = max((len(e.name) for e in entries), default=0)
    lines = ["subcommands (prism-run NAME -h for the options of one; `prism-run ls commands` shows their origins):"]
    for e in entries:
        text = e.description or _parser_help(host, e.name) or f"(from {e.origin})"
        aliases = f" (also: {', '.join(e.aliases)})" if e.aliases else ""
        wrapped = textwrap.wrap(text + aliases, max(40, 96 - width)) or [""]
        lines.append(f"  {e.name.ljust(width)}  {wrapped[0]}")
        lines.extend(f"  {' ' * width}  {more}" for more in wrapped[1:])
    return "\n".join(lines)


def _parser_help(host, name: str) -> str:
    """The help line a command gives its own parser (for one registered without ``help=``)."""
    try:
        command = host.commands.get(name)
        sub = argparse.ArgumentParser(prog=PROG).add_subparsers()
        command.add_parser(sub)
    except Exception as exc:  # noqa: BLE001 - --help lists what it can; running the command reports it
        return f"(cannot be loaded: {type(exc).__name__}: {exc})"
    return next((a.help or "" for a in sub._choices_actions if a.dest == name), "")


class CommandFailure(PrismError):
    """A subcommand's ``add_parser`` or ``run`` raised (not a PrismError): names the command and its plugin.
    A bug, not bad input: exit status ``EXIT_INTERNAL``."""

    def __init__(self, entry, stage: str, exc: BaseException):
        plugin = entry.plugin  # recorded by the CommandRegistrar for every command
        super().__init__(f"command {entry.name!r} (plugin {plugin!r}, from {entry.origin}) failed in {stage}: "
                         f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback, or --disable {plugin})")
        self.command, self.plugin, self.original = entry.name, plugin, exc


def _calling(entry, stage: str, debug: bool, call, *args: Any):  # noqa: ARG001 - debug: same outcome either way
    """``call(*args)``; an exception other than bad input (PrismError), a file-system fault or Ctrl-C becomes a
    :class:`CommandFailure` naming the command (``--debug`` prints its traceback, with the original's)."""
    try:
        return call(*args)
    except (PrismError, KeyboardInterrupt):
        raise
    except OSError as exc:
        from prism_plugin.storage import is_file_system_fault

        if is_file_system_fault(exc):  # a full or read-only disk is not the command's bug
            raise
        raise CommandFailure(entry, stage, exc) from exc
    except Exception as exc:
        raise CommandFailure(entry, stage, exc) from exc


def _check_command(entry, command: Any) -> None:
    if not callable(getattr(command, "add_parser", None)) or not callable(getattr(command, "run", None)):
        raise PrismError(f"command {entry.name!r} (plugin {entry.plugin!r}, from {entry.origin}): "
                         f"{type(command).__name__} {getattr(command, '__name__', command)!r} needs "
                         "add_parser(subparsers) and run(args)")


def command_parser(host, name: str, *, debug: bool = False) -> tuple[argparse.ArgumentParser, Any, Any]:
    """The parser of ``prism-run NAME``, the command's registry entry and the command object
    (``add_parser`` + ``run``)."""
    reg = host.commands
    entry = reg.entry(name)
    command = reg.get(entry.name)  # imports a lazy module; an import failure names the plugin
    _check_command(entry, command)
    p = argparse.ArgumentParser(prog=PROG)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _calling(entry, "add_parser", debug, command.add_parser, sub)
    if entry.name not in sub.choices:
        raise PrismError(f"command {entry.name!r} (from {entry.origin}): add_parser(subparsers) must call "
                         f"subparsers.add_parser({entry.name!r}, ...); it added "
                         f"{', '.join(map(repr, sub.choices)) or 'nothing'}")
    _common(sub.choices[entry.name])
    return p, entry, command


#: options of every parser that may also stand before a subcommand's name (``prism-run --debug ls heads``)
GLOBAL_FLAGS = ("--debug",)
GLOBAL_VALUED = ("--include-path", "--disable")


def hoist_globals(argv: Sequence[str]) -> list[str]:
    """``argv`` with the global options (:data:`GLOBAL_FLAGS`, :data:`GLOBAL_VALUED`) that stand before a
    subcommand's name moved just after it: ``--debug --disable X validate T`` -> ``validate --debug --disable X
    T``, so they mean what they mean after it. The main job's arguments are returned unchanged."""
    argv = list(argv)
    i, moved = 0, []
    while i < len(argv):
        token = argv[i]
        if token in GLOBAL_FLAGS or any(token.startswith(f"{flag}=") for flag in GLOBAL_VALUED):
            moved.append(token)
            i += 1
        elif token in GLOBAL_VALUED and i + 1 < len(argv):
            moved += argv[i:i + 2]
            i += 2
        else:
            break
    if moved and i < len(argv) and not argv[i].startswith("-"):
        return [argv[i], *moved, *argv[i + 1:]]
    return argv


def disabled_in(argv: Sequence[str]) -> list[str]:
    """The plugins named by ``--disable X`` / ``--disable=X`` (read before parsing: the host comes first)."""
    out: list[str] = []
    it = iter(argv)
    for token in it:
        if token == "--":
            break
        if token == "--disable":
            value = next(it, None)
            if value is not None:
                out.append(value)
        elif token.startswith("--disable="):
            out.append(token.split("=", 1)[1])
    return out


# --------------------------------------------------------------------------- dispatch
class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwinds like Ctrl-C, so temporary files are removed and pool workers stopped."""


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Terminated()


def _install_sigterm():
    """Turn SIGTERM into :class:`Terminated` (main thread, default disposition only); the old handler."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return None  # an embedding application has its own handler
        return signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no signals here
        return None


def main(argv: Sequence[str] | None = None, host=None) -> int:
    """``prism-run``; ``host`` (a :class:`~prism_plugin.plugins.PluginHost`) replaces the one built from argv.
    Returns the exit status of the contract (:mod:`prism_plugin.errors` ``EXIT_*``)."""
    import signal

    given = list(sys.argv[1:] if argv is None else argv)
    argv = hoist_globals(given)
    _one_line_warnings()
    debug = "--debug" in argv[:argv.index("--")] if "--" in argv else "--debug" in argv
    folder_lock.set_command(shlex.join([PROG, *given]))  # what a busy results folder names its writer by
    previous = _install_sigterm()
    try:
        return _main(argv, host, debug)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str], host, debug: bool) -> int:
    try:
        with folder_lock.scope():  # the results folders a command locks are released when it ends
            return _dispatch(argv, host, debug)
    except (Exception, KeyboardInterrupt) as exc:
        code, line = outcome(exc, debug)
        if debug:  # the traceback, then the same line (less its advice to pass --debug) and the same status
            import traceback

            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        print(line, file=sys.stderr)
        return code


_DEBUG_HINT = re.compile(r" ?\((?:rerun with|run again with) --debug for the traceback(?:, or (--disable [^)]+))?\)")


def _no_debug_hint(text: str) -> str:
    """``text`` without "(rerun with --debug for the traceback[, or --disable X])" (it was given)."""
    return _DEBUG_HINT.sub(lambda m: f" ({m.group(1)} to run without it)" if m.group(1) else "", text)


def _is_internal(exc: BaseException) -> bool:
    """A wrapped bug: a command's or a plugin hook's exception that was not bad input."""
    plugins = sys.modules.get("prism_plugin.plugins")  # loaded whenever a PluginFailure exists
    failure = getattr(plugins, "PluginFailure", None) if plugins is not None else None
    return isinstance(exc, CommandFailure) or (failure is not None and isinstance(exc, failure))


def outcome(exc: BaseException, debug: bool = False) -> tuple[int, str]:
    """The exit status and the one line ``prism-run`` ends with for ``exc``: the one mapping of the contract
    (``debug``: the line does not advise to rerun with ``--debug``)."""
    if isinstance(exc, KeyboardInterrupt):
        kept = "finished runs are kept, rerun the same command to resume"
        if isinstance(exc, Terminated):
            return EXIT_TERMINATED, f"{PROG}: terminated (SIGTERM); {kept}"
        return EXIT_INTERRUPTED, f"{PROG}: interrupted; {kept}"
    if isinstance(exc, PrismError):
        problems = str(exc).splitlines() or [type(exc).__name__]
        first = _no_debug_hint(problems[0]) if debug else problems[0]
        if _is_internal(exc):
            return EXIT_INTERNAL, f"{PROG}: internal error: {printable(first)}"
        more = (f" (and {len(problems) - 1} more problem(s): `{PROG} validate` lists every one)"
                if len(problems) > 1 else "")
        return EXIT_BAD_INPUT, f"{PROG}: error: {printable(first)}{more}"
    if isinstance(exc, OSError):  # the file system's fault (full, read-only, quota, names): the path and the fix
        from prism_plugin.storage import describe, is_file_system_fault

        if is_file_system_fault(exc):
            return EXIT_BAD_INPUT, f"{PROG}: error: {printable(describe(exc))}"
    # a bug, not bad input: said in one line, the traceback on --debug
    line = (f"{PROG}: internal error: {type(exc).__name__}: {printable(str(exc))} "
            "(rerun with --debug for the traceback)")
    return EXIT_INTERNAL, _no_debug_hint(line) if debug else line


def _dispatch(argv: list[str], host, debug: bool) -> int:
    from prism_plugin.commands import HOST_ATTR

    if host is None:
        from prism_plugin.plugins import get_host

        host = get_host(disabled_in(argv))
    first = argv[0] if argv else ""
    if first and not first.startswith("-"):
        name = host.commands.resolve(first)  # unknown: "unknown command 'lss'; did you mean 'ls'?"
        parser, entry, command = command_parser(host, name, debug=debug)
        args = parser.parse_args([name, *argv[1:]])
        setattr(args, HOST_ATTR, host)
        code = _calling(entry, "run", debug, command.run, args)
        return 0 if code is None else code  # a command's own status: 0, or 1 when a gate it checks failed
    args = main_parser(host).parse_args(argv)
    args.models = model_specs(args.model_order)
    setattr(args, HOST_ATTR, host)
    from prism_plugin.commands.run import run

    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
