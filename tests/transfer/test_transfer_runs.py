"""Transfer runs end to end on precomputed embeddings (fast): columns, bad input, compare notes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism_plugin.cli import main

DIM = 12


def _blobs(rng, n_per_class, centres, spread=1.0):
    X = np.concatenate([rng.normal(c, spread, (n, DIM)) for n, c in zip(n_per_class, centres)]).astype(np.float32)
    y = np.concatenate([np.full(n, i) for i, n in enumerate(n_per_class)]).astype(np.int64)
    return X, y


def write_embeddings(root: Path, seed: int = 0) -> None:
    """Source: 2 classes; target: 3 classes (class 2 = the source's positive, shifted and rescaled)."""
    rng = np.random.default_rng(seed)
    e = np.eye(DIM)
    src = {"train": (200, 200), "val": (60, 60), "test": (60, 60)}
    tgt = {"train": (20, 20, 20), "test": (40, 40, 40)}
    for split, n in src.items():
        X, y = _blobs(rng, n, [-0.8 * e[0], 0.8 * e[0]])
        (root / "SrcData").mkdir(parents=True, exist_ok=True)
        np.save(root / "SrcData" / f"{split}_features.npy", X)
        np.save(root / "SrcData" / f"{split}_labels.npy", y)
    for split, n in tgt.items():
        X, y = _blobs(rng, n, [-2.0 * e[0] + e[1], -2.0 * e[0] - e[1], 2.0 * e[0] + 0.5], spread=1.3)
        (root / "TgtData").mkdir(parents=True, exist_ok=True)
        np.save(root / "TgtData" / f"{split}_features.npy", X)
        np.save(root / "TgtData" / f"{split}_labels.npy", y)


GRID = "label_fractions: [0.5, 1.0]\nseeds: [42, 123]\n"
TASKS = {
    "t_src.yaml": "task: t_src\ndataset: SrcData\nclass_names: [neg, pos]\nsource: {type: precomputed}\n"
                  "splits: {train: train, val: val, test: test}\n" + GRID,
    "t_src_noval.yaml": "task: t_src_noval\ndataset: SrcData\nclass_names: [neg, pos]\nsource: {type: precomputed}\n"
                        "splits: {train: train, test: test}\n" + GRID,
    "t_tgt.yaml": "task: t_tgt\ndataset: TgtData\nn_classes: 3\nsource: {type: precomputed}\n"
                  "splits: {train: train, test: test}\n" + GRID,
    "t_transfer.yaml": "task: t_transfer\nkind: transfer\nsource_task: t_src\ntarget_task: t_tgt\n"
                       "target_labels: {positive: [2]}\nclass_names: [neg, pos]\n" + GRID,
    "t_transfer_noval.yaml": "task: t_transfer_noval\nkind: transfer\nsource_task: t_src_noval\ntarget_task: t_tgt\n"
                             "target_labels: {positive: [2]}\nclass_names: [neg, pos]\n" + GRID,
    "t_transfer_flip.yaml": "task: t_transfer_flip\nkind: transfer\nsource_task: t_src\ntarget_task: t_tgt\n"
                            "source_labels: {positive: [0]}\ntarget_labels: {positive: [2]}\n"
                            "class_names: [neg, pos]\n" + GRID,
    "t_transfer_nomap.yaml": "task: t_transfer_nomap\nkind: transfer\nsource_task: t_src\ntarget_task: t_tgt\n"
                             "class_names: [neg, pos]\n" + GRID,
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("transfer_runs")
    write_embeddings(root / "emb" / "MyFM")
    tasks = root / "tasks"
    tasks.mkdir()
    for name, text in TASKS.items():
        (tasks / name).write_text(text)
    return root


def prism(workspace: Path, *args: str) -> int:
    return main([*args, "--include-path", str(workspace / "tasks"), "--model", "precomputed",
                 "--model-args", f"root={workspace / 'emb' / 'MyFM'},name=MyFM", "--quiet", "--no-report"])


@pytest.fixture(scope="module")
def transfer_results(workspace) -> Path:
    out = workspace / "res"
    assert prism(workspace, "--task", "t_src", "--task", "t_transfer", "--output", str(out)) == 0
    return out


def test_transfer_run_has_source_oracle_and_fewshot_columns(transfer_results):
    out = transfer_results
    runs = pd.read_csv(out / "t_transfer" / "MyFM" / "runs.csv")
    assert set(runs["reference_table"]) == {"transfer"}
    assert runs["pair"].unique().tolist() == ["SrcData->TgtData"]
    for col in ("temperature_src", "ece_scaled_fixed", "temperature_oracle", "ece_scaled_oracle",
                "temperature_fewshot_k4", "ece_scaled_fewshot_k64", "ece_scaled_fewshot_k64_std"):
        assert runs[col].notna().all(), col
    # the in-distribution task gets none of the transfer-only columns
    ind = pd.read_csv(out / "t_src" / "MyFM" / "runs.csv")
    assert not [c for c in ind.columns if "oracle" in c or "fewshot" in c]
    assert "temperature" in ind and "temperature_src" not in ind
    assert (runs["fewshot_draws"] == 20).all()


def test_label_spaces_that_do_not_match_are_an_error(workspace, capsys):
    rc = prism(workspace, "--task", "t_transfer_nomap", "--output", str(workspace / "bad"))
    err = capsys.readouterr().err
    assert rc == 2
    assert "target_labels" in err and "t_tgt" in err and "outside the transfer task's 2 classes" in err
    assert len(err.strip().splitlines()) == 1
    assert not (workspace / "bad" / "runs.csv").exists()


def test_missing_source_val_gives_nan_temperatures_and_compare_says_cri_not_computed(workspace, capsys):
    out = workspace / "noval"
    assert prism(workspace, "--task", "t_src_noval", "--task", "t_transfer_noval", "--output", str(out)) == 0
    err = capsys.readouterr().err
    assert "t_transfer_noval has no validation split: temperature and scaled ECE are NaN" in err
    runs = pd.read_csv(out / "t_transfer_noval" / "MyFM" / "runs.csv")
    assert runs["temperature_src"].isna().all() and runs["ece_scaled_fixed"].isna().all()
    # the target-side temperatures need no source val
    assert runs["temperature_oracle"].notna().all() and runs["ece_scaled_fewshot_k16"].notna().all()
    capsys.readouterr()
    assert main(["compare", str(out)]) == 0
    text = capsys.readouterr().out
    assert "MyFM: CRI not computed: no scaled ECE" in text
    assert "no source-fitted temperature (the source task has no validation split)" in text
    mine = [line for line in text.splitlines() if "MyFM *" in line][0]
    assert mine.split()[0] == "-" and mine.split()[-1] == "n/a"


def test_k_larger_than_the_target_warns_once(workspace, tmp_path, capsys):
    tasks = workspace / "tasks"
    (tasks / "t_tgt_small.yaml").write_text(
        "task: t_tgt_small\ndataset: TgtData\nembeddings_key: TgtData\nn_classes: 3\nsource: {type: precomputed}\n"
        "splits: {train: test, test: train}\n" + GRID)  # the 60-sample train split as a small target
    (tasks / "t_transfer_small.yaml").write_text(
        "task: t_transfer_small\nkind: transfer\nsource_task: t_src\ntarget_task: t_tgt_small\n"
        "target_labels: {positive: [2]}\nclass_names: [neg, pos]\nlabel_fractions: [1.0]\nseeds: [42, 123]\n")
    try:
        assert prism(workspace, "--task", "t_transfer_small", "--output", str(tmp_path / "small")) == 0
    finally:
        for name in ("t_tgt_small.yaml", "t_transfer_small.yaml"):
            (tasks / name).unlink()
    msgs = [line for line in capsys.readouterr().err.splitlines() if "few-shot" in line]
    assert len(msgs) == 1 and "K=64" in msgs[0] and "has 60" in msgs[0]
    runs = pd.read_csv(tmp_path / "small" / "runs.csv")
    assert runs["ece_scaled_fewshot_k64"].isna().all() and runs["ece_scaled_fewshot_k32"].notna().all()


def test_compare_renames_a_model_named_like_a_reference_model(transfer_results, tmp_path, capsys):
    from tests.conftest import REFERENCE

    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip("shared reference tables not found (set PRISM_SHARED)")
    for task in ("t_src", "t_transfer"):
        runs = pd.read_csv(transfer_results / task / "MyFM" / "runs.csv")
        (tmp_path / task).mkdir()
        runs.assign(model="UNI").to_csv(tmp_path / task / "runs.csv", index=False)
    assert main(["compare", str(tmp_path), "--reference", str(REFERENCE), "--output", str(tmp_path / "c.csv")]) == 0
    text = capsys.readouterr().out
    ranked = pd.read_csv(tmp_path / "c.csv", index_col=0)
    assert "UNI (yours)" in ranked.index and "UNI" in ranked.index and len(ranked) == 9
    assert "shares a reference model's name; shown as 'UNI (yours)'" in text
    published = pd.read_csv(REFERENCE / "cri_variants_100.csv", index_col=0)
    assert ranked.at["UNI", "cri_multiplicative"] == pytest.approx(published.at["UNI", "cri_multiplicative"], abs=1e-12)
    assert "Transfer of UNI (yours) at 100 % source labels" in text


def test_a_transfer_task_shares_its_sources_fits_and_gets_the_same_numbers(workspace, transfer_results):
    """t_src and t_transfer in one command: the transfer's probe fits on t_src's train/val splits, so it
    takes t_src's fits (0.5 x 2 seeds + 1.0 once = 3) instead of refitting; its runs.csv is the one a
    command running t_transfer alone writes, bit for bit."""
    import json

    def shared(out: Path, task: str) -> int:
        return json.loads((out / task / "MyFM" / "summary.json").read_text())["timings"]["shared_fits"]

    assert shared(transfer_results, "t_src") == 0 and shared(transfer_results, "t_transfer") == 3
    alone = workspace / "alone"
    assert prism(workspace, "--task", "t_transfer", "--output", str(alone)) == 0
    assert json.loads((alone / "summary.json").read_text())["timings"]["shared_fits"] == 0
    together = pd.read_csv(transfer_results / "t_transfer" / "MyFM" / "runs.csv")
    pd.testing.assert_frame_equal(pd.read_csv(alone / "runs.csv"), together, check_exact=True)
    # a transfer that relabels its source fits on other labels: nothing to share
    flip = workspace / "flip"
    assert prism(workspace, "--task", "t_src", "--task", "t_transfer_flip", "--output", str(flip)) == 0
    assert shared(flip, "t_transfer_flip") == 0
