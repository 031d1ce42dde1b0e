"""Dataset sources on small real files written to tmp_path: folders of PNGs, manifests, HDF5, NPZ,
parquet through Hugging Face ``datasets``, embedding trees; split procedures against the libraries
they reproduce; the offline / missing-data messages."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tests.conftest import needs
from PIL import Image

from prism_plugin.data.arrays import H5Source, NpzSource
from prism_plugin.data.folder import ImageFolderSource
from prism_plugin.data.precomputed import read_embedding_split, write_embedding_split
from prism_plugin.data.records import RecordsSource
from prism_plugin.data.splits import random_split_lengths, run_split_procedure
from prism_plugin.errors import PrismError
from prism_plugin.tasks.schema import SplitConfig


def make_task(class_names=(), n_classes=None, splits=("train", "val", "test"), split=None, names=None, **kw):
    names = names or {}
    return SimpleNamespace(
        name="t", file="t.yaml", dataset="D", class_names=tuple(class_names),
        n_classes=n_classes or len(class_names), split=split, columns={},
        splits={s: SplitConfig(names.get(s, s)) for s in splits}, **kw)


def png(path: Path, seed: int, size: int = 8) -> np.ndarray:
    a = np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(a).save(path)
    return a


def tree(root: Path, layout: dict[str, dict[str, int]]) -> None:
    """{split: {class: n}} -> root/split/class/img_k.png (split '' = flat)."""
    seed = 0
    for split, classes in layout.items():
        for cname, n in classes.items():
            for k in range(n):
                png(root / split / cname / f"img_{k:02d}.png", seed)
                seed += 1


# ---------------------------------------------------------------- image folders

def test_imagefolder_order_and_labels_match_torchvision(tmp_path):
    from torchvision.datasets import ImageFolder

    tree(tmp_path, {"train": {"b_cls": 3, "a_cls": 2, "c_cls": 4}})
    (tmp_path / "train" / "a_cls" / "notes.txt").write_text("not an image")
    task = make_task(class_names=("a_cls", "b_cls", "c_cls"), splits=("train",))
    s = ImageFolderSource(task, root=str(tmp_path)).split("train")
    ref = ImageFolder(str(tmp_path / "train"))
    assert [Path(p) for p, _ in ref.samples] == s.paths
    assert s.labels.tolist() == [y for _, y in ref.samples] == [0, 0, 1, 1, 1, 2, 2, 2, 2]


def test_imagefolder_class_map_drop_and_unknown_folder(tmp_path):
    tree(tmp_path, {"": {"0_N": 2, "5_DCIS": 3, "junk": 1}})
    task = make_task(class_names=("N", "DCIS"), splits=("train",), split=None, names={"train": "all"})
    src = ImageFolderSource(task, root=str(tmp_path), layout="flat", class_map={"N": ["0_N"], "DCIS": ["5_DCIS"]},
                            drop_classes=["junk"])
    assert src.split("train").labels.tolist() == [0, 0, 1, 1, 1]
    with pytest.raises(PrismError, match=r"raw class\(es\) \['junk'\].*drop_classes"):
        ImageFolderSource(task, root=str(tmp_path), layout="flat",
                          class_map={"N": ["0_N"], "DCIS": ["5_DCIS"]}).split("train")
    with pytest.raises(PrismError, match=r"class\(es\) \['DCIS'\] match no images.*'5_DCIS'"):
        ImageFolderSource(task, root=str(tmp_path), layout="flat", class_map={"N": ["0_N"], "DCIS": ["5_DICS"]},
                          drop_unmapped=True).split("train")


def test_fingerprint_follows_content_labels_and_limit(tmp_path):
    tree(tmp_path, {"train": {"a": 4, "b": 4}})
    task = make_task(class_names=("a", "b"), splits=("train",))
    fp1 = ImageFolderSource(task, root=str(tmp_path)).split("train").fingerprint
    assert ImageFolderSource(task, root=str(tmp_path)).split("train").fingerprint == fp1
    lim = ImageFolderSource(task, root=str(tmp_path)).split("train", limit=4)
    assert lim.labels.tolist() == [0, 0, 1, 1] and lim.fingerprint != fp1
    png(tmp_path / "train" / "b" / "img_00.png", 999)  # one pixel array changed
    assert ImageFolderSource(task, root=str(tmp_path)).split("train").fingerprint != fp1


def test_missing_folder_message_names_dataset_path_and_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_DATA_DIR", str(tmp_path))
    task = make_task(class_names=("a", "b"), splits=("train",))
    with pytest.raises(PrismError) as exc:
        ImageFolderSource(task, root="nowhere").split("train")
    msg = str(exc.value)
    assert "dataset 'D'" in msg and str(tmp_path / "nowhere" / "train") in msg
    assert "--set source.root=DIR" in msg and "$PRISM_DATA_DIR" in msg


# ---------------------------------------------------------------- split procedures

def test_random_split_is_torch_random_split_of_the_imagefolder(tmp_path):
    import torch
    from torch.utils.data import random_split
    from torchvision.datasets import ImageFolder

    tree(tmp_path, {"": {"x": 7, "y": 5, "z": 8}})
    spec = {"procedure": "random_split", "seed": 42, "from": "all", "parts": {"train": 0.7, "val": 0.15, "test": 0.15},
            "remainder": "last"}
    task = make_task(class_names=("x", "y", "z"), split=spec)
    src = ImageFolderSource(task, root=str(tmp_path), layout="flat")
    ref = ImageFolder(str(tmp_path))
    n = len(ref)
    lengths = [int(0.7 * n), int(0.15 * n), n - int(0.7 * n) - int(0.15 * n)]  # the reference's integer lengths
    subsets = random_split(ref, lengths, generator=torch.Generator().manual_seed(42))
    for name, sub in zip(("train", "val", "test"), subsets):
        got = src.split(name)
        assert got.paths == [Path(ref.samples[i][0]) for i in sub.indices]
        assert got.labels.tolist() == [ref.samples[i][1] for i in sub.indices]


def test_split_sizes_of_the_protocol():
    # LungHist700: floor(0.7 N), floor(0.15 N), remainder; CRC: 70,000/15,000/15,000 (PROTOCOL §1.2)
    assert random_split_lengths(691, [0.7, 0.15, 0.15]) == [483, 103, 105]
    assert random_split_lengths(100_000, [0.7, 0.15, 0.15]) == [70_000, 15_000, 15_000]
    assert random_split_lengths(691, [0.7, 0.15, 0.15], "round_robin") == [484, 104, 103]
    y = np.zeros(2175, dtype=int)  # MHIST official train: 15 % pandas sample -> val
    parts = run_split_procedure({"procedure": "sample", "seed": 42, "parts": {"val": 0.15, "train": "rest"}}, y)
    assert (len(parts["val"]), len(parts["train"])) == (326, 1849)
    y = np.zeros(68_730 + 12_128, dtype=int)  # SPIDER-Breast official train: first floor(0.15 N) after shuffle
    parts = run_split_procedure({"procedure": "shuffle", "seed": 42, "parts": {"val": 0.15, "train": "rest"}}, y)
    assert (len(parts["val"]), len(parts["train"])) == (12_128, 68_730)


def test_sample_and_shuffle_match_pandas_and_random():
    import random

    y = np.arange(40) % 3
    parts = run_split_procedure({"procedure": "sample", "seed": 42, "parts": {"val": 0.15, "train": "rest"}}, y)
    df = pd.DataFrame({"y": y})
    val = df.sample(frac=0.15, random_state=42)
    assert parts["val"].tolist() == val.index.tolist()
    assert parts["train"].tolist() == df.drop(val.index).index.tolist()
    records = list(range(40))
    random.seed(42)
    random.shuffle(records)
    parts = run_split_procedure({"procedure": "shuffle", "seed": 42, "parts": {"val": 0.15, "train": "rest"}}, y)
    assert parts["val"].tolist() == records[:6] and parts["train"].tolist() == records[6:]


def test_stratified_split_keeps_class_proportions():
    from prism_plugin.data.hematology import BLOODMNIST_WBC5_COUNTS

    y = np.repeat(np.arange(5), BLOODMNIST_WBC5_COUNTS)
    for seed in (0, 3):
        parts = run_split_procedure({"procedure": "stratified", "seed": seed,
                                     "parts": {"train": 0.7, "heldout": 0.3}}, y)
        assert sorted(np.concatenate([parts["train"], parts["heldout"]]).tolist()) == list(range(len(y)))
        assert np.bincount(y[parts["train"]]).tolist() == [2330, 850, 994, 2182, 852]
        assert np.bincount(y[parts["heldout"]]).tolist() == [999, 364, 426, 935, 366]
    a = run_split_procedure({"procedure": "stratified", "seed": 0, "parts": {"train": 0.7, "heldout": 0.3}}, y)
    b = run_split_procedure({"procedure": "stratified", "seed": 1, "parts": {"train": 0.7, "heldout": 0.3}}, y)
    assert set(a["heldout"].tolist()) != set(b["heldout"].tolist())


# ---------------------------------------------------------------- manifests, HDF5, NPZ

def test_records_csv_with_pandas_val_carve(tmp_path):
    rows = []
    for i in range(30):
        name = f"MHIST_{i:03d}.png"
        png(tmp_path / "images" / name, i)
        rows.append({"Image Name": name, "Majority Vote Label": "SSA" if i % 3 == 0 else "HP",
                     "Partition": "test" if i >= 20 else "train"})
    pd.DataFrame(rows).to_csv(tmp_path / "annotations.csv", index=False)
    spec = {"procedure": "sample", "seed": 42, "from": "train", "parts": {"val": 0.15, "train": "rest"}}
    task = make_task(class_names=("HP", "SSA"), split=spec)
    src = RecordsSource(task, root=str(tmp_path), file="annotations.csv", image_dir="images",
                        image_column="Image Name", label_column="Majority Vote Label", split_column="Partition")
    train_rows = pd.DataFrame(rows[:20])
    val_ref = train_rows.sample(frac=0.15, random_state=42)
    val = src.split("val")
    assert [p.name for p in val.paths] == val_ref["Image Name"].tolist()
    assert val.labels.tolist() == [int(v == "SSA") for v in val_ref["Majority Vote Label"]]
    assert [p.name for p in src.split("train").paths] == train_rows.drop(val_ref.index)["Image Name"].tolist()
    assert len(src.split("test")) == 10


def test_records_json_sorted_class_names(tmp_path):
    recs = [{"image": f"p{i}.png", "class": ["Fat", "Adenosis", "Vessels"][i % 3], "split": "train"} for i in range(6)]
    for r, i in zip(recs, range(6)):
        png(tmp_path / "images" / r["image"], i)
    (tmp_path / "metadata.json").write_text(json.dumps(recs))
    task = make_task(n_classes=3, splits=("train",), names={"train": "train"})
    s = RecordsSource(task, root=str(tmp_path), file="metadata.json", image_dir="images", image_column="image",
                      label_column="class", split_column="split").split("train")
    assert s.labels.tolist() == [1, 0, 2, 1, 0, 2]  # Adenosis 0, Fat 1, Vessels 2


def test_h5_source_pcam_layout(tmp_path):
    import h5py

    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("valid", 4)):
        x = rng.integers(0, 255, (n, 8, 8, 3), dtype=np.uint8)
        with h5py.File(tmp_path / f"camelyonpatch_level_2_split_{split}_x.h5", "w") as f:
            f["x"] = x
        with h5py.File(tmp_path / f"camelyonpatch_level_2_split_{split}_y.h5", "w") as f:
            f["y"] = (np.arange(n) % 2).reshape(n, 1, 1, 1).astype(np.uint8)
        if split == "valid":
            x_valid = x
    task = make_task(class_names=("normal", "tumour"), splits=("train", "val"))
    src = H5Source(task, root=str(tmp_path), images="camelyonpatch_level_2_split_{split}_x.h5",
                   labels="camelyonpatch_level_2_split_{split}_y.h5", rename={"val": "valid"})
    val = src.split("val")
    assert val.labels.tolist() == [0, 1, 0, 1]
    assert np.array_equal(np.asarray(Image.open(val.paths[2]).convert("RGB")), x_valid[2])  # lossless PNG round trip
    assert len(src.split("train")) == 6


def test_npz_medmnist_pool_label_names_and_drop(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {}
    for split, n in (("train", 8), ("val", 4), ("test", 4)):
        arrays[f"{split}_images"] = rng.integers(0, 255, (n, 8, 8, 3), dtype=np.uint8)
        arrays[f"{split}_labels"] = (np.arange(n) % 4).reshape(n, 1)
    np.savez(tmp_path / "blood.npz", **arrays)
    spec = {"procedure": "stratified", "seed": 0, "from": ["train", "val", "test"], "parts": {"train": 0.5, "heldout": 0.5}}
    task = make_task(class_names=("neutrophil", "basophil"), split=spec, names={"val": "heldout", "test": "heldout"})
    src = NpzSource(task, root=str(tmp_path), file="blood.npz",
                    label_names=["basophil", "eosinophil", "erythroblast", "neutrophil"],
                    drop_classes=["eosinophil", "erythroblast"])
    tr, te = src.split("train"), src.split("test")
    assert len(tr) + len(te) == 8 and sorted(np.bincount(tr.labels).tolist()) == [2, 2]
    assert src.split("val").fingerprint == te.fingerprint  # val and test are the same held-out part


# ---------------------------------------------------------------- Hugging Face datasets

@pytest.fixture
def parquet_dataset(tmp_path):
    datasets = needs("datasets")

    rng = np.random.default_rng(0)
    images, arrays = [], []
    for i in range(12):
        a = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG")
        images.append({"bytes": buf.getvalue(), "path": None})
        arrays.append(a)
    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["normal", "tumour"])})
    ds = datasets.Dataset.from_dict({"image": images, "label": [i % 2 for i in range(12)]}, features=feats)
    root = tmp_path / "hfdata"
    (root / "data").mkdir(parents=True)
    ds.select(range(8)).to_parquet(str(root / "data" / "train-00000-of-00001.parquet"))
    ds.select(range(8, 12)).to_parquet(str(root / "data" / "test-00000-of-00001.parquet"))
    return root, arrays


def test_hf_parquet_with_image_bytes(parquet_dataset):
    from prism_plugin.data.hf import HFSource

    root, arrays = parquet_dataset
    task = make_task(class_names=("tumour", "normal"), splits=("train", "test"))  # names, not positions
    src = HFSource(task, path=str(root))
    train, test = src.split("train"), src.split("test")
    assert train.labels.tolist() == [1, 0] * 4 and test.labels.tolist() == [1, 0, 1, 0]
    assert np.array_equal(np.asarray(Image.open(test.paths[1]).convert("RGB")), arrays[9])
    assert HFSource(task, path=str(root)).split("train").fingerprint == train.fingerprint
    assert src.split("train", limit=2).labels.tolist() == [1, 0]


def test_hf_hub_id_offline_answers_at_once(monkeypatch, network_attempts):
    needs("datasets")
    from prism_plugin.data import hf

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = make_task(class_names=("a", "b"), splits=("train",))
    with pytest.raises(PrismError) as exc:
        hf.HFSource(task, path="nobody/no-such-dataset", revision="0" * 40).split("train")
    assert network_attempts == []  # offline: not one lookup or connect
    msg = str(exc.value)
    assert "dataset 'D'" in msg and "nobody/no-such-dataset" in msg and "not in the local cache" in msg
    assert "--set source.path=DIR" in msg and "HF_DATASETS_CACHE" in msg


def test_hf_unreachable_hub_goes_offline_without_retries(monkeypatch, network_attempts):
    needs("datasets")
    from prism_plugin.data import hf

    for var in hf.OFFLINE_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hf, "_OFFLINE_REASON", [])
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    task = make_task(class_names=("a", "b"), splits=("train",))
    with pytest.raises(PrismError, match=r"unreachable"):
        hf.HFSource(task, path="nobody/no-such-dataset", revision="0" * 40).split("train")
    connects = [a for kind, a in network_attempts if kind == "connect"]
    assert len(connects) == 1 and connects[0][1] == 9, network_attempts  # one refused probe, no retries
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # the process stays offline from then on


# ---------------------------------------------------------------- embeddings

def test_embedding_tree_npy_and_parquet(tmp_path):
    pa = needs("pyarrow")
    import pyarrow.parquet as pq

    X = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    y = np.array([0, 1, 1, 0, 1])
    write_embedding_split(tmp_path / "npy", "train", X, y)
    Xr, yr, fp = read_embedding_split(tmp_path / "npy", "train")
    assert np.array_equal(Xr, X) and yr.tolist() == y.tolist() and len(fp) == 48
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"features": [list(map(float, r)) for r in X], "label": y}), tmp_path / "pq" / "train.parquet")
    Xp, yp, _ = read_embedding_split(tmp_path / "pq", "train")
    assert np.allclose(Xp, X) and yp.tolist() == y.tolist()
    with pytest.raises(PrismError, match="val_features.npy"):
        read_embedding_split(tmp_path / "npy", "val")


def test_hf_arrow_and_imagefolder_copies(parquet_dataset, tmp_path):
    import datasets

    from prism_plugin.data.hf import HFSource

    root, arrays = parquet_dataset
    dd = datasets.load_dataset(str(root), cache_dir=str(tmp_path / "hfcache"))
    dd.save_to_disk(str(tmp_path / "arrow"))  # the save_to_disk (arrow) layout
    task = make_task(class_names=("normal", "tumour"), splits=("train", "test"))
    from_arrow = HFSource(task, path=str(tmp_path / "arrow")).split("test")
    from_parquet = HFSource(task, path=str(root)).split("test")
    assert from_arrow.labels.tolist() == from_parquet.labels.tolist() == [0, 1, 0, 1]
    assert from_arrow.fingerprint == from_parquet.fingerprint  # same rows, labels and image bytes
    tree(tmp_path / "imgs", {"train": {"normal": 2, "tumour": 3}, "test": {"normal": 1, "tumour": 2}})
    s = HFSource(task, path=str(tmp_path / "imgs"), format="imagefolder").split("train")
    assert sorted(s.labels.tolist()) == [0, 0, 1, 1, 1]
    assert np.asarray(Image.open(s.paths[0]).convert("RGB")).shape == (8, 8, 3)
