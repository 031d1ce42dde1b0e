"""Subcommands come from the command registry: a plugin's command is ``prism-run NAME`` with no core edit."""

from __future__ import annotations

import argparse
import sys

import pytest

from prism_plugin.cli import main
from prism_plugin.commands import BUILTIN_COMMANDS
from prism_plugin.errors import PrismError
from prism_plugin.hookspecs import hookimpl
from prism_plugin.plugins import PluginHost
from tests.conftest import prism_run

SEEN: list[argparse.Namespace] = []


class Hello:
    """A command object: ``add_parser`` + ``run``."""

    def add_parser(self, subparsers):
        p = subparsers.add_parser("hello", help="say hello to NAME")
        p.add_argument("who")
        p.add_argument("--shout", action="store_true")
        return p

    def run(self, args) -> int:
        SEEN.append(args)
        text = f"hello {args.who}"
        print(text.upper() if args.shout else text)
        return 0


class Broken:
    def __init__(self, where: str):
        self.where = where

    def add_parser(self, subparsers):
        if self.where == "add_parser":
            raise RuntimeError("parser exploded")
        return subparsers.add_parser("boom")

    def run(self, args) -> int:
        if self.where == "bad-input":
            raise PrismError("boom: --level must be positive")
        raise ValueError("run exploded")


def _plugin(command, name="hello", help_text="", plugin_name="hello_plugin"):
    class Plugin:
        __name__ = plugin_name

        @hookimpl
        def register_commands(self, register):
            register(name, command, help=help_text)

    return Plugin()


def test_a_plugin_command_is_a_subcommand(capsys):
    SEEN.clear()
    host = PluginHost(extra_plugins=[_plugin(Hello())], third_party=False)
    assert main(["hello", "world", "--shout"], host=host) == 0
    assert capsys.readouterr().out.strip() == "HELLO WORLD"
    args = SEEN[-1]
    assert args.command == "hello" and args.who == "world" and args.prism_host is host
    assert args.disable == [] and args.debug is False  # the common options are added to every command
    # it is listed with its origin, and in --help with its help line
    assert main(["ls", "commands"], host=host) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("hello "))
    assert "passed in code" in row
    with pytest.raises(SystemExit) as exc:
        main(["--help"], host=host)
    assert exc.value.code == 0
    helptext = capsys.readouterr().out
    # registered without help=: the help line of its own parser
    assert any(line.split() == ["hello", "say", "hello", "to", "NAME"] for line in helptext.splitlines()), helptext


def test_a_lazy_module_command_is_listed_with_its_registered_help(capsys, monkeypatch):
    plugin = _plugin("tests.cli.lazy_command", name="lazy-hello", help_text="greet lazily")
    host = PluginHost(extra_plugins=[plugin], third_party=False)
    monkeypatch.delitem(sys.modules, "tests.cli.lazy_command", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["--help"], host=host)
    assert exc.value.code == 0
    # the --help listing shows the help registered with the command, without importing its module
    assert any(line.split() == ["lazy-hello", "greet", "lazily"] for line in capsys.readouterr().out.splitlines())
    assert "tests.cli.lazy_command" not in sys.modules
    assert main(["lazy-hello", "--times", "2"], host=host) == 0
    assert capsys.readouterr().out.strip() == "lazy hello lazy hello"


def test_the_subcommand_list_is_built_only_for_help(monkeypatch):
    from prism_plugin import cli

    def fail(host):
        raise AssertionError("the subcommand list was built although no help is printed")

    monkeypatch.setattr(cli, "_commands_epilog", fail)
    host = PluginHost(extra_plugins=[_plugin(Hello())], third_party=False)
    args = cli.main_parser(host).parse_args(["--task", "t", "--model", "m"])
    assert args.task == ["t"] and args.model == ["m"]


@pytest.mark.parametrize("where, error", [("add_parser", RuntimeError), ("run", ValueError)])
def test_a_failing_command_is_one_line_naming_command_and_plugin(capsys, where, error):
    host = PluginHost(extra_plugins=[_plugin(Broken(where), name="boom", plugin_name="boom_plugin")],
                      third_party=False)
    assert main(["boom"], host=host) == 70  # a bug in the plugin's command: an internal error, not bad input
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("prism-run: internal error: command 'boom' (plugin 'boom_plugin'") and f"in {where}" in err[0]
    assert "exploded" in err[0] and "--debug" in err[0] and "--disable boom_plugin" in err[0]
    assert main(["boom", "--debug"], host=host) == 70  # --debug: the same status, with the tracebacks
    err = capsys.readouterr().err
    assert f"\n{error.__name__}: " in err and "Traceback (most recent call last)" in err  # the original's too
    assert "rerun with --debug" not in err.strip().splitlines()[-1]


def test_bad_input_in_a_command_passes_through_unchanged(capsys):
    host = PluginHost(extra_plugins=[_plugin(Broken("bad-input"), name="boom")], third_party=False)
    assert main(["boom"], host=host) == 2
    assert capsys.readouterr().err.strip() == "prism-run: error: boom: --level must be positive"


def test_a_command_without_run_or_with_another_name_is_reported(capsys):
    class NoRun:
        def add_parser(self, subparsers):
            return subparsers.add_parser("norun")

    class Misnamed(Hello):
        pass

    host = PluginHost(extra_plugins=[_plugin(NoRun(), name="norun")], third_party=False)
    assert main(["norun"], host=host) == 2
    assert "needs add_parser(subparsers) and run(args)" in capsys.readouterr().err
    host = PluginHost(extra_plugins=[_plugin(Misnamed(), name="greet")], third_party=False)
    assert main(["greet", "x"], host=host) == 2
    assert "must call subparsers.add_parser('greet'" in capsys.readouterr().err


def test_help_lists_every_subcommand_with_its_help_line():
    proc = prism_run("--help", check=True)
    assert "subcommands" in proc.stdout
    lines = proc.stdout.splitlines()
    for name, (_, help_text) in BUILTIN_COMMANDS.items():
        assert any(line.split()[:1] == [name] and help_text[:30] in line for line in lines), (name, proc.stdout)
    flat = " ".join(proc.stdout.split())
    assert "do not write report.html and report.md" in flat
    bad = prism_run("lss", "adapters")
    err = [line for line in bad.stderr.splitlines() if line.strip()]
    assert bad.returncode == 2 and len(err) == 1 and "unknown command 'lss'" in err[0] and "'ls'" in err[0]
