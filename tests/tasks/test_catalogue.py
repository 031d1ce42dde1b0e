"""The shipped task catalogue: every YAML validates; names, classes, splits and pairs match PROTOCOL and
the reference per-run tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism_plugin.protocol.labels import apply_label_map
from prism_plugin.tasks.builtin import builtin_task_dir
from prism_plugin.tasks.index import TaskIndex
from tests.conftest import REFERENCE

TASK_DIR = builtin_task_dir()
SHIPPED = sorted(p for p in TASK_DIR.rglob("*.yaml") if not p.name.startswith("_"))
MAIN = {"prism_pcam": "PCam", "prism_mhist": "MHIST", "prism_crc": "CRC", "prism_bracs": "BRACS",
        "prism_lunghist700": "LungHist700", "prism_spider_breast": "SPIDER-Breast"}


@pytest.fixture(scope="module")
def index():
    return TaskIndex([TASK_DIR])


def test_every_shipped_yaml_loads(index):
    for file in SHIPPED:
        cfg = index.load(str(file))
        assert cfg.name and Path(cfg.file).resolve() == file.resolve()
    assert len(index.entries()) >= 6 + 5 + 6 + 20 + 4 + 12 + 3 and len(index.groups()) == 7


def test_prism_run_validate_accepts_the_whole_catalogue(capsys):
    from prism_plugin.cli import main  # in-process: the same entry point as the console script

    assert main(["validate", *map(str, SHIPPED)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.count("ok  ") == len(SHIPPED) and "ok  prism_all" in out
    assert main(["ls", "groups"]) == 0
    out = capsys.readouterr().out
    assert all(g in out for g in ("prism_main", "prism_transfer", "prism_camelyon17", "prism_all", "hema_wbc5",
                                  "hema_matrix"))
    assert main(["ls", "tasks"]) == 0
    out = capsys.readouterr().out
    for name in ("prism_pcam", "prism_camelyon17_h4_to_h3", "hema_raabin_to_mll23", "prism_bracs_dcis_ic_to_crc"):
        assert name in out
    assert "prism_main " not in out  # groups are listed by `ls groups`, not as tasks


def test_main_datasets_follow_protocol(index):
    expect = {
        "prism_pcam": (("normal", "tumour"), (262_144, 32_768, 32_768), "pcam"),
        "prism_mhist": (("HP", "SSA"), (1_849, 326, 977), "mhist"),
        "prism_crc": (("ADI", "BACK", "DEB", "LYM", "MUC", "MUS", "NORM", "STR", "TUM"), (70_000, 15_000, 15_000), "crc"),
        "prism_bracs": (("N", "PB", "UDH", "FEA", "ADH", "DCIS", "IC"), (3_657, 312, 570), "bracs"),
        "prism_lunghist700": (("aca_bd", "aca_md", "aca_pd", "nor", "scc_bd", "scc_md", "scc_pd"), (483, 103, 105),
                              "lunghist700"),
        "prism_spider_breast": ((), (68_730, 12_128, 12_034), "spider_breast"),
    }
    for name, (classes, sizes, key) in expect.items():
        t = index.load_task(name)
        assert t.dataset == MAIN[name] and t.class_names == classes and t.embeddings_key == key
        assert tuple(t.splits[s].size for s in ("train", "val", "test")) == sizes
        assert t.label_fractions == (0.01, 0.05, 0.10, 0.25, 0.50, 1.00) and t.seeds == (42, 123, 456)
    assert index.load_task("prism_spider_breast").n_classes == 18
    assert index.load_task("prism_crc").split == {"procedure": "random_split", "seed": 42, "from": "all",
                                                   "parts": {"train": 0.7, "val": 0.15, "test": 0.15},
                                                   "remainder": "last"}


def test_sizes_and_names_agree_with_the_reference_tables(index):
    if not REFERENCE.is_dir():
        pytest.skip(f"shared reference tables not found at {REFERENCE}")
    ind = pd.read_csv(REFERENCE / "indomain_all_v2.csv")
    prop = pd.read_csv(REFERENCE / "indomain_propval.csv")
    assert set(ind.dataset) == set(MAIN.values())
    for name, ds in MAIN.items():
        t = index.load_task(name)
        assert t.splits["train"].size == ind[ind.dataset == ds].n_train.max()
        assert t.splits["val"].size == prop[prop.dataset == ds].n_val.max()
        assert t.n_classes == ind[ind.dataset == ds].n_classes.iloc[0]
    ood = pd.read_csv(REFERENCE / "ood_all_v2.csv")
    got = {(t.src, t.tgt, t.pair) for t in index.expand("prism_transfer")}
    assert got == set(map(tuple, ood[["src", "tgt", "pair"]].drop_duplicates().to_numpy()))
    for t in index.expand("prism_transfer"):
        assert t.source_config.splits["train"].size == ood[ood.pair == t.pair].n_train.max()
    cam = pd.read_csv(REFERENCE / "camelyon17_transfer.csv")
    tasks = [t for t in index.expand("prism_camelyon17") if t.is_transfer]
    assert {(int(t.src), int(t.tgt), t.pair) for t in tasks} == set(
        map(tuple, cam[["src", "tgt", "pair"]].drop_duplicates().to_numpy().tolist()))


def test_camelyon17_tasks(index):
    members = index.expand("prism_camelyon17")
    assert len(members) == 25
    for h, t in enumerate(members[:5]):
        assert t.name == f"prism_camelyon17_h{h}" and t.columns == {"hospital": h}
        assert t.reference_table == "camelyon17_indomain" and t.proportional_val
        assert [(t.splits[s].size, t.splits[s].class_counts) for s in ("train", "val", "test")] == [
            (14_000, (7_000, 7_000)), (3_000, (1_500, 1_500)), (3_000, (1_500, 1_500))]
        assert t.source["type"] == "camelyon17" and t.embeddings_key == f"camelyon17_resplit/h{h}"
    for t in members[5:]:
        assert t.reference_table == "camelyon17_transfer" and t.proportional_val and t.pair == f"h{t.src}->h{t.tgt}"
        assert t.source_config.columns["hospital"] == int(t.src) and t.target_config.columns["hospital"] == int(t.tgt)


def test_transfer_binarisation_on_synthetic_labels(index):
    y_crc = np.repeat(np.arange(9), [5, 4, 3, 2, 6, 1, 2, 3, 7])  # 7 TUM
    y_bracs = np.repeat(np.arange(7), [10, 4, 3, 5, 2, 6, 8])     # PB 4 + FEA 5; DCIS 6 + IC 8
    t = index.load_task("prism_crc_to_bracs")
    assert apply_label_map(y_crc, t.source_labels, "s").sum() == 7
    assert apply_label_map(y_bracs, t.target_labels, "t").tolist() == [0] * 10 + [1] * 4 + [0] * 3 + [1] * 5 + [0] * 16
    t = index.load_task("prism_bracs_to_crc")
    assert apply_label_map(y_bracs, t.source_labels, "s").sum() == 9 and apply_label_map(y_crc, t.target_labels, "t").sum() == 7
    for name in ("prism_crc_to_bracs_dcis_ic", "prism_bracs_dcis_ic_to_crc"):
        t = index.load_task(name)
        bracs_map = t.target_labels if t.target_task == "prism_bracs" else t.source_labels
        assert apply_label_map(y_bracs, bracs_map, "v").sum() == 14  # DCIS + IC
        assert "BRACS-DCIS+IC" in t.pair
    for name in ("prism_pcam_to_mhist", "prism_mhist_to_pcam"):
        t = index.load_task(name)
        assert t.source_labels is None and t.target_labels is None and t.n_classes == 2


def test_groups(index):
    assert [t.dataset for t in index.expand("prism_main")] == list(MAIN.values())
    assert [t.pair for t in index.expand("prism_transfer")] == ["PCam->MHIST", "MHIST->PCam", "CRC->BRACS",
                                                                 "BRACS->CRC"]
    everything = index.expand("prism_all")
    assert len(everything) == 6 + 4 + 25 and len({t.name for t in everything}) == 35
    assert [t.name for t in index.expand("hema_wbc5")] == ["hema_acevedo", "hema_matek", "hema_mll23", "hema_raabin"]
    matrix = index.expand("hema_matrix")
    assert len(matrix) == 16 and sum(t.is_transfer for t in matrix) == 12
    assert {(t.src, t.tgt) for t in matrix if t.is_transfer} == {
        (a, b) for a in ("Acevedo", "Matek", "MLL23", "Raabin") for b in ("Acevedo", "Matek", "MLL23", "Raabin") if a != b}
