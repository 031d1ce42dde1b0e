"""Names never become paths, includes stay in the task folders, `validate` lists every problem once,
shadowed names warn, transfer src/tgt link to the member tasks' datasets (issue 14, security family).

All in-process (`prism_plugin.cli.main`) on task files written to tmp_path; one tiny precomputed run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from prism_plugin.cli import main
from prism_plugin.errors import PrismError
from prism_plugin.paths import confined, safe_component

TASK = ("task: {name}\ndataset: Toy\nclass_names: [a, b]\nsource: {{type: precomputed}}\n"
        "splits: {{train: train, val: val, test: test}}\nlabel_fractions: [1.0]\nseeds: [1]\n")
SECRET = "root:x:0:0:SECRET-CONTENT-LINE"


def _validate(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["validate", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ----------------------------------------------------------------------------- names -> one component
@pytest.mark.parametrize("name", ["../../../somewhere", "/abs/path", "..", ".", "a/b", "a\\b", "", "x" * 400,
                                  "a\x00b", "\x1b[31m", "~user", "C:\\x", "ok name@v=1"])
def test_safe_component_is_one_harmless_component(name, tmp_path):
    comp = safe_component(name)
    assert comp and "/" not in comp and "\\" not in comp and comp not in (".", "..") and not comp.startswith(".")
    assert comp.isprintable() and len(comp) <= 120
    out = confined(tmp_path, name, name)
    assert tmp_path in out.parents and out.parent.parent == tmp_path
    assert safe_component("prism_demo") == "prism_demo" and safe_component("DemoViT-Tiny") == "DemoViT-Tiny"
    assert safe_component("x" * 300) != safe_component("x" * 299 + "y")  # long names keep apart


BAD_NAMES = ['"../../../somewhere"', "/tmp/abs", '".."', '"a/b"', '"a\\0b"', '"a\\tb"', '" x"', "7", "[a]"]


def test_path_like_group_and_task_names_are_refused_at_their_line(tmp_path, capsys):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "toy.yaml").write_text(TASK.format(name="toy"))
    files = []
    for i, bad in enumerate(BAD_NAMES):  # one validate call, every file: one line each
        (tasks / f"g{i}.yaml").write_text(f"group: {bad}\ntasks: [toy]\n")
        (tasks / f"t{i}.yaml").write_text(TASK.format(name=bad))
        files += [str(tasks / f"g{i}.yaml"), str(tasks / f"t{i}.yaml")]
    rc, _, err = _validate(capsys, "--include-path", str(tasks), *files)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == len(files), err
    for i in range(len(BAD_NAMES)):
        assert lines[2 * i].startswith(f"error  {tasks / f'g{i}.yaml'}:1: group: "), lines[2 * i]
        assert lines[2 * i + 1].startswith(f"error  {tasks / f't{i}.yaml'}:1: task: "), lines[2 * i + 1]


def test_a_run_never_writes_outside_output(tmp_path, capsys):
    """Odd-but-allowed task names, a sweep and a model display name that is a path stay under --output;
    a group whose name is a path is refused before any work, and no runs.csv elsewhere is replaced."""
    emb = tmp_path / "emb" / "FM" / "Toy"
    emb.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("val", 20), ("test", 20)):
        y = np.arange(n) % 2
        np.save(emb / f"{split}_features.npy", (rng.normal(size=(n, 8)) + 2 * y[:, None]).astype(np.float32))
        np.save(emb / f"{split}_labels.npy", y)
    tasks, out, outside = tmp_path / "tasks", tmp_path / "work" / "out", tmp_path / "outside"
    tasks.mkdir(), outside.mkdir()
    (outside / "runs.csv").write_text("keep\n")
    (tasks / "toy.yaml").write_text(TASK.format(name='"toy x@y"') + "embeddings_key: Toy\n"
                                    "sweep: {probe.C: [0.5, 1]}\n")
    args = ["--include-path", str(tasks), "--model", "precomputed", "--model-args",
            f"root={emb.parent},name=../../../outside", "--output", str(out), "--quiet", "--no-report"]
    for bad in ("../../../outside", str(outside)):
        (tasks / "g.yaml").write_text(f'group: "{bad}"\ntasks: ["toy x@y"]\n')
        assert main(["--task", str(tasks / "g.yaml"), *args]) == 2
        assert "group:" in capsys.readouterr().err
    (tasks / "g.yaml").write_text('group: "grp"\ntasks: ["toy x@y"]\n')
    before = {p for p in tmp_path.rglob("*")}
    assert main(["--task", str(tasks / "g.yaml"), *args]) == 0
    capsys.readouterr()
    new = {p for p in tmp_path.rglob("*")} - before
    assert new and all(p == out or out in p.parents or p in out.parents for p in new), sorted(new)
    assert (outside / "runs.csv").read_text() == "keep\n"
    assert len(list(out.glob("grp/*/*/runs.csv"))) == 2 and (out / "grp" / "runs.csv").is_file()


def test_embeddings_key_is_a_relative_folder_without_dotdot(tmp_path, capsys):
    keys = ["../x", "/etc", "a/../b", "~root/x", "a\\b", "a//b", "./a", '"a\\0b"']
    files = []
    for i, key in enumerate(keys):
        files.append(tmp_path / f"t{i}.yaml")
        files[-1].write_text(TASK.format(name=f"t{i}") + f"embeddings_key: {key}\n")
    rc, _, err = _validate(capsys, *map(str, files))
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == len(keys), err
    assert all(line.startswith(f"error  {f}:8: embeddings_key: ") for line, f in zip(lines, files)), err
    files[0].write_text(TASK.format(name="t") + "embeddings_key: hematology/acevedo\n")
    assert _validate(capsys, str(files[0]))[0] == 0


# ----------------------------------------------------------------------------- includes
def _include_cases(tmp_path: Path) -> dict[str, str]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "_secret.yaml").write_text(f"seeds: [1]\nnote: {SECRET}\n")
    (outside / "passwd").write_text(SECRET + "\n")
    tasks = tmp_path / "tasks"
    (tasks / "sub").mkdir(parents=True)
    (tasks / "_link.yaml").symlink_to(outside / "_secret.yaml")
    (tasks / "_dir.yaml").mkdir()
    (tasks / "_bin.yaml").write_bytes(b"seeds: [1]\n\x00\xff" + SECRET.encode())
    (tasks / "_huge.yaml").write_bytes(b"# " + b"x" * (1024 * 1024 + 10) + b"\n")
    (tasks / "_bad.yaml").write_text(f"seeds: [1\n{SECRET}: : :\n")
    (tasks / "_cycle.yaml").write_text("include: _cycle2.yaml\n")
    (tasks / "_cycle2.yaml").write_text("include: _cycle.yaml\n")
    os.mkfifo(tasks / "_fifo.yaml")
    return {
        "/etc/shadow": "outside the task folders", "/etc/passwd": "outside the task folders",
        "../../../../../../etc/passwd": "outside the task folders",
        str(outside / "passwd"): "not a task file|outside", str(outside / "_secret.yaml"): "outside the task folders",
        "../outside/_secret.yaml": "outside the task folders", "_link.yaml": "outside the task folders",
        "_dir": "is a folder", "_bin": "binary", "_huge.yaml": "bytes", "_bad": "YAML syntax error",
        "_cycle": "include cycle", "_fifo": "not a regular file", "notes.txt": "not a task file",
        "_missing": "not found",
    }


def test_includes_are_confined_and_never_echo_content(tmp_path, capsys):
    cases = _include_cases(tmp_path)
    tasks = tmp_path / "tasks"
    files = []
    for i, inc in enumerate(cases):
        files.append(tasks / f"t{i}.yaml")
        files[-1].write_text(TASK.format(name=f"t{i}") + f"include: {inc}\n")
    rc, out, err = _validate(capsys, *map(str, files))
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == len(cases), err
    assert SECRET not in out + err and "SECRET" not in err, err
    for f, (inc, why), line in zip(files, cases.items(), lines):
        assert re.search(why, line), (inc, line)
        if why not in ("bytes", "binary", "YAML syntax error", "include cycle"):  # these name the included file
            assert line.startswith(f"error  {f}:8: include"), (inc, line)
    # inside the tree, relative or absolute, an include is followed
    (tasks / "sub" / "_ok.yaml").write_text("seeds: [7]\n")
    for inc in ("sub/_ok.yaml", str(tasks / "sub" / "_ok.yaml"), "sub/_ok"):
        (tasks / "ok.yaml").write_text(TASK.format(name="ok").replace("seeds: [1]\n", "") + f"include: {inc}\n")
        assert _validate(capsys, str(tasks / "ok.yaml"))[0] == 0
    # the index skips what is not a task file (folders named x.yaml, fifos) without hanging
    assert main(["ls", "tasks", "--include-path", str(tasks)]) == 0
    assert "_dir" not in capsys.readouterr().out


def test_group_members_and_transfer_members_are_names_not_paths(tmp_path, capsys):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "t.yaml").write_text(TASK.format(name="t"))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "g.yaml").write_text(f"group: g\ntasks: [{tmp_path / 'elsewhere' / 't.yaml'}]\n")
    (tasks / "tr.yaml").write_text("task: tr\nkind: transfer\nsource_task: ../elsewhere/t.yaml\ntarget_task: t\n")
    rc, _, err = _validate(capsys, "--include-path", str(tasks), "g", "tr")
    assert rc == 2 and "tasks[0]" in err and "source_task:" in err, err


# ----------------------------------------------------------------------------- every problem once
def test_validate_reports_every_wrong_type_once_in_file_order(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text("task: bad\ndataset: 5\nn_classes: two\nclass_names: [a, 3]\nsource: {type: demo, n: 1, foo: 2}\n"
                 "splits: {train: {name: 3, size: x}, test: test}\nseeds: x\nece_bins: y\nlabel_fractions: 3\n"
                 "probe: {C: big, max_iter: z}\nproportional_val: 7\ntags: t\nbinary_logits: 1\n")
    rc, _, err = _validate(capsys, str(f))
    lines = [line.removeprefix("error  ") for line in err.strip().splitlines()]
    keys = [line.split(": ")[1] for line in lines]
    assert rc == 2
    assert keys == ["dataset", "n_classes", "class_names", "source.n", "source.foo", "splits.train.size",
                    "splits.train.name", "seeds", "ece_bins", "label_fractions", "probe.C", "probe.max_iter",
                    "proportional_val", "tags", "binary_logits"], lines
    assert len(set(lines)) == len(lines)
    # a transfer task and --set values too; the run command names the first and counts the rest
    f.write_text("task: 7\nkind: transfer\nsource_task: prism_demo\ntarget_task: 9\nn_classes: x\nseeds: y\n")
    rc, _, err = _validate(capsys, str(f), "--set", "ece_bins=q")
    assert [line.split(": ")[1] for line in err.strip().splitlines()] == \
        ["ece_bins", "task", "target_task", "n_classes", "seeds"], err
    assert main(["--task", str(f), "--model", "demo_vit", "--set", "ece_bins=q"]) == 2
    assert "and 4 more problem(s)" in capsys.readouterr().err


# ----------------------------------------------------------------------------- shadowing
def test_a_user_task_or_group_that_shadows_a_builtin_warns_naming_both(tmp_path, capsys):
    (tmp_path / "prism_demo.yaml").write_text(TASK.format(name="prism_demo"))
    (tmp_path / "prism_main.yaml").write_text("group: prism_main\ntasks: [prism_demo]\n")
    rc, out, err = _validate(capsys, "--include-path", str(tmp_path), "prism_demo", "prism_main")
    assert rc == 0, err
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 2, err
    from prism_plugin.tasks.builtin import builtin_task_dir  # tasks/ in a checkout, task_files/ installed

    builtin = builtin_task_dir()
    assert str(tmp_path / "prism_demo.yaml") in warned[0] and str(builtin / "prism_demo.yaml") in warned[0]
    assert str(tmp_path / "prism_main.yaml") in warned[1] and str(builtin / "groups" / "prism_main.yaml") in warned[1]
    rc, _, err = _validate(capsys, str(tmp_path / "prism_demo.yaml"))  # by path, with a built-in's name
    assert rc == 0 and "has the name of the task in" in err


# ----------------------------------------------------------------------------- transfer links
def test_transfer_src_and_tgt_must_name_the_member_datasets(tmp_path, capsys):
    cases = [("src: PCAM\ntgt: MHIST", ["src"]), ("src: PCam\ntgt: Mhist", ["tgt"]), ("src: x\ntgt: y", ["src", "tgt"]),
             ("src: PCam\ntgt: MHIST", []), ("src: x\ntgt: y\nood_stability: false", []), ("tags: [x]", [])]
    expected, files = [], []
    for i, (keys, bad) in enumerate(cases):
        files.append(tmp_path / f"tr{i}.yaml")
        files[-1].write_text(f"task: tr{i}\nkind: transfer\nsource_task: prism_pcam\ntarget_task: prism_mhist\n{keys}\n")
        expected += [(str(files[-1]), key) for key in bad]
    rc, out, err = _validate(capsys, *map(str, files))
    lines = err.strip().splitlines()
    assert rc == 2 and out.count("ok  ") == 3
    assert [(line.removeprefix("error  ").split(":")[0], line.split(": ")[1]) for line in lines] == expected, err
    for line in lines:
        assert "prism_pcam.yaml" in line or "prism_mhist.yaml" in line
        assert "ood_stability: false" in line


def test_builtin_transfer_tasks_still_validate(capsys):
    rc, out, err = _validate(capsys, "prism_transfer", "hema_acevedo_to_matek", "prism_camelyon17_h0_to_h1",
                             "prism_demo_transfer", "prism_bracs_dcis_ic_to_crc", "prism_crc_to_bracs_dcis_ic")
    assert rc == 0, err


def test_confined_refuses_an_escape(tmp_path):
    with pytest.raises(PrismError, match="outside"):
        from prism_plugin.paths import ensure_inside
        ensure_inside(tmp_path / "out", tmp_path / "out" / ".." / "x")
