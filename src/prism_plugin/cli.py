"""``prism-run``: argument parsing and dispatch only; the work is done by the modules it calls.

* ``prism-run --task T --model M ...`` is the main job (:mod:`prism_plugin.commands.run`).
* ``prism-run NAME ...`` is a subcommand from the command registry (``host.commands``), filled by the
  ``register_commands`` hook: the built-ins of :data:`prism_plugin.commands.BUILTIN_COMMANDS` and any plugin's, the
  same way. The plugin host is built before parsing (``--disable X`` is read from the command line first,
  ``PRISM_DISABLE_PLUGINS`` by the host).
* ``--model-args`` belong to the ``--model`` before them (``--model A --model-args k=v --model B --model-args
  k=w``), or go in brackets (``--model 'A[k=v,k2=w]'``); with one model they may come anywhere.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any, Sequence

from prism_plugin.commands.model_args import add_model_options, model_specs
from prism_plugin.errors import PrismError, printable

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
    """A subcommand's ``add_parser`` or ``run`` raised (not a PrismError): names the command and its plugin."""

    def __init__(self, entry, stage: str, exc: BaseException):
        plugin = entry.plugin  # recorded by the CommandRegistrar for every command
        super().__init__(f"command {entry.name!r} (plugin {plugin!r}, from {entry.origin}) failed in {stage}: "
                         f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback, or --disable {plugin})")
        self.command, self.plugin, self.original = entry.name, plugin, exc


def _calling(entry, stage: str, debug: bool, call, *args: Any):
    """``call(*args)``; an exception other than bad input (PrismError) or Ctrl-C becomes a
    :class:`CommandFailure` naming the command, unless ``--debug`` (then it propagates unchanged)."""
    try:
        return call(*args)
    except (PrismError, KeyboardInterrupt):
        raise
    except OSError as exc:
        from prism_plugin.storage import is_file_system_fault

        if debug or is_file_system_fault(exc):  # a full or read-only disk is not the command's bug
            raise
        raise CommandFailure(entry, stage, exc) from exc
    except Exception as exc:
        if debug:
            raise
        raise CommandFailure(entry, stage, exc) from exc


def _check_command(command: Any) -> None:
    if not callable(getattr(command, "add_parser", None)) or not callable(getattr(command, "run", None)):
        raise TypeError(f"{type(command).__name__} {getattr(command, '__name__', command)!r} needs "
                        "add_parser(subparsers) and run(args)")


def _add_command_parser(subparsers, command: Any) -> None:
    _check_command(command)
    command.add_parser(subparsers)


def command_parser(host, name: str, *, debug: bool = False) -> tuple[argparse.ArgumentParser, Any, Any]:
    """The parser of ``prism-run NAME``, the command's registry entry and the command object
    (``add_parser`` + ``run``)."""
    reg = host.commands
    entry = reg.entry(name)
    command = reg.get(entry.name)  # imports a lazy module; an import failure names the plugin
    p = argparse.ArgumentParser(prog=PROG)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _calling(entry, "add_parser", debug, _add_command_parser, sub, command)
    if entry.name not in sub.choices:
        raise PrismError(f"command {entry.name!r} (from {entry.origin}): add_parser(subparsers) must call "
                         f"subparsers.add_parser({entry.name!r}, ...); it added "
                         f"{', '.join(map(repr, sub.choices)) or 'nothing'}")
    _common(sub.choices[entry.name])
    return p, entry, command


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
    """``prism-run``; ``host`` (a :class:`~prism_plugin.plugins.PluginHost`) replaces the one built from argv."""
    import signal

    argv = list(sys.argv[1:] if argv is None else argv)
    _one_line_warnings()
    debug = "--debug" in argv
    previous = _install_sigterm()
    try:
        return _main(argv, host, debug)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str], host, debug: bool) -> int:
    try:
        return _dispatch(argv, host, debug)
    except PrismError as exc:
        if debug:
            raise
        problems = str(exc).splitlines() or [type(exc).__name__]
        more = (f" (and {len(problems) - 1} more problem(s): `{PROG} validate` lists every one)"
                if len(problems) > 1 else "")
        print(f"{PROG}: error: {printable(problems[0])}{more}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"{PROG}: {what}; finished runs are kept, rerun the same command to resume", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except OSError as exc:  # the file system's fault (full, read-only, quota, names): the path and the fix
        from prism_plugin.storage import describe, is_file_system_fault

        if debug or not is_file_system_fault(exc):
            if debug:
                raise
            return _internal_error(exc)
        print(f"{PROG}: error: {printable(describe(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug, not bad input: say so in one line, traceback on --debug
        if debug:
            raise
        return _internal_error(exc)


def _internal_error(exc: BaseException) -> int:
    print(f"{PROG}: internal error: {type(exc).__name__}: {printable(str(exc))} (rerun with --debug for the traceback)",
          file=sys.stderr)
    return 1


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
        return _calling(entry, "run", debug, command.run, args)
    args = main_parser(host).parse_args(argv)
    args.models = model_specs(args.model_order)
    setattr(args, HOST_ATTR, host)
    from prism_plugin.commands.run import run

    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
