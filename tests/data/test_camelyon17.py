"""Camelyon17 (PROTOCOL §1.4): the sampling and re-split procedures on synthetic metadata, the published
split files of the PRISM release, and the load-time L2 normalisation."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from prism_plugin.data import camelyon17 as c17
from prism_plugin.errors import PrismError

from tests.conftest import SHARED, needs
SPLIT_DIR = SHARED / "reference" / "camelyon17"


@pytest.fixture(scope="module")
def published():
    if not (SPLIT_DIR / "resplit.json").exists():
        pytest.skip(f"shared Camelyon17 split files not found at {SPLIT_DIR} (set PRISM_SHARED)")
    return (c17.read_split_file(SPLIT_DIR / "splits.json", kind="splits"),
            c17.read_split_file(SPLIT_DIR / "resplit.json", kind="resplit"))


# ---------------------------------------------------------------- the re-split

def test_resplit_on_synthetic_labels_is_balanced_sorted_and_seeded():
    y = np.random.default_rng(5).permutation(np.repeat([0, 1], 10_000))
    parts = c17.resplit_positions(y, hospital=3)
    assert [len(parts[p]) for p in c17.PARTS] == [14_000, 3_000, 3_000]
    for p, n in zip(c17.PARTS, (7_000, 1_500, 1_500)):
        assert parts[p] == sorted(parts[p]) and int(y[parts[p]].sum()) == n  # exactly 50 % tumour
    assert sorted(sum(parts.values(), [])) == list(range(20_000))
    # independent restatement of §1.4 with default_rng(42 + h) consumed class 0 then class 1
    rng = np.random.default_rng(45)
    ref = {p: [] for p in c17.PARTS}
    for c in (0, 1):
        pos = np.flatnonzero(y == c)
        rng.shuffle(pos)
        ref["train"] += list(pos[:7000]); ref["val"] += list(pos[7000:8500]); ref["test"] += list(pos[8500:])
    assert parts == {p: sorted(int(i) for i in v) for p, v in ref.items()}
    assert c17.resplit_positions(y, hospital=4) != parts


def test_resplit_of_unbalanced_small_labels_rounds_per_class():
    y = np.array([0] * 7 + [1] * 13)
    parts = c17.resplit_positions(y, hospital=0)
    # class 0: round(4.9)=5 train, round(5.95)=6 -> 1 val, 1 test; class 1: round(9.1)=9, round(11.05)=11
    assert [len(parts[p]) for p in c17.PARTS] == [5 + 9, 1 + 2, 1 + 2]


def test_published_resplit_is_reproduced_by_the_procedure(published):
    """For each hospital a 10,000/10,000 label vector exists under which the §1.4 re-split, with
    default_rng(42 + h), reproduces resplit.json exactly; with a neighbouring seed none does."""
    _, resplit = published
    for h in range(5):
        parts = resplit[h]
        assert [len(parts[p]) for p in c17.PARTS] == [14_000, 3_000, 3_000]
        y = c17.derive_labels(parts, h)
        assert y is not None and int(y.sum()) == 10_000
        assert c17.resplit_positions(y, h) == parts
        for p, n in zip(c17.PARTS, (7_000, 1_500, 1_500)):
            assert int(y[parts[p]].sum()) == n
    assert c17.derive_labels(resplit[0], 0, seed_base=43) is None
    assert c17.derive_labels(resplit[2], 2, seed_base=41) is None


def test_published_splits_json(published):
    splits, _ = published
    seen: set[int] = set()
    for h in range(5):
        idx = [i for p in c17.PARTS for i in splits[h][p]]
        assert len(idx) == len(set(idx)) == 20_000
        assert not seen & set(idx)
        seen |= set(idx)
        assert max(idx) < 455_954  # Camelyon17-WILDS v1.0 has 455,954 patches
    # the abandoned slide partition: 7/1/2 slides gave these patch counts
    assert [len(splits[0][p]) for p in c17.PARTS] == [14_757, 1_263, 3_980]
    # global index = HF splits concatenated train (302,436), validation (id_val 33,560 + OOD val), test:
    # WILDS's OOD hospitals 1 (val) and 2 (test) fall in those blocks
    h1 = [i for p in c17.PARTS for i in splits[1][p]]
    h2 = [i for p in c17.PARTS for i in splits[2][p]]
    assert 302_436 + 33_560 <= min(h1) and max(h1) < 370_900 <= min(h2)


# ---------------------------------------------------------------- the sampling (splits.json)

def _metadata(per_hospital=(40, 30, 25, 60, 35), seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for h, n in enumerate(per_hospital):
        for c, n_c in ((0, n), (1, n // 2 + 7)):
            for _ in range(n_c):
                rows.append((h, c, f"h{h}_slide{rng.integers(10)}"))
    rng.shuffle(rows)
    return pd.DataFrame(rows, columns=["hospital", "y", "slide"])


def test_sampling_procedure_on_synthetic_metadata():
    df = _metadata()
    out = c17.sample_hospitals(df.hospital, df.y, df.slide, per_class=20)
    rng = np.random.default_rng(42)
    for h in range(5):
        parts = out[h]
        idx = parts["train"] + parts["val"] + parts["test"]
        hdf = df[df.hospital == h]
        # independent: 20 (or all) per class with pandas, seed 42, concatenated and shuffled
        drawn = pd.concat([hdf[hdf.y == c].sample(n=min(20, int((hdf.y == c).sum())), random_state=42) for c in (0, 1)])
        order = drawn.sample(frac=1, random_state=42).index.tolist()
        assert sorted(idx) == sorted(order) and len(idx) == len(set(idx))
        for p in c17.PARTS:  # every part keeps the shuffled order
            assert parts[p] == [i for i in order if i in set(parts[p])]
        # slide-disjoint 70/15/15 of the sorted unique slides, one shared generator for hospitals 0..4
        slides = rng.permutation(np.unique(drawn.slide.to_numpy()))
        s = len(slides)
        n_tr = max(1, int(np.floor(0.7 * s)))
        n_va = max(n_tr + 1, int(np.floor(0.85 * s)))
        for p, group in zip(c17.PARTS, (slides[:n_tr], slides[n_tr:n_va], slides[n_va:])):
            assert set(df.slide[parts[p]]) <= set(group)


def test_load_time_l2_normalisation_and_resplit_of_features(tmp_path):
    rng = np.random.default_rng(0)
    stored = {p: (rng.normal(size=(n, 4)) * 3, rng.integers(0, 2, n)) for p, n in zip(c17.PARTS, (6, 2, 4))}
    resplit = {"train": [0, 3, 7, 11], "val": [1, 8], "test": [2, 4, 5, 6, 9, 10]}
    out = c17.resplit_features(stored, resplit)
    X = np.concatenate([stored[p][0] for p in c17.PARTS])
    y = np.concatenate([stored[p][1] for p in c17.PARTS])
    for p in c17.PARTS:
        Xp, yp = out[p]
        expect = X[resplit[p]] / (np.sqrt((X[resplit[p]] ** 2).sum(axis=1)) + 1e-12)[:, None]
        assert np.allclose(Xp, expect, rtol=0, atol=1e-12) and yp.tolist() == y[resplit[p]].tolist()
    # the materialised arrays are what --model precomputed reads
    from prism_plugin.data.precomputed import read_embedding_split, write_embedding_split

    for p in c17.PARTS:
        write_embedding_split(tmp_path / "stored", p, *stored[p])
    (tmp_path / "resplit.json").write_text(json.dumps({"0": resplit}))
    sizes = c17.materialise(tmp_path / "stored", tmp_path / "resplit.json", 0, tmp_path / "out")
    assert sizes == {"train": 4, "val": 2, "test": 6}
    Xr, yr, _ = read_embedding_split(tmp_path / "out", "test")
    assert np.allclose(Xr, out["test"][0], atol=1e-6) and np.allclose(np.linalg.norm(Xr, axis=1), 1, atol=1e-6)


def test_split_file_errors_name_the_file(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"0": {"train": [1, 2], "val": [2], "test": []}}))
    with pytest.raises(PrismError, match="appears in two parts"):
        c17.read_split_file(tmp_path / "bad.json", kind="resplit")
    with pytest.raises(PrismError, match="source.splits: procedure"):
        c17.read_split_file(tmp_path / "missing.json", kind="splits")


# ---------------------------------------------------------------- the task source on a tiny HF copy

def test_camelyon17_source_on_a_synthetic_parquet_copy(tmp_path):
    datasets = needs("datasets")
    from PIL import Image
    import io

    from prism_plugin.tasks.schema import SplitConfig

    rng = np.random.default_rng(1)
    rows = {"image": [], "label": [], "center": [], "slide": []}
    for i in range(120):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (4, 4, 3), dtype=np.uint8)).save(buf, format="PNG")
        rows["image"].append({"bytes": buf.getvalue(), "path": None})
        rows["label"].append(int(i % 3 == 0))
        rows["center"].append(i % 2)
        rows["slide"].append(i % 7)
    ds = datasets.Dataset.from_dict(rows, features=datasets.Features({
        "image": datasets.Image(), "label": datasets.Value("int64"), "center": datasets.Value("int64"),
        "slide": datasets.Value("int64")}))
    (tmp_path / "c17" / "data").mkdir(parents=True)
    ds.select(range(70)).to_parquet(str(tmp_path / "c17" / "data" / "train-00000-of-00001.parquet"))
    ds.select(range(70, 120)).to_parquet(str(tmp_path / "c17" / "data" / "test-00000-of-00001.parquet"))
    task = SimpleNamespace(name="c17", file="c17.yaml", dataset="Camelyon17", class_names=("normal", "tumour"),
                           n_classes=2, split=None, columns={"hospital": 1},
                           splits={p: SplitConfig(p) for p in c17.PARTS})
    src = c17.Camelyon17Source(task, data={"path": str(tmp_path / "c17"), "splits": ["train", "test"]},
                               splits="procedure", resplit="procedure")
    hosp = np.array(rows["center"]); lab = np.array(rows["label"])
    # hospital 1 has 40 normal and 20 tumour patches (fewer than 10,000: all are taken)
    sampled = c17.sample_hospitals(hosp, lab, np.array(rows["slide"]))[1]
    concat = sampled["train"] + sampled["val"] + sampled["test"]
    parts = c17.resplit_positions(lab[concat], 1)
    for p in c17.PARTS:
        got = src.split(p)
        assert got.labels.tolist() == lab[np.asarray(concat)[parts[p]]].tolist()
        assert [int(str(r).split("global ")[1].rstrip(")")) for r in got.paths] == np.asarray(concat)[parts[p]].tolist()
    assert [len(src.split(p)) for p in c17.PARTS] == [42, 9, 9]
    # the published-file mode reads the same assignment from JSON
    (tmp_path / "splits.json").write_text(json.dumps({"1": sampled}))
    (tmp_path / "resplit.json").write_text(json.dumps({"1": parts}))
    pub = c17.Camelyon17Source(task, data={"path": str(tmp_path / "c17"), "splits": ["train", "test"]},
                               splits_file=str(tmp_path / "splits.json"), resplit_file=str(tmp_path / "resplit.json"))
    assert all(pub.split(p).fingerprint == src.split(p).fingerprint for p in c17.PARTS)
