"""Embedding geometry: mutual k-NN alignment, AUROC clustering, reliability radar, and their report section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy import stats
from scipy.cluster.hierarchy import fcluster

from prism_plugin.errors import PrismError
from prism_plugin.report.geometry_sections import geometry_section, sensitivity_section
from prism_plugin.plugins import get_host
from prism_plugin.report.sections import read_view
from prism_plugin.summaries import geometry as geo


def test_alignment_is_one_for_identical_and_rotated_embeddings():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(300, 16))
    assert geo.mutual_knn_alignment(A, A, k=50) == 1.0
    Q, _ = np.linalg.qr(rng.normal(size=(16, 16)))  # a rotation keeps every cosine distance
    assert geo.mutual_knn_alignment(A, A @ Q, k=50) == pytest.approx(1.0)
    assert geo.mutual_knn_alignment(A, 3.0 * A, k=50) == pytest.approx(1.0)  # cosine ignores scale


def test_alignment_of_independent_embeddings_is_near_chance():
    rng = np.random.default_rng(1)
    n, k = 800, 50
    A, B = rng.normal(size=(n, 32)), rng.normal(size=(n, 32))
    chance = geo.alignment_chance(n, k)
    # closed form of E[X / (2k - X)], X ~ Hypergeometric(n - 1, k, k), is close to k / (2n - k)
    assert chance == pytest.approx(k / (2 * n - k), rel=0.05)
    value = geo.mutual_knn_alignment(A, B, k=k)
    assert abs(value - chance) < 0.006, (value, chance)
    # a Monte-Carlo check of the chance level itself: random neighbour sets
    sets = [(rng.choice(n - 1, k, replace=False), rng.choice(n - 1, k, replace=False)) for _ in range(4000)]
    mc = np.mean([len(np.intersect1d(a, b)) / len(np.union1d(a, b)) for a, b in sets])
    assert mc == pytest.approx(chance, abs=0.002)


def test_jaccard_and_knn_by_hand():
    a = np.array([[1, 2, 3], [0, 2, 3]])
    b = np.array([[3, 2, 1], [4, 5, 0]])
    assert np.allclose(geo.jaccard_rows(a, b), [1.0, 1 / 5])
    X = np.array([[0.0, 1.0], [0.0, 2.0], [1.0, 0.0], [2.0, 0.1], [0.1, 3.0]])
    nn = geo.knn_indices(X, k=2, metric="euclidean")
    assert nn.shape == (5, 2) and all(i not in row for i, row in enumerate(nn))
    assert set(nn[0]) == {1, 2} and set(nn[4]) == {1, 0}


def test_alignment_matrix_and_bad_input():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(120, 8))
    m = geo.alignment_matrix({"a": A, "a_noisy": A + 0.05 * rng.normal(size=A.shape), "b": rng.normal(size=(120, 8))},
                             k=10)
    assert list(m.index) == ["a", "a_noisy", "b"] and np.allclose(np.diag(m), 1.0) and np.allclose(m, m.T)
    assert m.loc["a", "a_noisy"] > 0.5 > m.loc["a", "b"]
    assert m.attrs["k"] == 10 and m.attrs["n_samples"] == 120
    with pytest.raises(PrismError, match="same samples"):
        geo.alignment_matrix({"a": A, "b": A[:100]}, k=10)
    with pytest.raises(PrismError, match="lower --k"):
        geo.mutual_knn_alignment(A[:20], A[:20], k=50)


def test_cluster_order_on_a_constructed_matrix():
    # two families of models with opposite AUROC profiles over five datasets, interleaved in the input
    m = pd.DataFrame(
        [[0.95, 0.90, 0.85, 0.80, 0.75],   # A: falling
         [0.70, 0.76, 0.81, 0.86, 0.93],   # X: rising
         [0.96, 0.92, 0.84, 0.83, 0.70],   # B: falling
         [0.72, 0.74, 0.85, 0.88, 0.90],   # Y: rising
         [0.91, 0.89, 0.86, 0.79, 0.78]],  # C: falling
        index=list("AXBYC"), columns=[f"d{i}" for i in range(5)])
    res = geo.cluster_order(m)
    order = res["order"]
    assert sorted(order) == list("ABCXY")
    pos = {x: i for i, x in enumerate(order)}
    assert max(pos[x] for x in "ABC") < min(pos[x] for x in "XY") or max(pos[x] for x in "XY") < min(pos[x] for x in "ABC")
    groups = fcluster(res["linkage"], 2, criterion="maxclust")
    lab = dict(zip(res["labels"], groups))
    assert lab["A"] == lab["B"] == lab["C"] != lab["X"] == lab["Y"]
    # the distance is 1 - Spearman rho, checked against SciPy
    rho = stats.spearmanr(m.loc["A"], m.loc["X"]).statistic
    assert res["distance"].loc["A", "X"] == pytest.approx(1 - rho)
    # average linkage: the last merge height is the mean distance between the two families
    between = [res["distance"].loc[a, b] for a in "ABC" for b in "XY"]
    assert res["linkage"][-1, 2] == pytest.approx(np.mean(between))
    with pytest.raises(PrismError, match="at least 2"):
        geo.cluster_order(m.iloc[:1])


def _results_dir(root: Path, model: str, dataset: str, auroc: float, ece: float, brier: float | None,
                 n_classes: int = 2) -> Path:
    d = root / dataset / model
    d.mkdir(parents=True)
    rows = [{"model": model, "dataset": dataset, "fraction": f, "seed": s, "n_classes": n_classes,
             "auroc": auroc - (0.1 if f < 1 else 0) + (0.01 if s == 1 else -0.01), "ece_fixed": ece,
             "brier": brier if brier is not None else np.nan, "task": dataset, "probe": "logistic",
             "reference_table": "indomain"} for f in (0.1, 1.0) for s in (1, 2)]
    pd.DataFrame(rows).to_csv(d / "runs.csv", index=False)
    (d / "summary.json").write_text(json.dumps({"model": model, "task": dataset,
                                                "resolved_task": {"dataset": dataset, "kind": "indomain",
                                                                  "probe": {"kind": "logistic", "C": 1.0}}}))
    return d


def test_radar_and_auroc_matrix_from_runs(tmp_path):
    _results_dir(tmp_path, "M1", "bin", 0.9, 0.10, 0.12)
    _results_dir(tmp_path, "M1", "multi", 0.8, 0.30, None, n_classes=4)
    _results_dir(tmp_path, "M2", "bin", 0.7, 0.20, 0.25)
    _results_dir(tmp_path, "M2", "multi", 0.6, 0.40, None, n_classes=4)
    runs = pd.concat([pd.read_csv(f) for f in sorted(tmp_path.rglob("runs.csv"))], ignore_index=True)
    mat = geo.auroc_matrix(runs, 1.0)
    assert mat.loc["M1", "bin"] == pytest.approx(0.9) and mat.loc["M2", "multi"] == pytest.approx(0.6)
    radar = geo.radar_data(runs, 1.0)
    assert radar.loc["M1", "auroc"] == pytest.approx(0.85)
    assert radar.loc["M1", "one_minus_ece"] == pytest.approx(0.8)
    assert radar.loc["M2", "one_minus_brier"] == pytest.approx(0.75)  # binary dataset only
    assert radar["ood_stability"].isna().all()                      # no transfer runs
    assert geo.radar_data(runs, 0.1).loc["M2", "auroc"] == pytest.approx(0.55)


def test_radar_ood_stability_is_protocol_6_1():
    from prism_plugin.metrics import ood_stability_from_maps

    ind = pd.DataFrame([{"model": "M", "dataset": d, "fraction": 1.0, "seed": 1, "auroc": a, "ece_fixed": 0.1,
                         "brier": 0.1, "reference_table": "indomain"} for d, a in (("S", 0.9), ("T", 0.8))])
    tr = pd.DataFrame([{"model": "M", "src": s, "tgt": t, "pair": f"{s}->{t}", "fraction": 1.0, "seed": 1,
                        "auroc": a, "reference_table": "transfer"} for s, t, a in (("S", "T", 0.72), ("T", "S", 0.88))])
    radar = geo.radar_data(pd.concat([ind, tr], ignore_index=True), 1.0)
    expected = ood_stability_from_maps({"S": 0.9, "T": 0.8}, {("S", "T"): 0.72, ("T", "S"): 0.88})
    assert expected == pytest.approx((0.8 + 1.0) / 2)
    assert radar.loc["M", "ood_stability"] == pytest.approx(expected)


def test_report_section_one_model_says_why(tmp_path):
    _results_dir(tmp_path, "Solo", "bin", 0.9, 0.1, 0.1)
    view = read_view(tmp_path / "bin" / "Solo", get_host())
    sec = geometry_section(view)
    assert sec.not_shown and "need at least two" in sec.not_shown[0] and "Solo" in sec.not_shown[0]
    assert not sec.figures
    assert sensitivity_section(view) is None  # no sweep and no MLP runs: nothing to compare


def test_report_section_several_models_draws_dendrogram_and_radar(tmp_path):
    profiles = {"A": (0.95, 0.90, 0.85), "B": (0.94, 0.91, 0.80), "X": (0.70, 0.80, 0.90), "Y": (0.72, 0.79, 0.93)}
    for m, aurocs in profiles.items():
        for ds, a in zip(("d1", "d2", "d3"), aurocs):
            _results_dir(tmp_path, m, ds, a, 0.1 + 0.05 * (m in "XY"), 0.15)
    sec = geometry_section(read_view(tmp_path, get_host()))
    assert {"auroc_dendrogram.png", "reliability_radar.png"} <= set(sec.figures)
    for data in sec.figures.values():
        with Image.open(__import__("io").BytesIO(data)) as im:
            assert im.format == "PNG" and im.size[0] > 100
    order = sec.body.split("Dendrogram order: ")[1].split(".")[0].split(" → ")
    assert sorted(order) == ["A", "B", "X", "Y"]
    assert {order[0], order[1]} in ({"A", "B"}, {"X", "Y"})
    table = sec.tables["geometry_auroc_clustering"]
    assert list(table["model"]) == order
    assert any("alignment" in n for n in sec.not_shown)  # these hand-made runs have no cached embeddings


def test_radar_on_the_published_tables_matches_their_cri_components(reference_dir):
    """AUROC and OOD-stability axes against the shipped cri_variants_100.csv (an independent computation)."""
    ind = pd.read_csv(reference_dir / "indomain_all_v2.csv").assign(reference_table="indomain")
    tr = pd.read_csv(reference_dir / "ood_all_v2.csv").assign(reference_table="transfer")
    radar = geo.radar_data(pd.concat([ind, tr], ignore_index=True), 1.0)
    published = pd.read_csv(reference_dir / "cri_variants_100.csv", index_col="model")
    assert list(radar.index) == list(published.index)
    assert np.allclose(radar["auroc"], published["auroc"], atol=1e-12)
    assert np.allclose(radar["ood_stability"], published["ood_stability"], atol=1e-12)
    matrix = geo.auroc_matrix(ind, 1.0)
    assert matrix.shape == (8, 6) and list(matrix.columns)[:2] == ["PCam", "BRACS"]
    assert sorted(geo.cluster_order(matrix)["order"]) == sorted(matrix.index)
