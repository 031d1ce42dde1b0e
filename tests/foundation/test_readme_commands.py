"""Every shell command in README.md is checked against the installed CLI, so the README cannot drift.

The test reads README.md's fenced ``bash`` blocks and the task files its ``yaml`` blocks declare
(a block whose first line is ``# <path>.yaml`` is that file; the test writes it into a scratch
folder, as a reader following the README would). Each command is then, by kind:

* **setup** (``python3 -m venv``, ``. .venv/bin/activate``, ``pip install``, ``python -m pytest``):
  what it names must exist (the extras in pyproject.toml, the example packages, the test folders);
  CI runs the install and the test command itself;
* **prism-run**: parsed by the real parser of the main job or of its subcommand (a flag the CLI
  does not have fails here), no shell operators (a README line ``prism-run ls tasks | adapters``
  is a pipe, not three choices), every ``--task`` resolves (a built-in task or group, a task file the
  README declares, or one an example package named by an earlier ``pip install`` ships), every
  ``--model`` resolves in the adapter registry (or is shipped by such an example package), and
  every input path is either a placeholder (``RESULTS_DIR``, ``path/to/...``) or lies under the
  ``--output`` of an earlier README command;
* cheap offline commands (``ls``, ``validate``, ``cache ls``, ``--help``) are run in-process and
  must exit 0.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PYPROJECT = ROOT / "pyproject.toml"

pytestmark = pytest.mark.skipif(not README.is_file(), reason="README.md is not beside the tests (an sdist)")

BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
#: subcommands cheap and offline enough to run for real
RUN_FOR_REAL = {"ls", "validate"}
METASYNTAX = re.compile(r"\[?([A-Z][A-Z0-9_]*|\.\.\.)\]?")
#: positional arguments that are input folders/files, per subcommand
PATH_ARGS = {"compare": ("results",), "audit": ("results_dir", "results"), "sensitivity": ("results_dir",),
             "report": ("results_dir", "results_dirs"), "findings": ("results_dirs",), "diff": ("a", "b")}


def _blocks(kind: set[str]) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text(encoding="utf-8")) if lang in kind]


def _commands() -> list[str]:
    """The README's shell commands, continuation lines joined, comments and blank lines dropped."""
    out = []
    for body in _blocks({"bash", "sh", "shell", "console"}):
        joined = re.sub(r"\\\n\s*", " ", body)
        for line in joined.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def _declared_files() -> dict[str, str]:
    """``path -> text`` of the yaml blocks whose first line is ``# <path>.yaml[: comment]``."""
    files = {}
    for body in _blocks({"yaml", "yml"}):
        first = body.splitlines()[0] if body.strip() else ""
        m = re.match(r"#\s*([\w./-]+\.ya?ml)\b", first)
        if m:
            files[m.group(1)] = body
    return files


def _tokens(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    return list(lex)


def _placeholder(path: str) -> bool:
    return "path/to" in path or bool(re.fullmatch(r"[A-Z][A-Z0-9_]*(/.*)?", path))


def _under(path: str, outputs: list[str]) -> bool:
    p = Path(path.rstrip("/"))
    return any(p == Path(o) or Path(o) in p.parents for o in outputs)


def _extras() -> set[str]:
    text = PYPROJECT.read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", section, re.M))


def _example_ships(example: Path, name: str) -> bool:
    """Does an example package (installed by an earlier README command) ship this task/adapter name?"""
    return any(name in f.read_text(encoding="utf-8", errors="replace")
               for f in example.rglob("*") if f.is_file() and f.suffix in {".py", ".yaml", ".toml"})


@pytest.fixture(scope="module")
def host():
    from prism_plugin.plugins import get_host

    return get_host(())


def test_readme_has_commands_and_files():
    cmds = _commands()
    assert len(cmds) >= 30, "the README's shell blocks were not found"
    assert any(c.startswith("prism-run --task prism_demo --model demo_vit") for c in cmds)
    assert "my_tasks/my_task.yaml" in _declared_files()


def test_every_readme_command_matches_the_cli(host, tmp_path, monkeypatch):
    from prism_plugin.cli import command_parser, main_parser
    from prism_plugin.commands.model_args import model_specs
    from prism_plugin.errors import PrismError
    from tests.conftest import run_main

    for rel, text in _declared_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    extras, outputs, examples, problems, ran = _extras(), [], [], [], []

    def problem(line: str, why: str) -> None:
        problems.append(f"README: `{line}`: {why}")

    for line in _commands():
        tokens = _tokens(line)
        ops = [t for t in tokens if t and set(t) <= set("|&;<>")]
        head = tokens[:3]
        if head[:3] == ["python3", "-m", "venv"] or tokens[0] in (".", "source"):
            continue
        if tokens[:2] == ["pip", "install"]:
            for target in (t for t in tokens[2:] if not t.startswith("-")):
                m = re.fullmatch(r"(.*?)(?:\[([\w,-]+)\])?", target)
                where, wanted = m.group(1), (m.group(2) or "")
                if not (ROOT / where).exists():
                    problem(line, f"{where} does not exist in the repository")
                for extra in filter(None, wanted.split(",")):
                    if extra not in extras:
                        problem(line, f"extra [{extra}] is not in pyproject.toml (has {sorted(extras)})")
                if (ROOT / where).is_dir() and "examples" in where:
                    examples.append(ROOT / where)
            continue
        if tokens[:3] == ["python", "-m", "pytest"]:
            for t in tokens[3:]:
                if not t.startswith("-") and not (ROOT / t).exists():
                    problem(line, f"test path {t} does not exist")
            continue
        if tokens[:3] == ["python", "-m", "prism_plugin.compat"]:  # the PRISM package's own CLI, mirrored
            from prism_plugin.compat.cli import build_parser

            try:
                build_parser().parse_args(tokens[3:])
            except SystemExit as exc:
                if exc.code not in (0, None):
                    problem(line, "python -m prism_plugin.compat rejects these arguments")
            continue
        if tokens[0] != "prism-run":
            problem(line, "not a command this test knows (add it to test_readme_commands.py)")
            continue
        if ops:
            problem(line, f"shell operator {ops[0]!r} in a prism-run command (one command per line)")
            continue
        # usage metasyntax such as "RESULTS_DIR [RESULTS_DIR ...]": the optional repetition is dropped
        argv = [t for t in tokens[1:] if not ("[" in t or "]" in t) or not METASYNTAX.fullmatch(t)]
        if argv and not argv[0].startswith("-") and argv[0] not in host.commands.names() \
                and any(_example_ships(e, argv[0]) for e in examples):
            continue  # a subcommand of an example package installed above
        try:
            if argv and not argv[0].startswith("-"):
                name = host.commands.resolve(argv[0])
                parser, _, _ = command_parser(host, name)
                args = parser.parse_args([name, *argv[1:]])
            else:
                name = None
                args = main_parser(host).parse_args(argv)
                args.models = model_specs(args.model_order)
        except SystemExit:
            problem(line, "the CLI rejects these arguments (see `prism-run ... -h`)")
            continue
        except PrismError as exc:
            problem(line, str(exc))
            continue
        if getattr(args, "output", None) is not None:
            outputs.append(str(args.output))
        if name is None:  # the main job: tasks and models must resolve
            include = [str(p) for p in args.include_path]
            for task in args.task:
                if any(_example_ships(e, Path(task).stem) for e in examples):
                    continue
                res = run_main("validate", task, *[x for p in include for x in ("--include-path", p)])
                if res.returncode != 0:
                    problem(line, f"task {task!r} does not validate: {res.stderr.strip() or res.stdout.strip()}")
            for model, _ in args.models:
                if any(_example_ships(e, model) for e in examples):
                    continue
                try:
                    host.adapter_factory(model)
                except PrismError as exc:
                    problem(line, f"model {model!r}: {exc}")
            continue
        for dest in PATH_ARGS.get(name, ()):
            values = getattr(args, dest, None)
            for value in ([values] if isinstance(values, (str, Path)) else list(values or [])):
                value = str(value)
                if not (_placeholder(value) or _under(value, outputs)):
                    problem(line, f"{value} is neither a placeholder nor the --output of an earlier README command")
        if name in RUN_FOR_REAL or (name == "cache" and argv[1:2] == ["ls"]):
            res = run_main(*argv)
            ran.append(line)
            if res.returncode != 0:
                problem(line, f"exit {res.returncode}: {(res.stderr or res.stdout).strip().splitlines()[-1:]}")
    assert not problems, "\n".join(problems)
    assert len(ran) >= 3, ran


def test_cli_help_lists_every_subcommand(host):
    from tests.conftest import run_main

    res = run_main("--help")
    assert res.returncode == 0
    for entry in host.commands.entries():
        assert re.search(rf"^\s+{re.escape(entry.name)}\s", res.stdout, re.M), entry.name
