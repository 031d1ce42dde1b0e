"""Demo tiles: under the job's --cache-dir, nothing partial left by a failure or an interrupt,
orphans of a killed generation swept at the next start, a full disk named in one line."""

from __future__ import annotations

import errno
import os
import time

import pytest

from prism_plugin.data import demo
from prism_plugin.data.datacache import data_cache_root, using_cache_dir
from prism_plugin.errors import PrismError
from prism_plugin import storage

SMALL = {"train": 2, "val": 1, "test": 1}


def _hidden(folder):
    return sorted(p.name for p in (folder / "datasets").iterdir() if p.name.startswith(".")) \
        if (folder / "datasets").is_dir() else []


def test_tiles_follow_the_jobs_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "env-cache"))
    with using_cache_dir(tmp_path / "job-cache"):
        assert data_cache_root() == tmp_path / "job-cache"
        root = demo.ensure_demo_dataset("binary", SMALL, size=16)
    assert root.parent == tmp_path / "job-cache" / "datasets" and (root / "COMPLETE").exists()
    assert len(list((root / "train").rglob("*.png"))) == 4
    assert not (tmp_path / "env-cache").exists()
    assert data_cache_root() == tmp_path / "env-cache"  # outside the block: the default again


@pytest.mark.parametrize("fault", [RuntimeError("bug"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_generation_leaves_nothing(tmp_path, monkeypatch, fault):
    calls = []
    real = demo.render_tile

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise fault
        return real(*args, **kwargs)

    monkeypatch.setattr(demo, "render_tile", flaky)
    with using_cache_dir(tmp_path), pytest.raises(type(fault)):
        demo.ensure_demo_dataset("binary", SMALL, size=16)
    assert _hidden(tmp_path) == [] and list((tmp_path / "datasets").iterdir()) == []


def test_orphans_of_a_killed_generation_are_swept(tmp_path):
    parent = tmp_path / "datasets"
    parent.mkdir()
    host = demo._tmp_prefix("x").split(".")[2]
    dead = parent / f".demo-binary-0123456789abcdef.{host}.999999999.abc"  # pid that cannot exist
    old = parent / ".demo-binary-0123456789abcdef.otherhost.12.xyz"  # another host's, untouched for a day
    live = parent / f".demo-binary-0123456789abcdef.{host}.{os.getppid()}.q"  # a live generator's
    for folder in (dead, old, live):
        (folder / "train" / "normal").mkdir(parents=True)
    day_ago = time.time() - 24 * 3600
    os.utime(old, (day_ago, day_ago))
    with using_cache_dir(tmp_path):
        demo.ensure_demo_dataset("binary", SMALL, size=16)
    assert _hidden(tmp_path) == [live.name]


def test_full_disk_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "free_bytes", lambda folder: 10_000)
    with using_cache_dir(tmp_path), pytest.raises(PrismError) as info:
        demo.ensure_demo_dataset("binary", SMALL, size=16)
    msg = str(info.value)
    assert msg.startswith(f"cannot write {tmp_path / 'datasets'}: not enough free space for the demo tiles")
    assert "needs" in msg and "free" in msg and "--cache-dir" in msg
    monkeypatch.undo()

    def enospc(self, fp, *a, **k):  # the disk fills while a tile is written (no file name from the OS)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("PIL.Image.Image.save", enospc)
    with using_cache_dir(tmp_path), pytest.raises(PrismError) as info:
        demo.ensure_demo_dataset("binary", SMALL, size=16)
    msg = str(info.value)
    assert msg.startswith("cannot write ") and "normal_0000.png: no space left on the device" in msg
    assert "--cache-dir" in msg and _hidden(tmp_path) == []


def test_unwritable_cache_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with using_cache_dir(tmp_path / "file" / "cache"), pytest.raises(PrismError) as info:
        demo.ensure_demo_dataset("binary", SMALL, size=16)
    assert str(info.value).startswith(f"cannot write {tmp_path / 'file'}")
    assert "a file is in the way" in str(info.value) and "--cache-dir" in str(info.value)



def test_a_job_puts_demo_tiles_in_its_cache_dir_not_prism_cache_dir(tmp_path, monkeypatch):
    """An unusable $PRISM_CACHE_DIR beside a writable --cache-dir: the job's data go to the latter."""
    from prism_plugin.embed.load import load_embeddings
    from prism_plugin.plugins import get_host
    from prism_plugin.runner import JobOptions
    from prism_plugin.tasks.index import default_index

    from tests.conftest import mean_colour_adapter

    Means = mean_colour_adapter(16)

    (tmp_path / "blocker").write_text("x")
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "blocker" / "cache"))  # nothing can be written there
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny_demo.yaml").write_text(
        "task: tiny_demo\ndataset: TinyDemo\nclass_names: [normal, tumour]\n"
        "source: {type: demo, variant: binary, size: 16, per_class: {train: 3, val: 2, test: 2}}\n"
        "splits: {train: train, val: val, test: test}\n")
    host = get_host()
    task = default_index(host, [tmp_path / "tasks"]).load_task("tiny_demo")
    opts = JobOptions(output=tmp_path / "out", cache_dir=tmp_path / "job-cache", device="cpu", num_workers=0,
                      progress=False, allow_size_mismatch=True)
    splits, _info = load_embeddings(task, Means(), opts, only=("test",), host=host)
    assert splits["test"].X.shape == (4, 3)
    assert [p.name[:12] for p in (tmp_path / "job-cache" / "datasets").iterdir()] == ["demo-binary-"]
