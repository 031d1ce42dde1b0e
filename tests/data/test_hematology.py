"""Hematology WBC5 class maps: the catalogue's YAML maps, applied to class-folder trees of each dataset."""

from __future__ import annotations


import numpy as np
import pytest
from PIL import Image

from prism_plugin.data import hematology as hema
from prism_plugin.data.catalogue import open_source
from prism_plugin.errors import PrismError
from prism_plugin.tasks.builtin import builtin_task_dir
from prism_plugin.tasks.index import TaskIndex

#: a few raw class names per dataset, with what they must become (None = dropped)
RAW = {
    "matek": {"NGS": "neutrophil", "NGB": "neutrophil", "LYT": "lymphocyte", "LYA": None, "MON": "monocyte",
              "EOS": "eosinophil", "BAS": "basophil", "MYO": None, "EBO": None},
    "mll23": {"neutrophil_segmented": "neutrophil", "neutrophil_band": "neutrophil", "lymphocyte_typical": "lymphocyte",
              "monocyte": "monocyte", "eosinophil": "eosinophil", "basophil": "basophil", "myeloblast": None,
              "plasma_cell": None},
    "raabin": {"Neutrophil": "neutrophil", "Lymphocyte": "lymphocyte", "Monocyte": "monocyte",
               "Eosinophil": "eosinophil", "Basophil": "basophil"},
}


@pytest.fixture(scope="module")
def index():
    return TaskIndex([builtin_task_dir()])


def test_yaml_class_maps_are_the_reference_maps(index):
    for name in hema.CLASS_MAPS:
        task = index.load_task(f"hema_{name}")
        assert task.class_names == hema.WBC5
        assert task.source["class_map"] == hema.CLASS_MAPS[name], name
        assert hema.check_wbc5_map(task.source["class_map"]) == []
        assert task.dataset == hema.DISPLAY[name]
        assert task.split["procedure"] == "stratified" and task.split["parts"] == {"train": 0.7, "heldout": 0.3}
        assert (task.splits["val"].name, task.splits["test"].name) == ("heldout", "heldout")
    acevedo = index.load_task("hema_acevedo")
    assert acevedo.source["label_names"] == list(hema.BLOODMNIST_LABELS)
    assert hema.check_wbc5_map({"neutrophil": ["a"], "lymphocyte": ["a"]}) != []


@pytest.mark.parametrize("name", sorted(RAW))
def test_class_maps_turn_dataset_folders_into_wbc5(name, index, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    root = tmp_path / "hematology" / name
    expected = []
    for raw, wbc in sorted(RAW[name].items()):  # ImageFolder order: sorted folder names
        for k in range(4):
            (root / raw).mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)).save(root / raw / f"{k}.png")
            if wbc is not None:
                expected.append(hema.WBC5.index(wbc))
        assert hema.wbc5_label(name, raw) == (None if wbc is None else hema.WBC5.index(wbc))
    monkeypatch.setenv("PRISM_DATA_DIR", str(tmp_path))
    task = index.load_task(f"hema_{name}")
    src = open_source(task)
    pool = src.get_pool("all")
    y = src.labels(pool)
    assert y[y >= 0].tolist() == expected
    train, test = src.split("train"), src.split("test")
    assert len(train) + len(test) == len(expected)
    assert (np.bincount(train.labels, minlength=5) > 0).all() and (np.bincount(test.labels, minlength=5) > 0).all()
    assert set(map(str, train.paths)).isdisjoint(map(str, test.paths))
    assert src.split("val").fingerprint == test.fingerprint


def test_unknown_raw_class_is_an_error_naming_it(index, tmp_path, monkeypatch):
    root = tmp_path / "hematology" / "matek"
    for raw in ("NGS", "LYT", "MON", "EOS", "BAS", "SMUDGE"):
        (root / raw).mkdir(parents=True)
        Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(root / raw / "a.png")
        Image.fromarray(np.ones((4, 4, 3), dtype=np.uint8)).save(root / raw / "b.png")
    monkeypatch.setenv("PRISM_DATA_DIR", str(tmp_path))
    with pytest.raises(PrismError, match=r"\['SMUDGE'\].*class_map.*drop_classes"):
        open_source(index.load_task("hema_matek")).split("train")


def test_split_seed_override_reaches_transfer_members(index):
    t = index.load_task("hema_acevedo_to_raabin", ["split.seed=3"])
    assert t.source_config.split["seed"] == 3 and t.target_config.split["seed"] == 3
    assert t.n_classes == 5 and t.target_split == "test" and t.pair == "Acevedo->Raabin"
    assert index.load_task("hema_acevedo_to_raabin").source_config.split["seed"] == 0
