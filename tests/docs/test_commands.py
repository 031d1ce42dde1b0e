"""Every shell command in README.md and docs/**/*.md is checked against the installed CLI.

Each page is read as a reader follows it: its declared task files (``# <path>.yaml`` blocks, see
:mod:`tests.docs.pages`) are written into a scratch folder of that page, and each command is then, by kind:

* **setup** (``python3 -m venv``, ``. .venv/bin/activate``, ``pip install``, ``python -m pytest``):
  what it names must exist (the extras in pyproject.toml, the example packages, the test folders);
  CI runs the README's install and test command itself;
* **prism-run**: parsed by the real parser of the main job or of its subcommand (a flag the CLI
  does not have fails here), no shell operators, every ``--task`` resolves (a built-in task or
  group, a task file the page declares, or one an example package named by an earlier
  ``pip install`` of the page ships), every ``--model`` resolves in the adapter registry (or is
  shipped by such an example package), and every input path is either a placeholder
  (``RESULTS_DIR``, ``path/to/...``) or lies under the ``--output`` of an earlier command of the page;
* ``python -m prism_plugin.compat ...``: parsed by that CLI's parser;
* cheap offline commands (``ls``, ``validate``, ``cache ls``, ``--help``) are run in-process and
  must exit 0.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.docs.pages import README, ROOT, commands, declared_files, pages, rel

PYPROJECT = ROOT / "pyproject.toml"

pytestmark = pytest.mark.skipif(not README.is_file(), reason="README.md is not beside the tests (an sdist)")

#: subcommands cheap and offline enough to run for real
RUN_FOR_REAL = {"ls", "validate"}
METASYNTAX = re.compile(r"\[?([A-Z][A-Z0-9_]*|\.\.\.)\]?")
#: positional arguments that are input folders/files, per subcommand
PATH_ARGS = {"compare": ("results",), "audit": ("results_dir", "results"), "sensitivity": ("results_dir",),
             "report": ("results_dir", "results_dirs"), "findings": ("results_dirs",), "diff": ("a", "b")}
PAGES = [p for p in pages() if commands(p)]
#: pip options that take a value (an index URL is not a package), and the packages a page may install besides ours
PIP_VALUED = {"--index-url", "--extra-index-url", "-i", "-c", "-r", "--constraint"}
THIRD_PARTY = {"torch", "torchvision"}
#: pytest options that take a value
VALUED = {"-n", "-k", "-p", "-m", "--dist", "-o"}


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
    """Does an example package (installed by an earlier command of the page) ship this task/adapter name?"""
    return any(name in f.read_text(encoding="utf-8", errors="replace")
               for f in example.rglob("*") if f.is_file() and f.suffix in {".py", ".yaml", ".toml"})


@pytest.fixture(scope="module")
def host():
    from prism_plugin.plugins import get_host

    return get_host(())


def test_pages_have_commands_and_files():
    readme = [_tokens(c) for c in commands(README)]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    # install, the main job, the test tools with every optional part, the test command; .ci/run does the same
    assert readme[1] == ["pip", "install", "."] and "pip install ." in ci, \
        ".ci/run installs exactly as the README's first block says"
    assert readme[2][:5] == ["prism-run", "--task", "prism_demo", "--model", "demo_vit"]
    assert readme[3] == ["pip", "install", ".[test,all]"] and 'pip install ".[test,all]"' in ci
    assert readme[4] == ["python", "-m", "pytest"] and "python -m pytest" in ci
    assert ci.index("pip install .") < ci.index('pip install ".[test,all]"') < ci.index("python -m pytest")
    assert sum(len(commands(p)) for p in PAGES) >= 60, "the docs' shell blocks were not found"
    assert "my_tasks/my_task.yaml" in declared_files(ROOT / "docs" / "models.md")


def test_readme_links_exist():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8")):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def _check(page: Path, line: str, host, state: dict, problem) -> bool:
    """Check one command line; True when it was run for real."""
    from prism_plugin.cli import command_parser, main_parser
    from prism_plugin.commands.model_args import model_specs
    from prism_plugin.errors import PrismError
    from tests.conftest import run_main

    tokens = _tokens(line)
    ops = [t for t in tokens if t and set(t) <= set("|&;<>")]
    if tokens[:3] == ["python3", "-m", "venv"] or tokens[0] in (".", "source"):
        return False
    if tokens[:2] == ["pip", "install"]:
        args = tokens[2:]
        values = {args[i + 1] for i, t in enumerate(args[:-1]) if t in PIP_VALUED}
        for target in (t for t in args if not t.startswith("-") and t not in values):
            if target in THIRD_PARTY:
                continue
            m = re.fullmatch(r"(.*?)(?:\[([\w,-]+)\])?", target.strip("'\""))
            where, wanted = m.group(1), (m.group(2) or "")
            if where != "prism-plugin" and not (ROOT / where).exists():
                problem(f"{where} does not exist in the repository")
            for extra in filter(None, wanted.split(",")):
                if extra not in state["extras"]:
                    problem(f"extra [{extra}] is not in pyproject.toml (has {sorted(state['extras'])})")
            if (ROOT / where).is_dir() and "examples" in where:
                state["examples"].append(ROOT / where)
        return False
    if tokens[:3] == ["python", "-m", "pytest"]:
        for prev, t in zip(tokens[2:], tokens[3:]):
            if not t.startswith("-") and prev not in VALUED and not (ROOT / t.split("::")[0]).exists():
                problem(f"test path {t} does not exist")
        return False
    if tokens[:3] == ["python", "-m", "mkdocs"]:
        if tokens[3:4] not in (["build"], ["serve"]) or not (ROOT / "mkdocs.yml").is_file():
            problem("only `python -m mkdocs build|serve` at the repository root (mkdocs.yml) is known")
        return False
    if tokens[:3] == ["python", "-m", "prism_plugin.compat"]:  # the PRISM package's own CLI, mirrored
        from prism_plugin.compat.cli import build_parser

        try:
            build_parser().parse_args(tokens[3:])
        except SystemExit as exc:
            if exc.code not in (0, None):
                problem("python -m prism_plugin.compat rejects these arguments")
        return False
    if tokens[0] != "prism-run":
        problem("not a command this test knows (add it to tests/docs/test_commands.py)")
        return False
    if ops:
        problem(f"shell operator {ops[0]!r} in a prism-run command (one command per line)")
        return False
    # usage metasyntax such as "RESULTS_DIR [RESULTS_DIR ...]": the optional repetition is dropped
    argv = [t for t in tokens[1:] if not ("[" in t or "]" in t) or not METASYNTAX.fullmatch(t)]
    examples, outputs = state["examples"], state["outputs"]
    if argv and not argv[0].startswith("-") and argv[0] not in host.commands.names() \
            and any(_example_ships(e, argv[0]) for e in examples):
        return False  # a subcommand of an example package installed above
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
        problem("the CLI rejects these arguments (see `prism-run ... -h`)")
        return False
    except PrismError as exc:
        problem(str(exc))
        return False
    if getattr(args, "output", None) is not None:
        outputs.append(str(args.output))
    if name is None:  # the main job: tasks and models must resolve
        include = [str(p) for p in args.include_path]
        for task in args.task:
            if any(_example_ships(e, Path(task).stem) for e in examples):
                continue
            res = run_main("validate", task, *[x for p in include for x in ("--include-path", p)])
            if res.returncode != 0:
                problem(f"task {task!r} does not validate: {res.stderr.strip() or res.stdout.strip()}")
        for model, _ in args.models:
            if any(_example_ships(e, model) for e in examples):
                continue
            try:
                host.adapter_factory(model)
            except PrismError as exc:
                problem(f"model {model!r}: {exc}")
        return False
    for dest in PATH_ARGS.get(name, ()):
        values = getattr(args, dest, None)
        for value in ([values] if isinstance(values, (str, Path)) else list(values or [])):
            value = str(value)
            if not (_placeholder(value) or _under(value, outputs)):
                problem(f"{value} is neither a placeholder nor the --output of an earlier command of the page")
    if name in RUN_FOR_REAL or (name == "cache" and argv[1:2] == ["ls"]):
        res = run_main(*argv)
        if res.returncode != 0:
            problem(f"exit {res.returncode}: {(res.stderr or res.stdout).strip().splitlines()[-1:]}")
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_command_matches_the_cli(page, host, tmp_path, monkeypatch):
    for path, text in declared_files(page).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    state = {"extras": _extras(), "outputs": [], "examples": []}
    problems = []
    for line in commands(page):
        _check(page, line, host, state, lambda why, line=line: problems.append(f"{rel(page)}: `{line}`: {why}"))
    assert not problems, "\n".join(problems)


def test_cli_help_lists_every_subcommand(host):
    from tests.conftest import run_main

    res = run_main("--help")
    assert res.returncode == 0
    for entry in host.commands.entries():
        assert re.search(rf"^\s+{re.escape(entry.name)}\s", res.stdout, re.M), entry.name
