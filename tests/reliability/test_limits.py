"""Limits and messages that must say what is true (issue 25): the grid bound, ``--limit`` and ``class_names``
against the data, narrow feature dtypes, YAML tags on the command line, the full-disk message, path components
counted in bytes, one split seed on fixed splits, ``.npy`` files with bytes after their array, and the
temporary files a killed report left.

Real parts throughout: task files and arrays in ``tmp_path``, the task index, :func:`prism_plugin.evaluate`,
``prism-run`` in this process (``run_main``) and, where the command as a whole is the point, as a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from prism_plugin import evaluate
from prism_plugin.errors import PrismError
from prism_plugin.tasks.builtin import builtin_task_dir
from prism_plugin.tasks.index import TaskIndex
from tests.conftest import run_main

GRID = ["--set", "label_fractions=[1.0]", "--set", "seeds=[42]"]
EVIL = "!!python/object/apply:os.system ['touch {m}']"


def emb(root: Path, *, k: int = 2, n=(40, 20, 20), d: int = 4, dtype=np.float32, name="Demo-Binary") -> Path:
    """A precomputed embedding folder ``root/emb/<name>`` with ``k`` classes (balanced), values in [-1, 1]."""
    folder = root / "emb" / name
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, m in zip(("train", "val", "test"), n):
        y = np.arange(m) % k
        X = np.clip(0.3 * rng.normal(size=(m, d)) + 0.3 * (y[:, None] == np.arange(d) % k), -1, 1)
        np.save(folder / f"{split}_features.npy", X.astype(dtype))
        np.save(folder / f"{split}_labels.npy", y)
    return folder


def task_file(folder: Path, name: str, data: Path, extra: str = "", classes: str = "class_names: [a, b]") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"task: {name}\ndataset: D\n{classes}\nsource: {{type: precomputed, path: {data}}}\n"
                    f"splits: {{train: train, val: val, test: test}}\nlabel_fractions: [1.0]\nseeds: [0]\n{extra}",
                    encoding="utf-8")
    return path


def one_line_error(proc, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def splits(n=200, d=4, k=2, dtype=np.float32):
    rng = np.random.default_rng(1)
    out = []
    for m in (n, n // 2, n // 2):
        y = np.arange(m) % k
        out.append(((0.3 * rng.normal(size=(m, d)) + 0.3 * y[:, None]).clip(-1, 1).astype(dtype), y))
    return out


def index(*folders: Path) -> TaskIndex:
    return TaskIndex([*folders, builtin_task_dir()])


# --------------------------------------------------------------------------- 1. the grid bound
def test_evaluate_refuses_a_huge_fraction_list_before_any_work():
    train, val, test = splits()
    many = list(np.linspace(0.0002, 1.0, 5000))
    with pytest.raises(PrismError) as info:
        evaluate(train, val, test, fractions=many, seeds=[0])
    msg = str(info.value)
    assert msg.startswith("label_fractions: 5,000 label fractions") and "at most 1,000" in msg
    assert "PRISM_MAX_RUNS" in msg and "\n" not in msg
    with pytest.raises(PrismError, match=r"seeds: 100,000 seeds; .*at most 1,000"):  # by its length alone
        evaluate(train, val, test, fractions=[1.0], seeds=range(100_000))
    # each list is short, the product is not (the same bound): the count found and the dimensions
    with pytest.raises(PrismError, match=r"the grid is 40 label fractions x 30 seeds = 1,200 runs; at most 1,000"):
        evaluate(train, val, test, fractions=list(np.linspace(0.025, 1.0, 40)), seeds=list(range(30)))


def test_the_grid_bound_holds_for_yaml_and_set_and_names_the_key(tmp_path):
    data = emb(tmp_path)
    fr = "[" + ",".join(f"{(i + 1) / 2000:.6g}" for i in range(2000)) + "]"
    path = task_file(tmp_path, "big", data)
    path.write_text(path.read_text().replace("label_fractions: [1.0]", f"label_fractions: {fr}"))
    with pytest.raises(PrismError) as info:
        index(tmp_path).load_task("big")
    assert re.match(rf"{re.escape(str(path))}:\d+: label_fractions: 2,000 label fractions; ", str(info.value))
    five_hundred = "[" + ",".join(f"{(i + 1) / 500:.6g}" for i in range(500)) + "]"
    with pytest.raises(PrismError, match=r"^--set label_fractions: label_fractions: the grid is 500 label "
                                         r"fractions x 3 seeds = 1,500 runs"):
        index().load_task("prism_demo", [f"label_fractions={five_hundred}"])
    # another dimension: split seeds x probes of the hematology protocol
    many_splits = "[" + ",".join(str(i) for i in range(600)) + "]"
    with pytest.raises(PrismError, match=r"--set split_seeds: split_seeds: the grid is 1 label fractions x 1 seeds "
                                         r"x 600 split seeds x 2 probes = 1,200 runs"):
        index().load_task("hema_matek", [f"split_seeds={many_splits}"])
    # and a sweep's values count (per task, not per variant)
    values = "[" + ",".join(str(0.01 * (i + 1)) for i in range(60)) + "]"
    with pytest.raises(PrismError, match=r"sweep: the grid is 6 label fractions x 3 seeds x 60 sweep values"):
        index().load_task("prism_demo", [f"sweep.probe.C={values}"])


def test_the_bound_is_raised_by_prism_max_runs(monkeypatch):
    five_hundred = "[" + ",".join(f"{(i + 1) / 500:.6g}" for i in range(500)) + "]"
    monkeypatch.setenv("PRISM_MAX_RUNS", "1500")
    assert index().load_task("prism_demo", [f"label_fractions={five_hundred}"]).n_runs == 1500
    monkeypatch.setenv("PRISM_MAX_RUNS", "lots")
    with pytest.raises(PrismError, match=r"\$PRISM_MAX_RUNS='lots': must be a positive whole number"):
        index().load_task("prism_demo")


def test_the_cli_refuses_a_huge_grid_in_one_line_before_any_work(tmp_path):
    fr = "[" + ",".join(f"{(i + 1) / 500:.6g}" for i in range(500)) + "]"
    out = tmp_path / "out"
    proc = run_main("--task", "prism_demo", "--model", "demo_vit", "--set", f"label_fractions={fr}",
                    "--output", str(out))
    one_line_error(proc, "--set label_fractions", "1,500 runs", "at most 1,000", "PRISM_MAX_RUNS")
    assert not out.exists()
    proc = run_main("--task", "prism_demo", "--model", "demo_vit", "--set", f"seeds={list(range(400))}",
                    "--output", str(out))
    one_line_error(proc, "--set seeds: seeds: the grid is 6 label fractions x 400 seeds = 2,400 runs")


@pytest.mark.parametrize("where", ["yaml", "set", "evaluate"])
def test_duplicates_are_refused_naming_the_duplicate_everywhere(tmp_path, where):
    if where == "evaluate":
        train, val, test = splits()
        with pytest.raises(PrismError) as info:
            evaluate(train, val, test, fractions=[0.5, 1.0, 0.5000001], seeds=[3, 4, 3])
        assert "0.5 and 0.5000001 are the same fraction" in str(info.value)
        with pytest.raises(PrismError, match="seeds: contains duplicates: seed 3 appears twice"):
            evaluate(train, val, test, fractions=[1.0], seeds=[3, 4, 3])
        return
    if where == "yaml":
        path = task_file(tmp_path, "dup", emb(tmp_path), extra="")
        path.write_text(path.read_text().replace("seeds: [0]", "seeds: [7, 8, 7]"))
        with pytest.raises(PrismError, match=rf"{re.escape(str(path))}:\d+: seeds: contains duplicates: seed 7 "
                                             "appears twice"):
            index(tmp_path).load_task("dup")
        return
    with pytest.raises(PrismError, match=r"label_fractions: contains duplicates: 0.25 and 0.25 are the same"):
        index().load_task("prism_demo", ["label_fractions=[0.25, 1.0, 0.25]"])


# --------------------------------------------------------------------------- 2./3. --limit and class_names
def test_limit_below_the_class_count_names_limit_and_the_fix(tmp_path):
    data = emb(tmp_path)
    proc = run_main("--task", "prism_demo", "--model", "precomputed", "--model-args", f"root={data.parent}",
                    "--output", str(tmp_path / "out"), "--no-report", *GRID, "--limit", "1")
    line = one_line_error(proc, "--limit 1", "--limit 2 or more")
    assert "absent from the training split" not in line and "tumour" in line
    four = emb(tmp_path / "four", k=4)
    task_file(tmp_path, "four", four, classes="class_names: [a, b, c, d]")
    proc = run_main("--task", "four", "--include-path", str(tmp_path), "--model", "precomputed", "--output",
                    str(tmp_path / "out4"), "--no-report", "--limit", "3")
    one_line_error(proc, "--limit 3", "class(es) 3 (d) have no training example", "--limit 4 or more")
    # a --limit that keeps every class runs
    ok = run_main("--task", "four", "--include-path", str(tmp_path), "--model", "precomputed", "--output",
                  str(tmp_path / "ok4"), "--no-report", "--limit", "8", "--quiet")
    assert ok.returncode == 0, ok.stderr


def test_class_names_longer_than_the_data_blame_the_task(tmp_path):
    data = emb(tmp_path)
    path = task_file(tmp_path, "three", data, classes="class_names: [a, b, c]")
    proc = run_main("--task", str(path), "--model", "precomputed", "--output", str(tmp_path / "o"), "--no-report")
    line = one_line_error(proc, f"{path}:3: class_names lists 3 names but the data has 2 classes",
                          "list 2 class names")
    assert "absent from the training split" not in line
    path = task_file(tmp_path, "nfour", data, classes="n_classes: 4")
    proc = run_main("--task", str(path), "--model", "precomputed", "--output", str(tmp_path / "o"), "--no-report")
    one_line_error(proc, f"{path}:3: n_classes is 4 but the data has 2 classes")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- 4. narrow dtypes
def test_float16_features_give_no_numpy_warning(tmp_path):
    train, val, test = splits(dtype=np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        df = evaluate(train, val, test, fractions=[1.0], seeds=[0])
    assert len(df) == 1 and np.isfinite(df["auroc"]).all()
    data = emb(tmp_path, dtype=np.float16)
    proc = run_main("--task", "prism_demo", "--model", "precomputed", "--model-args", f"root={data.parent}",
                    "--output", str(tmp_path / "out"), "--no-report", *GRID)
    assert proc.returncode == 0, proc.stderr
    assert "overflow" not in proc.stderr and "RuntimeWarning" not in proc.stderr, proc.stderr
    from prism_plugin.data.npy import read_features

    for dtype in (np.float16, np.int8, np.uint16):  # narrow types come back as float32, exactly
        path = tmp_path / f"x_{np.dtype(dtype).name}.npy"
        np.save(path, np.arange(12, dtype=dtype).reshape(3, 4))
        X = read_features(path)
        assert X.dtype == np.float32 and np.array_equal(X, np.arange(12).reshape(3, 4))


def test_an_inf_that_float16_stored_names_the_file(tmp_path):
    data = emb(tmp_path)
    X = np.load(data / "val_features.npy").astype(np.float16)
    X[2, 1] = np.inf  # what float16 stores for any value above 65504 (e.g. a raw 70000 cast down)
    np.save(data / "val_features.npy", X)
    proc = run_main("--task", "prism_demo", "--model", "precomputed", "--model-args", f"root={data.parent}",
                    "--output", str(tmp_path / "out"), "--no-report", *GRID)
    one_line_error(proc, str(data / "val_features.npy"), "first in row 2", "float16 holds at most 65504")
    assert "overflow" not in proc.stderr


# --------------------------------------------------------------------------- 5. YAML tags
def test_tags_in_set_values_say_tags_are_not_allowed(tmp_path):
    marker = tmp_path / "pwned"
    out = tmp_path / "out"
    proc = run_main("--task", "prism_demo", "--model", "demo_vit", "--output", str(out),
                    "--set", "seeds=" + EVIL.format(m=marker))
    line = one_line_error(proc, "--set seeds: YAML tags are not allowed", "`!!python/object/apply:os.system`")
    assert "not valid YAML" not in line and not marker.exists() and not out.exists()
    for value, tag in (("[1, !seed 2]", "`!seed`"), ("{kind: !!python/name:os.system x}", "`!!python/name:os.system`")):
        with pytest.raises(PrismError, match=re.escape(f"YAML tags are not allowed in --set values ({tag})")):
            index().load_task("prism_demo", [f"probe={value}" if "kind" in value else f"seeds={value}"])
    from prism_plugin.commands.findings import parse_options

    with pytest.raises(PrismError, match=r"^--option x: YAML tags are not allowed in --option values"):
        parse_options(["x=" + EVIL.format(m=marker)])
    assert parse_options(["x=[1, 2]", "y=0.8"]) == {"x": [1, 2], "y": 0.8}


def test_tags_in_task_files_name_the_file_and_line(tmp_path):
    path = task_file(tmp_path, "tagged", emb(tmp_path), extra="probe: {kind: logistic, C: !float 1}\n")
    with pytest.raises(PrismError) as info:
        index(tmp_path).load_task("tagged")
    assert str(info.value).startswith(f"{path}:8: YAML tags are not allowed in task files (`!float`)")


def test_no_unsafe_yaml_loader_in_the_package():
    src = Path(__file__).resolve().parents[2] / "src" / "prism_plugin"
    unsafe = re.compile(r"yaml\.(load|full_load|unsafe_load|load_all)\(|Loader=yaml\.(Loader|FullLoader|UnsafeLoader)")
    hits = [f"{p}:{i}" for p in src.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
            if unsafe.search(line)]
    assert hits == []
    # the task index's libyaml loader constructs as safe_load does (no Python objects from tags)
    import yaml
    from prism_plugin.tasks.index import FAST_LOADER

    assert issubclass(FAST_LOADER, yaml.constructor.SafeConstructor)
    assert not issubclass(FAST_LOADER, yaml.constructor.FullConstructor)


# --------------------------------------------------------------------------- 6. full disk
def _sizes(msg: str) -> tuple[float, float]:
    """(needed in all, free) in bytes from a check_free_space message."""
    units = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
    total = re.search(r"([\d.,]+) (bytes|KiB|MiB|GiB) in all", msg)
    free = re.search(r"([\d.,]+) (bytes|KiB|MiB|GiB) free\)", msg)
    assert total and free, msg
    return (float(total[1].replace(",", "")) * units[total[2]], float(free[1].replace(",", "")) * units[free[2]])


def test_the_full_disk_message_adds_up(tmp_path, monkeypatch):
    from prism_plugin import storage
    from prism_plugin.embed.cache import save_npy_atomic

    monkeypatch.setattr(storage, "free_bytes", lambda folder: 300 * 1024)
    with pytest.raises(storage.FileSystemError) as info:
        save_npy_atomic(tmp_path / "labels.npy", np.zeros(32, dtype=np.int64))  # 256 bytes of data
    msg = str(info.value)
    assert "needs 256 bytes plus 1.0 MiB kept free" in msg and "300.0 KiB free" in msg and "--cache-dir" in msg
    needed, free = _sizes(msg)
    assert needed > free  # a refusal says a need larger than what is free
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(storage, "free_bytes", lambda folder: 4 * 1024**2)  # another size: 3 MiB + the reserve
    with pytest.raises(storage.FileSystemError) as info:
        storage.check_free_space(tmp_path, 3 * 1024**2 + 1, what="x", fix="free space")
    needed, free = _sizes(str(info.value))
    assert needed > free and "needs 3.0 MiB plus 1.0 MiB" in str(info.value)
    storage.check_free_space(tmp_path, 3 * 1024**2, what="x", fix="free space")  # fits with its reserve


# --------------------------------------------------------------------------- 7. path components in bytes
def test_a_long_cjk_task_name_is_refused_at_validation_leaving_nothing(tmp_path):
    name = "数" * 120  # 120 characters, 360 bytes
    path = task_file(tmp_path, "cjk", emb(tmp_path))
    path.write_text(path.read_text(encoding="utf-8").replace("task: cjk", f"task: {name}"), encoding="utf-8")
    out = tmp_path / "out"
    proc = run_main("--task", str(path), "--model", "precomputed", "--output", str(out), "--no-report")
    line = one_line_error(proc, f"{path}:1: task: is 360 bytes long in UTF-8 (120 characters)", "at most 200 bytes")
    assert "file name too long" not in line and not out.exists()
    val = run_main("validate", str(path))
    assert val.returncode != 0 and "360 bytes" in val.stderr
    group = tmp_path / "g.yaml"  # a group name: the same rule (70 characters, 210 bytes)
    group.write_text(f"group: {'é' * 105}\ntasks: [prism_demo]\n", encoding="utf-8")
    with pytest.raises(PrismError, match=r"g.yaml:1: group: is 210 bytes long in UTF-8 \(105 characters\)"):
        index(tmp_path).load(str(group))


def test_names_become_components_that_fit_in_bytes(tmp_path, monkeypatch):
    from prism_plugin import paths
    from prism_plugin.metrics.reliability import artifact_name
    from prism_plugin.results import ResultsDir

    name = "数" * 66  # a valid name (198 bytes)
    assert paths.name_problem(name, "task name") is None
    comp = paths.safe_component(name)
    assert len(comp.encode()) <= paths.MAX_COMPONENT and comp != paths.safe_component("数" * 65 + "x")
    for file_name in (artifact_name(name + "@probe.C=0.01", 0.01, 42, "f0.01-s42-split999-logistic_std"),
                      ResultsDir(tmp_path).cell_path(name, "f0.01-s42-split999-logistic_std").name):
        assert len(file_name.encode()) <= 255, file_name
    ascii_name = "t" * 210  # ASCII names keep the names they always had (cut at 180 characters + a digest)
    assert artifact_name(ascii_name, 1.0, 0) == "t" * 180 + "-" + __import__("hashlib").sha256(
        f"{ascii_name}--f1-s0".encode()).hexdigest()[:16] + ".json"
    # a file system with a smaller limit than the names are cut to: refused before anything is made
    monkeypatch.setattr(paths, "name_max", lambda folder: 40)
    with pytest.raises(PrismError, match=r"is 51 bytes as a file name \(UTF-8\), over this file system's 40-byte"):
        paths.confined(tmp_path / "out", "a" * 51)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- 8. one split seed on fixed splits
def test_one_split_seed_on_fixed_splits_is_the_one_split(tmp_path):
    data = emb(tmp_path)
    (tmp_path / "_proto.yaml").write_text("split_seeds: [0, 1, 2, 3, 4]\nprobes: [logistic_std, knn1]\n")
    task_file(tmp_path, "fixed0", data, extra="split_seeds: [0]\n")
    task_file(tmp_path, "fixednull", data, extra="include: _proto.yaml\nsplit_seeds: null\n")
    task_file(tmp_path, "fixedinc", data, extra="include: _proto.yaml\nsplit_seeds: [3]\n")
    task_file(tmp_path, "fixed5", data, extra="include: _proto.yaml\n")
    idx = index(tmp_path)
    for name in ("fixed0", "fixednull", "fixedinc"):
        task = idx.load_task(name)
        assert task.split_seeds == () and task.grid_split_seeds == (None,), name
    assert idx.load_task("fixedinc").n_runs == 2  # two probes x 1 x 1
    with pytest.raises(PrismError) as info:  # five seeds from the protocol file: named where they were written
        idx.load_task("fixed5")
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / '_proto.yaml'}:1: split_seeds: needs a split: procedure to vary its 5")
    assert "split_seeds: [0]" in msg
    assert idx.load_task("fixed5", ["split_seeds=[0]"]).split_seeds == ()
    # the built-in hematology protocol on a user task with fixed splits: one split seed overrides it
    hema = tmp_path / "myhema.yaml"
    hema.write_text(task_file(tmp_path, "myhema", data).read_text().replace(
        "label_fractions: [1.0]\nseeds: [0]\n", f"include: {builtin_task_dir() / '_hema_protocol.yaml'}\n"))
    idx = index(tmp_path)
    with pytest.raises(PrismError, match="_hema_protocol.yaml:\\d+: split_seeds: needs a split: procedure"):
        idx.load_task("myhema")
    assert idx.load_task("myhema", ["split_seeds=[0]"]).n_runs == 2
    # and a run: plain run ids, no split_seed column
    proc = run_main("--task", "fixed0", "--include-path", str(tmp_path), "--model", "precomputed", "--output",
                    str(tmp_path / "out"), "--no-report", "--quiet")
    assert proc.returncode == 0, proc.stderr
    import pandas as pd

    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert "split_seed" not in runs.columns and len(runs) == 1


def test_one_split_seed_on_a_transfer_with_fixed_source_splits(tmp_path):
    data = emb(tmp_path)
    task_file(tmp_path, "srcfixed", data)
    (tmp_path / "tr.yaml").write_text("task: tr\nkind: transfer\nsource_task: srcfixed\ntarget_task: srcfixed\n"
                                      "class_names: [a, b]\nsplit_seeds: [0]\nood_stability: false\n")
    assert index(tmp_path).load_task("tr").split_seeds == ()
    (tmp_path / "tr.yaml").write_text((tmp_path / "tr.yaml").read_text().replace("[0]", "[0, 1]"))
    with pytest.raises(PrismError, match=r"tr.yaml:\d+: split_seeds: the source task srcfixed .*split_seeds: \[0\]"):
        index(tmp_path).load_task("tr")


# --------------------------------------------------------------------------- 9. .npy files with bytes after the array
@pytest.mark.parametrize("which", ["train_features.npy", "test_labels.npy"])
def test_trailing_bytes_after_an_npy_array_are_refused(tmp_path, which):
    data = emb(tmp_path)
    with open(data / which, "ab") as fh:
        fh.write(b"\x00" * 4096)
    proc = run_main("--task", "prism_demo", "--model", "precomputed", "--model-args", f"root={data.parent}",
                    "--output", str(tmp_path / "out"), "--no-report", *GRID)
    one_line_error(proc, f"{data / which}: 4096 bytes after the array's", "re-save it with numpy.save")
    from prism_plugin.data.npy import read_npy

    path = tmp_path / "two.npy"  # two arrays saved into one file
    with open(path, "wb") as fh:
        np.save(fh, np.arange(3))
        np.save(fh, np.arange(5))
    with pytest.raises(PrismError, match=r"two.npy: \d+ bytes after the array's 24 data bytes \(shape \(3,\), int64\)"):
        read_npy(path)
    short = tmp_path / "short.npy"  # truncated files stay refused
    np.save(short, np.arange(10))
    short.write_bytes(short.read_bytes()[:-8])
    with pytest.raises(PrismError, match="truncated"):
        read_npy(short)


# --------------------------------------------------------------------------- 10. temporary files of a killed report
def test_report_removes_temporary_files_a_killed_report_left(tmp_path):
    data = emb(tmp_path)
    out = tmp_path / "out"
    proc = run_main("--task", "prism_demo", "--model", "precomputed", "--model-args", f"root={data.parent}",
                    "--output", str(out), "--no-report", "--quiet", *GRID)
    assert proc.returncode == 0, proc.stderr
    (out / "figures").mkdir(exist_ok=True)
    (out / "summaries").mkdir(exist_ok=True)
    left = [out / "figures" / ".x.tmp", out / "figures" / ".calibration.png.k2j4.tmp",
            out / "summaries" / ".cells.csv.ab12.tmp", out / ".report.html.zz9.tmp"]
    for p in left:
        p.write_bytes(b"partial")
    keep = out / "figures" / "notes.txt"
    keep.write_text("mine")
    proc = run_main("report", str(out))  # the sweep is the command's, not the process's: in this process
    assert proc.returncode == 0, proc.stderr
    assert [p for p in left if p.exists()] == [] and keep.exists()
    assert (out / "report.html").is_file()
    assert json.loads((out / "summary.json").read_text())  # the results folder is intact
    assert os.listdir(out / "figures")
    # a leaderboard (report ... --output DIR) sweeps its own folder the same way
    board = tmp_path / "board"
    (board / "figures").mkdir(parents=True)
    stale = [board / "figures" / ".lb-auroc.png.q1.tmp", board / ".report.md.r2.tmp"]
    for p in stale:
        p.write_bytes(b"partial")
    proc = run_main("report", str(out), "--output", str(board))
    assert proc.returncode == 0, proc.stderr
    assert [p for p in stale if p.exists()] == [] and (board / "report.html").is_file()
