"""prism_plugin.compat: the PRISM package's API as a drop-in (README signatures, columns, semantics)."""

from __future__ import annotations

import math
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import expit
from sklearn.metrics import brier_score_loss, roc_auc_score

from prism_plugin import compat
from prism_plugin.compat import PRISMEvaluator
from tests.conftest import REFERENCE, run_main

# The code of the README's Quick Start (the paper's Appendix E), with only the import line changed.
SNIPPET = '''
import numpy as np
from prism_plugin.compat import PRISMEvaluator

ev = PRISMEvaluator(results_dir="results_v2")   # or PRISMEvaluator() for the bundled copy
res = ev.evaluate(X_train, y_train, X_test, y_test,
                  dataset="pcam", model_name="MyFM",
                  val_features=X_val, val_labels=y_val)

cmp = ev.compare(res, dataset="pcam", fraction=0.1)
print(cmp)   # ranked by Composite Reliability Index (CRI)
'''

README_EVALUATE = ["model", "dataset", "fraction", "seed", "n_train", "n_classes", "auroc", "f1_macro", "brier",
                   "ece_fixed", "ece_adaptive", "temperature", "ece_scaled_fixed", "ece_scaled_adaptive",
                   "degeneracy_share", "forced_classes", "degenerate"]
README_COMPARE = ["model", "fraction", "auroc", "ece", "ece_scaled", "ood_stability", "ood_stability_imputed", "cri",
                  "is_reference"]


def _embeddings(seed=0, sizes=(("train", 120), ("val", 60), ("test", 80)), dim=8, k=2):
    """Synthetic L2-normalised embeddings, as in the reference runs."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, n in sizes:
        y = np.arange(n) % k
        X = rng.normal(size=(n, dim)) + 0.5 * np.eye(k, dim)[y]
        out[f"X_{name}"] = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
        out[f"y_{name}"] = y
    return out


def _tiny_results_v2(root: Path) -> Path:
    """A results_v2-like folder: two reference models on PCam and MHIST, the two binary transfer pairs."""
    folder = root / "results_v2"
    folder.mkdir(parents=True)
    rows = []
    for m, base in (("RefA", 0.90), ("RefB", 0.80)):
        for d, shift in (("PCam", 0.0), ("MHIST", -0.05)):
            for f in (0.1, 1.0):
                for s, jitter in ((42, 0.01), (123, -0.01)):
                    rows.append(dict(model=m, dataset=d, fraction=f, seed=s, auroc=base + shift + f / 20 + jitter,
                                     f1_macro=0.7, ece_fixed=0.10 + jitter, ece_adaptive=0.11,
                                     temperature=1.5, ece_scaled_fixed=0.05 + jitter / 2 + (0.02 if m == "RefB" else 0),
                                     ece_scaled_adaptive=0.06, degeneracy_share=0.5, degenerate=False))
    pd.DataFrame(rows).to_csv(folder / "indomain_all_v2.csv", index=False)
    ood = []
    for m, a in (("RefA", (0.70, 0.66)), ("RefB", (0.75, 0.60))):
        for (src, tgt), value in zip((("PCam", "MHIST"), ("MHIST", "PCam")), a):
            for s in (42, 123):
                ood.append(dict(model=m, src=src, tgt=tgt, pair=f"{src}->{tgt}", fraction=1.0, seed=s, auroc=value,
                                ece_fixed=0.2, temperature_src=2.0, ece_scaled_fixed=0.1, degeneracy_share=0.5,
                                degenerate=False))
    pd.DataFrame(ood).to_csv(folder / "ood_all_v2.csv", index=False)
    return folder


def _run_snippet(cwd: Path, data: dict, monkeypatch) -> dict:
    monkeypatch.chdir(cwd)
    ns = dict(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(SNIPPET, "appendix_e_snippet", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def data():
    return _embeddings()


# ----------------------------------------------------------------- the Appendix E snippet, verbatim
def test_appendix_e_snippet_runs_on_a_tiny_results_v2(tmp_path, monkeypatch, data, capsys):
    folder = _tiny_results_v2(tmp_path)
    ns = _run_snippet(tmp_path, data, monkeypatch)
    res, cmp = ns["res"], ns["cmp"]
    assert "MyFM" in capsys.readouterr().out
    assert list(res.columns) == README_EVALUATE and len(res) == 18  # 6 fractions x 3 seeds
    assert sorted(res["seed"].unique()) == [42, 123, 456]
    assert list(cmp.columns) == README_COMPARE and len(cmp) == 3
    assert cmp["cri"].is_monotonic_decreasing
    # independent CRI of the reference rows from the tiny tables (PROTOCOL §6.1-6.2)
    ind = pd.read_csv(folder / "indomain_all_v2.csv")
    ood = pd.read_csv(folder / "ood_all_v2.csv")
    stab = {}
    for m in ("RefA", "RefB"):
        id_full = ind[(ind.model == m) & (ind.fraction == 1.0)].groupby("dataset")["auroc"].mean()
        pairs = ood[ood.model == m].groupby(["src", "tgt"])["auroc"].mean()
        stab[m] = np.mean([min(v / id_full[src], 1.0) for (src, _), v in pairs.items()])
        cell = ind[(ind.model == m) & (ind.dataset == "PCam") & (ind.fraction == 0.1)]
        row = cmp.set_index("model").loc[m]
        a, e = cell["auroc"].mean(), cell["ece_scaled_fixed"].mean()
        assert row["auroc"] == pytest.approx(a, abs=1e-15) and row["ece"] == pytest.approx(cell["ece_fixed"].mean())
        assert row["cri"] == pytest.approx(a * (1 - e) * stab[m], abs=1e-15)
        assert row["is_reference"] and not row["ood_stability_imputed"]
    mine = cmp.set_index("model").loc["MyFM"]
    at = res[np.isclose(res.fraction, 0.1)]
    assert not mine["is_reference"] and mine["ood_stability_imputed"]  # unseen model: mean of the references
    assert mine["ood_stability"] == pytest.approx(np.mean(list(stab.values())), abs=1e-15)
    assert mine["auroc"] == pytest.approx(at["auroc"].mean()) and mine["ece_scaled"] == pytest.approx(
        at["ece_scaled_fixed"].mean())
    assert mine["cri"] == pytest.approx(mine["auroc"] * (1 - mine["ece_scaled"]) * mine["ood_stability"])


def test_appendix_e_snippet_runs_on_the_published_results_v2(tmp_path, monkeypatch, data):
    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"shared reference tables not found at {REFERENCE} (set PRISM_SHARED)")
    os.symlink(REFERENCE, tmp_path / "results_v2")
    cmp = _run_snippet(tmp_path, data, monkeypatch)["cmp"]
    assert len(cmp) == 9 and cmp["is_reference"].sum() == 8 and cmp["cri"].is_monotonic_decreasing
    ind = pd.read_csv(REFERENCE / "indomain_all_v2.csv")
    variants = pd.read_csv(REFERENCE / "cri_variants_100.csv", index_col=0)
    ref = cmp[cmp.is_reference].set_index("model")
    cells = ind[(ind.dataset == "PCam") & np.isclose(ind.fraction, 0.1)].groupby("model")[["auroc", "ece_scaled_fixed"]]
    means = cells.mean()
    assert np.allclose(ref["auroc"], means.loc[ref.index, "auroc"], rtol=0, atol=1e-15)
    assert np.allclose(ref["ood_stability"], variants.loc[ref.index, "ood_stability"], rtol=0, atol=1e-15)
    mine = cmp[~cmp.is_reference].iloc[0]
    assert mine["ood_stability"] == pytest.approx(variants["ood_stability"].mean(), abs=1e-15)


def test_reference_cri_and_pooled_compare_reproduce_cri_variants(reference_dir, data):
    ev = PRISMEvaluator(results_dir=reference_dir)
    for pct, f in (("100", 1.0), ("1", 0.01)):
        published = pd.read_csv(reference_dir / f"cri_variants_{pct}.csv", index_col=0)
        got = ev.reference_cri(fraction=f)
        assert list(got.index) == list(published.index) and list(got.columns) == list(published.columns)
        assert np.allclose(got.to_numpy(), published.to_numpy(), rtol=0, atol=1e-15)
    # compare(dataset='all') pools the six datasets exactly as cri_variants does
    res = pd.DataFrame({"model": "MyFM", "dataset": ["pcam", "mhist"], "fraction": 1.0, "seed": 42, "auroc": [0.9, 0.8],
                        "ece_fixed": 0.1, "ece_scaled_fixed": [0.04, 0.06]})
    with pytest.warns(UserWarning, match="cover MHIST, PCam of the six"):
        table = ev.compare(res, dataset="all", fraction=1.0, custom_ood_stability=0.5, aggregation="worst_axis")
    ref = table[table.is_reference].set_index("model")
    assert np.allclose(ref["cri"], published_100 := pd.read_csv(reference_dir / "cri_variants_100.csv",
                                                                index_col=0).loc[ref.index, "cri_worst_axis"],
                       rtol=0, atol=1e-15), published_100
    mine = table[~table.is_reference].iloc[0]
    assert mine["ood_stability"] == 0.5 and not mine["ood_stability_imputed"]
    assert mine["cri"] == pytest.approx(min(0.85, 0.95, 0.5))


# ----------------------------------------------------------------- results_dir
def test_results_dir_none_needs_a_pulled_copy(tmp_path, monkeypatch, data):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    res = pd.DataFrame({"model": "m", "dataset": "pcam", "fraction": [0.1], "seed": 1, "auroc": 0.9, "ece_fixed": 0.1,
                        "ece_scaled_fixed": 0.05})
    ev = PRISMEvaluator()
    with pytest.raises(compat.CompatError, match=r"does not bundle.*prism-run reference pull.*results_dir=PATH") as e:
        ev.compare(res, dataset="pcam", fraction=0.1)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)
    # a pulled copy (in the cache folder `prism-run reference pull` uses) is found
    if (REFERENCE / "indomain_all_v2.csv").exists():
        from prism_plugin.commands.reference import pulled_dir

        pulled_dir().mkdir(parents=True)
        for name in ("indomain_all_v2.csv", "ood_all_v2.csv"):
            shutil.copy(REFERENCE / name, pulled_dir() / name)
        assert len(PRISMEvaluator().compare(res, dataset="PCam", fraction=0.1)) == 9
        with pytest.warns(UserWarning, match="does not exist; using the pulled reference"):
            PRISMEvaluator(results_dir=tmp_path / "nowhere" / "results_v2").reference_cri(1.0)


def test_results_dir_layouts(tmp_path):
    _tiny_results_v2(tmp_path / "repo")
    assert len(PRISMEvaluator(results_dir=tmp_path / "repo").reference_cri(1.0)) == 2  # repository root
    legacy = tmp_path / "results"
    legacy.mkdir()
    (legacy / "clip_pcam_results.csv").write_text("fraction,seed,auroc\n0.1,42,0.9\n")
    with pytest.raises(compat.CompatError, match="legacy v1 layout"):
        PRISMEvaluator(results_dir=legacy).reference_cri(1.0)
    with pytest.raises(compat.CompatError, match="no such directory"):
        PRISMEvaluator(results_dir=tmp_path / "missing").reference_cri(1.0)
    with pytest.raises(compat.CompatError, match="fraction 0.5: no reference runs"):
        PRISMEvaluator(results_dir=tmp_path / "repo").reference_cri(0.5)


# ----------------------------------------------------------------- evaluate semantics
def test_evaluate_conventions(data):
    ev = PRISMEvaluator()  # evaluate() needs no reference results
    d = data
    common = dict(label_fractions=[1.0], seeds=[42])
    nat = ev.evaluate(d["X_train"], d["y_train"], d["X_test"], d["y_test"], "pcam",
                      val_features=d["X_val"], val_labels=d["y_val"], extra_columns=True, **common)
    assert nat["model"].iloc[0] == "CustomModel" and list(nat.columns[:17]) == README_EVALUATE and "nll" in nat
    import prism_plugin

    ours = prism_plugin.evaluate((d["X_train"], d["y_train"]), (d["X_val"], d["y_val"]), (d["X_test"], d["y_test"]),
                                 fractions=[1.0], seeds=[42], probability_dtype="float32", binary_logits="natural")
    # binary temperature on the probe's own scale, fitted there in [0.1, 10] as the package (v0.3) does: the
    # grid's natural logits [0, d]; the results_v2 scale ("doubled") is the grid's [-d, d]
    for c in ("temperature", "ece_scaled_fixed", "ece_scaled_adaptive", "brier", "ece_fixed"):
        assert nat[c].iloc[0] == ours[c].iloc[0]
    doubled = ev.evaluate(d["X_train"], d["y_train"], d["X_test"], d["y_test"], "pcam", val_features=d["X_val"],
                          val_labels=d["y_val"], binary_temperature="doubled", **common)
    sym = prism_plugin.evaluate((d["X_train"], d["y_train"]), (d["X_val"], d["y_val"]), (d["X_test"], d["y_test"]),
                                fractions=[1.0], seeds=[42], probability_dtype="float32")
    assert doubled["temperature"].iloc[0] == sym["temperature"].iloc[0]
    # two search boxes: on this data the natural-scale optimum lies beyond 5, where the doubled fit's box ends
    assert nat["temperature"].iloc[0] > 5.0 >= doubled["temperature"].iloc[0] / 2
    with pytest.warns(UserWarning, match="no val_features given.*NaN"):
        noval = ev.evaluate(d["X_train"], d["y_train"], d["X_test"], d["y_test"], "pcam", **common)
    assert noval[["temperature", "ece_scaled_fixed", "ece_scaled_adaptive"]].isna().all().all()
    with pytest.raises(compat.CompatError, match="pass both"):
        ev.evaluate(d["X_train"], d["y_train"], d["X_test"], d["y_test"], "pcam", val_features=d["X_val"])


# ----------------------------------------------------------------- standalone functions
def test_standalone_functions_against_independent_computations():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 300)
    d = rng.normal(size=300) + y
    p = expit(d).astype(np.float32)
    assert compat.compute_auroc(y, p) == roc_auc_score(y, p)
    assert compat.compute_brier(y, p) == brier_score_loss(y, p)
    # ECE: float32 arithmetic on float32 input, as the reference; equals prism-plugin's ECE on float64
    from prism_plugin import metrics as M

    edges = np.linspace(0, 1, 16)
    naive = sum((m := (p >= lo) & (p < hi)).sum() * abs((y[m] == 1).mean() - p[m].mean())
                for lo, hi in zip(edges[:-1], edges[1:]) if ((p >= lo) & (p < hi)).any()) / len(p)
    assert compat.compute_ece(p, y) == float(naive)
    p64 = p.astype(np.float64)
    assert compat.compute_ece(p64, y, n_bins=10, binning="adaptive") == M.ece(y, np.column_stack([1 - p64, p64]), 10,
                                                                              "adaptive")
    P = rng.dirichlet(np.ones(4), size=300)
    yk = rng.integers(0, 4, 300)
    assert compat.compute_auroc(yk, P) == roc_auc_score(yk, P, multi_class="ovr", average="macro")
    assert math.isnan(compat.compute_brier(yk, P))
    # temperature: binary decision values -> fitted on the probe's own scale (T = 1 = predict_proba)
    T = compat.temperature_scale(d, y)
    L = np.column_stack([-d / 2, d / 2])  # the package's v0.3 logits: softmax = sigmoid(d / T)

    def nll(t):
        z = L / t
        z = z - z.max(axis=1, keepdims=True)
        q = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        return -np.log(q[np.arange(len(y)), y] + 1e-12).mean()

    assert T == minimize_scalar(nll, bounds=(0.1, 10.0), method="bounded").x
    assert np.allclose(compat.apply_temperature(d, T)[:, 1], expit(d / T), rtol=0, atol=1e-12)
    assert np.allclose(compat.apply_temperature(d, 1.0)[:, 1], expit(d), rtol=0, atol=1e-12)
    Z = rng.normal(size=(50, 3))
    assert np.allclose(compat.apply_temperature(Z, 2.0), np.exp(Z / 2) / np.exp(Z / 2).sum(1, keepdims=True))
    # README example and the CRI rules
    stab = compat.compute_ood_stability(ood_aurocs={("pcam", "mhist"): 0.62}, id_aurocs={"pcam": 0.98})
    assert stab == pytest.approx(0.62 / 0.98, abs=1e-15)
    assert compat.compute_ood_stability({("a", "b"): 0.9, ("a", "c"): 0.99, ("x", "y"): 0.5}, {"a": 0.95}) == \
        pytest.approx((0.9 / 0.95 + 1.0) / 2)
    assert math.isnan(compat.compute_ood_stability({("x", "y"): 0.5}, {"a": 0.9}))
    a, e, s = 0.9, 0.05, stab
    assert compat.compute_cri(a, e, s) == pytest.approx(a * (1 - e) * s)
    assert compat.compute_cri(a, e, s, aggregation="arithmetic") == pytest.approx((a + 1 - e + s) / 3)
    assert compat.compute_cri(a, e, s, aggregation="geometric") == pytest.approx((a * (1 - e) * s) ** (1 / 3))
    assert compat.compute_cri(a, 1.0, s, aggregation="worst_axis") == 0.0
    with pytest.raises(compat.CompatError, match=r"compute_cri ece_scaled: 1.7 is outside \[0, 1\]"):
        compat.compute_cri(a, 1.7, s, aggregation="worst_axis")  # an ECE is in [0, 1]: refused, not clipped
    with pytest.raises(ValueError, match="unknown aggregation"):
        compat.compute_cri(a, e, s, aggregation="harmonic")


# ----------------------------------------------------------------- the command line
def test_prism_run_evaluate_and_compat_cli(tmp_path, monkeypatch, data):
    from prism_plugin.compat.cli import main as compat_main

    for k, v in data.items():
        np.save(tmp_path / f"{k}.npy", v)
    folder = _tiny_results_v2(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = ["--train-features", "X_train.npy", "--train-labels", "y_train.npy", "--test-features", "X_test.npy",
            "--test-labels", "y_test.npy", "--val-features", "X_val.npy", "--val-labels", "y_val.npy",
            "--dataset", "pcam", "--model-name", "MyModel", "--label-fractions", "0.1,1.0", "--seeds", "42"]
    proc = run_main("evaluate", *args)
    assert proc.returncode == 0, proc.stderr
    assert "=== MyModel on pcam" in proc.stdout and "Saved: mymodel_pcam_results.csv" in proc.stdout
    written = pd.read_csv(tmp_path / "mymodel_pcam_results.csv")
    assert list(written.columns) == README_EVALUATE and list(written["fraction"]) == [0.1, 1.0]
    code = compat_main(["compare", "--results", "mymodel_pcam_results.csv", "--dataset", "pcam", "--fraction", "0.1",
                        "--results-dir", str(folder), "--output", "cmp.csv"])
    assert code == 0 and list(pd.read_csv("cmp.csv").columns) == README_COMPARE
    assert compat_main(["reference", "--results-dir", str(folder), "--fraction", "1.0"]) == 0
    # bad input: one line, rc 2
    bad = run_main("evaluate", *[a if a != "X_test.npy" else "nope.npy" for a in args])
    assert bad.returncode == 2 and "--test-features nope.npy: no such file" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert compat_main(["compare", "--results", "mymodel_pcam_results.csv", "--dataset", "camelyon17",
                        "--results-dir", str(folder)]) == 2
