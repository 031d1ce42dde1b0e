"""The SYNTHETIC offline hematology demo: deterministic generator, learnable classes, distinct domains,
generated once into the job's cache, its tasks and group, and one small end-to-end run."""

from __future__ import annotations

import numpy as np
import pytest

from prism_plugin.data import hema_demo as hd
from prism_plugin.data.datacache import using_cache_dir
from prism_plugin.errors import PrismError


def _draw(domain, n, size=48):
    imgs, ys = [], []
    for cls, _i, img in hd.draw_domain(domain, {c: n for c in hd.CLASSES}, size=size):
        imgs.append(img)
        ys.append(hd.CLASSES.index(cls))
    return np.stack(imgs), np.array(ys)


def _stats(imgs):
    """A cheap hand-made descriptor: mean colour, dark-pixel share (nucleus / basophil granules) and
    orange-pixel share (eosinophil granules) of the image centre."""
    h = imgs.shape[1]
    c = imgs[:, h // 4: 3 * h // 4, h // 4: 3 * h // 4].astype(float)
    r, g, b = c[..., 0], c[..., 1], c[..., 2]
    dark = (c.mean(-1) < 140).mean((1, 2))
    orange = ((r - b) > 40).mean((1, 2))
    return np.column_stack([r.mean((1, 2)), g.mean((1, 2)), b.mean((1, 2)), 100 * dark, 100 * orange])


def test_generator_is_deterministic_and_labelled_synthetic():
    a, ya = _draw("a", 2)
    b, yb = _draw("a", 2)
    assert a.shape == (10, 48, 48, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and np.array_equal(ya, yb)
    more, _ = _draw("a", 3)  # asking for more keeps the first images
    assert np.array_equal(more[[0, 1]], a[[0, 1]])
    other = np.stack([img for *_r, img in hd.draw_domain("a", {c: 2 for c in hd.CLASSES}, size=48, seed=1)])
    assert not np.array_equal(other, a)
    assert "SYNTHETIC" in hd.__doc__ and "fictitious" in hd.DOMAIN_STYLE["b"]["label"]


def test_classes_are_separable_by_a_cheap_statistic_and_domains_differ():
    imgs, y = _draw("a", 24)
    f = _stats(imgs)
    tr = np.arange(len(y)) % 3 != 0
    mu, sd = f[tr].mean(0), f[tr].std(0) + 1e-9
    z = (f - mu) / sd
    cent = np.stack([z[tr & (y == k)].mean(0) for k in range(5)])
    pred = np.argmin(((z[~tr, None] - cent[None]) ** 2).sum(-1), 1)
    acc = (pred == y[~tr]).mean()
    assert acc > 0.5, acc  # chance is 0.2; the network probes do better (see the report of issue 15)
    d_imgs, _ = _draw("d", 4)
    a_imgs = imgs[np.arange(len(y)) % 24 < 4]  # the first 4 of each class, as d_imgs
    # domain d: warm (yellow) illumination, faded stain -> less blue in the background
    assert a_imgs[..., 2].mean() - d_imgs[..., 2].mean() > 8


def test_priors_and_option_checks():
    assert hd.class_counts(10) == {c: 10 for c in hd.CLASSES}
    clinical = hd.class_counts(20, "clinical")
    assert clinical["neutrophil"] == 60 and clinical["basophil"] == hd.MIN_CLINICAL
    assert max(clinical, key=clinical.get) == "neutrophil"
    assert hd.source_problem({"domain": "e"})[0] == "domain"
    assert hd.source_problem({"domain": "a"}) is None
    assert hd.source_problem({"domain": "a", "n_per_class": 1})[0] == "n_per_class"
    assert "did you mean 'clinical'" in hd.source_problem({"domain": "a", "prior": "clinic"})[1]
    assert hd.source_problem({"domain": "a", "prior": {"neutrophill": 1}})[0] == "prior"
    assert hd.source_problem({"domain": "b", "prior": {"neutrophil": 3, "basophil": 1}}) is None


def test_images_are_generated_once_into_the_jobs_cache(tmp_path):
    with using_cache_dir(tmp_path):
        root = hd.ensure_hema_demo("c", n_per_class=2, size=24)
        files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.png"))
        assert root.parent == tmp_path / "datasets" and root.name.startswith("demo-hema-c-")
        assert len(files) == 10 and files[0] == "basophil/basophil_0000.png"
        assert "SYNTHETIC" in (root / "COMPLETE").read_text()
        stamp = (root / "COMPLETE").stat().st_mtime_ns
        assert hd.ensure_hema_demo("c", n_per_class=2, size=24) == root
        assert (root / "COMPLETE").stat().st_mtime_ns == stamp
        assert hd.ensure_hema_demo("c", n_per_class=2, size=24, prior="clinical") != root


def test_tasks_and_group_of_the_demo(tmp_path):
    from prism_plugin.tasks.builtin import builtin_task_dir
    from prism_plugin.tasks.index import TaskIndex

    index = TaskIndex([builtin_task_dir()])
    names = [t.name for t in index.expand("hema_demo_matrix")]
    assert len(names) == 4 * 4 + 1 and "hema_demo_a_to_a_stain" in names
    for name in ("hema_demo_a", "hema_demo_d_to_b", "hema_demo_a_to_a_stain"):
        task = index.load_task(name)
        assert "SYNTHETIC" in task.description
        assert task.class_names == hd.CLASSES
    a = index.load_task("hema_demo_a")
    assert a.source["type"] == "hema_demo" and a.split["procedure"] == "stratified"  # the WBC5 protocol
    assert a.extras.get("perturb") is None
    stain = index.load_task("hema_demo_a_stain")
    assert [t["kind"] for t in stain.extras["perturb"]["transforms"]] == ["hed_jitter", "blur"]
    transfer = index.load_task("hema_demo_b_to_c")
    assert transfer.pair == "HemaDemo-B->HemaDemo-C" and transfer.target_config.name == "hema_demo_c"
    # the audit's protocol: both probes over five split seeds, a covariate shift, the class-prior stress test
    # (lighter in the demo than on the real hematology transfers)
    real = index.load_task("hema_acevedo_to_mll23")
    for t in (transfer, real):
        assert [p["kind"] for p in t.probes] == ["logistic_std", "knn1"] and t.split_seeds == (0, 1, 2, 3, 4)
        assert t.extras["shift"] == "covariate" and t.n_runs == 10
    assert transfer.priors["batch_sizes"] == [8, 32] and real.priors["batch_sizes"] == [8, 32, 400]
    assert transfer.priors["names"] == real.priors["names"] == ["balanced", "mild", "clinical", "neutrophil_heavy"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: bad\ndataset: X\nclass_names: [neutrophil, lymphocyte, monocyte, eosinophil, basophil]\n"
                   "source: {type: hema_demo, domain: e}\nsplits: {train: train, test: test}\n")
    with pytest.raises(PrismError, match=r"bad\.yaml:4: source\.domain: must be one of a, b, c, d"):
        index.load(str(bad))


def test_a_small_demo_run_end_to_end(tmp_path, capsys):
    import pandas as pd

    from prism_plugin.cli import main

    out, cache = tmp_path / "out", tmp_path / "cache"
    rc = main(["--task", "hema_demo_a", "--model", "demo_vit", "--set", "source.n_per_class=5",
               "--set", "source.size=24", "--set", "split_seeds=[0]", "--probe", "logistic_std", "--output", str(out), "--cache-dir", str(cache), "--no-report",
               "--device", "cpu", "--num-workers", "0", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    runs = pd.read_csv(next(out.rglob("runs.csv")))
    assert len(runs) == 1 and (runs["dataset"] == "HemaDemo-A").all() and runs["n_classes"].eq(5).all()
    assert runs["f1_macro"].between(0, 1).all()
    assert [p.name[:12] for p in (cache / "datasets").iterdir()] == ["demo-hema-a-"]
