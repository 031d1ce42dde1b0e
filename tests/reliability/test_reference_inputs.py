"""Reference folders and duplicate runs: readers that trust stale or foreign inputs (issue 25).

Every consumer of a reference folder (``prism-run reference`` / ``compare`` / ``report`` / ``findings`` and
``PRISMEvaluator``) reads it through one reader (``prism_plugin.reference_files``): a file it needs that is absent
or damaged is one line (exit status 2) naming the folder and the file; a file it can do without is named where the
output is shown; a damaged *pulled* copy is named as damaged with the re-pull command, and "run `prism-run
reference pull` once" is said only where there is no copy at all. The same run in two inputs names both folders
and their tasks.

The reader itself is checked for every file x damage x consumer; each command meets some of those cases through
the CLI (in this process, ``run_main``), one in a fresh ``prism-run`` process. Real folders in tmp_path: copies of
../shared/reference/prism_results_v2 (skipped without it; a user's folder holds the two tables cut to one dataset /
one transfer pair), two tiny results folders of one model from two tasks (precomputed features), and a pulled copy
installed by ``reference pull`` from a local mirror.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path

import pandas as pd
import pytest

from prism_plugin import reference_files as rf
from prism_plugin.errors import PrismError
from tests.conftest import REFERENCE, prism_run, run_main, write_precomputed

REPO = Path(__file__).resolve().parents[2]
IND, OOD = "indomain_all_v2.csv", "ood_all_v2.csv"
NO_COPY = "run `prism-run reference pull` once"
REPULL = "`prism-run reference pull --force` re-pulls it"
LIGHT = ("--disable", "report_basic", "--disable", "geometry_report", "--disable", "audit")
HOWS = ("missing", "no auroc column", "words for numbers", "empty")
DETAIL = {"missing": "is missing", "no auroc column": "missing column(s) auroc",
          "words for numbers": "non-numeric values in column(s) auroc", "empty": "cannot be read as CSV"}
#: each consumer of the reader, and the files it cannot do without (the others it names when absent)
CONSUMERS = {"reference": rf.REFERENCE, "compare": rf.COMPARE, "report": rf.LEADERBOARD, "findings": rf.FINDINGS,
             "compat": rf.COMPAT}
NEEDS = {"reference": {IND, OOD}, "compare": {IND, OOD}, "report": {IND}, "findings": set(), "compat": {IND, OOD}}


@pytest.fixture(scope="module")
def shared() -> Path:
    if not (REFERENCE / IND).exists():
        pytest.skip(f"shared reference tables not found at {REFERENCE} (set PRISM_SHARED)")
    return REFERENCE


@pytest.fixture(scope="module")
def small(shared, tmp_path_factory) -> Path:
    """The two published tables a user's folder holds, cut to one dataset (all eight models) / one pair."""
    folder = tmp_path_factory.mktemp("small-reference")
    ind = pd.read_csv(shared / IND)
    ind[ind["dataset"] == ind["dataset"].iloc[0]].to_csv(folder / IND, index=False)
    ood = pd.read_csv(shared / OOD)
    ood[ood["pair"] == ood["pair"].iloc[0]].to_csv(folder / OOD, index=False)
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """R1 and R3: one model on the demo dataset, from two tasks with different names (demo_a, demo_b)."""
    root = tmp_path_factory.mktemp("two-tasks")
    emb = write_precomputed(root / "emb" / "Demo-Binary", {"train": 40, "val": 20, "test": 20}, dim=4).parent
    tasks = root / "tasks"
    tasks.mkdir()
    shutil.copy(REPO / "tasks" / "_prism_protocol.yaml", tasks)
    text = (REPO / "tasks" / "prism_demo.yaml").read_text(encoding="utf-8")
    assert text.startswith("task: prism_demo\n")
    out = []
    for folder, task in (("R1", "demo_a"), ("R3", "demo_b")):
        (tasks / f"{task}.yaml").write_text(text.replace("task: prism_demo\n", f"task: {task}\n", 1),
                                            encoding="utf-8")
        run_main("--task", str(tasks / f"{task}.yaml"), "--model", "precomputed", "--model-args", f"root={emb}",
                 "--set", "seeds=[42]", "--set", "label_fractions=[1.0]", "--set", "bootstrap.n=0", "--no-report",
                 "--quiet", "--output", str(root / folder), check=True)
        out.append(root / folder)
    return out[0], out[1]


def reference_copy(small: Path, folder: Path, *, drop: str | None = None) -> Path:
    """A writable user's folder holding the two tables of ``small``, without ``drop``."""
    folder.mkdir(parents=True)
    for name in (IND, OOD):
        if name != drop:
            shutil.copyfile(small / name, folder / name)
    return folder


def damage(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
        return
    df = pd.read_csv(path)
    if how == "no auroc column":
        df.drop(columns="auroc").to_csv(path, index=False)
    elif how == "words for numbers":
        df["auroc"] = df["auroc"].astype(object)
        df.loc[2, "auroc"] = "high"
        df.to_csv(path, index=False)
    elif how == "empty":
        path.write_bytes(b"")
    else:
        raise AssertionError(how)


def one_error_line(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def commands(runs, ref: Path | None, out: Path) -> dict[str, list[str]]:
    opt = ["--reference", str(ref)] if ref is not None else []
    return {"reference": ["reference", *opt, "--output", str(out / "ref_out")],
            "compare": ["compare", str(runs[0]), *opt],
            "report": ["report", str(runs[0]), *opt, "--output", str(out / "board"), *LIGHT],
            "findings": ["findings", *(opt or ["--reference", "PULLED"]), "--output", str(out / "f"), "--no-report"]}


def compat_error(ref: Path | None) -> str:
    from prism_plugin.compat import CompatError, PRISMEvaluator

    with pytest.raises(CompatError) as exc:
        PRISMEvaluator(results_dir=ref).reference_cri(1.0)
    assert isinstance(exc.value, ValueError) and "\n" not in str(exc.value)
    return str(exc.value)


# --------------------------------------------------------------------------- the one reader, every case
@pytest.mark.parametrize("file", [IND, OOD])
@pytest.mark.parametrize("how", HOWS)
def test_the_reader_names_a_missing_or_damaged_file_for_every_consumer(small, tmp_path, file, how):
    ref = reference_copy(small, tmp_path / "ref")
    damage(ref / file, how)
    kind = "indomain" if file == IND else "transfer"
    for name, consumer in CONSUMERS.items():
        if how == "missing" and file not in NEEDS[name]:  # done without, and named
            got = rf.resolve_reference(ref, consumer)
            assert got.kind == "dir" and kind not in got.tables and kind in got.missing, (name, got.missing)
            assert got.missing[kind].startswith(f"{consumer.label(ref)} has no {file}: "), (name, got.missing)
            continue
        with pytest.raises(PrismError) as exc:
            rf.resolve_reference(ref, consumer)
        msg = str(exc.value)
        assert msg.startswith(f"{consumer.label(ref)}: {file}"), (name, msg)
        assert DETAIL[how] in msg and f"({consumer.name} reads {file} for " in msg, (name, msg)
        assert "\n" not in msg and NO_COPY not in msg and "damaged" not in msg, (name, msg)


# --------------------------------------------------------------------------- a folder the user gives
def test_a_folder_without_ood_is_refused_by_the_consumers_that_need_it(small, runs, tmp_path):
    ref = reference_copy(small, tmp_path / "ref", drop=OOD)
    for name in ("reference", "compare"):
        line = one_error_line(run_main(*commands(runs, ref, tmp_path)[name]))
        assert f"--reference {ref}: {OOD} is missing" in line, line
        assert f"prism-run {name}" in line and "OOD stability" in line, line  # what needs it
        assert NO_COPY not in line
    msg = compat_error(ref)
    assert f"{OOD} is missing" in msg and str(ref) in msg and "reference_cri()" in msg, msg
    assert not (tmp_path / "ref_out").exists()


#: (consumer, file, damage): each command meets two or more cases, each damage two or more commands
CASES = [("reference", IND, "missing"), ("report", IND, "missing"), ("reference", IND, "no auroc column"),
         ("compare", OOD, "no auroc column"), ("findings", IND, "no auroc column"),
         ("compare", IND, "words for numbers"), ("findings", OOD, "words for numbers"),
         ("compat", OOD, "words for numbers"), ("report", OOD, "empty"), ("reference", OOD, "empty"),
         ("compat", IND, "empty")]


@pytest.mark.parametrize("name, file, how", CASES, ids=["-".join(c) for c in CASES])
def test_a_missing_or_damaged_file_is_one_line_naming_it(small, runs, tmp_path, name, file, how):
    ref = reference_copy(small, tmp_path / "ref")
    damage(ref / file, how)
    if name == "compat":
        msg = compat_error(ref)
        assert msg.startswith(f"results_dir={str(ref)!r}: {file}") and DETAIL[how] in msg, msg
        return
    line = one_error_line(run_main(*commands(runs, ref, tmp_path)[name]))
    assert line.startswith(f"prism-run: error: --reference {ref}: {file}"), line
    assert DETAIL[how] in line and f"`prism-run {name}`" in line and NO_COPY not in line, line
    for out in ("board", "ref_out", "f"):
        assert not (tmp_path / out).exists(), out  # nothing written


def test_the_leaderboard_without_ood_keeps_the_reference_models_and_names_the_file(small, runs, tmp_path):
    ref = reference_copy(small, tmp_path / "ref", drop=OOD)
    out = tmp_path / "board"
    proc = run_main("report", str(runs[0]), "--reference", str(ref), "--output", str(out), *LIGHT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if OOD in line]
    assert len(said) == 1 and str(ref) in said[0] and "no transfer AUROC" in said[0], proc.stderr
    md = (out / "report.md").read_text(encoding="utf-8")
    top = md.split("| # |")[0]  # above the leaderboard table
    assert f"has no {OOD}" in top and str(ref) in top
    lb = pd.read_csv(out / "tables" / "leaderboard.csv")
    reference_rows = lb.loc[lb["whose"] == "PRISM reference"]
    assert len(reference_rows) == 8  # not dropped
    assert reference_rows["transfer_auroc"].isna().all() and reference_rows["cri_100"].isna().all()
    # findings does without it too, and names it
    proc = run_main("findings", "--reference", str(ref), "--output", str(tmp_path / "f"), "--no-report",
                    "--only", "budget")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"has no {OOD}" in proc.stdout


# --------------------------------------------------------------------------- the pulled copy
@pytest.fixture(scope="module")
def pulled_once(shared, tmp_path_factory):
    """A copy installed by `reference pull` from a local mirror (served for the module), in a module cache."""
    from prism_plugin.commands import reference as refcmd

    root = tmp_path_factory.mktemp("mirror") / "results_v2"
    shutil.copytree(shared, root)
    for f in root.iterdir():
        f.chmod(0o644)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    cache = tmp_path_factory.mktemp("pulled-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRISM_CACHE_DIR", str(cache))
        dest = refcmd.pull(base_url=url, log=lambda *_: None)
    assert (dest / "SOURCE.json").is_file()
    yield cache, dest.relative_to(cache), functools.partial(refcmd.pull, base_url=url, log=lambda *_: None)
    server.shutdown()
    server.server_close()


@pytest.fixture
def pulled(pulled_once, tmp_path, monkeypatch):
    """The pulled copy in this test's own cache folder (``PRISM_CACHE_DIR``); re-pulls come from the mirror."""
    cache, rel, pull = pulled_once
    shutil.copytree(cache, tmp_path / "cache")
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    dest = tmp_path / "cache" / rel
    assert rf.pulled_dir() == dest
    return dest, pull, {"PRISM_CACHE_DIR": str(tmp_path / "cache")}


def change(path: Path, how: str) -> str:
    """Damage a pulled file; the problem the reader must name."""
    size = path.stat().st_size
    if how == "missing":
        path.unlink()
        return f"{path.name} is missing"
    if how == "empty":
        path.write_bytes(b"")
        return f"{path.name} has 0 bytes, expected {size}"
    if how == "one byte added":
        with open(path, "a") as fh:
            fh.write("\n")
        return f"{path.name} has {size + 1} bytes, expected {size}"
    data = bytearray(path.read_bytes())  # one digit changed, same size
    i = max(data.rfind(d) for d in b"0123456789")
    data[i] = ord("1") if data[i] != ord("1") else ord("2")
    path.write_bytes(bytes(data))
    return f"{path.name} has SHA-256 "


@pytest.mark.parametrize("file", [IND, OOD, "cri_components.csv"])
@pytest.mark.parametrize("how", ["missing", "empty", "one byte added", "one digit changed"])
def test_the_reader_names_a_damaged_pulled_copy_for_every_consumer(pulled, file, how):
    dest = pulled[0]
    problem = change(dest / file, how)
    for name, consumer in CONSUMERS.items():
        for got in (lambda: rf.resolve_reference(None, consumer), lambda: rf.open_reference(dest, consumer)):
            with pytest.raises(PrismError) as exc:
                got()
            msg = str(exc.value)
            assert msg.startswith(f"the pulled copy at {dest} is damaged: {problem}"), (name, msg)
            assert REPULL in msg and NO_COPY not in msg and "\n" not in msg, (name, msg)


def test_a_damaged_pulled_copy_is_named_as_damaged_by_every_consumer(pulled, runs, tmp_path):
    dest, pull, env = pulled
    for consumer in CONSUMERS.values():
        assert rf.resolve_reference(None, consumer).kind == "pulled"  # whole, it is read
    (dest / OOD).unlink()
    cmds = commands(runs, None, tmp_path)
    cmds["findings"][2] = str(dest)
    for name, args in cmds.items():
        line = one_error_line(run_main(*args))
        assert f"the pulled copy at {dest} is damaged: {OOD} is missing" in line, (name, line)
        assert REPULL in line and NO_COPY not in line, (name, line)
    # the console script in a fresh process: the cache folder comes from its environment
    line = one_error_line(prism_run(*cmds["compare"], env=env))
    assert f"the pulled copy at {dest} is damaged: {OOD} is missing" in line, line
    assert not (tmp_path / "board").exists() and not (tmp_path / "ref_out").exists()
    assert "the pulled copy at" in compat_error(None) and f"is damaged: {OOD} is missing" in compat_error(None)
    # a changed byte in a file the leaderboard does not read is damage too (checked against SOURCE.json)
    assert pull() == dest and (dest / OOD).is_file()  # without --force too: a damaged copy is pulled again
    with open(dest / "cri_components.csv", "a") as fh:
        fh.write("\n")
    line = one_error_line(run_main(*cmds["report"]))
    assert "is damaged: cri_components.csv has 1046 bytes, expected 1045" in line
    pull(force=True)
    proc = run_main(*cmds["compare"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"pulled to {dest})" in proc.stdout.splitlines()[0] and "8 reference models" in proc.stdout


def test_the_pull_advice_only_where_there_is_no_copy(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert rf.resolve_reference(None, rf.LEADERBOARD).kind == "paper"
    proc = run_main("report", str(runs[0]), "--output", str(tmp_path / "board"), *LIGHT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert NO_COPY in (tmp_path / "board" / "report.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- one run in two inputs
def test_the_same_run_in_two_folders_names_both_and_their_tasks(runs, tmp_path):
    r1, r3 = runs
    for args in (["report", str(r1), str(r3), "--output", str(tmp_path / "board")], ["compare", str(r1), str(r3)]):
        line = one_error_line(run_main(*args))
        assert "the same run appears twice" in line, line
        assert f"{r1 / 'runs.csv'} (task demo_a)" in line and f"{r3 / 'runs.csv'} (task demo_b)" in line, line
        assert "seed 42" in line and "dataset Demo-Binary" in line, line  # which run
        assert f"pass each run once (only one of {r1}, {r3})" in line, line
    assert not (tmp_path / "board").exists()
