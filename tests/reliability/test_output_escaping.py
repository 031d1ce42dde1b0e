"""Names never abuse an output: control and bidi characters are refused where the user types a name, escaped where
a name comes from data; markup in a name is inert in ``report.md`` as in ``report.html``.

Typed names (``--model``, ``--model-args`` keys and values, a task file's ``dataset`` / ``class_names`` /
``columns``) with ESC, BEL, tab, newline or U+202E are refused with one line naming the argument, before any work.
Names from data (a results table read back, an adapter's display name) are escaped by
:func:`prism_plugin.errors.plain_name`; the report's two renderings escape ``<``, ``>`` and ``&``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import prism_run, run_main, write_precomputed

HOSTILE = "a\x1b[31mRED\x07b"
#: every kind of character that must never reach an output as it is
BAD_CHARS = {"ESC": "\x1b", "BEL": "\x07", "tab": "\t", "newline": "\n", "RLO": "\u202e", "NUL-like C1": "\x9b"}
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _one_error_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert not RAW.search(proc.stderr) and not RAW.search(proc.stdout), repr(proc.stderr)
    return lines[0]


def test_a_hostile_model_name_is_refused_in_one_line_by_the_console_script(tmp_path):
    out = tmp_path / "out"
    proc = prism_run("--task", "prism_demo", "--model", "demo_vit", "--model-args", f"name={HOSTILE}",
                     "--set", "label_fractions=[1.0]", "--set", "seeds=[42]", "--limit", "8", "--quiet",
                     "--output", str(out))
    line = _one_error_line(proc)
    assert line.startswith("prism-run: error: --model-args name 'a\\x1b[31mRED\\x07b': contains the control "
                           "character \\x1b"), line
    assert not out.exists()  # refused before any work


@pytest.mark.parametrize("kind", sorted(BAD_CHARS))
def test_every_typed_model_name_or_option_with_a_control_character_is_refused(kind, tmp_path):
    bad = f"x{BAD_CHARS[kind]}y"
    base = ["--task", "prism_demo", "--output", str(tmp_path / "out"), "--quiet"]
    cases = [
        (["--model", "precomputed", "--model-args", f"name={bad}"], "--model-args name"),
        (["--model", f"demo_vit[pooling={bad}]"], "--model demo_vit[...] pooling"),
        (["--model", "demo_vit", "--model-args", f"k{bad}=1"], "--model-args"),
        (["--model", f"demo_vit{bad}"], "--model"),
        (["--model", "demo_vit", "--model", "precomputed", "--model-args", f"name={bad}"], "--model-args name"),
    ]
    for argv, argument in cases:
        line = _one_error_line(run_main(*base, *argv))
        assert line.startswith(f"prism-run: error: {argument} "), (argv, line)
        assert f"contains the control character {ascii(BAD_CHARS[kind])[1:-1]}" in line, line
    assert not (tmp_path / "out").exists()


def _task(folder: Path, name: str, classes: str, extra: str = "", dataset: str = "Demo3") -> Path:
    f = folder / f"{name}.yaml"
    f.write_text(f"task: {name}\ndataset: {dataset}\nembeddings_key: Demo3\nclass_names: {classes}\n{extra}"
                 "source: {type: precomputed}\nlabel_fractions: [0.5, 1.0]\nseeds: [42]\n"
                 "splits:\n  train: {name: train, size: 60}\n  val: {name: val, size: 30}\n"
                 "  test: {name: test, size: 30}\n")
    return f


@pytest.mark.parametrize("where", ["dataset", "class_names", "columns"])
def test_a_task_file_name_with_a_control_character_is_refused_naming_file_and_key(where, tmp_path):
    write_precomputed(tmp_path / "emb" / "Demo3", {"train": 60, "val": 30, "test": 30}, dim=4, n_classes=3)
    classes, extra, dataset = "[a, b, c]", "", "Demo3"
    if where == "class_names":
        classes = '["a\\e[31m", b, c]'
    elif where == "columns":
        extra = 'columns: {hospital: "h\\u202e1"}\n'
    else:
        dataset = '"De\\tmo3"'
    task = _task(tmp_path, "bad_names", classes, extra, dataset)
    proc = run_main("--task", str(task), "--model", "precomputed", "--model-args", f"root={tmp_path / 'emb'}",
                    "--output", str(tmp_path / "out"), "--quiet", "--no-report")
    line = _one_error_line(proc)
    assert f"{task.name}:" in line and where in line and "control character" in line, line
    assert not (tmp_path / "out").exists()


MARKUP_CLASSES = '["<script>alert(1)</script>", "a|b & c", "<img src=x onerror=alert(2)>"]'
MARKUP_MODEL = "M<script>alert(3)</script>"


@pytest.fixture(scope="module")
def markup_run(tmp_path_factory):
    """A real 3-class run whose class names (the task's, matched to data) and model name hold HTML markup."""
    root = tmp_path_factory.mktemp("markup")
    write_precomputed(root / "emb" / "Demo3", {"train": 60, "val": 30, "test": 30}, dim=4, n_classes=3)
    task = _task(root, "markup3", MARKUP_CLASSES)
    out = root / "out"
    run_main("--task", str(task), "--model", "precomputed", "--model-args", f"root={root / 'emb'},name={MARKUP_MODEL}",
             "--output", str(out), "--quiet", check=True)
    return out


def test_markup_in_class_and_model_names_is_inert_in_report_md(markup_run):
    md = (markup_run / "report.md").read_text(encoding="utf-8")
    assert "<script" not in md.lower() and "<img" not in md.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md  # the class, shown as text
    assert "&lt;img src=x onerror=alert(2)&gt;" in md
    assert "M&lt;script&gt;alert(3)&lt;/script&gt;" in md  # the model
    # the class-wise table keeps its five columns: the class name's `|` cannot split a row
    row = next(line for line in md.splitlines() if line.startswith("| a") and "b & c" in line)
    assert len(re.split(r"(?<!\\)\|", row.strip().strip("|"))) == 5, row


def test_markup_in_names_is_inert_in_report_html_and_kept_in_the_tables(markup_run):
    page = (markup_run / "report.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "M&lt;script&gt;alert(3)&lt;/script&gt;" in page
    runs = pd.read_csv(markup_run / "runs.csv")
    assert runs["model"].unique().tolist() == [MARKUP_MODEL]  # data tables hold the name as given
    assert json.loads((markup_run / "summary.json").read_text())["model"] == MARKUP_MODEL


def test_names_from_data_are_escaped_at_every_output(tmp_path, capsys):
    """A per-run table written elsewhere (hand-edited, an older tool) carries control characters in its names:
    reading it escapes them, so no table, report, figure or console line built from it carries them."""
    from prism_plugin.commands import print_rows
    from prism_plugin.errors import plain_name, printable
    from prism_plugin.report.markdown import md_safe, pipe_table, to_html
    from prism_plugin.tables import read_run_table

    f = tmp_path / "runs.csv"
    pd.DataFrame({"model": [HOSTILE, "plain"], "dataset": ["D\u202eX", "D"], "fraction": [1.0, 1.0],
                  "seed": [42, 42]}).to_csv(f, index=False)
    df = read_run_table(f, ("model", "fraction", "seed"))
    assert df["model"].tolist() == ["a\\x1b[31mRED\\x07b", "plain"] and df["dataset"].tolist() == ["D\\u202eX", "D"]
    for ch in BAD_CHARS.values():
        name = f"n{ch}<b>"
        assert not RAW.search(plain_name(name)) and plain_name(name) == printable(name)
        body = f"Model **{name}** here.\n\n" + pipe_table(["model", name], [[name, "1"]])
        assert not RAW.search(md_safe(body)) and not RAW.search(to_html(body))
        assert "<b>" not in md_safe(body) and "<b>" not in to_html(body)
        print_rows(("a", "b"), [(name, 1)])
        assert not RAW.search(capsys.readouterr().out)
    assert plain_name("DemoViT-Tiny") == "DemoViT-Tiny"  # a clean name is kept as it is


def test_md_safe_keeps_the_structure_and_neutralises_what_a_name_could_inject():
    from prism_plugin.report.markdown import md_safe

    body = ("A *run* of **H&E** `<results>/runs.csv`, &lt; stays text.\n"
            "> **Not shown:** x <img src=x onerror=alert(1)> [link](javascript:alert(1)) [ok](#anchor)\n"
            "```\n<kept in code>\n```\n"
            "| a | b |\n|---|---|\n| c\\|d | <i>e</i> |")
    out = md_safe(body).split("\n")
    assert out[0] == "A *run* of **H&E** `<results>/runs.csv`, &amp;lt; stays text."
    assert out[1].startswith("> **Not shown:** x &lt;img src=x onerror=alert(1)&gt; [link](#)")
    assert out[1].endswith("[ok](#anchor)")
    assert out[2:5] == ["```", "<kept in code>", "```"]  # fenced code is shown literally by any renderer
    assert out[-1] == "| c\\|d | &lt;i&gt;e&lt;/i&gt; |"
