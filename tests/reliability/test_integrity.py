"""Finished work is never lost and never silently wrong; files honour the umask.

* cells carry a checksum: an edited or damaged cell is recomputed, never reused into runs.csv;
* summary.json and the report carry the runs.csv SHA-256; a rerun killed after runs.csv leaves
  no summary or report that silently describes another table (readers skip and name it);
* a grid that drops runs of a folder's runs.csv is refused unless --overwrite; a larger grid keeps them;
* the default adapter weights fingerprint covers a checkpoint file's content;
* every results file and cache manifest gets the umask's mode, not tempfile's 0600.

Everything runs in-process on tiny precomputed embeddings (no model, no subprocess).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from prism_plugin import cli
from prism_plugin.errors import PrismError
from prism_plugin.results import CELL_FORMAT, ResultsDir, read_summary, report_problem, summary_dirs, summary_problem
from prism_plugin.storage import atomic_write_text
from prism_plugin.kept_runs import check_grid_kept
from tests.conftest import write_precomputed

GRID = ["--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[1,2]"]
N_GRID = 4
#: a report without the figure-drawing sections (the stamp and the notes are what is tested; 0.4 s, not 2 s)
LIGHT_REPORT = ["--disable", "report_basic", "--disable", "geometry_report", "--disable", "audit"]


@pytest.fixture
def emb(tmp_path) -> Path:
    """A precomputed-embeddings root for prism_demo (binary): 40/20/20 rows of 4 separable features."""
    return write_precomputed(tmp_path / "emb" / "Demo-Binary", {"train": 40, "val": 20, "test": 20}, dim=4).parent


def run(capsys, emb: Path, out: Path, *extra: str, grid=GRID, name: str | None = None, report=False):
    args = ["--task", "prism_demo", "--model", "precomputed", "--model-args",
            f"root={emb}" + (f",name={name}" if name else ""), "--quiet", "--output", str(out),
            "--cache-dir", str(out.parent / "cache"), *grid, *extra]
    rc = cli.main(args + (LIGHT_REPORT if report else ["--no-report"]))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_error_line(rc: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("prism-run: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


# -- 1. cells checksum ---------------------------------------------------------------------------------------
def test_cell_checksum_rejects_edits_and_old_formats(tmp_path):
    rd = ResultsDir(tmp_path)
    row = {"fraction": 0.1, "seed": 1, "auroc": np.float64(0.75), "ece": float("nan"), "classes": ("a", "b")}
    rd.save_cell("t", "f0.1-s1", "fp", row)
    got, why = rd.load_cell("t", "f0.1-s1", "fp")
    assert why is None and got["auroc"] == 0.75 and np.isnan(got["ece"]) and got["classes"] == ["a", "b"]
    path = rd.cell_path("t", "f0.1-s1")
    original = json.loads(path.read_text())
    for edit in ({"row": {**original["row"], "auroc": 0.99}}, {"fingerprint": "other"}, {"checksum": "0" * 64}):
        path.write_text(json.dumps({**original, **edit}))
        assert rd.load_cell("t", "f0.1-s1", "fp") == (None, f"{path.name}: checksum mismatch (edited or corrupt)")
    text = json.dumps(original)  # bit rot inside a number: still valid JSON
    path.write_text(text.replace('"auroc": 0.75', '"auroc": 0.25'))
    assert "checksum mismatch" in rd.load_cell("t", "f0.1-s1", "fp")[1]
    legacy = {k: v for k, v in original.items() if k != "checksum"}
    path.write_text(json.dumps({**legacy, "format": 1}))  # written by an older prism-plugin: no checksum
    assert f"not {CELL_FORMAT}" in rd.load_cell("t", "f0.1-s1", "fp")[1]


def test_edited_cell_is_recomputed_into_identical_runs_csv(tmp_path, emb, capsys):
    out = tmp_path / "out"
    assert run(capsys, emb, out)[0] == 0
    first = (out / "runs.csv").read_bytes()
    cell = sorted((out / "cells").glob("*.json"))[0]
    payload = json.loads(cell.read_text())
    payload["row"]["auroc"] = 0.999  # a hand edit that keeps the file valid JSON
    cell.write_text(json.dumps(payload))
    rc, stdout, err = run(capsys, emb, out)
    assert rc == 0, err
    assert "recomputed 1 saved run(s) not reusable: checksum mismatch (edited or corrupt)" in stdout
    assert (out / "runs.csv").read_bytes() == first
    assert read_summary(out)["stale_cells"] == [{"cell": payload["run_id"],
                                                 "reason": "checksum mismatch (edited or corrupt)"}]


@pytest.mark.parametrize("name,make", [
    ("cells", lambda p: p.write_text("x")),
    ("runs.csv", lambda p: p.mkdir()),
    ("summary.json", lambda p: p.mkdir()),
    ("figures", lambda p: p.write_text("x")),
])
def test_wrong_kind_of_file_in_the_results_folder_is_one_line(tmp_path, emb, capsys, name, make):
    out = tmp_path / "out"
    out.mkdir()
    make(out / name)
    line = one_error_line(*run(capsys, emb, out)[::2])
    assert str(out / name) in line and "move it aside or choose another --output" in line


# -- 2. summary/report consistency with runs.csv --------------------------------------------------------------
def test_killed_rerun_leaves_no_silently_stale_summary_or_report(tmp_path, emb, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run(capsys, emb, out, report=True)[0] == 0
    assert summary_problem(out) is None and report_problem(out) is None
    stamp = read_summary(out)["runs_sha256"]
    assert f"runs_sha256: {stamp}" in (out / "report.md").read_text()
    assert f"runs_sha256: {stamp}" in (out / "report.html").read_text()

    real = ResultsDir.write_json

    def killed(self, name, obj):  # the rerun dies right after runs.csv
        if name == "summary.json":
            raise KeyboardInterrupt
        return real(self, name, obj)

    monkeypatch.setattr(ResultsDir, "write_json", killed)
    bigger = ["--set", "label_fractions=[0.25,0.5,1.0]", "--set", "seeds=[1,2]"]
    assert run(capsys, emb, out, grid=bigger, report=True)[0] == 130
    monkeypatch.setattr(ResultsDir, "write_json", real)
    data = json.loads((out / "summary.json").read_text())
    assert "describes the earlier table" in data["stale"] and data["n_runs"] == N_GRID  # kept, visibly marked
    assert not (out / "report.md").exists() and not (out / "report.html").exists()
    assert "is out of date" in summary_problem(out)
    for read in (summary_dirs, read_summary):  # every reader refuses the folder, naming the file
        with pytest.raises(PrismError, match="out of date"):
            read([out] if read is summary_dirs else out)

    rc, stdout, err = run_report(capsys, out)
    assert rc == 2 and not (out / "report.md").exists(), err  # no report of numbers that do not belong together

    rc, _, err = run(capsys, emb, out, grid=bigger, report=True)  # the same command again: all consistent
    assert rc == 0, err
    assert summary_problem(out) is None and report_problem(out) is None
    assert len(read_summary(out)["reused_cells"]) == 6


def run_report(capsys, out: Path):
    rc = cli.main(["report", str(out), *LIGHT_REPORT])
    cap = capsys.readouterr()
    said = [line for line in cap.err.splitlines() if "summary.json" in line]
    assert len(said) == 1 and said[0].startswith("prism-run: error: ") and "out of date" in said[0], cap.err
    assert str(out / "summary.json") in said[0] and "rerun the same prism-run command" in said[0]
    return rc, cap.out, cap.err


def test_edited_runs_csv_is_detected_by_the_readers(tmp_path, emb, capsys):
    out = tmp_path / "out"
    assert run(capsys, emb, out)[0] == 0
    (out / "runs.csv").write_text((out / "runs.csv").read_text().replace("0.5,", "0.55,", 1))
    assert "describes another runs.csv" in summary_problem(out)
    with pytest.raises(PrismError, match="describes another runs.csv"):
        summary_dirs([tmp_path])
    assert summary_dirs([tmp_path], verified=False) == [out]


# -- 3. grid changes into an existing folder -------------------------------------------------------------------
def test_smaller_grid_is_refused_larger_one_keeps_the_runs(tmp_path, emb, capsys):
    out = tmp_path / "out"
    assert run(capsys, emb, out)[0] == 0
    before = (out / "runs.csv").read_bytes()
    cells = sorted(p.name for p in (out / "cells").iterdir())
    for grid in (["--set", "label_fractions=[1.0]"], ["--set", "seeds=[1]"]):
        line = one_error_line(*run(capsys, emb, out, grid=GRID + grid)[::2])
        assert f"--output {out}" in line and "label_fractions [0.5, 1] x seeds [1, 2]" in line
        assert "would drop 2 of them" in line and "--overwrite" in line
    line = one_error_line(*run(capsys, emb, out, name="Other")[::2])  # another model into the same folder
    assert "model emb" in line and "model Other" in line and "would drop 4" in line
    assert (out / "runs.csv").read_bytes() == before
    rc, _, err = run(capsys, emb, out, grid=["--set", "label_fractions=[0.5,1.0]", "--set", "seeds=[1,2,3]"])
    assert rc == 0, err
    s = read_summary(out)
    assert s["n_runs"] == 6 and len(s["reused_cells"]) == N_GRID
    assert set(cells) <= {p.name for p in (out / "cells").iterdir()}


def test_overwrite_replaces_the_table_and_keeps_the_cells(tmp_path, emb, capsys):
    from prism_plugin.plugins import get_host
    from prism_plugin.runner import JobOptions, make_adapter, run_job
    from prism_plugin.tasks.index import default_index

    out = tmp_path / "out"
    assert run(capsys, emb, out)[0] == 0
    cells = sorted(p.name for p in (out / "cells").iterdir())
    host = get_host()
    (_, task), = default_index(host).expand_args(["prism_demo"], ["label_fractions=[1.0]", "seeds=[1]"])
    adapter = make_adapter(host, "precomputed", {"root": str(emb)})
    result = run_job(task, adapter, host, JobOptions(output=out, cache_dir=tmp_path / "cache", progress=False,
                                                     report=False, log=lambda _m: None, overwrite=True))
    assert len(result.runs) == 1 and result.summary["reused_cells"] == ["f1-s1"]
    assert sorted(p.name for p in (out / "cells").iterdir()) == cells


def test_runs_csv_that_is_not_a_prism_table_is_not_replaced(tmp_path):
    target = tmp_path / "runs.csv"
    target.write_text("name,score\nmine,1\n")
    with pytest.raises(Exception, match="not a prism-run table.*--overwrite"):
        check_grid_kept(target, [("t", "m", 1.0, 1)], overwrite=False, where="group g")
    check_grid_kept(target, [("t", "m", 1.0, 1)], overwrite=True, where="group g")
    target.write_text("task,model,fraction,seed\nt,m,1.0,1\nt,m,0.5,1\nt,m,0.2")  # cut-off last row: not a run
    check_grid_kept(target, [("t", "m", 1.0, 1), ("t", "m", 0.5, 1)], overwrite=False, where="group g")


# -- 4. the default weights fingerprint -----------------------------------------------------------------------
def _checkpoint_adapter_class():
    from prism_plugin.embed.adapter import Adapter, Preprocessing

    class ScaledMeans(Adapter):  # follows examples/prism-adapter-example; no weights_fingerprint of its own
        name = "scaled_means"
        display_name = "ScaledMeans"
        embed_dim = 3
        preprocessing = Preprocessing(resize=16, crop=16, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                                      interpolation="bilinear")

        def __init__(self, *, checkpoint: str, **base):
            super().__init__(**base)
            self.checkpoint = checkpoint

        @classmethod
        def accepted_args(cls):
            return super().accepted_args() | {"checkpoint"}

        def build(self, device):
            self._w = float(np.load(self.checkpoint))

        def forward(self, batch):
            means = batch.flatten(2).mean(dim=2)
            return means * means.new_tensor([self._w, 1.0, 1.0])  # the direction depends on the weight

    return ScaledMeans


def test_default_weights_fingerprint_covers_the_checkpoint_content(tmp_path):
    Adapter = _checkpoint_adapter_class()
    ckpt = tmp_path / "w.npy"
    np.save(ckpt, np.float64(2.0))
    a = Adapter(checkpoint=str(ckpt))
    first = a.fingerprint()
    assert a.weights_fingerprint() != "" and first == Adapter(checkpoint=str(ckpt)).fingerprint()
    moved = tmp_path / "elsewhere.npy"
    moved.write_bytes(ckpt.read_bytes())
    assert Adapter(checkpoint=str(moved)).fingerprint() == first  # the content counts, not the path
    import copy

    assert copy.deepcopy(a).fingerprint() == first  # rebuilt through a bare __new__, as pickling does
    np.save(ckpt, np.float64(3.0))
    os.utime(ckpt, ns=(os.stat(ckpt).st_atime_ns, os.stat(ckpt).st_mtime_ns + 10**9))
    assert Adapter(checkpoint=str(ckpt)).fingerprint() != first
    folder = tmp_path / "ckpt_dir"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"one")
    f1 = Adapter(checkpoint=str(folder)).fingerprint()
    (folder / "model.safetensors").write_bytes(b"two")
    assert Adapter(checkpoint=str(folder)).fingerprint() != f1
    assert Adapter(checkpoint="hub-name", batch_size=8).fingerprint() != \
        Adapter(checkpoint="other-name", batch_size=8).fingerprint()  # not a file: the value counts
    assert Adapter(checkpoint="x", batch_size=8).fingerprint() == Adapter(checkpoint="x", batch_size=16).fingerprint()


def test_rewritten_checkpoint_re_extracts_the_embeddings(tmp_path, monkeypatch):
    from PIL import Image

    from prism_plugin.embed.load import load_embeddings
    from prism_plugin.plugins import get_host
    from prism_plugin.tasks.index import default_index

    data = tmp_path / "tiles"
    for split in ("train", "val", "test"):
        for k, cls in enumerate(("a", "b")):
            (data / split / cls).mkdir(parents=True)
            for i in range(2):
                Image.fromarray(np.full((16, 16, 3), 40 + 100 * k + i, np.uint8)).save(data / split / cls / f"{i}.png")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "ckpt_task.yaml").write_text(
        f"task: ckpt_task\ndataset: Ckpt\nclass_names: [a, b]\nsource: {{type: imagefolder, root: {data}}}\n"
        "splits: {train: train, val: val, test: test}\n")
    host = get_host()
    task = default_index(host, [tasks]).load_task("ckpt_task")
    opts = SimpleNamespace(limit=None, cache_dir=tmp_path / "cache", device="cpu", num_workers=0, progress=False,
                           allow_size_mismatch=False)
    Adapter = _checkpoint_adapter_class()
    ckpt = tmp_path / "w.npy"
    np.save(ckpt, np.float64(2.0))

    def embed():
        splits, info = load_embeddings(task, Adapter(checkpoint=str(ckpt)), opts, only=("train",), host=host)
        return np.asarray(splits["train"].X), info["cache"]["train"]

    x1, how = embed()
    assert how == "extracted" and embed()[1] == "hit"
    np.save(ckpt, np.float64(5.0))  # same size, new content
    os.utime(ckpt, ns=(os.stat(ckpt).st_atime_ns, os.stat(ckpt).st_mtime_ns + 10**9))
    x2, how = embed()
    assert how == "extracted" and not np.allclose(x1, x2)


# -- 5. the umask ------------------------------------------------------------------------------------------------
@pytest.fixture
def umask():
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def _modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_get_the_umask_mode(tmp_path, umask, mask, mode):
    umask(mask)
    atomic_write_text(tmp_path / "x.json", "{}\n")
    assert stat.S_IMODE((tmp_path / "x.json").stat().st_mode) == mode


def test_results_and_cache_files_honour_the_umask(tmp_path, emb, capsys, umask):
    umask(0o027)
    out = tmp_path / "out"
    assert run(capsys, emb, out)[0] == 0
    modes = _modes(out)
    assert {"runs.csv", "summary.json"} <= set(modes) and any(k.startswith("cells/") for k in modes)
    assert set(modes.values()) == {0o640}, modes
    from prism_plugin.embed.cache import EmbeddingCache

    entry = EmbeddingCache(tmp_path / "cache").entry("a" * 16, "b" * 16, "train")
    entry.dir.mkdir(parents=True)
    atomic_write_text(entry.manifest_path, "{}")  # how the cache writes its manifests and shard records
    assert stat.S_IMODE(entry.manifest_path.stat().st_mode) == 0o640


def test_demo_tiles_folder_honours_the_umask(tmp_path, umask, monkeypatch):
    from prism_plugin.data import demo

    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    umask(0o022)
    root = demo.ensure_demo_dataset(next(iter(demo.VARIANTS)), {"train": 1}, size=16)
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert set(_modes(root).values()) == {0o644}
