"""Bad label and feature files, split definitions and source split names: one line naming the file.

Real files in tmp_path, read by the real readers and by ``prism-run`` in-process (``cli.main``):
every label file must hold 1-D integers (checked before ``--limit`` picks rows), every ``.npy`` is
checked from its own header (never NumPy's pickle advice), identical split definitions are refused
before anything is extracted unless the task allows them, and split names never reach internal
markers or paths outside the dataset root.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from prism_plugin.cli import main
from prism_plugin.data.arrays import NpzSource
from prism_plugin.data.folder import ImageFolderSource
from prism_plugin.data.precomputed import read_embedding_split
from prism_plugin.errors import PrismError
from prism_plugin.tasks.schema import SplitConfig


def emb_tree(root: Path, n=(40, 20, 20), d=4, labels=None) -> Path:
    folder = root / "emb" / "Demo-Binary"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, m in zip(("train", "val", "test"), n):
        y = np.arange(m) % 2
        np.save(folder / f"{split}_features.npy", (rng.normal(size=(m, d)) + y[:, None]).astype(np.float32))
        np.save(folder / f"{split}_labels.npy", y if labels is None else labels(y))
    return folder


def run(tmp_path, capsys, *args) -> tuple[int, str]:
    rc = main(["--task", "prism_demo", "--model", "precomputed", "--output", str(tmp_path / "out"), "--quiet",
               "--no-report", "--set", "label_fractions=[1.0]", "--set", "seeds=[42]", *args])
    return rc, capsys.readouterr().err


BAD_LABELS = {
    "one-hot": (lambda y: np.eye(2, dtype=np.int64)[y], "got shape (40, 2): one-hot"),
    "column": (lambda y: y[:, None], "got shape (40, 1)"),
    "float": (lambda y: y.astype(np.float64), "got floats"),
    "bool": (lambda y: y.astype(bool), "got bool"),
    "string": (lambda y: np.where(y == 0, "normal", "tumour"), "got strings"),
}


@pytest.mark.parametrize("kind", sorted(BAD_LABELS))
def test_label_files_must_hold_1d_integers(tmp_path, kind):
    make, needle = BAD_LABELS[kind]
    folder = emb_tree(tmp_path, labels=make)
    with pytest.raises(PrismError) as info:
        read_embedding_split(folder, "train")
    msg = str(info.value)
    assert msg.startswith(str(folder / "train_labels.npy")) and "labels must be 1-D integers" in msg
    assert needle in msg and "\n" not in msg


def test_one_hot_labels_under_limit_name_the_label_file(tmp_path, capsys):
    folder = emb_tree(tmp_path, labels=lambda y: np.eye(2, dtype=np.int64)[y])
    rc, err = run(tmp_path, capsys, "--model-args", f"root={folder.parent}", "--limit", "10")
    assert rc == 2 and "train_labels.npy: labels must be 1-D integers" in err and "feature rows" not in err
    assert not (tmp_path / "out").exists()


def test_short_labels_blame_the_label_file(tmp_path):
    folder = emb_tree(tmp_path)
    np.save(folder / "test_labels.npy", np.arange(18) % 2)
    with pytest.raises(PrismError, match="20 rows in test_features.npy but 18 labels in test_labels.npy"):
        read_embedding_split(folder, "test")


def _corrupt(folder: Path, kind: str) -> Path:
    path = folder / "test_labels.npy"
    if kind == "0-byte":
        path.write_bytes(b"")
    elif kind == "0-d":
        np.save(path, np.array(1))
    elif kind == "header":
        path.write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': garbage" + b" " * 100)
    elif kind == "foreign":
        path.write_bytes(b"\x80\x04\x95 a pickle, not an array")
    elif kind == "truncated":
        path.write_bytes(path.read_bytes()[:-24])
    elif kind == "object":
        np.save(path, np.array([0, 1] * 10, dtype=object), allow_pickle=True)
    return path


@pytest.mark.parametrize("kind,needle", [
    ("0-byte", "the file is empty (0 bytes)"), ("0-d", "got a single value (a 0-d array)"),
    ("header", "not a valid .npy array"), ("foreign", "not a valid .npy array"),
    ("truncated", "truncated (136 of 160 data bytes"), ("object", "never read without pickle"),
])
def test_bad_npy_files_get_one_line_and_no_pickle_advice(tmp_path, kind, needle):
    folder = emb_tree(tmp_path)
    path = _corrupt(folder, kind)
    with pytest.raises(PrismError) as info:
        read_embedding_split(folder, "test")
    msg = str(info.value)
    assert msg.startswith(str(path)) and needle in msg, msg
    assert "allow_pickle" not in msg and "\n" not in msg


def test_bad_feature_files(tmp_path, capsys):
    folder = emb_tree(tmp_path)
    np.save(folder / "val_features.npy", np.arange(20, dtype=np.float32))
    with pytest.raises(PrismError, match=r"val_features.npy: features must be a 2-D .*reshape\(-1, 1\)"):
        read_embedding_split(folder, "val")
    X = np.load(folder / "test_features.npy")
    X[3, 1] = np.inf
    np.save(folder / "test_features.npy", X)
    np.save(folder / "val_features.npy", np.ones((20, 4), dtype=np.float32))
    rc, err = run(tmp_path, capsys, "--model-args", f"root={folder.parent}")
    assert rc == 2 and "test_features.npy: features contain NaN or inf (first in row 3)" in err, err


def test_identical_val_and_test_files_refused_then_allowed(tmp_path, capsys):
    folder = emb_tree(tmp_path)
    for suffix in ("features", "labels"):
        (folder / f"test_{suffix}.npy").write_bytes((folder / f"val_{suffix}.npy").read_bytes())
    rc, err = run(tmp_path, capsys, "--model-args", f"root={folder.parent}")
    assert rc == 2 and "splits val and test are the same data" in err and "allow_split_overlap: [val, test]" in err
    rc, err = run(tmp_path, capsys, "--model-args", f"root={folder.parent}", "--set", "allow_split_overlap=[val,test]")
    assert rc == 0, err
    import json

    flags = json.loads((tmp_path / "out" / "summary.json").read_text()).get("flags", [])
    assert any(f.get("flag") == "split_overlap" and f.get("level") == "allowed" for f in flags), flags


def test_same_split_name_refused_before_reading_data(tmp_path, capsys):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "same.yaml").write_text("task: same_split\ndataset: X\nclass_names: [a, b]\nsource: {type: precomputed}\n"
                                     "splits: {train: train, val: test, test: test}\n")
    (tmp_path / "emb" / "X").mkdir(parents=True)  # no arrays at all: the definitions alone are refused
    rc = main(["--task", "same_split", "--include-path", str(tasks), "--model", "precomputed", "--model-args",
               f"root={tmp_path / 'emb'}", "--quiet", "--no-report", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "splits val and test are the same data (both are split 'test' of X)" in err, err
    assert "same.yaml" in err and not (tmp_path / "out").exists()
    (tasks / "same.yaml").write_text((tasks / "same.yaml").read_text() + "allow_split_overlap: [val, tset]\n")
    assert main(["validate", str(tasks / "same.yaml")]) == 2
    assert "allow_split_overlap" in capsys.readouterr().err


def test_builtin_hematology_tasks_declare_their_overlap():
    from prism_plugin.plugins import get_host
    from prism_plugin.tasks.index import default_index

    task = default_index(get_host()).load("hema_matek")
    assert task.extras["allow_split_overlap"] == [["val", "test"]]
    assert (task.splits["val"].name, task.splits["test"].name) == ("heldout", "heldout")


# ------------------------------------------------------------------ image sources
def _task(**kw):
    base = dict(name="t", file="t.yaml", dataset="D", class_names=("a", "b"), n_classes=2, split=None, columns={})
    base.update(kw)
    return SimpleNamespace(**base)


def _folder_tree(root: Path, splits=("all", "test")) -> None:
    rng = np.random.default_rng(0)
    for split in splits:
        for cname in ("a", "b"):
            for k in range(2):
                p = root / split / cname / f"{k}.png"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(p)


def test_split_folder_named_all_and_bad_split_names(tmp_path):
    _folder_tree(tmp_path)
    task = _task(splits={"train": SplitConfig("all"), "test": SplitConfig("test")})
    assert len(ImageFolderSource(task, root=str(tmp_path)).split("train")) == 4  # the folder named 'all'
    task = _task(splits={"train": SplitConfig("train"), "val": SplitConfig("val")},
                 split={"procedure": "shuffle", "seed": 0, "from": ["all", "test"], "parts": {"train": 0.5, "val": "rest"}})
    src = ImageFolderSource(task, root=str(tmp_path))
    assert len(src.split("train")) + len(src.split("val")) == 8
    for bad in ("../escape", "/etc", "..", "a/b"):
        task = _task(splits={"train": SplitConfig(bad)})
        with pytest.raises(PrismError, match="must be one plain folder or file name"):
            ImageFolderSource(task, root=str(tmp_path)).split("train")


def test_no_all_folder_means_every_split_folder(tmp_path):
    _folder_tree(tmp_path, ("train", "test"))
    task = _task(splits={"train": SplitConfig("x"), "val": SplitConfig("y")},
                 split={"procedure": "shuffle", "seed": 0, "from": ["all", "test"], "parts": {"x": 0.5, "y": "rest"}})
    src = ImageFolderSource(task, root=str(tmp_path))
    assert len(src.split("train")) + len(src.split("val")) == 12  # train + test, then test again


def test_npz_labels_one_hot_float_and_corrupt(tmp_path):
    imgs = np.zeros((6, 4, 4, 3), dtype=np.uint8)
    task = _task(splits={"train": SplitConfig("train")})
    good = np.arange(6) % 2
    np.savez(tmp_path / "ok.npz", train_images=imgs, train_labels=good[:, None].astype(np.uint8))  # MedMNIST (N, 1)
    assert NpzSource(task, root=str(tmp_path), file="ok.npz").split("train").labels.tolist() == good.tolist()
    for name, labels, needle in (("onehot", np.eye(2, dtype=np.uint8)[good], "got shape (6, 2): one-hot"),
                                 ("float", good.astype(np.float32), "got floats")):
        np.savez(tmp_path / f"{name}.npz", train_images=imgs, train_labels=labels)
        with pytest.raises(PrismError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            NpzSource(task, root=str(tmp_path), file=f"{name}.npz").split("train")
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(PrismError, match="broken.npz: not a valid .npz archive"):
        NpzSource(task, root=str(tmp_path), file="broken.npz").split("train")
    with pytest.raises(PrismError, match="source.images_key"):
        NpzSource(task, root=str(tmp_path), file="ok.npz", images_key="{split}_{x}").split("train")
